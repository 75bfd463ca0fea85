"""Lesson 9's last exercise, the ring backward: dq, dk and dv against autograd, a wrong one
named by which gradients are right (and dK, dV one hop short of home)."""

from __future__ import annotations

import numpy as np

from ... import distributed as ring
from .. import registry
from .common import (
    BACKWARD_CASES,
    BACKWARD_HIDDEN,
    case_arrays,
    describe,
    gather,
    passed,
    reference_gradients,
    split_positions,
)
from .jobs import answers_by_case

# ---------------------------------------------------------------- 4. the ring backward


def _name_backward_mistake(dq, dk, dv, expected, n, world) -> str:
    exp_dq, exp_dk, exp_dv = expected
    dq_ok, dk_ok, dv_ok = (registry.same_result(got, ref, 1e-8)
                           for got, ref in zip((dq, dk, dv), expected, strict=True))
    # one hop short: rank r returns the dK, dV of the block of rank r + 1
    shifted_dk = np.zeros_like(exp_dk)
    for rank in range(world):
        mine = ring.contiguous_positions(n, world, rank)
        theirs = ring.contiguous_positions(n, world, (rank + 1) % world)
        rows = min(len(mine), len(theirs))
        shifted_dk[mine[:rows]] = exp_dk[theirs[:rows]]
    if dq_ok and registry.same_result(dk, shifted_dk, 1e-8):
        return ("Likely mistake: after the last step the accumulated dK and dV sit one rank "
                "early: send them one more hop so that each reaches the rank that owns its "
                "keys (section 6).")
    if dq_ok and dv_ok:
        return "dq and dv are right: look at the dK line (section 6)."
    if dq_ok and dk_ok:
        return "dq and dk are right: look at the dV line (section 6)."
    if dq_ok:
        return ("dq is right but dK/dV are not: they must travel with K and V, each rank "
                "adding its contribution to the block it holds, and come home at the end "
                "(section 6).")
    if dk_ok and dv_ok:
        return ("dK and dV are right, dq is not: dq must add the contribution of every step "
                "(it stays on the rank) (section 6).")
    if dv_ok:
        return ("dV is right, dQ and dK are not: dS = P * (dO V^T - delta) needs delta = "
                "rowsum(dO * O) over the whole row, from the forward's output (section 6).")
    return ("Hint: accumulate dQ on the rank over every step; let dK and dV travel with K and "
            "V and bring them home at the end (section 6).")


def _backward_input(n: int, d: int, causal: bool, seed: int) -> dict:
    """A case's arrays with the forward's o and lse, which the backward is given."""
    case = {"n": n, "causal": causal, **case_arrays(n, d, seed)}
    case["o"], case["lse"] = ring.reference_attention(case["q"], case["k"], case["v"], causal)
    return case


def check_ring_backward(ring_attention_backward) -> str:
    cases = registry.with_hidden(BACKWARD_CASES, BACKWARD_HIDDEN)
    for world, number, (n, _, causal, seed), case, per_rank in answers_by_case(
            ring_attention_backward, "backward", cases, _backward_input):
        label = f"{number} ({describe(n, world, causal, seed=seed)})"
        grads = gather(per_rank, split_positions(n, world, False), "dq", "dk", "dv")
        expected = reference_gradients(case, causal)
        for name, got, ref in zip(("dq", "dk", "dv"), grads, expected, strict=True):
            try:
                registry.compare(got, ref, f"{label}, {name} against autograd",
                                 atol=1e-9, rtol=1e-7)
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_name_backward_mistake(*grads, expected, n, world)}") from None
    return passed(len(cases), "match autograd of standard attention")
