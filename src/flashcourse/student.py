"""Who the student is: the id that names a handed-in notebook (`workspace.submit`) and picks
each student's own numbers in the self-check questions (`checks/numbers.py`).

The id comes from, in order: the grader's `as_student(id)` around a replay, the notebook's
`fc.setup(student="ID")`, the environment variable FLASHCOURSE_STUDENT. Without one, `current()`
is None and the questions use the lesson's own numbers (the self-study edition).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re

from .checks.errors import CourseInputError
from .i18n import N_, _

STUDENT_ENV = "FLASHCOURSE_STUDENT"
STUDENT_ID_CHARS = 64
# Starts with a letter or digit (no hidden file, nothing read as an option); no `__`, which
# separates the id from the lesson in a handed-in file's name.
STUDENT_ID = re.compile(r"(?!.*__)[A-Za-z0-9][A-Za-z0-9._-]*")
ID_RULE = N_("at most {chars} letters, digits, '.', '_' or '-', starting with a letter or "
             "digit, without '__'")


def id_rule() -> str:
    """The id rule, in the current language."""
    return _(ID_RULE).format(chars=STUDENT_ID_CHARS)

_chosen: str | None = None  # fc.setup(student=...)
# The grader's replay: a context variable, so that a replay in one thread names its own student.
_graded_as: contextvars.ContextVar[str | None] = contextvars.ContextVar("graded_as",
                                                                         default=None)


def is_valid(student: str) -> bool:
    """True when `student` follows the id rule (ID_RULE)."""
    return len(student) <= STUDENT_ID_CHARS and bool(STUDENT_ID.fullmatch(student))


def _checked(student, where: str) -> str:
    if not isinstance(student, str) or not is_valid(student):
        raise CourseInputError(_("the student id {student!r} ({where}) is not valid: use "
                                 "{rule}, e.g. alice.smith").format(
            student=student, where=where, rule=id_rule()))
    return student


def choose(student: str | None) -> None:
    """`fc.setup(student=...)`: this notebook's student from now on (None: leave it)."""
    global _chosen
    if student is not None:
        _chosen = _checked(student, 'fc.setup(student="...")')


def current() -> str | None:
    """The student whose numbers the questions use now, or None (the lesson's numbers)."""
    graded = _graded_as.get()
    if graded is not None:
        return graded
    if _chosen is not None:
        return _chosen
    given = os.environ.get(STUDENT_ENV, "")
    return _checked(given, f"${STUDENT_ENV}") if given else None


@contextlib.contextmanager
def as_student(student: str):
    """Around the grader's replay of a submission: the checks use `student`'s numbers, whatever
    the notebook or the environment say. Any non-empty text: the grader names a student by the
    folder or the file the notebook came in."""
    if not isinstance(student, str) or not student:
        raise ValueError(f"as_student needs a student id, not {student!r}")
    token = _graded_as.set(student)
    try:
        yield student
    finally:
        _graded_as.reset(token)


def reset_for_tests() -> None:
    """Forget the student fc.setup chose (tests only)."""
    global _chosen
    _chosen = None
