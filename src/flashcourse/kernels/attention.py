"""Host side of the Triton FlashAttention lessons: the kernels of lessons 6 and 7 (the
student's) and the torch reference they compare against. No @triton.jit here: importing it
picks no runtime.

* `standard_attention`: softmax(sm_scale * Q K^T) V in torch for (..., N, D) inputs, causal or
  not, with the row logsumexp; the reference the graders, tests and benchmarks compare against
  (the numpy `flashcourse.reference.standard_attention` is lesson 1's: unscaled, no mask).
* `make_inputs`: reproducible Q, K, V (optionally with scores of magnitude ~1e3).
* `flash_forward` / `flash_backward`: launch a student's kernels with the right grid, strides and
  block sizes (tiles.py: per head dim and causality on a GPU; small blocks in the interpreter).
* `FlashAttentionFunction`: the course's one torch.autograd.Function; it takes the forward and
  backward launchers as arguments, so `loss.backward()` runs the Triton backward (the student's
  kernels through `make_flash_attention`, the reference's through host.flash_attention).
* `causal_tiles`, `peak_memory_bytes` and `memory_figure`: tiles a causal forward visits, peak
  memory of standard vs fused attention.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from .. import runtime
from ..i18n import _
from ..models.matmul import cdiv
from ..runtime import CourseInputError
from . import LOG2E, tiles
from .tiles import BACKWARD_CONFIGS, FORWARD_CONFIGS  # noqa: F401  (lessons 6-7 name them here)


@dataclass(frozen=True)
class AttentionCase:
    """One graded attention case: shapes, dtype, seed, layout and block sizes."""

    B: int
    H: int
    N: int
    D: int
    causal: bool
    dtype: torch.dtype = torch.float32
    seed: int = 0
    large: bool = False  # scaled scores of about 1e3
    layout: str = "bhnd"  # "bnhd": views of (B, N, H, D) tensors, as most models store them
    block_m: int = 16
    block_n: int = 16
    sm_scale: float | None = None

    def scale(self) -> float:
        return 1.0 / math.sqrt(self.D) if self.sm_scale is None else self.sm_scale


# ---------------------------------------------------------------- references and inputs


def standard_attention(q, k, v, causal: bool = False, sm_scale: float | None = None,
                       return_lse: bool = False, chunk: int | None = None):
    """softmax(sm_scale * q k^T) v for (..., N, D) tensors, materialising the scores.

    Computes in the inputs' dtype (pass float64 or float32 copies for a reference). With
    return_lse, also returns the natural-log logsumexp of each row of scaled scores, shape
    (..., N). chunk: query rows per step, so that an fp32 reference at N = 16k fits in memory.
    """
    d = q.shape[-1]
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    n_q, n_k = q.shape[-2], k.shape[-2]
    rows = n_q if chunk is None else chunk
    outs, lses = [], []
    for start in range(0, n_q, rows) if n_q else [0]:
        scores = (q[..., start:start + rows, :] @ k.transpose(-1, -2)) * sm_scale  # (..., rows, N)
        if causal:  # query row i sees keys j <= i + n_k - n_q
            above = torch.ones(scores.shape[-2], n_k, dtype=torch.bool,
                               device=q.device).triu(1 + start + n_k - n_q)
            scores = scores.masked_fill(above, float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ v)
        if return_lse:
            lses.append(torch.logsumexp(scores, dim=-1))
    out = outs[0] if len(outs) == 1 else torch.cat(outs, -2)
    if return_lse:
        return out, lses[0] if len(lses) == 1 else torch.cat(lses, -1)
    return out


def make_inputs(B: int, H: int, N: int, D: int, dtype=torch.float32, device="cpu",
                seed: int = 0, large_logits: bool = False, sm_scale: float | None = None):
    """Reproducible q, k, v of shape (B, H, N, D). large_logits: scaled scores of about 1e3,
    with a few dominant keys, so exp() overflows unless the running max is subtracted."""
    from ..checks.cases import case_seed

    gen = torch.Generator().manual_seed(case_seed(seed))
    q, k, v = (torch.randn(B, H, N, D, generator=gen, dtype=torch.float64) for _ in range(3))
    if large_logits:
        sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
        # make q.k have a standard deviation of about 1e3 after scaling
        factor = math.sqrt(1000.0 / (sm_scale * math.sqrt(D)))
        q, k = q * factor, k * factor
    return tuple(x.to(dtype=dtype, device=device) for x in (q, k, v))


# ---------------------------------------------------------------- launchers


def kernel_helpers(kernel) -> list[tuple[str, object]]:
    """The other @triton.jit functions a kernel calls (found among its global names)."""
    from triton.runtime.jit import KernelInterface

    fn = getattr(kernel, "fn", None)
    if fn is None:
        return []
    found = []
    for name in fn.__code__.co_names:
        obj = fn.__globals__.get(name)
        if isinstance(obj, KernelInterface) and obj is not kernel:
            found.append((name, obj))
    return found


def refuse_unfinished(kernel, name: str = "kernel") -> None:
    """Raise BlankNotFilled when a kernel, or a @triton.jit helper it calls, still holds a
    `______`, and NotStarted when one still raises NotImplementedError, instead of letting
    Triton fail with a long stack trace."""
    if kernel in _FINISHED:  # read the source once per kernel object, not per launch
        return
    refuse_unfinished_kernel(kernel, name)  # every blank listed at once
    _FINISHED.add(kernel)


_FINISHED: set = set()


def refuse_unfinished_kernel(kernel, name: str) -> None:
    """Before a launch: a blank in the kernel or in a @triton.jit helper it calls raises
    BlankNotFilled, a body still `raise NotImplementedError` raises NotStarted, each one short
    line instead of the Triton interpreter's stack trace."""
    from ..blanks import refuse_blanks, source_of
    from ..checks.errors import NotStarted

    refuse_blanks(kernel, name)
    for shown, obj in [(name, kernel), *kernel_helpers(kernel)]:
        if "raise NotImplementedError" in (source_of(obj) or ""):
            raise NotStarted(_("{name} still raises NotImplementedError. Replace the `raise "
                               "NotImplementedError` line with your implementation.").format(
                                   name=shown))


def _is_power_of_two(x: int) -> bool:
    return x >= 1 and x & (x - 1) == 0


def check_qkv_shapes(q, k, v, names=("q", "k", "v")) -> None:
    """Shapes (B, H, N, D), one dtype, the runtime's device; any head dim."""
    runtime.check_tensors(q, k, v, names=names, dot=True)
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise CourseInputError(f"q, k and v must all have shape (B, H, N, D); got "
                               f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}.")
    if not (q.dtype == k.dtype == v.dtype):
        raise CourseInputError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, "
                               f"{v.dtype}.")


def check_qkv(q, k, v, names=("q", "k", "v")) -> None:
    """check_qkv_shapes, and a head dim the lessons' kernels compile (they do not pad)."""
    check_qkv_shapes(q, k, v, names)
    d = q.shape[-1]
    if not (_is_power_of_two(d) and 16 <= d <= 128):
        raise CourseInputError(f"head dim {d} is not supported: use 16, 32, 64 or 128 "
                               "(tl.arange needs a power of two; pad the head dim otherwise).")


def _bhn_strides(*tensors: torch.Tensor) -> list[int]:
    """Batch, head and row strides of each (B, H, N, D) tensor, in the kernels' argument order
    (the last axis is contiguous: see _last_dim_contiguous)."""
    return [stride for t in tensors for stride in t.stride()[:3]]


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The kernels take strides for every axis but the last: copy only if that one is not 1."""
    return x if x.stride(-1) == 1 else x.contiguous()


TMA_ALIGN_BYTES = 16  # a tensor descriptor's base address and row strides: multiples of this


def descriptor_ready(x: torch.Tensor) -> torch.Tensor:
    """x for a kernel that reads it through a tensor descriptor: last axis contiguous, first
    element and every other stride on TMA_ALIGN_BYTES boundaries. Copy only if it is not."""
    size = x.element_size()
    aligned = x.data_ptr() % TMA_ALIGN_BYTES == 0 and all(
        stride * size % TMA_ALIGN_BYTES == 0 for stride in x.stride()[:-1])
    if x.stride(-1) == 1 and aligned:
        return x
    return x.clone(memory_format=torch.contiguous_format)  # a fresh, aligned allocation


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device=runtime.current().device)


def allow_kernel_scratch() -> None:
    """A kernel that builds tensor descriptors on the GPU needs a little global memory for them,
    which Triton asks the host for: give it torch's caching allocator. Triton keeps it in a
    context variable, which a notebook cell may not share with the one before: set it at every
    launch. (The interpreter needs none.)"""
    if not runtime.current().interpreter:
        import triton

        triton.set_allocator(_scratch)


def _checked_blocks(bm: int, bn: int) -> tuple[int, int]:
    runtime.check_block_size("BLOCK_M", bm)
    runtime.check_block_size("BLOCK_N", bn)
    return bm, bn


def forward_config(d: int, causal: bool, block_m=None, block_n=None):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for the forward kernel on this runtime."""
    if runtime.current().interpreter:
        bm, bn, warps, stages = tiles.INTERPRETER
    else:
        bm, bn, warps, stages = tiles.FORWARD_CONFIGS.get((d, causal), tiles.FORWARD_DEFAULT)
    bm, bn = _checked_blocks(block_m or bm, block_n or bn)
    if bm % bn:
        raise CourseInputError(f"BLOCK_M={bm} must be a multiple of BLOCK_N={bn}: the causal "
                               "diagonal block is walked in BLOCK_N steps.")
    return bm, bn, warps, stages


def flash_forward(kernel, q, k, v, causal: bool = False, sm_scale: float | None = None,
                  block_m: int | None = None, block_n: int | None = None, out=None, lse=None):
    """Run a forward kernel with the lesson's signature; returns (o, lse).

    `out` (B, H, N, D) and `lse` (B, H, N) float32 may be given (graders pass canaried
    buffers); their last stride must be 1.
    """
    refuse_unfinished(kernel, getattr(kernel, "__name__", "kernel"))
    check_qkv(q, k, v)
    q = _last_dim_contiguous(q)
    k, v = descriptor_ready(k), descriptor_ready(v)  # the kernel reads them through TMA
    allow_kernel_scratch()
    B, H, N, D = q.shape
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    bm, bn, warps, stages = forward_config(D, causal, block_m, block_n)
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device) if lse is None else lse
    grid = (cdiv(N, bm), B * H)
    kernel[grid](
        q, k, v, out, lse,
        *_bhn_strides(q, k, v, out),
        lse.stride(0), lse.stride(1),
        H, N, sm_scale * LOG2E,
        D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages,
    )
    return out, lse


def backward_config(d: int, block_m=None, block_n=None, kernel: str = "dkdv"):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for a backward kernel ("dkdv" or "dq")."""
    if runtime.current().interpreter:
        bm, bn, warps, stages = tiles.INTERPRETER
    else:
        bm, bn, warps, stages = tiles.BACKWARD_CONFIGS.get((kernel, d), tiles.BACKWARD_DEFAULT)
    return (*_checked_blocks(block_m or bm, block_n or bn), warps, stages)


def launch_delta(kernel, o, do, delta=None, block_m: int | None = None):
    """delta[b, h, i] = sum_d dO[b, h, i, d] * O[b, h, i, d] (float32, (B, H, N))."""
    refuse_unfinished(kernel, getattr(kernel, "__name__", "kernel"))
    B, H, N, D = o.shape
    bm = block_m or backward_config(D)[0]
    delta = torch.empty(B, H, N, dtype=torch.float32, device=o.device) if delta is None \
        else delta
    kernel[(cdiv(N, bm), B * H)](
        o, do, delta,
        *_bhn_strides(o, do),
        delta.stride(0), delta.stride(1),
        H, N, D=D, BLOCK_M=bm)
    return delta


def _same_strides(lse, delta):
    """The kernels index L and Delta with one pair of strides: make them agree."""
    if lse.stride() != delta.stride():
        lse, delta = lse.contiguous(), delta.contiguous()
    return lse, delta


def launch_dkdv(kernel, q, k, v, do, lse, delta, causal, sm_scale, dk=None, dv=None,
                block_m=None, block_n=None):
    """One program per (key block, batch*head): dK and dV with the K/V block resident."""
    refuse_unfinished(kernel, getattr(kernel, "__name__", "kernel"))
    B, H, N, D = q.shape
    lse, delta = _same_strides(lse, delta)
    bm, bn, warps, stages = backward_config(D, block_m, block_n)
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    kernel[(cdiv(N, bn), B * H)](
        q, k, v, do, lse, delta, dk, dv,
        *_bhn_strides(q, k, v, do, dk, dv),
        lse.stride(0), lse.stride(1),
        H, N, sm_scale,
        D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)
    return dk, dv


def launch_dq(kernel, q, k, v, do, lse, delta, causal, sm_scale, dq=None,
              block_m=None, block_n=None):
    """One program per (query block, batch*head): dQ with the Q block resident."""
    refuse_unfinished(kernel, getattr(kernel, "__name__", "kernel"))
    B, H, N, D = q.shape
    lse, delta = _same_strides(lse, delta)
    bm, bn, warps, stages = backward_config(D, block_m, block_n, kernel="dq")
    dq = torch.empty_like(q) if dq is None else dq
    kernel[(cdiv(N, bm), B * H)](
        q, k, v, do, lse, delta, dq,
        *_bhn_strides(q, k, v, do, dq),
        lse.stride(0), lse.stride(1),
        H, N, sm_scale,
        D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)
    return dq


def flash_backward(kernels, q, k, v, o, lse, do, causal, sm_scale):
    """(dq, dk, dv) from the three backward kernels (delta, dkdv, dq)."""
    delta_kernel, dkdv_kernel, dq_kernel = kernels
    q, k, v, o, do = (_last_dim_contiguous(x) for x in (q, k, v, o, do))
    delta = launch_delta(delta_kernel, o, do)
    dk, dv = launch_dkdv(dkdv_kernel, q, k, v, do, lse, delta, causal, sm_scale)
    dq = launch_dq(dq_kernel, q, k, v, do, lse, delta, causal, sm_scale)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: forward and backward both run Triton launchers passed as arguments.

    apply(q, k, v, causal, sm_scale, run_forward, run_backward) with
    run_forward(q, k, v, causal, sm_scale) -> (o, lse) and
    run_backward(q, k, v, o, lse, do, causal, sm_scale) -> (dq, dk, dv), or None (no backward).
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, run_forward, run_backward):
        sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
        o, lse = run_forward(q, k, v, causal, sm_scale)
        ctx.save_for_backward(q, k, v, o, lse)  # lse: one float per row, not the (N, N) P
        ctx.causal, ctx.sm_scale, ctx.run_backward = causal, sm_scale, run_backward
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if ctx.run_backward is None:
            raise CourseInputError("no backward kernels were given to this attention function")
        dq, dk, dv = ctx.run_backward(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None, None


def make_flash_attention(forward_kernel=None, delta_kernel=None, dkdv_kernel=None,
                         dq_kernel=None, *, run_forward=None):
    """attention(q, k, v, causal=False, sm_scale=None) running the given Triton kernels: the
    forward kernel (lesson 6's signature), or `run_forward(q, k, v, causal, sm_scale) -> (o, lse)`
    (lesson 7 passes the course's, host.forward), and the three backward kernels (lesson 7)."""
    if (forward_kernel is None) == (run_forward is None):
        raise CourseInputError("give make_flash_attention a forward kernel or run_forward, "
                               "one of the two")
    if run_forward is None:
        run_forward = functools.partial(flash_forward, forward_kernel)
    run_backward = None if delta_kernel is None else functools.partial(
        flash_backward, (delta_kernel, dkdv_kernel, dq_kernel))

    def attention(q, k, v, causal: bool = False, sm_scale: float | None = None):
        return FlashAttentionFunction.apply(q, k, v, causal, sm_scale, run_forward,
                                            run_backward)

    return attention


# ---------------------------------------------------------------- causal block counting


def causal_tiles(n: int, block_m: int, block_n: int) -> tuple[int, int]:
    """(tiles visited, tiles skipped) by a causal forward whose query block i visits the key
    blocks covering columns 0 .. min((i + 1) * block_m, n) - 1."""
    rows = cdiv(n, block_m)
    cols = cdiv(n, block_n)
    visited = sum(cdiv(min((i + 1) * block_m, n), block_n) for i in range(rows))
    return visited, rows * cols - visited


# ---------------------------------------------------------------- memory


def peak_memory_bytes(B: int, H: int, N: int, D: int, bytes_per_element: int = 2) -> dict:
    """Peak memory of a forward pass (no autograd), computed from the tensors each holds.

    standard: q, k, v, the scores S and probabilities P (both (N, N) per head, alive together
    during the softmax), and the output. flash: q, k, v, the output and one float32 logsumexp
    per row.
    """
    qkvo = 4 * B * H * N * D * bytes_per_element
    nxn = B * H * N * N * bytes_per_element
    return {"standard": qkvo + 2 * nxn, "flash": qkvo + B * H * N * 4}


def measure_peak_memory(fn, *args) -> int:
    """Peak bytes allocated while fn(*args) runs, counting what was allocated before it
    (the inputs) too (CUDA only)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn(*args)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def memory_figure(ns, standard_bytes, flash_bytes, title: str, measured: bool):
    """Peak memory of standard vs fused attention over sequence length, log-log."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    kind = "measured" if measured else "computed, not measured"
    ax.loglog(ns, [b / 2**30 for b in standard_bytes], "o-", label="standard attention")
    ax.loglog(ns, [b / 2**30 for b in flash_bytes], "s-", label="FlashAttention kernel")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("peak memory, GiB")
    ax.set_title(f"{title} ({kind})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
