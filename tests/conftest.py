import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tests never touch a GPU: CI has none, and a local GPU must not change what is graded here.
os.environ.setdefault("FLASHCOURSE_INTERPRET", "1")
# Choose the runtime (and set TRITON_INTERPRET) before any test module imports triton: Triton
# 3.9 fixes interpreter mode for its builtins at import time.
from flashcourse import runtime  # noqa: E402

runtime.setup(verbose=False)


@pytest.fixture(autouse=True)
def _fresh_grading_state():
    from flashcourse.checks import registry

    registry.RESULTS.clear()
    registry.VETOES_HIT.clear()
    registry.ATTEMPTS.clear()
    yield


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT



# ---------------------------------------------------------------- right answers and blanks


@pytest.fixture
def passes_with_points(capsys):
    """`passes_with_points(exercise_id, answer)`: the check passes, says so with a tick, says
    that graders also run hidden cases, and counts the exercise's points; returns its line."""
    from flashcourse.checks import registry

    def run(exercise_id: str, answer) -> str:
        registry.check(exercise_id, answer)
        out = capsys.readouterr().out
        assert out.startswith(f"\u2713 {exercise_id}: "), out
        assert "(graders also run hidden cases)" in out
        assert registry.RESULTS[exercise_id] == registry.EXERCISES[exercise_id].points
        return out

    return run


@pytest.fixture
def graded_case_count(capsys, monkeypatch):
    """`graded_case_count(exercise_id, answer)`: how many cases the check passes in grading
    mode, hidden ones included; its line must not speak of hidden cases there."""
    import re

    from flashcourse.checks import registry

    def run(exercise_id: str, answer) -> int:
        monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
        registry.check(exercise_id, answer)
        out = capsys.readouterr().out
        assert "hidden" not in out, out
        return int(re.search(r": (\d+) cases", out).group(1))

    return run


@pytest.fixture
def refuses_blank():
    """`refuses_blank(exercise_id, answer, target)`: the check refuses an answer whose
    `target = ...` line is a blank, with "Fill in the blank" and that line; returns the
    message."""
    from flashcourse.checks import registry

    def run(exercise_id: str, answer, target: str) -> str:
        with pytest.raises(registry.BlankNotFilled, match="Fill in the blank") as caught:
            registry.check(exercise_id, answer)
        assert f"{target} = ______" in str(caught.value), caught.value
        return str(caught.value)

    return run


# ---------------------------------------------------------------- record and replay


@pytest.fixture
def record_check(tmp_path, monkeypatch):
    """`record_check(exercise_id, answer)` runs the check as the grader's sandbox does (a record
    folder; hidden cases unless grading_mode="0") and returns (the WrongAnswer or BlankNotFilled
    it raised, or None; the record it wrote). Each call with another `folder` keeps its own."""
    import json

    from flashcourse.checks import recording, registry

    def run(exercise_id: str, answer, folder: str = "record", grading_mode: str = "1"):
        target = tmp_path / folder
        monkeypatch.setenv(recording.RECORD_DIR_ENV, str(target))
        monkeypatch.setenv(registry.GRADING_MODE_ENV, grading_mode)
        raised = None
        try:
            registry.check(exercise_id, answer)
        except (registry.WrongAnswer, registry.BlankNotFilled) as err:
            raised = err
        finally:
            monkeypatch.delenv(recording.RECORD_DIR_ENV)
            monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
        return raised, json.loads((target / recording.record_name(exercise_id)).read_text())

    return run


@pytest.fixture
def replay_agrees():
    """`replay_agrees(exercise_id, raised, record, passed)`: the grader's replay of `record`
    gives the check's own verdict, a pass whose summary holds `passed` or the very message the
    check raised (`raised`, from `record_check`)."""
    from flashcourse.checks import registry

    def agree(exercise_id: str, raised, record, passed: str) -> None:
        if raised is None:
            assert passed in registry.replay(exercise_id, record)
        else:
            with pytest.raises(registry.WrongAnswer) as caught:
                registry.replay(exercise_id, record)
            assert str(caught.value) == str(raised)

    return agree

# ---------------------------------------------------------------- known-wrong answers
# Every test module that shows a known-wrong answer being rejected records it here; the
# terminal summary prints "known-wrong answers rejected: R / T" over the whole suite (also
# under pytest-xdist, whose workers send their records to the controller).
#
#     def test_mistake(known_wrong):
#         with known_wrong("lesson/exercise", "forgot the mask", match="mask"):
#             check("lesson/exercise", wrong_answer)
#
# or, after your own pytest.raises, call the `record_rejection` fixture:
# `record_rejection("lesson/exercise", "forgot the mask")`.

KNOWN_WRONG: dict[tuple[str, str], bool] = {}  # (exercise id, mistake) -> rejected
_WORKER_KEY = "flashcourse_known_wrong"


def _record_rejection(exercise_id: str, mistake: str, rejected: bool = True) -> None:
    key = (exercise_id, mistake)
    KNOWN_WRONG[key] = KNOWN_WRONG.get(key, False) or rejected


@pytest.fixture
def record_rejection():
    """`record_rejection(exercise_id, mistake)`: count a known-wrong answer that was rejected."""
    return _record_rejection


@pytest.fixture
def known_wrong():
    """Context manager: `with known_wrong(exercise_id, mistake, match=...): check(...)` counts
    the attempt, expects the check to raise (WrongAnswer by default, which includes vetoes),
    and counts it as rejected when it does."""
    import contextlib

    from flashcourse import WrongAnswer

    @contextlib.contextmanager
    def expect(exercise_id: str, mistake: str, exc=WrongAnswer, match: str | None = None):
        _record_rejection(exercise_id, mistake, rejected=False)
        with pytest.raises(exc, match=match) as caught:
            yield caught
        _record_rejection(exercise_id, mistake)

    return expect


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the records to the controller
        workeroutput[_WORKER_KEY] = [[e, m, r] for (e, m), r in KNOWN_WRONG.items()]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    for exercise_id, mistake, rejected in getattr(node, "workeroutput", {}).get(_WORKER_KEY, []):
        _record_rejection(exercise_id, mistake, rejected)


def pytest_terminal_summary(terminalreporter):
    if not KNOWN_WRONG:
        return
    rejected = sum(KNOWN_WRONG.values())
    terminalreporter.write_sep("-", "known-wrong answers")
    terminalreporter.write_line(f"known-wrong answers rejected: {rejected} / {len(KNOWN_WRONG)}")
    by_exercise: dict[str, list[bool]] = {}
    for (exercise_id, _), ok in sorted(KNOWN_WRONG.items()):
        by_exercise.setdefault(exercise_id, []).append(ok)
    for exercise_id, oks in by_exercise.items():
        terminalreporter.write_line(f"  {exercise_id}: {sum(oks)} / {len(oks)}")
    for (exercise_id, mistake), ok in sorted(KNOWN_WRONG.items()):
        if not ok:
            terminalreporter.write_line(f"  NOT rejected: {exercise_id}: {mistake}")


# The browser of the Chromium tests (test_browser, test_grade_analytics); `sync_api` skips a
# test, saying why, when it or Playwright is missing.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def sync_api():
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    return pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)")
