"""What each lesson needs first and how long it takes: read from the lesson's front matter
(`needs`, `skills`, `time`), shown at the top of its notebooks and book page, and gathered into
the map of the path in the book's index (between the two marker lines of index.qmd).

    needs: [5, 6]                       # lessons this one builds on ([] for none)
    skills: "the chain rule for a softmax"   # knowledge beyond the lessons ("" for none)
    time: "7-8 h"                        # an estimate of a student's time, exercises included
"""

from __future__ import annotations

import re
from pathlib import Path

BEGIN = "<!-- the path: made by `python -m flashcourse build` from the lessons' front matter -->"
END = "<!-- end of the path -->"
_FIELD = re.compile(r'^(?P<key>needs|skills|time):\s*(?P<value>.*?)\s*$', re.M)


class PathError(ValueError):
    """A lesson's front matter holds a `needs`, `skills` or `time` the build cannot read."""


def front_matter(text: str, path: Path) -> dict:
    """`needs`, `skills` and `time` of one lesson's front matter (absent: empty)."""
    found = {match["key"]: match["value"] for match in _FIELD.finditer(text)}
    needs_text = found.get("needs", "[]")
    if not re.fullmatch(r"\[\s*(\d+\s*(,\s*\d+\s*)*)?\]", needs_text):
        raise PathError(f"{path}: `needs: {needs_text}` must be a list of lesson numbers, "
                        "such as [5, 6] or []")
    needs = [int(number) for number in re.findall(r"\d+", needs_text)]
    own = int(path.stem[:2]) if path.stem[:2].isdigit() else None
    if own is not None and any(number >= own for number in needs):
        raise PathError(f"{path}: `needs` names lesson {max(needs)}, which comes later: a "
                        "lesson can only build on earlier ones")
    return {"needs": needs, "skills": found.get("skills", "").strip('"'),
            "time": found.get("time", "").strip('"')}


def _slugs(lesson_path: Path) -> dict[int, str]:
    return {int(path.stem[:2]): path.stem for path in lesson_path.parent.glob("[0-9][0-9]-*.qmd")}


def _lesson_link(number: int, slugs: dict[int, str], book: bool) -> str:
    slug = slugs.get(number)
    if slug is None:
        return f"lesson {number}"
    return f"[lesson {number}]({slug}.qmd)" if book else f"[lesson {number}]({slug}.ipynb)"


def _joined(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def before_you_start(lesson, book: bool) -> str:
    """The line at the top of a lesson: what it builds on, and its time ("" when undeclared)."""
    if not lesson.time:
        return ""
    slugs = _slugs(lesson.path)
    builds_on = [_lesson_link(number, slugs, book) for number in lesson.needs]
    needs = []
    if builds_on:
        needs.append(_joined(builds_on))
    if lesson.skills:
        needs.append(lesson.skills)
    first = f"it builds on {' and on '.join(needs)}" if needs else "it needs no earlier lesson"
    return (f"**Before you start:** {first}. **Time:** about {lesson.time} of work, "
            "exercises included.")


def path_map(lessons: list) -> str:
    """The book index's table of the path: each lesson, what it needs, its time."""
    lines = ["| lesson | builds on | also needs | time |", "|---|---|---|---|"]
    for lesson in lessons:
        number = int(lesson.path.stem[:2])
        title = lesson.title.split(": ", 1)[-1]
        needs = ", ".join(str(n) for n in lesson.needs) or "none"
        lines.append(f"| {number}. [{title}](book/{lesson.path.stem}.qmd) | {needs} | "
                     f"{lesson.skills or '-'} | {lesson.time or '?'} |")
    return "\n".join(lines)


def index_with_map(index_text: str, lessons: list) -> str:
    head, rest = index_text.split(BEGIN, 1)
    if END not in rest:
        raise PathError(f"index.qmd: {BEGIN!r} without its closing line {END!r}")
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{path_map(lessons)}\n{END}{tail}"
