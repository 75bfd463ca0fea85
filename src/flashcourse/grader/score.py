"""Scoring one submission on the grader's side, after its sandbox has ended.

Every point comes from `registry.replay`: the lesson's own check runs again here, in the
grader's process, on the data the submission's run recorded (`flashcourse.checks.recording`). The
files the sandbox left are read as untrusted data: never through a link, within size limits,
and as JSON only. What the runner says about its cells (errors, timeouts) only explains the
report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..blanks import BlankNotFilled
from ..checks import recording, registry
from .collect import Job, printable, read_regular
from .submission import CRASHED, FAIL, PASS, TAMPERED, TIMEOUT, ExerciseResult, Submission

MESSAGE_CHARS = 600


def read_untrusted(path: Path, limit: int) -> bytes | None:
    """The bytes of a file the sandbox wrote, or None: not through a link (the file or the
    folders above it in the work folder), at most `limit`."""
    if any(os.path.islink(p) for p in (path, *list(path.parents)[:3])):
        return None
    try:
        return read_regular(path, limit)
    except ValueError:
        return None


def read_json(path: Path, limit: int):
    raw = read_untrusted(path, limit)
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def message(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A check's message on one line: case, error, where, and the hint."""
    line = " ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())
    return printable(line, limit)


def cell_runs(work: Path) -> tuple[dict[str, dict], str | None, bool]:
    """The runner's account: cell id -> its entry, the cell running when it stopped, and whether
    the account exists at all."""
    state = read_json(work / "out" / "cells.json", 8 * 2**20)
    if not isinstance(state, dict) or not isinstance(state.get("cells"), list):
        return {}, None, False
    runs = {str(c.get("id")): c for c in state["cells"] if isinstance(c, dict)}
    running = state.get("running")
    return runs, (str(running) if running else None), True


def replay_item(ex, record) -> tuple[str, str]:
    """(status, message) of one exercise, decided by replaying its check on `record`."""
    if record is None:
        return "not run", ""
    try:
        summary = registry.replay(ex.id, record)
    except registry.VetoMisconception as err:
        return "veto", message(err)
    except registry.WrongAnswer as err:
        return "wrong", message(err)
    except BlankNotFilled as err:
        return "blank", message(err)
    except recording.RecordMismatch as err:
        return "mismatch", message(err)
    except NotImplementedError as err:
        return "blank", message(err)
    except Exception as err:  # noqa: BLE001  (a malformed record; the grader goes on)
        return "error", message(f"{type(err).__name__}: {err}")
    finally:
        registry.VETOES_HIT.pop(ex.id, None)
    return "pass", message(summary, 240)


def score(sub: Submission, job: Job, work: Path, timeout: float, wall_killed: bool) -> None:
    runs, running, accounted = cell_runs(work)
    if wall_killed:
        sub.status = TIMEOUT
        where = f" while `{printable(running, 80)}` ran" if running else ""
        sub.problems.append(f"the notebook ran past its wall-clock limit{where} and was "
                            "stopped")
    died = [cell_id for cell_id, run in runs.items() if run.get("status") == "kernel died"]
    if died:
        sub.problems.append(f"the kernel died (crashed) while running `{printable(died[0], 80)}`;"
                            " later cells did not run")
    elif not accounted and not wall_killed:
        sub.problems.append("the notebook could not be run (its sandbox left no account)")
    grading_cells = {cell for cell, _ in job.checks.values()}
    for cell_id, run in runs.items():
        if run.get("status") == "timeout" and cell_id not in grading_cells:
            sub.problems.append(f"cell `{printable(cell_id, 80)}` ran longer than {timeout:g} s "
                                "and was interrupted")
        if run.get("dropped"):
            sub.notes.append(f"output of `{printable(cell_id, 80)}` was cut: "
                             f"{int(run['dropped']):,} characters dropped")
    for ex in job.lesson.exercises:
        item = ExerciseResult(ex.id, ex.title, ex.kind, ex.points)
        sub.exercises.append(item)
        path = work / "records" / recording.record_name(ex.id)
        record = read_json(path, recording.MAX_RECORD_BYTES)
        if record is None and (path.exists() or path.is_symlink()):
            item.status, item.message = "error", "its record could not be read"
            continue
        item.status, item.message = replay_item(ex, record)
        run = runs.get(job.checks.get(ex.id, ("", ""))[0])
        if item.status == "not run":
            item.message = _why_not_run(run, timeout)
        if item.status == "mismatch":
            item.status = "error"
            if "inputs" in item.message:
                sub.tampering.append(f"{ex.id}: {item.message}")
        if ex.id in job.refused:
            item.status, item.message = "refused", printable(job.refused[ex.id], 300)
        if item.status == "pass":
            item.earned = float(ex.points)
        if ex.kind == "veto" and item.status != "pass":
            why = item.message if item.status == "veto" else \
                f"not answered ({item.status}): the misconception statements must be answered"
            sub.vetoes.append(f"{ex.title}: {why}")
    sub.earned = sum(item.earned for item in sub.exercises)
    if sub.status == TIMEOUT:
        return
    if sub.tampering:
        sub.status = TAMPERED
    elif died or not accounted:
        sub.status = CRASHED
    elif sub.earned >= sub.pass_line and not sub.vetoes:
        sub.status = PASS
    else:
        sub.status = FAIL


def _why_not_run(run: dict | None, timeout: float) -> str:
    if run is None:
        return "the notebook stopped before its check"
    status = run.get("status")
    if status == "timeout":
        return f"the check ran longer than {timeout:g} s"
    if status == "kernel died":
        return "the kernel crashed in this check"
    ename, evalue = printable(run.get("ename", ""), 80), message(run.get("evalue", ""), 300)
    if ename:
        return f"the check cell raised {ename}: {evalue}" if evalue else \
            f"the check cell raised {ename}"
    return "the check did not run (was `check` replaced?)"
