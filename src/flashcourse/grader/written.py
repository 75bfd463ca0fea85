"""The written half of every question (grader side): the open answers, their points and rubrics
from the lesson source (authoring.build.open_questions), and `grade --scores FILE`, which folds
an instructor's filled open-answers.csv (report.write_open_answers) into the totals.

An answer left as the exercise gave it, or deleted, scores 0 by itself; any other stays
unscored (its submission's total provisional) until the file gives it a score. The pass line
stays on the automatic points: a written score never changes whether a submission passed.

The scores file is checked whole before any sandbox runs, and any problem stops the run with one
message naming the file, the row (the header is row 1, as a spreadsheet counts) and what is
wrong: a column missing or unknown, a score that is not a number, below 0 or above the
question's points, a submission, student, lesson or question this run does not have, a question
scored twice, or a score for an answer that was not given.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from ..authoring import build
from . import report, scan
from .collect import printable, pristine_of
from .submission import Submission, WrittenAnswer

SCORE_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")  # no nan, inf, 1e3 or 1_0


class ScoresError(ValueError):
    """A scores file this run cannot use; the message names the file, the row and why."""


@dataclass(frozen=True)
class ScoreRow:
    row: int  # as a spreadsheet numbers it: the header is row 1
    student: str
    lesson: str
    submission: str
    question: str
    score: float | None  # None: left blank, not scored yet


@dataclass(frozen=True)
class Scores:
    path: Path
    rows: list[ScoreRow]


def attach(subs: list[Submission], root: Path, exercises: dict[str, dict],
           editions: dict[str, dict[str, dict]] | None = None) -> None:
    """Give every submission matched to a lesson its written answers: one per open-answer
    block of the lesson source (lessons/SLUG.qmd under `root`), with the student's text and
    whether it was answered at all (`exercises`: slug -> the exercise notebook, whose text of
    each open cell is what 'not answered' looks like; `editions`: the translated ones, for a
    submission in another language)."""
    questions: dict[str, dict[str, build.OpenQuestion]] = {}
    for sub in subs:
        if not sub.lesson:
            continue
        if sub.lesson not in questions:
            source = root / build.LESSONS_DIR / f"{sub.lesson}.qmd"
            if not source.is_file():
                raise build.LessonSourceError(
                    f"{source}: missing; the points and rubrics of the open answers of "
                    f"exercises/{sub.lesson}.ipynb come from it")
            questions[sub.lesson] = build.open_questions(build.parse(source))
        handed_out = pristine_of(exercises, sub.lesson, sub.lang, editions) \
            if sub.lesson in exercises else {}
        prompts = {cell.get("id"): scan.cell_source(cell)
                   for cell in handed_out.get("cells", [])}
        sub.written = []
        for cell_id, question in questions[sub.lesson].items():
            text = sub.open_answers.get(cell_id, "")
            given = report.answered(text, prompts.get(cell_id, ""))
            sub.written.append(WrittenAnswer(cell_id, question.title, question.points,
                                             question.rubric, text, given,
                                             None if given else 0.0))


def read_scores(path: Path) -> Scores:
    """The rows of a filled open-answers.csv, each score a number >= 0 or None (blank). Raises
    ScoresError for a file that cannot be read, a header that is not open-answers.csv's, a row
    of the wrong length or a score that is not a number or is below 0."""
    where = printable(str(path), 300)
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a spreadsheet may write a BOM
    except OSError as err:
        raise ScoresError(f"{where}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise ScoresError(f"{where}: it is not UTF-8 text (save it as CSV UTF-8)") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        records = list(reader)
    except csv.Error as err:
        raise ScoresError(f"{where}: row {reader.line_num}: not CSV ({err})") from None
    if not records or not any(cell.strip() for cell in records[0]):
        raise ScoresError(f"{where}: it is empty; expected open-answers.csv's header: "
                          + ",".join(report.OPEN_ANSWER_COLUMNS))
    header = [cell.strip() for cell in records[0]]
    _check_header(header, where)
    rows = []
    for number, record in enumerate(records[1:], start=2):
        if not any(cell.strip() for cell in record):
            continue  # a spreadsheet's empty trailing row
        if len(record) != len(header):
            raise ScoresError(f"{where}: row {number}: it has {len(record)} cells, the header "
                              f"{len(header)}")
        values = {name: cell.strip() for name, cell in zip(header, record, strict=True)}
        rows.append(ScoreRow(number, values["student"], values["lesson"],
                             values["submission"], values["question"],
                             _score(values["score"], f"{where}: row {number}")))
    return Scores(path, rows)


def _check_header(header: list[str], where: str) -> None:
    expected = report.OPEN_ANSWER_COLUMNS
    problems = []
    unknown = [name for name in header if name not in expected]
    missing = [name for name in expected if name not in header]
    twice = sorted({name for name in header if header.count(name) > 1})
    if unknown:
        problems.append("unknown column(s) " + ", ".join(map(repr, unknown)))
    if missing:
        problems.append("missing column(s) " + ", ".join(map(repr, missing)))
    if twice:
        problems.append("column(s) given twice " + ", ".join(map(repr, twice)))
    if problems:
        hint = " (is it separated by semicolons? save it comma-separated)" \
            if len(header) == 1 and ";" in header[0] else ""
        raise ScoresError(f"{where}: row 1: {'; '.join(problems)}; the columns of "
                          f"open-answers.csv are {', '.join(expected)}{hint}")


def _score(raw: str, at: str) -> float | None:
    if not raw:
        return None
    if not SCORE_NUMBER.fullmatch(raw):
        raise ScoresError(f"{at}: score {raw!r} is not a number (write it like 1 or 1.5, or "
                          "leave it blank: not scored yet)")
    score = float(raw)
    if score < 0:
        raise ScoresError(f"{at}: score {raw} is below 0")
    return score


def fold(subs: list[Submission], scores: Scores) -> None:
    """Set the score of every written answer the file scores, after checking every row against
    this run (call it after attach, before any sandbox runs). Raises ScoresError at the first
    row that names what this run does not have, or gives a score it cannot take; then no score
    is set."""
    where = printable(str(scores.path), 300)
    by_label: dict[str, Submission] = {}
    for sub in subs:  # a label as written in the CSV (csv_safe) or as it is
        by_label.setdefault(report.csv_safe(sub.label), sub)
        by_label[sub.label] = sub
    students = {report.student_of(sub) or "" for sub in subs}
    seen: dict[tuple[str, str], int] = {}
    planned: list[tuple[WrittenAnswer, float]] = []
    for row in scores.rows:
        at = f"{where}: row {row.row}"
        sub = by_label.get(row.submission)
        if sub is None:
            raise ScoresError(f"{at}: submission {row.submission!r} is not in this run "
                              "(grade it too, or delete its rows)")
        student = report.student_of(sub) or ""
        if not _same(row.student, student):
            if not any(_same(row.student, known) for known in students):
                raise ScoresError(f"{at}: student {row.student!r} is not in this run")
            raise ScoresError(f"{at}: submission {sub.label!r} belongs to {_who(student)}, "
                              f"not {_who(row.student)}")
        if not sub.written:
            raise ScoresError(f"{at}: submission {sub.label!r} has no open answers in this run "
                              f"({sub.status}: it matched no lesson)")
        if not _same(row.lesson, sub.lesson):
            raise ScoresError(f"{at}: lesson {row.lesson!r} is not the lesson of submission "
                              f"{sub.label!r} ({sub.lesson})")
        items = {item.id: item for item in sub.written}
        item = items.get(row.question)
        if item is None:
            raise ScoresError(f"{at}: question {row.question!r} is not an open question of "
                              f"lesson {sub.lesson} (its questions: {', '.join(items)})")
        key = (sub.label, item.id)
        if key in seen:
            raise ScoresError(f"{at}: {item.id} of {sub.label!r} is scored again (first in "
                              f"row {seen[key]})")
        seen[key] = row.row
        if row.score is None:
            continue
        if row.score > item.points:
            raise ScoresError(f"{at}: score {row.score:g} is above the {item.points:g} points "
                              f"of {item.id}")
        if not item.answered and row.score != 0:
            raise ScoresError(f"{at}: {item.id} of {sub.label!r} was not answered (left as "
                              f"the exercise gave it, or deleted): it scores 0, not "
                              f"{row.score:g}")
        planned.append((item, row.score))
    for item, score in planned:  # only once every row is known good
        item.score = score


def _who(student: str) -> str:
    return repr(student) if student else "nobody"


def _same(cell: str, value: str) -> bool:
    """Whether a CSV cell names `value`: as report.csv_safe wrote it, or as it is (a
    spreadsheet may drop the quote before a leading formula character)."""
    return cell in (value, report.csv_safe(value), report.csv_safe(value).strip())
