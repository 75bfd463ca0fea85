"""Checks of lesson 4, "Tiling a matrix product": the numpy blocked matmul that counts its HBM
bytes, the grouped launch order, the tiled Triton kernel, and a batched matmul kernel written
from scratch (`numpy_exercises.py`, `matmul_kernel.py`, `batched_kernel.py`; what they share in
`common.py`). Its self-check questions and veto misconceptions are data:
self_checks/04-tiling-matmul.toml.

The grader launches the student's Triton kernels itself (`launch`, `launch_batched`), always
with the signature of the lesson's kernel, on inputs inside NaN padding and an output inside
canaries.
"""

from __future__ import annotations

from ...i18n import N_
from ...models.matmul import grouped_order
from .. import registry
from . import batched_kernel, matmul_kernel, numpy_exercises
from .batched_kernel import BATCHED_CASES, BATCHED_HIDDEN, launch_batched  # noqa: F401
from .matmul_kernel import KERNEL_CASES, KERNEL_HIDDEN, launch  # noqa: F401
from .numpy_exercises import BLOCKED_CASES, BLOCKED_HIDDEN, ORDER_CASES  # noqa: F401

LESSON = registry.lesson("tiling", N_("Lesson 4: Tiling a matrix product"), pass_line=8)

# The exercises, in the scorecard's order.
registry.exercise("tiling/blocked-bytes", N_("numpy blocked matmul that counts HBM bytes"), 1)(
    numpy_exercises.check_blocked)
registry.exercise("tiling/grouped-order", N_("grouped launch order (GROUP_M swizzle)"), 1)(
    numpy_exercises.check_order)


registry.exercise("tiling/matmul-kernel",
                  N_("tiled Triton matmul (tl.dot, masks, fp32 acc, GROUP_M)"), 2,
                  kernel=True)(matmul_kernel.check_kernel)


registry.exercise("tiling/batched-matmul", N_("batched tiled Triton matmul, written from scratch"),
                  2, kernel=True)(batched_kernel.check_batched)

__all__ = ["grouped_order", "launch", "launch_batched"]
