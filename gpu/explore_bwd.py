"""Tile configs of the reference backward (lesson 8) against cuDNN's backward, on a CUDA GPU.

    python gpu/explore_bwd.py [--out DIR] [--n 4096] [--d 64,128] [--repeats 3]
                              [--kernels dkdv,dq,fused,pair,pair+tma,fused+tma,pair+tma+ws,
                                         pair+tma+stats,blocks+tma]

For d = 64 and 128, causal and not (fp16, B * N = 32k tokens), times the whole backward
(delta pre-pass, dK/dV kernel, dQ kernel) while one kernel's config varies over a candidate
list and the other keeps its tiles.LADDER_BACKWARD entry; and the fused variant ("fused",
host.backward(fused_dq=True): the dK/dV kernel also adds dQ up with fp32 atomics, so P and dP
are computed once, as FlashAttention-2's CUDA backward and FA3 do); "pair" changes both
kernels' configs at once (PAIRS, beside the table's pair); "blocks" times the pairs that fit
more blocks on an SM (BLOCK_PAIRS, some with registers capped: a config's fifth entry). A list
name alone reads and writes through pointers; "+tma" adds tensor descriptors (with "fused", dQ
is added up by one TMA reduction per tile), "+ws" warp-specialised loops, "+stats" (with
"+tma") the logsumexp and delta rows through descriptors in dK/dV (where N is a multiple of 4).
cuDNN's backward (autograd of SDPA pinned to cuDNN, forward excluded) is timed round-robin with
them. Every config is
compiled first in parallel worker processes (Triton's cache is shared), and its dq, dk, dv are
checked against the fp32 reference before timing, on the timing case and on ragged, batched,
multi-head and transposed inputs, and with large logits and a custom sm_scale. Writes
explore-bwd.csv: one row per (case, kernel, config) with the median ms, the spread of the
repeats and the ratio to cuDNN.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from flashcourse import bench  # noqa: E402
from flashcourse.bench import cases, harness, providers  # noqa: E402
from flashcourse.kernels import host, tiles, verify  # noqa: E402

# dK/dV: BLOCK_N (resident keys) must be a multiple of BLOCK_M (the query step), so that the
# causal diagonal ends on a query-step boundary; dQ the other way round.
CANDIDATES = {
    "dkdv": [(32, 128, 4, 2), (32, 128, 4, 3), (32, 128, 4, 4), (64, 128, 8, 2),
             (64, 128, 8, 3), (64, 128, 4, 2), (64, 128, 4, 3), (32, 64, 4, 3), (64, 64, 4, 3),
             (128, 128, 8, 2), (32, 128, 8, 3), (64, 64, 4, 2)],
    "dq": [(128, 32, 4, 3), (128, 32, 4, 2), (128, 64, 8, 2), (128, 64, 8, 3), (128, 64, 4, 2),
           (128, 64, 4, 3), (64, 64, 4, 3), (64, 32, 4, 3), (128, 128, 8, 2), (128, 32, 8, 3),
           (64, 64, 4, 2)],
    # one kernel; BLOCK_N a multiple of BLOCK_M as for dK/dV
    "fused": [(64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 4, 2), (32, 128, 4, 3),
              (64, 64, 4, 2), (64, 64, 4, 3), (32, 64, 4, 3), (128, 128, 8, 2),
              (64, 64, 4, 4), (64, 64, 8, 2), (64, 64, 8, 3)],
}
# Both kernels' configs changed at once ("pair"), keyed on head dim <= 64: the best single
# changes in 08-explore-bwd.csv (N = 1k and 4k) together, timed beside the table's own pair
# (the winners of the first three, Triton 3.9, N = 1k-16k, became tiles.LADDER_BACKWARD); the
# last three: the best single changes with tensor descriptors (Triton 3.6, N = 4k).
# configs_for skips the one equal to the table's.
PAIRS = {
    True: [((32, 128, 4, 4), (128, 64, 8, 3)), ((32, 128, 4, 4), (128, 64, 4, 3)),
           ((32, 128, 4, 3), (128, 64, 8, 3)), ((64, 64, 4, 3), (128, 64, 4, 3)),
           ((64, 64, 4, 3), (128, 64, 8, 3)), ((32, 64, 4, 3), (128, 64, 8, 3))],
    False: [((32, 64, 4, 3), (128, 64, 8, 3)), ((64, 64, 4, 2), (128, 64, 8, 3)),
            ((64, 128, 8, 3), (128, 64, 8, 3)), ((64, 64, 4, 2), (128, 32, 8, 3)),
            ((64, 64, 4, 3), (128, 64, 8, 3)), ((64, 64, 4, 3), (128, 32, 8, 3))],
}
# "blocks": pairs that put more blocks of a kernel on an SM than the table's, as read from the
# compiler (gpu/backward_registers.py, 08-backward-registers.csv), with a fifth entry where the
# registers per thread are capped (maxnreg) to fit that block: each beside the table's pair.
BLOCK_PAIRS = {
    True: [((32, 64, 4, 3), (128, 64, 4, 3)), ((32, 64, 4, 3, 128), (128, 64, 4, 3)),
           ((64, 64, 4, 3, 168), (128, 64, 4, 3)), ((64, 64, 4, 3), (64, 64, 4, 2)),
           ((32, 64, 4, 3, 128), (64, 64, 4, 2))],
    False: [((64, 64, 4, 2), (64, 32, 4, 2)), ((32, 64, 4, 2, 168), (128, 64, 8, 3)),
            ((32, 64, 4, 2, 168), (64, 32, 4, 2)), ((64, 64, 4, 2, 168), (128, 64, 8, 3))],
}
LISTS = (*CANDIDATES, "pair", "blocks")
# a kernel name's "+" suffixes: host.backward's switches
OPTIONS = {"tma": "tma", "ws": "warp_spec", "stats": "stats_tma"}


def parse_kernel(name: str) -> tuple[str, dict]:
    """("dkdv+tma" ->) the candidate list and host.backward's keyword switches."""
    base, *suffixes = name.split("+")
    if base not in LISTS or not set(suffixes) <= set(OPTIONS):
        raise ValueError(f"unknown kernel list {name!r}: a list of {', '.join(LISTS)}, then "
                         f"any of {', '.join('+' + o for o in OPTIONS)}")
    switches = {"tma": False} | {OPTIONS[suffix]: True for suffix in suffixes}
    return base, switches
CASES = [(64, False), (64, True), (128, False), (128, True)]


def configs_for(kernel: str, d: int):
    """The specs timed for one kernel: (dK/dV config, dQ config) pairs with the candidate in
    one slot and the table's in the other; for "pair", the table's pair and PAIRS; or the
    fused kernel's configs."""
    kernel, _ = parse_kernel(kernel)
    kv_cfg, q_cfg = tiles.LADDER_BACKWARD[d <= 64]
    if kernel in ("pair", "blocks"):
        pairs = (PAIRS if kernel == "pair" else BLOCK_PAIRS)[d <= 64]
        return [(kv_cfg, q_cfg), *(p for p in pairs if p != (kv_cfg, q_cfg))]
    if kernel == "dkdv":
        return [(cfg, q_cfg) for cfg in CANDIDATES["dkdv"]]
    if kernel == "dq":
        return [(kv_cfg, cfg) for cfg in CANDIDATES["dq"]]
    return list(CANDIDATES["fused"])


def config_name(kernel: str, spec) -> str:
    """The config column: the varied kernel's config, both ("dkdv+dq") for a pair."""
    kernel, _ = parse_kernel(kernel)
    if kernel in ("pair", "blocks"):
        return "+".join("x".join(map(str, cfg)) for cfg in spec)
    cfg = {"dkdv": spec[0], "dq": spec[1]}.get(kernel, spec)
    return "x".join(map(str, cfg))


def backward_for(kernel: str, spec):
    """run_backward(q, k, v, o, lse, do, causal, sm_scale) -> (dq, dk, dv) for one spec."""
    kernel, switches = parse_kernel(kernel)
    if kernel == "fused":
        return functools.partial(host.backward, configs=(spec, None), fused_dq=True,
                                 **switches)
    return functools.partial(host.backward, configs=spec, **switches)


RAGGED = ((2, 3, 333), (3, 2, 257))  # (B, H, N) of the ragged checks, beside the timing case


def warm(jobs) -> dict:
    """Compile each job's kernels for the timing length (a one-head input: same
    specialisations) and for the ragged checks, so that the timed process compiles nothing;
    return {job: why} for those that failed."""
    from flashcourse import runtime

    device = runtime.setup(verbose=False).device
    dtype = torch.float16 if device == "cuda" else torch.float32
    failures = {}
    for job in jobs:
        d, causal, n, kernel, spec = job
        q, k, v, do = (torch.randn(1, 1, n, d, device=device, dtype=dtype) for _ in range(4))
        backward = backward_for(kernel, spec)
        try:
            o, lse = host.forward(q, k, v, causal)
            backward(q, k, v, o, lse, do, causal)
            verify.check_backward(dtype, [(*bhn, d) for bhn in RAGGED], (causal,),
                                  attention=functools.partial(_with_backward, backward=backward),
                                  custom_scale=True)
            torch.cuda.synchronize()
        except AssertionError:
            pass  # a wrong config: the timed process reports it
        except Exception as err:  # noqa: BLE001
            failures[job] = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:100]}"
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("explore-results"))
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--d", default="64,128", help="head dims to explore")
    parser.add_argument("--kernels", default=",".join(CANDIDATES),
                        help="which candidate lists to time: dkdv, dq, fused, pair, each "
                        "with +tma and +ws suffixes if wanted")
    args = parser.parse_args()
    kernels = [name for name in args.kernels.split(",") if name]
    head_dims = {int(d) for d in args.d.split(",") if d}
    chosen = [(d, causal) for d, causal in CASES if d in head_dims]
    try:
        for name in kernels:
            parse_kernel(name)
    except ValueError as err:
        raise SystemExit(f"--kernels: {err}") from None
    if not torch.cuda.is_available():
        print("gpu/explore_bwd.py times kernels on a CUDA GPU; there is none here.")
        return 0
    from flashcourse import runtime

    runtime.setup(verbose=False)
    print(bench.environment(), flush=True)
    start = time.time()
    jobs = sorted({(d, causal, args.n, kernel, spec) for d, causal in chosen
                   for kernel in kernels for spec in configs_for(kernel, d)})
    chunks = [jobs[i::args.workers] for i in range(args.workers)]
    failures: dict = {}
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for part in pool.map(warm, chunks):
            failures.update(part)
    print(f"compiled {len(jobs)} backward configs in {time.time() - start:.0f} s, "
          f"{len(failures)} failed", flush=True)
    rows = []
    for d, causal in chosen:
        case = cases.Case("fwdbwd", "fp16", d, args.n, causal)
        q, k, v, do = cases.make_inputs(case, requires_grad=True)
        scale = d ** -0.5
        with torch.no_grad():
            o, lse = host.forward(q, k, v, causal)
        cudnn = providers.make_call("sdpa-cudnn", causal, scale)
        o_cudnn = cudnn(q, k, v)

        def run_cudnn(o_cudnn=o_cudnn, q=q, k=k, v=v, do=do):
            return torch.autograd.grad(o_cudnn, (q, k, v), do, retain_graph=True)

        entries = []
        for kernel in kernels:
            for spec in configs_for(kernel, d):
                job = (d, causal, args.n, kernel, spec)
                backward = backward_for(kernel, spec)
                row = {"dtype": "fp16", "d": d, "causal": causal, "N": args.n,
                       "kernel": kernel, "config": config_name(kernel, spec), "backward_ms": "",
                       "spread_pct": "", "cudnn_backward_ms": "", "cudnn_spread_pct": "",
                       "vs_cudnn_bwd": "", "status": ""}
                rows.append(row)
                if job in failures:
                    row["status"] = "compile failed: " + failures[job]
                    continue

                def run(backward=backward, q=q, k=k, v=v, o=o, lse=lse, do=do,
                        causal=causal):
                    return backward(q, k, v, o, lse, do, causal)

                attention = functools.partial(_with_backward, backward=backward)

                problem = harness.check_against_fp32(
                    case, q, k, v, do, lambda q, k, v, f=attention, c=causal: f(q, k, v, c))
                try:  # ragged N, B > 1, H > 1, (B, N, H, d) views too
                    verify.check_backward(torch.float16, [(*bhn, d) for bhn in RAGGED],
                                          (causal,), attention=attention, custom_scale=True)
                except AssertionError as err:
                    problem = problem or str(err)
                if problem:
                    row["status"] = "WRONG " + problem
                    continue
                entries.append((row, run))
        times = {id(row): [] for row, _ in entries}
        cudnn_times = []
        for _ in range(args.repeats):
            cudnn_times.append(bench.median_ms(run_cudnn, rep_ms=40, warmup_ms=10))
            for row, run in entries:
                times[id(row)].append(bench.median_ms(run, rep_ms=40, warmup_ms=10))
        cudnn_ms = statistics.median(cudnn_times)
        case_rows = [row for row in rows if row["d"] == d and row["causal"] == causal]
        for row in case_rows:
            row.update(cudnn_backward_ms=round(cudnn_ms, 4),
                       cudnn_spread_pct=harness.spread_pct(cudnn_times))
        for row, _ in entries:
            ms = statistics.median(times[id(row)])
            row.update(backward_ms=round(ms, 4), spread_pct=harness.spread_pct(times[id(row)]),
                       vs_cudnn_bwd=round(cudnn_ms / ms, 3), status="ok")
        print(f"d={d} causal={causal} N={args.n}: cuDNN backward {cudnn_ms:.3f} ms "
              f"(spread {harness.spread_pct(cudnn_times)}%)", flush=True)
        for row in case_rows:
            print(f"  {row['kernel']:11s} {row['config']:12s} {row['backward_ms']!s:>8s} ms "
                  f"cudnn x{row['vs_cudnn_bwd']!s:6s} spread {row['spread_pct']!s:>5s}% "
                  f"{row['status'][:90]}", flush=True)
        torch.cuda.empty_cache()
    bench.write_csv(args.out / "explore-bwd.csv", rows)
    print(f"total {time.time() - start:.0f} s")
    return 0


def _with_backward(q, k, v, causal, backward, sm_scale=None):
    """Attention whose backward is run_backward `backward` (for the fp32 checks)."""
    from flashcourse.kernels import attention

    return attention.FlashAttentionFunction.apply(q, k, v, causal, sm_scale, host.forward,
                                                  backward)


if __name__ == "__main__":
    sys.exit(main())
