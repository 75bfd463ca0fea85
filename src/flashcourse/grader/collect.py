"""Finding and reading submissions, matching each to its lesson, and building the notebook the
sandbox runs (grader side; nothing here runs student code)."""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import select
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import i18n
from ..workspace import MOVED  # lessons renamed or split since an earlier edition
from . import answers, scan, validate
from .submission import MALFORMED, REFUSED, UNMATCHED, Submission

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024  # a submission larger than this is refused unread
CHECK_CALL = re.compile(r"""check\(\s*["']([^"']+)["']\s*,\s*([A-Za-z_]\w*)\s*\)""")


LABEL_CHARS = 400  # a label's length, escapes included, before it is cut
STUDENT_CHARS = 64  # of a student id read from a notebook's metadata, escapes included
# `./course reset` keeps old copies in work/backups/ as NN-slug.before-reset-DATE.ipynb
BACKUP_FOLDER, BACKUP_MARK = "backups", ".before-reset-"
BACKUP_REFUSAL = "a backup copy, not a submission"


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
    under two folders given, or names that print alike) are numbered, saying so. Backups of
    `./course reset` (under a `backups/` folder, or named `*.before-reset-*`) are refused: they
    are never graded as another attempt."""
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
        refused = "a symbolic link: submit the notebook itself" if os.path.islink(path) else \
            BACKUP_REFUSAL if is_backup(Path(path.parent.name) / path.name) else ""
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


def is_backup(relative: Path) -> bool:
    """True for a copy `./course reset` set aside: `relative` (to the folder given) lies under
    a `backups/` folder or its name holds `.before-reset-`."""
    return BACKUP_MARK in relative.name or BACKUP_FOLDER in relative.parts[:-1]


def _refusal(path: Path, base: Path) -> str:
    if os.path.islink(path):
        return "a symbolic link: submit the notebook itself"
    if not path.resolve().is_relative_to(base):
        return "resolves outside the submissions folder"
    if is_backup(path.relative_to(base)):
        return BACKUP_REFUSAL
    return ""


_OTHER_FILES = ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                (stat.S_ISFIFO, "a FIFO, a named pipe"), (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
# Opening never blocks (a FIFO), follows a link, or makes a terminal the controlling one.
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))


def _not_regular(mode: int) -> str:
    kind = next((name for test, name in _OTHER_FILES if test(mode)), "of another kind")
    return f"not a regular file: {kind}"


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file read once, never through a link, refused above `limit`
    bytes; ValueError saying why otherwise. Submissions and what a sandbox left are read so.
    Nothing else is opened (a FIFO would block the grader, a device would never end): its kind
    is checked before opening, and again on what was opened, in case it was swapped."""
    try:
        if not stat.S_ISREG(mode := os.lstat(path).st_mode):
            raise ValueError(_not_regular(mode))
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        raise ValueError(f"cannot open it ({err.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(_not_regular(info.st_mode))
        if info.st_size > limit:
            raise ValueError(f"the file is {info.st_size / 2**20:.0f} MiB (limit "
                             f"{limit / 2**20:.0f} MiB)")
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while it was read
        raise ValueError(f"the file is over {limit / 2**20:.0f} MiB (its limit)")
    return data


def read_notebook(path: Path) -> dict:
    """The submission read once without following a link, parsed under a bound on its nesting
    and checked as data (`validate.notebook`): only cells with text ids and sources come back.
    ValueError saying why when it is not a notebook. Of the notebook's metadata only
    `flashcourse.student` (`./course submit` writes it), as escaped text, and
    `flashcourse.lang`, as written (`metadata_lang` reads it), are kept."""
    data = validate.parse_json(read_regular(path, MAX_NOTEBOOK_BYTES))
    clean = validate.notebook(data)
    kept = {"student": metadata_student(data)}
    course = data.get("metadata", {}).get("flashcourse") \
        if isinstance(data.get("metadata"), dict) else None
    if isinstance(course, dict) and "lang" in course:
        kept["lang"] = course["lang"]
    kept = {key: value for key, value in kept.items() if value}
    if kept:
        clean["metadata"] = {"flashcourse": kept}
    return clean


def metadata_lang(data: dict) -> tuple[str, str]:
    """(language, note): `metadata.flashcourse.lang` of a notebook read by `read_notebook` when
    the course speaks it, else English with a note saying why ("" when there is nothing to
    say). The language changes the messages of its report, never a point."""
    course = data.get("metadata", {}).get("flashcourse", {})
    lang = course.get("lang", i18n.SOURCE_LANGUAGE) if isinstance(course, dict) else None
    try:
        return i18n.validate(lang) if isinstance(lang, str) else i18n.SOURCE_LANGUAGE, ""
    except i18n.UnknownLanguage:
        return i18n.SOURCE_LANGUAGE, (f"metadata.flashcourse.lang {printable(repr(lang), 40)} "
                                      "is not a language of the course: its report is in "
                                      "English")


def metadata_student(data: dict) -> str:
    """`metadata.flashcourse.student` of a parsed notebook when it is text, control characters
    escaped and cut to STUDENT_CHARS; "" when it is absent or not text."""
    metadata = data.get("metadata")
    course = metadata.get("flashcourse") if isinstance(metadata, dict) else None
    student = course.get("student") if isinstance(course, dict) else None
    return printable(student.strip(), STUDENT_CHARS) if isinstance(student, str) else ""


def load_exercises(root: Path, lang: str = i18n.SOURCE_LANGUAGE) -> dict[str, dict]:
    """slug -> the generated exercise notebook (as plain JSON), of the English edition
    (`exercises/`) or of a translated one (`exercises/<lang>/`)."""
    folder = root / "exercises" if lang == i18n.SOURCE_LANGUAGE else root / "exercises" / lang
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(folder.glob("*.ipynb"))}


def load_editions(root: Path) -> dict[str, dict[str, dict]]:
    """lang -> slug -> exercise notebook, of every translated edition that is built. A
    translation shares the English's code and grading cells; its answer cells' comments and
    open-answer prompts are what its own untouched notebook holds."""
    return {lang: load_exercises(root, lang) for lang in i18n.LANGUAGES
            if lang != i18n.SOURCE_LANGUAGE}


def pristine_of(exercises: dict[str, dict], slug: str, lang: str,
                editions: dict[str, dict[str, dict]] | None) -> dict:
    """The exercise notebook a submission in `lang` was handed out as: its edition's, else the
    English one (the editions share every grading cell)."""
    return (editions or {}).get(lang, {}).get(slug) or exercises[slug]


def slug_in_name(name: str, exercises: dict[str, dict]) -> str | None:
    """The slug of the exercise notebook a file name names (the longest that it holds)."""
    return next((slug for slug in sorted(exercises, key=len, reverse=True) if slug in name),
                None)


def match_exercise(name: str, cells: list[dict], exercises: dict[str, dict]) -> str | None:
    """The slug of the exercise notebook this submission answers: by file name, else by the
    grading cell ids it shares."""
    named = slug_in_name(name, exercises)
    if named:
        return named
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
    return {c["id"] for c in pristine["cells"] if answers.is_answer_cell(c)}


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


def split_lesson(name: str, exercises: dict[str, dict]) -> str | None:
    """The old lesson a file name names, when the course has since split that lesson in two
    (workspace.MOVED) and the name names no lesson of today: grading it as one of the halves
    would score the other half's answers as missing."""
    if any(slug in name for slug in exercises):
        return None
    return next((old for old, new in MOVED.items() if len(new) > 1 and old in name), None)


def prepare(item: Found, exercises: dict[str, dict],
            editions: dict[str, dict[str, dict]] | None = None) -> tuple[Submission, Job | None]:
    """Read, match and scan one submission; no job when it cannot run. Whatever the notebook
    holds, this returns: one that cannot be read, or whose scan fails or runs past
    SCAN_SECONDS, gets a MALFORMED line of its own and the class goes on. `editions`
    (`load_editions`): the translated exercise notebooks, for a submission in another
    language."""
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
        return lesson_from_name(sub, item.path, exercises), None
    sub.metadata_student = submitted["metadata"].get("flashcourse", {}).get("student", "")
    sub.lang, note = metadata_lang(submitted)
    if note:
        sub.notes.append(note)
    try:
        return _prepare_notebook(sub, item, submitted, exercises, editions)
    except Exception as err:  # noqa: BLE001  (a RecursionError, a MemoryError, a bug: this one)
        why = str(err) if isinstance(err, ScanFailed) else f"{type(err).__name__}: {err}"
        failed = Submission(label=item.label, path=str(item.path), status=MALFORMED)
        failed.problems.append(f"malformed notebook: it could not be scanned ("
                               f"{printable(why, 300)}); nothing of it was run. Split very "
                               "long expressions or cells, then submit it again")
        return lesson_from_name(failed, item.path, exercises), None


def lesson_of(slug: str, exercises: dict[str, dict]):
    """The registered lesson whose grading cells the exercise notebook `slug` holds, or None."""
    from ..checks import registry

    lesson_ids = {ex.split("/")[0] for ex in check_cells(exercises[slug])}
    return registry.LESSONS.get(next(iter(lesson_ids), "")) if len(lesson_ids) == 1 else None


def _take_lesson(sub: Submission, slug: str, lesson) -> None:
    sub.lesson, sub.lesson_title = slug, lesson.title
    sub.total, sub.pass_line = lesson.total_points, lesson.pass_line


def lesson_from_name(sub: Submission, path: Path, exercises: dict[str, dict]) -> Submission:
    """A submission that cannot be read or scanned still belongs to the lesson its file name
    names, when it names one: its place in students.csv and its total out of that lesson's
    points (its written answers, unread, score 0)."""
    slug = slug_in_name(path.name, exercises)
    lesson = lesson_of(slug, exercises) if slug else None
    if lesson is not None:
        _take_lesson(sub, slug, lesson)
    return sub


def _prepare_notebook(sub: Submission, item: Found, submitted: dict,
                      exercises: dict[str, dict],
                      editions: dict[str, dict[str, dict]] | None = None
                      ) -> tuple[Submission, Job | None]:
    cells = submitted["cells"]
    split = split_lesson(item.path.name, exercises)
    if split:
        sub.status = UNMATCHED
        sub.problems.append(
            f"this is lesson {split} of an earlier edition of the course, which split it into "
            f"{' and '.join(MOVED[split])}: ./course update carries the answers over into "
            "them (the old copy is kept in work/backups/); submit each of them")
        return sub, None
    slug = match_exercise(item.path.name, cells, exercises)
    checks = check_cells(exercises[slug]) if slug else {}
    lesson = lesson_of(slug, exercises) if slug else None
    if lesson is None:
        sub.status = UNMATCHED
        sub.problems.append("matches no exercise notebook (neither by file name nor by grading "
                            "cell ids)")
        return sub, None
    pristine = pristine_of(exercises, slug, sub.lang, editions)
    _take_lesson(sub, slug, lesson)

    kernels = {ex.id: checks[ex.id][1] for ex in lesson.exercises
               if ex.kernel and ex.id in checks}
    answer_cells = answers.answer_cells(pristine, checks)
    scanned = scan_isolated(pristine, cells, kernels, answer_cells)
    sub.tampering += scanned.tampering
    refused = {}
    for problem in scanned.kernel_problems:
        exercise_id = problem.split(":", 1)[0]
        refused[exercise_id] = problem.split(": ", 1)[1]
        sub.tampering.append(problem)
    submitted_ids = {c.get("id") for c in cells}
    for cell_id in sorted(answer_ids(pristine) - submitted_ids):
        sub.problems.append(f"answer cell `{cell_id}` is missing (deleted?)")
    sub.open_answers = open_answers(pristine, cells)
    return sub, Job(sub, lesson, checks, build_run_notebook(submitted, pristine), refused,
                    answer_cells, scanned.blank,
                    sum(c.get("cell_type") == "code" for c in pristine["cells"]))


# ---------------------------------------------------------------- the scan, in its own process
# Parsing and walking a submission's cells takes time and memory that grow with what they hold
# (a cell of magics took minutes; a long expression exhausts the recursion limit). So the scan
# runs in a process of its own, under a memory cap, one submission at a time, and a scan past
# SCAN_SECONDS is killed with its process: that submission gets a line, the class goes on. The
# process is started once (it imports the course) and again only after one was killed.

SCAN_SECONDS = 30.0  # per submission; the lessons' notebooks scan in a fraction of a second
SCANNER_START_SECONDS = 600.0  # for the scanning process to import the course (not a scan's)
SCAN_MEMORY_BYTES = 2 * 2**30  # address space the scan may take beyond the imports
SCAN_ANSWER_BYTES = 16 * 2**20  # the most the scanning process may answer about one notebook
MAX_FINDINGS = 200  # tampering lines kept from one scan; the rest are counted
_SCANNER_START = "from flashcourse.grader.collect import _scan_server; _scan_server()"


class ScanFailed(Exception):
    """The static scan of one submission raised, ran out of memory, or ran out of time."""


@dataclass
class Scanned:
    """What the static scan found in one submission's cells."""
    tampering: list[str]  # edited grading cells, patching, reference calls
    kernel_problems: list[str]  # "exercise id: why its answer is not a @triton.jit kernel"
    blank: dict[str, str]  # exercise id -> why its answer earns nothing (still blank)


def scan_sources(pristine: dict, cells: list[dict], kernels: dict[str, str],
                 answer_cells: dict[str, list[str]]) -> Scanned:
    """Every check that parses or tokenises the student's cells (`scan`, `answers`)."""
    tampering = scan.compare_grading_cells(pristine["cells"], cells)
    tampering += [str(f) for f in scan.scan_student_cells(cells)]
    tampering += [str(f) for f in scan.reference_calls(cells, answer_ids(pristine),
                                                       pristine["cells"])]
    if len(tampering) > MAX_FINDINGS:
        tampering[MAX_FINDINGS:] = [f"... and {len(tampering) - MAX_FINDINGS:,} more findings "
                                    "of the scan"]
    return Scanned(tampering, scan.kernel_problems(cells, kernels),
                   answers.blank_answers(pristine, cells, answer_cells))


_scanner: subprocess.Popen | None = None
_scanner_lock = threading.Lock()


def scan_isolated(pristine: dict, cells: list[dict], kernels: dict[str, str],
                  answer_cells: dict[str, list[str]],
                  seconds: float = SCAN_SECONDS) -> Scanned:
    """`scan_sources(...)` run in the scanning process; ScanFailed when it raises, runs out of
    memory, or runs past `seconds` (the process is then killed, and started again next time)."""
    request = json.dumps({"pristine": pristine, "cells": cells, "kernels": kernels,
                          "answer_cells": answer_cells}).encode() + b"\n"
    with _scanner_lock:
        process = _scanner_process()
        try:  # the scanning process reads all of it before it scans, so this cannot block
            process.stdin.write(request)
            process.stdin.flush()
            line = _read_line(process.stdout.fileno(), seconds)
        except (OSError, ScanFailed) as err:
            stop_scanner()
            why = err if isinstance(err, ScanFailed) else "its scan ended without a result"
            raise ScanFailed(str(why)) from None
    answer = json.loads(line)
    if "failed" in answer:
        raise ScanFailed(answer["failed"])
    return Scanned(**answer["done"])


def _scanner_process() -> subprocess.Popen:
    global _scanner
    if _scanner is None or _scanner.poll() is not None:
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        _scanner = subprocess.Popen(  # stderr dropped: parsing student code may warn
            [sys.executable, "-c", _SCANNER_START], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0,
            env={**os.environ, "PYTHONPATH": path})
        try:  # its imports take seconds on a busy machine: they are not the scan's time
            _read_line(_scanner.stdout.fileno(), SCANNER_START_SECONDS)
        except (OSError, ScanFailed):
            stop_scanner()
            raise ScanFailed("the scanning process did not start") from None
    return _scanner


def stop_scanner() -> None:
    """End the scanning process (it is started again when a scan needs it)."""
    global _scanner
    if _scanner is not None:
        _scanner.kill()
        _scanner.wait()
        _scanner = None


atexit.register(stop_scanner)


def _read_line(fd: int, seconds: float) -> bytes:
    """One line from `fd` within `seconds`: ScanFailed past them, OSError at the end of the
    stream."""
    deadline, data = time.monotonic() + seconds, b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise ScanFailed(f"its scan ran past {seconds:g} s")
        chunk = os.read(fd, 2**20)
        if not chunk:
            raise OSError("the scanning process ended")
        data += chunk
        if len(data) > SCAN_ANSWER_BYTES:
            raise ScanFailed("its scan found too much to report")
    return data


def _scan_server() -> None:
    """The scanning process: one JSON request a line on stdin, one JSON answer a line on
    stdout; it ends with its stdin, or after running out of memory."""
    answers_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever else prints goes where stderr goes (nowhere)
    _limit_memory(SCAN_MEMORY_BYTES)
    answers_out.write('{"ready": true}\n')
    answers_out.flush()
    for line in sys.stdin:
        try:
            answer = {"done": dataclasses.asdict(scan_sources(**json.loads(line)))}
        except Exception as err:  # noqa: BLE001  (RecursionError, MemoryError: the grader says)
            answer = {"failed": f"{type(err).__name__}: {str(err)[:300]}"}
        answers_out.write(json.dumps(answer) + "\n")
        answers_out.flush()
        if "failed" in answer and answer["failed"].startswith("MemoryError"):
            return  # a fresh process for the next submission


def _limit_memory(extra: int) -> None:
    """Cap this process's address space at what it maps now plus `extra` bytes (Linux; where
    that cannot be read, the time limit alone holds)."""
    try:
        import resource

        with open("/proc/self/statm", encoding="ascii") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = mapped + extra if hard == resource.RLIM_INFINITY else min(hard, mapped + extra)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError):
        pass


def open_answers(pristine: dict, cells: list[dict]) -> dict[str, str]:
    """The student's text in each markdown cell the exercise notebook names `open-*`."""
    wanted = {c["id"] for c in pristine["cells"]
              if c.get("cell_type") == "markdown" and str(c.get("id", "")).startswith("open-")}
    return {c["id"]: scan.cell_source(c)[:20_000] for c in cells
            if c.get("cell_type") == "markdown" and c.get("id") in wanted}
