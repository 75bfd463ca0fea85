"""Check lesson 4's solution kernels compiled on a CUDA GPU: fp16, bf16 and fp32, ragged shapes.

The kernels and the launcher come from solutions/04-tiling-matmul.ipynb, by cell id, so this
script tests exactly what students are shown. Exits 1 on any mismatch, 2 without a GPU.

    python gpu/check_matmul.py            # from the repository root, on a machine with a GPU
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nbformat
import torch

import flashcourse as fc

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "04-tiling-matmul.ipynb"
CELLS = ("exercise-matmul-kernel", "matmul-launcher", "naive-kernel")

# (M, N, K): none is a multiple of any block size used by the GPU configs
SHAPES = [(37, 53, 29), (64, 16, 100), (129, 257, 65), (1000, 1001, 515), (1, 4096, 3000)]
# atol as a fraction of max(|A| @ |B|): fp32 tl.dot runs on TF32 tensor cores by default
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 4e-3}


def load_solution() -> dict:
    """Run the kernel, launcher and naive-kernel cells of the solution notebook."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    by_id = {cell.id: cell.source for cell in nb.cells if cell.cell_type == "code"}
    import triton
    import triton.language as tl

    namespace = {"torch": torch, "triton": triton, "tl": tl, "fc": fc,
                 "device": fc.runtime.current().device, "np": __import__("numpy")}
    folder = Path(tempfile.mkdtemp(prefix="check_matmul_"))
    for cell_id in CELLS:
        # @triton.jit needs real source: give each cell a file of its own
        path = folder / f"{cell_id.replace('-', '_')}.py"
        path.write_text(by_id[cell_id] + "\n")
        exec(compile(by_id[cell_id], str(path), "exec"), namespace)
    return namespace


def main() -> int:
    if not torch.cuda.is_available():
        print("No CUDA GPU: nothing to check.")
        return 2
    runtime = fc.setup()
    if runtime.interpreter:
        print("The interpreter was forced on: unset FLASHCOURSE_INTERPRET / TRITON_INTERPRET.")
        return 2
    ns = load_solution()
    failures = 0
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for M, N, K in SHAPES:
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            reference = a.double() @ b.double()
            scale = (a.double().abs() @ b.double().abs()).max().item()
            column_major_b = b.t().contiguous().t()
            for name, result in [("tiled", ns["matmul"](a, b)),
                                 ("tiled, B column-major", ns["matmul"](a, column_major_b)),
                                 ("naive", ns["naive_matmul"](a, b))]:
                error = (result.double() - reference).abs().max().item()
                ok = error <= TOLERANCE[dtype] * scale and torch.isfinite(result).all().item()
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name:26s} {str(dtype):15s} M={M} N={N} K={K}: "
                      f"max error {error:.3g} (allowed {TOLERANCE[dtype] * scale:.3g})")
    # the grader itself, compiled: visible and hidden cases, bf16 included
    import os

    os.environ["FLASHCOURSE_GRADING"] = "1"
    try:
        fc.check("tiling/matmul-kernel", ns["matmul_kernel"])
    except AssertionError as err:
        print(f"FAIL grader: {err}")
        failures += 1
    print("all checks passed" if not failures else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
