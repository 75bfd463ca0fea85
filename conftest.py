"""Suite-wide time budget: each solution notebook must run under nbval within NOTEBOOK_BUDGET_S
seconds of its kernel's CPU time.

CPU time, not wall time: on a loaded machine (CI's two cores, three workers, a book rendering
beside them) a notebook's wall time grows two to four times while the work it does stays the
same, and a verdict must not depend on how busy the machine is today. Wall time is printed
beside it, for reading only."""

import os
from collections import defaultdict
from pathlib import Path

import pytest

# The solutions and the tests answer with the lessons' own numbers: no student id, whatever the
# shell that runs them sets for ./course submit (checks/numbers.py).
os.environ.pop("FLASHCOURSE_STUDENT", None)

NOTEBOOK_BUDGET_S = 60.0
_KERNEL_CPU_KEY = "kernel_cpu_s"
_notebook_seconds: dict[str, float] = defaultdict(float)
_notebook_cpu_seconds: dict[str, float] = {}


def _process_cpu_seconds(pid):
    """User + system CPU seconds of process `pid` and its reaped children (Linux /proc), or
    None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command name: state is field 3, utime..cstime are fields 14-17 (proc(5)).
    ticks = sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _kernel_pid(item):
    kernel = getattr(item.parent, "kernel", None)
    provisioner = getattr(getattr(kernel, "km", None), "provisioner", None)
    return getattr(provisioner, "pid", None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or ".ipynb::" not in item.nodeid:
        return
    pid = _kernel_pid(item)
    seconds = _process_cpu_seconds(pid) if pid else None
    if seconds is not None:  # cumulative: the notebook's figure is its last cell's
        outcome.get_result().user_properties.append((_KERNEL_CPU_KEY, seconds))


def pytest_runtest_logreport(report):
    path, sep, _ = report.nodeid.partition(".ipynb::")
    if not sep:
        return
    notebook = path + ".ipynb"  # one nbval cell; with xdist these reports reach the controller
    _notebook_seconds[notebook] += report.duration
    for key, value in report.user_properties:
        if key == _KERNEL_CPU_KEY:
            _notebook_cpu_seconds[notebook] = max(_notebook_cpu_seconds.get(notebook, 0), value)


def _over_budget():
    """The budget is for interpreter runs (students without a GPU, CI, the test suite even on
    a GPU machine); compiled on a GPU, measurement cells run for real."""
    import torch

    from flashcourse.runtime import truthy

    if torch.cuda.is_available() and not truthy(os.environ.get("FLASHCOURSE_INTERPRET")):
        return {}
    return {nb: s for nb, s in _notebook_cpu_seconds.items() if s > NOTEBOOK_BUDGET_S}


def pytest_terminal_summary(terminalreporter):
    if not _notebook_seconds:
        return
    terminalreporter.section(
        f"notebook run times (budget {NOTEBOOK_BUDGET_S:.0f} s of kernel CPU time each)")
    over = _over_budget()
    for notebook, seconds in sorted(_notebook_seconds.items()):
        cpu = _notebook_cpu_seconds.get(notebook)
        cpu_text = f"{cpu:7.1f} s CPU" if cpu is not None else "    CPU time not read"
        flag = "  OVER BUDGET" if notebook in over else ""
        terminalreporter.write_line(f"{cpu_text}  {seconds:7.1f} s wall  {notebook}{flag}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _over_budget() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# Seconds of the heaviest test modules on a 2-core machine with three workers (their module
# fixtures grade or render for minutes). `./course test` deals whole modules to its workers
# (--dist loadscope) in collection order: the heaviest go first, so that no worker is left with
# one of them at the end while the others idle. Only the order changes; no test depends on these
# numbers.
HEAVY_MODULES_S = {
    "tests/test_release.py": 230, "tests/test_book.py": 210, "tests/test_grade.py": 180,
    "tests/test_perf.py": 100, "tests/test_release_answers.py": 80,
    "tests/test_exercises.py": 77, "tests/test_modern_attention.py": 65,
    "tests/test_ring_attention.py": 38, "tests/test_pytest_plugin.py": 38,
    "tests/test_flash_forward.py": 36, "tests/test_capstone.py": 35,
    "tests/test_translation.py": 34, "tests/test_sparse_forward.py": 32,
    "tests/test_ci_recipes.py": 28, "tests/test_browser.py": 26,
    "tests/test_grade_shards.py": 21,
}


def pytest_configure(config):
    # xdist's loadscope sorts the modules by their number of tests unless told not to, which
    # would undo the order above (the two heaviest modules have about 25 tests each).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    def weight(item):
        return -HEAVY_MODULES_S.get(item.nodeid.split("::")[0], 0)

    items.sort(key=weight)  # stable: the order within a module and among the rest stays
