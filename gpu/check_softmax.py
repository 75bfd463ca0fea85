"""Run lesson 5's solution kernels compiled on a CUDA GPU and compare them with torch.softmax.

    python gpu/check_softmax.py            # kernels against torch, then the lesson's graders
    python gpu/check_softmax.py --no-graders
    python gpu/check_softmax.py --interpreter   # smoke test of this script on a CPU (small rows)

The kernels are the solution cells of lessons/05-softmax.qmd, taken by cell id (no copy of their
source lives here) and imported from a real file by flashcourse.authoring.cells. Every
shape, dtype (fp32, fp16, bf16) and logit scale is checked; inputs are non-contiguous views and
outputs sit inside NaN padding that must stay untouched. Exits 1 on any mismatch, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # flashcourse is imported once Triton's mode is chosen
LESSON = ROOT / "lessons" / "05-softmax.qmd"
KERNEL_CELLS = {"exercise-row-kernel": "softmax_row_kernel",
                "exercise-online-kernel": "online_softmax_kernel",
                "exercise-masked-softmax": "masked_softmax_kernel"}

ROW_SHAPES = [(1, 1), (7, 7), (64, 100), (33, 1000), (16, 4096), (8, 16384)]
ONLINE_SHAPES = [(1, 1), (7, 7), (64, 100), (33, 1000), (16, 4096), (4, 65536), (2, 100003)]
ONLINE_BLOCKS = (64, 1024)
TOLERANCE = {"fp32": (1e-6, 1e-4), "fp16": (1e-5, 2e-3), "bf16": (1e-4, 1.6e-2)}  # atol, rtol
PAD = 16  # NaN columns after each output row; a store past the row end changes them
DEVICE = "cuda"  # "cpu" with --interpreter


def load_kernels():
    from flashcourse.authoring import cells  # after --interpreter has chosen Triton's mode

    module = cells.load_cells(LESSON, list(KERNEL_CELLS), prelude=cells.TRITON_PRELUDE)
    return {name: getattr(module, name) for name in KERNEL_CELLS.values()}


def inputs(rows, n, dtype, scale, seed, torch):
    """A non-contiguous (rows, n) view (every row followed by 5 unused columns)."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    wide = torch.randn(rows, n + 5, device=DEVICE, generator=gen) * scale
    if seed % 2 and n > 1:  # some masked (-inf) entries, column 0 always finite
        holes = torch.rand(rows, n + 5, device=DEVICE, generator=gen) < 0.2
        holes[:, 0] = False
        wide[holes] = float("-inf")
    return wide.to(dtype)[:, :n]


def run_case(kernel_name, kernel, rows, n, dtype_name, scale, seed, block, torch, triton):
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    x = inputs(rows, n, dtype, scale, seed, torch)
    padded = torch.full((rows, n + PAD), float("nan"), device=DEVICE, dtype=dtype)
    y = padded[:, :n]
    if block is None:
        grid_block = triton.next_power_of_2(n)
    else:
        grid_block = block
    warps = 4 if grid_block <= 1024 else 8 if grid_block <= 4096 else 16
    kernel[(rows,)](x, y, n, x.stride(0), y.stride(0), BLOCK=grid_block, num_warps=warps)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    ref = torch.softmax(x.double(), dim=-1)
    atol, rtol = TOLERANCE[dtype_name]
    err = (y.double() - ref).abs()
    bad = ~(err <= atol + rtol * ref.abs())  # NaN counts as bad
    label = (f"{kernel_name} rows={rows} n={n} BLOCK={grid_block} {dtype_name} "
             f"scale={scale:g}{' with -inf' if seed % 2 and n > 1 else ''}")
    problems = []
    if bad.any():
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        problems.append(f"{int(bad.sum())} wrong values, max error "
                        f"{float(torch.nan_to_num(err, nan=float('inf')).max()):.3g}, "
                        f"first at {where}")
    if not torch.isnan(padded[:, n:]).all():
        problems.append("wrote past the end of a row")
    print(f"{'FAIL' if problems else 'ok  '} {label}" + (": " + "; ".join(problems)
                                                         if problems else ""))
    return not problems


def run_masked_case(kernel, rows, n, dtype_name, scale, seed, block, torch):
    """The masked-softmax kernel against torch.softmax of the scaled scores with the columns
    past each row's length at -inf; lengths include 0 (a row with nothing visible: NaN)."""
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    x = inputs(rows, n, dtype, scale, seed, torch)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    lengths = torch.randint(0, n + 1, (rows,), device=DEVICE, generator=gen,
                            dtype=torch.int32)
    lengths[-1] = n  # one row fully visible
    padded = torch.full((rows, n + PAD), float("nan"), device=DEVICE, dtype=dtype)
    y = padded[:, :n]
    sm_scale = 0.125
    warps = 4 if block <= 1024 else 8 if block <= 4096 else 16
    kernel[(rows,)](x, y, lengths, n, x.stride(0), y.stride(0), sm_scale, BLOCK=block,
                    num_warps=warps)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    hidden = torch.arange(n, device=DEVICE)[None, :] >= lengths[:, None]
    ref = torch.softmax((sm_scale * x.double()).masked_fill(hidden, float("-inf")), dim=-1)
    atol, rtol = TOLERANCE[dtype_name]
    err = (y.double() - ref).abs()
    both_nan = torch.isnan(y) & torch.isnan(ref)  # rows with nothing visible: NaN, as torch
    bad = ~((err <= atol + rtol * ref.abs()) | both_nan)
    label = (f"masked rows={rows} n={n} BLOCK={block} {dtype_name} scale={scale:g}"
             f"{' with -inf' if seed % 2 and n > 1 else ''}")
    problems = []
    if bad.any():
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        problems.append(f"{int(bad.sum())} wrong values, first at {where}")
    if not torch.isnan(padded[:, n:]).all():
        problems.append("wrote past the end of a row")
    print(f"{'FAIL' if problems else 'ok  '} {label}" + (": " + "; ".join(problems)
                                                         if problems else ""))
    return not problems


def check_kernels(kernels, torch, triton, max_n=None) -> int:
    failures = 0
    seed = 0
    for dtype_name in ("fp32", "fp16", "bf16"):
        for scale in (1.0, 1e3):
            for rows, n in ROW_SHAPES:
                seed += 1
                if max_n and n > max_n:
                    continue
                failures += not run_case("row", kernels["softmax_row_kernel"], rows, n,
                                         dtype_name, scale, seed, None, torch, triton)
            for rows, n in ONLINE_SHAPES:
                for block in ONLINE_BLOCKS:
                    seed += 1
                    if max_n and n > max_n:
                        continue
                    failures += not run_case("online", kernels["online_softmax_kernel"], rows,
                                             n, dtype_name, scale, seed, block, torch, triton)
                    failures += not run_masked_case(kernels["masked_softmax_kernel"], rows, n,
                                                    dtype_name, scale, seed, block, torch)
    return failures


def check_graders(kernels) -> int:
    """The lesson's own graders, on the GPU (compiled kernels, poisoned inputs, canaries)."""
    from flashcourse import check, runtime
    from flashcourse.checks import registry

    chosen = runtime.setup(verbose=True)
    if chosen.interpreter != (DEVICE == "cpu"):
        print(f"FAIL graders: the runtime chose {chosen.device}, this script runs on {DEVICE}")
        return 1
    failures = 0
    for exercise_id, name in (("softmax/row-kernel", "softmax_row_kernel"),
                              ("softmax/online-kernel", "online_softmax_kernel"),
                              ("softmax/masked-softmax", "masked_softmax_kernel")):
        for hidden in (False, True):
            os.environ[registry.GRADING_MODE_ENV] = "1" if hidden else "0"
            try:
                check(exercise_id, kernels[name])
            except Exception as err:  # report every failure, keep going
                failures += 1
                print(f"FAIL grader {exercise_id} (hidden={hidden}): {type(err).__name__}: {err}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-graders", action="store_true",
                        help="only compare the kernels with torch.softmax")
    parser.add_argument("--interpreter", action="store_true",
                        help="smoke-test this script on a CPU in the Triton interpreter")
    args = parser.parse_args()
    global DEVICE
    if args.interpreter:  # before triton is imported: its standard library must be interpreted
        DEVICE = "cpu"
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["FLASHCOURSE_INTERPRET"] = "1"
    import torch
    import triton

    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("No CUDA GPU: this script checks the compiled kernels and needs one "
              "(--interpreter runs a smoke test on a CPU).")
        return 2
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "none (interpreter)"
    print(f"GPU {gpu}, torch {torch.__version__}, Triton {triton.__version__}")
    kernels = load_kernels()
    failures = check_kernels(kernels, torch, triton, max_n=1000 if args.interpreter else None)
    if not args.no_graders:
        failures += check_graders(kernels)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
