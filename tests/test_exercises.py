"""Untouched exercise notebooks must fail every grading cell with an actionable message, and
never with a NameError or a Triton stack trace."""

from pathlib import Path

import nbformat
import pytest
from notebook_runs import run_notebook

from flashcourse.authoring import build
from flashcourse.grader.scan import CHECK_PREFIX

ROOT_LESSONS = [p.stem for p in build.lesson_paths(Path(__file__).resolve().parents[1])]
# the course's own errors, each saying what to do: a blank, a stub not started, a wrong answer
ACTIONABLE = ("BlankNotFilled", "NotStarted", "WrongAnswer")


@pytest.mark.parametrize("slug", ROOT_LESSONS)
def test_untouched_exercise_fails_every_check(root, slug):
    nb = nbformat.read(root / "exercises" / f"{slug}.ipynb", as_version=4)
    run_notebook(nb, root / "exercises")
    check_cells = [c for c in nb.cells if c.cell_type == "code" and c.id.startswith(CHECK_PREFIX)]
    assert check_cells, f"{slug} has no grading cells (ids starting with 'check-')"
    for cell in check_cells:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert errors, f"{slug}: grading cell {cell.id} passed on the untouched exercise"
        assert errors[0].ename in ACTIONABLE, (
            f"{slug}: grading cell {cell.id} raised {errors[0].ename}: {errors[0].evalue}")
        assert "Fill in the blank" in errors[0].evalue or "NotImplementedError" in \
            errors[0].evalue or "not passed" in errors[0].evalue, errors[0].evalue
    # Run All in JupyterLab stops at a cell that raises unless it is tagged raises-exception:
    # every cell that raises here, but the scorecard at the end, must carry the tag.
    code = [c for c in nb.cells if c.cell_type == "code"]
    stops = [c.id for c in code[:-1] if any(o.output_type == "error" for o in c.outputs)
             and "raises-exception" not in c.metadata.get("tags", [])]
    assert not stops, f"{slug}: Run All would stop at {stops}"
    # and strict nbval fails the notebook: its last cell, the scorecard, raises untagged
    scorecard = code[-1]
    assert "fc.scorecard(" in scorecard.source, f"{slug}: the last code cell is not the scorecard"
    assert any(o.output_type == "error" for o in scorecard.outputs), (
        f"{slug}: the scorecard passed on the untouched exercise")
    assert "raises-exception" not in scorecard.metadata.get("tags", []), slug


def test_pytest_nbval_fails_on_an_untouched_exercise(root, tmp_path):
    """The literal grader claim, run once: strict `pytest --nbval` fails an untouched exercise
    (its scorecard raises, untagged; the test above checks that of every lesson)."""
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    report = tmp_path / "report.xml"
    slug = ROOT_LESSONS[0]
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
                    "addopts=", "--nbval", "--nbval-current-env", f"--junitxml={report}",
                    str(root / "exercises" / f"{slug}.ipynb")], cwd=root, capture_output=True,
                   text=True, timeout=600)
    failed = [case.get("name") for case in ET.parse(report).iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    assert failed, f"nbval passed the untouched exercise {slug}"
