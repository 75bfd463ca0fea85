"""Compare the reference FlashAttention before and after the kernels were split by role.

    python gpu/compare_kernel_move.py --before OLD_SRC [--reps 5] [--out FILE]
    python gpu/compare_kernel_move.py --before OLD_SRC --cpu-smoke

OLD_SRC is the `src` folder of a checkout of the commit before the split (it holds
`flashcourse/kernels/flash_ref.py`). Its package is copied to a temporary folder as
`flashcourse_before` and imported beside this tree's `flashcourse`, so both run in one process
on the same inputs:

1. Numerics: every ladder step's forward (o and lse) on a ragged case, and the default
   flash_attention's output and gradients (dq, dk, dv) on every timing case, old against new.
   Each line says "bitwise equal" or the largest difference and whether it is within fp16
   tolerance (atol = rtol = 1e-2).
2. Speed: forward, and forward + backward, of the default flash_attention, fp16, d = 64 and 128,
   causal and not, N = 4096 and 16384, B * N = 32k tokens and H * d = 2048. Each repetition
   times old and new with triton.testing.do_bench (median of its runs), in alternating order;
   the table gives the median over repetitions, the spread (min-max) and new / old.

Needs a CUDA GPU and refuses without one. --cpu-smoke runs the same import and comparison
logic in the Triton interpreter on tiny float32 shapes, with a wall-clock timer standing in for
do_bench (those timings mean nothing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD_NAME = "flashcourse_before"
FP16_TOL = 1e-2  # atol = rtol for fp16 outputs and gradients (as the kernels' own checks)
TOKENS, WIDTH = 32768, 2048  # B * N and H * d of every timing case
TIMING_CASES = [(d, causal, n) for d in (64, 128) for causal in (False, True)
                for n in (4096, 16384)]
SMOKE_CASES = [(16, False, 40), (16, True, 40)]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True,
                        help="src folder of the old commit (holds flashcourse/)")
    parser.add_argument("--reps", type=int, default=5, help="timing repetitions per case")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="interpreter, tiny shapes, no meaningful timings")
    return parser.parse_args(argv)


def load_sides(before: Path, workdir: Path):
    """(old flash_ref, new host, new ladder): the old package as flashcourse_before."""
    old_package = before / "flashcourse"
    if not (old_package / "kernels" / "flash_ref.py").is_file():
        raise SystemExit(f"{before} has no flashcourse/kernels/flash_ref.py: pass the src "
                         "folder of a checkout of the commit before the split.")
    shutil.copytree(old_package, workdir / OLD_NAME,
                    ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(workdir))
    sys.path.insert(0, str(ROOT / "src"))
    import importlib

    import flashcourse

    flashcourse.runtime.setup(verbose=False)  # before any kernel of either side is defined
    old = importlib.import_module(OLD_NAME)
    old.runtime.setup(verbose=False)
    old_ref = importlib.import_module(f"{OLD_NAME}.kernels.flash_ref")
    from flashcourse.kernels import host, ladder

    assert old_ref.__file__.startswith(str(workdir)), old_ref.__file__
    assert host.__file__.startswith(str(ROOT / "src")), host.__file__
    return old_ref, host, ladder


def difference(old, new) -> tuple[bool, float, bool]:
    """(bitwise equal, max abs difference, within FP16_TOL)."""
    import torch

    if torch.equal(old, new):
        return True, 0.0, True
    a, b = old.float(), new.float()
    err = (a - b).abs()
    within = bool(torch.isfinite(b).all()) and bool((err <= FP16_TOL + FP16_TOL * a.abs()).all())
    return False, float(err.max()), within


def verdict(name: str, old, new) -> tuple[str, bool]:
    same, err, within = difference(old, new)
    if same:
        return f"{name} bitwise equal", True
    return f"{name} differs: max {err:.3g} ({'within' if within else 'OUTSIDE'} fp16 " \
           f"tolerance {FP16_TOL:g})", within


def inputs(B, H, N, D, dtype, device, seed):
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=gen).to(device=device, dtype=dtype)
            for _ in range(4)]


def compare_steps(old_ref, host, ladder, shape, dtype, device, lines) -> bool:
    """Every ladder step's forward, old against new, on one ragged case, causal and not."""
    ok = True
    q, k, v, _ = inputs(*shape, dtype, device, seed=1)
    for step in ladder.ladder_steps():
        supported, why = ladder.step_supported(step)
        if not supported:
            lines.append(f"step {step.number}: skipped here ({why})")
            continue
        for causal in (False, True):
            o_old, lse_old = old_ref.forward(q, k, v, causal, step=step.number)
            o_new, lse_new = host.forward(q, k, v, causal, step=step.number)
            label = f"step {step.number} {'causal' if causal else 'full'} {shape}"
            text_o, ok_o = verdict("o", o_old, o_new)
            text_l, ok_l = verdict("lse", lse_old, lse_new)
            ok &= ok_o and ok_l
            lines.append(f"{label}: {text_o}; {text_l}")
    return ok


def compare_autograd(old_ref, host, case, dtype, device, lines) -> bool:
    """The default flash_attention's output and gradients, old against new."""
    import torch

    B, H, N, D, causal = case
    q, k, v, do = inputs(B, H, N, D, dtype, device, seed=2)
    results = []
    for fn in (old_ref.flash_attention, host.flash_attention):
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        o = fn(qg, kg, vg, causal)
        grads = torch.autograd.grad(o, (qg, kg, vg), do)
        results.append([o.detach(), *grads])
    label = f"flash_attention B={B} H={H} N={N} d={D} {'causal' if causal else 'full'}"
    texts, ok = [], True
    for name, a, b in zip(("o", "dq", "dk", "dv"), *results, strict=True):
        text, good = verdict(name, a, b)
        texts.append(text)
        ok &= good
    lines.append(f"{label}: " + "; ".join(texts))
    return ok


def wall_ms(fn) -> float:
    """The smoke test's stand-in for do_bench: one warm-up, then the median of three runs."""
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def time_pair(old_fn, new_fn, reps: int, timer) -> dict[str, list[float]]:
    """reps medians of each side, timed in alternating order."""
    times = {"old": [], "new": []}
    for rep in range(reps):
        order = (("old", old_fn), ("new", new_fn)) if rep % 2 == 0 else \
            (("new", new_fn), ("old", old_fn))
        for side, fn in order:
            times[side].append(timer(fn))
    return times


def summary(times: dict[str, list[float]]) -> str:
    old, new = (statistics.median(times[s]) for s in ("old", "new"))
    spread = {s: f"{min(times[s]):.3f}-{max(times[s]):.3f}" for s in ("old", "new")}
    return (f"{old:9.3f} [{spread['old']:>15s}] {new:9.3f} [{spread['new']:>15s}] "
            f"{new / old:6.3f}")


def time_case(old_ref, host, case, dtype, device, reps, timer) -> list[str]:
    """Table rows of one case: forward (no autograd) and forward + backward."""
    import torch

    B, H, N, D, causal = case
    q, k, v, do = inputs(B, H, N, D, dtype, device, seed=3)
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

    def forward(fn):
        def run():
            with torch.no_grad():
                fn(q, k, v, causal)
        return run

    def forward_backward(fn):
        def run():
            fn(qg, kg, vg, causal).backward(do)
        return run

    label = f"B={B} H={H} N={N} d={D} {'causal' if causal else 'full'}"
    rows = []
    for mode, make in (("fwd", forward), ("fwd+bwd", forward_backward)):
        times = time_pair(make(old_ref.flash_attention), make(host.flash_attention), reps,
                          timer)
        rows.append(f"{label:28s} {mode:7s} {summary(times)}")
        print(rows[-1], flush=True)
    return rows


def timing_rows(old_ref, host, cases, dtype, device, reps, timer, lines) -> None:
    import torch

    header = (f"{'case':28s} {'mode':7s} {'old ms':>9s} {'[min-max]':>17s} {'new ms':>9s} "
              f"{'[min-max]':>17s} {'new/old':>6s}")
    lines += ["", header, "-" * len(header)]
    print("\n".join(lines[-3:]), flush=True)
    for case in cases:
        lines += time_case(old_ref, host, case, dtype, device, reps, timer)
        if device == "cuda":
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported by either side
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu/compare_kernel_move.py times kernels on a CUDA GPU and there is none here; "
              "run it on a GPU machine, or pass --cpu-smoke to test its logic in the "
              "interpreter.")
        return 2
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="compare-kernel-move-") as workdir:
        old_ref, host, ladder = load_sides(args.before.resolve(), Path(workdir))
        if args.cpu_smoke:
            dtype, device = torch.float32, "cpu"
            step_shape = (2, 2, 37, 16)
            cases = [(1, 2, n, d, causal) for d, causal, n in SMOKE_CASES]
            timer, reps = wall_ms, min(args.reps, 2)
            lines.append("CPU smoke test: Triton interpreter, float32, tiny shapes; the "
                         "timings below mean nothing.")
        else:
            import triton
            import triton.testing

            dtype, device = torch.float16, "cuda"
            step_shape = (2, 4, 1000, 64)
            cases = [(TOKENS // n, WIDTH // d, n, d, causal) for d, causal, n in TIMING_CASES]

            def timer(fn):
                return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

            reps = args.reps
            lines.append(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
                         f"triton {triton.__version__}")
        ok = compare_steps(old_ref, host, ladder, step_shape, dtype, device, lines)
        for case in cases:
            ok &= compare_autograd(old_ref, host, case, dtype, device, lines)
        print("\n".join(lines), flush=True)
        timing_rows(old_ref, host, cases, dtype, device, reps, timer, lines)
        first_note = len(lines)
        for side, broken in (("old", old_ref.BROKEN_STEPS), ("new", host.BROKEN_STEPS)):
            if broken:
                lines.append(f"{side}: flash_attention fell back from steps {sorted(broken)}")
        lines.append("numerics: " + ("old and new agree (see each line: bitwise or within "
                                     "tolerance)" if ok else "MISMATCH (see above)"))
    print("\n".join(lines[first_note:]))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
