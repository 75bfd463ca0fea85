"""Lesson 10's processes: `run_ranks` starts P processes joined by torch.distributed (gloo over
the loopback interface), runs a function on every rank, and ends with a timeout that stops every
process it started and says why (a deadlock, a crash) instead of hanging the notebook. Inside a
rank, collectives are refused and every transfer is logged: its post, the wait on its request,
a blocking send or receive (`rings.log_post`, `rings.WatchedWork`).
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist

from ..checks.errors import CourseInputError, WrongAnswer
from . import rings

RANK_TIMEOUT_S = 20.0  # no rank reported progress for this long: a deadlock
JOIN_TIMEOUT_S = 60.0  # the ranks' start and rendezvous (no student code), on a busy machine
LOOPBACK = "127.0.0.1"
# Collectives that would hand every rank all of K and V at once: not a ring.
COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
               "all_reduce", "all_to_all", "all_to_all_single", "gather", "scatter",
               "reduce_scatter", "reduce_scatter_tensor", "reduce")

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
    """In a rank: log every posted transfer, every wait on one and every blocking transfer;
    refuse collectives. isend and irecv are replaced in torch.distributed and in the module
    that defines them, so that P2POp still accepts them."""
    from torch.distributed import distributed_c10d

    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _refuse_collective(name))
    for name, direction in (("isend", 0), ("irecv", 1)):
        original = getattr(distributed_c10d, name)

        def posted(*args, _original=original, _direction=direction, **kwargs):
            tensor = args[0] if args else kwargs.get("tensor")
            transfer = rings.log_post(tensor, _direction)
            work = _original(*args, **kwargs)
            return None if work is None else rings.WatchedWork(work, transfer, tensor,
                                                               _direction)

        setattr(dist, name, posted)
        setattr(distributed_c10d, name, posted)
    for name in ("send", "recv"):
        original = getattr(distributed_c10d, name)

        def blocking(*args, _original=original, **kwargs):
            rings.log_event("blocking")
            return _original(*args, **kwargs)

        setattr(dist, name, blocking)
        setattr(distributed_c10d, name, blocking)


def _rank_main(rank, world_size, port, conn, job, cases):
    """A rank's process: its own process group (so that a timeout can end it and all it
    started), quiet output, one thread, gloo over loopback; runs `job` on each case."""
    os.setsid()
    faulthandler.disable()  # an aborted rank is reported by the parent, not dumped
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
        events = rings.watch_events()
        try:
            result = job(rank, world_size, case)
        except BaseException as err:  # noqa: BLE001
            where = traceback.extract_tb(err.__traceback__)[-1]
            conn.send(("error", number, f"{type(err).__name__}: {err} (line {where.lineno} "
                                        f"of {where.name})"))
            return
        result = {key: value.detach().cpu().numpy() if torch.is_tensor(value) else value
                  for key, value in result.items()}
        result["events"] = rings.encode_events(events)
        conn.send(("done", number, result))
    conn.send(("end", len(cases), None))
    conn.close()
    os._exit(0)  # at once: rank 0 holds the store the others' teardown would wait for


def run_ranks(job: Callable, world_size: int, cases: list, label: str,
              timeout_s: float | None = None, case_labels: list[str] | None = None,
              keep_results: bool = False) -> list:
    """Run `job(rank, world_size, case)` for every case on `world_size` processes joined by a
    gloo process group over loopback. Returns results[case][rank] (dicts of numpy arrays).

    A rank that raises ends the run with a WrongAnswer naming the rank, the case and the
    error; if no rank reports progress for `timeout_s` seconds, every process is killed (its
    whole process group) and a WrongAnswer says the ranks deadlocked (`timeout_s`:
    RANK_TIMEOUT_S unless given). `case_labels` describe the cases in those messages. With
    `keep_results`, such a failure is returned instead of raised: the results of the cases
    before it, then {"failed": message} for the case that failed (a check can then judge the
    earlier cases first)."""
    import multiprocessing

    timeout_s = RANK_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        raise CourseInputError("Running several ranks needs processes started by fork "
                               "(Linux or macOS); on Windows, use WSL.") from None
    run = (context, job, world_size, cases, label, timeout_s, case_labels)
    try:
        results, failure = _start_and_collect(free_port(), *run)
    except RanksNeverStarted:  # a setup that failed or hung (not the student's code): again
        try:
            results, failure = _start_and_collect(free_port(), *run)
        except RanksNeverStarted as err:
            raise CourseInputError(f"{label}: {err}") from None
    if failure is None:
        return results
    number, message = failure
    if not keep_results:
        raise WrongAnswer(message)
    return [*results[:number], {"failed": message}]


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


def _start_and_collect(port, context, job, world_size, cases, label, timeout_s, case_labels):
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
        return _collect(pipes, processes, len(cases), label, timeout_s, case_labels)
    finally:
        for process in processes:
            _end(process)


def _collect(pipes, processes, case_count, label, timeout_s, case_labels):
    """(results[case][rank], None) once every rank ended, or (the results so far, (the case
    that failed, what to say)) at the first crash or deadlock."""
    import multiprocessing.connection

    def case_name(number: int) -> str:
        named = case_labels[number] if case_labels and number < len(case_labels) else None
        return f"case {number + 1}" + (f" ({named})" if named else "")

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
            stuck = min(current[r] for r in open_pipes.values())
            return results, (stuck, (
                f"{label}, {case_name(stuck)}: no rank made progress for {timeout_s:g} s, so "
                "the ranks were stopped. They waited for each other (a deadlock), or a loop "
                "never ended: a rank blocked in a send or a receive waits for its neighbour, "
                "which is itself blocked waiting for another. Transfers posted without "
                "blocking, and waited on afterwards, always find their partner; every rank "
                "must also take the same number of steps."))
        for pipe in ready:
            rank = open_pipes[pipe]
            try:
                kind, number, payload = pipe.recv()
            except (EOFError, OSError):
                processes[rank].join(timeout=1)  # its exit code, once it has ended
                code, number = processes[rank].exitcode, max(current[rank], 0)
                why = (": it was aborted, as gloo aborts a rank that receives into a buffer "
                       "of another size or type than what was sent"
                       if code == -signal.SIGABRT else "")
                return results, (number, f"{label}: rank {rank} ended without a result in "
                                         f"{case_name(number)} (exit code {code}){why}.")
            last_news = time.monotonic()
            if kind == "setup":
                raise RanksNeverStarted(f"rank {rank} could not join the others over "
                                        f"{LOOPBACK}: {payload}")
            if kind == "error":
                rank, number, payload = _first_cause(open_pipes, (rank, number, payload))
                return results, (number, f"{label}, {case_name(number)}: on rank {rank} your "
                                         f"code raised {payload}")
            if kind == "start":
                current[rank] = number
            elif kind == "done":
                results[number][rank] = payload
            elif kind == "end":
                del open_pipes[pipe]
    return results, None


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
