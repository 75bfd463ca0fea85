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
    sandbox: str = "bwrap"  # or "none" with --no-sandbox
    student_from: str = "folder"  # grade --student-from: the rule report.student_of applies
    metadata_student: str = ""  # metadata.flashcourse.student of the notebook, escaped text
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASS


def as_dict(sub: Submission) -> dict:
    return dict(asdict(sub), passed=sub.passed)
