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
   snapshots numpy, builtins and the course package, and a last injected cell that reports
   `grading.RESULTS`, `VETOES_HIT` and whatever in the snapshot was patched;
5. runs it in a fresh Jupyter kernel (nbclient) in a worker process with FLASHCOURSE_GRADING=1,
   so hidden cases run, a per-cell timeout that interrupts the cell and goes on, a cap on stored
   output, and a wall-clock limit for the whole notebook; several submissions run in parallel;
6. scores each exercise from the lesson's registry (`flashcourse.grading.LESSONS`): an exercise
   earns its points only when its pristine grading cell ran without error, printed the check's
   success line, and the check recorded it. Nothing the submission prints about its own score
   is read.

It prints a scorecard and writes `scorecard.txt`, `results.csv`, `junit.xml`, `progress.html`,
`results.json` and the executed copies (`executed/`) under --out. Exit status 0 when every
submission passed, 1 otherwise, 2 when there was nothing to grade.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import bench
from . import grade_tamper as tamper

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024  # a submission larger than this is refused unread
OUTPUT_LIMIT = 100_000  # characters of output kept per cell; the rest is dropped
STDOUT_KEPT = 20_000  # characters of a cell's stdout the scorer looks at
DEFAULT_TIMEOUT = 120  # seconds per cell
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


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def match_exercise(name: str, cells: list[dict], exercises: dict[str, dict]) -> str | None:
    """The slug of the exercise notebook this submission answers: by file name, else by the
    grading cell ids it shares."""
    for slug in sorted(exercises, key=len, reverse=True):
        if slug in name:
            return slug
    ids = {c.get("id") for c in cells}
    best, best_score = None, 0
    for slug, nb in exercises.items():
        grading_ids = {c.get("id") for c in nb["cells"] if tamper.is_grading_id(c.get("id"))
                       and c.get("id") != "setup" and c.get("id") != "scorecard"}
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


def _results_cell(nonce: str) -> dict:
    source = (
        "import json as _fc_json\n"
        "import flashcourse.grade as _fc_grade\n"
        "import flashcourse.grading as _fc_grading\n"
        f"print({nonce!r} + _fc_json.dumps({{'results': dict(_fc_grading.RESULTS), "
        "'vetoes': dict(_fc_grading.VETOES_HIT), "
        "'changed': _fc_grade.integrity_changes()}))"
    )
    return {"cell_type": "code", "id": RESULTS_ID, "metadata": {}, "source": source,
            "outputs": [], "execution_count": None}


def build_run_notebook(submitted: dict, pristine: dict, nonce: str) -> dict:
    """The submission's cells with every grading cell from the pristine exercise notebook,
    deleted grading cells put back after their predecessor, and the two injected cells."""
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
            new = dict(grading[cell_id], source=_source(grading[cell_id]))
            placed.add(cell_id)
        else:
            new = {"cell_type": "code", "metadata": {}, "source": _source(cell)}
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
        new = dict(cell, source=_source(cell), outputs=[], execution_count=None, metadata={})
        position = len(out)
        for before in reversed(pristine_cells[:index]):
            ids = [c["id"] for c in out]
            if before.get("id") in ids:
                position = ids.index(before["id"]) + 1
                break
        else:
            position = 0
        out.insert(position, new)
        placed.add(cell_id)
    cells = [_snapshot_cell(), *out, _results_cell(nonce)]
    return {"cells": cells, "metadata": pristine.get("metadata", {}), "nbformat": 4,
            "nbformat_minor": 5}


# ---------------------------------------------------------------- the worker (runs the kernel)


def _output_size(out) -> int:
    if out.get("output_type") == "stream":
        return len(out.get("text", ""))
    return sum(len(str(v)) for v in out.get("data", {}).values()) + 100


def run_worker(job_path: Path) -> int:
    """Execute one prepared notebook cell by cell; write what each cell did."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    job = json.loads(Path(job_path).read_text())
    nb = nbformat.reads(Path(job["notebook"]).read_text(), as_version=4)
    timeout = job["timeout"]
    truncated: dict[int, int] = {}

    class CappedClient(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            content = msg.get("content", {})
            if msg["msg_type"] == "error":
                content["evalue"] = str(content.get("evalue", ""))[:4000]
                content["traceback"] = list(content.get("traceback", []))[-30:]
                return super().output(outs, msg, display_id, cell_index)
            size = sum(_output_size(o) for o in outs) + len(str(content.get("text", ""))) + \
                sum(len(str(v)) for v in content.get("data", {}).values())
            if size > OUTPUT_LIMIT:
                if cell_index not in truncated:
                    outs.append(nbformat.v4.new_output(
                        "stream", name="stderr",
                        text=f"\n[grader: output beyond {OUTPUT_LIMIT:,} characters dropped]\n"))
                truncated[cell_index] = truncated.get(cell_index, 0) + \
                    len(str(content.get("text", ""))) + \
                    sum(len(str(v)) for v in content.get("data", {}).values())
                return None
            return super().output(outs, msg, display_id, cell_index)

    client = CappedClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeout",
                          "evalue": f"the cell ran longer than {timeout} s and was interrupted",
                          "traceback": []},
        startup_timeout=120, iopub_timeout=10, record_timing=False,
        resources={"metadata": {"path": job["cwd"]}})
    runs: list[dict] = []
    died = None
    try:
        with client.setup_kernel(cwd=job["cwd"]):
            for index, cell in enumerate(nb.cells):
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:
                    died = cell.id
                    runs.append({"id": cell.id, "status": "kernel died", "ename": "",
                                 "evalue": "", "stdout": ""})
                    break
                except CellTimeoutError as err:
                    runs.append({"id": cell.id, "status": "timeout", "ename": "CellTimeout",
                                 "evalue": str(err)[:500], "stdout": ""})
                    break
                runs.append(_summarise(cell))
    except Exception as err:  # the kernel did not start, or died while shutting down
        if died is None:
            died = f"the grader: {type(err).__name__}: {err}"
            import traceback

            traceback.print_exc()
    Path(job["executed"]).write_text(json.dumps(nb, default=str))
    Path(job["result"]).write_text(json.dumps({
        "runs": runs, "died": died,
        "truncated": {nb.cells[i].id: n for i, n in truncated.items()}}))
    return 0


def _summarise(cell) -> dict:
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    stdout = "".join(o.get("text", "") for o in cell.outputs
                     if o.get("output_type") == "stream" and o.get("name") == "stdout")
    if errors:
        ename = errors[0].get("ename", "")
        timed_out = ename in ("CellTimeout", "KeyboardInterrupt")  # the grader interrupted it
        return {"id": cell.id, "status": "timeout" if timed_out else "error",
                "ename": ename, "evalue": str(errors[0].get("evalue", "")),
                "stdout": stdout[-STDOUT_KEPT:]}
    return {"id": cell.id, "status": "ok", "ename": "", "evalue": "",
            "stdout": stdout[-STDOUT_KEPT:]}


# ---------------------------------------------------------------- grading one submission


def _first_line(text: str, limit: int = 240) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else \
        (lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _message(text: str, limit: int = 600) -> str:
    """A check's failure message on one line: case, error, where, and the hint."""
    line = " ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def grade_one(path: Path, label: str, exercises: dict[str, dict], timeout: float,
              executed_dir: Path | None = None) -> Submission:
    from . import grading

    grading._load_checks()
    sub = Submission(label=label, path=str(path))
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="fcgrade-"))
    try:
        _grade_in(work, path, sub, exercises, timeout, executed_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        sub.seconds = round(time.monotonic() - started, 2)
    return sub


def _grade_in(work: Path, path: Path, sub: Submission, exercises: dict[str, dict],
              timeout: float, executed_dir: Path | None) -> None:
    from . import grading

    # 1. a private copy; the submitted file is only read, once
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"the file is {size / 2**20:.0f} MiB (limit "
                             f"{MAX_NOTEBOOK_BYTES / 2**20:.0f} MiB)")
        copy = work / "submission.ipynb"
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
        return
    cells = submitted["cells"]

    # 2. which lesson
    slug = match_exercise(path.name, cells, exercises)
    if slug is None:
        sub.status = UNMATCHED
        sub.problems.append("matches no exercise notebook (neither by file name nor by "
                            "grading cell ids)")
        return
    pristine = exercises[slug]
    check_cells: dict[str, str] = {}  # exercise id -> grading cell id
    for cell in pristine["cells"]:
        found = CHECK_CALL.search(_source(cell))
        if tamper.is_grading_id(cell.get("id")) and found:
            check_cells[found.group(1)] = cell["id"]
    lesson_ids = {ex.split("/")[0] for ex in check_cells}
    lesson = grading.LESSONS.get(next(iter(lesson_ids), ""))
    if lesson is None:
        sub.status = UNMATCHED
        sub.problems.append(f"exercises/{slug}.ipynb names no registered lesson")
        return
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

    # 4. and 5. run the pristine grading cells after the student's cells, in a fresh kernel
    nonce = "FCGRADE-" + secrets.token_hex(16) + ":"
    run_nb = build_run_notebook(submitted, pristine, nonce)
    (work / "run.ipynb").write_text(json.dumps(run_nb))
    job = {"notebook": str(work / "run.ipynb"), "cwd": str(work), "timeout": timeout,
           "result": str(work / "result.json"), "executed": str(work / "executed.ipynb")}
    (work / "job.json").write_text(json.dumps(job))
    code_cells = len(run_nb["cells"])
    wall = timeout * code_cells + 120
    env = dict(os.environ, **{grading.GRADING_MODE_ENV: "1", "MPLBACKEND": "Agg",
                              "PYTHONDONTWRITEBYTECODE": "1", bench.SKIP_ENV: "1"})
    for name in THREAD_VARIABLES:  # one thread per kernel: parallel jobs must not oversubscribe
        env.setdefault(name, "1")
    process = subprocess.Popen(
        [sys.executable, "-m", "flashcourse.grade", "--worker", str(work / "job.json")],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        log, _ = process.communicate(timeout=wall)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        log, _ = process.communicate()
        sub.status = TIMEOUT
        sub.problems.append(f"the notebook ran longer than {wall:g} s in all and was stopped")
    if executed_dir is not None and (work / "executed.ipynb").exists():
        executed_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(work / "executed.ipynb",
                        executed_dir / sub.label.replace(os.sep, "__"))
    try:
        outcome = json.loads((work / "result.json").read_text())
    except (OSError, ValueError):
        outcome = {"runs": [], "died": "the grading worker failed: "
                   + _first_line(log.decode(errors="replace")[-2000:]), "truncated": {}}
    _score(sub, lesson, check_cells, outcome, nonce, timeout)


def _score(sub: Submission, lesson, check_cells: dict[str, str], outcome: dict, nonce: str,
           timeout: float) -> None:
    runs = {r["id"]: r for r in outcome["runs"]}
    final = runs.get(RESULTS_ID)
    report = None
    if final and final["status"] == "ok":
        for line in final["stdout"].splitlines():
            if line.startswith(nonce):
                report = json.loads(line[len(nonce):])
    if outcome.get("died"):
        sub.problems.append(f"the kernel died (crashed) while running `{outcome['died']}`; "
                            "later cells did not run")
    for run in outcome["runs"]:
        if run["status"] == "timeout" and run["id"] not in check_cells.values():
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
        if cell_id is None:
            item.status, item.message = "error", "no grading cell in the exercise notebook"
        elif run is None:
            item.status, item.message = "not run", "the notebook stopped before its check"
        elif run["status"] == "ok":
            # after a crash there is no report: the check's own line is then all there is,
            # and the submission fails as CRASHED whatever it earned
            if f"\u2713 {ex.id}:" in run["stdout"] and (report is None or ex.id in results):
                item.status, item.earned = "pass", float(ex.points)
                item.message = _first_line(run["stdout"].split(f"\u2713 {ex.id}:")[-1])
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
                f"{ename}: {_message(run['evalue'])}"
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


# ---------------------------------------------------------------- many submissions


def grade_paths(paths: list[Path], out: Path | None = None, jobs: int | None = None,
                timeout: float = DEFAULT_TIMEOUT, root: Path | None = None,
                progress=None) -> list[Submission]:
    """Grade every notebook under `paths`; write the reports under `out` when given."""
    root = root or course_root()
    exercises = load_exercises(root)
    pairs, missing = collect(paths)
    jobs = max(1, jobs or min(len(pairs) or 1, os.cpu_count() or 1))
    executed = out / "executed" if out is not None else None

    def one(pair):
        sub = grade_one(pair[0], pair[1], exercises, timeout, executed)
        if progress:
            progress(sub)
        return sub

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        subs = list(pool.map(one, pairs))
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

    pairs, _ = collect(args.paths)
    if not pairs:
        print("nothing to grade: no .ipynb files under "
              + ", ".join(str(p) for p in args.paths), file=sys.stderr)
        return 2
    started = time.monotonic()
    subs = grade_paths(args.paths, out=args.out, jobs=args.jobs, timeout=args.timeout,
                       root=args.root)
    print(grade_report.scorecard_text(subs))
    elapsed = time.monotonic() - started
    print(f"\n{sum(s.passed for s in subs)} of {len(subs)} submissions passed "
          f"({elapsed:.1f} s). Reports in {args.out}/: scorecard.txt, results.csv, junit.xml, "
          "progress.html, results.json")
    return 0 if all(s.passed for s in subs) else 1


def as_dict(sub: Submission) -> dict:
    return dict(asdict(sub), passed=sub.passed)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(run_worker(Path(sys.argv[2])))
    sys.exit(main())
