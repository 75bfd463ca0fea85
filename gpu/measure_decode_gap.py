"""Where the reference decoding step's time goes against cuDNN's, shape by shape (lesson 9).

    python gpu/measure_decode_gap.py [--out assets/results/09-decode-gap.csv]
    python gpu/measure_decode_gap.py --interpreter   # smoke test on a CPU, nothing timed

On every shape of the decoding grid (bench_modern_attention.decode_grid: batch 1, 8 and 64,
caches of 4k to 128k keys, MHA and GQA, d = 64 and 128, fp16 and bf16), each replayed from a
CUDA graph, median of bench_modern_attention.REPEATS interleaved timings:

* "step": the reference decoding step (decode.DecodePlan.run: the split kernel, then the
  merge when there is more than one split), checked against float32 attention first;
* "split kernel": its first launch alone, and "merge": its second alone;
* "dependent step": the step with its merge a programmatic dependent launch (DecodePlan(
  dependent_launch=True): the merge starts while the split kernel runs and waits for it),
  checked first;
* "fused step": the step with the merge fused into the split kernel (DecodePlan(
  fused_merge=True): the last split of each K/V head to finish merges), checked first;
* "fused step, heads together": the fused step on the pool with each K/V head's rows of a page
  together (see below), checked first: both steps taken at once;
* "split kernel, heads together": the same split kernel on a pool that keeps each K/V head's
  rows of a page together (cuDNN's cache keeps each head's keys together), checked first;
* "split kernel, no softmax": the same kernel, loads and matmuls with the softmax left out
  (DecodePlan(no_softmax=True): a bound, its output wrong and never checked);
* "sdpa cudnn": SDPA's cuDNN backend on the contiguous cache, checked first;

and the read-only kernel reading as many bytes (bench_modern_attention.read_only_figure). So
the step's distance from cuDNN splits into the merge's share, the layout's (heads together),
the softmax's (no softmax), and what is left: the split kernel's reading, against cuDNN's and
against a kernel that only reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "gpu"))

import bench_modern_attention as bma  # noqa: E402


def main(argv=None) -> int:
    started = bma.bench_script(argv, __doc__, "gpu/measure_decode_gap.py", "times decoding",
                               "smoke test on a CPU: two tiny shapes, untimed")
    if started is None:
        return 0
    args, b = started
    return bma.measure_each(b, args.out, bma.decode_grid(b), measure_shape, summary)


def measure_shape(b, dtype, d, h, h_kv, batch, cache) -> dict:
    from torch.nn.attention import SDPBackend

    from flashcourse.kernels import ladder

    inputs = bma.decode_inputs(b, dtype, d, h, h_kv, batch, cache)
    row, kv_bytes = inputs.row, inputs.kv_bytes
    together_pools = inputs.heads_together()
    plan, together = inputs.plan(), inputs.plan(together_pools)
    bound = inputs.plan(no_softmax=True)  # a bound, never checked
    dependent = inputs.plan(dependent_launch=ladder.dependent_launch_supported())
    fused = inputs.plan(fused_merge=True)
    fused_together = inputs.plan(together_pools, fused_merge=True)
    row["splits"], row["BLOCK_N"] = plan.splits, plan.block_n
    cudnn = bma.sdpa_decode(inputs, SDPBackend.CUDNN_ATTENTION)
    timed = {}
    for name, call, fatal in (("step", plan.run, True), ("heads together", together.run, True),
                              ("dependent step", dependent.run, True),
                              ("fused step", fused.run, True),
                              ("fused step, heads together", fused_together.run, True),
                              ("sdpa cudnn", cudnn, False)):
        if bma.checked(b, row, name, call, inputs.reference, fatal, where=shape_name(row)):
            timed[name] = call
    if "step" not in timed:
        return row
    timed["split kernel"] = plan.launch_splits
    if plan.splits > 1:
        timed["merge"] = plan.launch_merge
    if "heads together" in timed:
        timed["split kernel, heads together"] = together.launch_splits
        del timed["heads together"]  # checked whole; timed as its split kernel
    timed["split kernel, no softmax"] = bound.launch_splits
    replays = {name: b.graph_replay(call) for name, call in timed.items()}
    for name, timing in bma.interleaved(b, replays).items():
        bma.spread_columns(row, name, timing)
        if timing[0]:
            row[f"{name} GB/s"] = kv_bytes / (timing[0] * 1e-3) / 1e9
    row["read-only GB/s"], row["read-only ms"] = bma.read_only_figure(b, kv_bytes)
    shares(row)
    return row


def shares(row: dict) -> None:
    """The gap's parts: speeds against cuDNN, the merge's share of the step, what the layout
    and the softmax cost the split kernel, and reading speeds as % of the read-only kernel."""
    ms = {name[:-3]: value for name, value in row.items() if name.endswith(" ms") and value}
    cudnn, step, split = ms.get("sdpa cudnn"), ms.get("step"), ms.get("split kernel")
    if cudnn and step:
        row["step vs cudnn"] = cudnn / step
    if cudnn and split:
        row["split kernel vs cudnn"] = cudnn / split
    for name in ("dependent step", "fused step", "fused step, heads together"):
        if cudnn and ms.get(name):
            row[f"{name} vs cudnn"] = cudnn / ms[name]
    if step and "merge" in ms:
        row["merge % of step"] = 100 * ms["merge"] / step
    if split and "split kernel, heads together" in ms:
        row["layout cost %"] = 100 * (split / ms["split kernel, heads together"] - 1)
    if split and "split kernel, no softmax" in ms:
        row["softmax cost %"] = 100 * (split / ms["split kernel, no softmax"] - 1)
    for name in ("split kernel", "split kernel, heads together", "split kernel, no softmax",
                 "sdpa cudnn"):
        if row.get(f"{name} GB/s") and row.get("read-only GB/s"):
            row[f"{name} % of read-only"] = 100 * row[f"{name} GB/s"] / row["read-only GB/s"]


def shape_name(row: dict) -> str:
    return (f"B={row['batch']} cache={row['cache']} {row['dtype']} d={row['d']} "
            f"{row['heads']}/{row['kv heads']}")


def summary(row: dict) -> str:
    parts = [shape_name(row), f"splits {row.get('splits')}"]
    for key in ("step vs cudnn", "split kernel vs cudnn", "dependent step vs cudnn",
                "fused step vs cudnn",
                "fused step, heads together vs cudnn",
                "merge % of step", "layout cost %",
                "softmax cost %", "split kernel % of read-only", "sdpa cudnn % of read-only"):
        if key in row:
            parts.append(f"{key} {row[key]:.3f}")
    return ", ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
