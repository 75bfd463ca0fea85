"""The tiled matrix product (lesson 4): one program's tile of C, the stripes of A and B it
reads, and the pair of tiles it multiplies at one step of its K loop.

Every drawn tile is a patch whose gid names it ("A-1-2": row block 1, K block 2 of A), so tests
can find it without comparing images.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

from ..models import matmul
from ..models.traffic import format_bytes

TILE_COLORS = {"in HBM": "#deebf7", "the program's stripe": "#fdd0a2",
               "loaded at this step": "#e6550d", "accumulator, on chip": "#31a354"}


def matmul_tiling(M: int = 512, N: int = 512, K: int = 384, block_m: int = 128,
                  block_n: int = 128, block_k: int = 64, tile=(1, 2), step: int = 2,
                  itemsize: int = 2):
    """C = A @ B cut into tiles: program `tile` = (i, j) owns the (block_m, block_n) tile C_ij;
    at step `step` of its K loop it loads the tile (i, step) of A and the tile (step, j) of B
    and adds their product into its accumulator. The title counts the bytes all programs read
    when every tile load goes to HBM (`models.matmul.tiled_read_bytes`)."""
    rows, cols, depth = (matmul.cdiv(M, block_m), matmul.cdiv(N, block_n),
                         matmul.cdiv(K, block_k))
    i, j = tile
    if not (0 <= i < rows and 0 <= j < cols and 0 <= step < depth):
        raise ValueError(f"tile {tile} and step {step} must lie in the {rows} x {cols} grid of C "
                         f"and the {depth} steps of the K loop")
    fig, ax = plt.subplots(figsize=(8, 7))
    # A sits left of C, B above it; one unit is one element, so edge tiles are drawn smaller
    for r in range(rows):
        for k in range(depth):
            kind = ("loaded at this step" if (r, k) == (i, step)
                    else "the program's stripe" if r == i else "in HBM")
            _tile(ax, -K + k * block_k, r * block_m, min(block_k, K - k * block_k),
                  min(block_m, M - r * block_m), kind, f"A-{r}-{k}")
    for k in range(depth):
        for c in range(cols):
            kind = ("loaded at this step" if (k, c) == (step, j)
                    else "the program's stripe" if c == j else "in HBM")
            _tile(ax, c * block_n, -K + k * block_k, min(block_n, N - c * block_n),
                  min(block_k, K - k * block_k), kind, f"B-{k}-{c}")
    for r in range(rows):
        for c in range(cols):
            kind = "accumulator, on chip" if (r, c) == (i, j) else "in HBM"
            _tile(ax, c * block_n, r * block_m, min(block_n, N - c * block_n),
                  min(block_m, M - r * block_m), kind, f"C-{r}-{c}")
    gap = 0.04 * max(M, N, K)
    ax.text(-K / 2, M + gap, f"A ({M} x {K})", ha="center", va="top")
    ax.text(N + gap, -K / 2, f"B ({K} x {N})", ha="left", va="center")
    ax.text(N / 2, M + gap, f"C ({M} x {N})", ha="center", va="top")
    ax.text(-K / 2, -K / 2, f"program ({i}, {j}),\nK step {step} of {depth}:\n"
            f"C$_{{{i}{j}}}$ += A$_{{{i}{step}}}$ B$_{{{step}{j}}}$", ha="center",
            va="center", fontsize=10)
    ax.set_xlim(-K - gap, N + 3 * gap + 0.25 * N)
    ax.set_ylim(M + 2.5 * gap, -K - gap)
    ax.set_aspect("equal")
    ax.axis("off")
    read = matmul.tiled_read_bytes(M, N, K, block_m, block_n, itemsize)
    ax.set_title(f"Tiles of {block_m} x {block_n} (BLOCK_K = {block_k}): {rows * cols} programs "
                 f"read {format_bytes(read)} from HBM")
    ax.legend(handles=[Patch(facecolor=color, edgecolor="black", label=kind)
                       for kind, color in TILE_COLORS.items()],
              loc="upper center", bbox_to_anchor=(0.5, 0.02), ncol=2, fontsize=9,
              frameon=False)
    fig.tight_layout()
    return fig


def _tile(ax, x, y, width, height, kind, gid):
    ax.add_patch(Rectangle((x, y), width, height, facecolor=TILE_COLORS[kind],
                           edgecolor="black", lw=0.6, gid=gid))
