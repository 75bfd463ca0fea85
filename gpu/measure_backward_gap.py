"""Where forward + backward loses to cuDNN, kernel by kernel and cell by cell (lesson 8).

    python gpu/measure_backward_gap.py [--out assets/results/08-backward-gap.csv] [--quick]

On the grid of lesson 8's sweep against cuDNN (fp16 and bf16, d = 64 and 128, causal or not,
N = 1k to 16k, B * N = 32k tokens, H * d = 2048), the course's forward + backward
(host.flash_attention through autograd) is checked against float32 attention, then it and
SDPA's cuDNN backend each run ITERATIONS steps under torch.profiler, ROUNDS rounds taken in
turn. The GPU time of every kernel the profiler saw is summed per step and sorted into the
forward, the backward's parts (the course's delta, dK/dV and dQ kernels; cuDNN's backward
kernels) and anything else (copies, fills): the median over the rounds, and the spread of the
step's total. So each cell's distance from cuDNN splits into the forward's share and the
backward's, and the course's backward into its three kernels. The kernels' names are in the
"kernels" columns, so that the sorting can be read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from flashcourse import bench  # noqa: E402

ITERATIONS = 5
ROUNDS = 3
PARTS = ("forward", "delta", "dK/dV", "dQ", "backward", "other")  # "backward": cuDNN's
# The extra time is split between the halves only where the course is at least this far
# behind cuDNN: closer than that, the difference is within the rounds' spread and its split
# between the halves reads as noise (hundreds of percent either way).
SPLIT_FROM = 0.05


def part_of(kernel: str, side: str) -> str:
    """Which part of a step a kernel of `side` ("course" or "cudnn") belongs to."""
    name = kernel.lower()
    if side == "course":
        for part, marks in (("delta", ("delta",)), ("dK/dV", ("dkdv",)), ("dQ", ("dq",)),
                            ("forward", ("fwd", "forward"))):
            if any(mark in name for mark in marks):
                return part
        return "other"
    if any(mark in name for mark in ("fprop", "fwd", "forward")):
        return "forward"
    if any(mark in name for mark in ("bprop", "bwd", "backward", "dot_do_o", "dq")):
        return "backward"
    return "other"


def step_parts(kernel_us: list[tuple[str, float]], side: str, steps: int) -> dict:
    """{part: ms per step} from (kernel name, GPU microseconds) over `steps` steps."""
    parts = dict.fromkeys(PARTS, 0.0)
    for name, us in kernel_us:
        parts[part_of(name, side)] += us / 1e3 / steps
    return parts


def profiled(torch, run, steps: int) -> list[tuple[str, float]]:
    """(kernel name, GPU microseconds) of every CUDA kernel `steps` calls of run launch."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run()
        torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.elapsed_us()) for e in prof.events()
               if e.device_type == DeviceType.CUDA]
    if not kernels:
        raise SystemExit("torch.profiler saw no CUDA kernel: is CUPTI available?")
    return kernels


def measure_case(torch, case, harness, providers) -> dict:
    import math

    q, k, v, do = harness.make_inputs(case, requires_grad=True)
    sm_scale = 1.0 / math.sqrt(case.d)
    row = {"dtype": case.dtype, "d": case.d, "N": case.n, "causal": case.causal,
           "B": case.batch, "H": case.heads}
    calls = {side: providers.make_call(provider, case.causal, sm_scale)
             for side, provider in (("course", "course"), ("cudnn", "sdpa-cudnn"))}
    problem = harness.check_against_fp32(case, q, k, v, do, calls["course"])
    if problem:
        row["note"] = f"course WRONG: {problem}"
        return row

    def step(call):
        def run():
            o = call(q, k, v)
            return torch.autograd.grad(o, (q, k, v), do)
        return run

    runs = {side: step(call) for side, call in calls.items()}
    for run in runs.values():  # compile, plan, warm up
        for _ in range(3):
            run()
    rounds = {side: [] for side in runs}
    names = {side: set() for side in runs}
    for _ in range(ROUNDS):
        for side, run in runs.items():
            kernels = profiled(torch, run, ITERATIONS)
            rounds[side].append(step_parts(kernels, side, ITERATIONS))
            names[side].update(f"{part_of(n, side)}: {n[:60]}" for n, _ in kernels)
    for side, parts_by_round in rounds.items():
        totals = [sum(parts.values()) for parts in parts_by_round]
        row[f"{side} ms"] = statistics.median(totals)
        row[f"{side} spread %"] = 100 * (max(totals) - min(totals)) / statistics.median(totals)
        for part in PARTS:
            value = statistics.median(parts[part] for parts in parts_by_round)
            if value:
                row[f"{side} {part} ms"] = value
        row[f"{side} kernels"] = "; ".join(sorted(names[side]))
    shares(row)
    return row


def shares(row: dict) -> None:
    """Speeds against cuDNN, whole and by half, and where the course's extra time goes."""
    course, cudnn = row.get("course ms"), row.get("cudnn ms")
    if not (course and cudnn):
        return
    row["course/cudnn"] = cudnn / course
    fwd, cudnn_fwd = row.get("course forward ms", 0.0), row.get("cudnn forward ms", 0.0)
    bwd = sum(row.get(f"course {part} ms", 0.0) for part in ("delta", "dK/dV", "dQ"))
    cudnn_bwd = row.get("cudnn backward ms", 0.0)
    if fwd and cudnn_fwd:
        row["forward course/cudnn"] = cudnn_fwd / fwd
    if bwd and cudnn_bwd:
        row["backward course/cudnn"] = cudnn_bwd / bwd
    extra = course - cudnn
    if extra > SPLIT_FROM * cudnn and fwd and bwd and cudnn_fwd and cudnn_bwd:
        row["extra time in forward %"] = 100 * (fwd - cudnn_fwd) / extra
        row["extra time in backward %"] = 100 * (bwd - cudnn_bwd) / extra
    if bwd:
        for part in ("delta", "dK/dV", "dQ"):
            row[f"{part} % of course backward"] = 100 * row.get(f"course {part} ms", 0.0) / bwd


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="N = 1k and 4k only")
    args = parser.parse_args(argv)
    if not bench.cuda_script_ready("gpu/measure_backward_gap.py", "profiles kernels"):
        return 0
    import torch

    from flashcourse.bench import cases, harness, providers

    rows = []
    for case in cases.sweep_cases("fwdbwd", args.quick, ["fp16", "bf16"]):
        row = measure_case(torch, case, harness, providers)
        rows.append(row)
        print(", ".join(f"{key} {value:.3f}" if isinstance(value, float) else f"{key} {value}"
                        for key, value in row.items() if "kernels" not in key), flush=True)
        if args.out is not None:
            bench.write_csv(args.out, rows)
    return 1 if any("note" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
