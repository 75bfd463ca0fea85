"""Figures of lesson 1: the memory hierarchy and the HBM traffic of attention."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..hardware import H200_MEMORY, MemoryLevel


def memory_hierarchy(levels: tuple[MemoryLevel, ...] = H200_MEMORY):
    """Bandwidth and latency of each memory level, log scale, fastest level first."""
    names = [level.name for level in levels]
    y = np.arange(len(levels))
    fig, (bw_ax, lat_ax) = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
    for ax, attr, label in ((bw_ax, "bandwidth_tbs", "bandwidth, TB/s (whole chip)"),
                            (lat_ax, "latency_cycles", "latency, clock cycles")):
        low = np.array([getattr(level, attr)[0] for level in levels])
        high = np.array([getattr(level, attr)[1] for level in levels])
        ax.barh(y, high, color="#c6dbef", label="high end")
        ax.barh(y, low, color="#2171b5", label="low end")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        for row, (lo, hi) in enumerate(zip(low, high, strict=True)):
            text = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
            ax.text(hi * 1.15, row, text, va="center", fontsize=9)
        ax.set_xlim(right=high.max() * 8)
    bw_ax.set_yticks(y, [f"{n}\n({lv.capacity})" for n, lv in zip(names, levels, strict=True)])
    bw_ax.invert_yaxis()
    bw_ax.set_title("Faster and smaller towards the top")
    lat_ax.set_title("Each step down costs latency")
    fig.tight_layout()
    return fig


def attention_traffic(ns, series: dict[str, list[float]], label: str):
    """HBM bytes of several ways to compute attention over sequence length, log-log."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for (name, values), marker in zip(series.items(), "os^vd", strict=False):
        ax.loglog(ns, values, marker + "-", label=name)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("HBM bytes moved, one head")
    ax.set_title(label)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
