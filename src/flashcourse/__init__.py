"""Helper package of the course on GPU kernels and FlashAttention.

Every notebook starts with:

    import flashcourse as fc
    from flashcourse import ______, check
    fc.setup()
"""

from .blanks import ______, BlankNotFilled
from .grading import VetoMisconception, WrongAnswer, check, scorecard
from .runtime import CourseInputError, setup
from .show import show
from . import figures, hardware, reference, traffic  # noqa: E402,F401  (fc.figures etc.)

__all__ = [
    "______",
    "BlankNotFilled",
    "CourseInputError",
    "VetoMisconception",
    "WrongAnswer",
    "check",
    "scorecard",
    "setup",
    "show",
]
__version__ = "0.1.0"
