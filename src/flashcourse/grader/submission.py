"""What the grader knows about one submission, filled in by collect, sandbox and score."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
    message: str = ""
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
