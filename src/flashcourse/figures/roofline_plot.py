"""The roofline plot of lesson 2: a machine's two ceilings and operators placed under them."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..models.roofline import attainable_tflops

MARKERS = {"S = Q K^T": "o", "P = softmax(S)": "v", "O = P V": "s",
           "fused FlashAttention": "*"}


def roofline(peak_tflops: float, bandwidth_tbs: float, points: list[dict], title: str):
    """Log-log roofline. Each point is a dict with keys kernel, intensity, label (optional)
    and group (points of one group share a colour, e.g. one head dimension)."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ridge = peak_tflops / bandwidth_tbs
    # Two straight lines on log-log axes: their ends and the ridge draw them exactly. (Points
    # from np.logspace would differ in the last bit between CPUs, and the class edition answers
    # only the calls its lessons made, bit for bit.)
    x = np.array(sorted({0.1, ridge, 1e4}))
    ax.loglog(x, attainable_tflops(x, peak_tflops, bandwidth_tbs), color="black", lw=2,
              label=f"roofline: {bandwidth_tbs:g} TB/s, {peak_tflops:g} TFLOP/s")
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.text(ridge * 1.1, peak_tflops * 0.02, f"ridge\n{ridge:.0f} FLOP/B", color="grey",
            fontsize=8)
    groups = sorted({p.get("group", "") for p in points})
    colours = dict(zip(groups, plt.cm.tab10.colors, strict=False))
    seen = set()
    for p in points:
        y = float(attainable_tflops(p["intensity"], peak_tflops, bandwidth_tbs))
        key = (p["kernel"], p.get("group", ""))
        label = None if key in seen else f"{p['kernel']} ({p.get('group', '')})".replace(" ()", "")
        seen.add(key)
        ax.plot(p["intensity"], y, MARKERS.get(p["kernel"], "D"), ms=7, alpha=0.8,
                color=colours[p.get("group", "")], label=label, mec="black", mew=0.4)
    ax.set_xlabel("arithmetic intensity, FLOPs per HBM byte")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
