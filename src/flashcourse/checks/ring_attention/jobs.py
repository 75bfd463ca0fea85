"""What runs in each rank: one job per exercise that builds the rank's shard, calls the
student's function and returns plain arrays; `run_job` starts the ranks (`distributed.run_ranks`)
and `run_answer` does so as one call of student code (`registry.run_student`);
`answers_by_case` runs an answer on every case at every ring size, for the checks; `try_answer`
runs an answer once for the notebook's try cells."""

from __future__ import annotations

import numpy as np
import torch

from ... import distributed as ring
from ...blanks import refuse_blanks
from .. import registry
from .common import (
    WORLD_SIZES,
    case_arrays,
    gather,
    padded_shard,
    reference_gradients,
    shard_length,
    split_positions,
)


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
        q, k, v, q_pos, k_pos = padded_shard(case, positions, shard_length(case["n"], world))
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
        got = gather(per_rank, positions, "dq", "dk", "dv")
        expected = reference_gradients(case, causal)
    else:
        got = gather(per_rank, positions, "o", "lse")
        expected = (case["o"], case["lse"])
    return {"matches": all(np.allclose(g, e, atol=1e-8) for g, e in zip(got, expected,
                                                                          strict=True))}


def run_answer(answer, job: str, world: int, cases: list) -> list:
    return registry.run_student(run_job, f"{job} on {world} ranks", answer, job, world, cases)


def answers_by_case(answer, job: str, cases: list, make_input):
    """Run the answer on every case in rings of each size in WORLD_SIZES; yield (world,
    "case i/n", params, the case's input make_input(*params), each rank's results)."""
    for world in WORLD_SIZES:
        inputs = [make_input(*params) for params in cases]
        results = run_answer(answer, job, world, inputs)
        for number, (params, case, per_rank) in enumerate(
                zip(cases, inputs, results, strict=True), 1):
            yield world, f"case {number}/{len(cases)}", params, case, per_rank
