"""What lesson 5's checks share: rows of logits of every kind, the online statistics with
switches for known mistakes, and how a case and a passed check are described."""

from __future__ import annotations

import numpy as np

from ...i18n import _
from ...models.softmax_states import safe_max
from .. import registry

# ---------------------------------------------------------------- inputs


def logits(rows: int, n: int, seed: int, scale: float = 1.0, kind: str = "normal",
           block: int = 1):
    """Test logits, float64, shape (rows, n).

    kind "normal": Gaussian; "neg_inf": about a fifth of the entries are -inf (as a mask would
    make them; column 0 always stays finite); "ramp": every row increases along the columns,
    so the running max grows in every block; "offset": rows are shifted far apart (row i by
    -i * 1000), so one max for the whole array is wrong for all rows but one; "masked": row 0
    is -inf entirely (a row with no key), row r >= 1 has its first r blocks of `block` columns
    at -inf (at least its last column stays finite), as padding or a sliding window makes them.
    """
    rng = np.random.default_rng(registry.case_seed(seed))
    x = rng.standard_normal((rows, n)) * scale
    if kind == "neg_inf" and n > 1:
        hole = rng.random((rows, n)) < 0.2
        hole[:, 0] = False
        x[hole] = -np.inf
    elif kind == "ramp":
        x = np.sort(x, axis=-1) + np.linspace(0.0, 4.0 * scale, n)
    elif kind == "offset":
        x = x - 1000.0 * np.arange(rows)[:, None]
    elif kind == "masked":
        for r in range(rows):
            x[r, :n if r == 0 else min(n - 1, r * block)] = -np.inf
    return x


def describe(rows: int, n: int, scale: float, kind: str, dtype: str | None = None,
              block: int | None = None, seed: int | None = None) -> str:
    parts = [(_("{rows} rows of length {n}") if rows != 1 else
              _("{rows} row of length {n}")).format(rows=rows, n=n)]
    if block is not None:
        parts.append(f"BLOCK={block}")
    if dtype:
        parts.append(dtype)
    if scale > 10:
        parts.append(_("logits ~{scale:g}").format(scale=scale))
    if kind == "neg_inf":
        parts.append(_("some -inf entries"))
    elif kind == "ramp":
        parts.append(_("rows increase, so the max grows in every block"))
    elif kind == "offset":
        parts.append(_("rows 1000 apart"))
    elif kind == "masked":
        parts.append(_("row 0 masked entirely, row r >= 1 with its first r blocks masked"))
    if seed is not None:
        parts.append(f"seed={seed}")
    return ", ".join(parts)


def require_callable(answer, exercise_id: str, name: str) -> None:
    if not callable(answer):
        raise registry.WrongAnswer(_("{exercise_id}: pass the function itself: "
                                     "check(\"{exercise_id}\", {name}).").format(
                                     exercise_id=exercise_id, name=name))


def blocked_stats(x: np.ndarray, block: int, *, rescale=True, include_old_max=True,
                  flip_scale=False, pad_zero=False, subtract_max=True, guard=True,
                  dtype=np.float64):
    """Running max and running sum over column blocks, with switches that reproduce the
    classic mistakes. pad_zero: the last block is padded with zeros (a masked load with
    other=0.0) instead of -inf; guard=False: no safe max, so a block masked entirely while the
    running max is still -inf gives exp(-inf - (-inf)) = NaN."""
    x = x.astype(dtype)
    rows, n = x.shape
    m = np.full(rows, -np.inf, dtype=dtype)
    total = np.zeros(rows, dtype=dtype)
    with np.errstate(all="ignore"):
        for start in range(0, n, block):
            xb = x[:, start:start + block]
            if pad_zero and xb.shape[1] < block:
                xb = np.concatenate([xb, np.zeros((rows, block - xb.shape[1]), dtype)], 1)
            block_max = xb.max(axis=-1)
            m_new = np.maximum(m, block_max) if include_old_max else block_max
            if not subtract_max:
                m_new = np.zeros_like(m_new)
            shift = safe_max(m_new) if guard else m_new
            scale = np.exp(shift - m) if flip_scale else np.exp(m - shift)
            if not rescale:
                scale = np.ones_like(scale)
            total = total * scale + np.exp(xb - shift[:, None]).sum(axis=-1)
            m = m_new
    return m, total


def passed(count: int, what: str) -> str:
    hidden = registry.hidden_note()
    return _("{count} cases {what}{hidden}").format(count=count, what=what, hidden=hidden)
