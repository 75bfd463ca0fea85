"""Lesson 4's numpy exercises: the blocked matmul that counts the HBM bytes it reads, and
the grouped launch order (GROUP_M swizzle), each with its known mistakes."""

from __future__ import annotations

import numpy as np

from ...blanks import BlankNotFilled, is_blank
from ...i18n import _
from ...models.matmul import cdiv, launch_order, tiled_read_bytes
from .. import registry

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
        (reads // itemsize, _("You counted elements, not bytes: multiply by the item size "
                              "(a.nbytes does it for you).")),
        (a_part, _("Only the A tiles are counted: every K step loads one tile of A and one of "
                   "B.")),
        (reads - a_part, _("Only the B tiles are counted: every K step loads one tile of A and "
                           "one of B.")),
        (steps * (BM * BK + BK * BN) * itemsize,
         _("You counted every tile as full-size, but edge tiles are smaller when the shape is not "
           "a multiple of the tile: count the bytes of the tiles actually loaded (section 3).")),
        (reads + M * N * itemsize, _("Count only the reads of A and B, not the output C.")),
        ((M * K * cdiv(N, BM) + K * N * cdiv(M, BN)) * itemsize,
         _("A is re-read once per column block of C (cdiv(N, BN) times) and B once per row block "
           "(cdiv(M, BM) times): the roles of BM and BN are swapped.")),
        (M * K * itemsize + K * N * itemsize,
         _("Each matrix counted once: that is the ideal with infinite on-chip memory, but a tiled "
           "kernel loads every tile again for each output tile that needs it.")),
    ]


def check_blocked(blocked_matmul) -> str:
    if not callable(blocked_matmul):
        raise registry.WrongAnswer(_("Pass the function itself: check(..., blocked_matmul)."))
    cases = registry.with_hidden(BLOCKED_CASES, BLOCKED_HIDDEN)
    for number, (M, N, K, BM, BN, BK, dtype, seed) in enumerate(cases, 1):
        A, B = _blocked_inputs(M, N, K, dtype, seed)
        label = (_("case {number}/{total} (M={M}, N={N}, K={K}, BM={BM}, BN={BN}, BK={BK}, "
                   "{dtype})").format(number=number, total=len(cases), M=M, N=N, K=K, BM=BM, BN=BN,
                   BK=BK, dtype=dtype))
        result = registry.run_student(blocked_matmul, label, A.copy(), B.copy(), BM, BN, BK)
        if not isinstance(result, tuple) or len(result) != 2:
            raise registry.WrongAnswer(_("{label}: return a pair (C, bytes_read), got "
                                         "{type_name}.").format(label=label,
                                         type_name=type(result).__name__))
        C, bytes_read = result
        expected = A.astype(np.float64) @ B.astype(np.float64)
        scale = float((np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))).max())
        tol = 1e-5 if dtype == "float32" else 1e-12
        registry.compare(C, expected, _("{label}, the product C").format(label=label),
                         atol=tol * scale,
                        tile_rows=BM, hint=_("Each output tile is the sum, over the K steps, of "
                                             "the product of the A tile in its rows and the B "
                                             "tile in its columns, both cut at that step's K "
                                             "range (section 3)."))
        itemsize = np.dtype(dtype).itemsize
        reads = tiled_read_bytes(M, N, K, BM, BN, itemsize)
        if is_blank(bytes_read):
            raise BlankNotFilled(_("Fill in the blank: {label} returned ______ as "
                                   "bytes_read.").format(label=label))
        if not isinstance(bytes_read, (int, np.integer)) or bytes_read != reads:
            hint = next((why for wrong, why in _byte_mistakes(M, N, K, BM, BN, BK, itemsize)
                         if wrong == bytes_read and wrong != reads),
                        _("Count the bytes of every A tile and B tile that the K loop loads, for "
                          "every output tile."))
            raise registry.WrongAnswer(
                _("{label}: bytes_read = {bytes_read!r} is not what this blocked product reads "
                  "from HBM. {hint}").format(label=label, bytes_read=bytes_read, hint=hint))
    hidden = registry.hidden_note()
    return _("{total} cases: products and byte counts match the formula{hidden}").format(
             total=len(cases), hidden=hidden)


# ---------------------------------------------------------------- grouped launch order

# (num_pid_m, num_pid_n, GROUP_M)
ORDER_CASES = [(6, 6, 2), (7, 5, 3), (4, 9, 4), (5, 3, 8), (3, 4, 1), (10, 2, 4)]


def check_order(grouped_order_fn) -> str:
    if not callable(grouped_order_fn):
        raise registry.WrongAnswer(_("Pass the function itself: check(..., grouped_order)."))
    for number, (pm, pn, group) in enumerate(ORDER_CASES, 1):
        label = (_("case {number}/{total} (num_pid_m={pm}, num_pid_n={pn}, "
                   "GROUP_M={group})").format(number=number, total=len(ORDER_CASES), pm=pm, pn=pn,
                   group=group))
        got = []
        for pid in range(pm * pn):
            tile = registry.run_student(grouped_order_fn, label, pid, pm, pn, group)
            if is_blank(tile) or any(is_blank(t) for t in tuple(tile)):
                raise BlankNotFilled(_("Fill in the blank: {label} returned ______.").format(
                                       label=label))
            got.append((int(tile[0]), int(tile[1])))
        want = launch_order(pm, pn, group)
        if got == want:
            continue
        missing = sorted(set(want) - set(got))
        twice = sorted({t for t in got if got.count(t) > 1})
        if missing or twice:
            hint = (_("tile {missing} is never computed").format(
                      missing=missing[0]) if missing else "")
            hint += ("; " if missing and twice else "") + \
                (_("tile {twice} is computed twice").format(twice=twice[0]) if twice else "")
            extra = (_(" The last group may hold fewer than GROUP_M rows of tiles: the count of "
                       "rows in a group must be the rows that are left there, for the row and for "
                       "the column of a program (section 5).") if pm % group else "")
            raise registry.WrongAnswer(_("{label}: every tile must be computed by exactly one "
                                         "program, but {hint}.{extra}").format(label=label,
                                         hint=hint, extra=extra))
        pid = next(p for p, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
        row_major = [(p // pn, p % pn) for p in range(pm * pn)]
        hint = (_("This is row-major order, one tile row after the other: walk down a group of "
                  "GROUP_M rows first, then move one column right.") if got == row_major else
                _("Within a group, consecutive programs go down the group's rows first, then one "
                  "column right."))
        raise registry.WrongAnswer(_("{label}: program {pid} computes tile {got}, which is not "
                                     "its tile in grouped order. {hint}").format(label=label,
                                     pid=pid, got=got[pid], hint=hint))
    return _("{total} grids: every program maps to its tile in grouped order").format(
             total=len(ORDER_CASES))
