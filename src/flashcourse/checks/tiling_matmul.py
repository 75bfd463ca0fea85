"""Checks of lesson 4, "Tiling a matrix product": the numpy blocked matmul that counts its HBM
bytes, the grouped launch order, the tiled Triton kernel, and a batched matmul kernel written
from scratch. Its self-check questions and veto misconceptions are data:
self_checks/04-tiling-matmul.toml.

The grader launches the student's Triton kernels itself (`launch`, `launch_batched`), always
with the signature of the lesson's kernel, on inputs inside NaN padding and an output inside
canaries.
"""

from __future__ import annotations

import numpy as np

from .. import runtime
from ..blanks import BlankNotFilled, is_blank, refuse_blanks, source_of
from ..models.matmul import (
    cdiv,
    grouped_order,
    launch_order,
    tiled_read_bytes,
)
from . import guards, recording, registry

LESSON = registry.lesson("tiling", "Lesson 4: Tiling a matrix product", pass_line=8)


# ---------------------------------------------------------------- numpy: blocked matmul + bytes

# (M, N, K, BM, BN, BK, numpy dtype, seed)
BLOCKED_CASES = [
    (64, 64, 64, 16, 16, 16, "float64", 0),  # tiles divide the shape: the plain formula
    (37, 53, 29, 16, 16, 8, "float32", 1),  # ragged in M, N and K
    (50, 20, 70, 32, 8, 16, "float32", 2),  # BM != BN: A and B are re-read different counts
    (8, 96, 40, 8, 32, 40, "float64", 3),  # one K step
    (3, 5, 7, 4, 4, 4, "float32", 4),  # smaller than one tile
]
BLOCKED_HIDDEN = [
    (90, 33, 65, 32, 16, 32, "float64", 101),
    (17, 129, 12, 8, 64, 5, "float32", 102),
]


def _blocked_inputs(M, N, K, dtype, seed):
    rng = np.random.default_rng(registry.case_seed(seed))
    return (rng.standard_normal((M, K)).astype(dtype),
            rng.standard_normal((K, N)).astype(dtype))


def _byte_mistakes(M, N, K, BM, BN, BK, itemsize):
    """Byte counts of classic counting mistakes, with what each one says."""
    reads = tiled_read_bytes(M, N, K, BM, BN, itemsize)
    a_part = M * K * cdiv(N, BN) * itemsize
    steps = cdiv(M, BM) * cdiv(N, BN) * cdiv(K, BK)
    return [
        (reads // itemsize, "You counted elements, not bytes: multiply by the item size "
                            "(a.nbytes does it for you)."),
        (a_part, "Only the A tiles are counted: every K step loads one tile of A and one of B."),
        (reads - a_part, "Only the B tiles are counted: every K step loads one tile of A and one "
                         "of B."),
        (steps * (BM * BK + BK * BN) * itemsize,
         "You counted every tile as full-size, but edge tiles are smaller when the shape is not "
         "a multiple of the tile: count the elements actually loaded (a.nbytes + b.nbytes)."),
        (reads + M * N * itemsize, "Count only the reads of A and B, not the output C."),
        ((M * K * cdiv(N, BM) + K * N * cdiv(M, BN)) * itemsize,
         "A is re-read once per column block of C (cdiv(N, BN) times) and B once per row block "
         "(cdiv(M, BM) times): the roles of BM and BN are swapped."),
        (M * K * itemsize + K * N * itemsize,
         "Each matrix counted once: that is the ideal with infinite on-chip memory, but a tiled "
         "kernel loads every tile again for each output tile that needs it."),
    ]


@registry.exercise("tiling/blocked-bytes", "numpy blocked matmul that counts HBM bytes", 1)
def _check_blocked(blocked_matmul) -> str:
    if not callable(blocked_matmul):
        raise registry.WrongAnswer("Pass the function itself: check(..., blocked_matmul).")
    cases = registry.with_hidden(BLOCKED_CASES, BLOCKED_HIDDEN)
    for number, (M, N, K, BM, BN, BK, dtype, seed) in enumerate(cases, 1):
        A, B = _blocked_inputs(M, N, K, dtype, seed)
        label = (f"case {number}/{len(cases)} (M={M}, N={N}, K={K}, BM={BM}, BN={BN}, "
                 f"BK={BK}, {dtype})")
        result = registry.run_student(blocked_matmul, label, A.copy(), B.copy(), BM, BN, BK)
        if not isinstance(result, tuple) or len(result) != 2:
            raise registry.WrongAnswer(f"{label}: return a pair (C, bytes_read), got "
                                      f"{type(result).__name__}.")
        C, bytes_read = result
        expected = A.astype(np.float64) @ B.astype(np.float64)
        scale = float((np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))).max())
        tol = 1e-5 if dtype == "float32" else 1e-12
        registry.compare(C, expected, f"{label}, the product C", atol=tol * scale,
                        tile_rows=BM, hint="Each output tile C[i:i+BM, j:j+BN] is the sum over "
                        "K steps of A[i:i+BM, k:k+BK] @ B[k:k+BK, j:j+BN].")
        itemsize = np.dtype(dtype).itemsize
        reads = tiled_read_bytes(M, N, K, BM, BN, itemsize)
        if is_blank(bytes_read):
            raise BlankNotFilled(f"Fill in the blank: {label} returned ______ as bytes_read.")
        if not isinstance(bytes_read, (int, np.integer)) or bytes_read != reads:
            hint = next((why for wrong, why in _byte_mistakes(M, N, K, BM, BN, BK, itemsize)
                         if wrong == bytes_read and wrong != reads),
                        "Count the bytes of every A tile and B tile that the K loop loads, "
                        "for every output tile.")
            raise registry.WrongAnswer(
                f"{label}: bytes_read = {bytes_read!r} is not what this blocked product reads "
                f"from HBM. {hint}")
    hidden = registry.hidden_note()
    return f"{len(cases)} cases: products and byte counts match the formula{hidden}"


# ---------------------------------------------------------------- grouped launch order

# (num_pid_m, num_pid_n, GROUP_M)
ORDER_CASES = [(6, 6, 2), (7, 5, 3), (4, 9, 4), (5, 3, 8), (3, 4, 1), (10, 2, 4)]


@registry.exercise("tiling/grouped-order", "grouped launch order (GROUP_M swizzle)", 1)
def _check_order(grouped_order_fn) -> str:
    if not callable(grouped_order_fn):
        raise registry.WrongAnswer("Pass the function itself: check(..., grouped_order).")
    for number, (pm, pn, group) in enumerate(ORDER_CASES, 1):
        label = (f"case {number}/{len(ORDER_CASES)} (num_pid_m={pm}, num_pid_n={pn}, "
                 f"GROUP_M={group})")
        got = []
        for pid in range(pm * pn):
            tile = registry.run_student(grouped_order_fn, label, pid, pm, pn, group)
            if is_blank(tile) or any(is_blank(t) for t in tuple(tile)):
                raise BlankNotFilled(f"Fill in the blank: {label} returned ______.")
            got.append((int(tile[0]), int(tile[1])))
        want = launch_order(pm, pn, group)
        if got == want:
            continue
        missing = sorted(set(want) - set(got))
        twice = sorted({t for t in got if got.count(t) > 1})
        if missing or twice:
            hint = (f"tile {missing[0]} is never computed" if missing else "")
            hint += ("; " if missing and twice else "") + \
                (f"tile {twice[0]} is computed twice" if twice else "")
            extra = (" The last group may hold fewer than GROUP_M rows: take "
                     "group_rows = min(num_pid_m - first_pid_m, GROUP_M) and use it for both "
                     "% and //." if pm % group else "")
            raise registry.WrongAnswer(f"{label}: every tile must be computed by exactly one "
                                      f"program, but {hint}.{extra}")
        pid = next(p for p, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
        row_major = [(p // pn, p % pn) for p in range(pm * pn)]
        hint = ("This is row-major order, one tile row after the other: walk down a group of "
                "GROUP_M rows first, then move one column right." if got == row_major else
                "Within a group, consecutive programs go down the group's rows first, then "
                "one column right.")
        raise registry.WrongAnswer(f"{label}: program {pid} computes tile {got[pid]}, which is "
                                  f"not its tile in grouped order. {hint}")
    return f"{len(ORDER_CASES)} grids: every program maps to its tile in grouped order"


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


def _torch_dtype(name):
    import torch

    return getattr(torch, name)


def _tolerance(in_dtype: str, out_dtype: str) -> tuple[float, float]:
    """(atol as a fraction of max(|A| @ |B|), rtol): products of fp16/bf16 values are exact in
    fp32; fp32 tl.dot uses TF32 on a GPU; the output dtype adds its rounding."""
    if in_dtype == "float32":
        dot = 1e-5 if runtime.current().interpreter else 4e-3
    else:
        dot = 1e-5
    rtol = {"float32": 0.0, "float16": 1e-3, "bfloat16": 8e-3}[out_dtype]
    return dot, rtol


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


def _kernel_inputs(M, N, K, dtype, seed, values):
    import torch

    gen = torch.Generator().manual_seed(registry.case_seed(seed))
    shape_a, shape_b = (M, K), (K, N)
    if values == "uniform":  # all positive: sums grow with K, and so does fp16 rounding
        A, B = torch.rand(shape_a, generator=gen), torch.rand(shape_b, generator=gen)
    else:
        A, B = torch.randn(shape_a, generator=gen), torch.randn(shape_b, generator=gen)
    device = runtime.current().device
    return A.to(_torch_dtype(dtype)).to(device), B.to(_torch_dtype(dtype)).to(device)


def _embedded(tensor, row_pad, col_pad, fill, contiguous=False):
    """A copy of a 2-D tensor inside a larger buffer filled with `fill`: with row_pad rows and
    col_pad columns after it (a strided view), or, when contiguous, as the start of a flat
    buffer with the same room after it. A load or store up to one tile past an edge stays
    inside the buffer, so a missing mask shows as poison instead of touching other memory."""
    import torch

    rows, cols = tensor.shape
    if contiguous:
        room = (rows + row_pad) * (cols + col_pad)
        storage = torch.full((room + 64,), fill, dtype=tensor.dtype, device=tensor.device)
        view = storage[:rows * cols].view(rows, cols)
    else:
        buffer = torch.full((rows + row_pad, cols + col_pad), fill, dtype=tensor.dtype,
                            device=tensor.device)
        view = buffer[:rows, :cols]
    view.copy_(tensor)
    return view


def _run_kernel(kernel, A, B, out_dtype, cfg, label, padding="nan"):
    """Run the kernel on fresh buffers; return (output as float64 numpy, the Canaried).

    padding="nan": inputs inside NaN padding and the output inside canaries (the graded run);
    "zero": inputs inside zeros (a read past an edge adds 0); "contiguous": inputs (with NaN
    after them) and output with the strides of contiguous tensors. The padding is a whole
    tile wide, so even a kernel without masks stays inside the buffers."""
    import torch

    from . import buffers

    M, N = A.shape[0], B.shape[1]
    bm, bn, bk, _ = cfg
    dtype = _torch_dtype(out_dtype)
    out = buffers.Canaried((M, N), dtype, device=A.device, pad_rows=bm, pad_cols=bn)
    if padding == "nan":
        a = buffers.poisoned(A, pad_rows=bm, pad_cols=bk)
        b = buffers.poisoned(B, pad_rows=bk, pad_cols=bn)
    else:
        contiguous = padding == "contiguous"
        fill = float("nan") if contiguous else 0.0
        a = _embedded(A, bm, bk, fill, contiguous)
        b = _embedded(B, bk, bn, fill, contiguous)
        if contiguous:
            out.tensor = _embedded(torch.full((M, N), float("nan"), dtype=dtype,
                                              device=A.device), bm, bn, float("nan"), True)
    guards.guarded(label, lambda: launch(kernel, a, b, out.tensor, *cfg),
                           tensors=[a, b, out.tensor])
    return out.tensor.detach().cpu().double().numpy(), out


def _worst(actual, expected):
    error = np.abs(actual - expected)
    error[~np.isfinite(actual)] = np.inf
    return np.unravel_index(int(np.argmax(error)), actual.shape)


def _fp16_accumulation(A64, B64, BK):
    """The product as a kernel with an fp16 accumulator computes it (fp32 per K step)."""
    acc = np.zeros((A64.shape[0], B64.shape[1]), dtype=np.float16)
    for k in range(0, A64.shape[1], BK):
        step = (A64[:, k:k + BK] @ B64[k:k + BK]).astype(np.float32)
        acc = (acc.astype(np.float32) + step.astype(np.float16).astype(np.float32)) \
            .astype(np.float16)
    return acc.astype(np.float64)


def _strides_hint(kernel, A, B, out_dtype, cfg, label, expected, atol) -> str:
    """After a store outside the output: say so when the kernel is right on contiguous
    tensors, which means it indexes with a width instead of a stride."""
    try:
        contiguous, _ = _run_kernel(kernel, A, B, out_dtype, cfg, label, "contiguous")
    except registry.WrongAnswer:
        return ""
    if registry.same_result(contiguous, expected, atol):
        return ("\nLikely mistake: your kernel is right on contiguous tensors only: it steps "
                "between rows by the width (K or N) instead of the stride. Use stride_am, "
                "stride_bk and stride_cm for rows.")
    return ""


def _diagnose(kernel, A, B, out_dtype, cfg, actual, expected, atol, label) -> str:
    """Name the mistake behind a wrong output, rerunning the kernel where that tells more."""
    M, N, K = A.shape[0], B.shape[1], A.shape[1]
    BLOCK_M, BLOCK_N, BLOCK_K, _ = cfg
    A64 = A.detach().cpu().double().numpy()
    B64 = B.detach().cpu().double().numpy()
    transposed = {
        "A @ B.T": lambda: A64 @ B64.T, "A.T @ B": lambda: A64.T @ B64,
        "(A @ B).T": lambda: (A64 @ B64).T, "A.T @ B.T": lambda: A64.T @ B64.T,
    }
    if M == N == K:
        for name, make in transposed.items():
            if registry.same_result(actual, make(), atol):
                return (f"Likely mistake: your kernel computed {name}, a transposed index. "
                        "Check which offsets run down the rows and which across the columns "
                        "of A, B and C, each with its own strides (the pointer section of the "
                        "lesson).")
    try:
        contiguous, _ = _run_kernel(kernel, A, B, out_dtype, cfg, label, "contiguous")
        if registry.same_result(contiguous, expected, atol):
            return ("Likely mistake: your kernel is right on contiguous tensors but wrong on the "
                    "grader's views, whose rows are longer than the tensor is wide. Index with "
                    "the stride arguments (stride_am, stride_ak, stride_bk, stride_bn, "
                    "stride_cm, stride_cn), never with K or N.")
        zero, _ = _run_kernel(kernel, A, B, out_dtype, cfg, label, "zero")
    except registry.WrongAnswer:
        return ""
    if np.isnan(actual).any():
        if registry.same_result(zero, expected, atol):
            if K % BLOCK_K:
                return ("Likely mistake: the last K step reads past column K-1 of A and row K-1 "
                        "of B (K is not a multiple of BLOCK_K). Mask both loads with the K that "
                        "is left: offs_k < k_left (K - k at step k), with other=0.0.")
            return ("Likely mistake: a load reads outside A or B. Mask it: rows offs_m < M for "
                    "A, columns offs_n < N for B, and other=0.0.")
        if np.isnan(zero).any():
            row, col = np.argwhere(np.isnan(zero))[0]
            return (f"Likely mistake: no program wrote output tile (pid_m={row // BLOCK_M}, "
                    f"pid_n={col // BLOCK_N}). Check that the pid -> (pid_m, pid_n) mapping "
                    "reaches every tile exactly once (the last group may hold fewer than "
                    "GROUP_M rows) and that the store covers the whole tile.")
    if out_dtype == "float32":
        sim = _fp16_accumulation(A64, B64, BLOCK_K)
        off_true = np.abs(actual - expected).max()
        if np.abs(actual - sim).max() < 0.25 * off_true:
            return ("Likely mistake: the accumulator is fp16. Each addition rounds to 11 "
                    "significant bits, and over a long K the errors add up: accumulate in "
                    "fp32 and cast only when storing.")
    return ("Check the K loop: one product of the two tiles added to the accumulator per "
            "step, then both pointers advanced by one K block, each along its own stride.")


def _refuse_stub(kernel, name):
    source = source_of(kernel) or ""
    refuse_blanks(kernel, name)
    if "raise NotImplementedError" in source:
        raise NotImplementedError(name)


def _require_matmul_kernel(kernel) -> None:
    if not hasattr(kernel, "fn") or not hasattr(kernel, "__getitem__"):
        raise registry.WrongAnswer("Pass the @triton.jit kernel itself: "
                                  "check('tiling/matmul-kernel', matmul_kernel).")
    _refuse_stub(kernel, "matmul_kernel")


@registry.exercise("tiling/matmul-kernel", "tiled Triton matmul (tl.dot, masks, fp32 acc, "
                  "GROUP_M)", 2, kernel=True)
def _check_kernel(kernel) -> str:
    recording.inspected("tiling/matmul-kernel: the answer is a kernel",
                        lambda: _require_matmul_kernel(kernel))
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
        label = (f"case {number}/{len(cases)} (M={M}, N={N}, K={K}, {in_dtype} -> {out_dtype}, "
                 f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={group})")
        A, B = _kernel_inputs(M, N, K, in_dtype, seed, values)
        runtime.check_tensors(A, B, names=("A", "B"), dot=True)
        actual, out = _run_kernel(kernel, A, B, out_dtype, cfg, label)
        A64 = A.detach().cpu().double().numpy()
        B64 = B.detach().cpu().double().numpy()
        expected = A64 @ B64
        dot_tol, rtol = _tolerance(in_dtype, out_dtype)
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
            where = (f"The worst element, row {row}, column {col}, is in output tile "
                     f"(pid_m={row // bm}, pid_n={col // bn}).")
            hint = _diagnose(kernel, A, B, out_dtype, cfg, actual, expected,
                             atol + rtol * float(np.abs(expected).max()), label)
            raise registry.WrongAnswer(f"{err}\n{where}\n{hint}".rstrip()) from None
        ran += 1
    notes = []
    if skipped:
        notes.append(f"{skipped} bf16 case(s) run only on a GPU")
    if not registry.grading_mode():
        notes.append("graders also run hidden cases")
    extra = f" ({'; '.join(notes)})" if notes else ""
    return f"{ran} cases match A @ B (ragged shapes, fp32 and fp16){extra}"


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


def _batched_inputs(batch, M, N, K, dtype, seed, values):
    import torch

    gen = torch.Generator().manual_seed(registry.case_seed(seed))
    draw = torch.rand if values == "uniform" else torch.randn  # uniform: sums grow with K
    A, B = draw((batch, M, K), generator=gen), draw((batch, K, N), generator=gen)
    device = runtime.current().device
    return A.to(_torch_dtype(dtype)).to(device), B.to(_torch_dtype(dtype)).to(device)


def _padded(tensor, row_pad, col_pad, fill, contiguous=False):
    """A copy of a (batch, rows, cols) tensor inside a buffer filled with `fill`: a view with
    row_pad rows and col_pad columns after every matrix, or, when contiguous, contiguous
    strides at the start of a buffer with the same room after it."""
    import torch

    batch, rows, cols = tensor.shape
    room = batch * (rows + row_pad) * (cols + col_pad)
    storage = torch.full((room,), fill, dtype=tensor.dtype, device=tensor.device)
    if contiguous:
        view = storage[:tensor.numel()].view(batch, rows, cols)
    else:
        view = storage.view(batch, rows + row_pad, cols + col_pad)[:, :rows, :cols]
    view.copy_(tensor)
    return view


def _run_batched(kernel, A, B, out_dtype, cfg, label, padding="nan"):
    """Run the kernel on fresh buffers; return (output as float64 numpy, the Canaried).
    padding as in `_run_kernel`: "nan" (the graded run), "zero" or "contiguous"."""
    import torch

    from . import buffers

    batch, M, N = A.shape[0], A.shape[1], B.shape[2]
    bm, bn, bk = cfg
    dtype = _torch_dtype(out_dtype)
    out = buffers.Canaried((batch, M, N), dtype, device=A.device, pad_rows=bm + C_EXTRA_ROWS,
                           pad_cols=bn + C_EXTRA_COLS)
    if padding == "nan":
        a = buffers.poisoned(A, pad_rows=bm, pad_cols=bk)
        b = buffers.poisoned(B, pad_rows=bk, pad_cols=bn)
    else:
        contiguous = padding == "contiguous"
        fill = float("nan") if contiguous else 0.0
        a = _padded(A, bm, bk, fill, contiguous)
        b = _padded(B, bk, bn, fill, contiguous)
        if contiguous:
            out.tensor = _padded(torch.full((batch, M, N), float("nan"), dtype=dtype,
                                            device=A.device), bm, bn, float("nan"), True)
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
                return (f"Likely mistake: your kernel computed {name} for each matrix, a "
                        "transposed index. Check which offsets run down the rows and which "
                        "across the columns of A, B and C, each with its own strides.")
    try:
        contiguous, _ = _run_batched(kernel, A, B, out_dtype, cfg, label, "contiguous")
        if registry.same_result(contiguous, expected, atol):
            return ("Likely mistake: your kernel is right on contiguous tensors only: it "
                    "computes a stride from the shape (K, N, M * K, ...) instead of using the "
                    "one it is given. The grader's tensors have padding after every row and "
                    "every matrix.")
        zero, _ = _run_batched(kernel, A, B, out_dtype, cfg, label, "zero")
    except registry.WrongAnswer:
        return ""
    if np.isnan(actual).any() and registry.same_result(zero, expected, atol):
        if K % BLOCK_K:
            return ("Likely mistake: the last K step reads past column K-1 of A and row K-1 "
                    "of B (K is not a multiple of BLOCK_K). Mask both loads with the K that "
                    "is left (K - k at step k), with other=0.0.")
        return ("Likely mistake: a load reads outside A or B. Mask it: rows < M for A, "
                "columns < N for B, and other=0.0.")
    if out_dtype == "float32":
        simulated = np.stack([_fp16_accumulation(A64[z], B64[z], BLOCK_K)
                              for z in range(batch)])
        off_true = np.abs(actual - expected).max()
        if np.abs(actual - simulated).max() < 0.25 * off_true:
            return ("Likely mistake: the accumulator is fp16. Each addition rounds to 11 "
                    "significant bits, and over a long K the errors add up: accumulate in "
                    "fp32 and cast only when storing.")
    return ("Check the K loop: one tl.dot of the two tiles added to the fp32 accumulator per "
            "step, then both pointers advanced by BLOCK_K along K, each with its own stride.")


@registry.exercise("tiling/batched-matmul", "batched tiled Triton matmul, written from scratch",
                   2, kernel=True)
def _check_batched(kernel) -> str:
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
        label = (f"case {number}/{len(cases)} (batch={batch}, M={M}, N={N}, K={K}, "
                 f"{in_dtype} -> {out_dtype}, BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk})")
        A, B = _batched_inputs(batch, M, N, K, in_dtype, seed, values)
        runtime.check_tensors(A, B, names=("A", "B"), dot=True)
        actual, out = _run_batched(kernel, A, B, out_dtype, cfg, label)
        A64 = A.detach().cpu().double().numpy()
        B64 = B.detach().cpu().double().numpy()
        expected = A64 @ B64
        dot_tol, rtol = _tolerance(in_dtype, out_dtype)
        atol = dot_tol * float((np.abs(A64) @ np.abs(B64)).max())
        allowed = atol + rtol * float(np.abs(expected).max())
        try:
            out.verify(label)
        except registry.WrongAnswer as err:
            if M % bm or N % bn:
                raise
            text = str(err).split(". Mask")[0]
            raise registry.WrongAnswer(
                f"{text}. This case has no ragged edge, so it is not a missing mask: check "
                "C's pointers: C has its own batch stride stride_cz and row stride "
                "stride_cm.") from None
        written = np.isfinite(actual)
        if batch > 1 and written[0].all() and not written[1:].any():
            raise registry.WrongAnswer(
                f"{label}: only matrix 0 of C was written. Every program must offset its "
                "pointers by its batch index (tl.program_id(2)) times the batch stride of "
                "each tensor: z * stride_az, z * stride_bz and z * stride_cz.")
        try:
            registry.compare(actual, expected, label, atol=atol, rtol=rtol, tile_rows=bm)
        except registry.WrongAnswer as err:
            hint = _batched_diagnosis(kernel, A, B, out_dtype, cfg, actual, expected, allowed,
                                      label)
            raise registry.WrongAnswer(f"{err}\n{hint}".rstrip()) from None
        ran += 1
    notes = []
    if skipped:
        notes.append(f"{skipped} bf16 case(s) run only on a GPU")
    if not registry.grading_mode():
        notes.append("graders also run hidden cases")
    extra = f" ({'; '.join(notes)})" if notes else ""
    return f"{ran} cases match A[z] @ B[z] (ragged shapes, fp32 and fp16){extra}"


__all__ = ["grouped_order", "launch", "launch_batched"]
