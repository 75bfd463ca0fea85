"""Lesson 5's numpy exercises: the stable softmax, the online statistics and the merge
of two partial softmax states, each with its known mistakes."""

from __future__ import annotations

import numpy as np

from ...i18n import N_, _
from ...models.softmax_states import safe_max, softmax_state
from ...reference import softmax as reference_softmax
from .. import registry
from .common import blocked_stats, describe, logits, passed, require_callable

# ---------------------------------------------------------------- 1. stable softmax (numpy)

# (rows, n, seed, scale, kind, dtype); rows == 0 means a 1-D vector
STABLE_CASES = [
    (0, 5, 0, 1.0, "normal", np.float64),  # one vector
    (3, 7, 1, 1.0, "normal", np.float64),  # several rows
    (4, 4, 2, 1.0, "normal", np.float64),  # square: a reduction over the wrong axis shows
    (3, 6, 3, 1e3, "normal", np.float64),  # e^1000 overflows float64
    (2, 9, 4, 100.0, "normal", np.float32),  # e^100 overflows float32
    (3, 8, 5, 1.0, "offset", np.float64),  # rows 1000 apart: the max must be per row
    (4, 10, 6, 1.0, "neg_inf", np.float64),  # masked entries
]
STABLE_HIDDEN = [
    (5, 33, 101, 50.0, "neg_inf", np.float32),
    (0, 1, 102, 1.0, "normal", np.float64),
    (6, 3, 103, 1e3, "offset", np.float64),
]

STABLE_MISTAKES = [
    ("no_max",
     N_("Without subtracting the max, np.exp overflows for large logits (e^89 is inf in float32, "
        "e^710 in float64) and inf/inf gives NaN: shift each row by its own max before "
        "exponentiating (section 1 explains why that changes nothing).")),
    ("global_max",
     N_("The max is taken over the whole array, not per row: a row far below the global max "
        "underflows to 0/0. Take the max of each row.")),
    ("global_sum",
     N_("The sum runs over the whole array, not per row, so each row sums to less than 1. Sum "
        "each row on its own.")),
    ("axis0",
     N_("The reductions run over axis 0 (down the columns); softmax normalises along each row, "
        "the last axis.")),
]


def stable_candidate(x: np.ndarray, mistake: str) -> np.ndarray:
    """What a stable softmax with a known `mistake` returns (in the input's dtype)."""
    with np.errstate(all="ignore"):
        if mistake == "no_max":
            e = np.exp(x)
            return e / e.sum(axis=-1, keepdims=True)
        if mistake == "global_max":
            e = np.exp(x - x.max())
            return e / e.sum(axis=-1, keepdims=True)
        if mistake == "global_sum":
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum()
        if mistake == "axis0":
            e = np.exp(x - x.max(axis=0, keepdims=True))
            return e / e.sum(axis=0, keepdims=True)
    raise KeyError(mistake)


def _crash_hint(err: registry.WrongAnswer) -> str:
    text = str(err)
    if "broadcast" in text:
        return (_("\nHint: a reduction without keepdims=True returns shape (rows,), which does "
                  "not broadcast against (rows, n): keep the reduced axis (section 2)."))
    return ""


def check_stable_softmax(stable_softmax) -> str:
    require_callable(stable_softmax, "softmax/stable-softmax", "stable_softmax")
    cases = registry.with_hidden(STABLE_CASES, STABLE_HIDDEN)
    for number, (rows, n, seed, scale, kind, dtype) in enumerate(cases, 1):
        x = logits(max(rows, 1), n, seed, scale, kind).astype(dtype)
        if rows == 0:
            x = x[0]
        shape = (_("a vector of length {n}").format(n=n) if rows == 0
                 else describe(rows, n, scale, kind))
        large = (_(", logits ~{scale:g}").format(scale=scale) if rows == 0 and scale > 10
                 else "")
        label = _("case {number}/{total} ({shape}, {dtype}{large})").format(
            number=number, total=len(cases), shape=shape, dtype=np.dtype(dtype).name,
            large=large)
        original = x.copy()
        try:
            with np.errstate(all="ignore"):
                output = registry.run_student(stable_softmax, label, x)
        except registry.WrongAnswer as err:
            raise registry.WrongAnswer(f"{err}{_crash_hint(err)}") from err
        if not np.array_equal(x, original, equal_nan=True):
            raise registry.WrongAnswer(_("{label}: your function modified x in place.").format(
                                         label=label))
        expected = reference_softmax(x.astype(np.float64))
        atol, rtol = (1e-6, 1e-5) if dtype == np.float32 else (1e-12, 1e-9)
        try:
            registry.compare(output, expected, label, atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            for mistake, hint in STABLE_MISTAKES:
                if registry.same_result(output, stable_candidate(x, mistake), atol):
                    raise registry.WrongAnswer(_("{err}\nLikely mistake: {hint}").format(err=err,
                                                 hint=_(hint))) from None
            raise registry.WrongAnswer(
                _("{err}\nHint: shift each row by its own max before exponentiating, then "
                  "divide by the row's sum of those exponentials; reduce over the last axis "
                  "and keep it for broadcasting (section 2).").format(err=err)) from None
    return passed(len(cases), _("match the float64 reference"))


# ---------------------------------------------------------------- 3. online statistics (numpy)

# (rows, n, block_size, seed, scale, kind)
STATS_CASES = [
    (3, 10, 4, 0, 1.0, "normal"),
    (2, 1, 4, 1, 1.0, "normal"),  # shorter than one block
    (4, 33, 8, 2, 1.0, "ramp"),  # the max grows in every block
    (3, 64, 16, 3, 1.0, "normal"),  # a whole number of blocks
    (2, 50, 7, 4, 1.0, "neg_inf"),
    (3, 100, 16, 5, 1e3, "normal"),  # e^1000 overflows float64
    (2, 20, 1, 6, 1.0, "ramp"),  # one element at a time
    (4, 30, 4, 7, 30.0, "masked"),  # first blocks masked; row 0 masked entirely
]
STATS_HIDDEN = [
    (5, 77, 10, 101, 1e3, "ramp"),
    (1, 300, 64, 102, 5.0, "neg_inf"),
    (6, 9, 9, 103, 1.0, "normal"),
    (5, 40, 3, 104, 1e3, "masked"),
]

STATS_MISTAKES = [
    (dict(guard=False),
     N_("A row whose first block is masked entirely (all -inf) turns NaN: m_new is still -inf, "
        "and exp(-inf - (-inf)) is NaN. Shift by a safe max, 0 while the running max is -inf "
        "(section 4).")),
    (dict(rescale=False),
     N_("The running sum is not rescaled when the max grows: it was measured against the old max, "
        "and must be brought to the new one before this block's sum is added (section 4).")),
    (dict(flip_scale=True),
     N_("The rescale factor points the wrong way: it must shrink the old sum (a factor of at most "
        "1), not grow it (section 4).")),
    (dict(include_old_max=False),
     N_("m_new must be the max over everything seen so far: with the block max alone, m ends as "
        "the max of the last block, not of the row (and the rescale factor can exceed 1 and "
        "overflow).")),
    (dict(subtract_max=False),
     N_("Without subtracting the running max, exp overflows for large logits (e^710 is inf in "
        "float64): exponentiate block - m_new.")),
]


def check_online_stats(online_softmax_stats) -> str:
    require_callable(online_softmax_stats, "softmax/online-stats", "online_softmax_stats")
    cases = registry.with_hidden(STATS_CASES, STATS_HIDDEN)
    for number, (rows, n, block, seed, scale, kind) in enumerate(cases, 1):
        x = logits(rows, n, seed, scale, kind, block)
        label = (_("case {number}/{total} ({described})").format(number=number, total=len(cases),
                   described=describe(rows, n, scale, kind, block=block, seed=seed))
                 .replace("BLOCK=", "block_size="))
        original = x.copy()
        with np.errstate(all="ignore"):
            result = registry.run_student(online_softmax_stats, label, x, block)
        if not np.array_equal(x, original):
            raise registry.WrongAnswer(_("{label}: your function modified x in place.").format(
                                         label=label))
        if not (isinstance(result, tuple) and len(result) == 2):
            raise registry.WrongAnswer(_("{label}: return the pair (m, l), got "
                                         "{type_name}.").format(label=label,
                                         type_name=type(result).__name__))
        m, total = result
        m_ref = x.max(axis=-1)  # -inf for a row masked entirely, whose sum is 0
        total_ref = np.exp(x - safe_max(m_ref)[:, None]).sum(axis=-1)
        for name, got, ref in ((_("the running max m"), m, m_ref), (_("the running sum l"), total,
                                                                    total_ref)):
            try:
                registry.compare(got, ref, f"{label}, {name}", atol=1e-12, rtol=1e-9)
            except registry.WrongAnswer as err:
                hint = (_("Check the two updates of section 4: the new running max, then the "
                          "running sum brought to it before this block's terms are added."))
                for switches, mistake in STATS_MISTAKES:  # recognised by their sums
                    if registry.same_result(total, blocked_stats(x, block, **switches)[1], 1e-9):
                        hint = _("Likely mistake: ") + _(mistake)
                        break
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return passed(len(cases), _("give the exact row max and sum of exp(x - max)"))


# ---------------------------------------------------------------- 5. merging states (numpy)


# (rows, n, d, split points, seed, scale, masked): with masked, row 0 is masked entirely and
# row r >= 1 has its first r chunks masked (all -inf), so their states are empty
MERGE_CASES = [
    (3, 10, 4, (5,), 0, 1.0, False),
    (4, 9, 3, (2,), 1, 1.0, False),  # unequal chunks
    (5, 40, 8, (13,), 2, 1e3, False),  # e^1000 overflows: merge with maxima, not raw sums
    (6, 12, 2, (11,), 3, 30.0, False),  # a one-key chunk
    (4, 64, 5, (16, 32, 48), 4, 10.0, False),  # four chunks merged one after the other (a ring)
    (4, 30, 3, (8, 16), 5, 30.0, True),  # empty states: masked first chunks, a masked row
]
MERGE_HIDDEN = [
    (7, 50, 6, (7, 20), 101, 1e3, False),
    (2, 30, 16, (29,), 102, 1.0, False),
    (3, 100, 4, (10, 30, 60, 90), 103, 50.0, False),
    (5, 60, 4, (10, 25, 40), 104, 1e3, True),
]


def merge_candidate(state1, state2, mistake: str):
    """What a merge with a known `mistake` returns."""
    (m1, l1, o1), (m2, l2, o2) = state1, state2
    with np.errstate(all="ignore"):
        m = np.maximum(m1, m2)
        a1, a2 = np.exp(m1 - safe_max(m)), np.exp(m2 - safe_max(m))
        if mistake == "no_guard":
            a1, a2 = np.exp(m1 - m), np.exp(m2 - m)
            return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2
        if mistake == "no_rescale":
            return m, l1 + l2, o1 + o2
        if mistake == "o_not_rescaled":
            return m, a1 * l1 + a2 * l2, o1 + o2
        if mistake == "swapped":
            return m, a2 * l1 + a1 * l2, a2[:, None] * o1 + a1[:, None] * o2
        if mistake == "flipped":
            b1, b2 = np.exp(m - m1), np.exp(m - m2)
            return m, b1 * l1 + b2 * l2, b1[:, None] * o1 + b2[:, None] * o2
        if mistake == "first_max":
            b1, b2 = np.exp(m1 - m1), np.exp(m2 - m1)
            return m1, b1 * l1 + b2 * l2, b1[:, None] * o1 + b2[:, None] * o2
        if mistake == "no_max":
            e1, e2 = np.exp(m1), np.exp(m2)
            return np.zeros_like(m), e1 * l1 + e2 * l2, e1[:, None] * o1 + e2[:, None] * o2
    raise KeyError(mistake)


MERGE_MISTAKES = {
    "no_guard": N_("Two empty states (chunks masked entirely: m = -inf, l = 0) merge into NaN: "
                   "exp(-inf - (-inf)) is NaN. Rescale against a safe max, 0 when the merged max "
                   "is -inf, so that they merge into the empty state (section 6)."),
    "no_rescale": N_("l1 + l2 and o1 + o2 add terms measured against different maxima. Rescale "
                     "each state to the common max first (section 6)."),
    "o_not_rescaled": N_("l is rescaled but o is not: o holds terms measured against the same "
                         "maxima and needs the same per-row factors (section 6)."),
    "swapped": N_("The factors are swapped: each state must be rescaled from its own max to the "
                  "common one (section 6)."),
    "flipped": N_("The rescale factors point the wrong way: they must shrink each state (at most "
                  "1), not grow it (section 6)."),
    "first_max": N_("The merged max must be the larger of the two maxima, not m1: otherwise a "
                    "larger m2 overflows its rescale factor."),
    "no_max": N_("Rescaling each state by the exponential of its own max overflows for large "
                 "scores: rescale to the common max (section 6)."),
}


def check_merge_states(merge_states) -> str:
    require_callable(merge_states, "softmax/merge-states", "merge_states")
    cases = registry.with_hidden(MERGE_CASES, MERGE_HIDDEN)
    for number, (rows, n, d, splits, seed, scale, masked) in enumerate(cases, 1):
        rng = np.random.default_rng(registry.case_seed(seed))
        scores = rng.standard_normal((rows, n)) * scale
        values = rng.standard_normal((n, d))
        chunks = np.split(np.arange(n), list(splits))
        if masked:
            for r in range(rows):
                scores[r, :n if r == 0 else splits[min(r, len(splits)) - 1]] = -np.inf
        notes = ((_(", scores ~{scale:g}").format(scale=scale) if scale > 10 else "")
                 + (_(", row 0 masked entirely, row r >= 1 its first r chunks") if masked
                    else ""))
        label = _("case {number}/{total} ({rows} rows, {n} keys in {count} chunks of {sizes}, "
                  "d={d}{notes}, seed={seed})").format(
            number=number, total=len(cases), rows=rows, n=n, count=len(chunks),
            sizes=", ".join(str(len(c)) for c in chunks), d=d, notes=notes, seed=seed)
        states = [softmax_state(scores[:, c], values[c]) for c in chunks]
        merged = states[0]
        for step, state in enumerate(states[1:], 1):
            step_label = label if len(states) == 2 else _("{label}, merge {step}").format(
                label=label, step=step)
            copies = [np.copy(a) for a in (*merged, *state)]
            with np.errstate(all="ignore"):
                result = registry.run_student(merge_states, step_label, *merged, *state)
            if any(not np.array_equal(a, b) for a, b in zip((*merged, *state), copies,
                                                              strict=True)):
                raise registry.WrongAnswer(_("{step_label}: your function modified its inputs in "
                                             "place.").format(step_label=step_label))
            if not (isinstance(result, tuple) and len(result) == 3):
                raise registry.WrongAnswer(_("{step_label}: return the triple (m, l, o).").format(
                                             step_label=step_label))
            expected = softmax_state(scores[:, np.concatenate(chunks[:step + 1])],
                                     values[np.concatenate(chunks[:step + 1])])
            for name, got, ref in zip(("m", "l", "o"), result, expected, strict=True):
                try:
                    registry.compare(got, ref, _("{label}, merged {name}").format(
                                     label=step_label, name=name), atol=1e-12, rtol=1e-9)
                except registry.WrongAnswer as err:
                    hint = (_("Hint: both states must be brought to one common max before their "
                              "sums and outputs add up; the merged state is then a state of the "
                              "union of the two chunks (section 6)."))
                    for mistake, why in MERGE_MISTAKES.items():
                        candidate = merge_candidate(merged, state, mistake)
                        if all(registry.same_result(g, c, 1e-9)
                               for g, c in zip(result, candidate, strict=True)):
                            hint = _("Likely mistake: ") + _(why)
                            break
                    raise registry.WrongAnswer(f"{err}\n{hint}") from None
            merged = tuple(np.asarray(a) for a in result)
        with np.errstate(all="ignore"):
            attention = merged[2] / np.where(merged[1] == 0, 1.0, merged[1])[:, None]
            expected = reference_softmax(scores) @ values
        expected[np.isneginf(scores).all(axis=-1)] = 0.0  # no key at all: the output is 0
        registry.compare(attention, expected,
                        _("{label}, o / l after the last merge").format(
                          label=label), atol=1e-12, rtol=1e-9)
    return passed(len(cases), _("merge to the state of the whole row"))
