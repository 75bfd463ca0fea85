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


# Rough seconds of the heaviest test modules on a 2-core machine (their module fixtures grade
# or render for minutes). `./course test` deals whole modules to its workers in collection order
# (--dist loadscope): the heaviest go first, so that no worker is left with one of them at the end
# while the others idle. Only the order changes; no test depends on these numbers.
HEAVY_MODULES_S = {
    "tests/test_grade.py": 330, "tests/test_release.py": 210, "tests/test_book.py": 190,
    "tests/test_release_answers.py": 130, "tests/test_pytest_plugin.py": 95,
    "tests/test_perf.py": 90, "tests/test_exercises.py": 90, "tests/test_i18n.py": 60,
    "tests/test_grade_shards.py": 45, "tests/test_translation.py": 40,
    "tests/test_ci_recipes.py": 35, "tests/test_browser.py": 35,
}


def pytest_collection_modifyitems(config, items):
    def weight(item):
        return -HEAVY_MODULES_S.get(item.nodeid.split("::")[0], 0)

    items.sort(key=weight)  # stable: the order within a module and among the rest stays
