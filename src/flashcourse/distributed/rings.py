"""Lesson 9's ring on one rank, in torch: what the rank computes on one block of keys
(`block_attention`, `block_gradients`), the merge of partial results in log-sum-exp form
(`merge_lse`), the transfer to the neighbours (`exchange`) and the reference rings
(`ring_forward`, `ring_backward`) that the checks compare with and the GPU script runs.
A watched rank logs its computes and posts here (`log_event`, `EVENT_CODES`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .model import NEG_INF, chunk_lengths, chunks_of, sm_scale

EVENT_CODES = {"compute": 0, "post": 1, "blocking": 2}  # what a watched rank did, in order
SCALING_RESULTS = "09-ring-scaling"  # assets/results/<name>.csv, written by the GPU script

# ---------------------------------------------------------------- one rank's compute (torch)

_events: list[str] | None = None  # the order of posts and computes on this rank, when watched


def watch_events() -> list[str]:
    """Start a fresh log of this rank's computes and posts (`run_ranks`, once per case)."""
    global _events
    _events = []
    return _events


def log_event(event: str) -> None:
    if _events is not None:
        _events.append(event)


def block_attention(q, k, v, q_pos, k_pos, causal: bool):
    """(o, lse) of this rank's queries against one block of keys.

    q (rows, d), k and v (keys, d), q_pos (rows,) and k_pos (keys,) the tokens' positions in
    the whole sequence (-1 marks a padding key, never seen); causal masks keys after the query.
    o is normalised over the block; a row that sees no key gets o = 0 and lse = -inf."""
    log_event("compute")
    scores = (q @ k.transpose(-1, -2)) * sm_scale(q.shape[-1])
    scores = scores.masked_fill(~visible_keys(q_pos, k_pos, causal), NEG_INF)  # (.., rows, keys)
    lse = torch.logsumexp(scores, dim=-1)
    safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return torch.exp(scores - safe.unsqueeze(-1)) @ v, lse


def visible_keys(q_pos, k_pos, causal: bool):
    """(rows, keys) bool: which keys each query sees (padding keys, at -1, never)."""
    visible = k_pos[None, :] >= 0
    return visible & (k_pos[None, :] <= q_pos[:, None]) if causal else visible


def merge_lse(o, lse, block_o, block_lse):
    """Lesson 5's merge of two softmax states, written for normalised outputs and their
    log-sum-exp, on the ranks' torch tensors (models.softmax_states.merge_lse in numpy)."""
    new_lse = torch.logaddexp(lse, block_lse)
    safe = torch.where(torch.isneginf(new_lse), torch.zeros_like(new_lse), new_lse)
    return (torch.exp(lse - safe).unsqueeze(-1) * o
            + torch.exp(block_lse - safe).unsqueeze(-1) * block_o, new_lse)


def block_gradients(q, k, v, do, lse, delta, q_pos, k_pos, causal: bool):
    """(dq, dk, dv) contributed by one block of keys, from the forward's lse (no second
    softmax) and delta = rowsum(dO * O): P = exp(S - lse), dV = P^T dO, dS = P (dO V^T - delta),
    dQ = dS K scale, dK = dS^T Q scale."""
    log_event("compute")
    scale = sm_scale(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    p = torch.exp(scores - lse.unsqueeze(-1))  # (.., rows, keys)
    p = p.masked_fill(~visible_keys(q_pos, k_pos, causal), 0.0)
    ds = p * (do @ v.transpose(-1, -2) - delta.unsqueeze(-1))
    return ds @ k * scale, ds.transpose(-1, -2) @ q * scale, p.transpose(-1, -2) @ do


# ---------------------------------------------------------------- reference rings (torch)


def ring_forward(q, k, v, q_pos, k_pos, causal: bool, plan=None, zigzag: bool = False,
                 chunk_rows=None, block_fn=None):
    """The reference ring forward on this rank: (o, lse) of its queries over every rank's keys.

    q, k, v (..., rows, d); q_pos, k_pos (rows,) positions in the sequence, -1 for padding keys.
    Without `plan`, every block is computed whole, masked by positions. With `plan` (a
    function like `step_plan`: (rank, step, P, zigzag) -> pairs) and `chunk_rows` (rank ->
    {chunk: (start, stop)}, the rows of each chunk in that rank's shard), each (query chunk,
    key chunk) pair is computed as the plan says: "full" unmasked, "diagonal" with the causal
    mask, "skip" not at all. `block_fn(q, k, v, q_pos, k_pos, causal) -> (o, lse)` replaces
    `block_attention` (the GPU script passes the FlashAttention kernel). o and lse are kept
    in float32 (float64 for float64 inputs) and o is returned in q's dtype."""
    block_fn = block_fn or block_attention
    rank, world = dist.get_rank(), dist.get_world_size()
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    o = torch.zeros(q.shape, dtype=wide, device=q.device)
    lse = torch.full(q.shape[:-1], NEG_INF, dtype=wide, device=q.device)
    for step in range(world):
        requests, arriving = [], None
        if step < world - 1:  # post the next block's transfer, compute while it travels
            arriving = [torch.empty_like(t) for t in (k, v, k_pos)]
            requests = exchange((k, v, k_pos), arriving, rank, world)
        if plan is None:
            block_o, block_lse = block_fn(q, k, v, q_pos, k_pos, causal)
            o, lse = merge_lse(o, lse, block_o.to(wide), block_lse.to(wide))
        else:
            source = (rank - step) % world
            mine, theirs = chunk_rows(rank), chunk_rows(source)
            for i, j, kind in plan(rank, step, world, zigzag):
                if kind == "skip" or j not in theirs:
                    continue
                rows, keys = slice(*mine[i]), slice(*theirs[j])
                block_o, block_lse = block_fn(q[..., rows, :], k[..., keys, :],
                                              v[..., keys, :], q_pos[rows], k_pos[keys],
                                              kind == "diagonal")
                o[..., rows, :], lse[..., rows] = merge_lse(
                    o[..., rows, :], lse[..., rows], block_o.to(wide), block_lse.to(wide))
        for request in requests:
            request.wait()
        if arriving:
            k, v, k_pos = arriving
    return o.to(q.dtype), lse


def shard_chunk_rows(n: int, world_size: int, zigzag: bool):
    """rank -> {chunk: (start, stop)}: where each of a rank's chunks sits in its shard."""
    lengths = chunk_lengths(n, world_size, zigzag)

    def rows(rank: int) -> dict:
        out, start = {}, 0
        for chunk in chunks_of(rank, world_size, zigzag):
            out[chunk] = (start, start + lengths[chunk])
            start += lengths[chunk]
        return out

    return rows


def exchange(sending, receiving, rank: int, world: int) -> list:
    """Post the sends of `sending` to the next rank and the receives of `receiving` from the
    previous one, all at once; returns the requests to wait on."""
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % world) for t in sending]
    ops += [dist.P2POp(dist.irecv, t, (rank - 1) % world) for t in receiving]
    return dist.batch_isend_irecv(ops)


def ring_backward(q, k, v, o, lse, do, q_pos, k_pos, causal: bool):
    """The reference ring backward on this rank: (dq, dk, dv) of its own tokens. K, V and
    their gradient accumulators travel together; after P steps one more hop brings each dK, dV
    home."""
    rank, world = dist.get_rank(), dist.get_world_size()
    delta = (do * o).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for step in range(world):
        block_dq, block_dk, block_dv = block_gradients(q, k, v, do, lse, delta, q_pos, k_pos,
                                                       causal)
        dq, dk, dv = dq + block_dq, dk + block_dk, dv + block_dv
        travelling = (dk, dv) if step == world - 1 else (k, v, k_pos, dk, dv)
        arriving = [torch.empty_like(t) for t in travelling]
        for request in exchange(travelling, arriving, rank, world):
            request.wait()
        if step == world - 1:
            dk, dv = arriving
        else:
            k, v, k_pos, dk, dv = arriving
    return dq, dk, dv


# ---------------------------------------------------------------- measured on two GPUs


def scaling_rows() -> list[dict]:
    """The recorded two-GPU measurements (assets/results/09-ring-scaling.csv), [] if none."""
    from ..bench import recorded

    return recorded(SCALING_RESULTS)
