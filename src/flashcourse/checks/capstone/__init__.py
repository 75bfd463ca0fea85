"""Checks of lesson 11, "Capstone: attention with a score_mod and a block mask".

The student's function fn(q, k, v, spec) -> o (Triton kernels behind a torch.autograd.Function)
is graded forward (`capstone/forward`) and backward (`capstone/backward`) against float64
references of the specification (`reference.py`); cases, calls and the named mistakes are in
`grading.py`. The questions and the veto misconceptions are data: self_checks/11-capstone.toml.
"""

from __future__ import annotations

from ...i18n import N_
from .. import registry
from . import grading

LESSON = registry.lesson("capstone", N_("Lesson 11: Capstone: attention with a score_mod and a "
                                        "block mask"), pass_line=8)

# The exercises, in the scorecard's order.
registry.exercise(grading.FORWARD_ID, N_("the forward: score_mod, mask, block map, O"), 3)(
    grading.check_forward)
registry.exercise(grading.BACKWARD_ID, N_("the backward: dQ, dK, dV through the score_mod"), 4)(
    grading.check_backward)
