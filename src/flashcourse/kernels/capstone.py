"""Host side of lesson 11 (the capstone): the specification a student's attention implements,
its inputs and a small float32 torch version of it for the lesson's example.

* `AttentionSpec`: what the attention computes besides softmax(q k^T) v: the causal mask
  (always), a sliding window, document ids, tanh soft-capping and ALiBi; `validate` refuses
  inputs the specification does not cover, with the reason and the fix.
* `make_inputs`, `packed_documents`: inputs of the lesson's cells and of the checks.
* `spec_attention`: the specification written densely in torch (float32, autograd), for the
  example cell; it builds the whole (N, N) score matrix, so it is for small N only.

The student's kernels, block map and autograd Function are the lesson's exercises: none of
them is here.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .. import runtime
from ..runtime import CourseInputError

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclasses.dataclass(eq=False)
class AttentionSpec:
    """What to compute, besides the inputs q, k, v (B, H, N, D).

    window: None, or W >= 1: key j is visible from query i only if i - W < j <= i.
    docs: None, or a (B, N) int32 tensor of document ids: query i sees key j only if both
      carry the same id; id -1 marks padding (such a query sees no key at all).
    softcap: 0 (off), or cap > 0: the scaled score s becomes cap * tanh(s / cap).
    alibi: None, or an (H,) float32 tensor of slopes: head h adds slope[h] * (j - i).
    sm_scale: None means 1 / sqrt(D).
    cache: a dict the implementation may keep per-spec data in (block maps, say).
    """

    window: int | None = None
    docs: torch.Tensor | None = None
    softcap: float = 0.0
    alibi: torch.Tensor | None = None
    sm_scale: float | None = None
    cache: dict = dataclasses.field(default_factory=dict, repr=False)

    def scale(self, head_dim: int) -> float:
        return 1.0 / math.sqrt(head_dim) if self.sm_scale is None else float(self.sm_scale)

    def describe(self) -> str:
        parts = ["causal"]
        if self.window is not None:
            parts.append(f"window={self.window}")
        if self.docs is not None:
            parts.append("documents")
        if self.softcap:
            parts.append(f"softcap={self.softcap:g}")
        if self.alibi is not None:
            parts.append("ALiBi")
        if self.sm_scale is not None:
            parts.append(f"sm_scale={self.sm_scale:g}")
        return ", ".join(parts)

    def fields(self) -> dict:
        """The specification as plain data (what the grader hashes to know the case)."""
        return {"window": self.window, "docs": self.docs, "softcap": float(self.softcap),
                "alibi": self.alibi, "sm_scale": self.sm_scale}

    def validate(self, q, k, v) -> None:
        """Raise CourseInputError, naming the problem and the fix, for inputs the
        specification does not cover."""
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise CourseInputError(f"{name} is a {type(x).__name__}: pass torch tensors.")
            if x.dim() != 4:
                raise CourseInputError(f"{name} has shape {tuple(x.shape)}: the inputs are "
                                       "(B, H, N, D) tensors.")
        if not q.shape == k.shape == v.shape:
            raise CourseInputError(f"q, k, v must have one shape (B, H, N, D); got "
                                   f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}.")
        if not q.dtype == k.dtype == v.dtype or q.dtype not in DTYPES:
            raise CourseInputError(f"q, k, v must share one dtype among float16, bfloat16 and "
                                   f"float32; got {q.dtype}, {k.dtype}, {v.dtype}.")
        interpreter = runtime.current().interpreter
        if q.dtype == torch.float32 and not interpreter:
            raise CourseInputError("float32 inputs run only in the interpreter (tl.dot rounds "
                                   "them to TF32 on a GPU): convert to float16 or bfloat16.")
        runtime.check_tensors(q, k, v, names=("q", "k", "v"), dot=True)
        B, H, N, D = q.shape
        if D < 16 or D & (D - 1):
            raise CourseInputError(f"head dim D={D} must be a power of two >= 16 (tl.dot's "
                                   "smallest tile and tl.arange's lengths).")
        if self.window is not None and (not isinstance(self.window, int) or self.window < 1):
            raise CourseInputError(f"window={self.window!r} must be None or an int >= 1 (the "
                                   "number of keys a query sees, itself included).")
        if self.docs is not None:
            docs = self.docs
            if not isinstance(docs, torch.Tensor) or docs.shape != (B, N) or \
                    docs.dtype != torch.int32:
                raise CourseInputError(f"docs must be a (B, N) = ({B}, {N}) int32 tensor of "
                                       "document ids (-1 for padding); build it with "
                                       "packed_documents(...).")
            if docs.device != q.device:
                raise CourseInputError(f"docs is on {docs.device}, q on {q.device}: move it "
                                       "with docs.to(q.device).")
            if bool((docs < -1).any()):
                raise CourseInputError("docs holds ids below -1: use -1 for padding and ids "
                                       ">= 0 for documents.")
        if not (isinstance(self.softcap, (int, float)) and math.isfinite(self.softcap)
                and self.softcap >= 0):
            raise CourseInputError(f"softcap={self.softcap!r} must be 0 (off) or a positive "
                                   "number.")
        if self.alibi is not None:
            slopes = self.alibi
            if not isinstance(slopes, torch.Tensor) or slopes.shape != (H,) or \
                    slopes.dtype != torch.float32 or slopes.device != q.device:
                raise CourseInputError(f"alibi must be an (H,) = ({H},) float32 tensor of "
                                       f"slopes on {q.device}; build it with alibi_slopes(H).")
        if self.sm_scale is not None and not float(self.sm_scale) > 0:
            raise CourseInputError(f"sm_scale={self.sm_scale!r} must be positive (or None "
                                   "for 1 / sqrt(D)).")


def alibi_slopes(heads: int, device=None) -> torch.Tensor:
    """ALiBi's slopes (Press et al. 2022): 2^(-8 h / H) for h = 1..H, a geometric series, on
    the runtime's device unless given."""
    h = torch.arange(1, heads + 1, dtype=torch.float32)
    return torch.exp2(-8.0 * h / heads).to(device or runtime.current().device)


def packed_documents(lengths_per_batch, n: int, device=None) -> torch.Tensor:
    """(B, n) int32 document ids: batch b holds documents of the given lengths one after
    another (ids 0, 1, ...), then padding (id -1) up to n; on the runtime's device unless
    given."""
    rows = []
    for lengths in lengths_per_batch:
        ids = torch.full((n,), -1, dtype=torch.int32)
        start = 0
        for doc, length in enumerate(lengths):
            ids[start:start + length] = doc
            start += length
        if start > n:
            raise CourseInputError(f"documents of lengths {list(lengths)} do not fit in "
                                   f"n={n} positions.")
        rows.append(ids)
    return torch.stack(rows).to(device or runtime.current().device)


# How far a try cell lets o and the gradients be from the dense version, relative to their
# size: float32 in the interpreter, float16 or bfloat16 compiled on a GPU.
TRY_TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}


def make_inputs(B: int, H: int, N: int, D: int, dtype=None, seed: int = 0,
                logit_scale: float = 1.0, device=None):
    """q, k, v (B, H, N, D) with scores q.k / sqrt(D) of about logit_scale standard
    deviations (try 30 for large logits). dtype: float32 in the interpreter, float16 on a GPU
    (where tl.dot would round float32 to TF32) unless given."""
    if dtype is None:
        dtype = torch.float32 if runtime.current().interpreter else torch.float16
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, N, D, generator=gen) for _ in range(3))
    q = q * logit_scale
    device = device or runtime.current().device
    return tuple(x.to(dtype).to(device) for x in (q, k, v))


def visible(spec: AttentionSpec, B: int, N: int, device="cpu") -> torch.Tensor:
    """(B, 1, N, N) boolean: may query i see key j under the specification."""
    i = torch.arange(N, device=device)[:, None]
    j = torch.arange(N, device=device)[None, :]
    seen = j <= i
    if spec.window is not None:
        seen = seen & (j > i - spec.window)
    seen = seen[None, None].expand(B, 1, N, N)
    if spec.docs is not None:
        docs = spec.docs.to(device)
        same = (docs[:, :, None] == docs[:, None, :]) & (docs[:, :, None] >= 0)
        seen = seen & same[:, None]
    return seen


def spec_attention(q, k, v, spec: AttentionSpec) -> torch.Tensor:
    """The specification, densely, in float32 (float64 for float64 inputs) with torch
    autograd (small N only): returns o in q's dtype; a query that sees no key gets 0."""
    B, H, N, D = q.shape
    work = torch.promote_types(q.dtype, torch.float32)  # float64 stays float64
    q32, k32, v32 = (x.to(work) for x in (q, k, v))
    s = (q32 @ k32.transpose(-1, -2)) * spec.scale(D)
    if spec.softcap:
        s = spec.softcap * torch.tanh(s / spec.softcap)
    if spec.alibi is not None:
        pos = torch.arange(N, device=q.device, dtype=work)
        slopes = spec.alibi.to(device=q.device, dtype=work)
        s = s + slopes[None, :, None, None] * (pos[None, :] - pos[:, None])
    seen = visible(spec, B, N, q.device)
    s = s.masked_fill(~seen, float("-inf"))
    rowmax = s.amax(-1, keepdim=True).detach()
    shift = torch.where(torch.isinf(rowmax), torch.zeros_like(rowmax), rowmax)
    e = torch.exp(s - shift).masked_fill(~seen, 0.0)
    total = e.sum(-1, keepdim=True)
    o = (e @ v32) / torch.where(total > 0, total, torch.ones_like(total))
    return o.to(q.dtype)
