"""The suite's notebook budget (the root conftest.py) counts the kernel's CPU time, and fails."""

import importlib.util
import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def budget():
    spec = importlib.util.spec_from_file_location("notebook_budget", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_cpu_seconds_count_work_not_waiting(budget):
    before = budget._process_cpu_seconds(os.getpid())
    time.sleep(0.3)  # waiting costs no CPU time
    slept = budget._process_cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    worked = budget._process_cpu_seconds(os.getpid())
    assert slept - before < 0.15
    assert worked - slept > 0.2


def test_unreadable_process_gives_no_figure(budget):
    assert budget._process_cpu_seconds(2**31 - 1) is None


def test_notebook_over_budget_fails_the_run(budget, monkeypatch):
    monkeypatch.setenv("FLASHCOURSE_INTERPRET", "1")  # the budget holds for interpreter runs
    monkeypatch.setattr(budget, "_notebook_cpu_seconds", {
        "solutions/a.ipynb": budget.NOTEBOOK_BUDGET_S - 1,
        "solutions/b.ipynb": budget.NOTEBOOK_BUDGET_S + 1})
    assert list(budget._over_budget()) == ["solutions/b.ipynb"]
