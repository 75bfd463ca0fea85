"""Lesson 4's tiled Triton kernel: the grader launches it itself (`launch`, with the
signature of the lesson's kernel) on inputs inside NaN padding and an output inside canaries,
and names known mistakes by rerunning it on other buffers or simulating them."""

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

# ---------------------------------------------------------------- the tiled Triton kernel

# (M, N, K, input dtype, output dtype, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, seed, values)
KERNEL_CASES = [
    (32, 32, 32, "float32", "float32", 16, 16, 16, 2, 0, "normal"),  # square, tiles divide
    (37, 53, 29, "float32", "float32", 16, 16, 16, 2, 1, "normal"),  # ragged M, N and K
    (64, 16, 100, "float16", "float16", 32, 16, 32, 4, 2, "normal"),  # ragged K, fp16
    (100, 40, 48, "float16", "float16", 16, 16, 16, 4, 3, "normal"),  # last group shorter
    (16, 24, 1024, "float16", "float32", 16, 16, 64, 1, 4, "uniform"),  # long K: fp32 sums
    (45, 64, 64, "float32", "float32", 32, 32, 32, 8, 5, "normal"),  # GROUP_M > tile rows
    (70, 90, 130, "bfloat16", "bfloat16", 32, 32, 32, 4, 6, "normal"),  # GPU only
]
KERNEL_HIDDEN = [
    (1, 77, 33, "float32", "float32", 16, 32, 16, 4, 101, "normal"),
    (129, 3, 65, "float16", "float16", 32, 16, 32, 2, 102, "normal"),
    (48, 48, 200, "float16", "float32", 16, 16, 32, 3, 103, "uniform"),
    (96, 80, 72, "bfloat16", "float32", 32, 16, 32, 2, 104, "normal"),
]


def launch(kernel, a, b, c, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, GROUP_M: int,
           num_warps: int = 4, num_stages: int = 2) -> None:
    """Launch a kernel with the lesson's signature: one program per output tile."""
    for name, size in (("BLOCK_M", BLOCK_M), ("BLOCK_N", BLOCK_N), ("BLOCK_K", BLOCK_K)):
        runtime.check_block_size(name, size)
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                 GROUP_M=GROUP_M, num_warps=num_warps, num_stages=num_stages)


def _run_kernel(kernel, A, B, out_dtype, cfg, label, padding="nan"):
    """Run the kernel on fresh buffers; return (output as float64 numpy, the Canaried).

    padding="nan": inputs inside NaN padding and the output inside canaries (the graded run);
    "zero": inputs inside zeros (a read past an edge adds 0); "contiguous": inputs (with NaN
    after them) and output with the strides of contiguous tensors. The padding is a whole
    tile wide, so even a kernel without masks stays inside the buffers."""
    import torch

    M, N = A.shape[0], B.shape[1]
    bm, bn, bk, _ = cfg
    dtype = torch_dtype(out_dtype)
    out = buffers.Canaried((M, N), dtype, device=A.device, pad_rows=bm, pad_cols=bn)
    if padding == "nan":
        a = buffers.poisoned(A, pad_rows=bm, pad_cols=bk)
        b = buffers.poisoned(B, pad_rows=bk, pad_cols=bn)
    else:
        contiguous = padding == "contiguous"
        fill = float("nan") if contiguous else 0.0
        a = buffers.padded_copy(A, bm, bk, fill, contiguous)
        b = buffers.padded_copy(B, bk, bn, fill, contiguous)
        if contiguous:
            out.tensor = buffers.padded_copy(torch.full((M, N), float("nan"), dtype=dtype,
                                                        device=A.device), bm, bn, float("nan"),
                                             True)
    guards.guarded(label, lambda: launch(kernel, a, b, out.tensor, *cfg),
                           tensors=[a, b, out.tensor])
    return out.tensor.detach().cpu().double().numpy(), out


def _worst(actual, expected):
    error = np.abs(actual - expected)
    error[~np.isfinite(actual)] = np.inf
    return np.unravel_index(int(np.argmax(error)), actual.shape)


def _strides_hint(kernel, A, B, out_dtype, cfg, label, expected, atol) -> str:
    """After a store outside the output: say so when the kernel is right on contiguous
    tensors, which means it indexes with a width instead of a stride."""
    try:
        contiguous, _unused = _run_kernel(kernel, A, B, out_dtype, cfg, label, "contiguous")
    except registry.WrongAnswer:
        return ""
    if registry.same_result(contiguous, expected, atol):
        return (_("\nLikely mistake: your kernel is right on contiguous tensors only: it steps "
                  "between rows by the width (K or N) instead of the stride. Use stride_am, "
                  "stride_bk and stride_cm for rows."))
    return ""


def _diagnose(kernel, A, B, out_dtype, cfg, actual, expected, atol, label) -> str:
    """Name the mistake behind a wrong output, rerunning the kernel where that tells more."""
    M, N, K = A.shape[0], B.shape[1], A.shape[1]
    BLOCK_M, BLOCK_N, BLOCK_K, _unused = cfg
    A64 = A.detach().cpu().double().numpy()
    B64 = B.detach().cpu().double().numpy()
    transposed = {
        "A @ B.T": lambda: A64 @ B64.T, "A.T @ B": lambda: A64.T @ B64,
        "(A @ B).T": lambda: (A64 @ B64).T, "A.T @ B.T": lambda: A64.T @ B64.T,
    }
    if M == N == K:
        for name, make in transposed.items():
            if registry.same_result(actual, make(), atol):
                return (_("Likely mistake: your kernel computed {name}, a transposed index. Check "
                          "which offsets run down the rows and which across the columns of A, B "
                          "and C, each with its own strides (the pointer section of the "
                          "lesson).").format(name=name))
    try:
        contiguous, _unused = _run_kernel(kernel, A, B, out_dtype, cfg, label, "contiguous")
        if registry.same_result(contiguous, expected, atol):
            return (_("Likely mistake: your kernel is right on contiguous tensors but wrong on "
                      "the grader's views, whose rows are longer than the tensor is wide. Index "
                      "with the stride arguments (stride_am, stride_ak, stride_bk, stride_bn, "
                      "stride_cm, stride_cn), never with K or N."))
        zero, _unused = _run_kernel(kernel, A, B, out_dtype, cfg, label, "zero")
    except registry.WrongAnswer:
        return ""
    if np.isnan(actual).any():
        if registry.same_result(zero, expected, atol):
            if K % BLOCK_K:
                return _(LAST_K_STEP_HINT)
            return _(OUTSIDE_HINT)
        if np.isnan(zero).any():
            row, col = np.argwhere(np.isnan(zero))[0]
            return (_("Likely mistake: no program wrote output tile (pid_m={pid_m}, "
                      "pid_n={pid_n}). Check that the pid -> (pid_m, pid_n) mapping reaches "
                      "every tile exactly once (the last group may hold fewer than GROUP_M rows) "
                      "and that the store covers the whole tile.").format(pid_m=row // BLOCK_M,
                      pid_n=col // BLOCK_N))
    if out_dtype == "float32":
        sim = fp16_accumulation(A64, B64, BLOCK_K)
        off_true = np.abs(actual - expected).max()
        if np.abs(actual - sim).max() < 0.25 * off_true:
            return (_("Likely mistake: the accumulator is fp16. Each addition rounds to 11 "
                      "significant bits, and over a long K the errors add up: accumulate in fp32 "
                      "and cast only when storing."))
    return (_("Check the K loop: one product of the two tiles added to the accumulator per step, "
              "then both pointers advanced by one K block, each along its own stride."))


def check_kernel(kernel) -> str:
    """Check a tiled matmul kernel on KERNEL_CASES (and KERNEL_HIDDEN when grading)."""
    guards.require_jit_kernel(kernel, "tiling/matmul-kernel", "matmul_kernel")
    interpreter = runtime.current().interpreter
    cases = registry.with_hidden(KERNEL_CASES, KERNEL_HIDDEN)
    skipped = 0
    ran = 0
    for number, case in enumerate(cases, 1):
        M, N, K, in_dtype, out_dtype, bm, bn, bk, group, seed, values = case
        if interpreter and in_dtype == "bfloat16":
            skipped += 1  # the interpreter's bf16 tl.dot is wrong: bf16 is graded on a GPU
            continue
        cfg = (bm, bn, bk, group)
        label = (_("case {number}/{total} (M={M}, N={N}, K={K}, {in_dtype} -> {out_dtype}, "
                   "BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={group})").format(
                   number=number, total=len(cases), M=M, N=N, K=K, in_dtype=in_dtype,
                   out_dtype=out_dtype, bm=bm, bn=bn, bk=bk, group=group))
        A, B = random_operands((M, K), (K, N), in_dtype, seed, values)
        runtime.check_tensors(A, B, names=("A", "B"), dot=True)
        actual, out = _run_kernel(kernel, A, B, out_dtype, cfg, label)
        A64 = A.detach().cpu().double().numpy()
        B64 = B.detach().cpu().double().numpy()
        expected = A64 @ B64
        dot_tol, rtol = tolerance(in_dtype, out_dtype)
        atol = dot_tol * float((np.abs(A64) @ np.abs(B64)).max())
        try:
            out.verify(label)
        except registry.WrongAnswer as err:
            hint = _strides_hint(kernel, A, B, out_dtype, cfg, label, expected,
                                 atol + rtol * float(np.abs(expected).max()))
            raise registry.WrongAnswer(f"{err}{hint}") from None
        try:
            registry.compare(actual, expected, label, atol=atol, rtol=rtol, tile_rows=bm)
        except registry.WrongAnswer as err:
            row, col = _worst(actual, expected)
            where = (_("The worst element, row {row}, column {col}, is in output tile "
                       "(pid_m={pid_m}, pid_n={pid_n}).").format(row=row, col=col,
                       pid_m=row // bm, pid_n=col // bn))
            hint = _diagnose(kernel, A, B, out_dtype, cfg, actual, expected,
                             atol + rtol * float(np.abs(expected).max()), label)
            raise registry.WrongAnswer(f"{err}\n{where}\n{hint}".rstrip()) from None
        ran += 1
    extra = summary_notes(skipped)
    return _("{ran} cases match A @ B (ragged shapes, fp32 and fp16){extra}").format(ran=ran,
             extra=extra)
