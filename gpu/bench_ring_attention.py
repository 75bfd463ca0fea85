"""Lesson 10 on two GPUs: ring attention with the course's FlashAttention kernel per block,
against one GPU and against PyTorch's context_parallel; tokens/s and peak memory per GPU.

Run on a machine with two GPUs (NCCL):

    torchrun --standalone --nproc_per_node=2 gpu/bench_ring_attention.py --out DIR [--quick]

It writes DIR/10-ring-scaling.csv (copy it to assets/results/ for the book). On a CPU machine
the same script runs with gloo, torch's attention per block and tiny sizes, to test it
(`--block kernel` runs the course's kernel in Triton's interpreter instead, one tiny size):

    torchrun --standalone --nproc_per_node=2 gpu/bench_ring_attention.py --out DIR --device cpu

For each N and mask: every method's output is first compared with one GPU's (the run stops
with an error message if the ring is wrong); then each method is timed REPEATS times after
WARMUP runs, with a barrier before each run; a run's time is the slowest rank's. The CSV holds
the median, the spread (max - min over the runs, in ms), tokens/s (N / median) and the peak
memory allocated on each GPU (the larger of the two), inputs included.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from flashcourse import distributed as ring
from flashcourse import runtime
from flashcourse.bench import write_csv

GPU_NS = (32768, 65536, 131072)
QUICK_NS = (32768, 65536)
CPU_NS = (256, 512)
CPU_QUICK_NS = (128,)
INTERPRETER_NS = (64,)  # the kernel in Triton's interpreter (a CPU test of the kernel path)
HEADS, HEAD_DIM = 16, 128  # one sequence of 16 heads of d = 128
CPU_HEADS, CPU_HEAD_DIM = 2, 16
WARMUP, REPEATS = 2, 7
QUICK_REPEATS = 3
TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 1e-4}  # max abs error against one GPU
RESULTS_NAME = ring.SCALING_RESULTS


def log(message: str) -> None:
    if dist.get_rank() == 0:
        print(message, flush=True)


def kernel_forward():
    """The course's reference FlashAttention forward (kernels/host.py): (q, k, v, causal,
    sm_scale) -> (o, lse), lse in natural log, (B, H, N) float32."""
    from flashcourse.kernels import host

    return host.forward


def block_function(block: str):
    """`block_fn` of ring.ring_forward: the course's kernel ("kernel") or torch's attention
    ("torch"). The kernel's causal switch masks a square block on its diagonal, which is what
    a diagonal pair of the causal plan is (a chunk against itself)."""
    if block == "torch":
        return ring.block_attention
    forward = kernel_forward()

    def block_fn(q, k, v, q_pos, k_pos, causal):
        if q.shape[-2] != k.shape[-2]:
            raise ValueError("the kernel takes equal query and key lengths: choose N "
                             "divisible by 2 x the number of GPUs")
        return forward(q, k, v, causal=causal, sm_scale=1.0 / math.sqrt(q.shape[-1]))

    return block_fn


def inputs(n: int, heads: int, d: int, dtype, device) -> tuple:
    """The same q, k, v (1, H, N, d) on every rank (one seed)."""
    generator = torch.Generator(device=device).manual_seed(n)
    return tuple(torch.randn(1, heads, n, d, generator=generator, device=device, dtype=dtype)
                 for _ in range(3))


def timed(run, device: str, warmup: int, repeats: int) -> list[float]:
    """Milliseconds per run, the slowest rank's, after `warmup` runs."""
    times = []
    for index in range(warmup + repeats):
        dist.barrier()
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        elapsed = torch.tensor([(time.perf_counter() - start) * 1e3], dtype=torch.float64,
                               device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if index >= warmup:
            times.append(float(elapsed))
    return times


def synchronize(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    if device != "cpu":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_mib(device: str) -> float:
    """The larger peak of the ranks, MiB (0 on a CPU, which does not count)."""
    value = torch.cuda.max_memory_allocated() / 2**20 if device != "cpu" else 0.0
    peak = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return float(peak)


def max_error(got, expected, device: str) -> float:
    error = torch.tensor([(got.float() - expected.float()).abs().max().item()],
                         dtype=torch.float64, device=device)
    dist.all_reduce(error, op=dist.ReduceOp.MAX)
    return float(error)


# ---------------------------------------------------------------- the three methods


def one_gpu(q, k, v, causal, block_fn):
    """Every rank runs the whole sequence; rank 0's time and memory are the one-GPU figures
    (the other ranks do the same, so the barrier does not stretch it)."""
    n = q.shape[-2]
    positions = torch.arange(n, device=q.device)
    return lambda: block_fn(q, k, v, positions, positions, causal)[0]


def ring_method(q, k, v, causal, block_fn):
    """Our ring on this rank's shard: contiguous without a mask, zigzag with one."""
    rank, world = dist.get_rank(), dist.get_world_size()
    n = q.shape[-2]
    split = ring.zigzag_positions if causal else ring.contiguous_positions
    mine = torch.as_tensor(split(n, world, rank), device=q.device)
    shard = [x[..., mine, :].contiguous() for x in (q, k, v)]
    if causal:
        rows = ring.shard_chunk_rows(n, world, zigzag=True)

        def run():
            return ring.ring_forward(*shard, mine, mine, True, plan=ring.step_plan,
                                     zigzag=True, chunk_rows=rows, block_fn=block_fn)[0]
    else:
        def run():
            return ring.ring_forward(*shard, mine, mine, False, block_fn=block_fn)[0]
    return run, mine


def context_parallel_method(q, k, v, causal, device, stack):
    """PyTorch's context_parallel: shards q, k, v over a device mesh (in place, entered once
    on `stack`, outside the timings) and makes scaled_dot_product_attention run its own ring.
    Returns (run, unshard); raises if the API is missing."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    try:
        from torch.distributed.tensor.experimental import context_parallel_unshard
    except ImportError:  # torch 2.7 to 2.13 keep it in a private module
        from torch.distributed.tensor.experimental._attention import context_parallel_unshard

    mesh = init_device_mesh("cpu" if device == "cpu" else "cuda", (dist.get_world_size(),))
    buffers = [x.clone() for x in (q, k, v)]
    try:  # the inputs are not needed afterwards: no copy kept to restore them
        sharded = context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2],
                                   no_restore_buffers=set(buffers))
    except TypeError:  # a torch without no_restore_buffers
        sharded = context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2])
    stack.enter_context(sharded)

    def run():
        return F.scaled_dot_product_attention(*buffers, is_causal=causal)

    def unshard(out):
        return context_parallel_unshard(mesh, [out], [2])[0]

    return run, unshard


# ---------------------------------------------------------------- one configuration


def measure(n, causal, args, block_fn, dtype) -> list[dict]:
    device = args.device_name
    heads, d = (CPU_HEADS, CPU_HEAD_DIM) if args.device == "cpu" else (HEADS, HEAD_DIM)
    repeats, warmup = (QUICK_REPEATS if args.quick else REPEATS), WARMUP
    if args.interpreted or (args.quick and args.device == "cpu"):  # a test, not a measurement
        repeats, warmup = 1, 0
    if args.interpreted:
        heads = 1
    q, k, v = inputs(n, heads, d, dtype, device)
    reference = one_gpu(q, k, v, causal, block_fn)()
    rows = []

    def record(method, run, check, note=""):
        out = run()
        error = check(out)
        if not error <= TOLERANCE[dtype]:  # NaN fails too
            raise SystemExit(f"{method}, N={n}, causal={causal}: max error {error:.3g} "
                             f"against one GPU (allowed {TOLERANCE[dtype]}): not timed.")
        del out
        reset_peak(device)
        times = timed(run, device, warmup, repeats)
        median = statistics.median(times)
        rows.append({"method": method, "n": n, "causal": causal, "gpus": (
            1 if method == "one GPU" else dist.get_world_size()), "heads": heads, "d": d,
            "dtype": str(dtype).removeprefix("torch."), "median_ms": round(median, 3),
            "spread_ms": round(max(times) - min(times), 3), "repeats": repeats,
            "tokens_per_s": round(n / (median / 1e3)), "peak_mib_per_gpu": round(
                peak_mib(device), 1), "max_error": f"{error:.2e}", "note": note})
        log(f"  {method:18} N={n:6} causal={causal!s:5} {median:9.2f} ms "
            f"(spread {max(times) - min(times):.2f}) {rows[-1]['tokens_per_s']:>10} tok/s "
            f"peak {rows[-1]['peak_mib_per_gpu']:8.1f} MiB")

    record("one GPU", one_gpu(q, k, v, causal, block_fn),
           lambda out: max_error(out, reference, device))
    run, mine = ring_method(q, k, v, causal, block_fn)
    expected = reference[..., mine, :]
    record("ring (ours)", run, lambda out: max_error(out, expected, device),
           "zigzag split, causal plan" if causal else "contiguous split")
    if args.skip_context_parallel:
        return rows
    with contextlib.ExitStack() as stack:
        try:
            cp_run, unshard = context_parallel_method(q, k, v, causal, device, stack)
            cp_run()
        except Exception as err:  # noqa: BLE001 - an unavailable API is a result, not a crash
            log(f"  context_parallel unavailable here: {type(err).__name__}: {err}")
            rows.append({"method": "context_parallel", "n": n, "causal": causal,
                         "note": f"unavailable: {type(err).__name__}"})
        else:
            record("context_parallel", cp_run,
                   lambda out: max_error(unshard(out), reference, device),
                   "SDPA per block, its own load balancing; inputs passed whole")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the CSV")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--skip-context-parallel", action="store_true",
                        help="measure one GPU and our ring only")
    parser.add_argument("--block", choices=("kernel", "torch"), default=None,
                        help="per-block compute: the course's kernel (default on a GPU; on a "
                             "CPU it runs in Triton's interpreter, slowly) or torch")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        print("Start this script with torchrun, e.g.\n  torchrun --standalone "
              "--nproc_per_node=2 gpu/bench_ring_attention.py --out DIR", file=sys.stderr)
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.device == "cuda":
        if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
            print("No CUDA GPU for this rank: use --device cpu to test on a CPU.",
                  file=sys.stderr)
            return 2
        torch.cuda.set_device(local_rank)
        args.device_name = f"cuda:{local_rank}"
        dtype = torch.bfloat16
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", ring.loopback_interface())
        args.device_name = "cpu"
        dtype = torch.float32
    runtime.setup(verbose=False)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    if dist.get_world_size() < 2:
        log("Run with at least two processes (--nproc_per_node=2).")
        return 2
    if args.device == "cpu":
        ns = CPU_QUICK_NS if args.quick else CPU_NS
    else:
        ns = QUICK_NS if args.quick else GPU_NS
    block = args.block or ("kernel" if args.device == "cuda" else "torch")
    args.interpreted = args.device == "cpu" and block == "kernel"
    if args.interpreted:
        ns = INTERPRETER_NS
    block_fn = block_function(block)
    rows = []
    started = time.perf_counter()
    try:
        for causal in (False, True):
            for n in ns:
                rows += measure(n, causal, args, block_fn, dtype)
    finally:
        if dist.get_rank() == 0 and rows:
            write_csv(args.out / f"{RESULTS_NAME}.csv", rows)
            log(f"wrote {args.out / (RESULTS_NAME + '.csv')} "
                f"({time.perf_counter() - started:.0f} s)")
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
