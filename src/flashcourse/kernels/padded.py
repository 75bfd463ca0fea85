"""Lesson 6's host side of the forward kernel written from scratch: attention of left-padded
batches (keys j < kv_start[b] of batch b are padding). `padded_forward` launches the student's
kernel; `padded_reference` is standard attention in float64 with the padding masked."""

from __future__ import annotations

import math

import torch

from .. import runtime
from . import attention


def padded_forward(kernel, q, k, v, kv_start, causal: bool = False, sm_scale=None,
                   block_m: int | None = None, block_n: int | None = None, out=None, lse=None):
    """Launch a kernel with `padded_flash_forward`'s signature; returns (O, L).

    kv_start: (B,) int32 on the inputs' device, keys j < kv_start[b] of batch b are padding.
    `out` (B, H, N, D) and `lse` (B, H, N) float32 may be given (graders pass canaried
    buffers); the last stride of every tensor must be 1."""
    attention.refuse_unfinished(kernel, getattr(kernel, "__name__", "kernel"))
    attention.check_qkv(q, k, v)
    B, H, N, D = q.shape
    if kv_start.shape != (B,) or kv_start.dtype != torch.int32:
        raise runtime.CourseInputError(f"kv_start must be a (B,) = ({B},) int32 tensor; got "
                                       f"{tuple(kv_start.shape)} {kv_start.dtype}.")
    q = q if q.stride(-1) == 1 else q.contiguous()
    # lesson 6's kernel reads K and V through tensor descriptors; this one may too
    k, v = attention.descriptor_ready(k), attention.descriptor_ready(v)
    attention.allow_kernel_scratch()
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    bm, bn, warps, stages = attention.forward_config(D, causal, block_m, block_n)
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device) if lse is None else lse
    kernel[((N + bm - 1) // bm, B * H)](
        q, k, v, out, lse, kv_start,
        *(s for t in (q, k, v, out) for s in t.stride()[:3]), lse.stride(0), lse.stride(1),
        H, N, sm_scale,
        D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)
    return out, lse


def visible_keys(n: int, kv_start, causal: bool) -> torch.Tensor:
    """(B, 1, N, N) boolean: row i of batch b sees key j."""
    rows = torch.arange(n)[:, None]
    cols = torch.arange(n)[None, :]
    start = torch.as_tensor(kv_start).reshape(-1, 1, 1, 1).long()
    seen = cols >= start
    if causal:
        seen = seen & (cols <= rows)
    return seen


def padded_reference(q, k, v, kv_start, causal: bool = False, sm_scale=None):
    """float64 (O, L) of left-padded attention; a row with no key: O = 0, L = -inf."""
    q, k, v = (x.to(torch.float64).cpu() for x in (q, k, v))
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * sm_scale
    s = s.masked_fill(~visible_keys(q.shape[2], kv_start.cpu(), causal), float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    return p @ v, lse
