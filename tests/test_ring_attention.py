"""Lesson 10's grader: the solutions pass on 2 and 4 gloo processes; known-wrong answers (built
by editing the lesson's own solution cells) are rejected with the message that names the
mistake; a deadlock ends in a clear message, not a hung test; the check is replayed from its
record; the numpy model, the splits and the reference rings agree with standard attention."""

import re
import time

import numpy as np
import pytest
from wrong_answers_10 import DEADLOCKS, WRONG

from flashcourse import check
from flashcourse import distributed as ring
from flashcourse.authoring import cells
from flashcourse.checks import recording, registry, self_check_files
from flashcourse.checks import ring_attention as checks
from flashcourse.checks.ring_attention import mistakes, protocol
from flashcourse.checks.ring_attention.common import shown

LESSON = "lessons/10-ring-attention.qmd"
PRELUDE = cells.PRELUDE + (
    "import torch.distributed as dist\n"
    "from flashcourse.distributed import block_attention, block_gradients, chunks_of\n")
EXERCISES = {  # exercise id: (solution cell id, function name)
    "ring-attention/ring-forward": ("exercise-ring-forward", "ring_attention_forward"),
    "ring-attention/causal-plan": ("exercise-causal-plan", "causal_step_plan"),
    "ring-attention/zigzag-split": ("exercise-zigzag-split", "zigzag_split"),
    "ring-attention/ring-backward": ("exercise-ring-backward", "ring_attention_backward"),
}
DEADLOCK_TIMEOUT_S = 1.0  # the tests' deadlocks end sooner than a student's (always in case 1)


def answer(root, exercise_id, lines=None, replace=()):
    """The lesson's solution of an exercise, after textual edits (`cells.edit`)."""
    cell_id, name = EXERCISES[exercise_id]
    source = cells.edit(cells.solution_source(root / LESSON, cell_id), replace, lines)
    return getattr(cells.load(source, prelude=PRELUDE), name)


# ---------------------------------------------------------------- right answers


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_solution_passes(root, passes_with_points, exercise_id):
    assert "on 2 and 4 ranks" in passes_with_points(exercise_id, answer(root, exercise_id))


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_hidden_cases_run_in_grading_mode(root, graded_case_count, exercise_id):
    assert graded_case_count(exercise_id, answer(root, exercise_id)) >= 6


# ---------------------------------------------------------------- known-wrong answers


@pytest.mark.parametrize("exercise_id, mistake", list(WRONG))
def test_known_wrong_answer_is_rejected_with_its_message(root, known_wrong, monkeypatch,
                                                         exercise_id, mistake):
    if (exercise_id, mistake) in DEADLOCKS:  # stopped sooner than a student's would be
        monkeypatch.setattr(ring.ranks, "RANK_TIMEOUT_S", DEADLOCK_TIMEOUT_S)
    edits, message = WRONG[exercise_id, mistake]
    wrong = answer(root, exercise_id, replace=edits)
    started = time.monotonic()
    with known_wrong(exercise_id, mistake, match="(?s)" + message) as caught:
        check(exercise_id, wrong)
    text = str(caught.value)
    assert re.search(r"case \d+(/\d+)? \(n=\d+, \d ranks", text), text  # names the case
    assert "Traceback" not in text
    assert exercise_id not in registry.RESULTS
    assert time.monotonic() - started < 30  # a deadlock ends in seconds, never hangs


def test_known_wrong_counts():
    per_exercise = {ex: sum(1 for e, _ in WRONG if e == ex) for ex in EXERCISES}
    assert all(count >= 5 for count in per_exercise.values()), per_exercise
    messages = [message for (ex, _), (_, message) in WRONG.items()
                if ex in ("ring-attention/ring-forward", "ring-attention/ring-backward")]
    assert len(set(messages)) == len(messages)  # each mistake its own message


def test_messages_never_print_code():
    """The named mistakes say what is wrong and where the lesson explains it, never a line of
    the solution: no assignment, call of torch or dist, or index of a chunk list."""
    texts = [why for _, why in mistakes.FORWARD_MISTAKES.values()]
    texts += list(mistakes.BACKWARD_MISTAKES.values())
    for text in map(shown, texts):  # as a student reads them: the sections filled in
        assert re.search(r"\(section \d", text), text
        assert not re.search(r"torch\.|dist\.|\w+ = |\[.*\]|\w\(\w", text), text


def test_a_deadlock_kills_every_rank(monkeypatch):
    import torch.distributed as dist

    def receive_first(rank, world_size, case):
        import torch

        incoming = torch.empty(2)
        dist.recv(incoming, (rank - 1) % world_size)
        return {"x": incoming}

    started = time.monotonic()
    with pytest.raises(registry.WrongAnswer, match="case 1: no rank made progress for 1 s.*"
                                                   "waited for each other"):
        ring.run_ranks(receive_first, 4, [None], "test", timeout_s=1)
    assert time.monotonic() - started < 10
    import multiprocessing

    assert not multiprocessing.active_children()


def test_a_crash_on_one_rank_names_it():
    def crash_on_rank_1(rank, world_size, case):
        if rank == 1:
            raise ValueError("boom")
        return {}

    with pytest.raises(registry.WrongAnswer, match="case 1: on rank 1 your code raised "
                                                   "ValueError: boom"):
        ring.run_ranks(crash_on_rank_1, 2, [None], "test", timeout_s=5)


def test_the_crash_is_named_not_the_neighbour_that_lost_its_partner():
    def crash_before_sending(rank, world_size, case):
        import torch
        import torch.distributed as dist

        if rank == 1:
            raise ValueError("boom")
        incoming = torch.empty(2)
        dist.recv(incoming, 1)  # fails once rank 1 is gone
        return {"x": incoming}

    for _ in range(3):
        with pytest.raises(registry.WrongAnswer, match="on rank 1 your code raised "
                                                       "ValueError: boom"):
            ring.run_ranks(crash_before_sending, 2, [None], "test", timeout_s=10)


def test_collectives_are_refused_in_the_ranks():
    def gather(rank, world_size, case):
        import torch
        import torch.distributed as dist

        dist.all_gather([torch.zeros(1)] * world_size, torch.zeros(1))
        return {}

    with pytest.raises(registry.WrongAnswer, match="all_gather is switched off"):
        ring.run_ranks(gather, 2, [None], "test", timeout_s=5)


def test_wrong_return_type_is_named(root, known_wrong):
    wrong = answer(root, "ring-attention/ring-forward",
                   replace=[("    return o, lse", "    return o", 1)])
    with known_wrong("ring-attention/ring-forward", "returns o alone",
                     match=r"return \(o, lse\): a tuple of 2 tensors"):
        check("ring-attention/ring-forward", wrong)


# ---------------------------------------------------------------- blanks


@pytest.mark.parametrize("exercise_id, target", [
    ("ring-attention/causal-plan", "source"), ("ring-attention/causal-plan", "same_chunk"),
    ("ring-attention/zigzag-split", "second")])
def test_blank_says_fill_in_the_blank(root, refuses_blank, exercise_id, target):
    refuses_blank(exercise_id, answer(root, exercise_id, lines={target: "______"}), target)


def test_exercise_cells_are_blanks_or_stubs(root):
    """Exercises 2 and 3 hold blanks; exercises 1 and 4 are written from scratch: the
    student's cell keeps the signature and docstring, and the stub is refused as not started."""
    for exercise_id, (cell_id, _) in EXERCISES.items():
        student = cells.exercise_source(root / LESSON, cell_id)
        scratch = exercise_id in ("ring-attention/ring-forward", "ring-attention/ring-backward")
        assert ('raise NotImplementedError' in student) == scratch, exercise_id
        assert ("______" in student) != scratch, exercise_id


@pytest.mark.parametrize("exercise_id", ["ring-attention/ring-forward",
                                         "ring-attention/ring-backward"])
def test_stub_is_not_started(root, exercise_id):
    cell_id, name = EXERCISES[exercise_id]
    stub = getattr(cells.load(cells.exercise_source(root / LESSON, cell_id), prelude=PRELUDE),
                   name)
    with pytest.raises(registry.NotStarted, match="still raises NotImplementedError"):
        check(exercise_id, stub)


# ---------------------------------------------------------------- record and replay


@pytest.mark.parametrize("exercise_id", ["ring-attention/ring-forward",
                                         "ring-attention/ring-backward"])
def test_replay_gives_the_same_verdict(root, record_check, exercise_id):
    _, record = record_check(exercise_id, answer(root, exercise_id))
    job = "forward" if "forward" in exercise_id else "backward"
    assert [e["label"] for e in record["events"]][-2:] == [
        f"{job} on {w} ranks" for w in checks.WORLD_SIZES]
    assert "cases on 2 and 4 ranks" in registry.replay(exercise_id, record)
    event = record["events"][-1]  # change the 4-rank results: the replay must refuse
    results = recording.decode(event["result"])
    results[0][0]["o" if "forward" in exercise_id else "dq"] *= 1.01
    event["result"] = recording.encode(results)
    with pytest.raises(registry.WrongAnswer, match="max abs error"):
        registry.replay(exercise_id, record)


def test_replay_of_a_deadlock_says_deadlock(root, record_check, replay_agrees, monkeypatch):
    monkeypatch.setattr(ring.ranks, "RANK_TIMEOUT_S", DEADLOCK_TIMEOUT_S)
    exercise_id = "ring-attention/ring-forward"
    edits, _ = WRONG[exercise_id, "deadlock: every rank receives first"]
    raised, record = record_check(exercise_id, answer(root, exercise_id, replace=edits))
    assert "a deadlock" in str(raised)
    replay_agrees(exercise_id, raised, record, "")


def test_replay_of_a_protocol_mistake_gives_the_same_verdict(root, record_check, replay_agrees):
    exercise_id = "ring-attention/ring-backward"
    edits, message = WRONG[exercise_id, "waits on dK/dV before the next compute"]
    raised, record = record_check(exercise_id, answer(root, exercise_id, replace=edits))
    assert re.search("(?s)" + message, str(raised)), raised
    replay_agrees(exercise_id, raised, record, "")


# ---------------------------------------------------------------- the model and references


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("zigzag", [False, True])
def test_numpy_model_matches_standard_attention(causal, zigzag):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((29, 5)) * 3 for _ in range(3))
    expected = ring.reference_attention(q, k, v, causal)
    for world_size in (2, 3, 4, 7):
        got = ring.simulate_ring(q, k, v, world_size, causal, zigzag)
        assert all(np.allclose(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("world", [2, 4])
def test_every_replayed_mistake_is_wrong(world):
    """Each known wrong ring the checks replay to name a mistake gives a wrong result (on a
    ragged causal case), so no right answer can be named as one."""
    from flashcourse.distributed.tries import case_arrays, reference_gradients

    case = {"n": 13, "causal": True, **case_arrays(13, 4, 7)}
    case["o"], case["lse"] = ring.reference_attention(case["q"], case["k"], case["v"], True)
    for mistake, got in mistakes.forward_candidates(case, world).items():
        compared = mistakes.FORWARD_MISTAKES[mistake][0]
        wrong = [not np.allclose(got[0], case["o"])]
        if compared == "o and lse":
            wrong.append(not np.allclose(got[1], case["lse"]))
        assert any(wrong), mistake
    expected = reference_gradients(case, True)
    for mistake, forms in mistakes.backward_candidates(case, world).items():
        for form in forms:
            assert not all(np.allclose(g, e) for g, e in zip(form, expected, strict=True)), \
                mistake


def test_protocol_reads_the_reference_rings_log():
    """The reference backward keeps the protocol the check asks for, and a log in which the
    accumulators are waited on at once is refused."""
    def backward(rank, world_size, case):
        from flashcourse.distributed.tries import _backward_job

        return _backward_job(ring.ring_backward)(rank, world_size, case)

    from flashcourse.distributed.tries import case_arrays

    case = {"n": 9, "causal": True, **case_arrays(9, 3, 5)}
    case["o"], case["lse"] = ring.reference_attention(case["q"], case["k"], case["v"], True)
    for per_rank in ring.run_ranks(backward, 2, [case], "test", timeout_s=10):
        for rank, result in enumerate(per_rank):
            protocol.check_backward(result["events"], 2, f"rank {rank}")
    compute, post, wait = (ring.EVENT_CODES[e] for e in ("compute", "post", "wait"))
    kv, other = ring.rings.CARRIES["kv"], ring.rings.CARRIES["other"]
    log = [[post, 0, 0, kv], [post, 1, 1, kv], [compute, -1, -1, -1], [wait, 0, 0, kv],
           [wait, 1, 1, kv], [post, 2, 0, other], [post, 3, 1, other], [wait, 2, 0, other],
           [wait, 3, 1, other], [compute, -1, -1, -1], [post, 4, 0, other], [wait, 4, 0, other]]
    with pytest.raises(registry.WrongAnswer, match="before step 1's compute: .*waits for it"):
        protocol.check_backward(log, 2, "rank 0")
    split_home_hop = log[:5] + [  # right: the hop of dk and dv, then dk home, then dv home
        [post, 2, 0, other], [post, 3, 1, other], [post, 4, 0, other], [post, 5, 1, other],
        [compute, -1, -1, -1], [wait, 3, 1, other], [wait, 5, 1, other],
        [post, 6, 0, other], [post, 7, 1, other], [wait, 7, 1, other],
        [post, 8, 0, other], [post, 9, 1, other], [wait, 9, 1, other]]
    protocol.check_backward(split_home_hop, 2, "rank 0")


@pytest.mark.parametrize("n, world_size", [(16, 2), (23, 4), (9, 4), (100, 3)])
def test_splits_cover_the_sequence(n, world_size):
    for split in (ring.contiguous_positions, ring.zigzag_positions):
        everything = np.concatenate([split(n, world_size, r) for r in range(world_size)])
        assert np.array_equal(np.sort(everything), np.arange(n))


def test_zigzag_balances_causal_work():
    n, world_size = 4096, 4
    contiguous = [ring.causal_work(ring.contiguous_positions(n, world_size, r))
                  for r in range(world_size)]
    zigzag = [ring.causal_work(ring.zigzag_positions(n, world_size, r))
              for r in range(world_size)]
    assert contiguous[-1] / contiguous[0] == pytest.approx(2 * world_size - 1, rel=1e-2)
    assert max(zigzag) == min(zigzag)
    assert sum(contiguous) == sum(zigzag) == n * (n + 1) // 2
    work = ring.plan_work(n, world_size, zigzag=True)
    assert max(work) == min(work)
    assert ring.plan_work(n, world_size, zigzag=False)[-1] > 6 * ring.plan_work(
        n, world_size, zigzag=False)[0]


def test_questions_match_the_model():
    answers = {q.id.split("/")[1]: q.answers for q in self_check_files.read(
        self_check_files.path_of("10-ring-attention")).questions}
    q1, q2, q3 = answers["q1-schedule"], answers["q2-balance"], answers["q3-memory"]
    assert ring.ring_schedule(4)[1, 2] == q1["rank_held"]
    assert q1["mib_sent_per_step"] == 65536 * 32 * 128 * 2 * 2 / 2**20
    work = ring.plan_work(2**16, 4, zigzag=False)
    assert work[-1] / work[0] == pytest.approx(q2["contiguous_last_over_first"], rel=1e-3)
    zigzag = ring.plan_work(2**16, 4, zigzag=True)
    assert zigzag[-1] / zigzag[0] == q2["zigzag_last_over_first"]
    skipped = sum(all(kind == "skip" for _, _, kind in ring.step_plan(0, s, 4, False))
                  for s in range(4))
    assert skipped == q2["contiguous_steps_rank0_skips"]
    assert q3["backward_hops_of_dk"] == 4


def test_self_checks_are_registered(capsys):
    ids = registry.list_ids()
    for item in ("q1-schedule", "q2-balance", "q3-memory", "misconceptions"):
        assert f"ring-attention/{item}" in ids


def test_gpu_script_runs_on_cpu_with_gloo(root, tmp_path):
    """The GPU script's CPU mode: two gloo processes, our ring checked against one process
    before it is timed, one CSV row per method (context_parallel left out: its first call
    alone takes a minute on a loaded 2-core machine)."""
    import csv
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", str(root / "gpu" / "bench_ring_attention.py"),
               "--out", str(tmp_path), "--device", "cpu", "--quick", "--skip-context-parallel"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / f"{ring.SCALING_RESULTS}.csv").open()))
    methods = {(row["method"], row["causal"]) for row in rows}
    assert {("one GPU", "False"), ("ring (ours)", "False"), ("one GPU", "True"),
            ("ring (ours)", "True")} <= methods
    for row in rows:
        if row["method"] == "ring (ours)":
            assert float(row["max_error"]) < 1e-4 and float(row["tokens_per_s"]) > 0
