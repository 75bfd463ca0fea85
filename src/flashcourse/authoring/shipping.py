"""What ships to a graded class's students and what stays with the instructor: the one table
of `./course release` (release.py) and of the examples' capture (capture.py).

Found by `tests/test_release.py`, which offers every public function, kernel and data value of
the released package as every exercise's answer to the instructor's grader.
"""

from __future__ import annotations

from .. import i18n
from ..checks import LESSON_MODULES, tripwires

# Under src/flashcourse/: folders and modules that never ship.
INSTRUCTOR_ONLY = (
    "grader",  # the grader, both sides of its sandbox
    "authoring/capture.py",  # runs the solutions
    "authoring/release.py",
    "authoring/shipping.py",
    "authoring/cells.py",  # loads solution cells
    "authoring/student_edition",  # the release's own files, copied to the top of the edition
    "checks/self_checks",  # the questions' answers
    "checks/tripwires.py",  # the grader's, in its sandbox
    *(f"locale/{lang}/checks.po" for lang in i18n.TRANSLATED),  # the lesson checks' messages name
    # their mistakes and hidden cases; the edition's .mo is compiled from core.po alone
    *(f"checks/{module}" for module in LESSON_MODULES.values()),  # the references, the
    *(f"checks/{module}.py" for module in LESSON_MODULES.values()),  # hidden cases
)

# Package functions that compute what an exercise asks for (the stubs' list; one home).
ANSWER_FUNCTIONS = tripwires.ANSWER_FUNCTIONS


def answer_function_names() -> list[str]:
    return [f"{module}.{name}" for module, names in ANSWER_FUNCTIONS.items() for name in names]
