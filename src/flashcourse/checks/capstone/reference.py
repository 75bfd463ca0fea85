"""float64 attention under lesson 11's specification, with switches for known mistakes.

`forward` builds the visible set (optionally as a kernel walking a block map would see it:
FULL tiles whole, PARTIAL tiles through a possibly mistaken mask, keys past N as zeros), then
the softmax; `no_rescale_forward` walks the block map in a kernel's order without rescaling;
`backward` is the FlashAttention backward written densely, with its own switches. Everything
runs on the CPU in float64 on small shapes.
"""

from __future__ import annotations

import numpy as np
import torch

from ...kernels.modern_attention import EMPTY, FULL, PARTIAL  # lesson 9's kinds of a tile


def docs_of(spec, B: int, N: int) -> torch.Tensor | None:
    return None if spec.docs is None else spec.docs.detach().cpu().to(torch.int64).reshape(B, N)


def rule_mask(spec, B: int, n_q: int, n_k: int, window_extra: int = 0,
              ignore_docs: bool = False) -> torch.Tensor:
    """(B, 1, n_q, n_k): the specification's visibility of key j (< n_k, possibly past N) from
    query i; keys past the real N are hidden by the caller."""
    i = torch.arange(n_q)[:, None]
    j = torch.arange(n_k)[None, :]
    seen = j <= i
    if spec.window is not None:
        seen = seen & (j > i - spec.window - window_extra)
    seen = seen[None, None].expand(B, 1, n_q, n_k).clone()
    docs = docs_of(spec, B, n_q)
    if docs is not None and not ignore_docs:
        padded = torch.full((B, n_k), -1, dtype=torch.int64)
        padded[:, :min(n_q, n_k)] = docs[:, :min(n_q, n_k)]
        same = (docs[:, :, None] == padded[:, None, :]) & (docs[:, :, None] >= 0)
        seen = seen & same[:, None]
    return seen


def classify(spec, B: int, N: int, block_m: int, block_n: int,
             full_ignores_docs: bool = False) -> np.ndarray:
    """(B, query blocks, key blocks) tile kinds of the true mask; full_ignores_docs: a tile
    FULL by position is FULL whenever its documents meet (a block map that leaves documents
    out of its FULL rule)."""
    n_k = -(-N // block_n) * block_n
    true = rule_mask(spec, B, N, n_k)[:, 0].clone()
    true[:, :, N:] = False
    by_position = rule_mask(spec, B, N, n_k, ignore_docs=True)[:, 0].clone()
    by_position[:, :, N:] = False
    rows = -(-N // block_m)
    kinds = np.zeros((B, rows, n_k // block_n), dtype=np.int8)
    for r in range(rows):
        band = true[:, r * block_m:(r + 1) * block_m]
        band_pos = by_position[:, r * block_m:(r + 1) * block_m]
        height = band.shape[1]
        tiles = band.reshape(B, height, -1, block_n).sum((1, 3)).numpy()
        tiles_pos = band_pos.reshape(B, height, -1, block_n).sum((1, 3)).numpy()
        whole = height * block_n
        kind = np.where(tiles == 0, EMPTY, np.where(tiles == whole, FULL, PARTIAL))
        if full_ignores_docs:
            kind = np.where((tiles_pos == whole) & (tiles > 0), FULL, kind)
        kinds[:, r] = kind
    return kinds


def _scores(q, k, spec, alibi_sign: float = 1.0, alibi_first: bool = False):
    """(B, H, n_q, n_k) float64 scores after the score_mod."""
    B, H, n_q, D = q.shape
    n_k = k.shape[2]
    s = (q @ k.transpose(-1, -2)) * spec.scale(D)
    bias = 0.0
    if spec.alibi is not None:
        slopes = spec.alibi.detach().cpu().double()
        pos = torch.arange(max(n_q, n_k), dtype=torch.float64)
        bias = alibi_sign * slopes[None, :, None, None] * (pos[None, :n_k] - pos[:n_q, None])
    if alibi_first:
        s = s + bias
        bias = 0.0
    t = None
    if spec.softcap:
        t = torch.tanh(s / spec.softcap)
        s = spec.softcap * t
    return s + bias, t, bias


def _softmax(s, seen):
    s = s.masked_fill(~seen, float("-inf"))
    rowmax = s.amax(-1, keepdim=True)
    shift = torch.where(torch.isinf(rowmax), torch.zeros_like(rowmax), rowmax)
    e = torch.exp(s - shift).masked_fill(~seen, 0.0)
    total = e.sum(-1, keepdim=True)
    p = e / torch.where(total > 0, total, torch.ones_like(total))
    lse = torch.where(total > 0, torch.log(torch.where(total > 0, total, 1.0)) + shift,
                      float("-inf"))[..., 0]
    return p, lse, rowmax[..., 0]


def _padded(x, n_k):
    """x (B, H, N, D) with zero rows up to n_k: what masked loads give past N."""
    B, H, N, D = x.shape
    out = torch.zeros(B, H, n_k, D, dtype=x.dtype)
    out[:, :, :N] = x
    return out


def forward(q, k, v, spec, blocks=None, kinds=None, unmasked_partial=False, window_extra=0,
            alibi_sign=1.0, alibi_first=False):
    """float64 (o, lse) of the specification, or of a known mistake.

    blocks=(block_m, block_n) with kinds (from `classify`): what a kernel walking that block
    map computes: FULL tiles whole, PARTIAL tiles masked by the rule (window_extra keys more
    on the left), or whole with unmasked_partial (keys past N count as zero vectors), EMPTY
    tiles skipped."""
    q, k, v = (x.detach().cpu().double() for x in (q, k, v))
    B, H, N, D = q.shape
    n_k = N
    if blocks is not None:
        block_m, block_n = blocks
        n_k = -(-N // block_n) * block_n
        k, v = _padded(k, n_k), _padded(v, n_k)
    s, _, _ = _scores(q, k, spec, alibi_sign, alibi_first)
    seen = rule_mask(spec, B, N, n_k, window_extra).clone()
    seen[..., N:] = False
    if blocks is not None:
        tile = torch.from_numpy(np.repeat(np.repeat(kinds, block_m, 1)[:, :N], block_n, 2))
        tile = tile[:, None]
        seen = (tile == FULL) | ((tile == PARTIAL) & (torch.ones_like(seen) if unmasked_partial
                                                      else seen))
    p, lse, _ = _softmax(s, seen.expand(B, H, N, n_k))
    return p @ v, lse


def no_rescale_forward(q, k, v, spec, block_m, block_n, kinds, full_first=True):
    """The output of a kernel that walks the block map (FULL tiles first, then PARTIAL, or all
    in key order) and never rescales its running sum and accumulator."""
    q, k, v = (x.detach().cpu().double() for x in (q, k, v))
    B, H, N, D = q.shape
    s, _, _ = _scores(q, k, spec)
    seen = rule_mask(spec, B, N, N).expand(B, H, N, N)
    s = s.masked_fill(~seen, float("-inf"))
    out = torch.zeros(B, H, N, D, dtype=torch.float64)
    for r in range(kinds.shape[1]):
        rows = slice(r * block_m, min((r + 1) * block_m, N))
        height = rows.stop - rows.start
        for b in range(B):
            order = [c for c in range(kinds.shape[2]) if kinds[b, r, c] == FULL]
            rest = [c for c in range(kinds.shape[2]) if kinds[b, r, c] == PARTIAL]
            order = order + rest if full_first else sorted(order + rest)
            m = torch.full((H, height), float("-inf"), dtype=torch.float64)
            total = torch.zeros(H, height, dtype=torch.float64)
            acc = torch.zeros(H, height, D, dtype=torch.float64)
            for c in order:
                cols = slice(c * block_n, min((c + 1) * block_n, N))
                blk = s[b, :, rows, cols]
                m = torch.maximum(m, blk.amax(-1))
                shift = torch.where(torch.isinf(m), 0.0, m)
                p = torch.exp(blk - shift[..., None])
                total = total + p.sum(-1)
                acc = acc + p @ v[b, :, cols]
            out[b, :, rows] = acc / torch.where(total > 0, total, 1.0)[..., None]
    return out


def backward(q, k, v, do, spec, softcap_grad=True, dv_unnormalised=False, delta_from_do=False,
             dk_scaled=True, lse_with_max=True, backward_alibi=True):
    """float64 (dq, dk, dv) of the specification, by the FlashAttention backward written
    densely; each switch turns one known mistake on."""
    q, k, v, do = (x.detach().cpu().double() for x in (q, k, v, do))
    B, H, N, D = q.shape
    scale = spec.scale(D)
    s, t, bias = _scores(q, k, spec)
    seen = rule_mask(spec, B, N, N).expand(B, H, N, N)
    p, lse, rowmax = _softmax(s, seen)
    o = p @ v
    if not lse_with_max:
        lse = lse - torch.where(torch.isinf(rowmax), 0.0, rowmax)
    s_again = s if backward_alibi else s - bias
    safe_lse = torch.where(torch.isinf(lse), 0.0, lse)
    p = torch.exp(s_again.masked_fill(~seen, float("-inf")) - safe_lse[..., None])
    weights = torch.exp(s.masked_fill(~seen, float("-inf"))) if dv_unnormalised else p
    dv = weights.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    delta = do.sum(-1) if delta_from_do else (do * o).sum(-1)
    ds = p * (dp - delta[..., None])
    if t is not None and softcap_grad:
        ds = ds * (1.0 - t * t)
    dq = (ds @ k) * scale
    dk = ds.transpose(-1, -2) @ q * (scale if dk_scaled else 1.0)
    return dq, dk, dv
