"""Lesson 10's first exercise, the ring forward: the result against standard attention, a
wrong one named by replaying the known wrong rings (`mistakes.py`), and the order of posts,
computes and waits on every rank (`protocol.py`: each transfer overlaps a compute)."""

from __future__ import annotations

import numpy as np

from ...i18n import _
from .. import registry
from . import protocol
from .common import (
    FORWARD_CASES,
    FORWARD_HIDDEN,
    SECTION_MERGE,
    SECTION_RING,
    case_arrays,
    compare_attention,
    describe,
    gather,
    passed,
    shown,
    split_positions,
)
from .jobs import answers_by_case
from .mistakes import FORWARD_MISTAKES, forward_candidates

# ---------------------------------------------------------------- 1. the ring forward


def _name_forward_mistake(o, lse, case, world) -> str:
    for mistake, (o_candidate, lse_candidate) in forward_candidates(case, world).items():
        compared, why = FORWARD_MISTAKES[mistake]
        if registry.same_result(o, o_candidate, 1e-8) and (
                compared == "o" or registry.same_result(lse, lse_candidate, 1e-8)):
            return _("Likely mistake: ") + shown(why)
    return (_("Hint: each step merges the (o, lse) of the block the rank holds into its running "
              "state ({section_merge}), and every block of the ring passes each rank once "
              "({section_ring}).").format(section_merge=_(SECTION_MERGE),
                                         section_ring=_(SECTION_RING)))


def check_ring_forward(ring_attention_forward) -> str:
    cases = registry.with_hidden(FORWARD_CASES, FORWARD_HIDDEN)
    for world, label, (n, _unused, causal, _unused), case, per_rank in answers_by_case(
            ring_attention_forward, "forward", cases,
            lambda n, d, causal, seed: {"n": n, "causal": causal, **case_arrays(n, d, seed)},
            lambda params, world: describe(params[0], world, params[2], seed=params[3]),
            SECTION_RING):
        o, lse = gather(per_rank, split_positions(n, world, False), "o", "lse")
        try:
            compare_attention(o, lse, case, causal, label)
        except registry.WrongAnswer as err:
            raise registry.WrongAnswer(
                f"{err}\n{_name_forward_mistake(o, lse, case, world)}") from None
        for rank in range(world):
            protocol.check_forward(np.asarray(per_rank[rank]["events"]), world,
                                   _("{label}, rank {rank}").format(label=label, rank=rank))
    return passed(len(cases), _("match standard attention, transfers overlapping compute"))
