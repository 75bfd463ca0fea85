"""Lesson 9's host side: ring attention on P processes of one machine.

- the numpy model (`simulate_ring`): P ranks simulated in one process, checked against
  standard attention;
- the splits of a sequence over ranks (`contiguous_positions`, `zigzag_positions`, `chunks_of`)
  and the causal work each rank does (`causal_work`);
- what one rank computes on one block of keys (`block_attention`, `block_gradients`) and the
  merge of partial results in log-sum-exp form (`merge_lse`);
- `run_ranks`: P processes joined by torch.distributed (gloo over the loopback interface) that
  run a function on every rank, with a timeout that ends every process it started and says
  why (a deadlock, a crash) instead of hanging the notebook.

The ring itself is the student's (lesson 9's exercises); `ring_forward` and `ring_backward`
here are the references the checks compare with and that the GPU script runs.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from .checks.errors import CourseInputError, WrongAnswer
from .models.softmax_states import normalised, softmax_state

NEG_INF = float("-inf")
RANK_TIMEOUT_S = 20.0  # no rank reported progress for this long: a deadlock
JOIN_TIMEOUT_S = 60.0  # the ranks' start and rendezvous (no student code), on a busy machine
LOOPBACK = "127.0.0.1"
# Collectives that would hand every rank all of K and V at once: not a ring.
COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
               "all_reduce", "all_to_all", "all_to_all_single", "gather", "scatter",
               "reduce_scatter", "reduce_scatter_tensor", "reduce")
KINDS = ("full", "diagonal", "skip")  # what a rank does with one (query chunk, key chunk) pair
EVENT_CODES = {"compute": 0, "post": 1, "blocking": 2}  # what a watched rank did, in order


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
    """Standard attention of one head in float64: (o, lse), o (n, d), lse (n,)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    scores = q @ k.T * sm_scale(q.shape[-1])  # (n, n)
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, NEG_INF)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - top)
    lse = top[:, 0] + np.log(weights.sum(axis=-1))
    return weights @ v / weights.sum(axis=-1, keepdims=True), lse


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


def merge_lse_numpy(o, lse, block_o, block_lse):
    """Lesson 5's merge in log-sum-exp form, numpy (see `merge_lse`)."""
    new_lse = np.logaddexp(lse, block_lse)
    safe = np.where(np.isneginf(new_lse), 0.0, new_lse)  # two empty states stay empty
    return (np.exp(lse - safe)[:, None] * o + np.exp(block_lse - safe)[:, None] * block_o,
            new_lse)


def simulate_ring(q, k, v, world_size: int, causal: bool, zigzag: bool = False,
                  mistake: str | None = None):
    """Ring attention with P ranks simulated in one process (numpy): rank r holds the rows
    of its split; at step s it holds the K/V of rank (r - s) mod P and merges that block's
    (o, lse) into its running state. Returns (o, lse) of the whole sequence in position order.

    `mistake` reproduces a known wrong ring (the checks name mistakes with it): "no_rescale",
    "one_step_short", "own_block_skipped" (waits for the next block before computing),
    "never_swapped" (computes its own block P times), "lse_first" (keeps step 0's lse),
    "no_mask" (causal without the mask)."""
    n = q.shape[0]
    split = zigzag_positions if zigzag else contiguous_positions
    positions = [split(n, world_size, rank) for rank in range(world_size)]
    o_all, lse_all = np.zeros_like(q, dtype=np.float64), np.zeros(n)
    steps = world_size - 1 if mistake == "one_step_short" else world_size
    for rank in range(world_size):
        mine = positions[rank]
        o, lse = np.zeros((len(mine), q.shape[1])), np.full(len(mine), NEG_INF)
        for step in range(steps):
            source = (rank - step) % world_size
            if mistake == "own_block_skipped":  # waits for the next block, then computes
                source = (rank - min(step + 1, world_size - 1)) % world_size
            if mistake == "never_swapped":
                source = rank
            theirs = positions[source]
            block_o, block_lse = block_state(q[mine], k[theirs], v[theirs], mine, theirs,
                                             causal and mistake != "no_mask")
            if mistake == "no_rescale":
                o, lse = o + block_o, np.logaddexp(lse, block_lse)
            elif mistake == "lse_first" and step > 0:
                o = merge_lse_numpy(o, lse, block_o, block_lse)[0]
            else:
                o, lse = merge_lse_numpy(o, lse, block_o, block_lse)
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


# ---------------------------------------------------------------- one rank's compute (torch)

_events: list[str] | None = None  # the order of posts and computes on this rank, when watched


def _log(event: str) -> None:
    if _events is not None:
        _events.append(event)


def block_attention(q, k, v, q_pos, k_pos, causal: bool):
    """(o, lse) of this rank's queries against one block of keys.

    q (rows, d), k and v (keys, d), q_pos (rows,) and k_pos (keys,) the tokens' positions in
    the whole sequence (-1 marks a padding key, never seen); causal masks keys after the query.
    o is normalised over the block; a row that sees no key gets o = 0 and lse = -inf."""
    _log("compute")
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
    log-sum-exp: lse = log(e^lse1 + e^lse2), o = e^(lse1 - lse) o1 + e^(lse2 - lse) o2."""
    new_lse = torch.logaddexp(lse, block_lse)
    safe = torch.where(torch.isneginf(new_lse), torch.zeros_like(new_lse), new_lse)
    return (torch.exp(lse - safe).unsqueeze(-1) * o
            + torch.exp(block_lse - safe).unsqueeze(-1) * block_o, new_lse)


def block_gradients(q, k, v, do, lse, delta, q_pos, k_pos, causal: bool):
    """(dq, dk, dv) contributed by one block of keys, from the forward's lse (no second
    softmax) and delta = rowsum(dO * O): P = exp(S - lse), dV = P^T dO, dS = P (dO V^T - delta),
    dQ = dS K scale, dK = dS^T Q scale."""
    _log("compute")
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


# ---------------------------------------------------------------- P processes


def loopback_interface() -> str:
    """The name of the loopback interface ("lo" on Linux, "lo0" on macOS) for gloo."""
    with contextlib.suppress(OSError):
        for _, name in socket.if_nameindex():
            if name.startswith("lo"):
                return name
    return "lo"


def _refuse_collective(name: str):
    def refused(*args, **kwargs):
        raise RuntimeError(f"dist.{name} is switched off here: in ring attention each rank "
                           "talks only to its two neighbours, with isend/irecv (or "
                           "batch_isend_irecv).")
    return refused


def _watch_ring_ops() -> None:
    """In a rank: log every posted transfer and every blocking one; refuse collectives.
    isend and irecv are replaced in torch.distributed and in the module that defines them,
    so that P2POp still accepts them."""
    from torch.distributed import distributed_c10d

    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _refuse_collective(name))
    for name, event in (("isend", "post"), ("irecv", "post"), ("send", "blocking"),
                        ("recv", "blocking")):
        original = getattr(distributed_c10d, name)

        def watched(*args, _original=original, _event=event, **kwargs):
            _log(_event)
            return _original(*args, **kwargs)

        setattr(dist, name, watched)
        setattr(distributed_c10d, name, watched)


def _rank_main(rank, world_size, port, conn, job, cases):
    """A rank's process: its own process group (so that a timeout can end it and all it
    started), quiet output, one thread, gloo over loopback; runs `job` on each case."""
    global _events
    os.setsid()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
    try:
        store = dist.TCPStore(LOOPBACK, port, world_size, rank == 0,
                              timeout=datetime.timedelta(seconds=JOIN_TIMEOUT_S))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=10 * RANK_TIMEOUT_S))
    except Exception as err:  # noqa: BLE001
        conn.send(("setup", -1, f"{type(err).__name__}: {err}"))
        return
    try:
        dist.barrier()  # every rank has joined: rank 0, which holds the store, may now finish
    except Exception as err:  # noqa: BLE001
        conn.send(("setup", -1, f"{type(err).__name__}: {err}"))
        return
    _watch_ring_ops()
    for number, case in enumerate(cases):
        conn.send(("start", number, None))
        _events = []
        try:
            result = job(rank, world_size, case)
        except BaseException as err:  # noqa: BLE001
            where = traceback.extract_tb(err.__traceback__)[-1]
            conn.send(("error", number, f"{type(err).__name__}: {err} (line {where.lineno} "
                                        f"of {where.name})"))
            return
        result = {key: value.detach().cpu().numpy() if torch.is_tensor(value) else value
                  for key, value in result.items()}
        result["events"] = np.array([EVENT_CODES[e] for e in _events], dtype=np.int8)
        conn.send(("done", number, result))
    conn.send(("end", len(cases), None))
    conn.close()
    os._exit(0)  # at once: rank 0 holds the store the others' teardown would wait for


def run_ranks(job: Callable, world_size: int, cases: list, label: str,
              timeout_s: float | None = None) -> list[list[dict]]:
    """Run `job(rank, world_size, case)` for every case on `world_size` processes joined by a
    gloo process group over loopback. Returns results[case][rank] (dicts of numpy arrays).

    A rank that raises ends the run with a WrongAnswer naming the rank, the case and the
    error; if no rank reports progress for `timeout_s` seconds, every process is killed (its
    whole process group) and a WrongAnswer says the ranks deadlocked (`timeout_s`:
    RANK_TIMEOUT_S unless given)."""
    import multiprocessing

    timeout_s = RANK_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        raise CourseInputError("Running several ranks needs processes started by fork "
                               "(Linux or macOS); on Windows, use WSL.") from None
    try:
        return _start_and_collect(context, free_port(), job, world_size, cases, label,
                                  timeout_s)
    except RanksNeverStarted:  # a setup that failed or hung (not the student's code): again
        try:
            return _start_and_collect(context, free_port(), job, world_size, cases, label,
                                      timeout_s)
        except RanksNeverStarted as err:
            raise CourseInputError(f"{label}: {err}") from None


def free_port() -> int:
    """A port of the loopback interface that nothing listens on now. Rank 0 opens the ranks'
    meeting point (a TCPStore) there: the notebook's process runs no server thread while it
    forks the ranks."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((LOOPBACK, 0))
            return probe.getsockname()[1]
    except OSError as err:
        raise CourseInputError(f"Could not open a port on {LOOPBACK} for the ranks to meet "
                               f"({err}); is the loopback interface up?") from None


class RanksNeverStarted(Exception):
    """Some rank did not reach its first case in time: the process group never formed."""


def _start_and_collect(context, port, job, world_size, cases, label, timeout_s):
    pipes, processes = {}, []
    try:
        for rank in range(world_size):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_rank_main, daemon=True, args=(
                rank, world_size, port, sender, job, cases))
            process.start()
            sender.close()
            pipes[receiver] = rank
            processes.append(process)
        return _collect(pipes, processes, len(cases), label, timeout_s)
    finally:
        for process in processes:
            _end(process)


def _collect(pipes, processes, case_count, label, timeout_s):
    import multiprocessing.connection

    results = [[None] * len(processes) for _ in range(case_count)]
    current = [-1] * len(processes)  # the case each rank is in (-1: still joining)
    open_pipes = dict(pipes)
    last_news = time.monotonic()
    while open_pipes:
        joining = any(current[r] < 0 for r in open_pipes.values())
        limit = max(timeout_s, JOIN_TIMEOUT_S) if joining else timeout_s
        ready = multiprocessing.connection.wait(
            list(open_pipes), timeout=max(0.0, last_news + limit - time.monotonic()))
        if not ready:
            if joining:
                raise RanksNeverStarted(f"the {len(processes)} ranks did not all join the "
                                        f"process group over {LOOPBACK} in {limit:g} s.")
            waiting = sorted({current[r] for r in open_pipes.values()})
            cases = ", ".join(str(c + 1) for c in waiting)
            raise WrongAnswer(
                f"{label}: the ranks made no progress for {timeout_s:g} s in case {cases} and "
                "were stopped: a deadlock (or a loop that never ends). Every rank is probably "
                "waiting in a blocking recv (or send) for a neighbour that is itself "
                "waiting. Post the send and the receive together, with isend/irecv or "
                "batch_isend_irecv, then wait on both; and make every rank take the same "
                "number of steps.")
        for pipe in ready:
            rank = open_pipes[pipe]
            try:
                kind, number, payload = pipe.recv()
            except (EOFError, OSError):
                code = processes[rank].exitcode
                raise WrongAnswer(f"{label}: rank {rank} ended without a result in case "
                                  f"{max(current[rank], 0) + 1} (exit code {code}).") from None
            last_news = time.monotonic()
            if kind == "setup":
                raise RanksNeverStarted(f"rank {rank} could not join the others over "
                                        f"{LOOPBACK}: {payload}")
            if kind == "error":
                rank, number, payload = _first_cause(open_pipes, (rank, number, payload))
                raise WrongAnswer(f"{label}, case {number + 1}: on rank {rank} your code "
                                  f"raised {payload}")
            if kind == "start":
                current[rank] = number
            elif kind == "done":
                results[number][rank] = payload
            elif kind == "end":
                del open_pipes[pipe]
    return results


# What a rank reports when a neighbour died: a consequence, not the cause.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Read error",
             "Broken pipe")
ERROR_GRACE_S = 0.5  # how long to wait for the other ranks' errors before naming one


def _first_cause(open_pipes: dict, first: tuple) -> tuple:
    """Of the errors the ranks report within ERROR_GRACE_S, the first that is not a rank
    seeing its neighbour die: (rank, case, message)."""
    import multiprocessing.connection

    errors = [first]
    end = time.monotonic() + ERROR_GRACE_S
    waiting = {pipe: rank for pipe, rank in open_pipes.items() if rank != first[0]}
    while waiting and time.monotonic() < end:
        for pipe in multiprocessing.connection.wait(list(waiting),
                                                    max(0.0, end - time.monotonic())):
            try:
                kind, number, payload = pipe.recv()
            except (EOFError, OSError):
                waiting.pop(pipe)
                continue
            if kind == "error":
                errors.append((waiting.pop(pipe), number, payload))
    return next((e for e in errors if not any(m in str(e[2]) for m in PEER_GONE)), first)


def _end(process) -> None:
    """Stop a rank and everything it started (its own process group)."""
    process.join(timeout=0.5 if process.is_alive() else 0)
    if process.is_alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            process.kill()
        process.join(timeout=5)


# ---------------------------------------------------------------- figures

KIND_COLORS = {"full": "#6baed6", "diagonal": "#fd8d3c", "skip": "#f0f0f0"}
SCALING_RESULTS = "09-ring-scaling"  # assets/results/<name>.csv, written by the GPU script


def schedule_figure(world_size: int = 4, causal: bool = True, zigzag: bool = False):
    """The ring schedule: one row per rank, one column per step; each cell names the rank
    whose K/V the row's rank holds and is coloured by what a causal ring does with it
    (under the zigzag split a cell is half full, half skipped)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    fig, ax = plt.subplots(figsize=(1.1 * world_size + 2.4, 0.8 * world_size + 1.4))
    for rank in range(world_size):
        for step in range(world_size):
            kinds = [kind for _, _, kind in step_plan(rank, step, world_size, zigzag)]
            if not causal:
                kinds = ["full"]
            width = 1 / len(kinds)
            for index, kind in enumerate(kinds):
                ax.add_patch(Rectangle((step + index * width, rank), width, 1,
                                       facecolor=KIND_COLORS[kind], edgecolor="white", lw=1))
            ax.text(step + 0.5, rank + 0.5, f"K/V of {(rank - step) % world_size}",
                    ha="center", va="center", fontsize=8,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    ax.set_xlim(0, world_size)
    ax.set_ylim(world_size, 0)
    ax.set_xticks(np.arange(world_size) + 0.5, [f"step {s}" for s in range(world_size)])
    ax.set_yticks(np.arange(world_size) + 0.5, [f"rank {r}" for r in range(world_size)])
    split = "zigzag split" if zigzag else "contiguous split"
    ax.set_title(f"Ring schedule, P = {world_size}" + (f", causal, {split}" if causal else ""))
    if causal:
        ax.legend(handles=[Patch(facecolor=c, edgecolor="gray", label=k)
                           for k, c in KIND_COLORS.items()],
                  loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


def work_figure(n: int, world_size: int, split=None):
    """Causal work per rank (score pairs, key <= query) under the contiguous split and under
    `split(n, world_size, rank)` (the zigzag split unless given)."""
    import matplotlib.pyplot as plt

    split = split or zigzag_positions
    ranks = np.arange(world_size)
    contiguous = [causal_work(contiguous_positions(n, world_size, r)) for r in ranks]
    balanced = [causal_work(split(n, world_size, r)) for r in ranks]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(ranks - 0.2, contiguous, width=0.4, label="contiguous split", color="#9ecae1")
    ax.bar(ranks + 0.2, balanced, width=0.4, label="zigzag split", color="#fd8d3c")
    ax.axhline(n * (n + 1) / 2 / world_size, color="black", lw=1, ls="--",
               label="total / P")
    ax.set_xticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_ylabel("score pairs computed")
    ax.set_title(f"Causal work per rank, n = {n}, P = {world_size}")
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def scaling_rows() -> list[dict]:
    """The recorded two-GPU measurements (assets/results/09-ring-scaling.csv), [] if none."""
    from .bench import recorded

    return recorded(SCALING_RESULTS)


def scaling_figure(rows: list[dict]):
    """Tokens/s and peak memory per GPU against N, one line per method, causal and not,
    from the rows the GPU script wrote."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for causal, style in ((False, "-"), (True, "--")):
        for method in sorted({row["method"] for row in rows}):
            mine = sorted((r for r in rows if r["method"] == method
                           and str(r["causal"]) == str(causal)
                           and isinstance(r.get("tokens_per_s"), (int, float))),
                          key=lambda r: r["n"])
            if not mine:
                continue
            label = f"{method}, {'causal' if causal else 'full'}"
            ns = [r["n"] for r in mine]
            axes[0].plot(ns, [r["tokens_per_s"] for r in mine], style, marker="o", label=label)
            axes[1].plot(ns, [r["peak_mib_per_gpu"] / 1024 for r in mine], style, marker="o",
                         label=label)
    axes[0].set_ylabel("tokens/s (forward)")
    axes[1].set_ylabel("peak memory per GPU (GiB)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
    axes[0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig
