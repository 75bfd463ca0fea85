"""Scoring one submission on the grader's side, after its sandbox has ended.

Every point comes from `registry.replay`: the lesson's own check runs again here, in the
grader's process, on the records its grading cells sent over the channel
(`channel.Conversation`), every field read as data. What the runner says about its cells
(errors, timeouts) only explains the report. `read_untrusted` reads a file of a work folder for
the reports (the executed notebook), never through a link, within a size limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
from pathlib import Path

from .. import hints, i18n
from ..blanks import BlankNotFilled
from ..checks import numbers, recording, registry
from ..i18n import _
from .channel import Conversation
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


def message(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A check's message on one line: case, error, where, and the hint."""
    line = " ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())
    return printable(line, limit)


RUN_STATUSES = ("ok", "error", "timeout", "kernel died", "stuck")


def _entry(raw) -> dict | None:
    """One cell's account from the runner, checked field by field as data (None if unusable)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        return None
    seconds = raw.get("seconds")
    if type(seconds) is int:  # an int too large for a float must not raise here
        seconds = float(seconds) if abs(seconds) < 2**53 else None
    dropped = raw.get("dropped")
    return {"id": raw["id"][:200],
            "status": raw.get("status") if raw.get("status") in RUN_STATUSES else "error",
            "ename": raw["ename"][:200] if isinstance(raw.get("ename"), str) else "",
            "evalue": raw["evalue"][:4000] if isinstance(raw.get("evalue"), str) else "",
            "seconds": seconds if type(seconds) is float and math.isfinite(seconds) and
            seconds >= 0 else 0.0,
            "dropped": dropped if type(dropped) is int and 0 <= dropped < 2**53 else 0}


def cell_runs(state) -> tuple[dict[str, dict], str | None, bool]:
    """The runner's account (`channel.Conversation.state()`): cell id -> its entry, the cell
    running when it stopped, and whether the account exists at all."""
    if not isinstance(state, dict) or not isinstance(state.get("cells"), list):
        return {}, None, False
    runs = {}
    for raw in state["cells"]:
        entry = _entry(raw)
        if entry is not None:
            runs[entry["id"]] = entry
    running = state.get("running")
    return runs, (running[:200] if isinstance(running, str) and running else None), True


def replay_item(ex, record, key: str | None = None,
                student: str | None = None) -> tuple[str, str]:
    """(status, message) of one exercise, decided by replaying its check on `record` with the
    key its inputs were built from; a question is graded with `student`'s own numbers
    (`checks/numbers.py`), the lesson's when None."""
    if record is None:
        return "not run", ""
    try:
        with numbers.as_student(student) if student else contextlib.nullcontext():
            summary = registry.replay(ex.id, record, key=key)
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


def _ran_before(talk: Conversation, cells: list[str], grading_cell: str) -> list[str]:
    """The answer cells that had not started when the grading cell started."""
    order = talk.order
    if grading_cell not in order:
        return list(cells)
    before = set(order[:order.index(grading_cell)])
    return [cell for cell in cells if cell not in before]


def _judge_record(ex, job: Job, talk: Conversation, sub: Submission) -> tuple[str, str]:
    """(status, message) of one exercise from what its grading cell sent over the channel."""
    record = talk.records.get(ex.id)
    if record is None:
        return "not run", ""
    if record.get("duplicate"):
        return "error", _("its grading cell produced more than one record")
    grading_cell = job.checks.get(ex.id, ("", ""))[0]
    unrun = _ran_before(talk, job.answer_cells.get(ex.id, []), grading_cell)
    if ex.id in job.blank:
        return "blank", printable(_("{why}: it earns nothing until it is answered").format(
            why=job.blank[ex.id]), 300)
    if unrun:
        return "not run", printable(_("its answer cell `{cell}` did not run before its "
                                      "check").format(cell=unrun[0]), 300)
    # what the sandbox's record must list as empty: the guards of the student's calls
    for key, what, message in (
            ("tripwires_removed", "the references' tripwires were taken away",
             _("the references' tripwires were taken away while it ran")),
            ("hooks_set", "a hook was set while its check ran",
             _("a hook (a trace or profile function, a torch mode, a Triton pre-run or launch "
               "hook) was set while its check ran: it can change what the course's code "
               "computes"))):
        listed = record.get(key)
        if not isinstance(listed, list) or listed:
            named = ", ".join(str(n)[:80] for n in listed[:5]) if isinstance(listed, list) \
                else "the record does not say"
            sub.tampering.append(f"{ex.id}: {what} ({named})")
            return "error", message
    return replay_item(ex, record, talk.keys.get(ex.id), student=graded_student(sub))


def graded_student(sub: Submission) -> str:
    """Whose numbers a submission's questions are graded with: its student by the report's
    rule (`report.student_of`), else its label."""
    # report imports this module, so it is looked up by name here (an import would be a cycle)
    report = importlib.import_module(f"{__package__}.report")
    return report.student_of(sub) or sub.label


MACHINE_FAULT = "a fault of the grading machine, not of the notebook; grade it again"


def score(sub: Submission, job: Job, talk: Conversation, timeout: float,
          wall_killed: bool) -> None:
    runs, running, _finished = cell_runs(talk.state())
    accounted = talk.finished or bool(talk.order)  # the runner reached the notebook at all
    sub.tampering += talk.flags
    sub.notes += talk.notes
    if wall_killed:
        sub.status = TIMEOUT
        where = f" while `{printable(running, 80)}` ran" if running else ""
        sub.problems.append(f"the notebook ran past its wall-clock limit{where} and was "
                            "stopped")
    no_kernel = bool(talk.failed_starts) and not talk.kernel_started
    if talk.failed_starts and talk.kernel_started:
        sub.notes.append("the notebook's kernel was started again: a first start on the "
                         f"grading machine failed {printable(talk.failed_starts[0], 240)}")
    died = [cell_id for cell_id, run in runs.items() if run.get("status") == "kernel died"]
    stuck = [cell_id for cell_id, run in runs.items() if run.get("status") == "stuck"]
    # the grader's own cells: one failed before any cell of the notebook ran (no student code
    # had run), or after (noted once per error: the notebook may have caused it)
    no_setup = [error for started, error in talk.setup_failures if not started]
    for error in dict.fromkeys(error for started, error in talk.setup_failures
                               if started and error not in no_setup):
        sub.notes.append(f"the grader's setup in the kernel failed: {printable(error, 300)}")
    machine_fault = (no_kernel or bool(no_setup)) and not wall_killed
    if no_kernel and not wall_killed:
        sub.problems.append(
            f"the notebook's kernel did not start ({len(talk.failed_starts)} tries; "
            f"{printable('; '.join(talk.failed_starts), 600)}), so no cell ran: "
            + MACHINE_FAULT)
    elif no_setup and not wall_killed:
        sub.problems.append(
            "the grader's setup in the notebook's kernel failed before any cell ran "
            f"({printable(no_setup[0], 300)}), so nothing could be graded: " + MACHINE_FAULT)
    elif died:
        sub.problems.append(f"the kernel died (crashed) while running `{printable(died[0], 80)}`;"
                            " later cells did not run")
    elif stuck:
        sub.problems.append(f"the kernel stopped answering in `{printable(stuck[0], 80)}` even "
                            f"after {timeout:g} s and an interrupt, and was stopped; later "
                            "cells did not run")
    elif not accounted and not wall_killed:
        sub.problems.append("the notebook could not be run (its sandbox left no account)")
    elif not talk.finished and not wall_killed:
        where = f" while `{printable(running, 80)}` ran" if running else ""
        sub.problems.append(f"the notebook's run ended early{where} (its runner was stopped); "
                            "later cells earn nothing")
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
        with i18n.language(i18n.SOURCE_LANGUAGE):  # the class's pages and analytics read it
            item.status, item.message = _outcome(ex, job, talk, sub, runs, timeout)
        if sub.lang != i18n.SOURCE_LANGUAGE:  # the same replay, its messages in the student's
            with i18n.language(sub.lang):
                status, item.message_shown = _outcome(ex, job, talk, sub, runs, timeout,
                                                      noted=False)
            if status != item.status:  # the language never changes a point
                raise RuntimeError(f"{ex.id}: replayed in {sub.lang} it is {status}, in "
                                   f"English {item.status}")
        if item.status == "pass":
            item.earned = float(ex.points)
        item.hints_total, item.hints_opened = hints_opened(ex.id, talk)
        if ex.kind == "veto" and item.status != "pass" and not machine_fault:
            why = item.message if item.status == "veto" else \
                f"not answered ({item.status}): the misconception statements must be answered"
            sub.vetoes.append(f"{ex.title}: {why}")
    sub.earned = sum(item.earned for item in sub.exercises)
    if sub.status == TIMEOUT:
        return
    if sub.tampering:
        sub.status = TAMPERED
    elif machine_fault or died or stuck or not accounted:
        sub.status = CRASHED
    elif sub.earned >= sub.pass_line and not sub.vetoes:
        sub.status = PASS
    else:
        sub.status = FAIL


def _outcome(ex, job: Job, talk: Conversation, sub: Submission, runs: dict, timeout: float,
             noted: bool = True) -> tuple[str, str]:
    """(status, message) of one exercise, in the current language; `noted`: add what it finds
    to the submission's tampering (for the first of its languages only)."""
    # a translation's pass notes its findings on a scratch copy: the first pass noted them
    status, text = _judge_record(ex, job, talk, sub if noted else
                                 dataclasses.replace(sub, tampering=[]))
    hits = talk.hits.get(ex.id)
    if hits:
        names = ", ".join(sorted(set(hits))[:5])
        if noted:
            sub.tampering.append(f"{ex.id}: the answer called the reference {names} while "
                                 "its check ran")
        status, text = "refused", printable(_(
            "the answer called the reference {names}: write it yourself").format(names=names),
            300)
    run = runs.get(job.checks.get(ex.id, ("", ""))[0])
    if status == "not run" and not text:
        text = _why_not_run(run, timeout)
    if status == "mismatch":
        status = "error"
        if "inputs" in text and noted:  # a record mismatch's message is never translated
            sub.tampering.append(f"{ex.id}: {text}")
    if ex.id in job.refused:
        status, text = "refused", printable(job.refused[ex.id], 300)
    return status, text


def hints_opened(exercise_id: str, talk: Conversation) -> tuple[int, list[int]]:
    """(the exercise's hint levels, the levels the run showed): a note for the reports only."""
    total = hints.levels_of(exercise_id)
    shown = talk.hints.get(exercise_id, set())
    return total, sorted(level for level in shown if level <= total)


def _why_not_run(run: dict | None, timeout: float) -> str:
    if run is None:
        return _("the notebook stopped before its check")
    status = run.get("status")
    if status == "timeout":
        return _("the check ran longer than {seconds:g} s").format(seconds=timeout)
    if status == "stuck":
        return _("the kernel stopped answering in this check and was stopped")
    if status == "kernel died":
        return _("the kernel crashed in this check")
    ename, evalue = printable(run.get("ename", ""), 80), message(run.get("evalue", ""), 300)
    if ename:
        return _("the check cell raised {error_type}: {error}").format(
            error_type=ename, error=evalue) if evalue else \
            _("the check cell raised {error_type}").format(error_type=ename)
    return _("the check did not run (was `check` replaced?)")
