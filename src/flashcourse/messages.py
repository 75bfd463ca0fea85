"""Messages first, in notebooks: the course's errors show as their message (and the student's
own frames when the student's code raised), not as a traceback into the package."""

from __future__ import annotations

import os

from .blanks import BlankNotFilled
from .checks.errors import CourseInputError, WrongAnswer
from .i18n import UnknownLanguage, _


def course_errors() -> tuple[type, ...]:
    """The course's own exception classes: their message is the whole story."""
    # VetoMisconception is a WrongAnswer
    return (WrongAnswer, BlankNotFilled, CourseInputError, UnknownLanguage)


def word_list(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c': names as a sentence lists them."""
    if len(words) < 2:
        return "".join(words)
    return _("{items} and {last}").format(items=_(", ").join(words[:-1]), last=words[-1])


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def student_frames(err: BaseException) -> list[str]:
    """The traceback of the student's own code that caused `err` (its __cause__), cut to the
    student's frames: no frame of this package, of Python's library or of installed packages."""
    import sysconfig
    import traceback

    cause = err.__cause__
    if cause is None or cause.__traceback__ is None:
        return []
    skip = [_package_dir(), *{sysconfig.get_paths()[k] for k in ("stdlib", "purelib",
                                                               "platlib")}]
    frames = [f for f in traceback.extract_tb(cause.__traceback__)
              if not any(os.path.abspath(f.filename).startswith(s) for s in skip)]
    if not frames:
        return []
    return [_("Traceback of your code (most recent call last):") + "\n",
            *traceback.format_list(frames),
            *traceback.format_exception_only(type(cause), cause)]


def short_message(err: BaseException) -> list[str]:
    """What a notebook shows for a course error: its class and message, then the student's own
    frames when the student's code raised it; never the package's traceback."""
    red, bold, reset = "\x1b[0;31m", "\x1b[1m", "\x1b[0m"
    return [f"{red}{bold}{type(err).__name__}{reset}: {err}", *student_frames(err)]


def _custom_exc(shell, etype, value, tb, tb_offset=None):
    # IPython leaves showing a custom exception to its handler: show it the way a traceback is
    # shown (the kernel sends it as the cell's error, with the exception's name and message)
    stb = short_message(value)
    shell._showtraceback(etype, value, stb)
    return stb


def install_message_handler(shell=None) -> bool:
    """In IPython, show the course's errors as their message only (`short_message`). The cell
    still fails: the kernel reports the error, so Run All, nbval and the grader see it."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    shell.set_custom_exc(course_errors(), _custom_exc)
    return True
