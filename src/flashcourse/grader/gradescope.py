"""Gradescope's autograder format (`grade --format gradescope`): one results.json per
submission, gradescope/NAME/results.json under --out (NAME as its executed copy is named), in
the format of Gradescope's autograder specification; ci/gradescope/results.schema.json is that
format as a JSON Schema, and ci/gradescope/run_autograder copies the file where Gradescope
reads it (/autograder/results/results.json).

One test per item of the scorecard with its points (the veto statements are an item of 0 points
whose failure fails the lesson), then one per written answer (scored by the instructor; 0 until
then), and an `integrity` test of 0 points that fails when the grader found tampering, a
reference call, a refused or malformed file or a crash, listing each. Before the due date a
student sees each item's status, points and the mistake its check named; what the check said
about the failing case (its inputs, a hidden case's shape, the wrong parts of a question) is a
test of its own, visible only after the due date. The submission's score is its automatic
points plus the written points scored so far; a submission whose grading cells were tampered
with, or whose answer was refused, scores 0 (its points are in extra_data).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .. import i18n
from ..i18n import _
from . import analytics
from .report import executed_name, json_safe, pass_text, shown_message, state_text, total_text
from .submission import REFUSED, TAMPERED, Submission

VISIBLE, AFTER_DUE_DATE = "visible", "after_due_date"
NO_POINTS = (TAMPERED, REFUSED)  # the grader cannot stand behind any point of these
FOLDER = "gradescope"


def _item_tests(item, number: int) -> list[dict]:
    passed = item.status == "pass"
    shown, title = shown_message(item), _(item.title)
    lines = [(_("passed") if passed else state_text(item.status))
             + (f": {shown}" if passed else "")]
    mark = _(analytics.DIAGNOSIS_MARK)
    named = analytics.diagnosis(shown, mark) if not passed else ""
    if named:
        lines.append(f"{mark}{named}.")
    if item.kind == "veto":
        lines.append(_("A wrong judgement of any statement fails the lesson, whatever the "
                       "points."))
    if not passed and item.message:
        lines.append(_("What the check found is shown after the due date."))
    tests = [{"name": f"{title} ({item.id})", "number": str(number),
              "score": float(item.earned), "max_score": float(item.points),
              "status": "passed" if passed else "failed", "output": "\n".join(lines),
              "output_format": "text", "visibility": VISIBLE, "tags": [item.kind]}]
    if not passed and item.message:
        tests.append({"name": _("{title}: what the check found").format(title=title),
                      "number": f"{number}.1",
                      "score": 0.0, "max_score": 0.0, "status": "failed",
                      "output": shown, "output_format": "text",
                      "visibility": AFTER_DUE_DATE, "tags": [item.kind, "details"]})
    return tests


def _written_test(item, number: int) -> dict:
    scored = item.score is not None
    output = (_("not answered: it scores 0") if not item.answered else
              _("scored by your instructor: {score:g} of {points:g}").format(
                  score=item.score, points=item.points) if scored else
              _("scored by your instructor: not scored yet"))
    return {"name": _("{title} ({id}, written)").format(title=item.title, id=item.id),
            "number": str(number),
            "score": float(item.score or 0.0), "max_score": float(item.points),
            "output": output, "output_format": "text", "visibility": VISIBLE,
            "tags": ["written"]}


def results(sub: Submission) -> dict:
    """The results.json of one submission, as Gradescope reads it, in its language (the
    grader's own findings under integrity stay in English, as the instructor reads them)."""
    with i18n.language(sub.lang):
        return _results(sub)


def _results(sub: Submission) -> dict:
    tests = []
    for number, item in enumerate(sub.exercises, start=1):
        tests += _item_tests(item, number)
    for number, item in enumerate(sub.written, start=len(sub.exercises) + 1):
        tests.append(_written_test(item, number))
    findings = [*(f"TAMPERED: {change}" for change in sub.tampering), *sub.problems]
    tests.append({"name": "integrity: grading cells, scan and sandbox", "number":
                  str(len(sub.exercises) + len(sub.written) + 1), "score": 0.0,
                  "max_score": 0.0, "status": "failed" if findings else "passed",
                  "output": "\n".join(findings) or "nothing found", "output_format": "text",
                  "visibility": VISIBLE, "tags": ["integrity"]})
    score = 0.0 if sub.status in NO_POINTS else sub.earned + sub.written_earned
    summary = [f"{sub.status}: {total_text(sub)} ({pass_text(sub)})."]
    if sub.status in NO_POINTS:
        summary.append(_("It scores 0: the grader found the problems listed under integrity."))
    summary += [_("VETO misconception: {veto}").format(veto=veto) for veto in sub.vetoes]
    if sub.unscored:
        summary.append(_("{count} written answer(s) not scored yet: the score may grow.")
                       .format(count=sub.unscored))
    return json_safe({
        "score": float(score), "execution_time": round(sub.seconds, 2),
        "output": "\n".join(summary), "output_format": "text", "visibility": VISIBLE,
        "stdout_visibility": "hidden", "tests": tests,
        "extra_data": {"submission": sub.label, "lesson": sub.lesson, "status": sub.status,
                       "automatic_points": float(sub.earned), "passed": sub.passed,
                       "provisional": sub.provisional}})


def results_path(sub: Submission, out: Path) -> Path:
    return out / FOLDER / executed_name(sub)[:-len(".ipynb")] / "results.json"


def write_all(subs: list[Submission], out: Path) -> None:
    """gradescope/NAME/results.json for every submission (the folder is made anew)."""
    shutil.rmtree(out / FOLDER, ignore_errors=True)
    for sub in subs:
        path = results_path(sub, out)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(results(sub), indent=1), encoding="utf-8")
