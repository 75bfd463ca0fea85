"""Attention benchmark: naive torch, torch.compile, SDPA with each backend pinned, and the
course's Triton FlashAttention (every step of its optimisation ladder).

    python -m flashcourse.bench.harness [--quick] [--out DIR] [--modes fwd,fwdbwd] [--no-ladder]

Timing: triton.testing.do_bench (L2 flushed before every run), median. FLOPs: 4*B*H*N*N*d,
halved when causal, 2.5x for the backward (models/traffic.py, attention_flops); fwd+bwd rows
count forward + backward = 3.5x. B*N = 32k tokens, H = 32 for d = 64 and 16 for d = 128.

Every course-kernel case is checked against an fp32 reference before timing and again after;
a mismatch marks the row WRONG and makes the exit status 1. Writes, into --out:
07-attention-fwd.csv and 07-attention-fwdbwd.csv (one row per case, TFLOP/s per provider),
their -raw.csv twins (one row per measurement, with ms and status), 07-ladder.csv (one row per
case and step), every row with date, GPU and versions, and a PNG plot of each.
Without CUDA it says why and exits 0.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from . import median_ms, write_csv
from .cases import PROVIDERS, Case, ladder_cases, make_inputs, sweep_cases, torch_dtype
from .providers import fuse_attention_count, make_call, skip_reason
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


def check_course(case: Case, q, k, v, do, fn) -> str:
    """'' when the course kernel matches an fp32 reference; otherwise what is wrong.

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


def bench_case(case: Case, providers, rep_ms: int, warmup_ms: int) -> list[dict]:
    """One row per provider: ms, TFLOP/s, and the check status of the course kernel."""
    import torch

    sm_scale = 1.0 / math.sqrt(case.d)
    rows = []
    q, k, v, do = make_inputs(case, requires_grad=case.mode == "fwdbwd")
    for provider in providers:
        row = {"mode": case.mode, "dtype": case.dtype, "d": case.d, "N": case.n,
               "causal": case.causal, "B": case.batch, "H": case.heads, "provider": provider,
               "ms": "", "tflops": "", "status": "", "note": ""}
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
            if provider == "course":
                problem = check_course(case, q, k, v, do, call)
                if problem:
                    row["status"] = f"WRONG before timing: {problem}"
                    continue
            run()  # compile / warm up; raises if the backend cannot take this case
            torch.cuda.synchronize()
            ms = median_ms(run, warmup_ms, rep_ms,
                           grad_to_none=[q, k, v] if case.mode == "fwdbwd" else None)
            if provider == "course":
                problem = check_course(case, q, k, v, do, call)
                if problem:
                    row["status"] = f"WRONG after timing: {problem}"
                    continue
        except torch.cuda.OutOfMemoryError:
            row["status"] = "skipped: out of memory"
            torch.cuda.empty_cache()
            continue
        except Exception as err:  # noqa: BLE001  (e.g. "No available kernel" for a backend)
            text = (str(err).strip().splitlines() or [""])[0][:120]
            row["status"] = f"unavailable: {type(err).__name__}: {text}"
            if provider == "course":
                row["status"] = f"WRONG: the course kernel raised {type(err).__name__}: {text}"
            continue
        row["ms"] = round(ms, 4)
        row["tflops"] = round(case.flops() / (ms * 1e-3) / 1e12, 1)
        row["status"] = "ok" if provider == "course" else "timed"
        if provider == "course":
            from ..kernels import host

            if host.BROKEN_STEPS:
                row["note"] = f"fell back from steps {sorted(host.BROKEN_STEPS)}"
        if provider == "compile":
            fused = fuse_attention_count() - before_fuse
            row["note"] = (f"Inductor rewrote it into SDPA ({fused}x)" if fused > 0 else
                           "no SDPA rewrite seen (counter unchanged)")
    return rows


# ---------------------------------------------------------------- ladder


def time_ladder(cases, rep_ms: int = 50, warmup_ms: int = 10, autotune: bool = True,
                progress: Progress | None = None) -> list[dict]:
    """Every ladder step on every case: check (ragged, B>1, H>1, transposed views; and the
    timing case itself) before timing, time, check again. One row per (case, step)."""
    import torch

    from ..kernels import host, ladder, tiles, verify

    rows = []
    for case in cases:
        dtype = torch_dtype(case.dtype)
        q, k, v, _ = make_inputs(case)
        ref, _ = verify.reference_fp32(q, k, v, case.causal)
        cudnn_ms = None
        try:
            cudnn = make_call("sdpa-cudnn", case.causal, 1.0 / math.sqrt(case.d))
            with torch.no_grad():
                cudnn_ms = median_ms(lambda f=cudnn, q=q, k=k, v=v: f(q, k, v), warmup_ms,
                                     rep_ms)
        except RuntimeError:
            pass
        base_ms = None
        for step in ladder.ladder_steps():
            row = {"dtype": case.dtype, "d": case.d, "N": case.n, "causal": case.causal,
                   "B": case.batch, "H": case.heads, "step": step.number, "name": step.name,
                   "config": "", "ms": "", "tflops": "", "vs_step0": "", "vs_cudnn": "",
                   "status": ""}
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

                problem = _ladder_check(step, cfg, case, dtype, run, ref)
                if problem:
                    row["status"] = f"WRONG before timing: {problem}"
                    continue
                ms = median_ms(run, warmup_ms, rep_ms)
                problem = _ladder_check(step, cfg, case, dtype, run, ref, small=False)
                if problem:
                    row["status"] = f"WRONG after timing: {problem}"
                    continue
            except Exception as err:  # noqa: BLE001  (a compile failure marks this step only)
                row["status"] = "failed: " + (str(err).strip().splitlines() or [""])[0][:160]
                continue
            base_ms = base_ms or (ms if step.number == 0 else None)
            row["ms"] = round(ms, 4)
            row["tflops"] = round(case.flops() / (ms * 1e-3) / 1e12, 1)
            row["vs_step0"] = round(base_ms / ms, 2) if base_ms else ""
            row["vs_cudnn"] = round(cudnn_ms / ms, 2) if cudnn_ms else ""
            row["status"] = "ok"
        torch.cuda.empty_cache()
    return rows


def _ladder_check(step, cfg, case, dtype, run, ref, small: bool = True) -> str:
    """'' or what is wrong: small ragged cases (B>1, H>1, transposed views) and the case."""
    import torch

    from ..kernels import host, verify

    if small:
        try:
            verify.check_forward(
                lambda q, k, v, causal: host.forward(q, k, v, causal, step=step, config=cfg),
                dtype, [(2, 3, 333, case.d), (3, 2, 257, case.d)], (case.causal,), atol=2e-2,
                name=f"step {step.number}")
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
    modes = [m for m in args.modes.split(",") if m]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    start = time.time()

    if not args.no_ladder:
        cases = ladder_cases(args.quick)
        from ..kernels import ladder

        progress = Progress(len(cases) * len(ladder.ladder_steps()), "ladder")
        rows = time_ladder(cases, args.rep_ms, args.warmup_ms, not args.no_autotune, progress)
        progress.close()
        write_csv(out / "07-ladder.csv", rows)
        plot_ladder(out / "07-ladder.png", rows)
        failed |= any(r["status"].startswith("WRONG") for r in rows)
        for r in rows:
            print(f"ladder d={r['d']} {'causal' if r['causal'] else 'full':6s} step {r['step']} "
                  f"{r['name']:20s} {str(r['tflops']):>7s} TFLOP/s  x{r['vs_step0']!s:5s} "
                  f"vs cuDNN x{r['vs_cudnn']!s:5s} {r['config']:28s} {r['status']}")

    all_rows = []
    for mode in modes:
        cases = sweep_cases(mode, args.quick, dtypes)
        progress = Progress(len(cases), f"sweep {mode}")
        rows = []
        for case in cases:
            rows += bench_case(case, providers, args.rep_ms, args.warmup_ms)
            progress.step(case.label())
        progress.close()
        name = "07-attention-fwd" if mode == "fwd" else "07-attention-fwdbwd"
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
