"""Checks of lesson 6, "The FlashAttention forward in Triton".

The grader launches the student's @triton.jit kernels itself (through `attention.flash_forward`
and `padded.padded_forward`), with inputs inside NaN padding (`buffers.poisoned`) and outputs
inside canaries (`buffers.Canaried`), and compares with float64 attention in torch. Known
mistakes are named by rerunning a float64 simulation of the kernel's block order with that
mistake switched on. The fill-in forward in `forward.py`, the forward from scratch in
`padded.py`, the cases and launch helpers lesson 7 shares in `checks/flash_cases.py`; the
self-check questions and veto misconceptions are data: self_checks/06-flash-forward.toml.
"""

from __future__ import annotations

from ...i18n import N_
from .. import registry

LESSON = registry.lesson("flash-triton", N_("Lesson 6: The FlashAttention forward in Triton"),
                        pass_line=8)

# Importing registers the exercises, in the scorecard's order: the fill-in kernel, the skipped
# tiles, then the forward from scratch.
from . import forward  # noqa: E402, F401, I001
from . import padded  # noqa: E402, F401, I001
