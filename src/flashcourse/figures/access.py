"""Figures of lesson 3: which sectors and lines a warp's load touches."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from ..models.memory import LINE_BYTES, SECTOR_BYTES, sectors_and_lines

SHOW_LINES = 6  # lines drawn per pattern; the title gives the full count


def access_patterns(patterns: dict[str, np.ndarray], access_bytes: int = 4):
    """One row per pattern: the touched 128-byte lines (up to six), each split into four
    32-byte sectors; a touched sector is shaded, the bytes threads asked for are dark."""
    fig, axes = plt.subplots(len(patterns), 1, figsize=(9, 1.15 * len(patterns)))
    axes = np.atleast_1d(axes)
    for ax, (name, addresses) in zip(axes, patterns.items(), strict=True):
        addresses = np.asarray(addresses, dtype=np.int64)
        wanted = np.unique(np.concatenate([np.arange(a, a + access_bytes) for a in addresses]))
        lines = np.unique(wanted // LINE_BYTES)
        sectors, line_count = sectors_and_lines(addresses, access_bytes)
        efficiency = len(wanted) / (sectors * SECTOR_BYTES)
        for slot, line in enumerate(lines[:SHOW_LINES]):
            x0 = slot * (LINE_BYTES + 24)
            in_line = wanted[wanted // LINE_BYTES == line] - line * LINE_BYTES
            for s in range(LINE_BYTES // SECTOR_BYTES):
                touched = np.any(in_line // SECTOR_BYTES == s)
                ax.add_patch(Rectangle((x0 + s * SECTOR_BYTES, 0), SECTOR_BYTES, 1,
                                       facecolor="#c6dbef" if touched else "white",
                                       edgecolor="#08306b", lw=0.8))
            for byte in in_line:
                ax.add_patch(Rectangle((x0 + byte, 0.2), 1, 0.6, color="#08306b", lw=0))
            ax.text(x0 + LINE_BYTES / 2, -0.35, f"line {line}", ha="center", fontsize=7)
        if len(lines) > SHOW_LINES:
            ax.text(SHOW_LINES * (LINE_BYTES + 24), 0.5, f"+{len(lines) - SHOW_LINES} more",
                    va="center", fontsize=8)
        ax.set_xlim(-4, SHOW_LINES * (LINE_BYTES + 24) + 80)
        ax.set_ylim(-0.6, 1.1)
        ax.axis("off")
        ax.set_title(f"{name}: {sectors} sectors, {line_count} lines, "
                     f"{efficiency:.0%} of moved bytes used", fontsize=9, loc="left")
    fig.tight_layout()
    return fig
