"""Any head dim up to 256 in the reference kernels, on a CUDA GPU: checks and the cost of padding.

    python gpu/check_head_dims.py [--out DIR] [--repeats 3] [--n 4096] [--sweep]
    python gpu/check_head_dims.py --interpreter   # smoke test of this script on a CPU

The launchers run a head dim that is not a power of two zero-padded to the next one
(host.run_at_kernel_width): 80 and 96 run at 128, 160 at 256. This script

1. with --sweep, times candidate tiles at head dim 256 (the forward, the backward's two
   kernels, lesson 9's block-sparse forward on the causal mask; fp16, causal and not), each
   checked against fp32 first, and runs the rest with the fastest (printed: tiles.py's entries);
2. checks, in worker processes, the compiled kernels at d = 80, 96, 160 and 256 in fp16 and
   bf16 against float64: the reference forward (o and lse) and backward on ragged N, B and
   H > 1, causal and not, (B, N, H, d) views, a custom sm_scale, and scores of about 1e3
   (forward); lesson 9's block-sparse forward, GQA forward and paged split-KV decoding;
3. times d = 80 and 96 against 128 and 160 against 256, forward and forward + backward, fp16
   and bf16, causal and not (B * N = 32k tokens, H = 16), with SDPA's cuDNN and flash backends
   at the same shapes: the median of --repeats interleaved repetitions and their spread.

Writes 08-head-dims.csv into --out. Exits 1 on any mismatch; without CUDA it says so and
exits 0.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # flashcourse is imported once Triton's mode is chosen
LESSON_9 = ROOT / "lessons" / "09-modern-attention.qmd"
LESSON_9_KERNELS = ("exercise-sparse-kernel", "exercise-gqa-kernel", "exercise-split-size",
                    "exercise-paged-split", "exercise-merge-states")

CHECKED_DIMS = (80, 96, 160, 256)
TIMED_DIMS = {128: (80, 96, 128), 256: (160, 256)}  # kernel width: the head dims run at it
LESSON_9_DIMS = (80, 256)
# Candidates at d = 256, (BLOCK_M, BLOCK_N, num_warps, num_stages); the dK/dV kernel's BLOCK_N
# is a multiple of its BLOCK_M, the dQ kernel's BLOCK_M of its BLOCK_N (the causal diagonal).
SWEEP = {
    "forward": [(64, 64, 4, 2), (64, 32, 4, 2), (64, 64, 8, 2), (128, 64, 8, 2),
                (128, 32, 8, 2)],
    "dkdv": [(32, 64, 8, 2), (64, 64, 8, 2), (32, 32, 4, 2), (32, 64, 4, 2)],
    "dq": [(64, 32, 4, 2), (64, 64, 8, 2), (128, 32, 8, 2), (32, 32, 4, 2)],
    "sparse": [(64, 64, 4, 2), (128, 64, 8, 2), (64, 32, 4, 2)],
}
SDPA = ("sdpa-cudnn", "sdpa-flash")


def setup(interpreter: bool, chosen: dict | None = None):
    """Pick Triton's mode (before flashcourse defines a kernel) and put the chosen d = 256
    tiles into the table; returns the runtime."""
    os.environ["FLASHCOURSE_INTERPRET"] = "1" if interpreter else "0"
    from flashcourse import runtime
    from flashcourse.kernels import tiles

    for name, value in (chosen or {}).items():
        if name == "SPARSE_CONFIGS":
            tiles.SPARSE_CONFIGS[256] = value
        else:
            setattr(tiles, name, value)
    return runtime.setup(verbose=False)


def lesson9_kernels():
    from flashcourse.authoring import cells

    return cells.load_cells(LESSON_9, list(LESSON_9_KERNELS), prelude=cells.TRITON_PRELUDE)


def dtypes(interpreter: bool) -> dict:
    import torch

    if interpreter:  # the interpreter computes bf16 tl.dot wrongly
        return {"fp32": torch.float32, "fp16": torch.float16}
    return {"fp16": torch.float16, "bf16": torch.bfloat16}


TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 2e-2}  # verify.tolerance's, by name


# ---------------------------------------------------------------- checks against float64


def check_reference(d: int, dtype_name: str, small: bool) -> list[tuple[bool, str]]:
    """host.forward (o, lse) and host.backward against float64 autograd."""
    import torch

    from flashcourse.kernels import attention, host, verify

    dtype, atol = dtypes(small)[dtype_name], TOLERANCE[dtype_name]
    device = "cpu" if small else "cuda"
    cases = [  # (B, H, N, layout, sm_scale, large logits)
        (2, 3, 45 if small else 333, "bnhd", None, False),
        (1, 2, 30 if small else 1000, "bhnd", 0.05, False),
        (2, 2, 20 if small else 257, "bhnd", 0.05, True),
    ]
    results = []
    for number, (B, H, N, layout, sm_scale, large) in enumerate(cases):
        for causal in (False, True):
            if large:
                q, k, v = attention.make_inputs(B, H, N, d, dtype, device, seed=number,
                                                large_logits=True, sm_scale=sm_scale)
            else:
                q, k, v = verify.make_qkv(B, H, N, d, dtype, device, seed=number, layout=layout)
            label = (f"reference d={d} {dtype_name} B={B} H={H} N={N} {layout} "
                     f"{'causal' if causal else 'full'} sm_scale={sm_scale}"
                     f"{' scores ~1e3' if large else ''}")
            o, lse = host.forward(q, k, v, causal, sm_scale)
            q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in (q, k, v))
            ref, ref_lse = attention.standard_attention(q64, k64, v64, causal, sm_scale,
                                                        return_lse=True)
            err, ok = verify.max_error(o, ref.detach(), atol)
            lse_err, lse_ok = verify.max_error(lse, ref_lse.detach(), atol)
            problems = [] if ok and lse_ok else [f"o {err:.3g}, lse {lse_err:.3g}"]
            if not large:  # gradients of near one-hot softmaxes say little about the kernel
                do = torch.randn_like(q)
                grads = host.backward(q, k, v, o, lse, do, causal, sm_scale)
                ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
                problems += verify.gradient_problems(grads, ref_grads, atol)
            results.append((not problems, f"{label}: " + ("; ".join(problems) or
                                                          f"ok (o max error {err:.1e})")))
    return results


def check_lesson9(d: int, dtype_name: str, small: bool) -> list[tuple[bool, str]]:
    """Lesson 9's block-sparse forward, GQA forward and paged split-KV decoding."""
    import torch

    from flashcourse.kernels import modern_attention as ma

    kernels = lesson9_kernels()
    dtype, atol = dtypes(small)[dtype_name], TOLERANCE[dtype_name] * 2
    device = "cpu" if small else "cuda"
    gen = torch.Generator().manual_seed(d)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)

    def verdict(label, out, expected):
        err = float((out.double().cpu() - expected).abs().max())
        return (err <= atol, f"{label} d={d} {dtype_name}: max error {err:.2e}")

    B, H, N = (2, 2, 45) if small else (2, 3, 1000)
    docs = ma.packed_documents([N // 3, N // 2], padding=N - N // 3 - N // 2)
    window = N // 4
    mask = ma.dense_mask(N, N, left=window, right=0, docs=docs)
    q, k, v = (randn(B, N, H, d).transpose(1, 2) for _ in range(3))  # (B, N, H, d) views
    out = ma.sparse_attention(kernels.sparse_attention_kernel, q.to(device), k.to(device),
                              v.to(device), mask, docs, left=window, right=0, sm_scale=0.1)
    results = [verdict(f"sparse B={B} H={H} N={N} causal window in documents", out,
                       ma.masked_reference(q, k, v, mask, sm_scale=0.1))]
    q, k, v = randn(B, 8, N, d), randn(B, 2, N, d), randn(B, 2, N, d)
    out = torch.empty_like(q, device=device)
    ma.launch_gqa(kernels.gqa_attention_kernel, q.to(device), k.to(device), v.to(device), out,
                  *((16, 16) if small else (64, 64)))
    results.append(verdict(f"gqa B={B} H=8 H_KV=2 N={N}", out, ma.gqa_reference(q, k, v)))
    lengths = [70, 0, 33] if small else [5000, 1, 0, 2049]
    n_max = max(lengths)
    q, k, v = randn(len(lengths), 8, d), randn(len(lengths), 2, n_max, d), \
        randn(len(lengths), 2, n_max, d)
    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths, page_size=16, seed=d)
    block_n = ma.tiles.DECODE_BLOCK_N["interpreter" if small else "gpu"]
    out = ma.paged_split_decode(kernels.paged_split_kernel, kernels.merge_states_kernel,
                                q.to(device), k_pages.to(device), v_pages.to(device),
                                table.to(device), torch.tensor(lengths, dtype=torch.int32,
                                                               device=device),
                                split_size=4 * block_n, block_n=block_n, max_len=n_max)
    results.append(verdict(f"paged split-KV decoding lengths {lengths}", out,
                           ma.decode_reference(q, k, v, lengths)))
    return results


def run_check(job, small: bool, chosen: dict):
    """Worker: one check job, after choosing the runtime and the tiles."""
    setup(small, chosen)
    kind, d, dtype_name = job
    check = check_reference if kind == "reference" else check_lesson9
    try:
        return check(d, dtype_name, small)
    except Exception as err:  # noqa: BLE001  (report it and go on with the other jobs)
        first = (str(err).strip().splitlines() or [""])[0][:200]
        return [(False, f"{kind} d={d} {dtype_name}: {type(err).__name__}: {first}")]


# ---------------------------------------------------------------- timing


def wall_ms(fn, **_) -> float:
    """The interpreter's stand-in for bench.median_ms: one run's wall time (meaningless)."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def course_call(mode: str, causal: bool, sm_scale: float, forward_config=None,
                backward_configs=None):
    """(run(q, k, v, do), attend(q, k, v) -> o) of the reference: run is host.forward, or
    autograd through both kernels."""
    import torch

    from flashcourse.kernels import attention, host

    forward = functools.partial(host.forward, config=forward_config)
    backward = functools.partial(host.backward, configs=backward_configs)

    def attend(q, k, v):
        return attention.FlashAttentionFunction.apply(q, k, v, causal, sm_scale, forward,
                                                      backward)

    def run(q, k, v, do):
        if mode == "fwd":
            with torch.no_grad():
                return forward(q, k, v, causal, sm_scale)[0]
        return torch.autograd.grad(attend(q, k, v), (q, k, v), do)

    return run, attend


def sweep_options(kernel: str, config) -> dict:
    """course_call's options that try `config` for one kernel, the table's for the others."""
    from flashcourse.kernels import tiles

    kv_config, q_config = tiles.LADDER_BACKWARD_WIDE
    return {"forward": dict(forward_config=config),
            "dkdv": dict(backward_configs=(config, q_config)),
            "dq": dict(backward_configs=(kv_config, config))}.get(kernel, {})


def sdpa_run(provider: str, mode: str, causal: bool, sm_scale: float):
    import torch

    from flashcourse.bench import providers

    call = providers.make_call(provider, causal, sm_scale)

    def run(q, k, v, do):
        if mode == "fwd":
            with torch.no_grad():
                return call(q, k, v)
        return torch.autograd.grad(call(q, k, v), (q, k, v), do)

    return run


def timed_inputs(mode, dtype_name, d, n, causal, small, batch=None):
    """(case, q, k, v, do): B * N = 32k tokens and H = 16 (cases.Case) unless `batch` is
    given; one tiny head pair in the interpreter."""
    import torch

    from flashcourse.bench import cases

    case = cases.Case(mode, "fp16" if small else dtype_name, d, n, causal)
    if small:
        shape, dtype, device = (1, 2, n, d), torch.float32, "cpu"
    else:
        shape, dtype, device = ((batch or case.batch), case.heads, n, d), \
            cases.torch_dtype(dtype_name), "cuda"
    xs = [torch.randn(shape, dtype=dtype, device=device) for _ in range(4)]
    if mode == "fwdbwd":
        xs[:3] = [x.requires_grad_(True) for x in xs[:3]]
    return (case, *xs)


def sparse_launch(kernels, q, k, v, config):
    """Lesson 9's sparse forward on the causal block map of q's length, with `config`."""
    import torch

    from flashcourse.kernels import modern_attention as ma

    n = q.shape[2]
    bm, bn, warps, stages = config
    lists = ma.block_list_tensors(ma.classify_rule(n, bm, bn, right=0), q.device)
    out = torch.empty_like(q)
    docs = torch.zeros(n, dtype=torch.int32, device=q.device)
    return functools.partial(ma.launch_sparse, kernels.sparse_attention_kernel, q, k, v, out,
                             docs, ma.UNLIMITED, 0, lists, bm, bn, num_warps=warps,
                             num_stages=stages)


def warm(job, n: int, small: bool, chosen: dict) -> list[tuple[bool, str]]:
    """Worker: compile what the main process will time, on one batch of the timing shape
    (the same specialisations): job (kind, dtype, d, causal, config), kind a mode ("fwd",
    "fwdbwd") or a SWEEP kernel."""
    setup(small, chosen)
    kind, dtype_name, d, causal, config = job
    mode = "fwd" if kind in ("fwd", "forward", "sparse") else "fwdbwd"
    try:
        _, q, k, v, do = timed_inputs(mode, dtype_name, d, n, causal, small, batch=1)
        if kind == "sparse":
            sparse_launch(lesson9_kernels(), q, k, v, config)()
        else:
            course_call(mode, causal, d ** -0.5, **sweep_options(kind, config))[0](q, k, v, do)
        if not small:
            import torch

            torch.cuda.synchronize()
        return []
    except Exception as err:  # noqa: BLE001  (the main process reports the job)
        first = (str(err).strip().splitlines() or [""])[0][:150]
        return [(False, f"compile {job}: {type(err).__name__}: {first}")]


def time_round_robin(entries, repeats, timer) -> dict:
    """{key: [ms per repeat]} of entries (key, fn), each timed once per repeat in turn."""
    times = {key: [] for key, _ in entries}
    for _ in range(repeats):
        for key, fn in entries:
            times[key].append(timer(fn, warmup_ms=10, rep_ms=40))
    return times


def summary(times: list[float]) -> tuple[float, float | str]:
    """(median ms, spread %) of repeated timings."""
    from flashcourse.bench import harness

    return round(statistics.median(times), 4), harness.spread_pct(times)


def sweep(n: int, repeats: int, small: bool, timer) -> tuple[dict, list[str]]:
    """Time SWEEP's d = 256 candidates at the timing shape (fp16; the dK/dV and dQ ones as
    forward + backward), each checked against fp32 first; returns the fastest over causal and
    not as tiles.py entries, and one line per candidate."""
    from flashcourse.bench import harness

    lines, totals = [], {}  # totals: (kernel, config) -> [median ms per mask]
    kernels = lesson9_kernels()
    for causal in (False, True):
        mask = "causal" if causal else "full"
        entries = []
        for kernel, configs in SWEEP.items():
            if kernel == "sparse" and not causal:
                continue  # the sparse kernel is timed on the causal mask only
            mode = "fwd" if kernel in ("forward", "sparse") else "fwdbwd"
            case, q, k, v, do = timed_inputs(mode, "fp16", 256, n, causal, small)
            for config in configs:
                if kernel == "sparse":
                    entries.append(((kernel, config), sparse_launch(kernels, q, k, v, config)))
                    continue
                run, attend = course_call(mode, causal, 256 ** -0.5,
                                          **sweep_options(kernel, config))
                fn = functools.partial(run, do=None) if mode == "fwd" else attend
                problem = "" if small else harness.check_against_fp32(case, q, k, v, do, fn)
                if problem:
                    lines.append(f"sweep {kernel} {config} {mask}: WRONG {problem}")
                    continue
                entries.append(((kernel, config), functools.partial(run, q, k, v, do)))
        for key, values in time_round_robin(entries, repeats, timer).items():
            ms, spread = summary(values)
            lines.append(f"sweep {key[0]} {key[1]} {mask}: {ms:.3f} ms (spread {spread}%)")
            totals.setdefault(key, []).append(ms)
    best = {}
    for kernel in SWEEP:
        masks = 1 if kernel == "sparse" else 2
        timed = {key[1]: sum(ms) for key, ms in totals.items()
                 if key[0] == kernel and len(ms) == masks}
        if timed:
            best[kernel] = min(timed, key=timed.get)
    chosen = {}
    if "forward" in best:
        chosen["TUNED_WIDE"] = best["forward"]
    if "dkdv" in best and "dq" in best:
        chosen["LADDER_BACKWARD_WIDE"] = (best["dkdv"], best["dq"])
    if "sparse" in best:
        chosen["SPARSE_CONFIGS"] = best["sparse"]
    return chosen, lines


def time_padding(n: int, repeats: int, small: bool, timer, csv: Path) -> tuple[list[dict], int]:
    """Rows of the padding cost: every d of TIMED_DIMS beside its kernel width and SDPA's
    backends, interleaved within each (mode, dtype, causal); and how many were wrong. The rows
    so far are written to `csv` after each (mode, dtype, causal)."""
    import torch

    from flashcourse import bench
    from flashcourse.bench import harness

    rows, wrong = [], 0
    backends = () if small else SDPA
    for mode in ("fwd", "fwdbwd"):
        for dtype_name in dtypes(small):
            for causal in (False, True):
                entries, group = [], []
                for width, dims in TIMED_DIMS.items():
                    for d in dims:
                        case, q, k, v, do = timed_inputs(mode, dtype_name, d, n, causal, small)
                        run, attend = course_call(mode, causal, d ** -0.5)
                        fn = functools.partial(run, do=None) if mode == "fwd" else attend
                        problem = "" if small else harness.check_against_fp32(case, q, k, v, do,
                                                                              fn)
                        wrong += bool(problem)
                        row = {"mode": mode, "dtype": dtype_name, "causal": causal, "N": n,
                               "B": q.shape[0], "H": q.shape[1], "d": d, "kernel d": width,
                               "status": f"WRONG: {problem}" if problem else "ok"}
                        group.append((row, case))
                        entries.append(((d, "course"), functools.partial(run, q, k, v, do)))
                        for provider in backends:
                            sdpa = sdpa_run(provider, mode, causal, d ** -0.5)
                            try:
                                sdpa(q, k, v, do)
                                torch.cuda.synchronize()
                            except Exception as err:  # noqa: BLE001  (a backend refusing d)
                                row[f"{provider} note"] = (f"failed: {type(err).__name__}: "
                                                           f"{str(err)[:80]}")
                                continue
                            entries.append(((d, provider), functools.partial(sdpa, q, k, v, do)))
                times = time_round_robin(entries, repeats, timer)
                at_width = {width: statistics.median(times[(width, "course")])
                            for width in TIMED_DIMS}
                for row, case in group:
                    d = row["d"]
                    ms, spread = summary(times[(d, "course")])
                    row.update({"course ms": ms, "course spread %": spread,
                                "course TFLOP/s": round(case.flops() / (ms * 1e-3) / 1e12, 1),
                                "vs kernel d": round(ms / at_width[row["kernel d"]], 3)})
                    for provider in backends:
                        if (d, provider) in times:
                            p_ms, p_spread = summary(times[(d, provider)])
                            row.update({f"{provider} ms": p_ms, f"{provider} spread %": p_spread,
                                        f"course/{provider}": round(p_ms / ms, 3)})
                    rows.append(row)
                    print(f"{mode:6s} {dtype_name} {'causal' if causal else 'full  '} d={d:3d} "
                          f"(runs at {row['kernel d']}): {ms:.3f} ms, spread {spread}%, "
                          f"x{row['vs kernel d']} the d={row['kernel d']} time; "
                          + ", ".join(f"course/{p} {row.get(f'course/{p}', '-')}"
                                      for p in backends) + f" [{row['status']}]", flush=True)
                bench.write_csv(csv, rows)  # SDPA notes only where a backend failed
                if not small:
                    torch.cuda.empty_cache()
    return rows, wrong


def in_workers(fn, jobs, workers: int) -> list[tuple[bool, str]]:
    """fn(job) for every job in spawned worker processes (Triton's cache on disk is shared, so
    the main process then finds their kernels compiled); their (ok, line) results."""
    if not jobs:
        return []
    with mp.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
        return [result for part in pool.map(fn, jobs) for result in part]


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("head-dims-results"))
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--sweep", action="store_true", help="time d = 256 tiles first")
    parser.add_argument("--interpreter", action="store_true",
                        help="run in Triton's interpreter on the CPU (tiny sizes, no timings)")
    args = parser.parse_args()
    small = args.interpreter
    import torch

    if not small and not torch.cuda.is_available():
        print("gpu/check_head_dims.py checks and times kernels on a CUDA GPU; there is none "
              "here (use --interpreter for a smoke test on a CPU).")
        return 0
    setup(small)
    from flashcourse import bench

    timer = wall_ms if small else bench.median_ms
    n = 64 if small else args.n
    print(bench.environment(), flush=True)
    start = time.time()
    results, chosen = [], {}
    if args.sweep:
        jobs = [(kernel, "fp16", 256, causal, config) for kernel, configs in SWEEP.items()
                for config in configs for causal in (False, True)
                if kernel != "sparse" or causal]
        results += in_workers(functools.partial(warm, n=n, small=small, chosen={}), jobs,
                              args.workers)
        chosen, lines = sweep(n, args.repeats, small, timer)
        print("\n".join(lines) + f"\nchosen d = 256 tiles (tiles.py): {chosen} "
              f"({time.time() - start:.0f} s)", flush=True)
        setup(small, chosen)
    checks = [("reference", d, name) for d in CHECKED_DIMS for name in dtypes(small)]
    checks += [("lesson9", d, name) for d in LESSON_9_DIMS for name in dtypes(small)]
    results += in_workers(functools.partial(run_check, small=small, chosen=chosen), checks,
                          args.workers)
    timed = [(mode, name, width, causal, None) for mode in ("fwd", "fwdbwd")
             for name in dtypes(small) for width in TIMED_DIMS for causal in (False, True)]
    results += in_workers(functools.partial(warm, n=n, small=small, chosen=chosen), timed,
                          args.workers)
    for ok, line in results:
        print(("ok   " if ok else "FAIL ") + line)
    failures = sum(not ok for ok, _ in results)
    print(f"{len(results) - failures} of {len(results)} checks match float64, "
          f"{failures} failed ({time.time() - start:.0f} s so far)", flush=True)
    rows, wrong = time_padding(n, args.repeats, small, timer, args.out / "08-head-dims.csv")
    print(f"wrote {args.out / '08-head-dims.csv'} ({len(rows)} rows) in "
          f"{time.time() - start:.0f} s")
    return 1 if failures or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
