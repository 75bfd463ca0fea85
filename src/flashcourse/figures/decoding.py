"""Paged split-KV decoding (lesson 9): one sequence's key positions cut into splits, the page
table that says where each page of positions lives, and the pool of pages those splits read.

Every drawn cell is a patch whose gid names it ("pos-37": position 37 of the sequence,
"page-5": physical page 5 of the pool, "table-2": entry 2 of the page table), so tests can find
it without comparing images.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle

from ..models.matmul import cdiv

SPLIT_COLORS = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#d9d9d9")
UNUSED = "#f7f7f7"


def page_table(length: int, page_size: int, pool_pages: int, seed: int = 0) -> np.ndarray:
    """The physical page of each logical page of a sequence of `length` keys, drawn without
    repetition from a pool of `pool_pages` (as an allocator hands pages out, in no order)."""
    needed = cdiv(length, page_size)
    if needed > pool_pages:
        raise ValueError(f"{length} keys need {needed} pages of {page_size}; the pool has "
                         f"{pool_pages}")
    return np.random.RandomState(seed).permutation(pool_pages)[:needed]


def paged_split_decode(length: int = 70, page_size: int = 8, split_size: int = 32,
                       block_n: int = 16, pool_pages: int = 12, seed: int = 0):
    """Three rows: the sequence's positions coloured by split (tiles of BLOCK_N keys outlined),
    the page table, and the pool, where each used page takes the colour of the split reading
    it (a page two splits share is split in two colours, slot by slot)."""
    splits = cdiv(length, split_size)
    if splits > len(SPLIT_COLORS):
        raise ValueError(f"{splits} splits: draw at most {len(SPLIT_COLORS)}")
    table = page_table(length, page_size, pool_pages, seed)
    padded = cdiv(length, page_size) * page_size
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for pos in range(padded):  # row 1: the sequence, one cell per position
        color = SPLIT_COLORS[pos // split_size] if pos < length else UNUSED
        ax.add_patch(Rectangle((pos, 0), 1, 1, facecolor=color, edgecolor="grey", lw=0.4,
                               gid=f"pos-{pos}"))
    for start in range(0, padded, block_n):  # tiles of BLOCK_N keys, as the kernel walks them
        ax.add_patch(Rectangle((start, 0), min(block_n, padded - start), 1, fill=False,
                               edgecolor="black", lw=1.6))
    for logical, physical in enumerate(table):  # row 2: the page table
        x = logical * page_size
        ax.add_patch(Rectangle((x, 1.8), page_size, 0.8, facecolor="white", edgecolor="black",
                               lw=0.8, gid=f"table-{logical}"))
        ax.text(x + page_size / 2, 2.2, f"page {physical}", ha="center", va="center",
                fontsize=8)
    slot_width = padded / (pool_pages * page_size)  # row 3: the pool, at the same total width
    for physical in range(pool_pages):
        x0 = physical * page_size * slot_width
        used = np.flatnonzero(table == physical)
        ax.add_patch(Rectangle((x0, 3.4), page_size * slot_width, 1, fill=False,
                               edgecolor="black", lw=1.2, gid=f"page-{physical}"))
        for slot in range(page_size):
            pos = int(used[0]) * page_size + slot if used.size else None
            color = SPLIT_COLORS[pos // split_size] if pos is not None and pos < length \
                else UNUSED
            ax.add_patch(Rectangle((x0 + slot * slot_width, 3.4), slot_width, 1,
                                   facecolor=color, edgecolor="grey", lw=0.3))
        ax.text(x0 + page_size * slot_width / 2, 4.65, str(physical), ha="center",
                va="center", fontsize=8)
    ax.text(-1, 0.5, "positions", ha="right", va="center")
    ax.text(-1, 2.2, "page table", ha="right", va="center")
    ax.text(-1, 3.9, "pool", ha="right", va="center")
    ax.set_xlim(-12, padded + 1)
    ax.set_ylim(5.0, -0.4)
    ax.axis("off")
    ax.set_title(f"{length} keys, pages of {page_size}, splits of {split_size} "
                 f"({splits} programs for this K/V head), tiles of BLOCK_N = {block_n}")
    ax.legend(handles=[Patch(facecolor=SPLIT_COLORS[s], edgecolor="grey",
                             label=f"split {s}") for s in range(splits)]
              + [Patch(facecolor=UNUSED, edgecolor="grey", label="no key")],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=splits + 1, fontsize=9,
              frameon=False)
    fig.tight_layout()
    return fig
