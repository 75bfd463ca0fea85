"""What lesson 9's checks share: the world sizes and tolerances, the cases and their inputs, a
rank's padded shard, whole-sequence arrays gathered from the ranks' rows, and the references
(standard attention in `distributed`, autograd here)."""

from __future__ import annotations

import numpy as np
import torch

from ... import distributed as ring
from .. import registry

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


def describe(n: int, world: int, causal: bool | None = None, zigzag: bool | None = None,
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
                raise registry.WrongAnswer(
                    f"rank {rank} returned {name} of shape {part.shape}, expected "
                    f"{(len(rows), *first.shape[1:])}: one row per query of the rank.")
            whole[rows] = part
        out.append(whole)
    return out


def compare_attention(o, lse, case: dict, causal: bool, label: str) -> None:
    """Raise WrongAnswer unless the gathered (o, lse) are standard attention's over the whole
    sequence (float64, ATOL and RTOL)."""
    expected_o, expected_lse = ring.reference_attention(case["q"], case["k"], case["v"], causal)
    registry.compare(o, expected_o, f"{label}, o", atol=ATOL, rtol=RTOL)
    registry.compare(lse, expected_lse, f"{label}, lse", atol=ATOL, rtol=RTOL)


def split_positions(n: int, world: int, zigzag: bool) -> list[np.ndarray]:
    split = ring.zigzag_positions if zigzag else ring.contiguous_positions
    return [split(n, world, rank) for rank in range(world)]


def passed(count: int, what: str) -> str:
    return f"{count} cases on 2 and 4 ranks {what}{registry.hidden_note()}"


def reference_gradients(case: dict, causal: bool):
    """(dq, dk, dv) of standard attention, by torch autograd in float64."""
    q, k, v = (torch.tensor(case[name], requires_grad=True) for name in ("q", "k", "v"))
    scores = q @ k.T * ring.sm_scale(q.shape[-1])
    if causal:
        keep = torch.ones(scores.shape, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    (torch.softmax(scores, dim=-1) @ v).backward(torch.tensor(case["do"]))
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()
