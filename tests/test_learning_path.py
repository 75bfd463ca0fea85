"""Every lesson says what it builds on and how long it takes, and the index maps the path."""

from pathlib import Path

import nbformat
import pytest

from flashcourse.authoring import build, learning_path

ROOT = Path(__file__).resolve().parents[1]
LESSONS = build.lesson_paths(ROOT)


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_every_lesson_states_its_prerequisites_and_time(path):
    lesson = build.parse(path)
    assert lesson.time, f"{path.name}: no `time:` in its front matter"
    number = int(path.stem[:2])
    assert number == 1 or lesson.needs or lesson.skills, f"{path.name} builds on nothing?"
    line = learning_path.before_you_start(lesson, book=False)
    title = nbformat.read(ROOT / "exercises" / f"{path.stem}.ipynb", as_version=4).cells[0]
    assert line in title.source
    assert learning_path.before_you_start(lesson, book=True) in (
        ROOT / "book" / f"{path.stem}.qmd").read_text(encoding="utf-8")


def test_the_index_maps_every_lesson():
    index = (ROOT / "index.qmd").read_text(encoding="utf-8")
    assert learning_path.path_map([build.parse(path) for path in LESSONS]) in index
    assert all(f"(book/{path.stem}.qmd)" in learning_path.path_map([build.parse(path)])
               for path in LESSONS)  # the map links each lesson's page


def test_links_point_at_the_lessons_named():
    lesson = build.parse(ROOT / "lessons" / "06-flash-forward.qmd")
    assert "[lesson 5](05-softmax.qmd)" in learning_path.before_you_start(lesson, book=True)
    assert "[lesson 5](05-softmax.ipynb)" in learning_path.before_you_start(lesson, book=False)


@pytest.mark.parametrize("needs, problem", [("[7]", "comes later"), ("5, 6", "list of lesson"),
                                            ("[a]", "list of lesson")])
def test_needs_that_cannot_be_read_stop_the_build(needs, problem):
    with pytest.raises(learning_path.PathError, match=problem):
        learning_path.front_matter(f'title: "x"\nneeds: {needs}\ntime: "1 h"',
                                   Path("lessons/06-demo.qmd"))
