"""What lesson 10's checks share: the world sizes and tolerances, the cases and their inputs, a
rank's padded shard, whole-sequence arrays gathered from the ranks' rows, and the references
(standard attention in `distributed`, autograd here)."""

from __future__ import annotations

from ... import distributed as ring
from ... import i18n
from ...distributed.tries import (  # noqa: F401  (the checks build their cases with these)
    SCORE_SCALE,
    case_arrays,
    gather,
    padded_shard,
    reference_gradients,
    shard_length,
    split_positions,
)
from ...i18n import N_, _
from .. import registry

# The lesson's sections, as the messages name them
SECTION_SCHEDULE = N_("section 2 (\"The ring schedule\")")
SECTION_MERGE = N_("section 3 (\"Merging the steps\")")
SECTION_RING = N_("section 4 (\"Real processes\")")
SECTION_CAUSAL = N_("section 5 (\"Causal masks and load balance\")")
SECTION_BACKWARD = N_("section 6 (\"The backward\")")
SECTIONS = {"section_schedule": SECTION_SCHEDULE, "section_merge": SECTION_MERGE,
            "section_ring": SECTION_RING, "section_causal": SECTION_CAUSAL,
            "section_backward": SECTION_BACKWARD}

WORLD_SIZES = (2, 4)
ATOL, RTOL = 1e-10, 1e-8  # float64 everywhere

# ---------------------------------------------------------------- cases

# (n, d, causal, seed): every case runs on 2 and on 4 ranks; n not a multiple of the ranks
# (ragged shards) and scores of a few tens (the rescale matters)
FORWARD_CASES = [(16, 4, False, 0), (16, 4, True, 1), (23, 8, True, 2), (13, 4, False, 3)]
FORWARD_HIDDEN = [(37, 8, True, 101), (29, 4, False, 102), (9, 3, True, 103),
                  (41, 6, False, 104)]
# (n, d, zigzag, seed): causal plans under both splits
PLAN_CASES = [(16, 4, False, 10), (16, 4, True, 11), (27, 4, True, 12)]
PLAN_HIDDEN = [(35, 8, False, 111), (43, 4, True, 112), (17, 3, True, 113)]
# (n, d, seed): the zigzag split, then a causal ring on it
SPLIT_CASES = [(16, 4, 20), (21, 4, 21), (30, 4, 22)]
SPLIT_HIDDEN = [(9, 4, 121), (47, 8, 122), (58, 3, 123)]
# (n, d, causal, seed)
BACKWARD_CASES = [(16, 4, False, 30), (16, 4, True, 31), (21, 8, True, 32)]
BACKWARD_HIDDEN = [(33, 4, False, 131), (27, 6, True, 132), (9, 3, True, 133)]



def describe(n: int, world: int, causal: bool | None = None, zigzag: bool | None = None,
              seed: int | None = None) -> str:
    parts = [f"n={n}", _("{world} ranks").format(world=world)]
    if n % world:
        parts.append(_("ragged shards"))
    if causal is not None:
        parts.append(_("causal") if causal else _("not causal"))
    if zigzag is not None:
        parts.append(_("zigzag split") if zigzag else _("contiguous split"))
    if seed is not None:
        parts.append(f"seed={seed}")
    return ", ".join(parts)


def shown(message: str) -> str:
    """A message of lesson 10's tables in the current language, the sections it names
    ({section_merge}, ...) filled in."""
    return i18n.filled(message, SECTIONS)


def compare_attention(o, lse, case: dict, causal: bool, label: str) -> None:
    """Raise WrongAnswer unless the gathered (o, lse) are standard attention's over the whole
    sequence (float64, ATOL and RTOL)."""
    expected_o, expected_lse = ring.reference_attention(case["q"], case["k"], case["v"], causal)
    registry.compare(o, expected_o, f"{label}, o", atol=ATOL, rtol=RTOL)
    registry.compare(lse, expected_lse, f"{label}, lse", atol=ATOL, rtol=RTOL)


def passed(count: int, what: str) -> str:
    return _("{count} cases on 2 and 4 ranks {what}{hidden}").format(count=count, what=what,
             hidden=registry.hidden_note())


