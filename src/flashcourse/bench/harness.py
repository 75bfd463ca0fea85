"""Attention benchmark: naive torch, torch.compile, SDPA with each backend pinned, and the
course's Triton FlashAttention (every step of its optimisation ladder); on request lesson 6's
teaching kernels (--providers ...,lesson6) and Triton's tutorial (--tutorial FILE).

    python -m flashcourse.bench.harness [--quick] [--out DIR] [--modes fwd,fwdbwd] [--no-ladder]

Timing: triton.testing.do_bench (L2 flushed before every run), median. FLOPs: 4*B*H*N*N*d,
halved when causal, 2.5x for the backward (models/traffic.py, attention_flops); fwd+bwd rows
count forward + backward = 3.5x. B*N = 32k tokens, H = 32 for d = 64 and 16 for d = 128.

Every course-kernel case is checked against an fp32 reference before timing and again after;
a mismatch marks the row WRONG and makes the exit status 1. Writes, into --out:
08-attention-fwd.csv and 08-attention-fwdbwd.csv (one row per case, TFLOP/s per provider),
their -raw.csv twins (one row per measurement, with ms and status), 08-ladder.csv (one row per
case and step), every row with date, GPU and versions, and a PNG plot of each.
Without CUDA it says why and exits 0.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

from . import median_ms, write_csv
from .cases import (
    CHECKED,
    PROVIDERS,
    TUTORIAL,
    Case,
    ladder_cases,
    make_inputs,
    sweep_cases,
    torch_dtype,
)
from .providers import (
    fuse_attention_count,
    load_tutorial,
    make_call,
    skip_reason,
    tutorial_loaded,
)
from .report import plot_ladder, plot_sweep, summary, wide_rows

NO_CUDA = ("flashcourse.bench.harness: no CUDA GPU here, so there is nothing to measure (timings "
           "of the Triton interpreter on a CPU say nothing about GPU speed). Run this on a "
           "machine with an NVIDIA GPU; the course's recorded results are in assets/results/.")


# ---------------------------------------------------------------- progress


class Progress:
    """tqdm when it is installed, otherwise a one-line counter on stderr."""

    def __init__(self, total: int, desc: str):
        self.total, self.done, self.desc = total, 0, desc
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)
        except ImportError:
            self.bar = None

    def step(self, text: str = "") -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(text[:60])
            self.bar.update(1)
        else:
            print(f"\r{self.desc}: {self.done}/{self.total} {text[:60]:60s}", end="",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            print(file=sys.stderr)


# ---------------------------------------------------------------- inputs and checks


CHECK_SLICES = ((0, 0), (-1, -1))  # (batch, head) slices whose gradients are checked


def check_against_fp32(case: Case, q, k, v, do, fn) -> str:
    """'' when a provider's kernel (fn) matches an fp32 reference; otherwise what is wrong.

    Outputs are compared everywhere (reference in query chunks); gradients on the first and
    the last (batch, head) slice, against autograd through the fp32 reference.
    """
    import torch

    from ..kernels import verify

    atol = 2e-2
    sm_scale = 1.0 / math.sqrt(case.d)
    if case.mode == "fwd":
        with torch.no_grad():
            o = fn(q, k, v)
            ref, _ = verify.reference_fp32(q, k, v, case.causal, sm_scale)
        err, ok = verify.max_error(o, ref, atol)
        return "" if ok else f"output max error {err:.3g} > {atol:g}"
    o = fn(q, k, v)
    grads = torch.autograd.grad(o, (q, k, v), do)
    problems = []
    for b, h in CHECK_SLICES:
        bi, hi = b % case.batch, h % case.heads
        rq, rk, rv, rdo = (x[bi:bi + 1, hi:hi + 1].detach().float() for x in (q, k, v, do))
        rq, rk, rv = (x.requires_grad_(True) for x in (rq, rk, rv))
        ro, _ = verify.reference_fp32(rq, rk, rv, case.causal, sm_scale)
        rgrads = torch.autograd.grad(ro, (rq, rk, rv), rdo)
        err, ok = verify.max_error(o[bi:bi + 1, hi:hi + 1], ro, atol)
        if not ok:
            problems.append(f"output ({bi},{hi}) max error {err:.3g}")
        mine = [g[bi:bi + 1, hi:hi + 1] for g in grads]
        problems += [f"({bi},{hi}) {problem}"
                     for problem in verify.gradient_problems(mine, rgrads, atol)]
    return "; ".join(problems)


def spread_pct(times: list[float]) -> float | str:
    """(slowest - fastest) / median of repeated timings, in percent ('' for one timing)."""
    if len(times) < 2:
        return ""
    return round(100 * (max(times) - min(times)) / statistics.median(times), 1)


def bench_case(case: Case, providers, rep_ms: int, warmup_ms: int,
               repeats: int = 1) -> list[dict]:
    """One row per provider: median ms over `repeats` timings taken round-robin (every
    provider once, then again), their spread, TFLOP/s, and the check status of the checked
    providers (CHECKED), which are compared with fp32 before the first and after the last."""
    import torch

    sm_scale = 1.0 / math.sqrt(case.d)
    rows, timed = [], []
    q, k, v, do = make_inputs(case, requires_grad=case.mode == "fwdbwd")
    for provider in providers:
        row = {"mode": case.mode, "dtype": case.dtype, "d": case.d, "N": case.n,
               "causal": case.causal, "B": case.batch, "H": case.heads, "provider": provider,
               "ms": "", "tflops": "", "spread_pct": "", "repeats": "", "status": "",
               "note": ""}
        rows.append(row)
        reason = skip_reason(provider, case)
        if reason:
            row["status"] = reason
            continue
        call = make_call(provider, case.causal, sm_scale)
        if case.mode == "fwd":
            def run(call=call, q=q, k=k, v=v):
                with torch.no_grad():
                    return call(q, k, v)
        else:
            def run(call=call, q=q, k=k, v=v, do=do):
                o = call(q, k, v)
                return torch.autograd.grad(o, (q, k, v), do)
        before_fuse = fuse_attention_count()
        try:
            if provider in CHECKED:
                problem = check_against_fp32(case, q, k, v, do, call)
                if problem:
                    row["status"] = f"WRONG before timing: {problem}"
                    continue
            run()  # compile / warm up; raises if the backend cannot take this case
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001  (e.g. "No available kernel" for a backend)
            _mark_failure(row, err, provider)
            continue
        if provider == "compile":
            fused = fuse_attention_count() - before_fuse
            row["note"] = (f"Inductor rewrote it into SDPA ({fused}x)" if fused > 0 else
                           "no SDPA rewrite seen (counter unchanged)")
        timed.append((row, run, call, []))
    for _ in range(repeats):
        for row, run, _call, times in timed:
            if row["status"]:
                continue
            try:
                times.append(median_ms(run, warmup_ms, rep_ms,
                                       grad_to_none=[q, k, v] if case.mode == "fwdbwd"
                                       else None))
            except Exception as err:  # noqa: BLE001  (out of memory on a later repeat)
                _mark_failure(row, err, row["provider"])
    for row, _run, call, times in timed:
        if row["status"]:
            continue
        if row["provider"] in CHECKED:
            problem = check_against_fp32(case, q, k, v, do, call)
            if problem:
                row["status"] = f"WRONG after timing: {problem}"
                continue
        ms = statistics.median(times)
        row.update(ms=round(ms, 4), tflops=round(case.flops() / (ms * 1e-3) / 1e12, 1),
                   spread_pct=spread_pct(times), repeats=len(times),
                   status="ok" if row["provider"] in CHECKED else "timed")
        if row["provider"] == "course":
            from ..kernels import host

            if host.BROKEN_STEPS:
                row["note"] = f"fell back from steps {sorted(host.BROKEN_STEPS)}"
    return rows


def _mark_failure(row: dict, err: Exception, provider: str) -> None:
    import torch

    if isinstance(err, torch.cuda.OutOfMemoryError):
        row["status"] = "skipped: out of memory"
        torch.cuda.empty_cache()
        return
    text = (str(err).strip().splitlines() or [""])[0][:120]
    row["status"] = f"unavailable: {type(err).__name__}: {text}"
    if provider in CHECKED:
        row["status"] = f"WRONG: {provider} raised {type(err).__name__}: {text}"


# ---------------------------------------------------------------- ladder


def time_ladder(cases, rep_ms: int = 50, warmup_ms: int = 10, autotune: bool = True,
                progress: Progress | None = None, repeats: int = 1) -> list[dict]:
    """Every ladder step on every case: check (ragged, B>1, H>1, transposed views; and the
    timing case itself) before timing, time `repeats` times round-robin with cuDNN and (when
    loaded) Triton's tutorial, check again. One row per (case, step), then the tutorial's."""
    import torch

    from ..kernels import host, ladder, tiles, verify

    rows = []
    for case in cases:
        q, k, v, _ = make_inputs(case)
        ref, _ = verify.reference_fp32(q, k, v, case.causal)
        sm_scale = 1.0 / math.sqrt(case.d)
        entries = []  # (row, run, check) of everything timed round-robin on this case
        cudnn_times: list[float] = []
        try:
            cudnn = make_call("sdpa-cudnn", case.causal, sm_scale)
            with torch.no_grad():
                cudnn(q, k, v)

            def run_cudnn(f=cudnn, q=q, k=k, v=v):
                with torch.no_grad():
                    return f(q, k, v)
        except RuntimeError:
            run_cudnn = None
        for step in ladder.ladder_steps():
            row = _ladder_row(case, step.number, step.name)
            rows.append(row)
            if progress:
                progress.step(f"{case.label()} step {step.number}")
            ok, why = ladder.step_supported(step)
            if not ok:
                row["status"] = f"unsupported: {why}"
                continue
            tune = autotune and step.number in tiles.AUTOTUNE_STEPS
            try:
                config = None
                if tune:  # tune at the timing size, then check that config everywhere
                    host.forward(q, k, v, case.causal, step=step, autotune=True)
                    best = host.best_config(step)
                    config = (best["BLOCK_M"], best["BLOCK_N"], best["num_warps"],
                              best["num_stages"])
                cfg = config or ladder.config_for(step, case.d)
                row["config"] = "BM{}xBN{} w{} s{}".format(*cfg) + (" (autotuned)" if tune
                                                                       else "")

                def run(step=step, cfg=cfg, q=q, k=k, v=v, causal=case.causal):
                    return host.forward(q, k, v, causal, step=step, config=cfg)[0]

                def check(step=step, cfg=cfg, run=run, case=case, ref=ref, small=True):
                    return _ladder_check(step, cfg, case, run, ref, small)

                problem = check()
                if problem:
                    row["status"] = f"WRONG before timing: {problem}"
                    continue
                entries.append((row, run, check))
            except Exception as err:  # noqa: BLE001  (a compile failure marks this step only)
                row["status"] = "failed: " + (str(err).strip().splitlines() or [""])[0][:160]
        if tutorial_loaded() and not skip_reason(TUTORIAL, case):
            row = _ladder_row(case, len(ladder.ladder_steps()), "Triton tutorial")
            row["config"] = "the tutorial's own autotune"
            rows.append(row)
            tutorial = make_call(TUTORIAL, case.causal, sm_scale)

            def run_tutorial(f=tutorial, q=q, k=k, v=v):
                with torch.no_grad():
                    return f(q, k, v)

            def check_tutorial(run=run_tutorial, ref=ref, small=True):
                err, ok = verify.max_error(run(), ref, 2e-2)
                return "" if ok else f"timing case: max error {err:.3g}"

            try:
                problem = check_tutorial()
                if problem:
                    row["status"] = f"WRONG before timing: {problem}"
                else:
                    entries.append((row, run_tutorial, check_tutorial))
            except Exception as err:  # noqa: BLE001
                row["status"] = "failed: " + (str(err).strip().splitlines() or [""])[0][:160]
        times: dict[int, list[float]] = {id(row): [] for row, _, _ in entries}
        for _ in range(repeats):
            if run_cudnn is not None:
                cudnn_times.append(median_ms(run_cudnn, warmup_ms, rep_ms))
            for row, run, _check in entries:
                if row["status"]:
                    continue
                try:
                    times[id(row)].append(median_ms(run, warmup_ms, rep_ms))
                except Exception as err:  # noqa: BLE001  (e.g. out of memory): this row only
                    row["status"] = "failed: " + (str(err).strip().splitlines() or [""])[0][:160]
        cudnn_ms = statistics.median(cudnn_times) if cudnn_times else None
        base_ms = None
        for row, _run, check in entries:
            if row["status"]:
                continue
            problem = check(small=False)
            if problem:
                row["status"] = f"WRONG after timing: {problem}"
                continue
            ms = statistics.median(times[id(row)])
            base_ms = base_ms or (ms if row["step"] == 0 else None)
            row.update(ms=round(ms, 4), tflops=round(case.flops() / (ms * 1e-3) / 1e12, 1),
                       spread_pct=spread_pct(times[id(row)]), repeats=len(times[id(row)]),
                       vs_step0=round(base_ms / ms, 2) if base_ms else "",
                       vs_cudnn=round(cudnn_ms / ms, 2) if cudnn_ms else "",
                       cudnn_spread_pct=spread_pct(cudnn_times), status="ok")
        torch.cuda.empty_cache()
    return rows


def _ladder_row(case: Case, step: int, name: str) -> dict:
    return {"dtype": case.dtype, "d": case.d, "N": case.n, "causal": case.causal,
            "B": case.batch, "H": case.heads, "step": step, "name": name, "config": "",
            "ms": "", "tflops": "", "spread_pct": "", "repeats": "", "vs_step0": "",
            "vs_cudnn": "", "cudnn_spread_pct": "", "status": ""}


def _ladder_check(step, cfg, case, run, ref, small: bool = True) -> str:
    """'' or what is wrong: small ragged cases (B>1, H>1, transposed views, large logits with
    a custom sm_scale) and the case."""
    import torch

    from ..kernels import host, verify

    if small:
        try:
            verify.check_forward(
                lambda q, k, v, causal, sm_scale=None: host.forward(
                    q, k, v, causal, sm_scale, step=step, config=cfg),
                torch_dtype(case.dtype), [(2, 3, 333, case.d), (3, 2, 257, case.d)],
                (case.causal,), atol=2e-2, name=f"step {step.number}", custom_scale=True)
        except AssertionError as err:
            return str(err)
    with torch.no_grad():
        o = run()
    err, ok = verify.max_error(o, ref, 2e-2)
    return "" if ok else f"timing case: max error {err:.3g}"


# ---------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flashcourse bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sweep (fp16, N 1k and 4k)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"),
                        help="folder for the CSVs and PNGs (assets/results for the course)")
    parser.add_argument("--modes", default="fwd,fwdbwd", help="fwd, fwdbwd or both")
    parser.add_argument("--dtypes", default=None, help="fp16,bf16 (default: both; quick: fp16)")
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--no-ladder", action="store_true", help="skip the ladder timing")
    parser.add_argument("--no-autotune", action="store_true",
                        help="ladder steps 3 and 5 use the config table instead of autotune")
    parser.add_argument("--rep-ms", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=1,
                        help="time every cell this many times, round-robin across providers; "
                        "report the median and the spread")
    parser.add_argument("--tutorial", type=Path, default=None,
                        help="Triton's python/tutorials/06-fused-attention.py, timed beside "
                        "the course kernel (fp16) as the anchor a student would otherwise copy")
    parser.add_argument("--warmup-ms", type=int, default=10)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import torch
    except ImportError:
        print(NO_CUDA)
        return 0
    from .. import runtime

    if not torch.cuda.is_available() or runtime.current().interpreter:
        print(NO_CUDA)
        return 0
    dtypes = (args.dtypes.split(",") if args.dtypes else
              (["fp16"] if args.quick else ["fp16", "bf16"]))
    providers = [p for p in args.providers.split(",") if p]
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1.")
    if args.tutorial is not None:
        load_tutorial(args.tutorial)
        providers += [] if TUTORIAL in providers else [TUTORIAL]
    modes = [m for m in args.modes.split(",") if m]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    start = time.time()

    if not args.no_ladder:
        cases = ladder_cases(args.quick)
        from ..kernels import ladder

        progress = Progress(len(cases) * len(ladder.ladder_steps()), "ladder")
        rows = time_ladder(cases, args.rep_ms, args.warmup_ms, not args.no_autotune, progress,
                           args.repeats)
        progress.close()
        write_csv(out / "08-ladder.csv", rows)
        plot_ladder(out / "08-ladder.png", rows)
        failed |= any(r["status"].startswith("WRONG") for r in rows)
        for r in rows:
            print(f"ladder d={r['d']} {'causal' if r['causal'] else 'full':6s} step {r['step']} "
                  f"{r['name']:20s} {str(r['tflops']):>7s} TFLOP/s  x{r['vs_step0']!s:5s} "
                  f"vs cuDNN x{r['vs_cudnn']!s:5s} spread {r['spread_pct']!s:>5s}% "
                  f"{r['config']:28s} {r['status']}")

    all_rows = []
    for mode in modes:
        cases = sweep_cases(mode, args.quick, dtypes)
        progress = Progress(len(cases), f"sweep {mode}")
        rows = []
        for case in cases:
            rows += bench_case(case, providers, args.rep_ms, args.warmup_ms, args.repeats)
            progress.step(case.label())
        progress.close()
        name = "08-attention-fwd" if mode == "fwd" else "08-attention-fwdbwd"
        write_csv(out / f"{name}.csv", wide_rows(rows))
        write_csv(out / f"{name}-raw.csv", rows)
        plot_sweep(out / f"{name}.png", rows, "forward" if mode == "fwd" else
                   "forward + backward")
        failed |= any(r["status"].startswith("WRONG") for r in rows)
        all_rows += rows

    if all_rows:
        print(summary(all_rows))
    print(f"wrote results to {out} in {time.time() - start:.0f} s"
          + ("; SOME COURSE-KERNEL CHECKS FAILED (rows marked WRONG)" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
