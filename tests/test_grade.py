"""`python -m flashcourse grade`: a right, a wrong, a tampered, a malformed, a looping and a
crashing submission of lesson 1 graded in one run (one `pytest --nbval-lax` run under
pytest-xdist); the static tamper scan and the run-time integrity snapshot on their own."""

import contextlib
import csv
import hashlib
import io
import json
import xml.etree.ElementTree as ET

import pytest

from flashcourse import grade, grade_samples, grade_tamper
from flashcourse.__main__ import main

TIMEOUT = 10  # seconds per cell: the looping submission costs this once


def _cell(nb, cell_id):
    return next(c for c in nb["cells"] if c.get("id") == cell_id)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, root):
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grading-output")
    right = grade_samples.filled_notebook(root)
    grade_samples.write(right, folder / "alice" / "01-gpu-flash.ipynb")

    # wrong answer + a veto misconception + a cell that prints 3 MB + one that raises 2 MB
    wrong = grade_samples.filled_notebook(root, mistakes=("no-rescale", "veto"))
    _cell(wrong, "try-flash-attention")["source"] += "\nfor _ in range(30000): print('x' * 99)"
    at = wrong["cells"].index(_cell(wrong, "try-flash-attention")) + 1
    wrong["cells"].insert(at, {"cell_type": "code", "id": "bob-raises", "metadata": {},
                               "outputs": [], "execution_count": None,
                               "source": "raise ValueError('y' * 2_000_000)"})
    grade_samples.write(wrong, folder / "bob" / "01-gpu-flash.ipynb")

    # edits a check cell (to a fake success line) and patches numpy in a student cell
    tampered = grade_samples.filled_notebook(root, mistakes=("q1-wrong",))
    _cell(tampered, "check-q1")["source"] = (
        'print("\u2713 gpu-flash/q1-memory: all 3 answers right")')
    _cell(tampered, "answer-q2")["source"] += "\nnp.allclose = lambda *a, **k: True"
    grade_samples.write(tampered, folder / "carol" / "01-gpu-flash.ipynb")

    (folder / "dave").mkdir()
    (folder / "dave" / "01-gpu-flash.ipynb").write_text('{"cells": [{"cell_type": "code", ')

    # an infinite loop inside the answer, and a deleted answer cell
    looping = grade_samples.filled_notebook(root)
    body = _cell(looping, "exercise-flash-attention")["source"]
    _cell(looping, "exercise-flash-attention")["source"] = body.replace(
        "    n, d = Q.shape\n", "    n, d = Q.shape\n    while True:\n        pass\n", 1)
    _cell(looping, "try-flash-attention")["source"] = "print('skipped')"
    looping["cells"] = [c for c in looping["cells"] if c.get("id") != "answer-q3"]
    grade_samples.write(looping, folder / "erin" / "01-gpu-flash.ipynb")

    # the kernel process exits half-way
    crash = grade_samples.filled_notebook(root)
    _cell(crash, "answer-q2")["source"] = "import os\nos._exit(3)"
    grade_samples.write(crash, folder / "frank" / "01-gpu-flash.ipynb")

    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.ipynb")}
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(["grade", str(folder), "--out", str(out), "--jobs", "2",
                       "--timeout", str(TIMEOUT), "--root", str(root)])
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.ipynb")}
    report = json.loads((out / "results.json").read_text())
    subs = {s["label"].split("/")[0]: s for s in report["submissions"]}
    return {"status": status, "stdout": stdout.getvalue(), "out": out, "subs": subs,
            "unchanged": before == after}


def _items(sub):
    return {item["id"]: item for item in sub["exercises"]}


def _pytest_cases(out, who):
    """pytest's JUnit test cases (one per code cell, "Cell N") of one submission's notebook."""
    root = ET.parse(out / "pytest-junit.xml").getroot()
    return [c for c in root.iter("testcase") if f"-{who}__" in c.get("classname")]


def test_right_submission_passes_with_hidden_cases(graded):
    alice = graded["subs"]["alice"]
    assert alice["status"] == "PASS", alice
    assert alice["earned"] == 10 and alice["total"] == 10 and alice["pass_line"] == 8
    assert not alice["tampering"] and not alice["problems"]
    flash = _items(alice)["gpu-flash/flash-attention"]
    assert flash["earned"] == 4 and "10 cases match" in flash["message"]  # hidden cases ran


def test_wrong_submission_gets_points_per_item_and_the_veto(graded, record_rejection):
    bob = graded["subs"]["bob"]
    items = _items(bob)
    assert bob["status"] == "FAIL" and bob["earned"] == 6
    assert items["gpu-flash/flash-attention"]["status"] == "wrong"
    assert "were not rescaled" in items["gpu-flash/flash-attention"]["message"]
    assert items["gpu-flash/q1-memory"]["earned"] == 2
    assert items["gpu-flash/misconceptions"]["status"] == "veto"
    assert any("flash_reduces_flops" in v for v in bob["vetoes"])
    assert any("output of `try-flash-attention` was cut" in n for n in bob["notes"])
    # the failing student cell is just a failed item; its 2 MB message stays out of the XML
    cases = _pytest_cases(graded["out"], "bob")
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert "ValueError: yyy" in failed["Cell 11"].text
    assert all(len(f.text) <= grade.FAILURE_CHARS for f in failed.values())
    assert "were not rescaled" in failed["Cell 12"].text  # check-flash-attention, with the hint
    assert (graded["out"] / "pytest-junit.xml").stat().st_size < 200_000
    record_rejection("grade/lesson-notebook", "wrong answer and veto misconception")


def test_tampered_submission_fails_and_says_what_changed(graded, record_rejection):
    carol = graded["subs"]["carol"]
    text = "\n".join(carol["tampering"])
    assert carol["status"] == "TAMPERED"
    assert "grading cell `check-q1` was edited" in text
    assert "answer-q2, line" in text and "np.allclose" in text
    assert "patched at run time: numpy.allclose" in text  # the in-kernel snapshot saw it too
    # the pristine check ran in place of the edited one: the wrong Q1 earned nothing
    assert _items(carol)["gpu-flash/q1-memory"]["status"] == "wrong"
    record_rejection("grade/tamper", "edited check cell and patched np.allclose")


def test_malformed_notebook_gets_a_line(graded):
    dave = graded["subs"]["dave"]
    assert dave["status"] == "MALFORMED"
    assert "not valid JSON" in dave["problems"][0]


def test_infinite_loop_is_interrupted_and_grading_goes_on(graded):
    erin = graded["subs"]["erin"]
    items = _items(erin)
    assert items["gpu-flash/flash-attention"]["status"] == "timeout"
    assert items["gpu-flash/q1-memory"]["status"] == "pass"  # later cells still ran
    assert items["gpu-flash/q3-tools"]["status"] == "error"
    assert "NameError" in items["gpu-flash/q3-tools"]["message"]
    # nbval went on after the timeout; the later check's failure is a failure, not an xfail
    cases = {c.get("name"): c for c in _pytest_cases(graded["out"], "erin")}
    assert "fcgrade timeout" in cases["Cell 11"].find("failure").text
    assert "NameError" in cases["Cell 16"].find("failure").text
    assert not any(c.find("skipped") is not None for c in cases.values())
    assert any("answer cell `answer-q3` is missing" in p for p in erin["problems"])
    assert erin["status"] == "FAIL"


def test_kernel_crash_gets_a_line(graded):
    frank = graded["subs"]["frank"]
    assert frank["status"] == "CRASHED"
    assert any("kernel died" in p and "answer-q2" in p for p in frank["problems"])
    items = _items(frank)
    assert items["gpu-flash/q1-memory"]["status"] == "pass"
    assert items["gpu-flash/q2-coalescing"]["status"] == "not run"
    cases = {c.get("name"): c for c in _pytest_cases(graded["out"], "frank")}
    died = cases["Cell 14"]  # answer-q2: noticed at once, not after the cell timeout
    assert "fcgrade kernel died" in died.find("failure").text
    assert float(died.get("time")) < TIMEOUT / 2
    assert "Kernel dead on test start" in cases["Cell 15"].find("failure").text


def test_reports_exit_status_and_untouched_submissions(graded):
    assert graded["unchanged"], "grading modified a submitted file"
    assert graded["status"] == 1  # not every submission passed
    out = graded["out"]
    text = graded["stdout"]
    assert "alice/01-gpu-flash.ipynb: PASS" in text and "Total: 10/10 (pass line 8)" in text
    assert "TAMPERED: grading cell `check-q1` was edited" in text
    rows = {r["submission"].split("/")[0]: r
            for r in csv.DictReader((out / "results.csv").open())}
    assert rows["alice"]["points"] == "10" and rows["alice"]["gpu-flash/q2-coalescing"] == "2"
    assert rows["bob"]["gpu-flash/misconceptions"] == "veto"
    suites = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    assert len(suites) == 6
    alice = next(s for s in suites if s.get("name").startswith("alice"))
    assert alice.get("failures") == "0"
    cases = _pytest_cases(out, "alice")  # pytest's own: every code cell an item, all passed
    assert [c.get("name") for c in cases] == [f"Cell {n}" for n in range(len(cases))]
    ids = [c.find("properties/property[@name='fcgrade_cell_id']").get("value") for c in cases]
    assert len(cases) == 22 and ids[0] == grade.SNAPSHOT_ID and ids[-1] == grade.RESULTS_ID
    assert all(c.find("failure") is None and c.find("error") is None for c in cases)
    page = (out / "progress.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "1 of 6 submissions passed" in page
    assert (out / "scorecard.txt").exists() and len(list((out / "executed").iterdir())) == 5


def test_nothing_to_grade_exits_2(tmp_path):
    assert main(["grade", str(tmp_path), "--out", str(tmp_path / "o")]) == 2


# ---------------------------------------------------------------- without a kernel

TAMPERING = {
    "check = lambda *a: None": "assigns to `check`",
    "import numpy\nnumpy.allclose = lambda *a, **k: True": "numpy.allclose",
    "np.allclose = lambda *a, **k: True": "np.allclose",
    "import flashcourse\nflashcourse.grading.compare = lambda *a, **k: None":
        "flashcourse.grading.compare",
    "fc.grading.RESULTS['gpu-flash/flash-attention'] = 4": "RESULTS",
    "from flashcourse.grading import RESULTS\nRESULTS.update({'x': 4})": "mutates `RESULTS`",
    "import flashcourse.reference as r\nr.standard_attention = lambda Q, K, V: Q": "r.standard",
    "def standard_attention(Q, K, V):\n    return Q": "defines a function named",
    "import builtins\nbuiltins.print = None": "imports `builtins`",
    "setattr(np, 'allclose', max)": "calls `setattr()`",
    "np.__dict__['allclose'] = max": "np.__dict__",
    "import sys\nsys.modules['numpy'] = None": "sys.modules",
    "from mymodule import check": "binds `check`",
    "exec('x = 1')": "calls `exec()`",
    "torch.allclose = max": "torch.allclose",
    "!pip install cheat": "shell command",
    "%run cheat.py": "magic `%run`",
    "%time np.allclose = max": "np.allclose",
}


@pytest.mark.parametrize("source", list(TAMPERING))
def test_scan_flags_tampering(source, record_rejection):
    cells = [{"cell_type": "code", "id": "answer-x", "source": source}]
    findings = [str(f) for f in grade_tamper.scan_student_cells(cells)]
    assert any(TAMPERING[source] in f for f in findings), findings
    assert all(f.startswith("answer-x") for f in findings)
    record_rejection("grade/tamper", source.splitlines()[-1])


def test_scan_accepts_every_solution_cell(root):
    nb = json.loads((root / "solutions" / "01-gpu-flash.ipynb").read_text())
    assert grade_tamper.scan_student_cells(nb["cells"]) == []


def test_grading_cells_compared_with_the_exercise(root):
    pristine = json.loads((root / "exercises" / "01-gpu-flash.ipynb").read_text())["cells"]
    submitted = [dict(c) for c in pristine if c.get("id") != "check-q2"]
    _cell({"cells": submitted}, "scorecard")["source"] = "print('Total: 10/10')"
    problems = grade_tamper.compare_grading_cells(pristine, submitted)
    assert any("`check-q2` was deleted" in p for p in problems)
    assert any("`scorecard` was edited" in p for p in problems)


def test_run_notebook_uses_pristine_grading_cells_in_place(root):
    pristine = json.loads((root / "exercises" / "01-gpu-flash.ipynb").read_text())
    submitted = grade_samples.filled_notebook(root)
    submitted["cells"] = [c for c in submitted["cells"] if c.get("id") != "check-q2"]
    _cell(submitted, "check-q1")["source"] = "pass"
    run = grade.build_run_notebook(submitted, pristine, "NONCE:")
    ids = [c["id"] for c in run["cells"]]
    assert ids[0] == grade.SNAPSHOT_ID and ids[-1] == grade.RESULTS_ID
    assert ids.index("check-q2") == ids.index("answer-q2") + 1
    assert _cell(run, "check-q1")["source"] == 'check("gpu-flash/q1-memory", q1_answers)'


def test_integrity_snapshot_sees_a_patch():
    import numpy as np

    grade.integrity_snapshot()
    original = np.allclose
    try:
        np.allclose = lambda *a, **k: True
        assert "numpy.allclose" in grade.integrity_changes()
    finally:
        np.allclose = original
    assert grade.integrity_changes() == []
