"""Lesson 10's rings on P processes, for the notebook's try cells and the checks: one job per
exercise that builds a rank's shard, calls the student's function in each rank and returns
plain arrays (`run_job` starts the ranks with `run_ranks`); `try_answer` runs an answer once
and says whether it matches standard attention (or autograd, for the backward). Cases and their
inputs: `case_arrays`, `padded_shard`, `gather`."""

from __future__ import annotations

import numpy as np
import torch

from .. import distributed as ring
from ..blanks import refuse_blanks
from ..checks.cases import case_seed
from ..checks.compare import printable_answer
from ..checks.edition import class_edition
from ..checks.errors import CourseInputError, WrongAnswer
from . import rings

SCORE_SCALE = 3.0  # q and k ~ N(0, 3^2): scores of a few tens


def case_arrays(n: int, d: int, seed: int) -> dict:
    rng = np.random.default_rng(case_seed(seed))
    q, k, v, do = (rng.standard_normal((n, d)) for _ in range(4))
    return {"q": q * SCORE_SCALE, "k": k * SCORE_SCALE, "v": v, "do": do}


def padded_shard(case: dict, positions: np.ndarray, length: int):
    """This rank's q (unpadded) and k, v, k_pos padded to `length` rows (padding keys at -1),
    so that every rank sends and receives blocks of one size."""
    k_pos = np.full(length, -1, dtype=np.int64)
    k_pos[:len(positions)] = positions
    k, v = np.zeros((length, case["k"].shape[1])), np.zeros((length, case["v"].shape[1]))
    k[:len(positions)], v[:len(positions)] = case["k"][positions], case["v"][positions]
    return (torch.from_numpy(np.ascontiguousarray(case["q"][positions])), torch.from_numpy(k),
            torch.from_numpy(v), torch.from_numpy(positions.astype(np.int64)),
            torch.from_numpy(k_pos))


def shard_length(n: int, world: int) -> int:
    return -(-n // world)  # the longest shard of np.array_split, for 2 chunks or 1 per rank


def gather(results, positions: list, *names) -> list[np.ndarray]:
    """Whole-sequence arrays from each rank's rows (rank r's rows at positions[r])."""
    out = []
    n = sum(len(p) for p in positions)
    for name in names:
        first = np.asarray(results[0][name])
        whole = np.zeros((n, *first.shape[1:]))
        for rank, rows in enumerate(positions):
            part = np.asarray(results[rank][name], dtype=np.float64)
            if part.shape != (len(rows), *first.shape[1:]):
                raise WrongAnswer(
                    f"rank {rank} returned {name} of shape {part.shape}, expected "
                    f"{(len(rows), *first.shape[1:])}: one row per query of the rank.")
            whole[rows] = part
        out.append(whole)
    return out


def split_positions(n: int, world: int, zigzag: bool) -> list[np.ndarray]:
    split = ring.zigzag_positions if zigzag else ring.contiguous_positions
    return [split(n, world, rank) for rank in range(world)]


def reference_gradients(case: dict, causal: bool):
    """(dq, dk, dv) of standard attention, by torch autograd in float64."""
    q, k, v = (torch.tensor(case[name], requires_grad=True) for name in ("q", "k", "v"))
    scores = q @ k.T * ring.sm_scale(q.shape[-1])
    if causal:
        keep = torch.ones(scores.shape, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    (torch.softmax(scores, dim=-1) @ v).backward(torch.tensor(case["do"]))
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


def _tensors(result, count: int, what: str) -> tuple:
    if not isinstance(result, (tuple, list)) or len(result) != count or not all(
            torch.is_tensor(t) for t in result):
        raise TypeError(f"return {what}: a tuple of {count} tensors, not "
                        f"{printable_answer(result)}")
    return tuple(result)


# ---------------------------------------------------------------- the jobs (in each rank)


def _watch_kv(case: dict) -> None:
    """Let the rank's log tell K/V transfers from others: every value of K and V."""
    rings.watch_blocks(torch.from_numpy(case["k"]), torch.from_numpy(case["v"]),
                       torch.zeros(1, dtype=torch.float64))  # and the padding rows' zeros


def _forward_job(answer):
    def job(rank, world, case):
        positions = ring.contiguous_positions(case["n"], world, rank)
        q, k, v, q_pos, k_pos = padded_shard(case, positions, shard_length(case["n"], world))
        _watch_kv(case)
        o, lse = _tensors(answer(q, k, v, q_pos, k_pos, case["causal"]), 2, "(o, lse)")
        return {"o": o, "lse": lse}
    return job


def _plan_job(answer):
    def job(rank, world, case):
        zigzag = case["zigzag"]
        split = ring.zigzag_positions if zigzag else ring.contiguous_positions
        positions = split(case["n"], world, rank)
        q, k, v, q_pos, k_pos = padded_shard(case, positions, shard_length(case["n"], world))
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
                        f"{printable_answer(pairs)}")
    rows = []
    for pair in pairs:
        ok = (isinstance(pair, (tuple, list)) and len(pair) == 3
              and all(isinstance(c, (int, np.integer)) and not isinstance(c, bool)
                      for c in pair[:2]) and pair[2] in ring.KINDS)
        if not ok:
            raise TypeError(f"each entry of the plan is (q_chunk, kv_chunk, kind) with two "
                            f"chunk numbers and a kind among {ring.KINDS}, not "
                            f"{printable_answer(pair)}")
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
            q, k, v, q_pos, k_pos = padded_shard(case, splits[rank], max(lengths))
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
        q, k, v, q_pos, k_pos = padded_shard(case, positions, shard_length(case["n"], world))
        o, lse, do = (torch.from_numpy(np.ascontiguousarray(case[name][positions]))
                      for name in ("o", "lse", "do"))
        _watch_kv(case)
        dq, dk, dv = _tensors(answer(q, k, v, o, lse, do, q_pos, k_pos, case["causal"]), 3,
                              "(dq, dk, dv)")
        return {"dq": dq, "dk": dk[:len(positions)], "dv": dv[:len(positions)]}
    return job


JOBS = {"forward": _forward_job, "plan": _plan_job, "split": _split_job,
        "backward": _backward_job}


def run_job(answer, job: str, world: int, cases: list, labels: list[str] | None = None,
            keep_results: bool = False) -> list:
    """Start `world` ranks and run the answer on every case: results[case][rank] (with
    `keep_results`, a crash or deadlock ends the list as run_ranks says)."""
    return ring.run_ranks(JOBS[job](answer), world, cases, f"{job} on {world} ranks",
                          case_labels=labels, keep_results=keep_results)


def try_answer(answer, job: str, world: int = 2, n: int = 16, d: int = 4,
               causal: bool = True, zigzag: bool = False, seed: int = 0) -> dict:
    """Run an answer once on `world` ranks, outside any check (the notebook's try cells):
    {"matches": bool, ...} against standard attention (or autograd, for the backward)."""
    refuse_blanks(answer, getattr(answer, "__name__", job))  # before any process starts
    if job == "plan" and class_edition():
        raise CourseInputError(
            "A causal plan is tried inside the reference ring, which the class edition leaves "
            "out (it is an exercise of this lesson): your plan is checked when your "
            "instructor grades the notebook.")
    case = {"n": n, "causal": causal, "zigzag": zigzag, **case_arrays(n, d, seed)}
    case["o"], case["lse"] = ring.reference_attention(case["q"], case["k"], case["v"], causal)
    per_rank = run_job(answer, job, world, [case])[0]
    if job == "split":
        positions = [np.asarray(r["positions"]) for r in per_rank]
        return {"positions": [p.tolist() for p in positions],
                "work": [ring.causal_work(p) for p in positions]}
    positions = split_positions(n, world, zigzag and job == "plan")
    if job == "backward":
        got = gather(per_rank, positions, "dq", "dk", "dv")
        expected = reference_gradients(case, causal)
    else:
        got = gather(per_rank, positions, "o", "lse")
        expected = (case["o"], case["lse"])
    return {"matches": all(np.allclose(g, e, atol=1e-8) for g, e in zip(got, expected,
                                                                          strict=True))}
