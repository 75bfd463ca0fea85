"""The online softmax of one row over its key blocks (lesson 5): the running max, sum and output
after each block, computed with the softmax states of `models.softmax_states`, and their figure.
The book's interactive diagram runs a port of `running_states` in the browser
(`ojs/online_softmax.js`).

Every drawn block is a patch whose gid names it ("block-1", "score-4"), so tests can find it
without comparing images.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from ..models.softmax_states import merge_all, normalised, softmax_state

BLOCK_SHADES = ("#deebf7", "#f7f7f7")
SCORE_COLOR, MAX_COLOR, SUM_COLOR, OUT_COLOR = "#3182bd", "#e6550d", "#31a354", "#756bb1"


def running_states(scores, values, block: int) -> list[dict]:
    """The online softmax of one row, key block by key block: after each block, the running
    max m, the running sum l, the unnormalised output o (of one scalar value per key) and the
    output so far, o / l. Each block's own state is merged into the running one."""
    scores = np.asarray(scores, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if scores.ndim != 1 or scores.shape != values.shape or not len(scores):
        raise ValueError("give one score and one value per key: two 1-D arrays of one length, "
                         f"not shapes {scores.shape} and {values.shape}")
    if block < 1:
        raise ValueError(f"a block holds at least one key, not {block}")
    m, l, o = np.array([-np.inf]), np.zeros(1), np.zeros((1, 1))
    steps = []
    for start in range(0, len(scores), block):
        keys = slice(start, start + block)
        block_m, block_l, block_o = softmax_state(scores[None, keys], values[keys, None])
        m, l, o = merge_all(np.stack([m, block_m], -1), np.stack([l, block_l], -1),
                            np.stack([o, block_o], -2))
        steps.append({"start": start, "end": min(start + block, len(scores)),
                      "m": float(m[0]), "l": float(l[0]), "o": float(o[0, 0]),
                      "out": float(normalised(l, o)[0, 0])})
    return steps


def online_softmax_blocks(scores, values, block: int = 3):
    """Top: the row's scores, its key blocks shaded, and the running max after each block.
    Bottom: the running sum l (rescaled to the max so far) and the output so far o / l after
    each block, against the softmax of the whole row computed in one go."""
    steps = running_states(scores, values, block)
    scores = np.asarray(scores, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.2), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    finite = scores[np.isfinite(scores)]
    low, high = min(0.0, finite.min(initial=0.0)), max(1.0, finite.max(initial=1.0))
    for index, step in enumerate(steps):
        top.add_patch(Rectangle((step["start"] - 0.5, low - 0.5),
                                step["end"] - step["start"], high - low + 1.5,
                                facecolor=BLOCK_SHADES[index % 2], edgecolor="none",
                                gid=f"block-{index}", zorder=0))
        top.text((step["start"] + step["end"] - 1) / 2, high + 0.7, f"block {index}",
                 ha="center", fontsize=9)
        if np.isfinite(step["m"]):
            top.plot([step["start"] - 0.5, step["end"] - 0.5], [step["m"]] * 2,
                     color=MAX_COLOR, lw=2, label="running max m" if index == 0 else None)
    for key, score in enumerate(scores):
        if np.isfinite(score):
            top.add_patch(Rectangle((key - 0.3, min(0.0, score)), 0.6, abs(score),
                                    facecolor=SCORE_COLOR, gid=f"score-{key}", zorder=2))
        else:
            top.text(key, 0.1, "-inf", ha="center", fontsize=8)
    top.axhline(0, color="black", lw=0.8)
    top.set_ylim(low - 0.5, high + 1.3)
    top.set_ylabel("score")
    top.legend(loc="upper left", fontsize=8, frameon=False, bbox_to_anchor=(1.0, 1.0))
    top.set_title(f"Online softmax of one row, {block} keys per block")
    ends = [step["end"] - 0.5 for step in steps]
    bottom.plot(ends, [step["l"] for step in steps], "o-", color=SUM_COLOR,
                label="running sum l (against the max so far)")
    bottom.plot(ends, [step["out"] for step in steps], "s-", color=OUT_COLOR,
                label="output so far, o / l")
    direct = running_states(scores, values, len(scores))[0]["out"]
    bottom.axhline(direct, color="black", lw=1, ls="--", label="softmax of the whole row")
    bottom.set_xlabel("key")
    bottom.set_xticks(range(len(scores)))
    bottom.legend(loc="upper left", fontsize=8, frameon=False, bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig
