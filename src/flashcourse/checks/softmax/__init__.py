"""Checks of lesson 5, "Softmax, online softmax and merging softmax states".

Six code exercises: a stable numpy softmax, a fused row-softmax Triton kernel, the online
softmax statistics in numpy, an online-softmax Triton kernel over a long row, a masked softmax
kernel written from scratch, and the merge of two partial softmax states (`numpy_exercises.py`,
`kernel_exercises.py`, `masked_kernel.py`; shared inputs in `common.py`). Its self-check
questions and veto misconceptions are data: self_checks/05-softmax.toml.
"""

from __future__ import annotations

from ...i18n import N_
from .. import registry
from . import kernel_exercises, masked_kernel, numpy_exercises
from .kernel_exercises import (  # noqa: F401  (the lesson's cells and tests use these)
    launch_online_softmax,
    launch_row_softmax,
    online_softmax,
    row_softmax,
)
from .masked_kernel import launch_masked_softmax, masked_softmax  # noqa: F401
from .numpy_exercises import softmax_state, stable_candidate  # noqa: F401

LESSON = registry.lesson(
    "softmax", N_("Lesson 5: Softmax, online softmax and merging softmax states"), pass_line=8)

# The exercises, in the scorecard's order.
registry.exercise("softmax/stable-softmax", N_("numpy softmax that never overflows"), 1)(
    numpy_exercises.check_stable_softmax)
registry.exercise("softmax/row-kernel", N_("fused row-softmax Triton kernel"), 1, kernel=True)(
    kernel_exercises.check_row_kernel)
registry.exercise("softmax/online-stats", N_("online softmax in numpy: running max and sum"), 1)(
    numpy_exercises.check_online_stats)
registry.exercise("softmax/online-kernel", N_("online-softmax Triton kernel over a long row"), 1,
                  kernel=True)(kernel_exercises.check_online_kernel)
registry.exercise("softmax/masked-softmax", N_("masked softmax Triton kernel, written from "
                                               "scratch"),
                  2, kernel=True)(masked_kernel.check_masked_softmax)
registry.exercise("softmax/merge-states", N_("merge two partial softmax states"), 1)(
    numpy_exercises.check_merge_states)
