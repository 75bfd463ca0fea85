"""Checks of lesson 6, "FlashAttention forward and backward in Triton".

The grader launches the student's @triton.jit kernels itself (through `attention.flash_forward`
and friends), with inputs inside NaN padding (`buffers.poisoned`) and outputs inside canaries
(`buffers.Canaried`), and compares with float64 attention in torch. Known mistakes are named by
rerunning a float64 simulation of the kernel's block order with that mistake switched on.
Forward checks in `forward.py`, backward checks in `backward.py`, what they share in
`common.py`; the self-check questions and veto misconceptions are data:
self_checks/06-flash-attention.toml.
"""

from __future__ import annotations

from .. import registry

LESSON = registry.lesson("flash-triton", "Lesson 6: FlashAttention forward and backward in Triton",
                        pass_line=8)

# Importing registers the exercises, in the scorecard's order: forward (the fill-in kernel, the
# skipped tiles), the forward from scratch, then backward.
from . import forward  # noqa: E402, F401, I001
from . import padded  # noqa: E402, F401, I001
from . import backward  # noqa: E402, F401, I001
