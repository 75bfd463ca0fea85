"""Helper package of the course on GPU kernels and FlashAttention.

Every notebook starts with:

    import flashcourse as fc
    from flashcourse import ______, check
    fc.setup()
"""

from . import figures, hardware, models, reference  # noqa: E402,F401  (fc.figures etc.)
from .blanks import BlankNotFilled, ______
from .checks.registry import VetoMisconception, WrongAnswer, check, scorecard
from .checks.registry import show_numbers as numbers  # fc.numbers("lesson/qN-...")
from .hints import hint  # fc.hint("lesson/exercise"): the next hint level
from .launch import run_kernel
from .models import traffic  # noqa: F401  (fc.traffic, used by the lessons' cells)
from .runtime import CourseInputError, setup
from .show import show

__all__ = [
    "______",
    "BlankNotFilled",
    "CourseInputError",
    "VetoMisconception",
    "WrongAnswer",
    "check",
    "hint",
    "numbers",
    "run_kernel",
    "scorecard",
    "setup",
    "show",
]
__version__ = "0.1.0"
