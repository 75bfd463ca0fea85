"""The figures of the algorithm build, draw the blocks they name, and count what the package
counts (no image comparison)."""

import re

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from flashcourse import figures  # noqa: E402
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
