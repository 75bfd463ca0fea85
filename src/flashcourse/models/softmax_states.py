"""Partial softmax states (m, l, o) in numpy: the algebra of lesson 5's merge, shared by the
lessons and checks that split the keys of a row (split-KV decoding, ring attention).

A chunk of keys with scores s and values v has the state m = max(s), l = sum(exp(s - m)),
o = sum(exp(s - m) v); a chunk masked entirely has the empty state (-inf, 0, 0). States merge
exactly by rescaling each to the common max, against a safe max (0 when every max is -inf), so
that empty states merge into the empty state.
"""

from __future__ import annotations

import numpy as np


def safe_max(m: np.ndarray) -> np.ndarray:
    """The max with -inf (a row that saw no finite value) replaced by 0."""
    return np.where(m == -np.inf, 0.0, m)


def softmax_state(scores: np.ndarray, values: np.ndarray):
    """(m, l, o) of one chunk: scores (rows, n), values (n, d) -> m, l (rows,), o (rows, d)."""
    m = scores.max(axis=-1)
    p = np.exp(scores - safe_max(m)[:, None])  # a chunk masked entirely: (-inf, 0, 0)
    return m, p.sum(axis=-1), p @ values


def merge_all(m: np.ndarray, l: np.ndarray, o: np.ndarray, axis: int = -1):
    """Merge the states stacked along `axis` of m and l (and axis - 1 of o, whose last axis is
    the head dim) into one state."""
    axis = axis % m.ndim
    top = m.max(axis=axis)
    weight = np.exp(m - np.expand_dims(safe_max(top), axis))
    return top, (weight * l).sum(axis=axis), (np.expand_dims(weight, -1) * o).sum(axis=axis)


def normalised(l: np.ndarray, o: np.ndarray) -> np.ndarray:
    """o / l, with 0 for a row that saw no key (l = 0)."""
    return o / np.where(l == 0, 1.0, l)[..., None]


def merge_lse(o: np.ndarray, lse: np.ndarray, block_o: np.ndarray, block_lse: np.ndarray):
    """The merge of two states kept as (normalised o, log-sum-exp), as ring attention keeps
    them: lse = log(e^lse1 + e^lse2), o = e^(lse1 - lse) o1 + e^(lse2 - lse) o2; two empty
    states (lse = -inf) merge into the empty state."""
    new_lse = np.logaddexp(lse, block_lse)
    safe = np.where(np.isneginf(new_lse), 0.0, new_lse)
    return (np.exp(lse - safe)[:, None] * o + np.exp(block_lse - safe)[:, None] * block_o,
            new_lse)
