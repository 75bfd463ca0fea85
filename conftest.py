"""Suite-wide time budget: each solution notebook must run under nbval in NOTEBOOK_BUDGET_S."""

import os
from collections import defaultdict

import pytest

# The solutions and the tests answer with the lessons' own numbers: no student id, whatever the
# shell that runs them sets for ./course submit (checks/numbers.py).
os.environ.pop("FLASHCOURSE_STUDENT", None)

NOTEBOOK_BUDGET_S = 60.0
_notebook_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    path, sep, _ = report.nodeid.partition(".ipynb::")
    if sep:  # one nbval cell; with xdist these reports reach the controller too
        _notebook_seconds[path + ".ipynb"] += report.duration


def _over_budget():
    """The budget is for interpreter runs (students without a GPU, CI, the test suite even on
    a GPU machine); compiled on a GPU, measurement cells run for real."""
    import os

    import torch

    from flashcourse.runtime import truthy

    if torch.cuda.is_available() and not truthy(os.environ.get("FLASHCOURSE_INTERPRET")):
        return {}
    return {nb: s for nb, s in _notebook_seconds.items() if s > NOTEBOOK_BUDGET_S}


def pytest_terminal_summary(terminalreporter):
    if not _notebook_seconds:
        return
    terminalreporter.section(f"notebook run times (budget {NOTEBOOK_BUDGET_S:.0f} s each)")
    over = _over_budget()
    for notebook, seconds in sorted(_notebook_seconds.items()):
        flag = "  OVER BUDGET" if notebook in over else ""
        terminalreporter.write_line(f"{seconds:7.1f} s  {notebook}{flag}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _over_budget() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
