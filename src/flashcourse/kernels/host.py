"""Host side of the reference FlashAttention-2: launches forward.py's and backward.py's kernels.

* `forward(q, k, v, causal, sm_scale, step=...)`: one ladder step's forward, (o, lse); with
  `kernel=` it launches a kernel with lesson 8's exercise signature instead.
* `backward(q, k, v, o, lse, do, causal, sm_scale)`: (dq, dk, dv).
* `flash_attention(q, k, v, causal, sm_scale, step)`: both behind attention.FlashAttentionFunction
  (the one autograd Function of the course), for (B, H, N, D) tensors with any strides.

Import after `fc.setup()` (it picks the runtime itself if nobody did).
"""

from __future__ import annotations

import functools
import math

import torch
import triton

from .. import runtime
from ..runtime import CourseInputError
from . import attention, tiles
from .backward import attn_bwd_delta_kernel, attn_bwd_dkdv_kernel, attn_bwd_dq_kernel
from .forward import attn_fwd_halves_kernel, attn_fwd_kernel
from .ladder import STEPS, Step, TensorDescriptor, as_step, config_for, step_supported


def _tma_ok(*tensors) -> bool:
    """TMA needs a unit last stride, 16-byte aligned base and 16-byte multiples as the other
    strides."""
    for x in tensors:
        size = x.element_size()
        if x.stride(-1) != 1 or x.data_ptr() % 16:
            return False
        if any((stride * size) % 16 for stride in x.stride()[:-1]):
            return False
    return True


def _descriptors(q, k, v, o, block_m: int, block_n: int) -> list:
    """(B, H, N, D) descriptors of q, k, v, o whose blocks are one head's row tiles."""
    d = q.shape[-1]
    return [TensorDescriptor.from_tensor(x, [1, 1, rows, d])
            for x, rows in ((q, block_m), (k, block_n), (v, block_n), (o, block_m))]


def _strides(x) -> list[int]:
    return list(x.stride())


_AUTOTUNED: dict[int, object] = {}
_TUNERS: dict[tuple, object] = {}


def _autotuned(step: Step, d: int):
    """The forward kernel under @triton.autotune for step 3 (tiles) or 5 (stages): compiled
    only; the interpreter has no driver to time configs with."""
    if step.tuned_stages:  # the tiles are fixed (the descriptors' blocks): search the stages
        bm, bn, warps, _ = tiles.TUNED[d <= 64]
        key = (step.number, bm, bn, warps)
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=s)
                   for s in tiles.AUTOTUNE_STAGES]
    else:
        key = (step.number,)
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=2)
                   for bm, bn, w in tiles.AUTOTUNE_TILES]
    if key not in _TUNERS:
        _TUNERS[key] = triton.autotune(configs=configs, key=["N", "HEAD_D", "CAUSAL"])(
            attn_fwd_kernel)
    _AUTOTUNED[step.number] = _TUNERS[key]  # best_config() reports the last one used
    return _TUNERS[key]


def forward(q, k, v, causal: bool = False, sm_scale: float | None = None, step=None,
            config: tuple[int, int, int, int] | None = None, autotune: bool = False,
            out=None, lse=None, kernel=None):
    """Run the forward of a ladder step; returns (o, lse) with lse (B, H, N) float32.

    config overrides (BLOCK_M, BLOCK_N, num_warps, num_stages); autotune=True (compiled only)
    searches tiles for step 3 and stages for step 5. `kernel` runs a kernel with the
    exercise's signature (no ladder switches) instead of the reference.
    """
    attention.check_qkv(q, k, v)
    step = as_step(step)
    ok, why = step_supported(step)
    if not ok:
        raise CourseInputError(f"ladder step {step.number} ({step.name}) cannot run here: {why}.")
    B, H, N, D = q.shape
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    o = torch.empty_like(q) if out is None else out
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device) if lse is None else lse
    if lse.shape != (B, H, N) or not lse.is_contiguous():
        raise CourseInputError("lse must be a contiguous (B, H, N) float32 tensor.")
    bm, bn, warps, stages = config or config_for(step, D)
    runtime.check_block_size("BLOCK_M", bm)
    runtime.check_block_size("BLOCK_N", bn)
    if bm % bn:
        raise CourseInputError(f"BLOCK_M={bm} must be a multiple of BLOCK_N={bn}.")
    args = [q, k, v, o, lse, sm_scale, *_strides(q), *_strides(k), *_strides(v), *_strides(o),
            H, N]
    if kernel is not None:  # the exercise kernel: step 2's switches are built in
        attention.refuse_unfinished(kernel, getattr(kernel, "__name__", "kernel"))
        kernel[(triton.cdiv(N, bm), B * H)](*args, HEAD_D=D, BLOCK_M=bm, BLOCK_N=bn,
                                            CAUSAL=causal, num_warps=warps, num_stages=stages)
        return o, lse
    use_tma = step.tma and _tma_ok(q, k, v, o)
    interpreter = runtime.current().interpreter
    if step.halves and (interpreter or tiles.HALVES[D <= 64]):
        if bm < 32 and not interpreter:
            raise CourseInputError(f"step 7 splits BLOCK_M={bm} into two halves of at least 16 "
                                   "rows (the smallest tl.dot): use BLOCK_M >= 32.")
        if use_tma:
            args[:4] = _descriptors(q, k, v, o, bm // 2, bn)
        attn_fwd_halves_kernel[(triton.cdiv(N, bm), B * H)](
            *args, HEAD_D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, USE_TMA=use_tma,
            num_warps=warps, num_stages=stages)
        return o, lse
    if use_tma:  # the kernel reads the tensors through these; strides stay as arguments
        args[:4] = _descriptors(q, k, v, o, bm, bn)
    switches = dict(HEAD_D=D, CAUSAL=causal, USE_EXP2=step.use_exp2, SPLIT=step.split,
                    USE_TMA=use_tma, WARP_SPEC=step.warp_spec)
    if autotune and not interpreter and config is None and step.number in tiles.AUTOTUNE_STEPS:
        tuned = _autotuned(step, D)

        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_M"]), B * H)

        tuned[grid](*args, **switches)
        return o, lse
    attn_fwd_kernel[(triton.cdiv(N, bm), B * H)](*args, BLOCK_M=bm, BLOCK_N=bn,
                                                 num_warps=warps, num_stages=stages, **switches)
    return o, lse


def best_config(step) -> dict | None:
    """The config autotune picked last for step 3 or 5 (None before any autotuned run)."""
    tuner = _AUTOTUNED.get(as_step(step).number)
    cfg = getattr(tuner, "best_config", None)
    if cfg is None:
        return None
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def backward_configs(d: int):
    """(dK/dV config, dQ config) on this runtime."""
    if runtime.current().interpreter:
        return tiles.INTERPRETER, tiles.INTERPRETER
    return tiles.LADDER_BACKWARD[d <= 64]


def backward(q, k, v, o, lse, do, causal: bool, sm_scale: float | None = None,
             configs=None, fused_dq: bool = False):
    """dq, dk, dv of attention, given the forward's output and logsumexp.

    configs: (dK/dV config, dQ config). fused_dq=True (an experiment, timed by
    gpu/explore_bwd.py): the dK/dV kernel adds dQ up in an fp32 buffer with atomics and no dQ
    kernel runs (its config is ignored).
    """
    B, H, N, D = q.shape
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    interpreter = runtime.current().interpreter
    block = tiles.INTERPRETER[0] if interpreter else tiles.DELTA_BLOCK_M
    attn_bwd_delta_kernel[(triton.cdiv(N, block), B * H)](
        o, do, delta, *_strides(o), *_strides(do), H, N, HEAD_D=D, BLOCK_M=block)
    attempts = [configs] if configs else [backward_configs(D), tiles.LADDER_BACKWARD_FALLBACK]
    for number, (kv_cfg, q_cfg) in enumerate(attempts):
        try:
            # (B, H, N, D) fp32 dQ sums when fused; otherwise delta stands in, unused
            dq_acc = torch.zeros((B, H, N, D), dtype=torch.float32, device=q.device) \
                if fused_dq else delta
            bm, bn, warps, stages = kv_cfg
            attn_bwd_dkdv_kernel[(triton.cdiv(N, bn), B * H)](
                q, k, v, do, lse, delta, dk, dv, dq_acc, sm_scale, *_strides(q),
                *_strides(k), *_strides(v), *_strides(do), *_strides(dk), *_strides(dv), H, N,
                HEAD_D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, FUSED_DQ=fused_dq,
                num_warps=warps, num_stages=stages)
            if fused_dq:
                dq.copy_(dq_acc)
                break
            bm, bn, warps, stages = q_cfg
            attn_bwd_dq_kernel[(triton.cdiv(N, bm), B * H)](
                q, k, v, do, lse, delta, dq, sm_scale, *_strides(q), *_strides(k),
                *_strides(v), *_strides(do), *_strides(dq), H, N, HEAD_D=D, BLOCK_M=bm,
                BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)
            break
        except triton.runtime.errors.OutOfResources:  # too much shared memory: smaller tiles
            if number == len(attempts) - 1:
                raise
    return dq, dk, dv


def flash_attention(q, k, v, causal: bool = False, sm_scale: float | None = None, step=None):
    """softmax(sm_scale * q k^T) v for (B, H, N, D) tensors, differentiable (Triton forward of
    ladder step `step`, ladder.DEFAULT_STEP by default, and the FA2 backward)."""
    step = as_step(step)
    while not step_supported(step)[0] or step.number in BROKEN_STEPS:
        step = STEPS[step.number - 1]  # fall back to the best step this machine can run
    try:
        return attention.FlashAttentionFunction.apply(
            q, k, v, causal, sm_scale, functools.partial(forward, step=step), backward)
    except (CourseInputError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as err:  # noqa: BLE001  (e.g. TMA failing to compile on this Triton)
        if step.number <= 2 or runtime.current().interpreter:
            raise
        first_line = (str(err).splitlines() or [""])[0][:200]
        BROKEN_STEPS[step.number] = f"{type(err).__name__}: {first_line}"
        return flash_attention(q, k, v, causal, sm_scale, step.number - 1)


BROKEN_STEPS: dict[int, str] = {}  # steps that failed to compile here, with the error
