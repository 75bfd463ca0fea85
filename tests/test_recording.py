"""Record and replay (flashcourse.checks.recording): a check run with a record folder, then
replayed in
the grader's way, gives the same verdict; a changed record, a record without the hidden cases,
a record of other inputs and an answer that is not plain data are all refused."""


import numpy as np
import pytest

from flashcourse.authoring import cells
from flashcourse.checks import recording, registry

LESSON = "lessons/01-gpu-flash.qmd"
EXERCISE = "gpu-flash/flash-attention"


@pytest.fixture
def flash_attention(root):
    return cells.load_name(root / LESSON, "exercise-flash-attention", "flash_attention")


def test_replay_of_a_right_answer_passes(record_check, monkeypatch, flash_attention):
    _, record = record_check(EXERCISE, flash_attention)
    assert len(record["events"]) > 10  # visible and hidden cases, each recorded
    assert "11 cases match" in registry.replay(EXERCISE, record)


def test_replay_rejects_a_changed_result(record_check, monkeypatch, flash_attention,
                                         record_rejection):
    _, record = record_check(EXERCISE, flash_attention)
    event = next(e for e in record["events"] if e["label"].startswith("case"))
    value = recording.decode(event["result"])
    event["result"] = recording.encode(np.asarray(value) * 1.01)
    with pytest.raises(registry.WrongAnswer, match="max abs error"):
        registry.replay(EXERCISE, record)
    record_rejection("grade/replay", "a recorded result changed after the run")


def test_replay_rejects_a_record_without_hidden_cases(record_check, monkeypatch, flash_attention,
                                                      record_rejection):
    _, record = record_check(EXERCISE, flash_attention, grading_mode="0")
    with pytest.raises(recording.RecordMismatch, match="record"):
        registry.replay(EXERCISE, record)
    record_rejection("grade/replay", "hidden cases switched off in the notebook")


def test_replay_rejects_other_inputs(record_check, monkeypatch, flash_attention, record_rejection):
    _, record = record_check(EXERCISE, flash_attention)
    record["events"][2]["inputs"] = "0" * 64
    with pytest.raises(recording.RecordMismatch, match="inputs"):
        registry.replay(EXERCISE, record)
    record_rejection("grade/replay", "a record made on other inputs")


def test_answers_must_be_plain_data(record_check, monkeypatch, record_rejection):
    class Anything:
        def __eq__(self, other):
            return True

    answers = {key: Anything() for key in registry.get("gpu-flash/q1-memory").answers}
    _, record = record_check("gpu-flash/q1-memory", answers)
    assert "unsupported" in record["answer"]
    with pytest.raises(registry.WrongAnswer, match="not plain data"):
        registry.replay("gpu-flash/q1-memory", record)
    record_rejection("grade/replay", "answers that compare equal to anything")


def test_decode_builds_only_plain_values():
    data = recording.encode({"a": (1, 2.5, float("inf")), "b": np.arange(3.0), "c": None})
    assert recording.decode(data)["a"] == (1, 2.5, float("inf"))
    with pytest.raises(recording.RecordMismatch):
        recording.decode({"array": "|O", "shape": [1], "data": ""})
    with pytest.raises(recording.RecordMismatch):
        recording.decode({"pickle": "anything"})


def test_notebook_scorecard_fails_an_unanswered_veto(monkeypatch):
    registry.get(EXERCISE)
    monkeypatch.setattr(registry, "RESULTS", {})
    monkeypatch.setattr(registry, "VETOES_HIT", {})
    monkeypatch.setattr(registry, "ATTEMPTS", {})
    for item in registry.LESSONS["gpu-flash"].exercises:
        if item.kind != "veto":
            registry.RESULTS[item.id] = item.points
    with pytest.raises(registry.NotStarted, match="not judged yet"):
        registry.scorecard("gpu-flash")
    registry.RESULTS["gpu-flash/misconceptions"] = 0
    assert registry.scorecard("gpu-flash") == 10


def test_a_secret_reseeds_every_case(record_check, monkeypatch, flash_attention, record_rejection):
    _, public = record_check(EXERCISE, flash_attention, folder="public")
    monkeypatch.setenv(registry.SECRET_ENV, "instructor-only")
    _, secret = record_check(EXERCISE, flash_attention, folder="secret")
    assert "11 cases match" in registry.replay(EXERCISE, secret)
    assert [e["inputs"] for e in public["events"]] != [e["inputs"] for e in secret["events"]]
    with pytest.raises(recording.RecordMismatch, match="inputs"):
        registry.replay(EXERCISE, public)  # made without the secret: other inputs
    record_rejection("grade/replay", "a record made on the public seeds")


def test_a_launch_records_the_tensors_not_what_the_launch_returns(monkeypatch):
    """Compiled Triton returns a CompiledKernel from kernel[grid](...) (the interpreter returns
    None): a check's launch must record the tensors the kernel wrote, not that object."""
    import torch

    from flashcourse.checks import guards

    class Launched:  # stands for triton.compiler.CompiledKernel
        pass

    class Kernel:
        def __getitem__(self, grid):
            def run(out):
                out.fill_(1.0)
                return Launched()
            return run

    monkeypatch.setattr(recording, "_record_in_progress",
                        {"exercise": "x", "answer": {}, "events": []})
    guards.launch(Kernel(), (1,), "case 1", torch.zeros(4))
    event = recording._record_in_progress["events"][0]
    assert event["result"] is None
    monkeypatch.setattr(recording, "_record_in_progress", None)
    replayed = torch.zeros(4)
    with recording.replaying({"events": [event]}):
        guards.launch(recording.StandIn("kernel"), (1,), "case 1", replayed)
    assert replayed.tolist() == [1.0] * 4
