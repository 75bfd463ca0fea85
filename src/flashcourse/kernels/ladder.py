"""The optimisation ladder of the reference forward kernel (lesson 8), and what runs here.

Every step is forward.attn_fwd_kernel compiled with one more tl.constexpr switch on:

  step 0  plain FA2: exp, every key block masked (no split)
  step 1  exp2, with log2(e) folded into the softmax scale
  step 2  causal loop split: unmasked blocks left of the diagonal, one masked diagonal block
  step 3  tuned tiles and warps, from a table keyed on d (autotuned per (N, d, causal) when
          compiled)
  step 4  K and V loaded through tensor descriptors (TMA on Hopper), where Triton has them
  step 5  pipelining depth: num_stages from the table (swept by autotune when compiled)
  step 6  warp specialisation of the key loop (tl.range(..., warp_specialize=True))
  step 7  step 5 with the query tile as two row halves, so that the softmax of one overlaps
          the matmuls of the other (a kernel of its own: attn_fwd_halves_kernel)

The tiles of each step are in tiles.py. No @triton.jit here.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import triton.language as tl

try:  # host-side tensor descriptors (Triton >= 3.4)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

from .. import runtime
from ..runtime import CourseInputError
from . import tiles


@dataclass(frozen=True, kw_only=True)
class Step:
    """One rung of the ladder: the forward kernel's switches and where its tiles come from."""

    number: int
    name: str
    what: str  # one sentence: what changes and why it is faster
    use_exp2: bool = False  # exp2 with log2(e) folded into the scale
    split: bool = False  # the key loop split into unmasked blocks and the masked diagonal
    tuned: bool = False  # tiles and warps from tiles.TUNED (else tiles.BASELINE)
    tma: bool = False  # Q, K, V and O through tensor descriptors
    tuned_stages: bool = False  # num_stages from tiles.TUNED (else 2)
    warp_spec: bool = False  # tl.range(..., warp_specialize=True)
    halves: bool = False  # the query tile as two halves (attn_fwd_halves_kernel)


STEPS = [
    Step(number=0, name="plain FA2",
         what="exp() and one loop in which every key block is masked"),
    Step(number=1, name="exp2",
         what="exp2 with log2(e) folded into the scale: scale and max subtraction in one FMA, "
         "then the native ex2 instruction per score",
         use_exp2=True),
    Step(number=2, name="causal split",
         what="unmasked blocks left of the diagonal, one masked diagonal block: no bounds "
         "checks or -inf selects in the main loop",
         use_exp2=True, split=True),
    Step(number=3, name="tuned tiles",
         what="BLOCK_M, BLOCK_N and warps from a table keyed on d (autotuned per (N, d, "
         "causal) when compiled)",
         use_exp2=True, split=True, tuned=True),
    Step(number=4, name="TMA loads",
         what="Q, K, V and O through host-built tensor descriptors: on Hopper the TMA engine "
         "copies whole tiles, freeing registers and threads",
         use_exp2=True, split=True, tuned=True, tma=True),
    Step(number=5, name="pipelining",
         what="num_stages from the table (swept when compiled): more K/V tiles in flight hide "
         "HBM latency",
         use_exp2=True, split=True, tuned=True, tma=True, tuned_stages=True),
    Step(number=6, name="warp specialisation",
         what="tl.range(..., warp_specialize=True): producer warps load, consumer warps "
         "compute",
         use_exp2=True, split=True, tuned=True, tma=True, tuned_stages=True, warp_spec=True),
    Step(number=7, name="two row halves",
         what="step 5 with the query tile as two halves issued back to back: one half's "
         "softmax overlaps the other's matmuls (d <= 64; at d = 128 it runs step 5)",
         use_exp2=True, split=True, tuned=True, tma=True, tuned_stages=True, halves=True),
]
DEFAULT_STEP = 7  # what flash_attention() runs unless told otherwise


def ladder_steps() -> list[Step]:
    """The optimisation ladder, step 0 (plain FA2) to step 7 (two row halves)."""
    return list(STEPS)


def as_step(step) -> Step:
    """A Step from a Step, its number, or None (DEFAULT_STEP)."""
    if isinstance(step, Step):
        return step
    if step is None:
        return STEPS[DEFAULT_STEP]
    if not 0 <= int(step) < len(STEPS):
        raise CourseInputError(f"step {step} does not exist: the ladder has steps 0 to "
                               f"{len(STEPS) - 1}.")
    return STEPS[int(step)]


def config_for(step, d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of a ladder step for this problem."""
    step = as_step(step)
    if runtime.current().interpreter:
        return tiles.INTERPRETER
    if not step.tuned:
        return tiles.BASELINE
    if step.halves and tiles.HALVES[d <= 64]:
        return tiles.HALVES[d <= 64]
    bm, bn, warps, stages = tiles.TUNED[d <= 64]
    if step.warp_spec:  # Hopper's warp specialisation wants two consumer warpgroups
        bm, warps = 128, 8
    return bm, bn, warps, stages if step.tuned_stages else 2


# ---------------------------------------------------------------- what this machine runs


_CAPABILITIES: dict[int, tuple[int, int]] = {}  # by device index: asked once, not per call


def _capability() -> tuple[int, int]:
    if runtime.current().interpreter or not torch.cuda.is_available():
        return (0, 0)
    device = torch.cuda.current_device()
    if device not in _CAPABILITIES:
        _CAPABILITIES[device] = torch.cuda.get_device_capability(device)
    return _CAPABILITIES[device]


def tma_supported() -> bool:
    """Host-side tensor descriptors exist in this Triton (compiled: also a Hopper-or-newer
    GPU)."""
    if TensorDescriptor is None:
        return False
    return runtime.current().interpreter or _capability() >= (9, 0)


def warp_spec_supported() -> bool:
    """tl.range takes warp_specialize (Triton >= 3.4) and the GPU is Hopper or newer."""
    params = inspect.signature(tl.range.__init__).parameters
    if "warp_specialize" not in params:
        return False
    return runtime.current().interpreter or _capability() >= (9, 0)


def dependent_launch_supported() -> bool:
    """Compiled programmatic dependent launch: Triton's tl.extra.cuda.gdc_wait and a
    Hopper-or-newer GPU (never in the interpreter, which runs one launch at a time)."""
    if runtime.current().interpreter:
        return False
    return hasattr(tl.extra.cuda, "gdc_wait") and _capability() >= (9, 0)


def step_supported(step) -> tuple[bool, str]:
    """(True, "") or (False, why) for this Triton and GPU."""
    step = as_step(step)
    if step.tma and not tma_supported():
        return False, "no tensor descriptors in this Triton or not a Hopper-class GPU"
    if step.warp_spec and not warp_spec_supported():
        return False, "tl.range has no warp_specialize in this Triton or GPU too old"
    return True, ""
