"""`python -m flashcourse grade PATH... [--out DIR] [--jobs N] [--timeout S]`: grade submitted
notebooks.

For each submission the grader

1. copies it into a private temporary folder (the submitted file is never written to) and reads
   it; a file that is not a notebook gets a MALFORMED line;
2. finds its lesson: the generated `exercises/<slug>.ipynb` whose name or cell ids it matches;
3. compares every grading cell (`setup`, `check-*`, `scorecard`) with that exercise notebook and
   scans the student's cells with `ast` for rebinding or patching what grading relies on
   (grade_tamper.py);
4. builds the notebook it runs: the student's cells, with every grading cell taken from the
   pristine exercise notebook (so an edited check cannot run), a first injected cell that
   snapshots numpy, builtins and the course package, and a last injected cell that writes
   `grading.RESULTS`, `VETOES_HIT` and whatever in the snapshot was patched, with a random
   marker, to `$FLASHCOURSE_GRADE_RESULTS/<notebook>.json`.

Then one `python -m pytest --nbval-lax` run executes every prepared notebook (in parallel with
pytest-xdist, `--dist loadscope`, when there are several and --jobs > 1), each in a fresh kernel
with FLASHCOURSE_GRADING=1 so hidden cases run, with nbval's per-cell timeout (the cell is
interrupted, later cells still run). Every cell is a test item; a failing student cell is just a
failed item. The small pytest plugin at the end of this module (loaded with
`-p flashcourse.grade`) caps stored output, notices a dead kernel at once, keeps each failure
message in pytest's JUnit XML short (`ename: evalue`) and writes the executed notebooks.

Each exercise is scored from the lesson's registry (`flashcourse.grading.LESSONS`): it earns its
points only when its pristine grading cell passed in pytest's JUnit XML and the check recorded
it in the results file. A failed check's message (the hint) comes from the JUnit failure text.
Nothing the submission prints about its own score is read.

It prints a scorecard and writes `scorecard.txt`, `results.csv`, `junit.xml`, `progress.html`,
`results.json`, pytest's own `pytest-junit.xml` and the executed copies (`executed/`) under
--out. Exit status 0 when every submission passed, 1 otherwise, 2 when there was nothing to
grade.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import bench
from . import grade_tamper as tamper

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024  # a submission larger than this is refused unread
OUTPUT_LIMIT = 100_000  # characters of output kept per cell; the rest is dropped
STDOUT_KEPT = 20_000  # characters of a cell's stdout the scorer looks at
FAILURE_CHARS = 2_000  # characters of a failed cell's message kept in pytest's JUnit XML
DEFAULT_TIMEOUT = 120  # seconds per cell
RESULTS_DIR_ENV = "FLASHCOURSE_GRADE_RESULTS"  # folder of the report files, set for pytest
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
SNAPSHOT_ID, RESULTS_ID = "fcgrade-snapshot", "fcgrade-results"
CHECK_CALL = re.compile(r"""check\(\s*["']([^"']+)["']""")

# Statuses of a submission, worst first when several apply.
MALFORMED, UNMATCHED, TAMPERED, CRASHED, TIMEOUT, FAIL, PASS = (
    "MALFORMED", "UNMATCHED", "TAMPERED", "CRASHED", "TIMEOUT", "FAIL", "PASS")


@dataclass
class ExerciseResult:
    id: str
    title: str
    kind: str  # "code", "question" or "veto"
    points: float
    earned: float = 0.0
    status: str = "not run"  # pass, wrong, blank, veto, error, timeout, not run, kernel died
    message: str = ""


@dataclass
class Submission:
    label: str  # path relative to the graded folder
    path: str
    status: str = FAIL
    lesson: str = ""
    lesson_title: str = ""
    earned: float = 0.0
    total: float = 10.0
    pass_line: float = 8.0
    exercises: list[ExerciseResult] = field(default_factory=list)
    vetoes: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed, crash, timeouts, deletions
    notes: list[str] = field(default_factory=list)  # harmless remarks (truncated output)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASS


# ---------------------------------------------------------------- finding notebooks


def course_root(start: Path | None = None) -> Path:
    """The folder holding exercises/: above the working directory, else above this package."""
    for base in [start or Path.cwd(), Path(__file__).resolve().parent]:
        for folder in [base, *base.parents]:
            if (folder / "exercises").is_dir() and (folder / "lessons").is_dir():
                return folder
    raise FileNotFoundError("cannot find the course folder (with exercises/ and lessons/); "
                            "pass --root")


def collect(paths: list[Path]) -> tuple[list[tuple[Path, str]], list[str]]:
    """(notebook, label) pairs from files and folders, and the paths that do not exist."""
    found: list[Path] = []
    missing: list[str] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb")
                            if ".ipynb_checkpoints" not in p.parts and p.is_file())
        elif path.is_file():
            found.append(path)
        else:
            missing.append(str(path))
    resolved = [p.resolve() for p in found]
    if not resolved:
        return [], missing
    base = Path(os.path.commonpath([p.parent for p in resolved]))
    seen, pairs = set(), []
    for path in resolved:
        if path not in seen:
            seen.add(path)
            pairs.append((path, str(path.relative_to(base))))
    return pairs, missing


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
        grading_ids = {c.get("id") for c in nb["cells"]
                       if (c.get("id") or "").startswith(tamper.CHECK_PREFIX)}
        score = len(grading_ids & ids)
        if score > best_score:
            best, best_score = slug, score
    return best


# ---------------------------------------------------------------- the notebook that runs

INTEGRITY_WATCHED = ["builtins", "json", "math", "numpy", "numpy.linalg", "numpy.random",
                     "flashcourse", "flashcourse.grading", "flashcourse.blanks",
                     "flashcourse.reference", "flashcourse.checks", "flashcourse.grade"]
VOLATILE_BUILTINS = {"input", "raw_input", "getpass", "get_ipython", "exit", "quit", "display"}
_SNAPSHOT: dict[str, tuple[object, dict]] = {}


def _watched_modules() -> list[str]:
    names = list(INTEGRITY_WATCHED)
    names += sorted(n for n in sys.modules if n.startswith("flashcourse.checks."))
    names += [n for n in ("torch", "torch.testing", "triton") if n in sys.modules]
    return names


def integrity_snapshot() -> None:
    """Run inside the kernel before any student code: remember every watched object."""
    import importlib

    from . import grading

    grading._load_checks()
    for name in _watched_modules():
        module = importlib.import_module(name)
        _SNAPSHOT[name] = (module, dict(vars(module)))
    _SNAPSHOT["<checks>"] = (None, {k: e.run for k, e in grading.EXERCISES.items()})


def integrity_changes() -> list[str]:
    """Run inside the kernel after the student's code: what was rebound or replaced."""
    from . import grading

    changed = []
    for name, (module, before) in _SNAPSHOT.items():
        if module is None:
            now = {k: e.run for k, e in grading.EXERCISES.items()}
        else:
            if sys.modules.get(name) is not module:
                changed.append(f"sys.modules[{name!r}] was replaced")
                continue
            now = vars(module)
        for key, value in before.items():
            if name == "builtins" and (key in VOLATILE_BUILTINS or key.startswith("_") and key
                                       not in ("__import__", "__build_class__")):
                continue  # rebound by IPython and ipykernel around every cell
            if now.get(key, _SNAPSHOT) is not value:
                changed.append(f"{name}.{key}" if module is not None else
                               f"the check of {key}")
    return changed


def _snapshot_cell() -> dict:
    source = "import flashcourse.grade as _fc_grade\n_fc_grade.integrity_snapshot()\ndel _fc_grade"
    return {"cell_type": "code", "id": SNAPSHOT_ID, "metadata": {}, "source": source,
            "outputs": [], "execution_count": None}


def write_report(marker: str, name: str) -> None:
    """Run inside the kernel as the last cell: write what the checks recorded, the vetoes hit
    and what was patched, with the grader's random marker, to `<name>.json` in the folder
    named by $FLASHCOURSE_GRADE_RESULTS."""
    from . import grading

    report = {"marker": marker, "results": dict(grading.RESULTS),
              "vetoes": dict(grading.VETOES_HIT), "changed": integrity_changes()}
    path = Path(os.environ[RESULTS_DIR_ENV]) / f"{name}.json"
    path.write_text(json.dumps(report), encoding="utf-8")


def _results_cell(nonce: str, name: str) -> dict:
    source = ("import flashcourse.grade as _fc_grade\n"
              f"_fc_grade.write_report({nonce!r}, {name!r})\ndel _fc_grade")
    return {"cell_type": "code", "id": RESULTS_ID, "metadata": {}, "source": source,
            "outputs": [], "execution_count": None}


def build_run_notebook(submitted: dict, pristine: dict, nonce: str, name: str = "run") -> dict:
    """The submission's cells with every grading cell from the pristine exercise notebook,
    deleted grading cells put back after their predecessor, and the two injected cells (the
    last writes its report to `<name>.json`)."""
    pristine_cells = pristine["cells"]
    grading = {c["id"]: c for c in pristine_cells if tamper.is_grading_id(c.get("id"))}
    out: list[dict] = []
    placed: set[str] = set()
    used_ids: set[str] = set()
    for number, cell in enumerate(submitted.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        cell_id = cell.get("id")
        if cell_id in grading and cell_id not in placed:
            new = dict(grading[cell_id], source=tamper.cell_source(grading[cell_id]))
            placed.add(cell_id)
        else:
            new = {"cell_type": "code", "metadata": {}, "source": tamper.cell_source(cell)}
            if not cell_id or cell_id in used_ids or cell_id in grading or \
                    cell_id in (SNAPSHOT_ID, RESULTS_ID):
                cell_id = f"student-{number:03d}"
        new.update(id=cell_id, outputs=[], execution_count=None)
        new["metadata"] = {}  # tags such as raises-exception or skip must not change grading
        used_ids.add(cell_id)
        out.append(new)
    for index, cell in enumerate(pristine_cells):  # put deleted grading cells back
        cell_id = cell.get("id")
        if cell_id not in grading or cell_id in placed:
            continue
        new = dict(cell, source=tamper.cell_source(cell), outputs=[], execution_count=None,
                   metadata={})
        ids = [c["id"] for c in out]
        position = 0  # after the nearest earlier pristine cell still present, else first
        for before in reversed(pristine_cells[:index]):
            if before.get("id") in ids:
                position = ids.index(before["id"]) + 1
                break
        out.insert(position, new)
        placed.add(cell_id)
    cells = [_snapshot_cell(), *out, _results_cell(nonce, name)]
    return {"cells": cells, "metadata": pristine.get("metadata", {}), "nbformat": 4,
            "nbformat_minor": 5}


# ---------------------------------------------------------------- preparing one submission


def _first_line(text: str, limit: int = 240) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else \
        (lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _message(text: str, limit: int = 600) -> str:
    """A check's failure message on one line: case, error, where, and the hint."""
    line = " ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass
class _Job:
    """A submission prepared for the pytest run."""
    sub: Submission
    lesson: object
    check_cells: dict[str, str]  # exercise id -> grading cell id
    nonce: str
    notebook: Path  # the run notebook, alone in its folder (the kernel's working directory)
    cell_ids: list[str]  # ids of its code cells: pytest's "Cell N" is cell_ids[N]
    seconds: float  # spent preparing


def _safe_name(label: str) -> str:
    stem = label[:-6] if label.endswith(".ipynb") else label
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem.replace(os.sep, "__").replace("/", "__"))[:80]


def prepare(work: Path, number: int, path: Path, label: str,
            exercises: dict[str, dict]) -> tuple[Submission, _Job | None]:
    """Copy, read, match, scan and build the run notebook of one submission; no job when the
    submission cannot run (malformed, unmatched)."""
    from . import grading

    grading._load_checks()
    started = time.monotonic()
    sub = Submission(label=label, path=str(path))
    name = f"s{number:03d}-{_safe_name(label)}"
    folder = work / f"s{number:03d}"
    folder.mkdir(parents=True)

    # 1. a private copy; the submitted file is only read, once
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"the file is {size / 2**20:.0f} MiB (limit "
                             f"{MAX_NOTEBOOK_BYTES / 2**20:.0f} MiB)")
        copy = work / f"{name}.submitted"
        shutil.copyfile(path, copy)
        text = copy.read_text(encoding="utf-8", errors="strict")
        submitted = json.loads(text)
        if not isinstance(submitted, dict) or not isinstance(submitted.get("cells"), list) \
                or not all(isinstance(c, dict) for c in submitted["cells"]):
            raise ValueError("JSON without a list of notebook cells")
        if submitted.get("nbformat") != 4:
            raise ValueError(f"nbformat {submitted.get('nbformat')!r}, expected 4")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        sub.status = MALFORMED
        kind = "not valid JSON" if isinstance(err, json.JSONDecodeError) else "not a notebook"
        sub.problems.append(f"malformed notebook ({kind}): {_first_line(str(err))}")
        sub.seconds = round(time.monotonic() - started, 2)
        return sub, None
    cells = submitted["cells"]

    # 2. which lesson
    slug = match_exercise(path.name, cells, exercises)
    lesson = None
    if slug is None:
        sub.problems.append("matches no exercise notebook (neither by file name nor by "
                            "grading cell ids)")
    else:
        pristine = exercises[slug]
        check_cells: dict[str, str] = {}
        for cell in pristine["cells"]:
            found = CHECK_CALL.search(tamper.cell_source(cell))
            if tamper.is_grading_id(cell.get("id")) and found:
                check_cells[found.group(1)] = cell["id"]
        lesson_ids = {ex.split("/")[0] for ex in check_cells}
        lesson = grading.LESSONS.get(next(iter(lesson_ids), ""))
        if lesson is None:
            sub.problems.append(f"exercises/{slug}.ipynb names no registered lesson")
    if lesson is None:
        sub.status = UNMATCHED
        sub.seconds = round(time.monotonic() - started, 2)
        return sub, None
    sub.lesson, sub.lesson_title = lesson.id, lesson.title
    sub.total, sub.pass_line = lesson.total_points, lesson.pass_line

    # 3. tampering: grading cells as generated, student cells leave grading alone
    sub.tampering += tamper.compare_grading_cells(pristine["cells"], cells)
    sub.tampering += [str(f) for f in tamper.scan_student_cells(cells)]
    submitted_ids = {c.get("id") for c in cells}
    for cell in pristine["cells"]:
        cell_id = cell.get("id", "")
        if cell.get("cell_type") == "code" and not tamper.is_grading_id(cell_id) and \
                not cell_id.startswith("cell-") and cell_id not in submitted_ids:
            sub.problems.append(f"answer cell `{cell_id}` is missing (deleted?)")

    # 4. the pristine grading cells after the student's cells, and the two injected cells
    nonce = "FCGRADE-" + secrets.token_hex(16)
    run_nb = build_run_notebook(submitted, pristine, nonce, name)
    notebook = folder / f"{name}.ipynb"
    notebook.write_text(json.dumps(run_nb), encoding="utf-8")
    return sub, _Job(sub, lesson, check_cells, nonce, notebook,
                     [c["id"] for c in run_nb["cells"] if c["cell_type"] == "code"],
                     time.monotonic() - started)


# ---------------------------------------------------------------- one pytest --nbval run


def nbval_command(work: Path, notebooks: list[Path], jobs: int, timeout: float,
                  junit: Path) -> list[str]:
    command = [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
               f"--nbval-cell-timeout={timeout:g}", "-p", "no:cacheprovider",
               "-p", "flashcourse.grade", "-o", "addopts=", "-o", "junit_logging=no",
               f"--junitxml={junit}", f"--rootdir={work}", "-q", "--color=no"]
    if jobs > 1 and len(notebooks) > 1:
        command += ["-n", str(min(jobs, len(notebooks))), "--dist", "loadscope"]
    return command + [str(nb.relative_to(work)) for nb in notebooks]


def run_notebooks(work: Path, jobs: list[_Job], workers: int, timeout: float,
                  junit: Path) -> tuple[dict[str, list[ET.Element]], str, bool]:
    """Execute every job's notebook in one pytest run; its JUnit test cases per notebook
    (classname -> cases), the tail of its log, and whether it ran past the wall-clock limit."""
    from . import grading

    junit = junit.resolve()  # pytest runs in `work`
    (work / "pytest.ini").write_text("[pytest]\n")  # no course config, no conftest from above
    results = work / "results"
    results.mkdir(exist_ok=True)
    env = dict(os.environ, **{grading.GRADING_MODE_ENV: "1", "MPLBACKEND": "Agg",
                              "PYTHONDONTWRITEBYTECODE": "1", bench.SKIP_ENV: "1",
                              RESULTS_DIR_ENV: str(results)})
    for name in THREAD_VARIABLES:  # one thread per kernel: parallel kernels must not
        env.setdefault(name, "1")  # oversubscribe
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    walls = [timeout * len(job.cell_ids) + 60 for job in jobs]
    parallel = max(1, min(workers, len(jobs)))
    wall = sum(walls) / parallel + max(walls) + 60
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    command = nbval_command(work, [job.notebook for job in jobs], workers, timeout, junit)
    timed_out = False
    with (work / "pytest.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=work, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=wall)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the kernels exit with their parent
            process.wait()
            timed_out = True
    with (work / "pytest.log").open("rb") as log:
        log.seek(max(0, log.seek(0, os.SEEK_END) - 4000))
        tail = log.read().decode(errors="replace")
    cases: dict[str, list[ET.Element]] = {}
    try:
        for case in ET.parse(junit).getroot().iter("testcase"):
            cases.setdefault(case.get("classname", ""), []).append(case)
    except (OSError, ET.ParseError):
        pass
    return cases, tail, timed_out


def _classname(work: Path, notebook: Path) -> str:
    """pytest's JUnit classname of a notebook's cells: its path from the rootdir, dotted."""
    return notebook.relative_to(work).as_posix().replace("/", ".")


FAILURE_LINE = re.compile(r"fcgrade ([a-z ]+): ?(.*)")
ERROR_LINE = re.compile(r"([A-Za-z_][\w.]*): ?(.*)", re.S)


def outcome_of(job: _Job, cases: list[ET.Element], results: Path) -> dict:
    """What each cell did, from pytest's JUnit test cases and the executed notebook."""
    executed_path = results / f"{job.notebook.stem}.executed.ipynb"
    outputs: dict[str, list] = {}
    truncated: dict[str, int] = {}
    try:
        executed = json.loads(executed_path.read_text(encoding="utf-8"))
        outputs = {c.get("id"): c.get("outputs", []) for c in executed["cells"]}
    except (OSError, ValueError, KeyError):
        executed = None
    runs: list[dict] = []
    died = stopped = None
    for case in sorted(cases, key=lambda c: int(c.get("name", "Cell -1").split()[-1])):
        number = int(case.get("name").split()[-1])
        if not 0 <= number < len(job.cell_ids):
            continue
        cell_id = job.cell_ids[number]
        for prop in case.iter("property"):
            if prop.get("name") == "fcgrade_cell_id" and prop.get("value") != cell_id:
                died = died or (f"the grader: pytest's Cell {number} is "
                                f"`{prop.get('value')}`, expected `{cell_id}`")
            if prop.get("name") == "fcgrade_output_dropped":
                truncated[cell_id] = int(prop.get("value"))
        stdout = "".join(o.get("text", "") for o in outputs.get(cell_id, [])
                         if o.get("output_type") == "stream" and o.get("name") == "stdout")
        run = {"id": cell_id, "status": "ok", "ename": "", "evalue": "",
               "stdout": stdout[-STDOUT_KEPT:]}
        bad = case.find("failure")
        if bad is None:
            bad = next((e for e in case.findall("error")
                        if "failed on teardown" not in e.get("message", "")), None)
        if case.find("skipped") is not None and bad is None:
            run["status"] = "skipped"
        elif bad is not None:
            text = bad.text or bad.get("message", "")
            head, _, rest = text.partition("\n")
            found = FAILURE_LINE.match(head)
            kind, what = (found.group(1), found.group(2)) if found else ("grader", head)
            error = ERROR_LINE.match(rest)
            if error:
                run["ename"], run["evalue"] = error.group(1), error.group(2)
            if kind == "not run":
                continue
            if kind == "grader":  # the kernel did not start, or the plugin failed
                died = died or f"the grader: {_first_line(what or rest)}"
                continue
            run["status"] = {"timeout stopped": "timeout", "kernel died": "kernel died",
                             "timeout": "timeout"}.get(kind, "error")
            if kind == "kernel died":
                died = died or cell_id
            elif kind == "timeout stopped":
                stopped = stopped or cell_id
            elif kind == "timeout":
                run["ename"] = "CellTimeout"
        runs.append(run)
    if not cases:
        died = "the grader: pytest ran no cell of this notebook"
    return {"runs": runs, "died": died, "stopped": stopped, "truncated": truncated,
            "ran_nothing": not cases,
            "executed": executed_path if executed is not None else None}


def _read_report(job: _Job, results: Path, runs: dict[str, dict]) -> dict | None:
    """The report the last cell wrote, when that cell passed and the marker is right."""
    if runs.get(RESULTS_ID, {}).get("status") != "ok":
        return None
    try:
        report = json.loads((results / f"{job.notebook.stem}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("marker") != job.nonce:
        return None
    return report


def _score(sub: Submission, job: _Job, outcome: dict, runs: dict[str, dict],
           report: dict | None, timeout: float) -> None:
    """runs: outcome["runs"] by cell id."""
    lesson, check_cells = job.lesson, job.check_cells
    if outcome.get("stopped"):
        sub.status = TIMEOUT
        sub.problems.append(f"cell `{outcome['stopped']}` ran longer than {timeout:g} s and "
                            "could not be interrupted; the notebook was stopped there")
    died = outcome.get("died")
    if died and died.startswith("the grader"):
        sub.problems.append(died)
    elif died:
        sub.problems.append(f"the kernel died (crashed) while running `{died}`; "
                            "later cells did not run")
    for run in outcome["runs"]:
        if run["status"] == "timeout" and run["id"] not in check_cells.values() and \
                run["id"] != outcome.get("stopped"):
            sub.problems.append(f"cell `{run['id']}` ran longer than {timeout:g} s and was "
                                "interrupted")
        elif run["id"] == SNAPSHOT_ID and run["status"] != "ok":
            sub.problems.append("the grader's setup cell failed: "
                                f"{run['ename']}: {_first_line(run['evalue'])}")
    for cell_id, size in outcome.get("truncated", {}).items():
        sub.notes.append(f"output of `{cell_id}` was cut: {size:,} more characters dropped")
    if report is None and sub.status != TIMEOUT:
        sub.problems.append("the grader could not read the results at the end (the kernel "
                            "crashed or the notebook stopped early)")
    if report is not None:
        sub.tampering += [f"patched at run time: {name}" for name in report["changed"]]
    results = report["results"] if report else {}
    vetoes = report["vetoes"] if report else {}
    for ex in lesson.exercises:
        item = ExerciseResult(ex.id, ex.title, ex.kind, ex.points)
        sub.exercises.append(item)
        cell_id = check_cells.get(ex.id)
        run = runs.get(cell_id) if cell_id else None
        success = f"\u2713 {ex.id}:"
        if cell_id is None:
            item.status, item.message = "error", "no grading cell in the exercise notebook"
        elif run is None:
            item.status, item.message = "not run", "the notebook stopped before its check"
        elif run["status"] in ("ok", "skipped"):
            # points only from what the check recorded; after a crash there is no report,
            # the check's own line is then all there is, and the submission fails as CRASHED
            if run["status"] == "ok" and (ex.id in results if report is not None
                                          else success in run["stdout"]):
                item.status, item.earned = "pass", float(ex.points)
                item.message = _first_line(run["stdout"].split(success)[-1]) \
                    if success in run["stdout"] else ""
            else:
                item.status, item.message = "error", "the check did not confirm this answer"
        elif run["status"] == "kernel died":
            item.status, item.message = "kernel died", "the kernel crashed in this check"
        elif run["status"] == "timeout":
            item.status = "timeout"
            item.message = f"the check ran longer than {timeout:g} s"
        else:
            ename = run["ename"]
            item.status = {"VetoMisconception": "veto", "WrongAnswer": "wrong",
                           "BlankNotFilled": "blank"}.get(ename, "error")
            item.message = _message(run["evalue"]) if item.status != "error" else \
                f"{ename}: {_message(run['evalue'])}" if ename else _message(run["evalue"])
        if ex.kind == "veto" and (item.status == "veto" or ex.id in vetoes):
            item.status = "veto"
            why = vetoes.get(ex.id, run["evalue"] if run else "")
            sub.vetoes.append(f"{ex.title}: {_first_line(why)}")
    sub.earned = sum(item.earned for item in sub.exercises)
    if sub.status == TIMEOUT:
        return
    if sub.tampering:
        sub.status = TAMPERED
    elif outcome.get("died") or report is None:
        sub.status = CRASHED
    elif sub.earned >= sub.pass_line and not sub.vetoes:
        sub.status = PASS
    else:
        sub.status = FAIL


def grade_pairs(pairs: list[tuple[Path, str]], exercises: dict[str, dict], timeout: float,
                jobs: int = 1, out: Path | None = None, progress=None) -> list[Submission]:
    """Prepare every (notebook, label) pair, run them all in one pytest --nbval run, score."""
    work = Path(tempfile.mkdtemp(prefix="fcgrade-"))
    try:
        subs: list[Submission] = []
        prepared: list[_Job] = []
        for number, (path, label) in enumerate(pairs):
            sub, job = prepare(work, number, path, label, exercises)
            subs.append(sub)
            if job is not None:
                prepared.append(job)
        junit = (out if out is not None else work) / "pytest-junit.xml"
        results = work / "results"
        cases: dict[str, list[ET.Element]] = {}
        tail, timed_out = "", False
        if prepared:
            cases, tail, timed_out = run_notebooks(work, prepared, jobs, timeout, junit)
        for job in prepared:
            sub = job.sub
            mine = cases.get(_classname(work, job.notebook), [])
            outcome = outcome_of(job, mine, results)
            if outcome["ran_nothing"]:
                if timed_out:
                    sub.status = TIMEOUT
                    sub.problems.append("the grading run took longer than its wall-clock limit "
                                        "and was stopped")
                    outcome["died"] = None
                else:
                    outcome["died"] += ": " + _first_line(tail[-2000:])
            runs = {r["id"]: r for r in outcome["runs"]}
            _score(sub, job, outcome, runs, _read_report(job, results, runs), timeout)
            sub.seconds = round(job.seconds + sum(float(c.get("time") or 0) for c in mine), 2)
            if out is not None and outcome["executed"] is not None:
                executed_dir = out / "executed"
                executed_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(outcome["executed"],
                                executed_dir / sub.label.replace(os.sep, "__"))
        if progress:
            for sub in subs:
                progress(sub)
        return subs
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- many submissions


def grade_paths(paths: list[Path], out: Path | None = None, jobs: int | None = None,
                timeout: float = DEFAULT_TIMEOUT, root: Path | None = None,
                progress=None) -> list[Submission]:
    """Grade every notebook under `paths`; write the reports under `out` when given."""
    return grade_collected(*collect(paths), out, jobs, timeout, root, progress)


def grade_collected(pairs: list[tuple[Path, str]], missing: list[str], out: Path | None = None,
                    jobs: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                    root: Path | None = None, progress=None) -> list[Submission]:
    """grade_paths after collect(paths): the (notebook, label) pairs and the missing paths."""
    root = root or course_root()
    exercises = load_exercises(root)
    jobs = max(1, jobs or min(len(pairs) or 1, os.cpu_count() or 1))
    subs = grade_pairs(pairs, exercises, timeout, jobs, out, progress)
    for name in missing:
        subs.append(Submission(label=name, path=name, status=MALFORMED,
                               problems=["no such file or folder"]))
    if out is not None:
        from . import grade_report

        grade_report.write_all(subs, out, timeout=timeout, jobs=jobs)
    return subs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashcourse grade",
                                     description="Grade submitted lesson notebooks.")
    add_arguments(parser)
    return run_cli(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a submitted notebook, or a folder of them (searched recursively)")
    parser.add_argument("--out", type=Path, default=Path("grading-output"),
                        help="folder for scorecard.txt, results.csv, junit.xml, progress.html "
                             "(default: grading-output)")
    parser.add_argument("--jobs", "-j", type=int, default=None,
                        help="submissions graded at once (default: one per CPU core)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds one cell may run (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--root", type=Path, default=None,
                        help="course folder with exercises/ (default: found from here)")


def run_cli(args: argparse.Namespace) -> int:
    from . import grade_report

    pairs, missing = collect(args.paths)
    if not pairs:
        print("nothing to grade: no .ipynb files under "
              + ", ".join(str(p) for p in args.paths), file=sys.stderr)
        return 2
    started = time.monotonic()
    subs = grade_collected(pairs, missing, out=args.out, jobs=args.jobs, timeout=args.timeout,
                           root=args.root)
    print(grade_report.scorecard_text(subs))
    elapsed = time.monotonic() - started
    print(f"\n{sum(s.passed for s in subs)} of {len(subs)} submissions passed "
          f"({elapsed:.1f} s). Reports in {args.out}/: scorecard.txt, results.csv, junit.xml, "
          "progress.html, results.json, pytest-junit.xml")
    return 0 if all(s.passed for s in subs) else 1


def as_dict(sub: Submission) -> dict:
    return dict(asdict(sub), passed=sub.passed)


# ---------------------------------------------------------------- the pytest plugin
# Loaded into the grading run with `-p flashcourse.grade`; only `pytest_configure` is a hook
# here, so importing this module elsewhere (the CLI, the kernel) does not import pytest.


class KernelDied(RuntimeError):
    """The kernel process exited while a cell ran."""


def pytest_configure(config) -> None:
    import pytest
    from nbval import kernel as nbval_kernel
    from nbval import plugin as nbval_plugin

    _patch_nbval(nbval_kernel.RunningKernel, nbval_plugin.IPyNbFile)
    cell_class = nbval_plugin.IPyNbCell

    class GradingPlugin:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_setup(self, item):
            try:
                return (yield)
            finally:
                # nbval goes on after a timed-out cell but marks every later cell xfail, which
                # would hide their failures: grading needs each cell's real outcome
                if isinstance(item, cell_class):
                    item.own_markers[:] = [m for m in item.own_markers if m.name != "xfail"]

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(self, item):
            if isinstance(item, cell_class):
                item.parent._fc_item = item
                item._fc_kept = item._fc_dropped = 0
            return (yield)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(self, item, call):
            report = yield
            if not isinstance(item, cell_class):
                return report
            if report.when == "call":
                # JUnit XML takes the properties of the teardown report, made from these
                item.user_properties.append(("fcgrade_cell_id", item.cell.get("id", "")))
                if getattr(item, "_fc_dropped", 0):
                    item.user_properties.append(("fcgrade_output_dropped", item._fc_dropped))
                _store_outputs(item)
            if report.failed:
                report.longrepr = _short_failure(item, call, report)
            return report

        def pytest_runtest_teardown(self, item, nextitem):
            if isinstance(item, cell_class) and (nextitem is None or
                                                 nextitem.parent is not item.parent):
                folder = os.environ.get(RESULTS_DIR_ENV)
                if folder:
                    path = Path(folder) / f"{Path(str(item.parent.fspath)).stem}.executed.ipynb"
                    path.write_text(json.dumps(item.parent.nb), encoding="utf-8")

    config.pluginmanager.register(GradingPlugin(), "flashcourse-grading")


def _patch_nbval(kernel_class, file_class) -> None:
    """Notice a dead kernel within a second instead of waiting out the cell timeout, and keep
    at most OUTPUT_LIMIT characters of each cell's output (count the rest)."""
    if getattr(kernel_class, "_fc_patched", False):
        return
    from queue import Empty

    execute = kernel_class.execute_cell_input

    def execute_cell_input(self, cell_input, allow_stdin=None):
        self._fc_msg_id = execute(self, cell_input, allow_stdin=allow_stdin)
        return self._fc_msg_id

    def await_reply(self, msg_id, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                raise Empty
            try:
                msg = self.get_message(stream="shell", timeout=wait)
            except Empty:
                if not self.is_alive():
                    try:
                        self.stop()
                    except Exception:  # the process is gone already
                        pass
                    raise KernelDied("the kernel died while running this cell") from None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                if msg["content"]["status"] == "aborted":
                    raise RuntimeError("Kernel aborted execution request")
                return

    get_message = file_class.get_kernel_message

    def get_kernel_message(self, timeout=None, stream="iopub"):
        while True:
            msg = get_message(self, timeout=timeout, stream=stream)
            item = getattr(self, "_fc_item", None)
            content = msg.get("content", {})
            if item is None or msg["parent_header"].get("msg_id") != \
                    getattr(self.kernel, "_fc_msg_id", None):
                return msg
            if msg["msg_type"] == "stream":
                size = len(str(content.get("text", "")))
            elif msg["msg_type"] in ("display_data", "execute_result"):
                size = sum(len(str(v)) for v in content.get("data", {}).values())
            elif msg["msg_type"] == "error":
                content["evalue"] = str(content.get("evalue", ""))[:4000]
                content["traceback"] = list(content.get("traceback", []))[-30:]
                return msg
            else:
                return msg
            if item._fc_kept + size <= OUTPUT_LIMIT:
                item._fc_kept += size
                return msg
            item._fc_dropped += size  # dropped: read the next message instead

    kernel_class.execute_cell_input = execute_cell_input
    kernel_class.await_reply = await_reply
    file_class.get_kernel_message = get_kernel_message
    kernel_class._fc_patched = True


def _store_outputs(item) -> None:
    """Put what the cell printed into the notebook that is written out at the end."""
    outputs = [dict(out) for out in (item.test_outputs or [])]
    if getattr(item, "_fc_dropped", 0):
        outputs.append({"output_type": "stream", "name": "stderr",
                        "text": f"\n[grader: output beyond {OUTPUT_LIMIT:,} characters "
                                f"dropped: {item._fc_dropped:,} characters]\n"})
    item.cell["outputs"] = outputs


def _short_failure(item, call, report) -> str:
    """`fcgrade KIND: nbval's message` and, when the cell raised, `ename: evalue`, cut to
    FAILURE_CHARS: all the JUnit XML needs, whatever the cell printed or raised."""
    err = call.excinfo.value if call.excinfo is not None else None
    text = str(err) if err is not None else str(report.longrepr)
    if report.when != "call":
        kind = "grader"
    elif isinstance(err, KernelDied):
        kind = "kernel died"
    elif "Kernel dead on test start" in text:
        kind = "not run"
    elif "Failed to interrupt kernel" in text or "exceeded waiting for output" in text:
        kind = "timeout stopped"
    elif text.startswith("Timeout of"):
        kind = "timeout"
    else:
        kind = "error"
    lines = [f"fcgrade {kind}: {_first_line(text, 300)}"]
    errors = [o for o in (item.test_outputs or []) if o.get("output_type") == "error"]
    if errors and kind == "error":
        lines.append(f"{errors[-1].get('ename', '')}: {errors[-1].get('evalue', '')}")
    message = "\n".join(lines)
    return message if len(message) <= FAILURE_CHARS else message[: FAILURE_CHARS - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
