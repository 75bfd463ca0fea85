import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tests never touch a GPU: CI has none, and a local GPU must not change what is graded here.
os.environ.setdefault("FLASHCOURSE_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _fresh_grading_state():
    from flashcourse import grading

    grading.RESULTS.clear()
    grading.VETOES_HIT.clear()
    yield


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
