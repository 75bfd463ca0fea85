"""Lesson 10's ring on one rank, in torch: what the rank computes on one block of keys
(`block_attention`, `block_gradients`), the merge of partial results in log-sum-exp form
(`merge_lse`), the transfer to the neighbours (`exchange`) and the reference rings
(`ring_forward`, `ring_backward`) that the checks compare with and the GPU script runs.
A watched rank logs its computes, posts and waits here (`log_event`, `EVENT_CODES`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from .model import NEG_INF, chunk_lengths, chunks_of, sm_scale

EVENT_CODES = {"compute": 0, "post": 1, "blocking": 2, "wait": 3}  # what a watched rank did
CARRIES = {"unknown": -1, "kv": 0, "other": 1}  # what a transfer carried: K/V or not
SCALING_RESULTS = "10-ring-scaling"  # assets/results/<name>.csv, written by the GPU script

# ---------------------------------------------------------------- a watched rank's log
# A rank the checks run logs, in order, each block compute, each transfer it posts, each wait
# on one, and each blocking send or receive. A transfer is numbered when posted; whether it
# carried K/V (or their positions) or something else (gradients) is read from its data: sends
# when posted, receives when waited on.

_events: list[list[int]] | None = None  # [code, transfer, direction] per event, when watched
_carries: list[int] = []  # per transfer: a CARRIES code
_kv_values: torch.Tensor | None = None  # every value of the K and V blocks of the ring


def watch_events() -> list[list[int]]:
    """Start a fresh log of this rank's computes and transfers (`run_ranks`, once per case)."""
    global _events, _carries, _kv_values
    _events, _carries, _kv_values = [], [], None
    return _events


def watch_blocks(*tensors) -> None:
    """Tell the log which values are K and V (a job, before it calls the answer), so that it
    can say of each transfer whether it carried a K/V block."""
    global _kv_values
    _kv_values = torch.unique(torch.cat([t.detach().flatten().double() for t in tensors]))


def log_event(event: str, transfer: int = -1, direction: int = -1) -> None:
    if _events is not None:
        _events.append([EVENT_CODES[event], transfer, direction])


def _carried(tensor) -> int:
    if _kv_values is None or not torch.is_tensor(tensor):
        return CARRIES["unknown"]
    if not tensor.is_floating_point():
        return CARRIES["kv"]  # positions travel with their block
    values = tensor.detach().flatten().double().cpu()
    if values.numel() and values.any() and torch.isin(values, _kv_values).all():
        return CARRIES["kv"]
    return CARRIES["other"]


def log_post(tensor, direction: int) -> int:
    """Log a posted transfer (direction 0: send, 1: receive); returns its number."""
    if _events is None:
        return -1
    _carries.append(_carried(tensor) if direction == 0 else CARRIES["unknown"])
    log_event("post", len(_carries) - 1, direction)
    return len(_carries) - 1


def log_wait(transfer: int, tensor, direction: int) -> None:
    if _events is None or not 0 <= transfer < len(_carries):
        return
    if _carries[transfer] == CARRIES["unknown"]:
        _carries[transfer] = _carried(tensor)
    log_event("wait", transfer, direction)


def encode_events(events) -> np.ndarray:
    """(E, 4) int32: code, transfer (-1: none), direction (0 send, 1 receive, -1), and what the
    transfer carried (a CARRIES code), for each logged event in order."""
    rows = [[code, transfer, direction,
             _carries[transfer] if 0 <= transfer < len(_carries) else CARRIES["unknown"]]
            for code, transfer, direction in events]
    return np.array(rows, dtype=np.int32).reshape(-1, 4)


class WatchedWork:
    """A posted transfer's request, which logs when it is waited on (or found complete). A
    second wait returns at once, as with NCCL (gloo's would block for good)."""

    def __init__(self, work, transfer: int, tensor, direction: int):
        self._work, self._transfer, self._tensor = work, transfer, tensor
        self._direction, self._seen = direction, False

    def _log(self) -> None:
        if not self._seen:
            self._seen = True
            log_wait(self._transfer, self._tensor, self._direction)

    def wait(self, *args, **kwargs):
        if self._seen:
            return True
        done = self._work.wait(*args, **kwargs)
        self._log()
        return done

    def is_completed(self):
        done = self._work.is_completed()
        if done:
            self._log()
        return done

    def __getattr__(self, name):
        return getattr(self._work, name)


# ---------------------------------------------------------------- one rank's compute (torch)


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
    """The reference ring backward on this rank: (dq, dk, dv) of its own tokens. dq stays
    home; K, V travel as in the forward, posted before each compute; the dK, dV accumulators
    of a block follow it one step behind, so that each hop overlaps the next block's compute;
    after the last step one more hop brings each home."""
    rank, world = dist.get_rank(), dist.get_world_size()
    delta = (do * o).sum(dim=-1)
    dq = torch.zeros_like(q)
    dk = dv = None  # the accumulators of the block held, once it has some
    for step in range(world):
        if step < world - 1:  # the next block travels while this one is computed
            next_kv = [torch.empty_like(t) for t in (k, v, k_pos)]
            kv_requests = exchange((k, v, k_pos), next_kv, rank, world)
        if step > 0:  # the last block's accumulators follow it; this block's arrive
            held = [torch.empty_like(dk), torch.empty_like(dv)]
            grad_requests = exchange((dk, dv), held, rank, world)
        block_dq, block_dk, block_dv = block_gradients(q, k, v, do, lse, delta, q_pos, k_pos,
                                                       causal)
        dq = dq + block_dq
        if step > 0:
            for request in grad_requests:
                request.wait()
            block_dk, block_dv = held[0] + block_dk, held[1] + block_dv
        dk, dv = block_dk, block_dv
        if step < world - 1:
            for request in kv_requests:
                request.wait()
            k, v, k_pos = next_kv
    home = [torch.empty_like(dk), torch.empty_like(dv)]
    for request in exchange((dk, dv), home, rank, world):
        request.wait()
    return dq, home[0], home[1]


# ---------------------------------------------------------------- measured on two GPUs


def scaling_rows() -> list[dict]:
    """The recorded two-GPU measurements (assets/results/10-ring-scaling.csv), [] if none."""
    from ..bench import recorded

    return recorded(SCALING_RESULTS)
