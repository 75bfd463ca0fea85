"""Lesson 10's causal exercises (section 5): the plan of each ring step, pair by pair, and the
load-balanced (zigzag) split, each followed by a causal ring on it against standard attention."""

from __future__ import annotations

import numpy as np

from ... import distributed as ring
from ...i18n import _
from .. import registry
from .common import (
    PLAN_CASES,
    PLAN_HIDDEN,
    SECTION_CAUSAL,
    SPLIT_CASES,
    SPLIT_HIDDEN,
    case_arrays,
    compare_attention,
    describe,
    gather,
    passed,
    split_positions,
)
from .jobs import answers_by_case

# ---------------------------------------------------------------- 2. the causal plan


def _plan_message(rank, step, world, zigzag, given: set, label: str) -> str | None:
    expected = set(ring.step_plan(rank, step, world, zigzag))
    if given == expected:
        return None
    where = _("{label}: rank {rank}, step {step}").format(label=label, rank=rank, step=step)
    held = set(ring.chunks_of((rank - step) % world, world, zigzag))
    mine = set(ring.chunks_of(rank, world, zigzag))
    for i, j, _unused in sorted(given):
        if j not in held:
            return (_("{where}: the plan uses key chunk {j}, but at this step the rank holds "
                      "chunks {chunks}. K/V blocks move one rank forward per step: count back "
                      "along the ring to the rank whose block has just reached this one (section "
                      "2).").format(where=where, j=j, chunks=sorted(held)))
        if i not in mine:
            return (_("{where}: the plan uses query chunk {i}, but the rank's queries are chunks "
                      "{chunks}.").format(where=where, i=i, chunks=sorted(mine)))
    kinds = {(i, j): kind for i, j, kind in given}
    for i, j, right in sorted(expected):
        kind = kinds.get((i, j))
        pair = _("{where}: query chunk {i} against key chunk {j}").format(where=where, i=i, j=j)
        if kind is None:
            return (_("{pair} is missing from the plan: list every pair of one of your query "
                      "chunks and one held key chunk, with 'skip' for those not "
                      "computed.").format(pair=pair))
        if kind == right:
            continue
        if j == i and kind == "skip":
            return (_("{pair} (the diagonal block) is skipped: every query sees itself and the "
                      "earlier keys of its own chunk; compute it with the causal mask "
                      "(section 5).").format(pair=pair))
        if j == i:
            return (_("{pair} (the diagonal block) is computed without the mask: the queries "
                      "would see later keys of their own chunk (section 5).").format(pair=pair))
        if j < i and kind == "skip":
            return (_("{pair} is skipped, but every key of an earlier chunk is visible to every "
                      "query of a later one: compute it in full (section 5).").format(pair=pair))
        if j < i:
            return (_("{pair} is masked, but all its keys come before all its queries: the mask "
                      "would change nothing; compute it 'full', with no mask (section "
                      "5).").format(pair=pair))
        return (_("{pair} is computed, but every key there comes after every query: the mask "
                  "empties it. Skipping it is the work a causal ring saves (section 5).").format(
                  pair=pair))
    return _("{where}: the plan lists pairs twice or more; list each pair once.").format(
             where=where)


def check_causal_plan(causal_step_plan) -> str:
    cases = registry.with_hidden(PLAN_CASES, PLAN_HIDDEN)
    for world, label, (n, _unused, zigzag, _unused), case, per_rank in answers_by_case(
            causal_step_plan, "plan", cases,
            lambda n, d, zigzag, seed: {"n": n, "zigzag": zigzag, **case_arrays(n, d, seed)},
            lambda params, world: describe(params[0], world, True, params[2], params[3]),
            SECTION_CAUSAL):
        for rank in range(world):
            rows = np.asarray(per_rank[rank]["plan"]).reshape(-1, 4)
            for step in range(world):
                given = {(int(i), int(j), ring.KINDS[int(kind)])
                         for s, i, j, kind in rows if s == step}
                if len(given) != int((rows[:, 0] == step).sum()):
                    raise registry.WrongAnswer(_("{label}: rank {rank}, step {step}: the plan "
                                                 "lists a pair twice.").format(label=label,
                                                 rank=rank, step=step))
                message = _plan_message(rank, step, world, zigzag, given, label)
                if message:
                    raise registry.WrongAnswer(message)
        o, lse = gather(per_rank, split_positions(n, world, zigzag), "o", "lse")
        compare_attention(o, lse, case, True, label)
    return passed(len(cases), _("plan every block right, under both splits"))


# ---------------------------------------------------------------- 3. the zigzag split


def _split_message(given: list[np.ndarray], n: int, world: int, label: str) -> str | None:
    expected = [ring.zigzag_positions(n, world, r) for r in range(world)]
    if all(np.array_equal(g, e) for g, e in zip(given, expected, strict=True)):
        return None
    everything = np.concatenate(given)
    missing = np.setdiff1d(np.arange(n), everything)
    if len(everything) != n or len(missing) or (everything < 0).any() or (everything >= n).any():
        lost = (_(", and positions {positions} are on no rank").format(
                    positions=missing[:5].tolist()) if len(missing) else "")
        return (_("{label}: the ranks hold {count} positions for {n} tokens{lost}: every token "
                  "must be on exactly one rank, also when the number of chunks does not divide n "
                  "(section 5).").format(label=label, count=len(everything), n=n, lost=lost))
    if all(np.array_equal(g, ring.contiguous_positions(n, world, r))
           for r, g in enumerate(given)):
        return (_("{label}: this is the contiguous split, in which the last rank does about "
                  "{factor} times the causal work of the first. The zigzag split pairs a chunk "
                  "from the front of the sequence with one from the back, so that each rank's "
                  "pair costs the same (section 5).").format(label=label, factor=2 * world - 1))
    for rank, (g, e) in enumerate(zip(given, expected, strict=True)):
        if not np.array_equal(g, e):
            if np.array_equal(np.sort(g), np.sort(e)):
                return (_("{label}: rank {rank} holds the right positions in the wrong order: its "
                          "chunk from the front of the sequence comes first, then the one from "
                          "the back, each in increasing order (section 5).").format(label=label,
                          rank=rank))
            return _("{label}: rank {rank} holds positions {positions}{more}, not its zigzag "
                     "pair: a chunk from the front and the chunk at the same distance from the "
                     "back, the ranks taking the pairs in order (section 5).").format(
                label=label, rank=rank, positions=g.tolist()[:12],
                more="..." if len(g) > 12 else "")
    return None


def check_zigzag_split(zigzag_split) -> str:
    cases = registry.with_hidden(SPLIT_CASES, SPLIT_HIDDEN)
    for world, label, (n, _unused, _unused), case, per_rank in answers_by_case(
            zigzag_split, "split", cases,
            lambda n, d, seed: {"n": n, **case_arrays(n, d, seed)},
            lambda params, world: describe(params[0], world, seed=params[2]),
            SECTION_CAUSAL):
        given = [np.asarray(per_rank[r]["positions"]) for r in range(world)]
        message = _split_message(given, n, world, label)
        if message:
            raise registry.WrongAnswer(message)
        o, lse = gather(per_rank, given, "o", "lse")
        compare_attention(o, lse, case, True, _("{label}, causal ring on your split").format(
                                                label=label))
    return passed(len(cases), _("split every sequence as the zigzag does"))
