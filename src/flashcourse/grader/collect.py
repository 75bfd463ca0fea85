"""Finding and reading submissions, matching each to its lesson, and building the notebook the
sandbox runs (grader side; nothing here runs student code)."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from . import answers, scan
from .submission import MALFORMED, REFUSED, UNMATCHED, Submission

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024  # a submission larger than this is refused unread
CHECK_CALL = re.compile(r"""check\(\s*["']([^"']+)["']\s*,\s*([A-Za-z_]\w*)\s*\)""")


LABEL_CHARS = 400  # a label's length, escapes included, before it is cut


@dataclass
class Found:
    """One path found under the graded folders: a notebook to grade, or one refused."""
    path: Path
    label: str  # unique among those found: see collect()
    refused: str = ""  # why it is not read (a link, outside the folder)


def printable(text: str, limit: int = 200) -> str:
    """`text` with every control character written as an escape: a file name cannot move the
    cursor, colour the terminal or start a new report line."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."


def course_root(start: Path | None = None) -> Path:
    """The folder holding exercises/: above the working directory, else above this package."""
    for base in [start or Path.cwd(), Path(__file__).resolve().parent]:
        for folder in [base, *base.parents]:
            if (folder / "exercises").is_dir() and (folder / "lessons").is_dir():
                return folder
    raise FileNotFoundError("cannot find the course folder (with exercises/ and lessons/); "
                            "pass --root")


def collect(paths: list[Path]) -> tuple[list[Found], list[str]]:
    """The notebooks under `paths` (files or folders, searched without following links), sorted
    by label, and the paths that do not exist. A link, or a file that resolves outside its
    folder, is refused.

    A label is the path relative to the folder given; files given directly are labelled
    relative to their common parent folder (subs/alice/x.ipynb and subs/bob/x.ipynb given
    together are alice/x.ipynb and bob/x.ipynb). Labels that still coincide (the same path
    under two folders given, or names that print alike) are numbered, saying so."""
    found: list[Found] = []
    missing: list[str] = []
    direct: list[Path] = []
    for given in paths:
        if os.path.islink(given) or given.is_file():  # its folder resolved, as a walk's are
            direct.append(Path(os.path.realpath(given.parent)) / given.name)
        elif given.is_dir():
            base = given.resolve()
            for folder, dirs, files in os.walk(base, followlinks=False):
                dirs[:] = sorted(d for d in dirs if d != ".ipynb_checkpoints")
                for name in sorted(files):
                    if name.endswith(".ipynb"):
                        path = Path(folder) / name
                        found.append(Found(path, _label(path, base), _refusal(path, base)))
                for name in list(dirs):  # links to folders are not followed; say so
                    if os.path.islink(Path(folder) / name):
                        path = Path(folder) / name
                        found.append(Found(path, _label(path, base),
                                           "a symbolic link to a folder: not followed"))
                        dirs.remove(name)
        else:
            missing.append(printable(str(given)))
    top = _common_folder(direct)
    for path in direct:
        refused = "a symbolic link: submit the notebook itself" if os.path.islink(path) else ""
        found.append(Found(path, _label(path, top), refused))
    seen: set[Path] = set()
    unique = []
    for item in found:  # the same file given twice (or inside a folder given) is graded once
        key = Path(os.path.realpath(item.path.parent)) / item.path.name
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return _distinct_labels(unique), missing


def _label(path: Path, base: Path | None) -> str:
    return printable(str(path if base is None else path.relative_to(base)), LABEL_CHARS)


def _common_folder(files: list[Path]) -> Path | None:
    """The deepest folder holding every one of `files` (absolute paths), None if none does."""
    if not files:
        return None
    try:
        return Path(os.path.commonpath([path.parent for path in files]))
    except ValueError:  # on different drives
        return None


def _distinct_labels(found: list[Found]) -> list[Found]:
    """`found` sorted by label, every label unique: those that coincide become
    `LABEL (duplicate label N of M)`, numbered in the order of their paths."""
    groups: dict[str, list[Found]] = {}
    for item in sorted(found, key=lambda item: (item.label, str(item.path))):
        groups.setdefault(item.label, []).append(item)
    taken = set(groups)
    for label, items in groups.items():
        if len(items) == 1:
            continue
        for number, item in enumerate(items, 1):
            item.label = candidate = f"{label} (duplicate label {number} of {len(items)})"
            again = 1
            while item.label in taken:  # a real name could read like that too
                again += 1
                item.label = f"{candidate} ({again})"
            taken.add(item.label)
    return sorted(found, key=lambda item: item.label)


def _refusal(path: Path, base: Path) -> str:
    if os.path.islink(path):
        return "a symbolic link: submit the notebook itself"
    if not path.resolve().is_relative_to(base):
        return "resolves outside the submissions folder"
    return ""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file read once, never through a link, refused above `limit`
    bytes; ValueError saying why otherwise. Submissions and what a sandbox left are read so."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise ValueError(f"cannot open it ({err.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"the file is {info.st_size / 2**20:.0f} MiB (limit "
                             f"{limit / 2**20:.0f} MiB)")
        return handle.read(limit + 1)


def read_notebook(path: Path) -> dict:
    """The submission as JSON, read once without following a link; ValueError when it is not a
    notebook."""
    raw = read_regular(path, MAX_NOTEBOOK_BYTES)
    try:
        notebook = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not valid JSON: {err}") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list) \
            or not all(isinstance(c, dict) for c in notebook["cells"]):
        raise ValueError("JSON without a list of notebook cells")
    if notebook.get("nbformat") != 4:
        raise ValueError(f"nbformat {notebook.get('nbformat')!r}, expected 4")
    return notebook


def load_exercises(root: Path) -> dict[str, dict]:
    """slug -> the generated exercise notebook (as plain JSON)."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((root / "exercises").glob("*.ipynb"))}


def match_exercise(name: str, cells: list[dict], exercises: dict[str, dict]) -> str | None:
    """The slug of the exercise notebook this submission answers: by file name, else by the
    grading cell ids it shares."""
    for slug in sorted(exercises, key=len, reverse=True):
        if slug in name:
            return slug
    ids = {c.get("id") for c in cells}
    best, best_score = None, 0
    for slug, nb in exercises.items():
        grading_ids = {c.get("id") for c in nb["cells"] if scan.is_grading_id(c.get("id"))}
        score = len(grading_ids & ids)
        if score > best_score:
            best, best_score = slug, score
    return best


def check_cells(pristine: dict) -> dict[str, tuple[str, str]]:
    """exercise id -> (grading cell id, the name the cell passes) of an exercise notebook."""
    found = {}
    for cell in pristine["cells"]:
        call = CHECK_CALL.search(scan.cell_source(cell))
        if scan.is_grading_id(cell.get("id")) and call:
            found[call.group(1)] = (cell["id"], call.group(2))
    return found


def answer_ids(pristine: dict) -> set[str]:
    """Ids of the cells a student fills in: those holding a blank or a stub in the exercise."""
    return {c["id"] for c in pristine["cells"] if c.get("cell_type") == "code" and c.get("id")
            and not scan.is_grading_id(c["id"]) and any(
                mark in scan.cell_source(c) for mark in ("______", "NotImplementedError"))}


def build_run_notebook(submitted: dict, pristine: dict) -> dict:
    """The submission's code cells with every grading cell from the pristine exercise notebook;
    deleted grading cells are put back after their predecessor. Cell metadata is dropped (tags
    such as raises-exception or skip must not change grading)."""
    pristine_cells = pristine["cells"]
    grading = {c["id"]: c for c in pristine_cells if scan.is_grading_id(c.get("id"))}
    out: list[dict] = []
    placed: set[str] = set()
    used_ids: set[str] = set()
    for number, cell in enumerate(submitted.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        cell_id = cell.get("id")
        if cell_id in grading and cell_id not in placed:
            source = scan.cell_source(grading[cell_id])
            placed.add(cell_id)
        else:
            source = scan.cell_source(cell)
            if not isinstance(cell_id, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}",
                                                                cell_id) \
                    or cell_id in used_ids or cell_id in grading:
                cell_id = f"student-{number:03d}"
        used_ids.add(cell_id)
        out.append(_code_cell(cell_id, source))
    for index, cell in enumerate(pristine_cells):  # put deleted grading cells back
        cell_id = cell.get("id")
        if cell_id not in grading or cell_id in placed:
            continue
        ids = [c["id"] for c in out]
        position = 0  # after the nearest earlier pristine cell still present, else first
        for before in reversed(pristine_cells[:index]):
            if before.get("id") in ids:
                position = ids.index(before["id"]) + 1
                break
        out.insert(position, _code_cell(cell_id, scan.cell_source(cell)))
        placed.add(cell_id)
    return {"cells": out, "metadata": pristine.get("metadata", {}), "nbformat": 4,
            "nbformat_minor": 5}


def _code_cell(cell_id: str, source: str) -> dict:
    return {"cell_type": "code", "id": cell_id, "metadata": {}, "source": source,
            "outputs": [], "execution_count": None}


@dataclass
class Job:
    """A submission ready for its sandbox."""
    sub: Submission
    lesson: object  # registry.Lesson
    checks: dict[str, tuple[str, str]]  # exercise id -> (grading cell id, answer name)
    notebook: dict  # the notebook the sandbox runs
    refused: dict[str, str]  # exercise id -> why its answer earns nothing (not a real kernel)
    answer_cells: dict[str, list[str]] = field(default_factory=dict)  # exercise -> its cells
    blank: dict[str, str] = field(default_factory=dict)  # exercise -> why it is unanswered
    budget_cells: int = 1  # code cells of the exercise notebook: the run's time budget


def prepare(item: Found, exercises: dict[str, dict]) -> tuple[Submission, Job | None]:
    """Read, match and scan one submission; no job when it cannot run."""
    from ..checks import registry

    sub = Submission(label=item.label, path=str(item.path))
    if item.refused:
        sub.status = REFUSED
        sub.problems.append(f"refused: {item.refused}")
        return sub, None
    try:
        submitted = read_notebook(item.path)
    except ValueError as err:
        sub.status = MALFORMED
        sub.problems.append(f"malformed notebook: {printable(str(err))}")
        return sub, None
    cells = submitted["cells"]
    slug = match_exercise(item.path.name, cells, exercises)
    checks = check_cells(exercises[slug]) if slug else {}
    lesson_ids = {ex.split("/")[0] for ex in checks}
    lesson = registry.LESSONS.get(next(iter(lesson_ids), "")) if len(lesson_ids) == 1 else None
    if lesson is None:
        sub.status = UNMATCHED
        sub.problems.append("matches no exercise notebook (neither by file name nor by grading "
                            "cell ids)")
        return sub, None
    pristine = exercises[slug]
    sub.lesson, sub.lesson_title = slug, lesson.title
    sub.total, sub.pass_line = lesson.total_points, lesson.pass_line

    sub.tampering += scan.compare_grading_cells(pristine["cells"], cells)
    sub.tampering += [str(f) for f in scan.scan_student_cells(cells)]
    sub.tampering += [str(f) for f in scan.reference_calls(cells, answer_ids(pristine))]
    kernels = {ex.id: checks[ex.id][1] for ex in lesson.exercises
               if ex.kernel and ex.id in checks}
    refused = {}
    for problem in scan.kernel_problems(cells, kernels):
        exercise_id = problem.split(":", 1)[0]
        refused[exercise_id] = problem.split(": ", 1)[1]
        sub.tampering.append(problem)
    submitted_ids = {c.get("id") for c in cells}
    for cell_id in sorted(answer_ids(pristine) - submitted_ids):
        sub.problems.append(f"answer cell `{cell_id}` is missing (deleted?)")
    sub.open_answers = open_answers(pristine, cells)
    answer_cells = answers.answer_cells(pristine, checks)
    return sub, Job(sub, lesson, checks, build_run_notebook(submitted, pristine), refused,
                    answer_cells, answers.blank_answers(pristine, cells, answer_cells),
                    sum(c.get("cell_type") == "code" for c in pristine["cells"]))


def open_answers(pristine: dict, cells: list[dict]) -> dict[str, str]:
    """The student's text in each markdown cell the exercise notebook names `open-*`."""
    wanted = {c["id"] for c in pristine["cells"]
              if c.get("cell_type") == "markdown" and str(c.get("id", "")).startswith("open-")}
    return {c["id"]: scan.cell_source(c)[:20_000] for c in cells
            if c.get("cell_type") == "markdown" and c.get("id") in wanted}
