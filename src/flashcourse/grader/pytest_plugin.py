"""`pytest --nbval SUBMISSION.ipynb` grades a submitted lesson notebook (grader side).

Registered as a pytest plugin (the `pytest11` entry point `flashcourse`). With `--nbval` or
`--nbval-lax`, a notebook that answers a course lesson and lies outside the course's own
`exercises/`, `solutions/` and `book/` is not run cell by cell by nbval: it is graded as
`./course grade` grades it (`cli.grade`: the grading cells from the pristine exercise, the
stored outputs ignored, the hidden cases run, every point from the replay), and becomes one test
per exercise of the lesson (`NOTEBOOK::gpu-flash/q1-memory`, failing when its answer is blank or
wrong, whatever tags its cells carry) and one for the lesson (`NOTEBOOK::scorecard`: the
points, the pass line and the vetoes). The points and the verdict go into `--junitxml` as
properties and into the terminal summary. The exit status is 0 exactly when every graded
submission passed (and nothing else failed).

`--flashcourse-sandbox auto|yes|no` (default auto: bubblewrap when it is on PATH and can make a
sandbox here, else none, which the summary says). A run on the student's own machine or in
their own repository's CI is only as trustworthy as that machine: it proves the notebook passes
there. The instructor's sandboxed `./course grade` is the grade.

`-p no:flashcourse` turns the plugin off (nbval then runs such notebooks as it does any).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .submission import DEFAULT_TIMEOUT

COURSE_FOLDERS = ("exercises", "solutions", "book")  # the course's own notebooks: plain nbval
_graded: list = []  # Submission of every notebook graded in this session
_other_failures = 0  # failed tests that are not a graded exercise (they fail the run)


def pytest_addoption(parser) -> None:
    group = parser.getgroup("flashcourse", "grading course notebooks")
    group.addoption("--flashcourse-sandbox", choices=("auto", "yes", "no"), default="auto",
                    help="run each submission in a bubblewrap sandbox (auto: when one can be "
                         "made here)")
    group.addoption("--flashcourse-timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds one cell of a submission may run (default {DEFAULT_TIMEOUT})")


def _active(config) -> bool:
    return bool(config.getoption("nbval", False) or config.getoption("nbval_lax", False))


def _lesson_of(path: Path):
    """(course root, exercise slug) when `path` is a submission of a course lesson, else None."""
    from . import collect

    try:
        root = collect.course_root(path.resolve().parent)
    except FileNotFoundError:
        try:
            root = collect.course_root()
        except FileNotFoundError:
            return None
    resolved = path.resolve()
    if any(resolved.is_relative_to(root / folder) for folder in COURSE_FOLDERS):
        return None
    exercises = collect.load_exercises(root)
    slug = collect.match_exercise(path.name, [], exercises)  # by its file name
    if slug is None:  # else by the grading cells it holds
        try:
            slug = collect.match_exercise("", collect.read_notebook(path)["cells"], exercises)
        except ValueError:
            return None
    return (root, slug) if slug else None


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent):
    collected = yield
    if file_path.suffix != ".ipynb" or not _active(parent.config):
        return collected
    found = _lesson_of(Path(file_path))
    if found is None:
        return collected
    kept = [c for c in collected if type(c).__module__.split(".")[0] != "nbval"]
    return [*kept, SubmittedNotebook.from_parent(parent, path=Path(file_path),
                                                 course=found[0], slug=found[1])]


def _sandbox_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    try:
        subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-pid", "true"],
                       capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


class SubmittedNotebook(pytest.File):
    """One submitted notebook: graded once, then one item per exercise and the scorecard."""

    def __init__(self, *, course: Path, slug: str, **kwargs):
        super().__init__(**kwargs)
        self.course, self.slug = course, slug
        self.sub = None

    def grade(self):
        if self.sub is None:
            from . import cli, collect

            mode = self.config.getoption("flashcourse_sandbox")
            sandboxed = mode == "yes" or (mode == "auto" and _sandbox_works())
            found, missing = collect.collect([self.path])
            subs = cli.grade(found, missing, out=None, jobs=1, root=self.course,
                             timeout=self.config.getoption("flashcourse_timeout"),
                             sandboxed=sandboxed)
            self.sub = subs[0]
            _graded.append(self.sub)
        return self.sub

    def collect(self):
        from ..checks import registry
        from . import collect

        registry._load_checks()
        ids = collect.check_cells(collect.load_exercises(self.course)[self.slug])
        lesson = registry.LESSONS.get(next(iter(ids), "").split("/")[0])
        for exercise in (lesson.exercises if lesson else []):
            yield ExerciseItem.from_parent(self, name=exercise.id)
        yield ScorecardItem.from_parent(self, name="scorecard")


class NotGraded(Exception):
    """An exercise or a lesson that did not pass; its message is the grader's."""


class ExerciseItem(pytest.Item):
    def runtest(self) -> None:
        sub = self.parent.grade()
        item = next((i for i in sub.exercises if i.id == self.name), None)
        self.user_properties += [("points", item.earned if item else 0),
                                 ("max_points", item.points if item else 0)]
        if item is None:
            raise NotGraded(f"{self.name}: not graded ({sub.status}: "
                            + "; ".join(sub.problems[:3]) + ")")
        if item.status != "pass":
            raise NotGraded(f"{self.name}: {item.status} - {item.message}")

    def repr_failure(self, excinfo):
        return str(excinfo.value) if excinfo.errisinstance(NotGraded) else \
            super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{self.name}"


class ScorecardItem(ExerciseItem):
    def runtest(self) -> None:
        from . import report

        sub = self.parent.grade()
        self.user_properties += [("points", sub.earned), ("max_points", sub.total),
                                 ("pass_line", sub.pass_line), ("status", sub.status),
                                 ("vetoes", len(sub.vetoes)), ("sandbox", sub.sandbox)]
        if not sub.passed:
            raise NotGraded(report.submission_text(sub))


def pytest_terminal_summary(terminalreporter) -> None:
    if not _graded:
        return
    terminalreporter.section("flashcourse grading")
    for sub in _graded:
        vetoes = f", {len(sub.vetoes)} veto(es)" if sub.vetoes else ""
        where = "" if sub.sandbox == "bwrap" else " (not sandboxed)"
        terminalreporter.write_line(f"{sub.label}: {sub.status} {sub.earned:g}/{sub.total:g} "
                                    f"(pass line {sub.pass_line:g}){vetoes}{where}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    global _other_failures
    report = yield
    if report.failed and not isinstance(item, ExerciseItem):
        _other_failures += 1
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    """Exit 0 exactly when every graded submission passed and nothing else failed: an exercise
    that failed inside a passing lesson does not fail the run, a failed lesson does. (Per
    process: run submissions without pytest-xdist's workers.)"""
    if not _graded or exitstatus not in (0, 1):
        return
    session.exitstatus = 0 if all(s.passed for s in _graded) and not _other_failures else 1
