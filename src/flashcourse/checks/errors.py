"""The course's own errors: their message is the whole story (see messages.py)."""

from __future__ import annotations


class WrongAnswer(AssertionError):
    """The answer ran but is wrong; the message says which case, where, and what to try."""


class LaunchFailed(WrongAnswer):
    """Launching the student's kernel raised (`guards.guarded`): a check may add a hint about
    launches. Its own class, so no check reads its (translated) message to tell."""


class NotStarted(WrongAnswer):
    """The answer is still the stub handed out (it raises NotImplementedError): not started."""


class VetoMisconception(WrongAnswer):
    """A misconception the rubric vetoes: the lesson fails whatever the other points are."""


class CourseInputError(ValueError):
    """Bad input to a course wrapper: the message names the problem and the fix."""
