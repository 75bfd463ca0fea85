"""Host side of the reference FlashAttention-2: launches forward.py's and backward.py's kernels.

* `forward(q, k, v, causal, sm_scale, step=...)`: one ladder step's forward, (o, lse); with
  `kernel=` it launches a kernel with lesson 8's exercise signature instead.
* `backward(q, k, v, o, lse, do, causal, sm_scale)`: (dq, dk, dv).
* `flash_attention(q, k, v, causal, sm_scale, step)`: both behind attention.FlashAttentionFunction
  (the one autograd Function of the course), for (B, H, N, D) tensors with any strides.
* Any head dim from 1 to MAX_HEAD_DIM: the kernels are compiled for powers of two only
  (tl.arange), so `run_at_kernel_width` zero-pads the head dim to `kernel_head_dim(d)` and
  copies the results' first d columns back (lesson 9's launchers use it too).

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
from .ladder import (
    STEPS,
    Step,
    TensorDescriptor,
    as_step,
    config_for,
    step_supported,
    tma_supported,
)

# ---------------------------------------------------------------- head dims

MAX_HEAD_DIM = 256  # wider rows would not leave registers for a tile's fp32 accumulator
MIN_KERNEL_HEAD_DIM = 16  # tl.dot's smallest tile side


def kernel_head_dim(d: int) -> int:
    """The head dim the kernels run at for a head dim d: d rounded up to a power of two
    (tl.arange needs one) of at least MIN_KERNEL_HEAD_DIM."""
    if not 1 <= d <= MAX_HEAD_DIM:
        raise CourseInputError(
            f"head dim {d} is not supported: the reference kernels take head dims 1 to "
            f"{MAX_HEAD_DIM} (they pad it to 16, 32, 64, 128 or 256). Give q, k and v a last "
            f"axis of at most {MAX_HEAD_DIM}, or use torch's scaled_dot_product_attention.")
    return max(MIN_KERNEL_HEAD_DIM, 1 << (d - 1).bit_length())


def pad_head_dim(x: torch.Tensor, width: int) -> torch.Tensor:
    """x with its last axis zero-padded to `width` (x itself when it has that width)."""
    extra = width - x.shape[-1]
    return x if extra == 0 else torch.nn.functional.pad(x, (0, extra))


def run_at_kernel_width(launch, inputs, outputs):
    """launch(*inputs, *outputs) at the kernels' head dim. `inputs` and `outputs` are the
    tensors whose last axis is the head dim d; everything else goes in with `launch`.

    When d is not a kernel width, the inputs are zero-padded and the kernel writes into padded
    buffers, whose first d columns are copied into `outputs`. Zeros change nothing: padded
    columns add 0 to q k^T (so the scores, P and every row statistic stay the same), and zero
    columns of v, o and dO make zero columns of o, dq, dk and dv, which are dropped. The
    caller computes sm_scale from the real d. Returns what launch returns.
    """
    d = inputs[0].shape[-1]
    width = kernel_head_dim(d)
    if width == d:
        return launch(*inputs, *outputs)
    wide = [x.new_empty((*x.shape[:-1], width)) for x in outputs]
    result = launch(*(pad_head_dim(x, width) for x in inputs), *wide)
    for out, padded in zip(outputs, wide, strict=True):
        out.copy_(padded[..., :d])
    return result


def check_reference_qkv(q, k, v) -> None:
    """The reference kernels' check of their inputs: shapes, one dtype, the runtime's device,
    and any head dim from 1 to MAX_HEAD_DIM (the launchers pad it)."""
    attention.check_qkv_shapes(q, k, v)
    kernel_head_dim(q.shape[-1])


# ---------------------------------------------------------------- forward


def tma_ok(*tensors) -> bool:
    """TMA needs a unit last stride, 16-byte aligned base and 16-byte multiples as the other
    strides."""
    for x in tensors:
        size = x.element_size()
        if x.stride(-1) != 1 or x.data_ptr() % 16:
            return False
        if any((stride * size) % 16 for stride in x.stride()[:-1]):
            return False
    return True


def descriptors(*tensors_and_rows) -> list:
    """(B, H, N, D) descriptors, one per (tensor, rows): blocks of `rows` rows of one head."""
    return [TensorDescriptor.from_tensor(x, [1, 1, rows, x.shape[-1]])
            for x, rows in tensors_and_rows]


def tensor_descriptors(q, k, v, o, block_m: int, block_n: int) -> list:
    """The forward's descriptors of q, k, v, o: block_m query rows, block_n key rows."""
    return descriptors((q, block_m), (k, block_n), (v, block_n), (o, block_m))


def _strides(x) -> list[int]:
    return list(x.stride())


_AUTOTUNED: dict[int, object] = {}
_TUNERS: dict[tuple, object] = {}


def _autotuned(step: Step, d: int):
    """The forward kernel under @triton.autotune for step 3 (tiles) or 5 (stages): compiled
    only; the interpreter has no driver to time configs with."""
    if step.tuned_stages:  # the tiles are fixed (the descriptors' blocks): search the stages
        bm, bn, warps, _ = forward_config(step, d)
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


def forward_config(step, d: int) -> tuple[int, int, int, int]:
    """ladder.config_for, and for the tuned steps at d = 256 tiles.TUNED_WIDE: the d <= 128
    tiles would hold a (128, 256) fp32 accumulator in 4 warps' registers."""
    step = as_step(step)
    if d <= 128 or not step.tuned or runtime.current().interpreter:
        return config_for(step, d)
    bm, bn, warps, stages = tiles.TUNED_WIDE
    return bm, bn, warps, stages if step.tuned_stages else 2


def forward(q, k, v, causal: bool = False, sm_scale: float | None = None, step=None,
            config: tuple[int, int, int, int] | None = None, autotune: bool = False,
            out=None, lse=None, kernel=None):
    """Run the forward of a ladder step; returns (o, lse) with lse (B, H, N) float32.

    config overrides (BLOCK_M, BLOCK_N, num_warps, num_stages); autotune=True (compiled only)
    searches tiles for step 3 and stages for step 5. `kernel` runs a kernel with the
    exercise's signature (no ladder switches) instead of the reference. Any head dim from 1
    to MAX_HEAD_DIM: it runs padded to kernel_head_dim(d), with sm_scale = 1 / sqrt(d) of the
    real d unless given.
    """
    check_reference_qkv(q, k, v)
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
    launch = functools.partial(_launch_forward, lse=lse, causal=causal, sm_scale=sm_scale,
                               step=step, config=config, autotune=autotune, kernel=kernel)
    run_at_kernel_width(launch, (q, k, v), (o,))
    return o, lse


def _launch_forward(q, k, v, o, *, lse, causal, sm_scale, step, config, autotune, kernel):
    """forward's kernel launch, at a kernel head dim (q.shape[-1] a power of two)."""
    B, H, N, D = q.shape
    bm, bn, warps, stages = config or forward_config(step, D)
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
        return
    use_tma = step.tma and tma_ok(q, k, v, o)
    interpreter = runtime.current().interpreter
    if step.halves and (interpreter or tiles.HALVES[D <= 64]):
        if bm < 32 and not interpreter:
            raise CourseInputError(f"step 7 splits BLOCK_M={bm} into two halves of at least 16 "
                                   "rows (the smallest tl.dot): use BLOCK_M >= 32.")
        if use_tma:
            args[:4] = tensor_descriptors(q, k, v, o, bm // 2, bn)
        attn_fwd_halves_kernel[(triton.cdiv(N, bm), B * H)](
            *args, HEAD_D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, USE_TMA=use_tma,
            num_warps=warps, num_stages=stages)
        return
    if use_tma:  # the kernel reads the tensors through these; strides stay as arguments
        args[:4] = tensor_descriptors(q, k, v, o, bm, bn)
    switches = dict(HEAD_D=D, CAUSAL=causal, USE_EXP2=step.use_exp2, SPLIT=step.split,
                    USE_TMA=use_tma, WARP_SPEC=step.warp_spec)
    if autotune and not interpreter and config is None and step.number in tiles.AUTOTUNE_STEPS:
        tuned = _autotuned(step, D)

        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_M"]), B * H)

        tuned[grid](*args, **switches)
        return
    attn_fwd_kernel[(triton.cdiv(N, bm), B * H)](*args, BLOCK_M=bm, BLOCK_N=bn,
                                                 num_warps=warps, num_stages=stages, **switches)


def best_config(step) -> dict | None:
    """The config autotune picked last for step 3 or 5 (None before any autotuned run)."""
    tuner = _AUTOTUNED.get(as_step(step).number)
    cfg = getattr(tuner, "best_config", None)
    if cfg is None:
        return None
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def backward_configs(d: int):
    """(dK/dV config, dQ config) on this runtime, for a kernel head dim d."""
    if runtime.current().interpreter:
        return tiles.INTERPRETER, tiles.INTERPRETER
    if d > 128:
        return tiles.LADDER_BACKWARD_WIDE
    return tiles.LADDER_BACKWARD[d <= 64]


def backward(q, k, v, o, lse, do, causal: bool, sm_scale: float | None = None,
             configs=None, fused_dq: bool = False, tma: bool | None = None,
             warp_spec: bool = False, stats_tma: bool = False):
    """dq, dk, dv of attention, given the forward's output and logsumexp.

    configs: (dK/dV config, dQ config), each (BLOCK_M, BLOCK_N, num_warps, num_stages) or with a
    fifth entry, maxnreg (an experiment, compiled only: registers per thread capped). tma: read
    and write through tensor descriptors (None: wherever this Triton, GPU and the tensors'
    strides allow it; False: pointer loads).
    fused_dq=True (an experiment, timed by gpu/explore_bwd.py): the dK/dV kernel adds dQ up in
    an fp32 buffer, with atomics or, with tensor descriptors on a GPU, one TMA reduction per
    tile, and no dQ kernel runs (its config is ignored). warp_spec=True (an experiment):
    both kernels' unmasked loops are warp-specialised. stats_tma=True (an experiment, no faster
    on an H200: lesson 8): where the dK/dV kernel reads through tensor descriptors and N is a
    multiple of 4, it reads the logsumexp and delta rows through descriptors too, not pointers.
    Any head dim from 1 to
    MAX_HEAD_DIM, as forward.
    """
    D = q.shape[-1]
    kernel_head_dim(D)  # refuses a head dim out of range before 1 / sqrt(D) fails
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    launch = functools.partial(_launch_backward, lse=lse, causal=causal, sm_scale=sm_scale,
                               configs=configs, fused_dq=fused_dq, tma=tma,
                               warp_spec=warp_spec, stats_tma=stats_tma)
    run_at_kernel_width(launch, (q, k, v, o, do), (dq, dk, dv))
    return dq, dk, dv


def _tile_options(config) -> tuple[int, int, dict]:
    """(BLOCK_M, BLOCK_N, launch options) of a backward config (BLOCK_M, BLOCK_N, num_warps,
    num_stages) or, capping the registers per thread as an experiment, (..., maxnreg)."""
    if not (isinstance(config, (tuple, list)) and len(config) in (4, 5)):
        raise CourseInputError(f"a backward config must be (BLOCK_M, BLOCK_N, num_warps, "
                               f"num_stages) or (..., maxnreg); got {config!r}.")
    bm, bn, warps, stages, *cap = config
    return bm, bn, launch_options(warps, stages, *cap)


def launch_options(num_warps: int, num_stages: int, maxnreg: int | None = None) -> dict:
    """A launch's options: maxnreg (an experiment, compiled only: registers per thread capped)
    only where given, since Triton reads its absence as no cap."""
    options = dict(num_warps=num_warps, num_stages=num_stages)
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    return options


class RecordedLaunch:
    """Stands in for a Triton kernel: kernel[grid](...) launches nothing and keeps the grid, the
    arguments and the options of its last call in `last`."""

    last = None

    def __getitem__(self, grid):
        def record(*args, **options):
            self.last = grid, args, options
        return record


def _launch_backward(q, k, v, o, do, dq, dk, dv, *, lse, causal, sm_scale, configs, fused_dq,
                     tma, warp_spec, stats_tma):
    """backward's kernel launches, at a kernel head dim (q.shape[-1] a power of two)."""
    if tma and not tma_supported():
        raise CourseInputError("backward(tma=True) needs tensor descriptors: this Triton or "
                               "GPU has none; leave tma at None to use them where they work.")
    if tma and not tma_ok(q, k, v, do, dq, dk, dv):
        raise CourseInputError("backward(tma=True): tensor descriptors need a unit last stride "
                               "and 16-byte aligned rows; pass contiguous tensors or tma=None.")
    if tma is None:
        tma = tma_supported() and tma_ok(q, k, v, do, dq, dk, dv)
    B, H, N, D = q.shape
    # rows of N fp32 values are 16-byte aligned for a descriptor when N is a multiple of 4
    stats_tma = stats_tma and tma and lse.is_contiguous() and tma_ok(lse)
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    interpreter = runtime.current().interpreter
    block = tiles.INTERPRETER[0] if interpreter else tiles.DELTA_BLOCK_M
    attn_bwd_delta_kernel[(triton.cdiv(N, block), B * H)](
        o, do, delta, *_strides(o), *_strides(do), H, N, HEAD_D=D, BLOCK_M=block)
    bulk = fused_dq and tma and not interpreter  # the interpreter has no TMA reduction
    attempts = [configs] if configs else [backward_configs(D), tiles.LADDER_BACKWARD_FALLBACK]
    for number, (kv_cfg, q_cfg) in enumerate(attempts):
        try:
            # (B, H, N, D) fp32 dQ sums when fused; otherwise delta stands in, unused
            dq_acc = torch.zeros((B, H, N, D), dtype=torch.float32, device=q.device) \
                if fused_dq else delta
            bm, bn, options = _tile_options(kv_cfg)
            tensors = [q, k, v, do, dk, dv, dq_acc]
            if tma:
                tensors[:6] = descriptors((q, bm), (k, bn), (v, bn), (do, bm), (dk, bn),
                                          (dv, bn))
            if bulk:
                tensors[6], = descriptors((dq_acc, bm))
            stats = [lse, delta]
            if stats_tma:  # (B * H, N): blocks of bm rows of one head
                stats = [TensorDescriptor.from_tensor(x.view(B * H, N), [1, bm])
                         for x in stats]
            attn_bwd_dkdv_kernel[(triton.cdiv(N, bn), B * H)](
                *tensors[:4], *stats, *tensors[4:], sm_scale, *_strides(q), *_strides(k),
                *_strides(v), *_strides(do), *_strides(dk), *_strides(dv), H, N, HEAD_D=D,
                BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, FUSED_DQ=fused_dq, USE_TMA=tma,
                DQ_BULK=bulk, WARP_SPEC=warp_spec, STATS_TMA=stats_tma, **options)
            if fused_dq:
                dq.copy_(dq_acc)
                break
            bm, bn, options = _tile_options(q_cfg)
            tensors = [q, k, v, do, dq]
            if tma:
                tensors = descriptors((q, bm), (k, bn), (v, bn), (do, bm), (dq, bm))
            attn_bwd_dq_kernel[(triton.cdiv(N, bm), B * H)](
                *tensors[:4], lse, delta, tensors[4], sm_scale, *_strides(q), *_strides(k),
                *_strides(v), *_strides(do), *_strides(dq), H, N, HEAD_D=D, BLOCK_M=bm,
                BLOCK_N=bn, CAUSAL=causal, USE_TMA=tma, WARP_SPEC=warp_spec, **options)
            break
        except triton.runtime.errors.OutOfResources:  # too much shared memory: smaller tiles
            if number == len(attempts) - 1:
                raise


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
