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
from flashcourse.figures import interactive  # noqa: E402
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


# ---------------------------------------------------------------- lessons 4 and 5


def test_matmul_tiling_marks_the_program_its_stripes_and_this_step():
    M, N, K, bm, bn, bk = 300, 512, 200, 128, 128, 64  # ragged M and K: edge tiles drawn smaller
    fig = figures.matmul_tiling(M, N, K, bm, bn, bk, tile=(2, 1), step=3)
    patches = {p.get_gid(): p for p in fig.axes[0].patches if p.get_gid()}
    rows, cols, depth = 3, 4, 4
    assert len(patches) == rows * depth + depth * cols + rows * cols
    color = {kind: to_rgba(c) for kind, c in figures.tiled_matmul.TILE_COLORS.items()}
    kind_of = {gid: next(k for k, c in color.items() if c == p.get_facecolor())
               for gid, p in patches.items()}
    assert kind_of["A-2-3"] == kind_of["B-3-1"] == "loaded at this step"
    assert kind_of["C-2-1"] == "accumulator, on chip"
    assert [kind_of[f"A-2-{k}"] for k in range(3)] == ["the program's stripe"] * 3
    assert [kind_of[f"B-{k}-1"] for k in range(3)] == ["the program's stripe"] * 3
    stripes = [g for g, k in kind_of.items() if k != "in HBM"]
    assert len(stripes) == 2 * depth + 1, "only A's row stripe, B's column stripe and C_21"
    assert patches["A-2-3"].get_width() == K - 3 * bk and patches["A-2-3"].get_height() == 44
    read = figures.tiled_matmul.format_bytes(
        figures.tiled_matmul.matmul.tiled_read_bytes(M, N, K, bm, bn, 2))
    assert f"{rows * cols} programs read {read}" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="grid of C"):
        figures.matmul_tiling(M, N, K, bm, bn, bk, tile=(3, 0), step=0)


ROW = [1.0, 3.0, 2.0, 8.0, 5.0, 0.0, 9.0, float("-inf"), 4.0]
VALUES = [1.0, 0.0, 2.0, -1.0, 3.0, 0.0, 1.0, 5.0, 2.0]


def _softmax_output(scores, values):
    import numpy as np

    scores = np.asarray(scores)
    weights = np.exp(scores - scores[np.isfinite(scores)].max())
    return float(weights @ np.asarray(values) / weights.sum())


@pytest.mark.parametrize("block", [1, 2, 3, 4, 9, 20])
def test_running_states_end_at_the_softmax_of_the_whole_row(block):
    steps = figures.softmax_blocks.running_states(ROW, VALUES, block)
    assert len(steps) == -(-len(ROW) // block)
    assert steps[-1]["end"] == len(ROW) and steps[-1]["m"] == 9.0
    assert steps[-1]["out"] == pytest.approx(_softmax_output(ROW, VALUES), rel=1e-12)
    maxima = [s["m"] for s in steps]
    assert maxima == sorted(maxima), "the running max never falls"


def test_running_states_start_empty_on_a_masked_first_block():
    inf = float("-inf")
    steps = figures.softmax_blocks.running_states([inf, inf, 2.0, 1.0], [5.0, 5.0, 1.0, 3.0], 2)
    assert (steps[0]["m"], steps[0]["l"], steps[0]["o"], steps[0]["out"]) == (inf, 0, 0, 0)
    assert steps[1]["out"] == pytest.approx(_softmax_output([2.0, 1.0], [1.0, 3.0]))
    with pytest.raises(ValueError, match="one value per key"):
        figures.softmax_blocks.running_states([1.0, 2.0], [1.0], 1)
    with pytest.raises(ValueError, match="at least one key"):
        figures.softmax_blocks.running_states([1.0], [1.0], 0)


def test_online_softmax_blocks_draws_blocks_scores_and_running_max():
    fig = figures.online_softmax_blocks(ROW, VALUES, block=3)
    top, bottom = fig.axes
    gids = _gids(fig)
    assert {f"block-{b}" for b in range(3)} <= gids
    finite = [i for i, s in enumerate(ROW) if s != float("-inf")]
    assert {g for g in gids if g.startswith("score-")} == {f"score-{i}" for i in finite}
    maxima = [line.get_ydata()[0] for line in top.lines
              if line.get_color() == figures.softmax_blocks.MAX_COLOR]
    assert maxima == [3.0, 8.0, 9.0]
    outputs = bottom.lines[1].get_ydata()
    steps = figures.softmax_blocks.running_states(ROW, VALUES, 3)
    assert list(outputs) == [s["out"] for s in steps]
    assert bottom.lines[2].get_ydata()[0] == pytest.approx(steps[-1]["out"])


# ---------------------------------------------------------------- the book's interactive diagrams


def test_tile_traffic_table_holds_the_matmul_model():
    from flashcourse import hardware
    from flashcourse.models import matmul

    table = interactive.tile_traffic_table()
    assert table["ridge"] == hardware.ridge_point(hardware.H200_MEASURED_GEMM_BF16_TFLOPS,
                                                  hardware.H200_MEASURED_COPY_TBS)
    for shape in table["shapes"]:
        M, N, K = shape["M"], shape["N"], shape["K"]
        for bm in table["blocks"]:
            for bn in table["blocks"]:
                tile = shape["tiles"][f"{bm}x{bn}"]
                assert tile["read"] == matmul.tiled_read_bytes(M, N, K, bm, bn, 2)
                assert tile["intensity"] == pytest.approx(
                    matmul.matmul_flops(M, N, K) / (tile["read"] + M * N * 2))
        largest = shape["tiles"][f"{table['blocks'][-1]}x{table['blocks'][-1]}"]
        assert shape["naive_intensity"] < largest["intensity"] < shape["once_intensity"]


def test_tile_map_table_counts_what_the_kernels_count():
    table = interactive.tile_map_table()
    n = table["n"]
    for bm in table["blocks"]:
        for bn in table["blocks"]:
            causal = table["maps"][f"causal|{bm}x{bn}"]
            assert len(causal["rows"]) == attention.cdiv(n, bm)
            assert {len(row) for row in causal["rows"]} == {attention.cdiv(n, bn)}
            counts = causal["counts"]
            assert (counts["full"] + counts["partial"], counts["empty"]) == \
                attention.causal_tiles(n, bm, bn)
            kinds = figures.algorithm.tile_kinds(n, bm, bn)
            assert ["".join({"computed": "2", "masked": "1", "skipped": "0"}[k] for k in row)
                    for row in kinds] == causal["rows"]
            window = table["maps"][f"sliding window, 128 keys|{bm}x{bn}"]["counts"]
            assert window["empty"] > counts["empty"], "a window skips more than causal alone"


def test_ring_table_splits_each_ranks_total_by_step():
    table = interactive.ring_table()
    for world_size in table["world_sizes"]:
        for zigzag in (False, True):
            ring = table["rings"][f"{world_size}|{'zigzag' if zigzag else 'contiguous'}"]
            assert ring["holds"] == distributed.ring_schedule(world_size).tolist()
            assert [sum(steps) for steps in ring["work"]] == ring["total"] == \
                distributed.plan_work(table["n"], world_size, zigzag).tolist()
            for rank in range(world_size):
                for step in range(world_size):
                    plan = distributed.step_plan(rank, step, world_size, zigzag)
                    assert ring["kinds"][rank][step] == [kind for _, _, kind in plan]
    contiguous, zigzag = table["rings"]["4|contiguous"], table["rings"]["4|zigzag"]
    assert max(zigzag["total"]) < max(contiguous["total"])


def test_every_diagram_has_its_cell_and_every_include_is_expanded():
    names = interactive.names()
    assert {"tile-traffic", "online-softmax", "tile-map", "ring-schedule"} <= set(names)
    for name in names:
        cell = interactive.ojs_cell(name)
        assert cell.startswith("```{ojs}\n//| echo: false\n") and cell.endswith("\n```")
        assert "/* include:" not in cell and "Inputs." not in cell and "require(" not in cell
    assert "function onlineSoftmax" in interactive.ojs_cell("online-softmax")
    with pytest.raises(KeyError):
        interactive.ojs_cell("no-such-diagram")


def test_paged_split_decode_colours_each_slot_by_the_split_that_reads_it():
    from flashcourse.figures import decoding

    length, page_size, split_size = 45, 8, 16
    fig = figures.paged_split_decode(length, page_size, split_size, block_n=8, pool_pages=10)
    patches = {p.get_gid(): p for p in fig.axes[0].patches if p.get_gid()}
    table = decoding.page_table(length, page_size, 10)
    assert len(table) == 6 and len(set(table.tolist())) == 6  # 45 keys: 6 distinct pages
    colour = [to_rgba(c) for c in decoding.SPLIT_COLORS]
    for pos in (0, 15, 16, 44):
        assert patches[f"pos-{pos}"].get_facecolor() == colour[pos // split_size]
    assert patches["pos-45"].get_facecolor() == to_rgba(decoding.UNUSED)
    assert "3 programs" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="the pool has 4"):
        figures.paged_split_decode(45, 8, 16, pool_pages=4)
    plt.close(fig)
