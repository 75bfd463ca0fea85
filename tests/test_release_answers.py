"""No public function, kernel or data value of the class edition's package is an answer:
each, offered as every exercise's answer, is rejected by the instructor's grader (run by
tests/release_candidates.py, one process per lesson). In a module of its own, so that the
suite's two workers share the release's tests."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashcourse.authoring import build, release

LESSONS = [p.stem for p in build.lesson_paths(Path(__file__).resolve().parents[1])]
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def edition(tmp_path_factory, root):
    out = tmp_path_factory.mktemp("class-answers") / "edition"
    release.release(root, out, commit=False)
    return out


def _candidates(edition: Path, stems: list[str], only: str | None = None) -> dict[str, dict]:
    command = [sys.executable, str(HERE / "release_candidates.py"), str(edition), *stems]
    done = subprocess.run([*command, *(["--only", only] if only else [])], capture_output=True,
                          text=True, timeout=1500, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert done.returncode == 0, done.stderr[-3000:]
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {lesson["lesson"]: lesson for lesson in found}


@pytest.fixture(scope="module")
def offered(edition) -> dict[str, dict]:
    """Every lesson's search, in one process (the package is imported once)."""
    return _candidates(edition, LESSONS)


@pytest.mark.parametrize("stem", LESSONS)
def test_no_public_name_of_the_edition_is_accepted_as_an_answer(offered, stem,
                                                                record_rejection):
    found = offered[stem]
    assert found["tried"] > 100, found
    assert found["accepted"] == {}, found["accepted"]
    record_rejection("release/no answer ships",
                     f"{stem}: {found['tried']} public names offered as answers")


def test_the_candidate_search_finds_an_answer_where_there_is_one(root):
    """The search is not vacuous: offered a function of the instructor's check module that
    computes the online-softmax statistics, it reports it accepted."""
    name = "flashcourse.checks.softmax.common.blocked_stats"
    found = _candidates(root, ["05-softmax"], only=name)["05-softmax"]
    assert name in found["accepted"].get("softmax/online-stats", []), found


def test_a_candidate_passes_only_if_its_check_returns_in_time(monkeypatch):
    import release_candidates

    monkeypatch.setattr(release_candidates, "CANDIDATE_SECONDS", 1)

    def slow(exercise_id, value):
        time.sleep(5)

    def wrong(exercise_id, value):
        raise AssertionError("wrong")

    assert release_candidates.passes_in_time(lambda exercise_id, value: None, "x", 1)
    assert not release_candidates.passes_in_time(wrong, "x", 1)
    started = time.monotonic()
    assert not release_candidates.passes_in_time(slow, "x", 1)
    assert time.monotonic() - started < 5  # interrupted, not waited out
    time.sleep(1.5)  # no alarm is left pending to go off here
