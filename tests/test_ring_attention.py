"""Lesson 9's grader: the solutions pass on 2 and 4 gloo processes; known-wrong answers (built
by editing the lesson's own solution cells) are rejected with the message that names the
mistake; a deadlock ends in a clear message, not a hung test; the check is replayed from its
record; the numpy model, the splits and the reference rings agree with standard attention."""

import re
import time

import numpy as np
import pytest

from flashcourse import check
from flashcourse import distributed as ring
from flashcourse.authoring import cells
from flashcourse.checks import recording, registry, self_check_files
from flashcourse.checks import ring_attention as checks

LESSON = "lessons/09-ring-attention.qmd"
PRELUDE = cells.PRELUDE + (
    "import torch.distributed as dist\n"
    "from flashcourse.distributed import block_attention, block_gradients, chunks_of\n")
EXERCISES = {  # exercise id: (solution cell id, function name)
    "ring-attention/ring-forward": ("exercise-ring-forward", "ring_attention_forward"),
    "ring-attention/causal-plan": ("exercise-causal-plan", "causal_step_plan"),
    "ring-attention/zigzag-split": ("exercise-zigzag-split", "zigzag_split"),
    "ring-attention/ring-backward": ("exercise-ring-backward", "ring_attention_backward"),
}
DEADLOCK_TIMEOUT_S = 3.0  # the tests' deadlocks end sooner than a student's


def answer(root, exercise_id, lines=None, replace=()):
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

BLOCKING_FORWARD = (
    "            requests = dist.batch_isend_irecv(ops)",
    "            for t in arriving:\n"
    "                dist.recv(t, recv_from)\n"
    "            for t in (k, v, k_pos):\n"
    "                dist.send(t, send_to)\n"
    "            requests = []")
ODD_EVEN_FORWARD = (  # no deadlock, right result, but no overlap
    "            requests = dist.batch_isend_irecv(ops)",
    "            for first in (0, 1):\n"
    "                if rank % 2 == first:\n"
    "                    for t in (k, v, k_pos):\n"
    "                        dist.send(t, send_to)\n"
    "                else:\n"
    "                    for t in arriving:\n"
    "                        dist.recv(t, recv_from)\n"
    "            requests = []")
WAIT_FIRST_FORWARD = (  # waits for the next block before computing: never its own block
    "        block_o, block_lse = block_attention(q, k, v, q_pos, k_pos, causal)\n",
    "        if not last:\n"
    "            for request in requests:\n"
    "                request.wait()\n"
    "            k, v, k_pos = arriving\n"
    "            requests = []\n"
    "        block_o, block_lse = block_attention(q, k, v, q_pos, k_pos, causal)\n")
POST_AFTER_COMPUTE = [  # right result, but the transfer starts after the compute
    ("        block_o, block_lse = block_attention(q, k, v, q_pos, k_pos, causal)\n", ""),
    ("        last = step == world_size - 1\n",
     "        last = step == world_size - 1\n"
     "        block_o, block_lse = block_attention(q, k, v, q_pos, k_pos, causal)\n")]
BLOCKING_BACKWARD = (
    "        for request in dist.batch_isend_irecv(ops):\n"
    "            request.wait()\n",
    "        for t in arriving:\n"
    "            dist.recv(t, recv_from)\n"
    "        for t in travelling:\n"
    "            dist.send(t, send_to)\n")
NO_LAST_HOP = (
    "        last = step == world_size - 1\n",
    "        last = step == world_size - 1\n"
    "        if last:\n"
    "            break\n")

WRONG = {
    # exercise 1: the ring forward
    ("ring-attention/ring-forward", "merged without rescaling"): (
        dict(replace=[("o = old_share * o + block_share * block_o", "o = o + block_o", 1)]),
        "added without rescaling"),
    ("ring-attention/ring-forward", "lse kept from the first step"): (
        dict(replace=[("        lse = new_lse\n", "        lse = new_lse if step == 0 else lse\n",
                       1)]), "lse is not updated"),
    ("ring-attention/ring-forward", "one step short"): (
        dict(replace=[("for step in range(world_size):", "for step in range(world_size - 1):",
                       1)]), "stops one step early"),
    ("ring-attention/ring-forward", "wrong step order: waits before computing"): (
        dict(replace=[WAIT_FIRST_FORWARD]), "never computes its own block"),
    ("ring-attention/ring-forward", "received block never used"): (
        dict(lines={"k, v, k_pos": "k, v, k_pos"}), "own block again"),
    ("ring-attention/ring-forward", "causal mask dropped"): (
        dict(replace=[("block_attention(q, k, v, q_pos, k_pos, causal)",
                       "block_attention(q, k, v, q_pos, k_pos, False)", 1)]),
        "masked by position"),
    ("ring-attention/ring-forward", "deadlock: every rank receives first"): (
        dict(replace=[BLOCKING_FORWARD]), "deadlock"),
    ("ring-attention/ring-forward", "blocking send/recv, odd-even order"): (
        dict(replace=[ODD_EVEN_FORWARD]), "blocking send/recv"),
    ("ring-attention/ring-forward", "transfer posted after the compute"): (
        dict(replace=POST_AFTER_COMPUTE), "do not overlap"),
    # exercise 2: the causal plan
    ("ring-attention/causal-plan", "ring turned the wrong way"): (
        dict(lines={"source": "(rank + step) % world_size"}), r"rank \(r - s\) mod P"),
    ("ring-attention/causal-plan", "diagonal block skipped"): (
        dict(replace=[('kind = "diagonal"', 'kind = "skip"', 1)]),
        "diagonal block\\) is skipped"),
    ("ring-attention/causal-plan", "diagonal block without the mask"): (
        dict(replace=[('kind = "diagonal"', 'kind = "full"', 1)]), "without the mask"),
    ("ring-attention/causal-plan", "earlier blocks masked"): (
        dict(replace=[('kind = "full"', 'kind = "diagonal"', 1)]), "the mask would change"),
    ("ring-attention/causal-plan", "later blocks computed"): (
        dict(replace=[('kind = "skip"', 'kind = "diagonal"', 1)]), "the mask empties it"),
    ("ring-attention/causal-plan", "comparison inverted"): (
        dict(replace=[("if kv_chunk < q_chunk:", "if kv_chunk > q_chunk:", 1)]),
        "the mask empties it|earlier chunk"),
    ("ring-attention/causal-plan", "skipped pairs left out"): (
        dict(replace=[("            plan.append((q_chunk, kv_chunk, kind))",
                       "            if kind != 'skip':\n"
                       "                plan.append((q_chunk, kv_chunk, kind))", 1)]),
        "missing from the plan"),
    # exercise 3: the zigzag split
    ("ring-attention/zigzag-split", "contiguous split"): (
        dict(lines={"chunks": "np.array_split(np.arange(n), world_size)",
                    "second": "chunks[rank][:0]"}), "contiguous split"),
    ("ring-attention/zigzag-split", "chunks in the wrong order"): (
        dict(replace=[("np.concatenate([first, second])", "np.concatenate([second, first])",
                       1)]), "wrong order"),
    ("ring-attention/zigzag-split", "mirror off by one"): (
        dict(lines={"second": "chunks[(2 * world_size - rank) % (2 * world_size)]"}),
        "on no rank"),
    ("ring-attention/zigzag-split", "second chunk from the middle"): (
        dict(lines={"second": "chunks[world_size + rank]"}), "chunks \\d+ and \\d+ of 2P"),
    ("ring-attention/zigzag-split", "remainder dropped"): (
        dict(lines={"chunks": "[np.arange(n)[c * (n // (2 * world_size)):(c + 1) * "
                              "(n // (2 * world_size))] for c in range(2 * world_size)]"}),
        "on no rank"),
    # exercise 4: the ring backward
    ("ring-attention/ring-backward", "dK, dV one hop short of home"): (
        dict(replace=[NO_LAST_HOP]), "one more hop"),
    ("ring-attention/ring-backward", "delta from dO alone"): (
        dict(lines={"delta": "(do * do).sum(dim=-1)"}), "delta = rowsum"),
    ("ring-attention/ring-backward", "dq overwritten each step"): (
        dict(replace=[("dq = dq + block_dq", "dq = block_dq", 1)]), "dq must add"),
    ("ring-attention/ring-backward", "dk not accumulated"): (
        dict(lines={"dk": "block_dk"}), "look at the dK line"),
    ("ring-attention/ring-backward", "gradients left behind"): (
        dict(lines={"travelling": "[dk, dv] if last else [k, v, k_pos, dk * 0, dv * 0]"}),
        "must travel with K and V|one more hop|dK line"),
    ("ring-attention/ring-backward", "deadlock: every rank receives first"): (
        dict(replace=[BLOCKING_BACKWARD]), "deadlock"),
}


@pytest.mark.parametrize("exercise_id, mistake", list(WRONG))
def test_known_wrong_answer_is_rejected_with_its_message(root, known_wrong, monkeypatch,
                                                         exercise_id, mistake):
    monkeypatch.setattr(ring.ranks, "RANK_TIMEOUT_S", DEADLOCK_TIMEOUT_S)
    edits, message = WRONG[exercise_id, mistake]
    wrong = answer(root, exercise_id, **edits)
    started = time.monotonic()
    with known_wrong(exercise_id, mistake, match=message) as caught:
        check(exercise_id, wrong)
    text = str(caught.value)
    assert re.search(r"case \d+(/\d+)?", text), text  # names the case
    assert "Traceback" not in text
    assert exercise_id not in registry.RESULTS
    assert time.monotonic() - started < 30  # a deadlock ends in seconds, never hangs


def test_known_wrong_counts():
    per_exercise = {ex: sum(1 for e, _ in WRONG if e == ex) for ex in EXERCISES}
    assert all(count >= 5 for count in per_exercise.values()), per_exercise


def test_a_deadlock_kills_every_rank(monkeypatch):
    import torch.distributed as dist

    def receive_first(rank, world_size, case):
        import torch

        incoming = torch.empty(2)
        dist.recv(incoming, (rank - 1) % world_size)
        return {"x": incoming}

    started = time.monotonic()
    with pytest.raises(registry.WrongAnswer, match="no progress for 1 s in case 1.*deadlock"):
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
    ("ring-attention/ring-forward", "block_share"), ("ring-attention/ring-forward", "requests"),
    ("ring-attention/causal-plan", "source"), ("ring-attention/zigzag-split", "second"),
    ("ring-attention/ring-backward", "delta")])
def test_blank_says_fill_in_the_blank(root, refuses_blank, exercise_id, target):
    refuses_blank(exercise_id, answer(root, exercise_id, lines={target: "______"}), target)


def test_exercise_cells_have_blanks(root):
    for cell_id, _ in EXERCISES.values():
        assert "______" in cells.exercise_source(root / LESSON, cell_id)


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


def test_replay_of_a_deadlock_says_deadlock(root, record_check, monkeypatch):
    monkeypatch.setattr(ring.ranks, "RANK_TIMEOUT_S", DEADLOCK_TIMEOUT_S)
    wrong = answer(root, "ring-attention/ring-forward", replace=[BLOCKING_FORWARD])
    _, record = record_check("ring-attention/ring-forward", wrong)
    with pytest.raises(registry.WrongAnswer, match="deadlock"):
        registry.replay("ring-attention/ring-forward", record)


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


def test_every_simulated_mistake_is_wrong():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((16, 4)) * 3 for _ in range(3))
    expected = ring.reference_attention(q, k, v, True)
    for mistake in checks.FORWARD_MISTAKES:
        got = ring.simulate_ring(q, k, v, 4, True, mistake=mistake)
        assert not all(np.allclose(g, e) for g, e in zip(got, expected, strict=True)), mistake


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
        self_check_files.path_of("09-ring-attention")).questions}
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
