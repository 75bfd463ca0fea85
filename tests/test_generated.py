"""Generated notebooks and book pages must match their lesson sources."""

import json

import pytest

from flashcourse.authoring import build, catalogs


def test_generated_files_are_in_sync(root):
    stale = build.stale_files(root)
    assert not stale, f"run `python -m flashcourse build`; out of date: {stale}"


def test_every_message_has_its_translation(root):
    """The message catalogs (src/flashcourse/locale/<lang>/*.po): every message translated."""
    missing = catalogs.missing_translations(root)
    assert not missing, f"{len(missing)} untranslated:\n" + "\n".join(missing[:20])


def test_exercises_hide_every_answer(root):
    for path in build.lesson_paths(root):
        lesson = build.parse(path)
        exercise = json.loads((root / "exercises" / f"{lesson.slug}.ipynb").read_text())
        text = "\n".join("".join(c["source"]) for c in exercise["cells"])
        assert "# BLANK" not in text and "BEGIN SOLUTION" not in text
        assert "______" in text or "NotImplementedError" in text
        assert all(not c.get("outputs") for c in exercise["cells"] if c["cell_type"] == "code")


def _lesson(tmp_path, body):
    path = tmp_path / "lessons" / "99-demo.qmd"
    path.parent.mkdir()
    path.write_text('---\ntitle: "Demo"\n---\n\nSome prose.\n\n```{python}\n' + body + "\n```\n")
    return build.parse(path)


def test_blank_and_stub_markers(tmp_path):
    lesson = _lesson(tmp_path, "\n".join([
        "#| id: answer",
        "#| fig-cap: kept for the book only",
        "x = 1 + 1  # BLANK: add",
        "d = {",
        "    'k': True,  # BLANK",
        "}",
        "def f():",
        "    # BEGIN SOLUTION",
        "    return 3",
        "    # END SOLUTION",
    ]))
    student = build.to_notebook(lesson, "exercise").cells[2]
    assert student.id == "answer"
    assert student.source.splitlines()[:3] == ["x = ______  # add", "d = {", "    'k': ______,"]
    assert 'raise NotImplementedError("write this function")' in student.source
    assert "return 3" not in student.source and "fig-cap" not in student.source
    solution = build.to_notebook(lesson, "solution").cells[2].source
    assert "x = 1 + 1  # add" in solution and "return 3" in solution and "BEGIN" not in solution
    page = build.to_book_page(lesson)
    assert 'collapse="true"' in page and "#| eval: false" in page and "fig-cap" in page


@pytest.mark.parametrize("body, message", [
    ("# BEGIN SOLUTION\nx = 1", "never closed"),
    ("# END SOLUTION", "without"),
    ("print(1)  # BLANK", "needs `target = answer`"),
])
def test_bad_markers_are_reported(tmp_path, body, message):
    with pytest.raises(build.LessonSourceError, match=message):
        _lesson(tmp_path, body)
