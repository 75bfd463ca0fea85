"""Run the solution kernels of lessons 2 and 3 compiled on a CUDA GPU and check them.

The kernels are taken from the lesson sources by cell id (no copies), compiled by Triton, and
checked twice: by the lessons' own graders in grading mode (hidden cases, bf16 included) and
against torch on large ragged shapes. Exits 1 on any mismatch, 2 without a GPU.

    python gpu/check_memory_lessons.py
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ["FLASHCOURSE_GRADING"] = "1"  # graders run their hidden cases too

import flashcourse as fc  # noqa: E402
from flashcourse import check  # noqa: E402
from flashcourse.authoring import cells  # noqa: E402

PRELUDE = cells.PRELUDE + "from flashcourse import run_kernel\n"


def main() -> int:
    runtime = fc.setup()
    if runtime.interpreter:
        print("No CUDA GPU: this script checks the compiled kernels and needs one.")
        return 2
    import torch
    import triton

    roof = cells.load_cells(ROOT / "lessons" / "02-memory-roofline.qmd",
                            ["exercise-copy-kernel", "exercise-axpy-kernel"], prelude=PRELUDE)
    coal = cells.load_cells(ROOT / "lessons" / "03-coalescing.qmd",
                            ["exercise-strided-copy", "exercise-transpose-naive",
                             "exercise-transpose-tiled", "exercise-batched-transpose"],
                            prelude=PRELUDE)
    failures = []

    def run(name, fn):
        try:
            fn()
            print(f"ok   {name}")
        except Exception as err:  # noqa: BLE001  (report every failure, then exit non-zero)
            failures.append(name)
            print(f"FAIL {name}: {type(err).__name__}: {err}")
            traceback.print_exc(limit=2)

    for exercise_id, kernel in (("roofline/copy-kernel", roof.copy_kernel),
                                ("roofline/axpy-kernel", roof.axpy_kernel),
                                ("coalescing/strided-copy", coal.strided_copy_kernel),
                                ("coalescing/transpose-naive", coal.transpose_naive_kernel),
                                ("coalescing/transpose-tiled", coal.transpose_tiled_kernel),
                                ("coalescing/batched-transpose",
                                 coal.batched_transpose_kernel)):
        run(f"grader {exercise_id}", lambda e=exercise_id, k=kernel: check(e, k))

    def large(dtype):
        x = torch.randn(10_000_003, device="cuda").to(dtype)
        for block, warps in ((1024, 4), (4096, 8)):
            y = torch.full_like(x, float("nan"))
            roof.copy_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block,
                                                               num_warps=warps)
            assert torch.equal(x, y), f"copy BLOCK={block} differs"
            other = torch.randn_like(x)
            want = (-0.75 * x.float() + other.float()).to(dtype)
            got = roof.axpy(-0.75, x, other, block=block)
            tolerance = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1.6e-2}[dtype]
            assert torch.allclose(got.float(), want.float(), atol=tolerance, rtol=tolerance), (
                f"axpy BLOCK={block} differs")
        for stride in (1, 3, 8):
            assert torch.equal(coal.strided_copy(x, stride, block=1024),
                               x[: x.numel() // stride * stride][::stride]), stride
        m = torch.randn(4099, 2051, device="cuda").to(dtype)
        for bm, bn in ((32, 32), (64, 64), (64, 32)):
            assert torch.equal(coal.transpose(m, bm, bn), m.T), (bm, bn)
        out = torch.empty(2051, 4099, device="cuda", dtype=dtype)
        coal.transpose_naive_kernel[(4099, triton.cdiv(2051, 1024))](
            m, out, 4099, 2051, m.stride(0), out.stride(0), BLOCK=1024)
        assert torch.equal(out, m.T), "naive transpose differs"
        stack = torch.randn(3, 1025, 2051, device="cuda").to(dtype)
        for bm, bn in ((32, 32), (64, 64), (64, 32)):
            assert torch.equal(coal.batched_transpose(stack, bm, bn), stack.transpose(1, 2)), (
                "batched transpose", bm, bn)
        view = stack[:, 1:, :2000]  # padded rows and an offset: strides, not shapes
        assert torch.equal(coal.batched_transpose(view), view.transpose(1, 2)), "view"

    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        run(f"large ragged shapes, {dtype}", lambda d=dtype: large(d))
    print(f"{len(failures)} failure(s)" if failures else "all kernels match")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
