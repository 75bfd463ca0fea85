"""Checks of lesson 10, "Attention across GPUs: ring attention".

Four code exercises, each run on 2 and then 4 processes joined by torch.distributed (gloo over
loopback) that the check starts itself: the ring forward with its merge of partial states
(`forward.py`), the causal plan of each ring step and the load-balanced (zigzag) split
(`causal.py`), and the ring backward (`backward.py`). Each world size is one call of student
code (`registry.run_student`) that starts the processes, runs every case and returns plain
arrays (`distributed/tries.py`, what runs in each rank); the grader's replay checks those
arrays. Cases in `common.py`; the known wrong rings replayed to name a mistake in
`mistakes.py`; the order of computes, posts and waits each rank must keep in `protocol.py`.
The self-check questions and veto misconceptions are data: self_checks/10-ring-attention.toml.
"""

from __future__ import annotations

from ...i18n import N_
from .. import registry
from . import backward, causal, forward
from .common import WORLD_SIZES  # noqa: F401  (the tests use these)
from .mistakes import BACKWARD_MISTAKES, FORWARD_MISTAKES  # noqa: F401

LESSON = registry.lesson(
    "ring-attention", N_("Lesson 10: Attention across GPUs: ring attention"), pass_line=8)

# The exercises, in the scorecard's order.
registry.exercise("ring-attention/ring-forward", N_("the ring forward: transfers and merges"), 2)(
    forward.check_ring_forward)
registry.exercise("ring-attention/causal-plan", N_("the causal plan of each ring step"), 2)(
    causal.check_causal_plan)
registry.exercise("ring-attention/zigzag-split", N_("the load-balanced (zigzag) split"), 1)(
    causal.check_zigzag_split)
registry.exercise("ring-attention/ring-backward", N_("the ring backward: dK and dV travel"), 2)(
    backward.check_ring_backward)
