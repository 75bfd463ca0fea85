"""The written half of every question: points and rubric in the lesson source (build.py),
open-answers.csv for the instructor (report.py), and `grade --scores FILE` folding the filled
file into every report (written.py), with every bad scores file refused before grading. The
submissions are built here without a sandbox, as the grader's collect step leaves them."""

import csv
import json
import xml.etree.ElementTree as ET

import pytest

from flashcourse.__main__ import main
from flashcourse.authoring import build
from flashcourse.grader import cli, collect, report, samples, written
from flashcourse.grader.submission import ExerciseResult, Submission

LESSON = "01-gpu-flash"
QUESTIONS = ("open-q1", "open-q2", "open-q3")
# The capstone asks for one written answer, a report against the roofline, worth 4 points.
CAPSTONE, CAPSTONE_WRITTEN = "11-capstone", {"open-q4": 4}
ANSWER = "S is N x N: four passes through HBM, and O(N^2) memory."


# ---------------------------------------------------------------- the lesson source


def _source(tmp_path, div='::: {#open-q1 .open-answer points="2"}', answers=None):
    """A lesson with one question, its open-answer block and its answers callout."""
    if answers is None:
        answers = ('::: {.callout-tip .answers collapse="true"}\n'
                   "## Reference answer to Q1 (the rubric)\n\n"
                   "**Q1.** Four passes.\n\n"
                   "**Rubric (2 points):** 1 point: four passes;\n"
                   "1 point: O(N^2) memory.\n:::\n")
    path = tmp_path / "lessons" / "99-demo.qmd"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('---\ntitle: "Demo"\n---\n\n'
                    "**Q1.** Why is it slow? Answer in words.\n\n"
                    f"{div}\n**Your answer to Q1**: write it here.\n:::\n\n{answers}\n"
                    "**Q2.** Not this one.\n", encoding="utf-8")
    return path


def test_points_rubric_and_title_come_from_the_source(tmp_path):
    found = build.open_questions(build.parse(_source(tmp_path)))
    assert found == {"open-q1": build.OpenQuestion(
        2.0, "1 point: four passes; 1 point: O(N^2) memory.", "Q1. Why is it slow?")}


def test_the_points_and_the_rubric_stay_out_of_the_exercise_notebook(tmp_path, root):
    lesson = build.parse(_source(tmp_path))
    exercise = "\n".join(c.source for c in build.to_notebook(lesson, "exercise").cells)
    assert "points" not in exercise and "Rubric" not in exercise
    assert "Rubric (2 points)" in build.to_book_page(lesson)  # collapsed there
    for path in build.lesson_paths(root):
        notebook = (root / "exercises" / f"{path.stem}.ipynb").read_text(encoding="utf-8")
        assert "**Rubric (" not in notebook and 'points=\\"' not in notebook, path.stem
        written = build.open_questions(build.parse(path))
        points = CAPSTONE_WRITTEN if path.stem == CAPSTONE else dict.fromkeys(QUESTIONS, 2)
        assert {key: q.points for key, q in written.items()} == points, path.stem
        assert all(q.rubric.startswith("1 point: ") for q in written.values()), path.stem


def test_every_lesson_rubric_says_what_the_written_answers_add(root):
    for path in build.lesson_paths(root):
        text = path.read_text(encoding="utf-8")
        rubric = text[text.index(". Rubric\n"):text.index('fc.scorecard("')]
        words = " ".join(rubric.split())
        expected = ("written answer to Q4 adds 4 points" if path.stem == CAPSTONE else
                    "written answers to the three questions add 2 points each")
        assert expected in words, path.stem
        assert "the pass line stays on the automatic points" in words, path.stem


@pytest.mark.parametrize("div, answers, message", [
    ("::: {#open-q1 .open-answer}", None, r"99-demo.qmd:7: open-answer block open-q1 has no "
                                          r"points"),
    ('::: {#open-q1 .open-answer points="two"}', None, r"99-demo.qmd:7: the points of "
                                                      r"open-answer block open-q1 must be a "
                                                      r"number above 0, not 'two'"),
    ("::: {#open-q1 .open-answer points=0}", None, r"must be a number above 0, not '0'"),
    ('::: {#open-q1 .open-answer points="2"}', "Just text, no callout.\n",
     r"99-demo.qmd:7: open-answer block open-q1 is not followed by its `.answers` callout"),
    ('::: {#open-q1 .open-answer points="2"}',
     '::: {.callout-tip .answers collapse="true"}\n## Reference\n\nNo rubric here.\n:::\n',
     r"99-demo.qmd:11: the answers callout of open-q1 has no rubric paragraph"),
    ('::: {#open-q1 .open-answer points="2"}',
     '::: {.callout-tip .answers}\n**Rubric (3 points):** 1 point: x.\n:::\n',
     r"99-demo.qmd:12: the rubric of open-q1 says '3' points, its open-answer block 2"),
])
def test_a_bad_open_answer_source_stops_the_build_naming_file_and_line(tmp_path, div, answers,
                                                                        message):
    path = _source(tmp_path, div, answers)
    with pytest.raises(build.LessonSourceError, match=message):
        build.open_questions(build.parse(path))
    with pytest.raises(build.LessonSourceError, match=message):
        build.rendered(tmp_path)  # `build` and `check-sync` stop on it too


# ---------------------------------------------------------------- open-answers.csv


@pytest.fixture(scope="module")
def exercises(root):
    return collect.load_exercises(root)


def _prompt(exercises, cell_id, slug=LESSON):
    return next("".join(c["source"]) for c in exercises[slug]["cells"] if c["id"] == cell_id)


def _sub(student, exercises, answers=None, status="PASS", earned=10.0, slug=LESSON):
    """A graded submission of `student` as collect and score leave it: the open answers the
    student wrote (`answers`: cell id -> text; by default every one answered)."""
    if answers is None:
        answers = {cell_id: f"{ANSWER} ({student}, {cell_id})" for cell_id in QUESTIONS}
    item = ExerciseResult("gpu-flash/q1-memory", "Q1", "question", 2, 2, "pass")
    return Submission(label=f"{student}/{slug}.ipynb", path="x", status=status, lesson=slug,
                      lesson_title="Lesson", earned=earned, exercises=[item],
                      open_answers=answers)


def _class(root, exercises):
    alice = _sub("alice", exercises)
    # bob left Q2 as the exercise gave it and deleted the cell of Q3
    bob = _sub("bob", exercises, {"open-q1": ANSWER, "open-q2": _prompt(exercises, "open-q2")},
               status="FAIL", earned=6)
    malformed = Submission(label="dave/01-gpu-flash.ipynb", path="y", status="MALFORMED",
                           problems=["malformed notebook: not valid JSON"])
    subs = [alice, bob, malformed]
    written.attach(subs, root, exercises)
    return subs


def _rows(path):
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_open_answers_csv_has_a_row_per_submission_and_question(tmp_path, root, exercises):
    subs = _class(root, exercises)
    report.write_all(subs, tmp_path, timeout=60, jobs=1)
    rows = _rows(tmp_path / "open-answers.csv")
    assert list(rows[0]) == list(report.OPEN_ANSWER_COLUMNS)
    assert [(r["student"], r["question"]) for r in rows] == [
        ("alice", q) for q in QUESTIONS] + [("bob", q) for q in QUESTIONS]
    rubrics = build.open_questions(build.parse(root / "lessons" / f"{LESSON}.qmd"))
    first = rows[0]
    assert first["lesson"] == LESSON and first["submission"] == "alice/01-gpu-flash.ipynb"
    assert first["points"] == "2" and first["rubric"] == report.csv_safe(
        rubrics["open-q1"].rubric)
    assert first["answer"] == f"{ANSWER} (alice, open-q1)" and first["score"] == ""
    # left as the exercise gave it, or deleted: 0 already, and marked so
    assert [(r["answer"], r["score"]) for r in rows[3:]] == [
        (ANSWER, ""), (report.NOT_ANSWERED, "0"), (report.NOT_ANSWERED, "0")]


def test_an_unchanged_prompt_without_write_it_here_is_not_an_answer(root, exercises):
    slug = "10-ring-attention"
    prompt = _prompt(exercises, "open-q1", slug)
    assert not prompt.rstrip().endswith(report.OPEN_PROMPT)  # its own question, not the line
    sub = _sub("erin", exercises, {"open-q1": prompt, "open-q2": prompt + "\n\nBecause ..."},
               slug=slug)
    written.attach([sub], root, exercises)
    assert [(w.answered, w.score) for w in sub.written] == [
        (False, 0.0), (True, None), (False, 0.0)]


def test_open_answers_csv_stays_whole_whatever_the_text(tmp_path, root, exercises):
    nasty = "=HYPERLINK(\"x\")\n\r\x00\x1b[32m\ud800,\"quoted\""
    sub = _sub(nasty, exercises, {"open-q1": nasty})
    written.attach([sub], root, exercises)
    report.write_open_answers([sub], tmp_path / "open-answers.csv")
    lines = (tmp_path / "open-answers.csv").read_text(encoding="utf-8").splitlines()
    rows = list(csv.reader(lines))  # one line, one row
    assert len(rows) == 4 and all(len(row) == 8 for row in rows)
    assert all(cell.isprintable() and not cell.startswith(report.FORMULA_START)
               for row in rows for cell in row)


# ---------------------------------------------------------------- --scores


def _filled(tmp_path, subs, scores, edit=None):
    """open-answers.csv of `subs` with `scores` ({(student, question): text}) filled in;
    `edit(rows)` may change the rows (header first) before they are written."""
    report.write_open_answers(subs, tmp_path / "written.csv")
    with (tmp_path / "written.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    for row in rows[1:]:
        if (row[0], row[3]) in scores:
            row[7] = scores[row[0], row[3]]
    if edit:
        edit(rows)
    path = tmp_path / "filled.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


ALL_OF_ALICE = {("alice", "open-q1"): "2", ("alice", "open-q2"): "1.5",
                ("alice", "open-q3"): "1.5"}


def test_scores_fold_into_the_totals_and_every_report(tmp_path, root, exercises):
    subs = _class(root, exercises)
    alice, bob, _ = subs
    path = _filled(tmp_path, subs, {**ALL_OF_ALICE, ("bob", "open-q1"): ""})
    written.fold(subs, written.read_scores(path))
    assert [w.score for w in alice.written] == [2, 1.5, 1.5] and not alice.provisional
    assert [w.score for w in bob.written] == [None, 0, 0] and bob.provisional
    assert report.total_text(alice) == "15/16"
    assert report.total_text(bob) == ("6/10 automatic, written 0/6, 1 of 3 not scored yet "
                                      "(provisional)")
    assert alice.passed and not bob.passed  # the pass line is on the automatic points

    out = tmp_path / "out"
    report.write_all(subs, out, timeout=60, jobs=1)
    card = (out / "scorecard.txt").read_text(encoding="utf-8")
    assert "Total: 15/16 (pass line 8 of the 10 automatic points)" in card
    assert "open answer open-q2 [1.5/2]: S is N x N" in card
    assert "open answer open-q1 [not scored yet, 2 points]: S is N x N" in card
    assert "open answer open-q3 [0/2]: (not answered)" in card
    results = {r["submission"].split("/")[0]: r for r in _rows(out / "results.csv")}
    assert (results["alice"]["points"], results["alice"]["written_points"],
            results["alice"]["written_max"], results["alice"]["provisional"]) == (
        "10", "5", "6", "0")
    assert results["bob"]["provisional"] == "1" and results["dave"]["provisional"] == ""
    students = {r["student"]: r for r in _rows(out / "students.csv")}
    assert students["alice"][LESSON] == "PASS 15/16"
    assert "(provisional)" in students["bob"][LESSON]
    suites = {s.get("name"): s for s in ET.parse(out / "junit.xml").getroot()}
    alice_suite = suites["alice/01-gpu-flash.ipynb"]
    properties = {p.get("name"): p.get("value") for p in alice_suite.iter("property")}
    assert properties["total"] == "15/16" and properties["provisional"] == "false"
    assert alice_suite.get("failures") == "0" and alice_suite.get("skipped") == "0"
    assert suites["bob/01-gpu-flash.ipynb"].get("skipped") == "1"  # bob's Q1, not scored
    page = (out / "progress.html").read_text(encoding="utf-8")
    assert "PASS 15/16" in page and "[1.5/2]" in page and "not scored yet" in page
    assert "Rubric: 1 point:" in page
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [s["provisional"] for s in data["submissions"]] == [False, True, False]
    # the new open-answers.csv keeps the scores: the instructor goes on from it
    assert [r["score"] for r in _rows(out / "open-answers.csv")][:3] == ["2", "1.5", "1.5"]


def test_before_any_score_every_total_is_provisional(tmp_path, root, exercises):
    subs = _class(root, exercises)
    report.write_all(subs, tmp_path, timeout=60, jobs=1)
    card = (tmp_path / "scorecard.txt").read_text(encoding="utf-8")
    assert ("Total: 10/10 automatic, written 0/6 not scored yet (provisional) (pass line 8 "
            "of the 10 automatic points)") in card
    assert [r["provisional"] for r in _rows(tmp_path / "results.csv")] == ["1", "1", ""]


def _bad_header(change):
    def edit(rows):
        rows[0] = change(rows[0])
    return edit


def _bad_row(number, column, value):
    def edit(rows):
        rows[number - 1][report.OPEN_ANSWER_COLUMNS.index(column)] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (_bad_header(lambda h: h[:-1] + ["grade"]),
     r"row 1: unknown column\(s\) 'grade'; missing column\(s\) 'score'; the columns of "
     r"open-answers.csv are student, lesson"),
    (lambda rows: [row.pop(5) for row in rows], r"row 1: missing column\(s\) 'rubric'"),
    (_bad_header(lambda h: h + ["score"]), r"row 1: column\(s\) given twice 'score'"),
    (lambda rows: rows.__setitem__(slice(None), [[";".join(r)] for r in rows]),
     r"is it separated by semicolons\?"),
    (lambda rows: rows.clear(), r"filled.csv: it is empty"),
    (lambda rows: rows[1].pop(), r"row 2: it has 7 cells, the header 8"),
    (_bad_row(2, "score", "two"), r"row 2: score 'two' is not a number"),
    (_bad_row(3, "score", "nan"), r"row 3: score 'nan' is not a number"),
    (_bad_row(2, "score", "1,5"), r"row 2: score '1,5' is not a number"),
    (_bad_row(2, "score", "-1"), r"row 2: score -1 is below 0"),
    (_bad_row(2, "score", "2.5"), r"row 2: score 2.5 is above the 2 points of open-q1"),
    (_bad_row(2, "question", "open-q9"),
     r"row 2: question 'open-q9' is not an open question of lesson 01-gpu-flash \(its "
     r"questions: open-q1, open-q2, open-q3\)"),
    (_bad_row(2, "submission", "zoe/01-gpu-flash.ipynb"),
     r"row 2: submission 'zoe/01-gpu-flash.ipynb' is not in this run"),
    (_bad_row(2, "student", "zoe"), r"row 2: student 'zoe' is not in this run"),
    (_bad_row(2, "student", "bob"),
     r"row 2: submission 'alice/01-gpu-flash.ipynb' belongs to 'alice', not 'bob'"),
    (_bad_row(2, "lesson", "02-memory-roofline"),
     r"row 2: lesson '02-memory-roofline' is not the lesson of submission"),
    (lambda rows: rows.append(list(rows[1])),
     r"row 8: open-q1 of 'alice/01-gpu-flash.ipynb' is scored again \(first in row 2\)"),
    (_bad_row(6, "score", "1"),
     r"row 6: open-q2 of 'bob/01-gpu-flash.ipynb' was not answered .*: it scores 0, not 1"),
    (lambda rows: rows.append(["dave", "", "dave/01-gpu-flash.ipynb", "open-q1", "2", "", "",
                               "1"]),
     r"row 8: submission 'dave/01-gpu-flash.ipynb' has no open answers in this run "
     r"\(MALFORMED"),
])
def test_a_bad_scores_file_is_refused_naming_file_row_and_problem(tmp_path, root, exercises,
                                                                  edit, message):
    subs = _class(root, exercises)
    path = _filled(tmp_path, subs, ALL_OF_ALICE, edit)
    with pytest.raises(written.ScoresError, match=message) as caught:
        written.fold(subs, written.read_scores(path))
    assert str(caught.value).startswith(f"{path}: ")
    assert all(w.score is None or not w.answered for s in subs for w in s.written)  # no score


def test_a_scores_file_that_cannot_be_read_is_refused(tmp_path):
    with pytest.raises(written.ScoresError, match=r"missing.csv: cannot read it"):
        written.read_scores(tmp_path / "missing.csv")
    (tmp_path / "latin1.csv").write_bytes("student,score\nzoë,1\n".encode("latin-1"))
    with pytest.raises(written.ScoresError, match=r"latin1.csv: it is not UTF-8 text"):
        written.read_scores(tmp_path / "latin1.csv")


def test_a_spreadsheets_bom_empty_rows_and_column_order_are_no_problem(tmp_path, root,
                                                                       exercises):
    def edit(rows):
        rows.append([""] * 8)
        for row in rows:
            row.reverse()

    subs = _class(root, exercises)
    path = _filled(tmp_path, subs, ALL_OF_ALICE, edit)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    written.fold(subs, written.read_scores(path))
    assert report.total_text(subs[0]) == "15/16"


def test_grade_refuses_a_bad_scores_file_before_collecting(tmp_path, capsys):
    samples.write({"cells": []}, tmp_path / "in" / "alice" / "01-gpu-flash.ipynb")
    (tmp_path / "scores.csv").write_text("student,points\nalice,2\n", encoding="utf-8")
    status = main(["grade", str(tmp_path / "in"), "--out", str(tmp_path / "out"),
                   "--scores", str(tmp_path / "scores.csv")])
    err = capsys.readouterr().err
    assert status == 2 and not (tmp_path / "out").exists()
    assert f"cannot grade: {tmp_path / 'scores.csv'}: row 1: missing column(s) 'lesson'" in err


def test_grade_checks_the_scores_against_the_run_before_any_sandbox(tmp_path, root,
                                                                    monkeypatch):
    notebook = samples.filled_notebook(root)
    samples.write(notebook, tmp_path / "in" / "alice" / "01-gpu-flash.ipynb")
    scores = tmp_path / "scores.csv"
    scores.write_text(",".join(report.OPEN_ANSWER_COLUMNS) + "\n"
                      "bob,01-gpu-flash,bob/01-gpu-flash.ipynb,open-q1,2,,,1\n",
                      encoding="utf-8")

    def no_sandbox(*args, **kwargs):
        raise AssertionError("a sandbox was prepared although the scores file is bad")

    monkeypatch.setattr(cli, "Grader", no_sandbox)
    found, missing = collect.collect([tmp_path / "in"])
    with pytest.raises(written.ScoresError, match=r"row 2: submission "
                                                  r"'bob/01-gpu-flash.ipynb' is not in this run"):
        cli.grade(found, missing, out=tmp_path / "out", root=root, sandboxed=False,
                  scores=written.read_scores(scores))
    assert not (tmp_path / "out").exists()
