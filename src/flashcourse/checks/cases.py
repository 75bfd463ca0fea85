"""Which cases a check runs: the visible ones, the hidden ones when an instructor grades
(FLASHCOURSE_GRADING=1), and the seed of each.

When `python -m flashcourse grade` runs a submission, every case's seed comes from a key the
grader derives from a secret of its own run (never handed to the sandbox). The sandbox
receives one exercise's key just before that exercise's grading cell runs (`issue_key`), and
the grader's replay uses the same key (`keyed`): inputs that could not be known before the
check ran, and different for every submission."""

from __future__ import annotations

import contextlib
import hashlib
import os

from ..i18n import _
from ..runtime import truthy

GRADING_MODE_ENV = "FLASHCOURSE_GRADING"
# Reseeds every case for tools that grade without the grader (gpu/grading_replay.py, tests);
# `grade` removes it from its own environment and never passes it to a sandbox.
SECRET_ENV = "FLASHCOURSE_GRADING_SECRET"

_issued_case_keys: dict[str, str] = {}  # exercise id -> key, in the sandbox (set by the runner)
_active_case_key: str | None = None  # the key of the check running now


def grading_mode() -> bool:
    """True when an instructor grades: checks then also run hidden cases."""
    return truthy(os.environ.get(GRADING_MODE_ENV))


def with_hidden(visible: list, hidden: list) -> list:
    """The visible cases, plus the hidden ones when a grader runs the check."""
    return visible + (hidden if grading_mode() else [])


def issue_key(exercise_id: str, key: str) -> None:
    """Called by the grading sandbox's runner just before the grading cell of `exercise_id`."""
    _issued_case_keys[str(exercise_id)] = str(key)


def issued_key(exercise_id: str) -> str | None:
    return _issued_case_keys.get(exercise_id)


@contextlib.contextmanager
def keyed(key: str | None):
    """Around one check (in the sandbox) or its replay (in the grader): seeds come from `key`."""
    global _active_case_key
    saved, _active_case_key = _active_case_key, key
    try:
        yield
    finally:
        _active_case_key = saved


def case_seed(seed: int) -> int:
    """The seed a check uses for a case: `seed` itself in a student's own notebook; while the
    grader's key is active, a number derived from that key and `seed` (and likewise from
    $FLASHCOURSE_GRADING_SECRET in grading mode), so no input can be computed in advance."""
    secret = _active_case_key
    if secret is None and grading_mode():
        secret = os.environ.get(SECRET_ENV) or None
    if not secret:
        return seed
    digest = hashlib.sha256(f"{secret}:{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def hidden_note() -> str:
    """What a passing check tells a student: the grader will run more cases."""
    return "" if grading_mode() else _(" (graders also run hidden cases)")
