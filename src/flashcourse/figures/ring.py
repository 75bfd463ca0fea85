"""Figures of ring attention (lesson 10): the ring schedule with what a causal ring does with
each block, the causal work of each rank under the contiguous and the zigzag split, and the
two-GPU measurements of the GPU script.

Every cell of the schedule is a patch whose gid names it ("cell-1-2-0": rank 1, step 2, first
half), so tests can find it without comparing images.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle

from ..distributed import causal_work, contiguous_positions, step_plan, zigzag_positions

KIND_COLORS = {"full": "#6baed6", "diagonal": "#fd8d3c", "skip": "#f0f0f0"}


def ring_schedule_map(world_size: int = 4, causal: bool = True, zigzag: bool = False):
    """The ring schedule: one row per rank, one column per step; each cell names the rank
    whose K/V the row's rank holds and is coloured by what a causal ring does with it
    (under the zigzag split a cell is half full, half skipped)."""
    fig, ax = plt.subplots(figsize=(1.1 * world_size + 2.4, 0.8 * world_size + 1.4))
    for rank in range(world_size):
        for step in range(world_size):
            kinds = [kind for _, _, kind in step_plan(rank, step, world_size, zigzag)]
            if not causal:
                kinds = ["full"]
            width = 1 / len(kinds)
            for index, kind in enumerate(kinds):
                ax.add_patch(Rectangle((step + index * width, rank), width, 1,
                                       facecolor=KIND_COLORS[kind], edgecolor="white", lw=1,
                                       gid=f"cell-{rank}-{step}-{index}"))
            ax.text(step + 0.5, rank + 0.5, f"K/V of {(rank - step) % world_size}",
                    ha="center", va="center", fontsize=8,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    ax.set_xlim(0, world_size)
    ax.set_ylim(world_size, 0)
    ax.set_xticks(np.arange(world_size) + 0.5, [f"step {s}" for s in range(world_size)])
    ax.set_yticks(np.arange(world_size) + 0.5, [f"rank {r}" for r in range(world_size)])
    split = "zigzag split" if zigzag else "contiguous split"
    ax.set_title(f"Ring schedule, P = {world_size}" + (f", causal, {split}" if causal else ""))
    if causal:
        ax.legend(handles=[Patch(facecolor=c, edgecolor="gray", label=k)
                           for k, c in KIND_COLORS.items()],
                  loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


def ring_work_balance(n: int, world_size: int, split=None):
    """Causal work per rank (score pairs, key <= query) under the contiguous split and under
    `split(n, world_size, rank)` (the zigzag split unless given)."""
    split = split or zigzag_positions
    ranks = np.arange(world_size)
    contiguous = [causal_work(contiguous_positions(n, world_size, r)) for r in ranks]
    balanced = [causal_work(split(n, world_size, r)) for r in ranks]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(ranks - 0.2, contiguous, width=0.4, label="contiguous split", color="#9ecae1")
    ax.bar(ranks + 0.2, balanced, width=0.4, label="zigzag split", color="#fd8d3c")
    ax.axhline(n * (n + 1) / 2 / world_size, color="black", lw=1, ls="--",
               label="total / P")
    ax.set_xticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_ylabel("score pairs computed")
    ax.set_title(f"Causal work per rank, n = {n}, P = {world_size}")
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def ring_scaling(rows: list[dict]):
    """Tokens/s and peak memory per GPU against N, one line per method, causal and not,
    from the rows the GPU script wrote."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for causal, style in ((False, "-"), (True, "--")):
        for method in sorted({row["method"] for row in rows}):
            mine = sorted((r for r in rows if r["method"] == method
                           and str(r["causal"]) == str(causal)
                           and isinstance(r.get("tokens_per_s"), (int, float))),
                          key=lambda r: r["n"])
            if not mine:
                continue
            label = f"{method}, {'causal' if causal else 'full'}"
            ns = [r["n"] for r in mine]
            axes[0].plot(ns, [r["tokens_per_s"] for r in mine], style, marker="o", label=label)
            axes[1].plot(ns, [r["peak_mib_per_gpu"] / 1024 for r in mine], style, marker="o",
                         label=label)
    axes[0].set_ylabel("tokens/s (forward)")
    axes[1].set_ylabel("peak memory per GPU (GiB)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
    axes[0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig
