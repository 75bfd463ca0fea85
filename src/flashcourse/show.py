"""Print the source of a reference function, so a lesson shows the spec it is graded against."""

from __future__ import annotations

import inspect


def show(obj) -> None:
    print(inspect.getsource(getattr(obj, "fn", obj)).rstrip())
