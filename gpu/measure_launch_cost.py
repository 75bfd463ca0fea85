"""Launched from Python, or replayed from a CUDA graph: the short masks of lesson 9.

    python gpu/measure_launch_cost.py [--out assets/results/09-launch-cost.csv]
    python gpu/measure_launch_cost.py --mask window   # one mask (repeat --mask for more)
    python gpu/measure_launch_cost.py --interpreter   # smoke test on a CPU, nothing timed

The masks table times each call as do_bench does: an event before the call, one after. When
the host takes longer to launch a kernel than the GPU takes to run it, the GPU waits between
the two events and the timing is the launch's. The sliding window at N = 8k runs in about
0.1 ms, so this script times, on every mask of lesson 9 at N = 8k and 16k, fp16, d = 64 and
128, B = 1, H = 16, each side checked against float32 attention first:

* "launch": the host's time per call, 100 calls queued back to back (median of 3 rounds);
  for the reference also split in two: "python", the course's code before the launch (its
  checks, the plan's variant, the descriptors' objects; the kernel's launch replaced by
  nothing), and "pointers launch", the whole call with use_tma=False (no descriptors to encode,
  17 fewer arguments; checked first too); and "bare launch" (and "bare pointers launch"):
  Triton's launch alone, the kernel called again with the grid and arguments the course's
  code gave it (no course code runs): the planned call below, through descriptors or
  pointers, so "bare launch ms" is its "reference planned launch ms";
* "reference planned": the same kernel through sparse_forward.SparseForward, its host work
  done once for bound tensors, so that each call is the launch alone (checked first);
* "launched": the masks table's timing (median of REPEATS interleaved do_bench timings);
* "graph": the same call captured once in a CUDA graph and replayed, which leaves only the
  GPU's time (median of REPEATS interleaved timings),

for the reference sparse forward and FlexAttention compiled with the mask's own mask_mod.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "gpu"))

import bench_modern_attention as bma  # noqa: E402

SIZES = (8192, 16384)
HEAD_DIMS = (64, 128)
HEADS = 16
QUEUED = 100  # calls per round of the host's launch time
ROUNDS = 3


def main(argv=None) -> int:
    setup = bma.fair_flex_script(argv, __doc__, "gpu/measure_launch_cost.py", "times launches",
                                 "smoke test on a CPU: N = 128, H = 2, d = 32, untimed",
                                 add_mask_argument)
    if setup is None:
        return 0
    args, b, flex, create_block_mask, ma, sf = setup
    kinds = args.mask or bma.MASK_KINDS
    sizes, dims, heads, window = ((128,), (32,), 2, 32) if args.interpreter else \
        (SIZES, HEAD_DIMS, HEADS, bma.WINDOW)
    cells = [(case, d) for d in dims for n in sizes
             for case in bma.mask_cases(ma, sf, n, window, kinds)]

    def measure(b, case, d):
        return measure_cell(b, bma, ma, sf, flex, create_block_mask, case, d, heads)
    return bma.measure_each(b, args.out, cells, measure, bma.row_line)


def add_mask_argument(parser) -> None:
    parser.add_argument("--mask", action="append", choices=bma.MASK_KINDS,
                        help="time this mask only (repeat for more; default: every mask)")


def measure_cell(b, bma, ma, sf, flex, create_block_mask, case, d, heads) -> dict:
    """One (mask, N, d): check both calls, then their launch time, their launched timing and
    their graph replay's timing."""
    from flashcourse.kernels import host

    torch = b.torch
    n = case.n
    gen = torch.Generator(device=b.device).manual_seed(n + d)
    q, k, v = (torch.randn(1, heads, n, d, device=b.device, dtype=torch.float16,
                           generator=gen) for _ in range(3))
    config = sf.sparse_reference_config(d, case.left, case.docs)
    plan = sf.sparse_plan(n, d, b.device, case.left, case.right, case.docs,
                          kinds=case.kinds(ma, sf, *config[:2]), config=config)
    row = {"mask": case.name, "N": n, "dtype": "float16", "D": d,
           "reference config": "x".join(str(x) for x in config)}
    reference = bma.masked_reference(torch, q, k, v,
                                     torch.from_numpy(case.dense(ma, sf)).to(b.device))
    calls = {}
    ours = lambda: sf.sparse_forward(q, k, v, plan)[0]  # noqa: E731
    if bma.checked(b, row, "reference", ours, reference, True):
        calls["reference"] = ours
    planned_call = sf.SparseForward(q, k, v, plan)
    planned = lambda: planned_call.run()[0]  # noqa: E731
    if bma.checked(b, row, "reference planned", planned, reference, True):
        calls["reference planned"] = planned
    pointers = lambda: sf.sparse_forward(q, k, v, plan, use_tma=False)[0]  # noqa: E731
    pointers_ok = bma.checked(b, row, "reference pointers", pointers, reference, True)
    flex_call = bma.flex_mask_call(b, ma, sf, flex, create_block_mask, q, k, v, case, row)
    if flex_call is not None and bma.checked(b, row, "flex", flex_call, reference, False):
        calls["flex"] = flex_call
    del reference
    timed = dict(calls)
    for name, call in calls.items():
        row[f"{name} launch ms"] = launch_ms(b, call)
        timed[f"{name} graph"] = b.graph_replay(call)
    if "reference" in calls:  # the course's code alone: its kernel's launch does nothing
        with mock.patch.object(sf, "sparse_forward_kernel", host.RecordedLaunch()):
            row["reference python ms"] = launch_ms(b, ours)
    if "reference planned" in calls:  # the planned call is Triton's launch alone
        row["reference bare launch ms"] = row["reference planned launch ms"]
    if pointers_ok:
        row["reference pointers launch ms"] = launch_ms(b, pointers)
        row["reference bare pointers launch ms"] = launch_ms(
            b, sf.SparseForward(q, k, v, plan, use_tma=False).run)
    for name, timing in bma.interleaved(b, timed).items():
        label = name if name.endswith("graph") else f"{name} launched"
        bma.spread_columns(row, label, timing)
    for name, how in ((name, how) for name in ("reference", "reference planned")
                      for how in ("launched", "graph")):
        if row.get(f"{name} {how} ms") and row.get(f"flex {how} ms"):
            row[f"{name} vs flex, {how}"] = row[f"flex {how} ms"] / row[f"{name} {how} ms"]
    return row


def launch_ms(b, call) -> float:
    """The host's time per call with QUEUED calls queued back to back (median of ROUNDS): the
    GPU's queue only fills, so this is what Python and the launcher cost."""
    if b.mode == "interpreter":
        call()
        return 0.0
    rounds = []
    for _ in range(ROUNDS):
        b.sync()
        begun = time.perf_counter()
        for _ in range(QUEUED):
            call()
        rounds.append((time.perf_counter() - begun) * 1e3 / QUEUED)
        b.sync()
    return statistics.median(rounds)


if __name__ == "__main__":
    sys.exit(main())
