"""Lesson 9's first exercise, the ring forward: the result against standard attention, a
wrong one named by the numpy model's known mistakes, and the order of posts and computes on
every rank (the transfers must overlap the compute)."""

from __future__ import annotations

import numpy as np

from ... import distributed as ring
from .. import registry
from .common import (
    FORWARD_CASES,
    FORWARD_HIDDEN,
    case_arrays,
    compare_attention,
    describe,
    gather,
    passed,
    split_positions,
)
from .jobs import answers_by_case

# ---------------------------------------------------------------- 1. the ring forward

FORWARD_MISTAKES = {
    "no_rescale": "The blocks' outputs are added without rescaling: each block's o is "
                  "normalised over its own keys and must be weighted by exp(block_lse - "
                  "new_lse), the running o by exp(lse - new_lse) (section 3).",
    "lse_first": "o is right but lse is not updated after the first step: the backward needs "
                 "the log-sum-exp over all keys (section 3).",
    "one_step_short": "The ring stops one step early: P ranks take P steps, the first on the "
                      "rank's own block (section 2).",
    "own_block_skipped": "The rank waits for the next block before computing, so it never "
                         "computes its own block and computes the last one twice: compute on "
                         "the block you hold while the next one travels (section 4).",
    "never_swapped": "Every step computes the rank's own block again: after the transfer, the "
                     "received K, V and positions must replace the ones you hold (section 4).",
    "no_mask": "With causal=True every block must be masked by position (pass causal on to "
               "block_attention) (section 2).",
}


def _name_forward_mistake(o, lse, case, world) -> str:
    for mistake, why in FORWARD_MISTAKES.items():
        if mistake == "no_mask" and not case["causal"]:
            continue
        candidate = ring.simulate_ring(case["q"], case["k"], case["v"], world, case["causal"],
                                       mistake=mistake)
        if registry.same_result(o, candidate[0], 1e-8) and (
                mistake == "lse_first" or registry.same_result(lse, candidate[1], 1e-8)
                or mistake == "no_rescale"):
            return "Likely mistake: " + why
    return ("Hint: at step s rank r holds the block of rank (r - s) mod P; merge its (o, lse) "
            "into the running state with the log-sum-exp merge of section 3.")


def _check_overlap(events: np.ndarray, world: int, label: str) -> None:
    codes = ring.EVENT_CODES
    if (events == codes["blocking"]).any():
        raise registry.WrongAnswer(
            f"{label}: the result is right, but the ring uses blocking send/recv: the next "
            "block cannot travel while this one is computed. Post the transfer with "
            "batch_isend_irecv (or isend/irecv) before calling block_attention, and wait "
            "after (section 4).")
    computes = int((events == codes["compute"]).sum())
    if computes != world:
        raise registry.WrongAnswer(
            f"{label}: the result is right, but block_attention ran {computes} times on a "
            f"rank instead of {world}: once per ring step, on the block the rank holds.")
    # posts collapse into one per step: post, compute, post, compute, ..., compute
    steps = [int(e) for i, e in enumerate(events)
             if i == 0 or e != codes["post"] or events[i - 1] != codes["post"]]
    expected = [codes["post"], codes["compute"]] * (world - 1) + [codes["compute"]]
    if steps != expected:
        raise registry.WrongAnswer(
            f"{label}: the result is right, but the transfers do not overlap the compute: "
            "at every step but the last, post the next block's transfer first, then call "
            "block_attention on the block you hold, then wait (section 4).")


def check_ring_forward(ring_attention_forward) -> str:
    cases = registry.with_hidden(FORWARD_CASES, FORWARD_HIDDEN)
    for world, number, (n, _, causal, seed), case, per_rank in answers_by_case(
            ring_attention_forward, "forward", cases,
            lambda n, d, causal, seed: {"n": n, "causal": causal, **case_arrays(n, d, seed)}):
        label = f"{number} ({describe(n, world, causal, seed=seed)})"
        o, lse = gather(per_rank, split_positions(n, world, False), "o", "lse")
        try:
            compare_attention(o, lse, case, causal, label)
        except registry.WrongAnswer as err:
            raise registry.WrongAnswer(
                f"{err}\n{_name_forward_mistake(o, lse, case, world)}") from None
        for rank in range(world):
            _check_overlap(np.asarray(per_rank[rank]["events"]), world, f"{label}, rank {rank}")
    return passed(len(cases), "match standard attention, transfers overlapping compute")
