"""Checks of lesson 3, "Coalescing, divergence and transposes": counting sectors and lines,
warp efficiency under a branch, a strided copy and two transposes in Triton, and a batched
transpose written from scratch. Its self-check questions and veto misconceptions are data:
self_checks/03-coalescing.toml."""

from __future__ import annotations

import numpy as np
import torch
import triton

from .. import runtime
from ..i18n import N_, _
from ..models import memory as memory_model
from . import buffers, guards, registry

LESSON = registry.lesson("coalescing", N_("Lesson 3: Coalescing, divergence and transposes"),
                        pass_line=8)


# ---------------------------------------------------------------- sectors and lines

# (description, addresses, access bytes)
def _sector_cases(hidden: bool):
    wa = memory_model.warp_addresses
    cases = [
        (_("32 contiguous fp32"), wa("contiguous"), 4),
        (_("32 fp32 starting 4 bytes late"), wa("offset"), 4),
        (_("fp32 with a stride of 2 elements"), wa("strided", stride=2), 4),
        (_("one fp32 per row of a 4 KiB-row matrix"), wa("column"), 4),
        (_("32 random fp32"), wa("random", seed=3), 4),
        (_("32 contiguous fp16"), wa("contiguous", element_bytes=2), 2),
        (_("32 contiguous 16-byte vectors"), wa("contiguous", element_bytes=16), 16),
        (_("16-byte vectors starting 8 bytes late"), wa("offset", element_bytes=16,
                                                        offset_bytes=8), 16),
        (_("fp32 starting 30 bytes late (each read straddles)"), wa("contiguous") * 8 + 30, 4),
        (_("all 32 threads read the same word"), np.full(32, 4096), 4),
    ]
    if hidden:
        cases += [(_("fp16 with a stride of 3"), wa("strided", element_bytes=2, stride=3), 2),
                  (_("random fp16"), wa("random", element_bytes=2, seed=9), 2)]
    return cases


def _sector_variants(addresses, size):
    a = np.asarray(addresses, dtype=np.int64)
    unique = lambda x: len(np.unique(x))  # noqa: E731
    return [
        ((len(a), len(a)), _("You counted one transaction per thread: count DISTINCT sectors and "
                             "lines (np.unique), threads that share a sector share its "
                             "transaction.")),
        ((unique(np.concatenate([a // 32, (a + size) // 32])),
          unique(np.concatenate([a // 128, (a + size) // 128]))),
         _("Off by one: a read of access_bytes bytes at address a ends at byte a + access_bytes - "
           "1, not a + access_bytes.")),
        ((unique(a // 32), unique(a // 128)),
         _("Only the first byte of each read is counted: a read can straddle two sectors, count "
           "the sector of its last byte (a + access_bytes - 1) too.")),
        ((unique(np.concatenate([a // 128, (a + size - 1) // 128])),
          unique(np.concatenate([a // 32, (a + size - 1) // 32]))),
         _("Sectors and lines are swapped: sectors are 32 bytes, lines 128; return (sectors, "
           "lines).")),
        ((unique(a), unique(a)), _("You counted distinct addresses, not the sectors and lines "
                                   "they fall in: divide the byte addresses by 32 and by 128.")),
    ]


@registry.exercise("coalescing/sectors", N_("sectors and lines of a warp's load"), 1)
def _check_sectors(sectors_and_lines) -> str:
    cases = _sector_cases(registry.grading_mode())
    for number, (what, addresses, size) in enumerate(cases, 1):
        case = _("case {number}/{total} ({what}, access_bytes={size})").format(number=number,
                 total=len(cases), what=what, size=size)
        got = registry.run_student(sectors_and_lines, case, addresses.copy(), size)
        want = memory_model.sectors_and_lines(addresses, size)
        try:
            got = tuple(int(v) for v in got)
        except (TypeError, ValueError) as err:
            raise registry.WrongAnswer(_("{case}: return a pair (sectors, lines), not "
                                         "{got!r}.").format(case=case, got=got)) from err
        if got != want:
            hint = next((why for value, why in _sector_variants(addresses, size)
                         if value == got),
                        _("A thread's read covers every byte from its address to the end of its "
                          "element; count the distinct 32-byte sectors and 128-byte lines those "
                          "bytes fall in: {section}.").format(
                          section=_(registry.section_of('coalescing/q1-sectors'))))
            raise registry.WrongAnswer(_("{case}: you returned (sectors, lines) = {got}, which is "
                                         "not right for this access pattern. {hint}").format(
                                         case=case, got=got, hint=hint))
    return _("{total} access patterns right{hidden}").format(total=len(cases),
             hidden=registry.hidden_note())


# ---------------------------------------------------------------- warp efficiency

def _divergence_cases(hidden: bool):
    t = np.arange(256)
    rng = np.random.default_rng(registry.case_seed(5))
    cases = [
        ("t % 2 == 0", t % 2 == 0),
        (_("(t // 32) % 2 == 0 (uniform per warp)"), (t // 32) % 2 == 0),
        ("t < 40", t < 40),
        ("t % 32 < 8", t % 32 < 8),
        (_("all True"), np.ones(256, bool)),
        (_("random, 90% True"), rng.random(256) < 0.9),
    ]
    if hidden:
        cases += [("t >= 200", t >= 200), (_("all False"), np.zeros(256, bool))]
    return cases


def _efficiency_variants(predicate):
    warps = predicate.reshape(-1, 32)
    taken = warps.sum(axis=1)
    return [
        (0.5, _("Not every warp runs both paths: a warp whose 32 lanes agree runs only its one "
                "path, at full efficiency.")),
        (float(predicate.mean()), _("That is the fraction of threads taking the `if`; efficiency "
                                    "is useful lane slots over issued lane slots across both "
                                    "paths.")),
        (1.0, _("Count lane slots per executed path: a warp with both kinds of lanes issues 2 x "
                "32 slots for its 32 useful ones.")),
        (predicate.size / (32 * max(int((taken > 0).sum()), 1)),
         _("Count the else path too: a warp runs it when any lane's predicate is False (taken < "
           "32).")),
    ]


@registry.exercise("coalescing/warp-efficiency", N_("warp efficiency under divergence"), 1)
def _check_warp_efficiency(warp_efficiency) -> str:
    cases = _divergence_cases(registry.grading_mode())
    results = []
    for number, (what, predicate) in enumerate(cases, 1):
        case = _("case {number}/{total} (256 threads, predicate {what})").format(number=number,
                 total=len(cases), what=what)
        got = registry.run_student(warp_efficiency, case, predicate.copy())
        try:
            results.append(float(got))
        except (TypeError, ValueError) as err:
            raise registry.WrongAnswer(_("{case}: return one number, not {got!r}.").format(
                                         case=case, got=got)) from err
    for number, ((what, predicate), value) in enumerate(zip(cases, results, strict=True), 1):
        want = memory_model.warp_efficiency(predicate)
        if np.isclose(value, want, rtol=1e-9):
            continue
        case = _("case {number}/{total} (256 threads, predicate {what})").format(number=number,
                 total=len(cases), what=what)
        # name the mistake whose values match the student's on every case
        hint = (_("Count, per warp, how many paths of the branch run (one for each side that at "
                  "least one lane takes), then how many lane slots were busy: {section}.").format(
                  section=_(registry.section_of('coalescing/q2-divergence'))))
        for index in range(4):
            expected = [_efficiency_variants(p)[index][0] for _, p in cases]
            if np.allclose(results, expected, rtol=1e-9):
                hint = _efficiency_variants(predicate)[index][1]
                break
        raise registry.WrongAnswer(_("{case}: you returned {value:.4g}, which is not this "
                                     "predicate's warp efficiency. {hint}").format(case=case,
                                     value=value, hint=hint))
    return _("{total} predicates right{hidden}").format(total=len(cases),
             hidden=registry.hidden_note())


# ---------------------------------------------------------------- strided copy

# (n_elements, stride, BLOCK): ragged last blocks, stride 1 included
STRIDED_CASES = [(64, 5, 64), (1000, 2, 256), (300, 4, 128), (1, 3, 64), (129, 8, 128),
                 (500, 1, 128)]
STRIDED_HIDDEN = [(777, 3, 256), (33, 16, 32)]


def run_strided_copy(kernel, n, stride, block, dtype, case, seed=0):
    device = runtime.current().device
    generator = torch.Generator().manual_seed(registry.case_seed(seed))
    source = (torch.randn(n * stride, generator=generator) * 100).to(dtype).to(device)
    pad = (n + block) * stride
    x = buffers.poisoned(source, pad_cols=pad)
    out = buffers.Canaried((n,), dtype, device, pad_cols=pad)
    guards.launch(kernel, (triton.cdiv(n, block),), case, x, out.tensor, n, stride,
                          BLOCK=block)
    return out, source


@registry.exercise("coalescing/strided-copy", N_("Triton strided copy"), 1, kernel=True)
def _check_strided(strided_copy_kernel) -> str:
    guards.require_jit_kernel(strided_copy_kernel, "coalescing/strided-copy",
                              "strided_copy_kernel")
    cases = registry.with_hidden(STRIDED_CASES, STRIDED_HIDDEN)
    dtypes = guards.graded_dtypes()
    total, number = len(cases) * len(dtypes), 0
    for dtype in dtypes:
        for n, stride, block in cases:
            number += 1
            case = (_("case {number}/{total} (n_elements={n}, stride={stride}, BLOCK={block}, "
                      "{dtype})").format(number=number, total=total, n=n, stride=stride,
                      block=block, dtype=guards.dtype_name(dtype)))
            out, source = run_strided_copy(strided_copy_kernel, n, stride, block, dtype, case,
                                           seed=number)
            outside = int(out.changed_canaries().sum())
            if outside > triton.cdiv(n, block) * block - n:
                raise registry.WrongAnswer(
                    _("{case}: your kernel wrote {outside} values outside the output, more than a "
                      "missing mask on the last block could: the stride belongs to the load only: "
                      "the output is contiguous, the input is read every stride-th "
                      "element.").format(case=case, outside=outside))
            out.verify(case)
            want = source[::stride][:n]
            got = out.tensor.cpu()
            if stride > 1 and n > 1 and registry.same_result(got, source[:n].cpu(), 0):
                raise registry.WrongAnswer(_("{case}: you copied x[i], not x[i * stride]: the "
                                             "load must step by the stride.").format(case=case))
            guards.unwritten_hint(
                out.unwritten().cpu(), case,
                _("(NaN: never stored, or loaded from outside the input.) The mask compares "
                  "output indices with the output's length, on the load and the store."))
            registry.compare(got, want.cpu(), case, atol=0,
                            hint=_("y[i] must be x[i * stride]; a masked-off load without `other` "
                                   "gives undefined values."))
    return _("{total} cases right, canaries intact{hidden}").format(total=total,
             hidden=registry.hidden_note())


# ---------------------------------------------------------------- transposes

# (M, N, BLOCK_M, BLOCK_N) for the tiled kernel; the first case has no ragged edge
TILED_CASES = [(64, 32, 32, 32), (33, 47, 16, 32), (1, 1, 16, 16), (100, 20, 32, 16),
               (40, 72, 16, 64)]
TILED_HIDDEN = [(65, 65, 32, 32), (7, 130, 16, 16)]
# (M, N, BLOCK) for the naive kernel: one program per row and block of columns
NAIVE_CASES = [(16, 64, 32), (33, 47, 32), (1, 1, 16), (17, 100, 64), (5, 300, 128)]
NAIVE_HIDDEN = [(40, 40, 16)]


def run_transpose(kernel, m, n, blocks, dtype, case, tiled, seed=0):
    device = runtime.current().device
    generator = torch.Generator().manual_seed(registry.case_seed(seed))
    values = (torch.randn(m, n, generator=generator) * 100).to(dtype).to(device)
    pad = max(blocks) + 8
    x = buffers.poisoned(values, pad_rows=pad, pad_cols=pad)
    out = buffers.Canaried((n, m), dtype, device, pad_rows=pad, pad_cols=pad)
    if tiled:
        block_m, block_n = blocks
        grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
        guards.launch(kernel, grid, case, x, out.tensor, m, n, x.stride(0),
                              out.tensor.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
    else:
        (block,) = blocks
        grid = (m, triton.cdiv(n, block))
        guards.launch(kernel, grid, case, x, out.tensor, m, n, x.stride(0),
                              out.tensor.stride(0), BLOCK=block)
    return out, x, values


def _transpose_mistake(got, x, values, m, n) -> str:
    storage = x.untyped_storage()
    flat = torch.empty(0, dtype=x.dtype, device=x.device).set_(storage, x.storage_offset(),
                                                                (m * n,), (1,))
    packed = flat.reshape(m, n).cpu()
    if registry.same_result(got, packed.T, 0):
        return (_("You read x with row stride N: x is a view whose rows are longer than N. Use "
                  "the row stride you are given."))
    if m == n and registry.same_result(got, values.cpu(), 0):
        return (_("The output equals the input: the tile was stored without being transposed. "
                  "Transpose the tile before storing it, to pointers laid out the other way "
                  "round."))
    return (_("y[j, i] must be x[i, j]: read x with its row stride, write y with its own (rows "
              "and columns swapped), both masked. Re-read the transpose section."))


def _check_transpose(kernel, exercise_id, name, tiled) -> str:
    guards.require_jit_kernel(kernel, exercise_id, name)
    if tiled:
        cases = registry.with_hidden(TILED_CASES, TILED_HIDDEN)
    else:
        cases = registry.with_hidden(NAIVE_CASES, NAIVE_HIDDEN)
    dtypes = guards.graded_dtypes()
    total, number = len(cases) * len(dtypes), 0
    for dtype in dtypes:
        for m, n, *blocks in cases:
            number += 1
            shape = (f"BLOCK_M={blocks[0]}, BLOCK_N={blocks[1]}" if tiled
                     else f"BLOCK={blocks[0]}")
            case = (_("case {number}/{total} (x of shape ({m}, {n}), {shape}, {dtype})").format(
                      number=number, total=total, m=m, n=n, shape=shape,
                      dtype=guards.dtype_name(dtype)))
            out, x, values = run_transpose(kernel, m, n, blocks, dtype, case, tiled,
                                           seed=number)
            ragged = (m % blocks[0] or n % blocks[-1]) if tiled else n % blocks[0]
            out.verify(case, None if ragged else _(
                "This case has no ragged edge, so it is not a missing mask: check the output's "
                "pointers: y has shape (N, M) and its own row stride."))
            got = out.tensor.cpu()
            try:
                registry.compare(got, values.T.cpu(), case, atol=0)
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_transpose_mistake(got, x, values, m, n)}") from None
    return _("{total} cases transposed exactly, canaries intact{hidden}").format(total=total,
             hidden=registry.hidden_note())


@registry.exercise("coalescing/transpose-naive", N_("Triton transpose, one row per program"), 1,
                  kernel=True)
def _check_naive(transpose_naive_kernel) -> str:
    return _check_transpose(transpose_naive_kernel, "coalescing/transpose-naive",
                            "transpose_naive_kernel", tiled=False)


@registry.exercise("coalescing/transpose-tiled", N_("Triton transpose, 2-D tiles"), 1, kernel=True)
def _check_tiled(transpose_tiled_kernel) -> str:
    return _check_transpose(transpose_tiled_kernel, "coalescing/transpose-tiled",
                            "transpose_tiled_kernel", tiled=True)


# ---------------------------------------------------------------- batched transpose, from scratch

# (batch, M, N, BLOCK_M, BLOCK_N): the first case has no ragged edge; the rest have ragged ones
BATCHED_CASES = [(2, 32, 32, 16, 16), (3, 33, 47, 16, 32), (1, 1, 1, 16, 16),
                 (4, 20, 9, 16, 16), (2, 100, 72, 32, 64)]
BATCHED_HIDDEN = [(5, 17, 65, 16, 32), (2, 64, 1, 32, 16), (3, 40, 40, 32, 32)]
# y's padding differs from x's, so a stride of x used for y (or the other way) lands elsewhere
Y_EXTRA_ROWS, Y_EXTRA_COLS = 5, 3


def run_batched_transpose(kernel, batch, m, n, blocks, dtype, case, seed=0, contiguous=False):
    """Launch the student's batched transpose the way the lesson does; returns (out, values).
    contiguous: plain contiguous tensors instead of padded views (to name a stride mistake)."""
    device = runtime.current().device
    generator = torch.Generator().manual_seed(registry.case_seed(seed))
    values = (torch.randn(batch, m, n, generator=generator) * 100).to(dtype).to(device)
    block_m, block_n = blocks
    pad = max(blocks) + 8
    if contiguous:
        x = buffers.poisoned(values, pad_rows=0, pad_cols=0)
        out = buffers.Canaried((batch, n, m), dtype, device, pad_rows=0, pad_cols=0)
    else:
        x = buffers.poisoned(values, pad_rows=pad, pad_cols=pad)
        out = buffers.Canaried((batch, n, m), dtype, device, pad_rows=pad + Y_EXTRA_ROWS,
                               pad_cols=pad + Y_EXTRA_COLS)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n), batch)
    guards.launch(kernel, grid, case, x, out.tensor, m, n, x.stride(0), x.stride(1),
                  out.tensor.stride(0), out.tensor.stride(1), BLOCK_M=block_m,
                  BLOCK_N=block_n)
    return out, values


def _tiles_not_transposed(values, block):
    """What a kernel that stores each square tile where it belongs, but untransposed, writes
    (for shapes that are a whole number of tiles)."""
    x = values.double().cpu()
    got = torch.empty(x.shape[0], x.shape[2], x.shape[1], dtype=torch.float64)
    for i in range(0, x.shape[1], block):
        for j in range(0, x.shape[2], block):
            got[:, j:j + block, i:i + block] = x[:, i:i + block, j:j + block]
    return got


def _batched_mistake(kernel, got, values, batch, m, n, blocks, dtype, case, seed) -> str:
    square = blocks[0] == blocks[1] and m % blocks[0] == 0 and n % blocks[0] == 0
    if square and registry.same_result(
            got, _tiles_not_transposed(values, blocks[0]), 0):
        return (_("Likely mistake: every tile lands in the right place but is not transposed "
                  "itself: the values inside a tile must swap rows and columns too, and the "
                  "store's pointers must have the transposed tile's shape (section 3)."))
    again, _unused = run_batched_transpose(kernel, batch, m, n, blocks, dtype, case,
                                           seed=seed, contiguous=True)
    if registry.same_result(again.tensor.cpu(), values.transpose(1, 2).cpu(), 0):
        return (_("Likely mistake: your kernel is right on contiguous tensors only: it computes a "
                  "stride from the shape (N, M or M * N) instead of using the one it is given. "
                  "The grader's tensors have padding after every row and every matrix."))
    return (_("Hint: y[b, j, i] must be x[b, i, j] for every matrix b of the batch. Each tensor "
              "has strides of its own, the batch's included (the grader pads every row and every "
              "matrix), and the edge tiles need masks on the load and the store (section 3)."))


@registry.exercise("coalescing/batched-transpose", N_("Triton batched transpose, written from "
                                                      "scratch"), 2, kernel=True)
def _check_batched(batched_transpose_kernel) -> str:
    guards.require_jit_kernel(batched_transpose_kernel, "coalescing/batched-transpose")
    cases = registry.with_hidden(BATCHED_CASES, BATCHED_HIDDEN)
    dtypes = guards.graded_dtypes()
    total, number = len(cases) * len(dtypes), 0
    for dtype in dtypes:
        for batch, m, n, *blocks in cases:
            number += 1
            case = (_("case {number}/{total} (x of shape ({batch}, {m}, {n}), BLOCK_M={block_m}, "
                      "BLOCK_N={block_n}, {dtype})").format(number=number, total=total,
                      batch=batch, m=m, n=n, block_m=blocks[0], block_n=blocks[1],
                      dtype=guards.dtype_name(dtype)))
            out, values = run_batched_transpose(batched_transpose_kernel, batch, m, n, blocks,
                                                dtype, case, seed=number)
            out.verify(case, None if m % blocks[0] or n % blocks[1] else _(
                "This case has no ragged edge, so it is not a missing mask: check y's pointers: "
                "y has shape (batch, N, M), its own batch stride stride_yb and its own row "
                "stride stride_yn."))
            got = out.tensor.cpu()
            written = ~out.unwritten().cpu()
            if batch > 1 and bool(written[0].all()) and not bool(written[1:].any()):
                raise registry.WrongAnswer(
                    _("{case}: only matrix 0 of y was written: every program read and wrote "
                      "the first matrix. Each program must move both pointers to the matrix of "
                      "its own batch index, each tensor by its own batch stride (section 3, the "
                      "batched transpose).").format(case=case))
            try:
                registry.compare(got, values.transpose(1, 2).cpu(), case, atol=0)
            except registry.WrongAnswer as err:
                hint = _batched_mistake(batched_transpose_kernel, got, values, batch, m, n,
                                        blocks, dtype, case, number)
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return _("{total} cases transposed exactly, canaries intact{hidden}").format(total=total,
             hidden=registry.hidden_note())
