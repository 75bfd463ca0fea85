"""What the grader knows about one submission, filled in by collect, sandbox and score."""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields

DEFAULT_TIMEOUT = 120  # seconds one cell of a submission may run

# Statuses of a submission, worst first when several apply.
MALFORMED, UNMATCHED, REFUSED, TAMPERED, CRASHED, TIMEOUT, FAIL, PASS = (
    "MALFORMED", "UNMATCHED", "REFUSED", "TAMPERED", "CRASHED", "TIMEOUT", "FAIL", "PASS")


@dataclass
class ExerciseResult:
    id: str
    title: str
    kind: str  # "code", "question" or "veto"
    points: float
    earned: float = 0.0
    status: str = "not run"  # pass, wrong, blank, veto, error, timeout, not run
    message: str = ""  # in English, as the class's pages and analytics read it
    # the message in the submission's language, for its own report ("": the same as message)
    message_shown: str = ""
    hints_opened: list[int] = field(default_factory=list)  # levels fc.hint showed in the run
    hints_total: int = 0  # the exercise's hint levels (0: it has none)


@dataclass
class WrittenAnswer:
    """The written part of one question: the student's words, scored by the instructor
    (open-answers.csv, then `grade --scores FILE`); its points and rubric come from the lesson
    source (authoring.build.open_questions)."""
    id: str  # the open-answer cell, e.g. open-q1
    title: str
    points: float
    rubric: str
    answer: str = ""  # the student's text ("" when the cell is missing)
    answered: bool = False  # False: left as the exercise gave it, or deleted: it scores 0
    score: float | None = None  # None: not scored yet


@dataclass
class Submission:
    label: str  # unique: the path relative to the folder given, escaped (collect.collect)
    path: str
    status: str = FAIL
    lesson: str = ""  # the lesson's file name, e.g. 01-gpu-flash
    lesson_title: str = ""
    earned: float = 0.0
    total: float = 10.0
    pass_line: float = 8.0
    exercises: list[ExerciseResult] = field(default_factory=list)
    vetoes: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed, crash, timeouts, deletions
    notes: list[str] = field(default_factory=list)  # harmless remarks (truncated output)
    open_answers: dict[str, str] = field(default_factory=dict)  # question id -> the text
    written: list[WrittenAnswer] = field(default_factory=list)  # scored on top of `total`
    sandbox: str = "bwrap"  # or "none" with --no-sandbox
    student_from: str = "folder"  # grade --student-from: the rule report.student_of applies
    metadata_student: str = ""  # metadata.flashcourse.student of the notebook, escaped text
    lang: str = "en"  # metadata.flashcourse.lang: the language of its messages and own report
    seconds: float = 0.0

    @property
    def passed(self) -> bool:  # the pass line is on the automatic points only
        return self.status == PASS

    @property
    def written_earned(self) -> float:
        return sum(item.score or 0.0 for item in self.written)

    @property
    def written_total(self) -> float:
        return sum(item.points for item in self.written)

    @property
    def unscored(self) -> int:
        return sum(item.score is None for item in self.written)

    @property
    def provisional(self) -> bool:
        """True until the instructor has scored every written answer: the total may still
        grow."""
        return self.unscored > 0


def as_dict(sub: Submission) -> dict:
    return dict(asdict(sub), passed=sub.passed, written_points=sub.written_earned,
                written_max=sub.written_total, provisional=sub.provisional)


class RecordError(ValueError):
    """A result record (results.json of an earlier run) this grader cannot read back."""


def _typed(value, annotation: str, where: str):
    """`value` checked against a field's annotation (the few this module uses), as read back
    from JSON: a float field takes an int, nothing takes a bool for a number."""
    def fail(what: str):
        raise RecordError(f"{where}: {what}, got {type(value).__name__}")

    if annotation == "str":
        return value if isinstance(value, str) else fail("expected text")
    if annotation in ("float", "int", "float | None"):
        if value is None and annotation.endswith("None"):
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail("expected a number")
        if not math.isfinite(value):
            fail("expected a finite number")
        if annotation == "int" and value != int(value):
            fail("expected a whole number")
        return int(value) if annotation == "int" else value  # as written: 10 stays 10
    if annotation == "bool":
        return value if isinstance(value, bool) else fail("expected true or false")
    if annotation.startswith("list["):
        if not isinstance(value, list):
            fail("expected a list")
        inner = annotation[5:-1]
        return [_typed(item, inner, f"{where}[{number}]") for number, item in enumerate(value)]
    if annotation == "dict[str, str]":
        if not isinstance(value, dict):
            fail("expected an object")
        return {_typed(k, "str", f"{where} key"): _typed(v, "str", f"{where}.{k}")
                for k, v in value.items()}
    record = RECORD_TYPES.get(annotation)
    if record is None:
        raise TypeError(f"no reader for the annotation {annotation}")
    return from_dict(value, record, where)


def from_dict(data, kind=None, where: str = "submission"):
    """The record `as_dict` wrote (`kind`: Submission by default, or a nested record type),
    every field checked as data; the properties as_dict adds are recomputed, not read. Raises
    RecordError naming the field."""
    kind = kind or Submission
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    values = {}
    for spec in fields(kind):
        if spec.name in data:
            values[spec.name] = _typed(data[spec.name], spec.type, f"{where}.{spec.name}")
        elif spec.default is MISSING and spec.default_factory is MISSING:
            raise RecordError(f"{where}: the field {spec.name!r} is missing")
    return kind(**values)


RECORD_TYPES = {"ExerciseResult": ExerciseResult, "WrittenAnswer": WrittenAnswer}
