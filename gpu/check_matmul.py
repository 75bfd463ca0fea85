"""Check lesson 4's solution kernels compiled on a CUDA GPU: fp16, bf16 and fp32, ragged shapes.

The kernels and the launcher are the solution cells of lessons/04-tiling-matmul.qmd, by cell id,
so this script tests exactly what students are shown. Exits 1 on any mismatch, 2 without a GPU.

    python gpu/check_matmul.py            # from the repository root, on a machine with a GPU
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import flashcourse as fc
from flashcourse.authoring import cells

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "lessons" / "04-tiling-matmul.qmd"
CELLS = ("exercise-matmul-kernel", "matmul-launcher", "naive-kernel", "exercise-batched-matmul")

# (M, N, K): none is a multiple of any block size used by the GPU configs
SHAPES = [(37, 53, 29), (64, 16, 100), (129, 257, 65), (1000, 1001, 515), (1, 4096, 3000)]
# (batch, M, N, K) and the blocks of the batched kernel, which runs with the launcher's defaults
# and with GPU-sized tiles
BATCHED_SHAPES = [(3, 37, 53, 29), (4, 129, 257, 65), (2, 1000, 1001, 515)]
BATCHED_BLOCKS = [(16, 16, 16), (64, 64, 32), (128, 128, 64)]
# atol as a fraction of max(|A| @ |B|): fp32 tl.dot runs on TF32 tensor cores by default
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 4e-3}


def load_solution():
    """The kernel, launcher and naive-kernel cells of the solution, imported as one module."""
    prelude = cells.PRELUDE + ("import flashcourse as fc\n"
                                      "from flashcourse import run_kernel\n"
                                      "device = fc.runtime.current().device\n")
    return cells.load_cells(LESSON, list(CELLS), prelude=prelude)


def main() -> int:
    if not torch.cuda.is_available():
        print("No CUDA GPU: nothing to check.")
        return 2
    runtime = fc.setup()
    if runtime.interpreter:
        print("The interpreter was forced on: unset FLASHCOURSE_INTERPRET / TRITON_INTERPRET.")
        return 2
    solution = load_solution()
    failures = 0
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for M, N, K in SHAPES:
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            reference = a.double() @ b.double()
            scale = (a.double().abs() @ b.double().abs()).max().item()
            column_major_b = b.t().contiguous().t()
            for name, result in [("tiled", solution.matmul(a, b)),
                                 ("tiled, B column-major", solution.matmul(a, column_major_b)),
                                 ("naive", solution.naive_matmul(a, b))]:
                error = (result.double() - reference).abs().max().item()
                ok = error <= TOLERANCE[dtype] * scale and torch.isfinite(result).all().item()
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name:26s} {str(dtype):15s} M={M} N={N} K={K}: "
                      f"max error {error:.3g} (allowed {TOLERANCE[dtype] * scale:.3g})")
        for batch, M, N, K in BATCHED_SHAPES:
            a = torch.randn(batch, M, K, device="cuda", dtype=dtype)
            b = torch.randn(batch, K, N, device="cuda", dtype=dtype)
            reference = a.double() @ b.double()
            scale = (a.double().abs() @ b.double().abs()).max().item()
            column_major_b = b.transpose(1, 2).contiguous().transpose(1, 2)
            for block_m, block_n, block_k in BATCHED_BLOCKS:
                for name, b_in in (("batched", b), ("batched, B column-major", column_major_b)):
                    result = solution.batched_matmul(a, b_in, block_m, block_n, block_k)
                    error = (result.double() - reference).abs().max().item()
                    allowed = TOLERANCE[dtype] * scale
                    ok = error <= allowed and torch.isfinite(result).all().item()
                    failures += not ok
                    print(f"{'ok  ' if ok else 'FAIL'} {name:26s} {str(dtype):15s} "
                          f"batch={batch} M={M} N={N} K={K} blocks={block_m}x{block_n}x"
                          f"{block_k}: max error {error:.3g} (allowed {allowed:.3g})")
    # the graders themselves, compiled: visible and hidden cases, bf16 included
    import os

    os.environ["FLASHCOURSE_GRADING"] = "1"
    for exercise_id, kernel in (("tiling/matmul-kernel", solution.matmul_kernel),
                                ("tiling/batched-matmul", solution.batched_matmul_kernel)):
        try:
            fc.check(exercise_id, kernel)
        except Exception as err:  # noqa: BLE001  (report every failure)
            print(f"FAIL grader {exercise_id}: {type(err).__name__}: {err}")
            failures += 1
    print("all checks passed" if not failures else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
