"""Lesson 10's last exercise, the ring backward: dq, dk and dv against autograd, a wrong one
named by replaying the known wrong rings (`mistakes.py`) or by which gradients are right, and
the order of posts, computes and waits on every rank (`protocol.py`: K/V posted before each
compute, the dK/dV accumulators travelling during the next one)."""

from __future__ import annotations

import numpy as np

from ... import distributed as ring
from ...i18n import _
from .. import registry
from . import protocol
from .common import (
    BACKWARD_CASES,
    BACKWARD_HIDDEN,
    SECTION_BACKWARD,
    case_arrays,
    describe,
    gather,
    passed,
    reference_gradients,
    shown,
    split_positions,
)
from .jobs import answers_by_case
from .mistakes import BACKWARD_MISTAKES, backward_candidates

# ---------------------------------------------------------------- 4. the ring backward

def _name_backward_mistake(grads, expected, case, world) -> str:
    for mistake, forms in backward_candidates(case, world).items():
        for form in forms:
            if all(registry.same_result(grads[i], form[i], 1e-8) for i in range(3)):
                return _("Likely mistake: ") + shown(BACKWARD_MISTAKES[mistake])
    dq_ok, dk_ok, dv_ok = (registry.same_result(got, ref, 1e-8)
                           for got, ref in zip(grads, expected, strict=True))
    if dq_ok and dv_ok:
        return (_("dQ and dV are right, dK is not: dK of a block sums what every rank's queries "
                  "give it, as dV does ({section_backward}).").format(
                  section_backward=_(SECTION_BACKWARD)))
    if dq_ok and dk_ok:
        return (_("dQ and dK are right, dV is not: dV of a block sums what every rank's queries "
                  "give it, as dK does ({section_backward}).").format(
                  section_backward=_(SECTION_BACKWARD)))
    if dq_ok:
        return (_("dQ is right but dK and dV are not: they follow their block, each rank adding "
                  "its contribution, and come home at the end ({section_backward}).").format(
                  section_backward=_(SECTION_BACKWARD)))
    if dk_ok and dv_ok:
        return (_("dK and dV are right, dQ is not: dQ of the rank's queries sums the "
                  "contributions of every block it sees, and stays home "
                  "({section_backward}).").format(section_backward=_(SECTION_BACKWARD)))
    if dv_ok:
        return (_("dV is right, dQ and dK are not: both go through dS, whose row term delta comes "
                  "from the forward ({section_backward}).").format(
                  section_backward=_(SECTION_BACKWARD)))
    return (_("Hint: dQ sums on the rank over every step; dK and dV follow their block and come "
              "home at the end ({section_backward}).").format(
                  section_backward=_(SECTION_BACKWARD)))


def _backward_input(n: int, d: int, causal: bool, seed: int) -> dict:
    """A case's arrays with the forward's o and lse, which the backward is given."""
    case = {"n": n, "causal": causal, **case_arrays(n, d, seed)}
    case["o"], case["lse"] = ring.reference_attention(case["q"], case["k"], case["v"], causal)
    return case


def check_ring_backward(ring_attention_backward) -> str:
    cases = registry.with_hidden(BACKWARD_CASES, BACKWARD_HIDDEN)
    for world, label, (n, _unused, causal, _unused), case, per_rank in answers_by_case(
            ring_attention_backward, "backward", cases, _backward_input,
            lambda params, world: describe(params[0], world, params[2], seed=params[3]),
            SECTION_BACKWARD):
        grads = gather(per_rank, split_positions(n, world, False), "dq", "dk", "dv")
        expected = reference_gradients(case, causal)
        for name, got, ref in zip(("dq", "dk", "dv"), grads, expected, strict=True):
            try:
                registry.compare(got, ref, _("{label}, {name} against autograd").format(
                                             label=label, name=name),
                                 atol=1e-9, rtol=1e-7)
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_name_backward_mistake(grads, expected, case, world)}") from None
        for rank in range(world):
            protocol.check_backward(np.asarray(per_rank[rank]["events"]), world,
                                    _("{label}, rank {rank}").format(label=label, rank=rank))
    return passed(len(cases), _("match autograd of standard attention, transfers overlapping "
                                "compute"))
