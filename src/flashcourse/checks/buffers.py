"""Buffers that expose a kernel's missing masks, on the GPU and in the interpreter alike.

The interpreter does not fault on an out-of-bounds access: an unmasked load quietly reads
whatever lies next to the tensor. So graders hand kernels views into larger buffers:

* `poisoned(x)`: the input sits inside NaN padding (after every row, and before and after the
  whole tensor), so a load past a row or past the end pulls NaN into the result;
* `Canaried(...)`: the output sits inside padding filled with a canary value, and starts as NaN,
  so a store past the edge changes a canary and an element never stored stays NaN.

Views keep the strides of the padded buffer: kernels must use the strides they are given.
"""

from __future__ import annotations

import math

import torch

from ..i18n import _
from .errors import WrongAnswer

GUARD = 16384  # poisoned elements before and after: more than one 128x128 tile
PAD_ROWS = 64  # extra rows after each matrix, so a tail block reads NaN, not a neighbour
PAD_COLS = 8  # extra columns after each row
CANARY = -1536.0  # exactly representable in fp32, fp16 and bf16


def _poison_value(dtype: torch.dtype) -> float:
    return float("nan") if dtype.is_floating_point else -(2**30)


def _padded_view(shape, dtype, device, fill, pad_rows, pad_cols):
    """A view of `shape` inside a flat buffer with padding, and the buffer itself."""
    shape = tuple(shape)
    if len(shape) == 1:  # a vector: pad_cols elements after its end
        padded, strides = (shape[0] + pad_cols,), (1,)
    else:
        *lead, rows, cols = shape
        padded = (*lead, rows + pad_rows, cols + pad_cols)
        strides = [1] * len(padded)
        for axis in range(len(padded) - 2, -1, -1):
            strides[axis] = strides[axis + 1] * padded[axis + 1]
    storage = torch.full((2 * GUARD + math.prod(padded),), fill, dtype=dtype, device=device)
    view = torch.as_strided(storage, shape, tuple(strides), storage_offset=GUARD)
    return view, storage, padded


def poisoned(tensor: torch.Tensor, pad_rows: int = PAD_ROWS,
             pad_cols: int = PAD_COLS) -> torch.Tensor:
    """A copy of `tensor` living inside NaN padding (integers: inside -2**30 padding)."""
    return padded_copy(tensor, pad_rows, pad_cols, _poison_value(tensor.dtype))


def padded_copy(tensor: torch.Tensor, pad_rows: int, pad_cols: int, fill: float,
                contiguous: bool = False) -> torch.Tensor:
    """A copy of `tensor` inside a buffer filled with `fill`: a view with pad_rows rows and
    pad_cols columns after every matrix or, when contiguous, one with a contiguous tensor's
    strides and at least that much room after it (a grader's rerun that asks whether a kernel
    indexes with widths instead of strides)."""
    view, storage, _shape = _padded_view(tensor.shape, tensor.dtype, tensor.device, fill,
                                    pad_rows, pad_cols)
    if contiguous:
        view = torch.as_strided(storage, tensor.shape, torch.empty(tensor.shape).stride(),
                                storage_offset=GUARD)
    view.copy_(tensor)
    return view


class Canaried:
    """An output tensor surrounded by canaries; `verify` says what a kernel wrote wrongly."""

    def __init__(self, shape, dtype=torch.float32, device="cpu", pad_rows: int = PAD_ROWS,
                 pad_cols: int = PAD_COLS):
        self.shape = tuple(shape)
        self.tensor, self._storage, self._padded = _padded_view(
            shape, dtype, device, CANARY, pad_rows, pad_cols)
        self.tensor.fill_(_poison_value(dtype))  # unwritten elements stay NaN
        self._inside = torch.zeros(self._storage.shape, dtype=torch.bool, device=device)
        torch.as_strided(self._inside, self.shape, self.tensor.stride(),
                         storage_offset=GUARD).fill_(True)

    def changed_canaries(self) -> torch.Tensor:
        """Flat mask over the whole buffer: True where a store outside the output landed."""
        return (self._storage != CANARY) & ~self._inside

    def verify(self, case: str, advice: str | None = None) -> None:
        """Raise WrongAnswer if a canary changed (a store outside the output): what was
        written where, then `advice` (default: mask the last block's stores)."""
        changed = self.changed_canaries()
        if not bool(changed.any()):
            return
        flat = int(torch.nonzero(changed)[0, 0])
        count = int(changed.sum())
        what = _("{case}: your kernel wrote {count} value(s) outside the output, first "
                 "{where}.").format(case=case, count=count, where=self._describe(flat))
        advice = advice or _("Mask the stores of the last block so that its lanes past the end "
                             "write nothing: edge programs must write only inside the tensor.")
        raise WrongAnswer(f"{what} {advice}")

    def unwritten(self) -> torch.Tensor:
        """Boolean mask of output elements that still hold their initial NaN."""
        return torch.isnan(self.tensor) if self.tensor.dtype.is_floating_point else \
            self.tensor == _poison_value(self.tensor.dtype)

    def _describe(self, flat: int) -> str:
        body = math.prod(self._padded)
        if flat < GUARD:
            return _("{count} element(s) before the start of the output").format(
                count=GUARD - flat)
        if flat >= GUARD + body:
            return _("{count} element(s) past the end of the output").format(
                count=flat - GUARD - body + 1)
        index = [int(i) for i in torch.unravel_index(torch.tensor(flat - GUARD), self._padded)]
        if len(self.shape) == 1:
            return _("at index {index}, past the last index {last}").format(
                index=index[0], last=self.shape[0] - 1)
        *lead, row, col = index
        rows, cols = self.shape[-2:]
        where = _("batch index {index}, ").format(index=tuple(lead)) if lead else ""
        if row >= rows:
            return _("at {where}row {row}, past the last row {last}").format(
                where=where, row=row, last=rows - 1)
        return _("at {where}row {row}, column {column}, past the last column {last}").format(
            where=where, row=row, column=col, last=cols - 1)


def poisoned_heads(x: torch.Tensor, layout: str = "bhnd", pad_rows: int = PAD_ROWS,
                   device: str | None = None) -> torch.Tensor:
    """An attention input x (B, H, N, D) inside NaN padding of `pad_rows` rows after every
    (N, D) matrix, on `device`. layout "bnhd" gives a transposed view of a (B, N, H, D)
    tensor, the layout models store, so kernels must honour all four strides."""
    x = x.to(device or x.device)
    if layout == "bnhd":
        B, H, N, D = x.shape
        nan_rows = torch.full((B, pad_rows, H, D), float("nan"), dtype=x.dtype, device=x.device)
        padded = poisoned(torch.cat([x.transpose(1, 2), nan_rows], 1))
        return padded[:, :N].transpose(1, 2)
    return poisoned(x, pad_rows=pad_rows)
