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

from ..i18n import _
from ..messages import word_list

BEGIN = "<!-- the path: made by `python -m flashcourse build` from the lessons' front matter -->"
END = "<!-- end of the path -->"
# "Lesson 5: Softmax" or its Chinese, with a full-width colon: the map shows what follows it
TITLE_HEAD = re.compile(r": |：")
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
    name = _("lesson {number}").format(number=number)
    if slug is None:
        return name
    return f"[{name}]({slug}.qmd)" if book else f"[{name}]({slug}.ipynb)"


def before_you_start(lesson, book: bool) -> str:
    """The line at the top of a lesson: what it builds on, and its time ("" when undeclared)."""
    if not lesson.time:
        return ""
    slugs = _slugs(lesson.path)
    builds_on = [_lesson_link(number, slugs, book) for number in lesson.needs]
    needs = []
    if builds_on:
        needs.append(word_list(builds_on))
    if lesson.skills:
        needs.append(lesson.skills)
    if len(needs) == 2:
        first = _("it builds on {what} and on {more}").format(what=needs[0], more=needs[1])
    elif needs:
        first = _("it builds on {what}").format(what=needs[0])
    else:
        first = _("it needs no earlier lesson")
    return _("**Before you start:** {needs}. **Time:** about {time} of work, exercises "
             "included.").format(needs=first, time=lesson.time)


def path_map(lessons: list, folder: str = "book") -> str:
    """The book index's table of the path: each lesson, what it needs, its time; `folder`: where
    the book's pages are, from the index."""
    lines = [_("| lesson | builds on | also needs | time |"), "|---|---|---|---|"]
    for lesson in lessons:
        number = int(lesson.path.stem[:2])
        title = TITLE_HEAD.split(lesson.title, maxsplit=1)[-1]
        needs = ", ".join(str(n) for n in lesson.needs) or _("none")
        lines.append(f"| {number}. [{title}]({folder}/{lesson.path.stem}.qmd) | {needs} | "
                     f"{lesson.skills or '-'} | {lesson.time or '?'} |")
    return "\n".join(lines)


def index_with_map(index_text: str, lessons: list, folder: str = "book") -> str:
    head, rest = index_text.split(BEGIN, 1)
    if END not in rest:
        raise PathError(f"index.qmd: {BEGIN!r} without its closing line {END!r}")
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{path_map(lessons, folder)}\n{END}{tail}"
