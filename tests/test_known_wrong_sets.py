"""The from-scratch exercises' known-wrong answers get their diagnosis compiled on a GPU as in
the interpreter: gpu/check_known_wrong.py runs the suite's own tables on either runtime, and
the tables it recorded (assets/results/known-wrong-*.csv) must cover every answer there is now,
each diagnosed. A table changed without a GPU run fails here until the script runs again."""

import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FROM_SCRATCH = {"roofline/axpy-kernel", "softmax/masked-softmax",
                "flash-triton/forward-from-scratch", "modern-attention/split-size",
                "modern-attention/paged-split", "modern-attention/merge-states",
                "capstone/forward", "capstone/backward"}


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("check_known_wrong",
                                                  ROOT / "gpu" / "check_known_wrong.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def answers(script):
    """{(exercise, mistake)} of every table the script runs."""
    found = set()
    for load in script.SETS:
        exercise, wrong = load()
        found |= {(exercise, mistake) for mistake in wrong}
    return found


def test_every_from_scratch_exercise_has_a_set(answers):
    assert {exercise for exercise, _ in answers} == FROM_SCRATCH
    assert len(answers) >= 60


@pytest.mark.parametrize("runtime", ["gpu", "interpreter"])
def test_the_recorded_run_diagnosed_every_answer(answers, runtime):
    path = ROOT / "assets" / "results" / f"known-wrong-{runtime}.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    recorded = {(row["exercise"], row["mistake"]): row["verdict"] for row in rows}
    missing = sorted(answers - set(recorded))
    assert not missing, f"{path.name} lacks {missing}: run gpu/check_known_wrong.py again"
    wrong = {key: verdict for key, verdict in recorded.items() if verdict != "diagnosed"}
    assert not wrong, wrong
    if runtime == "gpu":
        assert all("H200" in row["runtime"] and "Triton" in row["runtime"] for row in rows)
