"""The class edition's stand-ins for package functions that answer an exercise.

`./course release` replaces each function on `authoring/shipping.py`'s ANSWER_FUNCTIONS list
by a stub that calls `answered(...)`: it returns what the reference gave for the exact calls
the lessons' own cells and figures make (captured when the solutions ran, and kept in the
lessons' examples files), and refuses any other call with a message saying why. So the
figures and demonstrations of the class edition still run, and no function of its package
computes an exercise's answer.
"""

from __future__ import annotations

import functools

from . import examples, recording
from .errors import CourseInputError


class NotInThisEdition(CourseInputError):
    """A package function that answers an exercise, called on inputs no lesson cell uses."""


@functools.cache
def _table() -> dict[str, dict[str, object]]:
    table: dict[str, dict[str, object]] = {}
    for path in sorted(examples.FOLDER.glob("*.json.gz")):
        for name, calls in examples.read(path).get("shipped_calls", {}).items():
            table.setdefault(name, {}).update(calls)
    return table


def answered(name: str, args: tuple, kwargs: dict):
    """What `name` (a qualified function name) returned for these inputs in the lessons."""
    found = _table().get(name, {}).get(recording.digest((list(args), dict(kwargs))))
    if found is None:
        raise NotInThisEdition(
            f"{name} is not in the class edition: an exercise asks you to write it. Use your "
            "own function from the lesson's notebook instead.")
    return recording.decode(found)
