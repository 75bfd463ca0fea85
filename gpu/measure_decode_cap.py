"""The decoding step with its split kernel's registers capped, beside the plain step (lesson 9).

    python gpu/measure_decode_cap.py [--out assets/results/09-decode-cap.csv]
    python gpu/measure_decode_cap.py --interpreter   # smoke test on a CPU, nothing timed

At d = 128 Triton 3.6 compiles the split kernel that stores states to 126 registers a thread,
4 blocks of 4 warps per SM, where 3.9 compiles it to 92 and 5 (09-decode-buffers.csv). This
script asks whether the fifth block pays: on every d = 128 shape of the decoding grid
(bench_modern_attention.decode_grid), each replayed from a CUDA graph, median of
bench_modern_attention.REPEATS interleaved timings, each checked against float32 attention
first:

* "step": the reference decoding step (decode.DecodePlan.run, the tuned config);
* "capped step": the same config with the split kernel capped at CAP registers a thread
  (DecodePlan(config=(BLOCK_N, warps, stages, CAP)): 5 blocks per SM on both versions);
* "capped step, 2 stages": the same cap with one stage fewer (fewer spilled bytes on 3.6);
* "dependent step", "capped dependent step" and "capped dependent step, 2 stages": those
  steps with the merge a programmatic dependent launch (DecodePlan(dependent_launch=True),
  where supported);
* "sdpa cudnn": SDPA's cuDNN backend on the contiguous cache.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "gpu"))

import bench_modern_attention as bma  # noqa: E402

CAP = 96  # registers a thread: 5 blocks of 128 threads fit an SM's 65536 registers
STEPS = ("step", "capped step", "capped step, 2 stages", "dependent step",
         "capped dependent step", "capped dependent step, 2 stages")


def main(argv=None) -> int:
    started = bma.bench_script(argv, __doc__, "gpu/measure_decode_cap.py",
                               "times decoding", "smoke test on a CPU: one tiny shape, untimed")
    if started is None:
        return 0
    args, b = started
    grid = bma.decode_grid(b)  # (dtype, d, heads, K/V heads, batch, cache)
    shapes = grid[:1] if b.mode == "interpreter" else [s for s in grid if s[1] == 128]
    return bma.measure_each(b, args.out, shapes, measure_shape, summary)


def summary(row: dict) -> str:
    return ", ".join(f"{k} {row[k]:.3f}" if isinstance(row[k], float) else f"{k} {row[k]}"
                     for k in ("batch", "cache", "dtype", "kv heads", "splits",
                               *(f"{name} vs cudnn" for name in STEPS)) if k in row)


def measure_shape(b, dtype, d, h, h_kv, batch, cache) -> dict:
    from torch.nn.attention import SDPBackend

    from flashcourse.kernels import ladder

    inputs = bma.decode_inputs(b, dtype, d, h, h_kv, batch, cache)
    row = inputs.row
    row["maxnreg"] = CAP
    dependent = ladder.dependent_launch_supported()
    plain = inputs.plan()
    tuned = (plain.block_n, plain.num_warps, plain.num_stages)
    capped, capped_2 = (*tuned, CAP), (*tuned[:2], 2, CAP)
    plans = {"step": plain, "capped step": inputs.plan(config=capped),
             "capped step, 2 stages": inputs.plan(config=capped_2),
             "dependent step": inputs.plan(dependent_launch=dependent),
             "capped dependent step": inputs.plan(config=capped, dependent_launch=dependent),
             "capped dependent step, 2 stages": inputs.plan(config=capped_2,
                                                            dependent_launch=dependent)}
    row.update(splits=plain.splits, BLOCK_N=plain.block_n, warps=plain.num_warps,
               stages=plain.num_stages, dependent=dependent)
    cudnn = bma.sdpa_decode(inputs, SDPBackend.CUDNN_ATTENTION)
    timed = {}
    calls = [(name, plans[name].run, True) for name in STEPS] + [("sdpa cudnn", cudnn, False)]
    for name, call, fatal in calls:
        if bma.checked(b, row, name, call, inputs.reference, fatal,
                       where=f"B={batch} {cache}"):
            timed[name] = call
    replays = {name: b.graph_replay(call) for name, call in timed.items()}
    for name, timing in bma.interleaved(b, replays).items():
        bma.spread_columns(row, name, timing)
    cudnn_ms = row.get("sdpa cudnn ms")
    for name in STEPS:
        if cudnn_ms and row.get(f"{name} ms"):
            row[f"{name} vs cudnn"] = cudnn_ms / row[f"{name} ms"]
            row[f"{name} vs step"] = row["step ms"] / row[f"{name} ms"]
    return row


if __name__ == "__main__":
    sys.exit(main())
