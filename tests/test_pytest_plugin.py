"""`pytest --nbval SUBMISSION.ipynb` grades (flashcourse.grader.pytest_plugin): the grading
cells come from the pristine exercise, stored outputs change nothing, each exercise is a test,
and the exit status is 0 exactly when every submission passed."""

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from flashcourse.grader import samples

LESSON = "01-gpu-flash"


def _pytest(folder, names, report) -> subprocess.Popen:
    """Start pytest --nbval on the named notebooks of `folder`; its output is its stdout."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "addopts=", "--nbval", "--nbval-current-env", f"--junitxml={report}",
         *[f"{name}-{LESSON}.ipynb" for name in names]],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(run: subprocess.Popen) -> tuple[int, str]:
    output, _ = run.communicate(timeout=900)
    return run.returncode, output


def _verdicts(report) -> dict[str, dict]:
    """test name -> {"failed": bool, properties...} from the JUnit XML."""
    found = {}
    for case in ET.parse(report).iter("testcase"):
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        failed = case.find("failure") is not None or case.find("error") is not None
        found[f"{case.get('classname')}::{case.get('name')}"] = {"failed": failed, **properties}
    return found


def _fake_success_outputs(nb: dict) -> dict:
    """Every check cell's stored output replaced by a success line: what a student could save."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code" and str(cell.get("id", "")).startswith("check-"):
            cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                                "text": "\u2713 all answers right\n"}]
    return nb


@pytest.fixture(scope="module")
def graded(root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("nbval-submissions")
    untouched = json.loads((root / "exercises" / f"{LESSON}.ipynb").read_text())
    notebooks = {
        "untouched": untouched,
        "faked": _fake_success_outputs(untouched),  # blanks, with stored "success" outputs
        "right": samples.filled_notebook(root),
        "wrong": samples.filled_notebook(root, mistakes=("no-rescale",)),
        "q1": samples.filled_notebook(root, mistakes=("q1-wrong",)),  # 8/10: still passes
    }
    for name, nb in notebooks.items():
        # graded alone, a notebook is named by its file: its questions get that name's numbers
        file_name = f"{name}-{LESSON}.ipynb"
        samples.write(samples.answered_as(nb, file_name), folder / file_name)
    # two runs at once: one with only passing submissions, one with only failing ones
    passing_run = _pytest(folder, ["right", "q1"], folder / "passing.xml")
    failing_run = _pytest(folder, ["untouched", "faked", "wrong"], folder / "failing.xml")
    passing, passing_output = _finish(passing_run)
    status, output = _finish(failing_run)
    return {"status": status, "output": output, "passing_status": passing,
            "passing_output": passing_output,
            "verdicts": _verdicts(folder / "failing.xml") | _verdicts(folder / "passing.xml")}


def _tests(graded, name):
    return {key.rsplit("::", 1)[1]: value for key, value in graded["verdicts"].items()
            if f"{name}-{LESSON}" in key}


def test_an_untouched_submission_fails_every_check(graded, record_rejection):
    tests = _tests(graded, "untouched")
    assert len(tests) == 6, tests  # five exercises and the scorecard
    assert all(value["failed"] for value in tests.values()), tests
    assert graded["status"] == 1
    record_rejection("grade/nbval", "untouched exercise")


def test_stored_outputs_change_nothing(graded, record_rejection):
    faked = _tests(graded, "faked")
    assert all(value["failed"] for value in faked.values()), faked
    record_rejection("grade/nbval", "blank answers with stored success outputs")


def test_a_right_submission_passes_with_its_points(graded):
    tests = _tests(graded, "right")
    assert tests and not any(value["failed"] for value in tests.values()), tests
    assert tests["scorecard"]["points"] == "10.0" and tests["scorecard"]["status"] == "PASS"
    assert "right-01-gpu-flash.ipynb: PASS 10/10" in graded["passing_output"]


def test_a_wrong_answer_fails_its_own_check_only(graded, record_rejection):
    tests = _tests(graded, "wrong")
    failed = {name for name, value in tests.items() if value["failed"]}
    assert failed == {"gpu-flash/flash-attention", "scorecard"}, failed  # 6/10: lesson fails
    q1 = {name for name, value in _tests(graded, "q1").items() if value["failed"]}
    assert q1 == {"gpu-flash/q1-memory"}, q1
    record_rejection("grade/nbval", "wrong flash attention")


def test_exit_status_is_zero_exactly_when_every_submission_passed(graded):
    # the q1 submission has a failed exercise but passes its lesson (8/10)
    assert graded["passing_status"] == 0, graded["passing_output"][-2000:]
    assert graded["status"] == 1, graded["output"][-2000:]
