"""Figures of the FlashAttention algorithm (lessons 1, 6 and 7): the tiling of one query block, the
causal tile map and the backward's data flow.

Every drawn block is a patch whose gid names it ("Q_1", "tile-2-3", "node-dS"), so tests can
find it without comparing images.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch, Rectangle

from ..models.matmul import cdiv

HBM_COLOR = "#deebf7"
SRAM_COLOR = "#fdd0a2"
DONE_COLOR = "#bdbdbd"
STATS_COLOR = "#a1d99b"


def _block(ax, x, y, w, h, color, gid, label=None, **kw):
    rect = Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=0.8, gid=gid, **kw)
    ax.add_patch(rect)
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=9)
    return rect


def _arrow(ax, start, end, color="black", **kw):
    arrow = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=color,
                            lw=1.0, shrinkA=2, shrinkB=2, **kw)
    ax.add_patch(arrow)
    return arrow


def flash_tiling(n_blocks: int = 4, query_block: int = 1, key_block: int = 2):
    """One query block of the FlashAttention forward: Q, K and V in HBM split into blocks, the
    query block Q_i loaded into SRAM once, the key and value blocks K_j, V_j streamed through
    it one at a time, and the running max m, running sum l and accumulator O_i kept on chip."""
    if not (0 <= query_block < n_blocks and 0 <= key_block < n_blocks):
        raise ValueError("query_block and key_block must be in range(n_blocks)")
    i, j = query_block, key_block
    fig, ax = plt.subplots(figsize=(10, 5))
    h, top = 1.0, n_blocks * 1.0
    # HBM: Q, K, V and O as stacks of row blocks.
    ax.add_patch(Rectangle((-0.4, -0.9), 7.3, top + 1.8, facecolor="none", edgecolor="#6baed6",
                           lw=1.5, ls="--", gid="HBM"))
    ax.text(-0.3, top + 0.6, "HBM", fontsize=11, weight="bold", color="#2171b5")
    for col, name in enumerate(("Q", "K", "V", "O")):
        x = col * 1.8
        ax.text(x + 0.5, -0.6, f"{name} (N x d)", ha="center", fontsize=9)
        for b in range(n_blocks):
            y = top - (b + 1) * h
            if name in ("K", "V"):
                color = DONE_COLOR if b < j else SRAM_COLOR if b == j else HBM_COLOR
            else:
                color = SRAM_COLOR if b == i else HBM_COLOR
            _block(ax, x, y, 1.0, h * 0.92, color, f"{name}_{b}", f"{name}$_{b}$")
    # SRAM: the blocks on chip and the running statistics of block i.
    sx = 8.0
    ax.add_patch(Rectangle((sx - 0.3, -0.9), 5.6, top + 1.8, facecolor="#fff5eb",
                           edgecolor="#e6550d", lw=1.5, gid="SRAM"))
    ax.text(sx - 0.2, top + 0.6, "SRAM (one program, query block i)", fontsize=11,
            weight="bold", color="#a63603")
    _block(ax, sx, top - 1.2, 1.2, 0.9, SRAM_COLOR, "sram-Q", f"Q$_{i}$\nloaded once")
    _block(ax, sx + 1.6, top - 1.2, 1.2, 0.9, SRAM_COLOR, "sram-K", f"K$_{j}$")
    _block(ax, sx + 3.2, top - 1.2, 1.2, 0.9, SRAM_COLOR, "sram-V", f"V$_{j}$")
    _block(ax, sx, top - 2.6, 2.8, 0.9, "#fee6ce", "sram-S",
           f"S$_{{{i}{j}}}$ = Q$_{i}$ K$_{j}^T$,  P = e$^{{S - m}}$")
    _block(ax, sx, top - 3.9, 0.6, 0.9, STATS_COLOR, "stat-m", "m")
    _block(ax, sx + 0.8, top - 3.9, 0.6, 0.9, STATS_COLOR, "stat-l", r"$\ell$")
    _block(ax, sx + 1.6, top - 3.9, 2.8, 0.9, STATS_COLOR, "acc-O", f"acc O$_{i}$ (BLOCK_M x d)")
    ax.text(sx, -0.65, "per key block j: m' = max(m, rowmax S);  a = e$^{m - m'}$\n"
            r"$\ell$ = a $\ell$ + rowsum P;  O = a O + P V$_j$;  after the last: O / $\ell$",
            fontsize=8.5, va="bottom")
    # Loads and the one store.
    row_i, row_j = top - (i + 0.5) * h, top - (j + 0.5) * h
    _arrow(ax, (1.0, row_i), (sx, top - 0.75), color="#e6550d", connectionstyle="arc3,rad=-0.15")
    _arrow(ax, (2.8, row_j), (sx + 1.6, top - 0.6), color="#e6550d",
           connectionstyle="arc3,rad=-0.2")
    _arrow(ax, (4.6, row_j), (sx + 3.2, top - 0.9), color="#e6550d",
           connectionstyle="arc3,rad=-0.25")
    _arrow(ax, (sx + 1.6, top - 3.45), (6.4, row_i), color="#2171b5",
           connectionstyle="arc3,rad=0.2")
    ax.legend(handles=[Patch(facecolor=SRAM_COLOR, edgecolor="black", label="on chip now"),
                       Patch(facecolor=DONE_COLOR, edgecolor="black", label="already visited"),
                       Patch(facecolor=HBM_COLOR, edgecolor="black", label="still in HBM"),
                       Patch(facecolor=STATS_COLOR, edgecolor="black",
                             label="running statistics (never in HBM until the end)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4, fontsize=8, frameon=False)
    ax.set_xlim(-0.6, sx + 5.5)
    ax.set_ylim(-1.1, top + 1.1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"Query block i = {i} visits key block j = {j} of {n_blocks}")
    fig.tight_layout()
    return fig


def tile_kinds(n: int, block_m: int, block_n: int) -> list[list[str]]:
    """"computed", "masked" or "skipped" for each (query block, key block) tile of a causal
    forward: query block i visits the key blocks covering columns 0 .. min((i+1) BLOCK_M, N) - 1
    (as `attention.causal_tiles` counts them); a visited tile is masked where one of its keys
    lies right of one of its queries (the diagonal)."""
    rows, cols = cdiv(n, block_m), cdiv(n, block_n)
    kinds = []
    for i in range(rows):
        visits = cdiv(min((i + 1) * block_m, n), block_n)
        row = []
        for j in range(cols):
            if j >= visits:
                row.append("skipped")
            elif min((j + 1) * block_n, n) - 1 > i * block_m:
                row.append("masked")
            else:
                row.append("computed")
        kinds.append(row)
    return kinds


TILE_COLORS = {"computed": "#3182bd", "masked": "#fd8d3c", "skipped": "#f0f0f0"}
TILE_LABELS = {"computed": "computed, no mask", "masked": "computed with the causal mask",
               "skipped": "skipped, never loaded"}


def causal_tile_map(n: int = 1024, block_m: int = 128, block_n: int = 64):
    """The (query block, key block) grid of a causal forward, each tile coloured by what the
    kernel does with it; the legend counts the tiles of each kind."""
    kinds = tile_kinds(n, block_m, block_n)
    counts = {kind: sum(row.count(kind) for row in kinds) for kind in TILE_COLORS}
    from ..kernels.attention import causal_tiles  # torch loads only when a figure needs it

    visited, skipped = causal_tiles(n, block_m, block_n)
    assert (counts["computed"] + counts["masked"], counts["skipped"]) == (visited, skipped)
    rows, cols = len(kinds), len(kinds[0])
    fig, ax = plt.subplots(figsize=(5.5, 5.5 * rows / cols + 1.2))
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=TILE_COLORS[kind], edgecolor="white",
                                   lw=1, gid=f"tile-{i}-{j}"))
    ax.plot([0, n / block_n], [0, n / block_m], color="black", lw=1, ls="--")
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect(block_m / block_n)
    ax.set_xlabel(f"key block j (BLOCK_N = {block_n})")
    ax.set_ylabel(f"query block i (BLOCK_M = {block_m})")
    ax.set_title(f"Causal tiles, N = {n}: {visited} visited, {skipped} skipped")
    ax.legend(handles=[Patch(facecolor=TILE_COLORS[k], edgecolor="gray",
                             label=f"{TILE_LABELS[k]}: {counts[k]}") for k in TILE_COLORS],
              loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


KERNEL_COLORS = {"input": "#f0f0f0", "flash_delta_kernel": "#c7e9c0",
                 "recomputed in both": "#fdd0a2", "flash_dkdv_kernel": "#9ecae1",
                 "flash_dq_kernel": "#fcbba1"}

# name: (x, y, text, who computes it)
BACKWARD_NODES = {
    "Q": (0, 5, "Q", "input"), "K": (0, 4, "K", "input"), "L": (0, 3, "L (logsumexp)", "input"),
    "V": (0, 2, "V", "input"), "dO": (0, 1, "dO", "input"), "O": (0, 0, "O", "input"),
    "P": (3, 4, "P = exp(scale Q K$^T$ - L)", "recomputed in both"),
    "dP": (3, 2, "dP = dO V$^T$", "recomputed in both"),
    "D": (3, 0, "D = rowsum(dO * O)", "flash_delta_kernel"),
    "dS": (6, 2.5, "dS = P * (dP - D)", "recomputed in both"),
    "dV": (9, 4.5, "dV = P$^T$ dO", "flash_dkdv_kernel"),
    "dK": (9, 2.5, "dK = dS$^T$ Q * scale", "flash_dkdv_kernel"),
    "dQ": (9, 0.5, "dQ = dS K * scale", "flash_dq_kernel"),
}
BACKWARD_EDGES = [("O", "D"), ("dO", "D"), ("Q", "P"), ("K", "P"), ("L", "P"), ("dO", "dP"),
                  ("V", "dP"), ("P", "dS"), ("dP", "dS"), ("D", "dS"), ("P", "dV"),
                  ("dO", "dV"), ("dS", "dK"), ("Q", "dK"), ("dS", "dQ"), ("K", "dQ")]


def backward_flow():
    """The backward's data flow: which tensor each gradient needs, and which of the three
    kernels computes it (P, dP and dS are recomputed by both the dK/dV and the dQ kernel)."""
    fig, ax = plt.subplots(figsize=(11, 5))
    width = {"input": 1.2}
    for name, (x, y, text, who) in BACKWARD_NODES.items():
        w = width.get(who, 2.4) if name != "L" else 1.6
        ax.add_patch(FancyBboxPatch((x - w / 2, y - 0.3), w, 0.6, boxstyle="round,pad=0.05",
                                    facecolor=KERNEL_COLORS[who], edgecolor="black", lw=0.8,
                                    gid=f"node-{name}", zorder=3))
        ax.text(x, y, text, ha="center", va="center", fontsize=9, zorder=4)
    for a, b in BACKWARD_EDGES:
        (xa, ya, _, wa), (xb, yb, _, _) = BACKWARD_NODES[a], BACKWARD_NODES[b]
        start = (xa + (0.85 if a == "L" else 0.65 if wa == "input" else 1.25), ya)
        _arrow(ax, start, (xb - 1.25, yb), color="#636363", gid=f"edge-{a}-{b}",
               zorder=1)
    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", label=k)
                       for k, c in KERNEL_COLORS.items()]
              + [Line2D([], [], color="#636363", label="is needed by")],
              loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=3, fontsize=9,
              frameon=False)
    ax.set_xlim(-1, 10.5)
    ax.set_ylim(-0.6, 5.6)
    ax.axis("off")
    ax.set_title("FlashAttention backward: from O, dO and the saved L to dQ, dK, dV")
    fig.tight_layout()
    return fig
