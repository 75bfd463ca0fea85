"""Comparing a student's array with the reference: shape, finiteness, values, and where the
largest error is (row, column, tile)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..blanks import BlankNotFilled, is_blank
from ..i18n import _
from .errors import WrongAnswer


def _locate(flat_index: int, shape: Sequence[int], tile_rows: int | None) -> str:
    index = np.unravel_index(flat_index, shape)
    if len(shape) >= 2:
        *lead, row, col = (int(i) for i in index)
        where = _("row {row}, column {column}").format(row=row, column=col)
        if lead:
            where = _("index {index}, ").format(index=tuple(lead)) + where
        if tile_rows:
            first = row // tile_rows * tile_rows
            where += _(" (row block {block}: rows {first}..{last})").format(
                block=row // tile_rows, first=first, last=first + tile_rows - 1)
        return where
    return _("index {index}").format(index=int(index[0]))


def printable_answer(value, limit: int = 60) -> str:
    """A value as a message shows it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def compare(actual, expected, case: str, atol: float, rtol: float = 0.0,
            tile_rows: int | None = None, hint: str = "") -> None:
    """Raise WrongAnswer unless `actual` matches `expected` (shape, finiteness, values)."""
    if is_blank(actual):
        raise BlankNotFilled(_("Fill in the blank: {case} returned ______.").format(case=case))
    actual, expected = to_numpy(actual), to_numpy(expected)
    if actual.dtype == object:
        raise WrongAnswer(_("{case}: the result is not a numeric array (got objects). {hint}")
                          .format(case=case, hint=hint).rstrip())
    if actual.shape != expected.shape:
        raise WrongAnswer(_("{case}: result has shape {shape}, expected {expected}. {hint}")
                          .format(case=case, shape=actual.shape, expected=expected.shape,
                                  hint=hint).rstrip())
    actual64 = actual.astype(np.float64)
    expected64 = expected.astype(np.float64)
    bad_values = ~np.isfinite(actual64) & np.isfinite(expected64)
    if bad_values.any():
        first = int(np.flatnonzero(bad_values)[0])
        count = int(bad_values.sum())
        raise WrongAnswer(_(
            "{case}: {count} of {size} outputs are NaN or inf, first at {where}. {hint}").format(
            case=case, count=count, size=actual.size,
            where=_locate(first, actual.shape, tile_rows), hint=hint).rstrip())
    # Where the reference itself is not finite (-inf for an empty softmax state, NaN for the
    # softmax of a row masked entirely), the answer must be the same non-finite value.
    unexpected = ~np.isfinite(expected64) & ~(
        (actual64 == expected64) | (np.isnan(actual64) & np.isnan(expected64)))
    if unexpected.any():
        first = int(np.flatnonzero(unexpected)[0])
        count = int(unexpected.sum())
        raise WrongAnswer(_(
            "{case}: {count} of {size} outputs differ where the result is not a finite number "
            "(a row masked entirely), first at {where}. {hint}").format(
            case=case, count=count, size=actual.size,
            where=_locate(first, actual.shape, tile_rows), hint=hint).rstrip())
    finite = np.isfinite(expected64)
    actual64, expected64 = np.where(finite, actual64, 0.0), np.where(finite, expected64, 0.0)
    error = np.abs(actual64 - expected64)
    allowed = atol + rtol * np.abs(expected64)
    if (error > allowed).any():
        worst = int(np.argmax(error - allowed))
        count = int((error > allowed).sum())
        raise WrongAnswer(_(
            "{case}: max abs error {error:.3g} (allowed {atol:g} + {rtol:g}*|ref|) at {where}; "
            "{count} of {size} values are off. {hint}").format(
            case=case, error=error.max(), atol=atol, rtol=rtol,
            where=_locate(worst, actual.shape, tile_rows), count=count, size=actual.size,
            hint=hint).rstrip())


def to_numpy(value) -> np.ndarray:
    """numpy view of an array or a torch tensor on any device (bf16 widened to float32)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def same_result(actual, candidate, atol: float) -> bool:
    """True when `actual` equals `candidate` (NaN where it has NaN): used to name a mistake."""
    try:
        a = to_numpy(actual).astype(np.float64)
    except (TypeError, ValueError, BlankNotFilled):
        return False
    c = to_numpy(candidate).astype(np.float64)
    if a.shape != c.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(a, c, atol=atol, rtol=1e-6, equal_nan=True))
