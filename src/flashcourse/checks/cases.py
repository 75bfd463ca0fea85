"""Which cases a check runs: the visible ones, the hidden ones when an instructor grades
(FLASHCOURSE_GRADING=1), and the seed of each (reseeded by `grade --secret`)."""

from __future__ import annotations

import os

from ..runtime import truthy

GRADING_MODE_ENV = "FLASHCOURSE_GRADING"
SECRET_ENV = "FLASHCOURSE_GRADING_SECRET"  # set by `grade --secret`: reseeds every case


def grading_mode() -> bool:
    """True when an instructor grades: checks then also run hidden cases."""
    return truthy(os.environ.get(GRADING_MODE_ENV))


def with_hidden(visible: list, hidden: list) -> list:
    """The visible cases, plus the hidden ones when a grader runs the check."""
    return visible + (hidden if grading_mode() else [])


def case_seed(seed: int) -> int:
    """The seed a check uses for a case: `seed` itself, or, when an instructor grades with
    `--secret`, a number derived from the secret and `seed`, so that no input a grader builds
    can be computed in advance from the public repository."""
    secret = os.environ.get(SECRET_ENV)
    if not secret or not grading_mode():
        return seed
    import hashlib

    digest = hashlib.sha256(f"{secret}:{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def hidden_note() -> str:
    """What a passing check tells a student: the grader will run more cases."""
    return "" if grading_mode() else " (graders also run hidden cases)"
