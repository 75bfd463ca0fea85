"""Checks of lesson 9, "Attention across GPUs: ring attention".

Four code exercises, each run on 2 and then 4 processes joined by torch.distributed (gloo over
loopback) that the check starts itself: the ring forward with its merge of partial states, the
causal plan of each ring step, the load-balanced (zigzag) split, and the ring backward. Each
world size is one call of student code (`registry.run_student`) that starts the processes,
runs every case and returns plain arrays; the grader's replay checks those arrays. The
self-check questions and veto misconceptions are in self_checks/09-ring-attention.toml.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import distributed as ring
from ..blanks import refuse_blanks
from . import registry

LESSON = registry.lesson(
    "ring-attention", "Lesson 9: Attention across GPUs: ring attention", pass_line=8)

WORLD_SIZES = (2, 4)
ATOL, RTOL = 1e-10, 1e-8  # float64 everywhere

# ---------------------------------------------------------------- cases

# (n, d, causal, seed): every case runs on 2 and on 4 ranks; n not a multiple of the ranks
# (ragged shards) and scores of a few tens (the rescale matters)
FORWARD_CASES = [(16, 4, False, 0), (16, 4, True, 1), (23, 8, True, 2), (13, 4, False, 3)]
FORWARD_HIDDEN = [(37, 8, True, 101), (29, 4, False, 102), (9, 3, True, 103),
                  (41, 6, False, 104)]
# (n, d, zigzag, seed): causal plans under both splits
PLAN_CASES = [(16, 4, False, 10), (16, 4, True, 11), (27, 4, True, 12)]
PLAN_HIDDEN = [(35, 8, False, 111), (43, 4, True, 112), (17, 3, True, 113)]
# (n, d, seed): the zigzag split, then a causal ring on it
SPLIT_CASES = [(16, 4, 20), (21, 4, 21), (30, 4, 22)]
SPLIT_HIDDEN = [(9, 4, 121), (47, 8, 122), (58, 3, 123)]
# (n, d, causal, seed)
BACKWARD_CASES = [(16, 4, False, 30), (16, 4, True, 31), (21, 8, True, 32)]
BACKWARD_HIDDEN = [(33, 4, False, 131), (27, 6, True, 132), (9, 3, True, 133)]
SCORE_SCALE = 3.0  # q and k ~ N(0, 3^2): scores of a few tens


def case_arrays(n: int, d: int, seed: int) -> dict:
    rng = np.random.default_rng(registry.case_seed(seed))
    q, k, v, do = (rng.standard_normal((n, d)) for _ in range(4))
    return {"q": q * SCORE_SCALE, "k": k * SCORE_SCALE, "v": v, "do": do}


def _describe(n: int, world: int, causal: bool | None = None, zigzag: bool | None = None,
              seed: int | None = None) -> str:
    parts = [f"n={n}", f"{world} ranks"]
    if n % world:
        parts.append("ragged shards")
    if causal is not None:
        parts.append("causal" if causal else "not causal")
    if zigzag is not None:
        parts.append("zigzag split" if zigzag else "contiguous split")
    if seed is not None:
        parts.append(f"seed={seed}")
    return ", ".join(parts)


def _padded_shard(case: dict, positions: np.ndarray, length: int):
    """This rank's q (unpadded) and k, v, k_pos padded to `length` rows (padding keys at -1),
    so that every rank sends and receives blocks of one size."""
    k_pos = np.full(length, -1, dtype=np.int64)
    k_pos[:len(positions)] = positions
    k, v = np.zeros((length, case["k"].shape[1])), np.zeros((length, case["v"].shape[1]))
    k[:len(positions)], v[:len(positions)] = case["k"][positions], case["v"][positions]
    return (torch.from_numpy(np.ascontiguousarray(case["q"][positions])), torch.from_numpy(k),
            torch.from_numpy(v), torch.from_numpy(positions.astype(np.int64)),
            torch.from_numpy(k_pos))


def _shard_length(n: int, world: int) -> int:
    return -(-n // world)  # the longest shard of np.array_split, for 2 chunks or 1 per rank


def _tensors(result, count: int, what: str) -> tuple:
    if not isinstance(result, (tuple, list)) or len(result) != count or not all(
            torch.is_tensor(t) for t in result):
        raise TypeError(f"return {what}: a tuple of {count} tensors, not "
                        f"{registry.printable_answer(result)}")
    return tuple(result)


# ---------------------------------------------------------------- the jobs (in each rank)


def _forward_job(answer):
    def job(rank, world, case):
        positions = ring.contiguous_positions(case["n"], world, rank)
        q, k, v, q_pos, k_pos = _padded_shard(case, positions, _shard_length(case["n"], world))
        o, lse = _tensors(answer(q, k, v, q_pos, k_pos, case["causal"]), 2, "(o, lse)")
        return {"o": o, "lse": lse}
    return job


def _plan_job(answer):
    def job(rank, world, case):
        zigzag = case["zigzag"]
        split = ring.zigzag_positions if zigzag else ring.contiguous_positions
        positions = split(case["n"], world, rank)
        q, k, v, q_pos, k_pos = _padded_shard(case, positions, _shard_length(case["n"], world))
        plans = []

        def recorded_plan(rank_, step, world_, zigzag_):
            pairs = answer(rank_, step, world_, zigzag_)
            plans.extend(_plan_rows(step, pairs))
            return [(i, j, kind) for i, j, kind in pairs]

        o, lse = ring.ring_forward(q, k, v, q_pos, k_pos, True, plan=recorded_plan,
                                   zigzag=zigzag,
                                   chunk_rows=ring.shard_chunk_rows(case["n"], world, zigzag))
        return {"o": o, "lse": lse, "plan": np.array(plans, dtype=np.int64).reshape(-1, 4)}
    return job


def _plan_rows(step: int, pairs) -> list[list[int]]:
    if not isinstance(pairs, (list, tuple)):
        raise TypeError(f"return a list of (q_chunk, kv_chunk, kind) triples, not "
                        f"{registry.printable_answer(pairs)}")
    rows = []
    for pair in pairs:
        ok = (isinstance(pair, (tuple, list)) and len(pair) == 3
              and all(isinstance(c, (int, np.integer)) and not isinstance(c, bool)
                      for c in pair[:2]) and pair[2] in ring.KINDS)
        if not ok:
            raise TypeError(f"each entry of the plan is (q_chunk, kv_chunk, kind) with two "
                            f"chunk numbers and a kind among {ring.KINDS}, not "
                            f"{registry.printable_answer(pair)}")
        rows.append([step, int(pair[0]), int(pair[1]), ring.KINDS.index(pair[2])])
    return rows


def _split_job(answer):
    def job(rank, world, case):
        n = case["n"]
        splits = [_positions(answer(n, world, r)) for r in range(world)]
        out = {"positions": splits[rank]}
        together = np.sort(np.concatenate(splits))
        lengths = [len(ring.zigzag_positions(n, world, r)) for r in range(world)]
        if (np.array_equal(together, np.arange(n))
                and [len(s) for s in splits] == lengths):  # the same verdict on every rank
            q, k, v, q_pos, k_pos = _padded_shard(case, splits[rank], max(lengths))
            out["o"], out["lse"] = ring.ring_forward(q, k, v, q_pos, k_pos, True)
        return out
    return job


def _positions(positions) -> np.ndarray:
    if torch.is_tensor(positions):
        positions = positions.detach().cpu().numpy()
    positions = np.asarray(positions)
    if positions.ndim != 1 or not np.issubdtype(positions.dtype, np.integer):
        raise TypeError(f"return a 1-D array of integer positions, not an array of shape "
                        f"{positions.shape} and dtype {positions.dtype}")
    return positions.astype(np.int64)


def _backward_job(answer):
    def job(rank, world, case):
        positions = ring.contiguous_positions(case["n"], world, rank)
        q, k, v, q_pos, k_pos = _padded_shard(case, positions, _shard_length(case["n"], world))
        o, lse, do = (torch.from_numpy(np.ascontiguousarray(case[name][positions]))
                      for name in ("o", "lse", "do"))
        dq, dk, dv = _tensors(answer(q, k, v, o, lse, do, q_pos, k_pos, case["causal"]), 3,
                              "(dq, dk, dv)")
        return {"dq": dq, "dk": dk[:len(positions)], "dv": dv[:len(positions)]}
    return job


JOBS = {"forward": _forward_job, "plan": _plan_job, "split": _split_job,
        "backward": _backward_job}


def run_job(answer, job: str, world: int, cases: list) -> list:
    """Start `world` ranks and run the answer on every case: results[case][rank]."""
    return ring.run_ranks(JOBS[job](answer), world, cases, f"{job} on {world} ranks")


def try_answer(answer, job: str, world: int = 2, n: int = 16, d: int = 4,
               causal: bool = True, zigzag: bool = False, seed: int = 0) -> dict:
    """Run an answer once on `world` ranks, outside any check (the notebook's try cells):
    {"matches": bool, ...} against standard attention (or autograd, for the backward)."""
    refuse_blanks(answer, getattr(answer, "__name__", job))  # before any process starts
    case = {"n": n, "causal": causal, "zigzag": zigzag, **case_arrays(n, d, seed)}
    case["o"], case["lse"] = ring.reference_attention(case["q"], case["k"], case["v"], causal)
    per_rank = run_job(answer, job, world, [case])[0]
    if job == "split":
        positions = [np.asarray(r["positions"]) for r in per_rank]
        return {"positions": [p.tolist() for p in positions],
                "work": [ring.causal_work(p) for p in positions]}
    positions = split_positions(n, world, zigzag and job == "plan")
    if job == "backward":
        got = _gather(per_rank, positions, "dq", "dk", "dv")
        expected = reference_gradients(case, causal)
    else:
        got = _gather(per_rank, positions, "o", "lse")
        expected = (case["o"], case["lse"])
    return {"matches": all(np.allclose(g, e, atol=1e-8) for g, e in zip(got, expected,
                                                                          strict=True))}


def _run(answer, job: str, world: int, cases: list) -> list:
    return registry.run_student(run_job, f"{job} on {world} ranks", answer, job, world, cases)


def _gather(results, positions: list, *names) -> list[np.ndarray]:
    """Whole-sequence arrays from each rank's rows (rank r's rows at positions[r])."""
    out = []
    n = sum(len(p) for p in positions)
    for name in names:
        first = np.asarray(results[0][name])
        whole = np.zeros((n, *first.shape[1:]))
        for rank, rows in enumerate(positions):
            part = np.asarray(results[rank][name], dtype=np.float64)
            if part.shape != (len(rows), *first.shape[1:]):
                raise registry.WrongAnswer(
                    f"rank {rank} returned {name} of shape {part.shape}, expected "
                    f"{(len(rows), *first.shape[1:])}: one row per query of the rank.")
            whole[rows] = part
        out.append(whole)
    return out


def split_positions(n: int, world: int, zigzag: bool) -> list[np.ndarray]:
    split = ring.zigzag_positions if zigzag else ring.contiguous_positions
    return [split(n, world, rank) for rank in range(world)]


def _passed(count: int, what: str) -> str:
    return f"{count} cases on 2 and 4 ranks {what}{registry.hidden_note()}"


# ---------------------------------------------------------------- 1. the ring forward

FORWARD_MISTAKES = {
    "no_rescale": "The blocks' outputs are added without rescaling: each block's o is "
                  "normalised over its own keys and must be weighted by exp(block_lse - "
                  "new_lse), the running o by exp(lse - new_lse) (section 3).",
    "lse_first": "o is right but lse is not updated after the first step: the backward needs "
                 "the log-sum-exp over all keys (section 3).",
    "one_step_short": "The ring stops one step early: P ranks take P steps, the first on the "
                      "rank's own block (section 2).",
    "own_block_skipped": "The rank waits for the next block before computing, so it never "
                         "computes its own block and computes the last one twice: compute on "
                         "the block you hold while the next one travels (section 4).",
    "never_swapped": "Every step computes the rank's own block again: after the transfer, the "
                     "received K, V and positions must replace the ones you hold (section 4).",
    "no_mask": "With causal=True every block must be masked by position (pass causal on to "
               "block_attention) (section 2).",
}


def _name_forward_mistake(o, lse, case, world) -> str:
    for mistake, why in FORWARD_MISTAKES.items():
        if mistake == "no_mask" and not case["causal"]:
            continue
        candidate = ring.simulate_ring(case["q"], case["k"], case["v"], world, case["causal"],
                                       mistake=mistake)
        if registry.same_result(o, candidate[0], 1e-8) and (
                mistake == "lse_first" or registry.same_result(lse, candidate[1], 1e-8)
                or mistake == "no_rescale"):
            return "Likely mistake: " + why
    return ("Hint: at step s rank r holds the block of rank (r - s) mod P; merge its (o, lse) "
            "into the running state with the log-sum-exp merge of section 3.")


def _check_overlap(events: np.ndarray, world: int, label: str) -> None:
    codes = ring.EVENT_CODES
    if (events == codes["blocking"]).any():
        raise registry.WrongAnswer(
            f"{label}: the result is right, but the ring uses blocking send/recv: the next "
            "block cannot travel while this one is computed. Post the transfer with "
            "batch_isend_irecv (or isend/irecv) before calling block_attention, and wait "
            "after (section 4).")
    computes = int((events == codes["compute"]).sum())
    if computes != world:
        raise registry.WrongAnswer(
            f"{label}: the result is right, but block_attention ran {computes} times on a "
            f"rank instead of {world}: once per ring step, on the block the rank holds.")
    # posts collapse into one per step: post, compute, post, compute, ..., compute
    steps = [int(e) for i, e in enumerate(events)
             if i == 0 or e != codes["post"] or events[i - 1] != codes["post"]]
    expected = [codes["post"], codes["compute"]] * (world - 1) + [codes["compute"]]
    if steps != expected:
        raise registry.WrongAnswer(
            f"{label}: the result is right, but the transfers do not overlap the compute: "
            "at every step but the last, post the next block's transfer first, then call "
            "block_attention on the block you hold, then wait (section 4).")


@registry.exercise("ring-attention/ring-forward", "the ring forward: transfers and merges", 2)
def _check_ring_forward(ring_attention_forward) -> str:
    cases = registry.with_hidden(FORWARD_CASES, FORWARD_HIDDEN)
    for world in WORLD_SIZES:
        inputs = [{"n": n, "causal": causal, **case_arrays(n, d, seed)}
                  for n, d, causal, seed in cases]
        results = _run(ring_attention_forward, "forward", world, inputs)
        for number, ((n, _, causal, seed), case, per_rank) in enumerate(
                zip(cases, inputs, results, strict=True), 1):
            label = f"case {number}/{len(cases)} ({_describe(n, world, causal, seed=seed)})"
            o, lse = _gather(per_rank, split_positions(n, world, False), "o", "lse")
            expected_o, expected_lse = ring.reference_attention(case["q"], case["k"],
                                                                case["v"], causal)
            try:
                registry.compare(o, expected_o, f"{label}, o", atol=ATOL, rtol=RTOL)
                registry.compare(lse, expected_lse, f"{label}, lse", atol=ATOL, rtol=RTOL)
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_name_forward_mistake(o, lse, case, world)}") from None
            for rank in range(world):
                _check_overlap(np.asarray(per_rank[rank]["events"]), world,
                               f"{label}, rank {rank}")
    return _passed(len(cases), "match standard attention, transfers overlapping compute")


# ---------------------------------------------------------------- 2. the causal plan


def _plan_message(rank, step, world, zigzag, given: set, label: str) -> str | None:
    expected = set(ring.step_plan(rank, step, world, zigzag))
    if given == expected:
        return None
    where = f"{label}: rank {rank}, step {step}"
    held = set(ring.chunks_of((rank - step) % world, world, zigzag))
    mine = set(ring.chunks_of(rank, world, zigzag))
    for i, j, _ in sorted(given):
        if j not in held:
            return (f"{where}: the plan uses key chunk {j}, but the rank holds chunks "
                    f"{sorted(held)}, those of rank {(rank - step) % world}. K/V move one rank "
                    "forward per step, so at step s rank r holds rank (r - s) mod P's "
                    "(section 2).")
        if i not in mine:
            return (f"{where}: the plan uses query chunk {i}, but the rank's queries are "
                    f"chunks {sorted(mine)}.")
    kinds = {(i, j): kind for i, j, kind in given}
    for i, j, right in sorted(expected):
        kind = kinds.get((i, j))
        pair = f"{where}: query chunk {i} against key chunk {j}"
        if kind is None:
            return (f"{pair} is missing from the plan: list every pair of one of your query "
                    "chunks and one held key chunk, with 'skip' for those not computed.")
        if kind == right:
            continue
        if j == i and kind == "skip":
            return (f"{pair} (the diagonal block) is skipped: every query sees itself and "
                    "the earlier keys of its own chunk; compute it with the causal mask "
                    "(section 5).")
        if j == i:
            return (f"{pair} (the diagonal block) is computed without the mask: the queries "
                    "would see later keys of their own chunk (section 5).")
        if j < i and kind == "skip":
            return (f"{pair} is skipped, but every key of an earlier chunk is visible to "
                    "every query of a later one: compute it in full (section 5).")
        if j < i:
            return (f"{pair} is masked, but all its keys come before all its queries: the "
                    "mask would change nothing; compute it 'full', with no mask (section 5).")
        return (f"{pair} is computed, but every key there comes after every query: the mask "
                "empties it. Skipping it is the work a causal ring saves (section 5).")
    return f"{where}: the plan lists pairs twice or more; list each pair once."


@registry.exercise("ring-attention/causal-plan", "the causal plan of each ring step", 2)
def _check_causal_plan(causal_step_plan) -> str:
    cases = registry.with_hidden(PLAN_CASES, PLAN_HIDDEN)
    for world in WORLD_SIZES:
        inputs = [{"n": n, "zigzag": zigzag, **case_arrays(n, d, seed)}
                  for n, d, zigzag, seed in cases]
        results = _run(causal_step_plan, "plan", world, inputs)
        for number, ((n, _, zigzag, seed), case, per_rank) in enumerate(
                zip(cases, inputs, results, strict=True), 1):
            label = f"case {number}/{len(cases)} ({_describe(n, world, True, zigzag, seed)})"
            for rank in range(world):
                rows = np.asarray(per_rank[rank]["plan"]).reshape(-1, 4)
                for step in range(world):
                    given = {(int(i), int(j), ring.KINDS[int(kind)])
                             for s, i, j, kind in rows if s == step}
                    if len(given) != int((rows[:, 0] == step).sum()):
                        raise registry.WrongAnswer(f"{label}: rank {rank}, step {step}: the "
                                                   "plan lists a pair twice.")
                    message = _plan_message(rank, step, world, zigzag, given, label)
                    if message:
                        raise registry.WrongAnswer(message)
            o, lse = _gather(per_rank, split_positions(n, world, zigzag), "o", "lse")
            expected_o, expected_lse = ring.reference_attention(case["q"], case["k"],
                                                                case["v"], True)
            registry.compare(o, expected_o, f"{label}, o", atol=ATOL, rtol=RTOL)
            registry.compare(lse, expected_lse, f"{label}, lse", atol=ATOL, rtol=RTOL)
    return _passed(len(cases), "plan every block right, under both splits")


# ---------------------------------------------------------------- 3. the zigzag split


def _split_message(given: list[np.ndarray], n: int, world: int, label: str) -> str | None:
    expected = [ring.zigzag_positions(n, world, r) for r in range(world)]
    if all(np.array_equal(g, e) for g, e in zip(given, expected, strict=True)):
        return None
    everything = np.concatenate(given)
    missing = np.setdiff1d(np.arange(n), everything)
    if len(everything) != n or len(missing) or (everything < 0).any() or (everything >= n).any():
        lost = f", and positions {missing[:5].tolist()} are on no rank" if len(missing) else ""
        return (f"{label}: the ranks hold {len(everything)} positions for {n} tokens{lost}: "
                "every token must be on exactly one rank. Cut the sequence with "
                "np.array_split, which handles n not divisible by 2P (section 5).")
    if all(np.array_equal(g, ring.contiguous_positions(n, world, r))
           for r, g in enumerate(given)):
        return (f"{label}: this is the contiguous split, in which the last rank does about "
                f"{2 * world - 1} times the causal work of the first. Cut 2P chunks and give "
                "rank r chunks r and 2P-1-r (section 5).")
    for rank, (g, e) in enumerate(zip(given, expected, strict=True)):
        if not np.array_equal(g, e):
            if np.array_equal(np.sort(g), np.sort(e)):
                return (f"{label}: rank {rank} holds the right positions in the wrong order: "
                        "chunk r first, then chunk 2P-1-r, each in increasing order.")
            return (f"{label}: rank {rank} holds positions {g.tolist()[:12]}"
                    f"{'...' if len(g) > 12 else ''}; the zigzag split gives it chunks "
                    f"{rank} and {2 * world - 1 - rank} of 2P = {2 * world} (section 5).")
    return None


@registry.exercise("ring-attention/zigzag-split", "the load-balanced (zigzag) split", 1)
def _check_zigzag_split(zigzag_split) -> str:
    cases = registry.with_hidden(SPLIT_CASES, SPLIT_HIDDEN)
    for world in WORLD_SIZES:
        inputs = [{"n": n, **case_arrays(n, d, seed)} for n, d, seed in cases]
        results = _run(zigzag_split, "split", world, inputs)
        for number, ((n, _, seed), case, per_rank) in enumerate(
                zip(cases, inputs, results, strict=True), 1):
            label = f"case {number}/{len(cases)} ({_describe(n, world, seed=seed)})"
            given = [np.asarray(per_rank[r]["positions"]) for r in range(world)]
            message = _split_message(given, n, world, label)
            if message:
                raise registry.WrongAnswer(message)
            o, lse = _gather(per_rank, given, "o", "lse")
            expected_o, expected_lse = ring.reference_attention(case["q"], case["k"],
                                                                case["v"], True)
            registry.compare(o, expected_o, f"{label}, causal ring on your split, o",
                             atol=ATOL, rtol=RTOL)
            registry.compare(lse, expected_lse, f"{label}, causal ring on your split, lse",
                             atol=ATOL, rtol=RTOL)
    return _passed(len(cases), "split every sequence as the zigzag does")


# ---------------------------------------------------------------- 4. the ring backward


def reference_gradients(case: dict, causal: bool):
    """(dq, dk, dv) of standard attention, by torch autograd in float64."""
    q, k, v = (torch.tensor(case[name], requires_grad=True) for name in ("q", "k", "v"))
    scores = q @ k.T * ring.sm_scale(q.shape[-1])
    if causal:
        keep = torch.ones(scores.shape, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    (torch.softmax(scores, dim=-1) @ v).backward(torch.tensor(case["do"]))
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


def _name_backward_mistake(dq, dk, dv, expected, n, world) -> str:
    exp_dq, exp_dk, exp_dv = expected
    dq_ok, dk_ok, dv_ok = (registry.same_result(got, ref, 1e-8)
                           for got, ref in zip((dq, dk, dv), expected, strict=True))
    # one hop short: rank r returns the dK, dV of the block of rank r + 1
    shifted_dk = np.zeros_like(exp_dk)
    for rank in range(world):
        mine = ring.contiguous_positions(n, world, rank)
        theirs = ring.contiguous_positions(n, world, (rank + 1) % world)
        rows = min(len(mine), len(theirs))
        shifted_dk[mine[:rows]] = exp_dk[theirs[:rows]]
    if dq_ok and registry.same_result(dk, shifted_dk, 1e-8):
        return ("Likely mistake: after the last step the accumulated dK and dV sit one rank "
                "early: send them one more hop so that each reaches the rank that owns its "
                "keys (section 6).")
    if dq_ok and dv_ok:
        return "dq and dv are right: look at the dK line (section 6)."
    if dq_ok and dk_ok:
        return "dq and dk are right: look at the dV line (section 6)."
    if dq_ok:
        return ("dq is right but dK/dV are not: they must travel with K and V, each rank "
                "adding its contribution to the block it holds, and come home at the end "
                "(section 6).")
    if dk_ok and dv_ok:
        return ("dK and dV are right, dq is not: dq must add the contribution of every step "
                "(it stays on the rank) (section 6).")
    if dv_ok:
        return ("dV is right, dQ and dK are not: dS = P * (dO V^T - delta) needs delta = "
                "rowsum(dO * O) over the whole row, from the forward's output (section 6).")
    return ("Hint: accumulate dQ on the rank over every step; let dK and dV travel with K and "
            "V and bring them home at the end (section 6).")


@registry.exercise("ring-attention/ring-backward", "the ring backward: dK and dV travel", 2)
def _check_ring_backward(ring_attention_backward) -> str:
    cases = registry.with_hidden(BACKWARD_CASES, BACKWARD_HIDDEN)
    for world in WORLD_SIZES:
        inputs = []
        for n, d, causal, seed in cases:
            case = {"n": n, "causal": causal, **case_arrays(n, d, seed)}
            case["o"], case["lse"] = ring.reference_attention(case["q"], case["k"], case["v"],
                                                              causal)
            inputs.append(case)
        results = _run(ring_attention_backward, "backward", world, inputs)
        for number, ((n, _, causal, seed), case, per_rank) in enumerate(
                zip(cases, inputs, results, strict=True), 1):
            label = f"case {number}/{len(cases)} ({_describe(n, world, causal, seed=seed)})"
            grads = _gather(per_rank, split_positions(n, world, False), "dq", "dk", "dv")
            expected = reference_gradients(case, causal)
            for name, got, ref in zip(("dq", "dk", "dv"), grads, expected, strict=True):
                try:
                    registry.compare(got, ref, f"{label}, {name} against autograd",
                                     atol=1e-9, rtol=1e-7)
                except registry.WrongAnswer as err:
                    raise registry.WrongAnswer(
                        f"{err}\n{_name_backward_mistake(*grads, expected, n, world)}"
                    ) from None
    return _passed(len(cases), "match autograd of standard attention")
