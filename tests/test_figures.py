"""The figures of the algorithm and of the ring build, draw the blocks they name, and count what
the package counts (no image comparison)."""

import re

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from flashcourse import distributed, figures  # noqa: E402
from flashcourse.kernels import attention  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _gids(fig):
    return {p.get_gid() for ax in fig.axes for p in ax.patches if p.get_gid()}


def _texts(fig):
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    for ax in fig.axes:
        texts.append(ax.get_title())
        legend = ax.get_legend()
        if legend is not None:
            texts += [t.get_text() for t in legend.get_texts()]
    return texts


def _legend(fig):
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_flash_tiling_draws_blocks_statistics_and_accumulator():
    fig = figures.flash_tiling(n_blocks=4, query_block=1, key_block=2)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    gids = _gids(fig)
    for name in "QKVO":
        assert {f"{name}_{b}" for b in range(4)} <= gids
    assert {"HBM", "SRAM", "sram-Q", "sram-K", "sram-V", "sram-S",
            "stat-m", "stat-l", "acc-O"} <= gids
    colors = {p.get_gid(): p.get_facecolor() for p in fig.axes[0].patches}
    assert colors["Q_1"] == colors["K_2"] == colors["V_2"] != colors["Q_0"]
    assert colors["K_0"] == colors["K_1"] != colors["K_3"]
    assert any("running statistics" in t for t in _legend(fig))
    with pytest.raises(ValueError):
        figures.flash_tiling(n_blocks=2, query_block=2)


@pytest.mark.parametrize("n, block_m, block_n", [(1024, 128, 64), (1000, 128, 64),
                                                 (4096, 64, 64), (300, 64, 32), (100, 128, 64)])
def test_causal_tile_map_counts_equal_the_package(n, block_m, block_n):
    fig = figures.causal_tile_map(n, block_m, block_n)
    rows, cols = attention.cdiv(n, block_m), attention.cdiv(n, block_n)
    tiles = [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("tile-")]
    assert len(tiles) == rows * cols
    legend = _legend(fig)
    computed, masked, skipped_drawn = (int(re.fullmatch(r".+: (\d+)", t).group(1))
                                       for t in legend)
    assert "no mask" in legend[0] and "mask" in legend[1] and "skipped" in legend[2]
    visited, skipped = attention.causal_tiles(n, block_m, block_n)
    assert (computed + masked, skipped_drawn) == (visited, skipped)
    by_color = {}
    for tile in tiles:
        by_color.setdefault(tile.get_facecolor(), 0)
        by_color[tile.get_facecolor()] += 1
    assert sorted(by_color.values()) == sorted(c for c in (computed, masked, skipped) if c)


def test_causal_tile_map_masks_only_the_diagonal():
    kinds = figures.algorithm.tile_kinds(512, 128, 64)
    assert kinds[0][:2] == ["masked", "masked"] and kinds[0][2] == "skipped"
    assert kinds[3][:6] == ["computed"] * 6 and kinds[3][6:] == ["masked", "masked"]


def test_backward_flow_names_every_tensor_and_kernel():
    fig = figures.backward_flow()
    assert isinstance(fig, Figure)
    gids = _gids(fig)
    for name in ("Q", "K", "V", "O", "dO", "L", "D", "P", "dP", "dS", "dQ", "dK", "dV"):
        assert f"node-{name}" in gids
    for edge in ("O-D", "dO-D", "P-dS", "dP-dS", "D-dS", "P-dV", "dS-dK", "dS-dQ"):
        assert f"edge-{edge}" in gids
    text = " ".join(_texts(fig))
    for formula in ("rowsum(dO * O)", "P * (dP - D)", "dS K * scale", "Q * scale"):
        assert formula in text
    for kernel in ("flash_delta_kernel", "flash_dkdv_kernel", "flash_dq_kernel"):
        assert kernel in _legend(fig)


@pytest.mark.parametrize("world_size, zigzag", [(4, False), (3, True), (2, True)])
def test_ring_schedule_map_colours_cells_by_the_causal_plan(world_size, zigzag):
    fig = figures.ring_schedule_map(world_size, causal=True, zigzag=zigzag)
    colors = {p.get_gid(): p.get_facecolor() for p in fig.axes[0].patches if p.get_gid()}
    pairs = 4 if zigzag else 1  # (query chunk, key chunk) pairs drawn in one cell
    assert len(colors) == world_size * world_size * pairs
    kind_colors = {kind: to_rgba(c) for kind, c in figures.ring.KIND_COLORS.items()}
    for rank in range(world_size):
        for step in range(world_size):
            plan = distributed.step_plan(rank, step, world_size, zigzag)
            for index, (_, _, kind) in enumerate(plan):
                assert colors[f"cell-{rank}-{step}-{index}"] == kind_colors[kind]
    assert f"K/V of {(1 - 2) % world_size}" in _texts(fig)
    assert _legend(fig) == list(kind_colors)


def test_ring_schedule_map_without_mask_computes_every_block():
    fig = figures.ring_schedule_map(3, causal=False)
    full = to_rgba(figures.ring.KIND_COLORS["full"])
    assert [p.get_facecolor() for p in fig.axes[0].patches] == [full] * 9
    assert fig.axes[0].get_legend() is None


def test_ring_work_balance_draws_the_package_counts():
    n, world_size = 256, 4
    fig = figures.ring_work_balance(n, world_size)
    heights = [round(bar.get_height()) for bar in fig.axes[0].patches]
    contiguous = [distributed.causal_work(distributed.contiguous_positions(n, world_size, r))
                  for r in range(world_size)]
    zigzag = [distributed.causal_work(distributed.zigzag_positions(n, world_size, r))
              for r in range(world_size)]
    assert heights == contiguous + zigzag
    assert sum(contiguous) == sum(zigzag) == n * (n + 1) // 2


def test_ring_scaling_draws_one_line_per_method_and_mask():
    rows = [{"method": m, "causal": c, "n": n, "tokens_per_s": 1.0, "peak_mib_per_gpu": 1.0}
            for m in ("one GPU", "ring") for c in (False, True) for n in (32768, 65536)]
    rows.append({"method": "ring", "causal": False, "n": 131072, "tokens_per_s": "error"})
    fig = figures.ring_scaling(rows)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.lines) == 4 and all(len(line.get_xdata()) == 2 for line in ax.lines)
    assert _legend(fig) == ["one GPU, full", "ring, full", "one GPU, causal", "ring, causal"]
