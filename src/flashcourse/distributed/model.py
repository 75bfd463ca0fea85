"""Lesson 10's model of the ring, numpy only: ranks simulated in one process.

- the splits of a sequence over ranks (`contiguous_positions`, `zigzag_positions`, `chunks_of`)
  and the causal work each rank does (`causal_work`);
- standard attention (`reference_attention`) and the ring simulated step by step
  (`simulate_ring`);
- the schedule (`ring_schedule`) and the causal plan of each step (`step_plan`, `plan_work`).
"""

from __future__ import annotations

import math

import numpy as np

from ..checks.errors import CourseInputError
from ..models.softmax_states import merge_lse, normalised, softmax_state

NEG_INF = float("-inf")
KINDS = ("full", "diagonal", "skip")  # what a rank does with one (query chunk, key chunk) pair


def sm_scale(d: int) -> float:
    return 1.0 / math.sqrt(d)


# ---------------------------------------------------------------- splits of the sequence


def contiguous_positions(n: int, world_size: int, rank: int) -> np.ndarray:
    """The positions rank `rank` holds when the sequence is cut into P contiguous chunks."""
    _check_split(n, world_size, rank)
    return np.array_split(np.arange(n), world_size)[rank]


def zigzag_positions(n: int, world_size: int, rank: int) -> np.ndarray:
    """The load-balanced split: 2P chunks (np.array_split), rank r holds chunks r and
    2P-1-r, in that order."""
    _check_split(n, world_size, rank)
    chunks = np.array_split(np.arange(n), 2 * world_size)
    return np.concatenate([chunks[rank], chunks[2 * world_size - 1 - rank]])


def chunks_of(rank: int, world_size: int, zigzag: bool) -> list[int]:
    """The chunk numbers a rank holds, in order: [r] of P chunks, or [r, 2P-1-r] of 2P."""
    return [rank, 2 * world_size - 1 - rank] if zigzag else [rank]


def chunk_lengths(n: int, world_size: int, zigzag: bool) -> list[int]:
    """The length of every chunk (np.array_split of n into P or 2P chunks)."""
    count = 2 * world_size if zigzag else world_size
    return [len(c) for c in np.array_split(np.arange(n), count)]


def _check_split(n: int, world_size: int, rank: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise CourseInputError(f"rank {rank} does not exist in a world of {world_size} ranks.")
    if n < 2 * world_size:
        raise CourseInputError(f"{n} tokens are too few for {world_size} ranks: give every "
                               f"rank at least two (n >= {2 * world_size}).")


def causal_work(positions) -> int:
    """Score pairs (query, key <= query) a rank computes for its queries under a causal mask:
    the query at position p sees p + 1 keys."""
    return int(np.sum(np.asarray(positions, dtype=np.int64) + 1))


# ---------------------------------------------------------------- numpy model


def reference_attention(q, k, v, causal: bool):
    """Standard attention of one head in float64: (o, lse), o (n, d), lse (n,); the whole
    sequence as one block."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    positions = np.arange(q.shape[0])
    return block_state(q, k, v, positions, positions, causal)


def block_state(q, k, v, q_pos, k_pos, causal: bool):
    """(o, lse) of queries q against one block of keys, numpy float64: o normalised over the
    block, lse its log-sum-exp. Built from lesson 5's state (m, l, o) of the block: o / l and
    m + log l; a row that sees no key (the empty state) gets o = 0, lse = -inf. Keys at
    position -1 are padding and never seen."""
    visible = np.asarray(k_pos)[None, :] >= 0
    if causal:
        visible = visible & (np.asarray(k_pos)[None, :] <= np.asarray(q_pos)[:, None])
    scores = np.where(visible, q @ k.T * sm_scale(q.shape[-1]), NEG_INF)
    m, total, o = softmax_state(scores, v)
    with np.errstate(divide="ignore"):
        return normalised(total, o), m + np.log(total)


def simulate_ring(q, k, v, world_size: int, causal: bool, zigzag: bool = False):
    """Ring attention with P ranks simulated in one process (numpy): rank r holds the rows
    of its split; at each step it merges the (o, lse) of the K/V block it holds into its
    running state, then the blocks move one rank on. Returns (o, lse) of the whole sequence in
    position order."""
    n = q.shape[0]
    split = zigzag_positions if zigzag else contiguous_positions
    positions = [split(n, world_size, rank) for rank in range(world_size)]
    holds = list(range(world_size))  # holds[rank]: whose K/V block the rank holds now
    states = [(np.zeros((len(mine), q.shape[1])), np.full(len(mine), NEG_INF))
              for mine in positions]
    for _ in range(world_size):
        for rank, mine in enumerate(positions):
            theirs = positions[holds[rank]]
            block_o, block_lse = block_state(q[mine], k[theirs], v[theirs], mine, theirs,
                                             causal)
            states[rank] = merge_lse(*states[rank], block_o, block_lse)
        holds = [holds[(rank - 1) % world_size] for rank in range(world_size)]  # one hop on
    o_all, lse_all = np.zeros_like(q, dtype=np.float64), np.zeros(n)
    for mine, (o, lse) in zip(positions, states, strict=True):
        o_all[mine], lse_all[mine] = o, lse
    return o_all, lse_all


def ring_schedule(world_size: int) -> np.ndarray:
    """(P, P) array: entry [rank, step] is the rank whose K/V `rank` holds at `step`."""
    ranks = np.arange(world_size)
    return (ranks[:, None] - ranks[None, :]) % world_size


def block_kind(q_chunk: int, kv_chunk: int) -> str:
    """What a causal ring does with a pair of chunks: keys before the queries' chunk are all
    visible ("full"), the queries' own chunk needs the triangular mask ("diagonal"), later
    chunks are invisible ("skip")."""
    return "full" if kv_chunk < q_chunk else "diagonal" if kv_chunk == q_chunk else "skip"


def step_plan(rank: int, step: int, world_size: int, zigzag: bool) -> list:
    """The reference plan of one ring step: [(q_chunk, kv_chunk, kind), ...] for every pair
    of a chunk of this rank's queries and a chunk of the keys it holds at this step."""
    source = (rank - step) % world_size
    return [(i, j, block_kind(i, j)) for i in chunks_of(rank, world_size, zigzag)
            for j in chunks_of(source, world_size, zigzag)]


def plan_work(n: int, world_size: int, zigzag: bool, plan=step_plan) -> np.ndarray:
    """(P,) score pairs each rank computes over the whole ring under `plan`: a full block
    costs rows x keys, a diagonal block about half of that (rows x (keys + 1) / 2)."""
    lengths = chunk_lengths(n, world_size, zigzag)
    work = np.zeros(world_size, dtype=np.int64)
    for rank in range(world_size):
        for step in range(world_size):
            for i, j, kind in plan(rank, step, world_size, zigzag):
                if kind == "full":
                    work[rank] += lengths[i] * lengths[j]
                elif kind == "diagonal":
                    work[rank] += lengths[i] * (lengths[j] + 1) // 2
    return work
