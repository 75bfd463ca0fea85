"""Lesson 4's batched matmul kernel, written from scratch: the grader launches it itself
(`launch_batched`, with the lesson's batched signature) on inputs inside NaN padding and an
output inside canaries whose padding differs from the inputs', and names known mistakes."""

from __future__ import annotations

import numpy as np

from ... import runtime
from ...i18n import _
from ...models.matmul import cdiv
from .. import buffers, guards, registry
from .common import (
    LAST_K_STEP_HINT,
    OUTSIDE_HINT,
    fp16_accumulation,
    random_operands,
    summary_notes,
    tolerance,
    torch_dtype,
)

# ---------------------------------------------------------------- batched matmul, from scratch

# (batch, M, N, K, input dtype, output dtype, BLOCK_M, BLOCK_N, BLOCK_K, seed, values)
BATCHED_CASES = [
    (2, 32, 32, 32, "float32", "float32", 16, 16, 16, 0, "normal"),  # square, tiles divide
    (3, 37, 53, 29, "float32", "float32", 16, 16, 16, 1, "normal"),  # ragged M, N and K
    (2, 20, 24, 40, "float16", "float16", 16, 16, 16, 2, "normal"),  # ragged, fp16
    (1, 16, 24, 1024, "float16", "float32", 16, 16, 64, 3, "uniform"),  # long K: fp32 sums
    (2, 45, 17, 33, "bfloat16", "bfloat16", 16, 16, 16, 4, "normal"),  # GPU only
]
BATCHED_HIDDEN = [
    (4, 1, 77, 33, "float32", "float32", 16, 32, 16, 101, "normal"),
    (2, 129, 3, 65, "float16", "float16", 32, 16, 32, 102, "normal"),
    (3, 48, 48, 200, "float16", "float32", 16, 16, 32, 103, "uniform"),
    (2, 50, 40, 70, "bfloat16", "float32", 32, 16, 32, 104, "normal"),
]
# C's padding differs from A's and B's, so a stride of one tensor used for another shows
C_EXTRA_ROWS, C_EXTRA_COLS = 5, 3


def launch_batched(kernel, a, b, c, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int) -> None:
    """Launch a kernel with the lesson's batched signature: one program per output tile."""
    for name, size in (("BLOCK_M", BLOCK_M), ("BLOCK_N", BLOCK_N), ("BLOCK_K", BLOCK_K)):
        runtime.check_block_size(name, size)
    batch, M, K = a.shape
    N = b.shape[2]
    grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), batch)
    kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=BLOCK_M,
                 BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)


def _run_batched(kernel, A, B, out_dtype, cfg, label, padding="nan"):
    """Run the kernel on fresh buffers; return (output as float64 numpy, the Canaried).
    padding as in `matmul_kernel._run_kernel`: "nan" (the graded run), "zero" or "contiguous"."""
    import torch

    batch, M, N = A.shape[0], A.shape[1], B.shape[2]
    bm, bn, bk = cfg
    dtype = torch_dtype(out_dtype)
    out = buffers.Canaried((batch, M, N), dtype, device=A.device, pad_rows=bm + C_EXTRA_ROWS,
                           pad_cols=bn + C_EXTRA_COLS)
    if padding == "nan":
        a = buffers.poisoned(A, pad_rows=bm, pad_cols=bk)
        b = buffers.poisoned(B, pad_rows=bk, pad_cols=bn)
    else:
        contiguous = padding == "contiguous"
        fill = float("nan") if contiguous else 0.0
        a = buffers.padded_copy(A, bm, bk, fill, contiguous)
        b = buffers.padded_copy(B, bk, bn, fill, contiguous)
        if contiguous:
            out.tensor = buffers.padded_copy(torch.full((batch, M, N), float("nan"),
                                                        dtype=dtype, device=A.device),
                                             bm, bn, float("nan"), True)
    guards.guarded(label, lambda: launch_batched(kernel, a, b, out.tensor, *cfg),
                   tensors=[a, b, out.tensor])
    return out.tensor.detach().cpu().double().numpy(), out


def _batched_diagnosis(kernel, A, B, out_dtype, cfg, actual, expected, atol, label) -> str:
    """Name the mistake behind a wrong batched output, rerunning the kernel where that helps."""
    batch, M, K = A.shape
    N = B.shape[2]
    BLOCK_M, BLOCK_N, BLOCK_K = cfg
    A64 = A.detach().cpu().double().numpy()
    B64 = B.detach().cpu().double().numpy()
    if M == N == K:
        for name, other in (("A @ B.T", A64 @ B64.transpose(0, 2, 1)),
                            ("A.T @ B", A64.transpose(0, 2, 1) @ B64),
                            ("(A @ B).T", (A64 @ B64).transpose(0, 2, 1))):
            if registry.same_result(actual, other, atol):
                return (_("Likely mistake: your kernel computed {name} for each matrix, a "
                          "transposed index. Check which offsets run down the rows and which "
                          "across the columns of A, B and C, each with its own strides.").format(
                          name=name))
    try:
        contiguous, _unused = _run_batched(kernel, A, B, out_dtype, cfg, label, "contiguous")
        if registry.same_result(contiguous, expected, atol):
            return (_("Likely mistake: your kernel is right on contiguous tensors only: it "
                      "computes a stride from the shape (K, N, M * K, ...) instead of using the "
                      "one it is given. The grader's tensors have padding after every row and "
                      "every matrix."))
        zero, _unused = _run_batched(kernel, A, B, out_dtype, cfg, label, "zero")
    except registry.WrongAnswer:
        return ""
    if np.isnan(actual).any() and registry.same_result(zero, expected, atol):
        if K % BLOCK_K:
            return _(LAST_K_STEP_HINT)
        return _(OUTSIDE_HINT)
    if out_dtype == "float32":
        simulated = np.stack([fp16_accumulation(A64[z], B64[z], BLOCK_K)
                              for z in range(batch)])
        off_true = np.abs(actual - expected).max()
        if np.abs(actual - simulated).max() < 0.25 * off_true:
            return (_("Likely mistake: the accumulator is fp16. Each addition rounds to 11 "
                      "significant bits, and over a long K the errors add up: accumulate in fp32 "
                      "and cast only when storing."))
    return (_("Check the K loop: one tl.dot of the two tiles added to the fp32 accumulator per "
              "step, then both pointers advanced by BLOCK_K along K, each with its own stride."))


def check_batched(kernel) -> str:
    guards.require_jit_kernel(kernel, "tiling/batched-matmul")
    interpreter = runtime.current().interpreter
    cases = registry.with_hidden(BATCHED_CASES, BATCHED_HIDDEN)
    skipped = ran = 0
    for number, case in enumerate(cases, 1):
        batch, M, N, K, in_dtype, out_dtype, bm, bn, bk, seed, values = case
        if interpreter and in_dtype == "bfloat16":
            skipped += 1  # the interpreter's bf16 tl.dot is wrong: bf16 is graded on a GPU
            continue
        cfg = (bm, bn, bk)
        label = (_("case {number}/{total} (batch={batch}, M={M}, N={N}, K={K}, {in_dtype} -> "
                   "{out_dtype}, BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk})").format(number=number,
                   total=len(cases), batch=batch, M=M, N=N, K=K, in_dtype=in_dtype,
                   out_dtype=out_dtype, bm=bm, bn=bn, bk=bk))
        A, B = random_operands((batch, M, K), (batch, K, N), in_dtype, seed, values)
        runtime.check_tensors(A, B, names=("A", "B"), dot=True)
        actual, out = _run_batched(kernel, A, B, out_dtype, cfg, label)
        A64 = A.detach().cpu().double().numpy()
        B64 = B.detach().cpu().double().numpy()
        expected = A64 @ B64
        dot_tol, rtol = tolerance(in_dtype, out_dtype)
        atol = dot_tol * float((np.abs(A64) @ np.abs(B64)).max())
        allowed = atol + rtol * float(np.abs(expected).max())
        out.verify(label, None if M % bm or N % bn else _(
            "This case has no ragged edge, so it is not a missing mask: check C's pointers: C "
            "has its own batch stride stride_cz and row stride stride_cm."))
        written = np.isfinite(actual)
        if batch > 1 and written[0].all() and not written[1:].any():
            raise registry.WrongAnswer(
                _("{label}: only matrix 0 of C was written: every program worked on the first "
                  "matrices. Each program must move its pointers to the matrices of its own "
                  "batch index, each tensor by its own batch stride (section 6, the batched "
                  "matmul).").format(label=label))
        try:
            registry.compare(actual, expected, label, atol=atol, rtol=rtol, tile_rows=bm)
        except registry.WrongAnswer as err:
            hint = _batched_diagnosis(kernel, A, B, out_dtype, cfg, actual, expected, allowed,
                                      label)
            raise registry.WrongAnswer(f"{err}\n{hint}".rstrip()) from None
        ran += 1
    extra = summary_notes(skipped)
    return _("{ran} cases match A[z] @ B[z] (ragged shapes, fp32 and fp16){extra}").format(ran=ran,
             extra=extra)
