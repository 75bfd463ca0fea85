"""What the student's notebook holds and how Run All goes through it: no reference answers (the
book page keeps them collapsed, the solution notebook in full), and the cells that run or check
unfinished code are tagged `raises-exception` so Run All reaches the end; the solution notebooks
carry no such tag, so strict nbval still fails on a real error there."""

import json

import pytest

from flashcourse.authoring import build

ANSWERS_TITLE = "Reference answer to Q"  # one per question: "... to Q1 (the rubric)"
# Lessons whose written answers are not three of 2 points: the capstone asks for one report.
OPEN_ANSWERS = {"11-capstone": {4: 4}}


def _cells(root, folder, slug):
    return json.loads((root / folder / f"{slug}.ipynb").read_text())["cells"]


def _slugs(root):
    return [p.stem for p in build.lesson_paths(root)]


def test_exercises_hold_no_reference_answers_and_the_book_keeps_them_collapsed(root):
    for slug in _slugs(root):
        exercise = "\n".join("".join(c["source"]) for c in _cells(root, "exercises", slug))
        solution = "\n".join("".join(c["source"]) for c in _cells(root, "solutions", slug))
        book = (root / "book" / f"{slug}.qmd").read_text()
        assert "Reference answer" not in exercise and ".answers" not in exercise, slug
        assert ANSWERS_TITLE in solution and ":::" not in solution, slug
        assert f'::: {{.callout-tip .answers collapse="true"}}\n## {ANSWERS_TITLE}' in book, slug


def test_each_explanation_question_has_an_open_answer_cell_with_its_rubric_beside_it(root):
    for slug in _slugs(root):
        exercise, solution = (_cells(root, folder, slug) for folder in ("exercises", "solutions"))
        written = OPEN_ANSWERS.get(slug, {1: 2, 2: 2, 3: 2})  # question number -> points
        for cells in (exercise, solution):
            ids = [c["id"] for c in cells if c["id"].startswith("open-")]
            assert ids == [f"open-q{number}" for number in written], (slug, ids)
            assert all(c["cell_type"] == "markdown" for c in cells if c["id"] in ids)
        for number in written:
            at = next(i for i, c in enumerate(solution) if c["id"] == f"open-q{number}")
            rubric = "".join(solution[at + 1]["source"])
            assert rubric.startswith(f"## {ANSWERS_TITLE}{number} (the rubric)"), (slug, rubric)
        book = (root / "book" / f"{slug}.qmd").read_text()
        number, points = next(iter(written.items()))
        assert f'::: {{#open-q{number} .open-answer points="{points}"}}' in book, slug


def test_an_open_answer_block_becomes_a_cell_with_its_id(tmp_path):
    lesson = _lesson(tmp_path, "Before.\n\n::: {#open-q1 .open-answer}\nYour answer.\n:::\n\n"
                     "After.")
    cells = build.to_notebook(lesson, "exercise").cells
    opened = [c for c in cells if c.id == "open-q1"]
    assert len(opened) == 1 and opened[0].cell_type == "markdown"
    assert opened[0].source == "Your answer." and "After." not in opened[0].source


def test_cells_that_run_unfinished_code_let_run_all_go_on_in_exercises_only(root):
    for slug in _slugs(root):
        for folder in ("exercises", "solutions"):
            for cell in _cells(root, folder, slug):
                tagged = "raises-exception" in cell.get("metadata", {}).get("tags", [])
                runs_student_code = cell["id"].startswith(("try-", "check-"))
                expected = folder == "exercises" and runs_student_code
                assert tagged == expected, f"{folder}/{slug}: {cell['id']}"


def _lesson(tmp_path, markdown):
    path = tmp_path / "lessons" / "99-demo.qmd"
    path.parent.mkdir(exist_ok=True)
    path.write_text('---\ntitle: "Demo"\n---\n\n```{python}\n#| id: try-it\nx = 1  # BLANK\n```'
                    "\n\n" + markdown + "\n")
    return build.parse(path)


def test_an_answers_block_with_a_nested_div_is_left_out_whole(tmp_path):
    lesson = _lesson(tmp_path, "Before.\n\n::: {.callout-tip .answers collapse=\"true\"}\n"
                     "## Answers\n\n::: {.column-margin}\nnested\n:::\n\nThe answer is 4.\n:::"
                     "\n\nAfter.")
    exercise = build.to_notebook(lesson, "exercise")
    text = "\n".join(c.source for c in exercise.cells)
    assert "Before." in text and "After." in text
    assert "answer is 4" not in text and "nested" not in text and ":::" not in text
    solution = "\n".join(c.source for c in build.to_notebook(lesson, "solution").cells)
    assert "The answer is 4." in solution and "::: {.column-margin}" in solution
    assert exercise.cells[1].metadata["tags"] == ["raises-exception"]


def test_a_markdown_cell_that_is_only_answers_is_dropped_from_the_exercise(tmp_path):
    lesson = _lesson(tmp_path, "::: {.callout-tip .answers collapse=\"true\"}\n## Answers\n:::")
    assert [c.cell_type for c in build.to_notebook(lesson, "exercise").cells] == \
        ["markdown", "code"]  # the title and the code cell
    assert len(build.to_notebook(lesson, "solution").cells) == 3


def test_an_answers_block_left_open_is_an_error(tmp_path):
    lesson = _lesson(tmp_path, "::: {.callout-tip .answers collapse=\"true\"}\n## Answers")
    with pytest.raises(build.LessonSourceError, match="never closed"):
        build.to_notebook(lesson, "exercise")
