"""Runs INSIDE the sandbox, beside the student's code: execute the notebook the grader sends.

`python inside.py --timeout S` talks to the grader over its standard input and output, which
the grader holds outside the sandbox (the channel; `channel.py` is the grader's end):

1. it makes itself non-dumpable (so the student's processes, which run as the same user,
   cannot open its file descriptors, read its memory or trace it), moves the channel to
   private descriptors closed on exec, and points its standard input and output at
   /dev/null, so that no process it starts inherits the channel;
2. it reads the notebook to run from the grader, starts one Jupyter kernel (again, with fresh
   ports, if a start does not answer in time; it tells the grader how each try went), and puts
   the references' tripwires in place there before any cell (`checks/tripwires.py`);
3. before each cell it tells the grader which cell comes next, and waits for its answer:
   whether it is a grading cell, and for a grading cell the key of that exercise's inputs,
   which it hands to the kernel just before the cell runs (`checks/cases.py`);
4. after each cell it takes the records, tripwire outputs and hint notes (`fc.hint`) out of
   the cell's outputs and sends them to the grader with the id of that cell (records and
   tripwire outputs of a grading cell only: the grader takes no other), then that cell's
   account (status, error, seconds, characters dropped: at most OUTPUT_LIMIT characters of
   output are kept per cell);
5. at the end it sends the executed notebook and stops.

The student's code can kill this process (the grader then sees the channel close, and takes
nothing more) but cannot write to the channel. Points come from the grader replaying the
records (`flashcourse.checks.recording`); this module imports no part of the course.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import shutil
import signal
import struct
import sys
import time
from pathlib import Path

OUTPUT_LIMIT = 100_000  # characters of output kept per cell
# Seconds each try at starting a notebook's kernel may take to answer (nbclient waits 60 s):
# a loaded machine can take minutes, and a start has been seen to hang there (the kernel
# alive and idle, its first message lost), which a second start with fresh ports survives.
KERNEL_START_WAITS = (120, 480)
RECORD_MIME = "application/vnd.flashcourse.record+json"  # as in checks/recording.py
TRIPWIRE_MIME = "application/vnd.flashcourse.tripwire+json"
HINT_MIME = "application/vnd.flashcourse.hint+json"
# Seconds past the per-cell limit (and its interrupt) after which a cell's kernel is killed;
# never more than the limit itself: a kernel that ignores an interrupt that long is stuck.
STUCK_GRACE = 30
TRIPWIRES_PER_CELL = 20  # tripwire outputs forwarded per cell (one is enough to flag it)
HINTS_PER_CELL = 20  # hint notes forwarded per cell
FRAME_HEADER = struct.Struct(">Q")
MIN_CONTAINERS = 20_000  # objects and arrays any frame may hold (a record holds under 200)
WORK = Path("/grading")
PR_SET_DUMPABLE = 4

TRIPWIRE_SETUP = ("import flashcourse.checks.tripwires as _fc_tripwires\n"
                  "_fc_tripwires.install()\ndel _fc_tripwires")
KEY_SETUP = ("import flashcourse.checks.cases as _fc_cases\n"
             "_fc_cases.issue_key({exercise!r}, {key!r})\ndel _fc_cases")


# ---------------------------------------------------------------- frames (both ends use these)


def write_frame(stream, message: dict) -> None:
    data = json.dumps(message).encode("utf-8")
    stream.write(FRAME_HEADER.pack(len(data)) + data)
    stream.flush()


class FrameError(ValueError):
    """The other end sent something that is not a frame within the limit."""


def read_frame(stream, limit: int, bytes_per_container: int = 0) -> dict | None:
    """The next message, None at the end of the stream; a frame over `limit` bytes is read
    past and comes back as {"type": "too large", "bytes": N}, and so is one with more than
    one `{` or `[` per `bytes_per_container` bytes (past the first MIN_CONTAINERS), as
    {"type": "too complex", ...}: `[{}] * 10**7` is 30 MB of JSON and gigabytes of Python
    objects. FrameError when the stream breaks off inside a frame or a frame is not a JSON
    object."""
    header = stream.read(FRAME_HEADER.size)
    if not header:
        return None
    if len(header) < FRAME_HEADER.size:
        raise FrameError("the channel ended inside a frame")
    (size,) = FRAME_HEADER.unpack(header)
    if size > limit:
        left = size
        while left:
            chunk = stream.read(min(left, 2**20))
            if not chunk:
                raise FrameError("the channel ended inside a frame")
            left -= len(chunk)
        return {"type": "too large", "bytes": size}
    data = stream.read(size)
    if len(data) < size:
        raise FrameError("the channel ended inside a frame")
    if bytes_per_container and data.count(b"{") + data.count(b"[") > \
            MIN_CONTAINERS + size // bytes_per_container:
        return {"type": "too complex", "bytes": size}
    try:
        message = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise FrameError(f"a frame that is not JSON ({type(err).__name__})") from None
    if not isinstance(message, dict):
        raise FrameError("a frame that is not a JSON object")
    return message


# ---------------------------------------------------------------- the runner


def _private_channel():
    """The grader's channel on private descriptors; 0 and 1 become /dev/null."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the grader runs without a sandbox there anyway
    incoming, outgoing = os.dup(0), os.dup(1)  # dup'd descriptors are closed on exec
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout = sys.stderr  # a stray print must not reach the channel (it is /dev/null)
    return os.fdopen(incoming, "rb"), os.fdopen(outgoing, "wb")


def _cap(outputs: list) -> tuple[list, int]:
    kept, size, dropped = [], 0, 0
    for output in outputs:
        text = json.dumps(output)
        if size + len(text) <= OUTPUT_LIMIT:
            kept.append(output)
            size += len(text)
        else:
            dropped += len(text)
    if dropped:
        kept.append({"output_type": "stream", "name": "stderr",
                     "text": f"\n[grader: {dropped:,} characters of output dropped]\n"})
    return kept, dropped


def _error(outputs: list) -> tuple[str, str]:
    for output in outputs:
        if output.get("output_type") == "error":
            return str(output.get("ename", ""))[:200], str(output.get("evalue", ""))[:4000]
    return "", ""


def _small(note, keys: tuple[str, ...]) -> dict:
    """A tripwire hit or hint note as the package writes them: those keys, each a short string
    or an int (whatever else a cell published under that type is not sent)."""
    if not isinstance(note, dict):
        return {}
    return {key: note[key] if isinstance(note[key], int) else str(note[key])[:200]
            for key in keys if isinstance(note.get(key), (str, int))}


def _take_channel_outputs(outputs: list) -> tuple[list, list, list, list]:
    """(the other outputs, records, tripwire hits, hint notes) of one cell's outputs."""
    rest, records, hits, hints = [], [], [], []
    for output in outputs:
        data = output.get("data") if isinstance(output, dict) else None
        if isinstance(data, dict) and RECORD_MIME in data:
            records.append(data[RECORD_MIME])
        elif isinstance(data, dict) and TRIPWIRE_MIME in data:
            hits.append(_small(data[TRIPWIRE_MIME], ("name", "exercise")))
        elif isinstance(data, dict) and HINT_MIME in data:
            hints.append(_small(data[HINT_MIME], ("exercise", "level")))
        else:
            rest.append(output)
    return rest, records, hits, hints


# How many of each of the package's outputs a cell's run keeps: a second record is the
# grader's to flag, and one tripwire hit flags the exercise.
KEPT_PER_CELL = {RECORD_MIME: 2, TRIPWIRE_MIME: TRIPWIRES_PER_CELL, HINT_MIME: HINTS_PER_CELL}


def _channel_client(base):
    """nbclient's client, taking the package's outputs (records, tripwire hits, hint notes)
    aside as each arrives: what the cell does next (clear_output, an output widget's hook, a
    display update) does not reach them."""

    class ChannelClient(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.channel_outputs: list[dict] = []

        def output(self, outs, msg, display_id, cell_index):
            data = msg.get("content", {}).get("data")
            kind = next((m for m in KEPT_PER_CELL if m in data), None) \
                if isinstance(data, dict) else None
            if kind:  # taken as the first kind it holds, as _take_channel_outputs does
                if sum(kind in o["data"] for o in self.channel_outputs) < KEPT_PER_CELL[kind]:
                    self.channel_outputs.append({"output_type": "display_data",
                                                 "data": data})
                return None
            return super().output(outs, msg, display_id, cell_index)

    return ChannelClient


def _stop_kernel(client) -> None:
    """Kill the kernel and what it started (its own process group)."""
    process = getattr(getattr(client.km, "provisioner", None), "process", None)
    if process is not None:
        for kill in (os.killpg, os.kill):
            try:
                kill(process.pid, signal.SIGKILL)
            except OSError:
                pass


def start_kernel(client, waits=KERNEL_START_WAITS, failed=None, **start) -> None:
    """Start an nbclient client's kernel and wait until it answers, trying again with a new
    kernel (and new ports) when one has not answered within its wait or died starting;
    `failed(seconds, error)` hears of each try that failed. The last try's error is raised.
    `start` goes to the kernel's start (`env=`, `cwd=`)."""
    for number, wait in enumerate(waits, 1):
        client.startup_timeout = wait
        client.km = client.create_kernel_manager()
        started = time.monotonic()
        try:
            client.start_new_kernel(**start)
            client.start_new_kernel_client()  # stops the kernel itself when it raises
            return
        except RuntimeError as err:
            if client.km is not None:  # the start itself failed: nbclient's own clean-up
                client._cleanup_kernel()
            client.km = client.kc = None
            if failed is not None:
                failed(time.monotonic() - started, str(err))
            if number == len(waits):
                raise


def _prepare_home(work: Path) -> None:
    template, home = work / "home-template", work / "home"
    if template.is_dir() and not home.exists():
        shutil.copytree(template, home, symlinks=True)
    home.mkdir(exist_ok=True)
    for name in ("runtime", "jupyter", "ipython"):
        (home / name).mkdir(exist_ok=True)


def skip_iri_parser() -> None:
    """Before nbformat is imported: jsonschema builds a parser of IRIs when it is imported and
    rfc3987_syntax is installed (JupyterLab's dependencies install it), about 2 s of CPU in every
    process. Notebook files have no IRI-formatted field, so the grader's processes go without."""
    sys.modules.setdefault("rfc3987_syntax", None)  # its import fails; jsonschema skips it


def run(incoming, outgoing, timeout: float, work: Path = WORK,
        kernel_waits=KERNEL_START_WAITS) -> int:
    skip_iri_parser()
    import nbformat
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    start = read_frame(incoming, 256 * 2**20)
    if start is None or not isinstance(start.get("notebook"), dict):
        return 3
    _prepare_home(work)
    folder = work / "run"
    folder.mkdir(exist_ok=True)
    notebook = nbformat.from_dict(start["notebook"])
    client = _channel_client(NotebookClient)(
        notebook, timeout=timeout, allow_errors=True, kernel_name="python3",
        interrupt_on_timeout=True, record_timing=False,
        shutdown_kernel="immediate",  # a graceful stop costs seconds
        resources={"metadata": {"path": str(folder)}})

    def setup_cell(source: str) -> None:
        # nbclient writes an executed cell back at its index: the grader's own cells run at
        # the end of the notebook for a moment, not in a student's cell's place
        cell = nbformat.v4.new_code_cell(source)
        notebook.cells.append(cell)
        try:
            client.execute_cell(cell, len(notebook.cells) - 1, store_history=False)
        finally:
            notebook.cells.pop()
            client.channel_outputs.clear()
        write_frame(outgoing, {"type": "setup", "ok": not _error(cell.outputs)[0],
                               "error": " ".join(_error(cell.outputs))[:2000]})

    async def run_bounded(cell, index: int) -> None:
        # a cell still running STUCK_GRACE seconds past its limit and interrupt: the kernel
        # answers nothing any more (one that raised before replying, or died unseen), and
        # nbclient would wait for it forever
        await asyncio.wait_for(client.async_execute_cell(cell, index),
                               timeout + min(STUCK_GRACE, timeout))

    def failed_start(seconds: float, error: str) -> None:
        write_frame(outgoing, {"type": "kernel", "ok": False, "seconds": round(seconds, 1),
                               "error": error[:300]})

    bounded = run_sync(run_bounded)
    try:
        start_kernel(client, kernel_waits, failed_start)
    except RuntimeError:
        _finish(outgoing, notebook)  # no cell ran: the grader says the kernel never started
        return 0
    write_frame(outgoing, {"type": "kernel", "ok": True})
    with client.setup_kernel():  # the kernel started above: this stops it at the end
        setup_cell(TRIPWIRE_SETUP)
        for index, cell in enumerate(list(notebook.cells)):
            if cell.cell_type != "code":
                continue
            write_frame(outgoing, {"type": "cell", "id": cell.get("id"), "index": index})
            answer = read_frame(incoming, 2**16)
            if answer is None:
                break
            if answer.get("key"):
                setup_cell(KEY_SETUP.format(exercise=str(answer.get("exercise")),
                                            key=str(answer["key"])))
            started = time.monotonic()
            entry = {"id": cell.get("id"), "status": "ok", "ename": "", "evalue": "",
                     "dropped": 0}
            client.channel_outputs.clear()
            try:
                bounded(cell, index)
            except CellTimeoutError:
                entry["status"] = "timeout"
            except DeadKernelError:
                entry["status"] = "kernel died"
            except asyncio.TimeoutError:
                entry["status"] = "stuck"
            entry["seconds"] = round(time.monotonic() - started, 2)
            outputs, records, hits, hints = _take_channel_outputs(
                [*client.channel_outputs, *cell.get("outputs", [])])
            if not answer.get("grading"):  # the grader takes no record or hit from this cell
                records, hits = [], []
            for record in records[:2]:  # a second one is the grader's to flag
                write_frame(outgoing, {"type": "record", "cell": cell.get("id"),
                                       "record": record})
            for hit in hits[:TRIPWIRES_PER_CELL]:
                write_frame(outgoing, {"type": "tripwire", "cell": cell.get("id"),
                                       "hit": hit})
            for note in hints[:HINTS_PER_CELL]:
                write_frame(outgoing, {"type": "hint", "cell": cell.get("id"), "hint": note})
            cell.outputs, entry["dropped"] = _cap(outputs)
            entry["ename"], entry["evalue"] = _error(cell.outputs)
            if entry["status"] == "ok" and entry["ename"]:
                entry["status"] = "timeout" if entry["seconds"] >= timeout and \
                    entry["ename"] == "KeyboardInterrupt" else "error"
            write_frame(outgoing, {"type": "ran", "entry": entry})
            if entry["status"] == "stuck":  # nbclient cannot be trusted to let go of it
                _stop_kernel(client)
                _finish(outgoing, notebook)
                os._exit(0)
            if entry["status"] == "kernel died":
                break
    _finish(outgoing, notebook)
    return 0


def _finish(outgoing, notebook) -> None:
    import nbformat

    write_frame(outgoing, {"type": "executed", "notebook": nbformat.writes(notebook)})
    write_frame(outgoing, {"type": "done"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashcourse.grader.inside")
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--work", type=Path, default=WORK,
                        help="the work folder (the sandbox's /grading; another without one)")
    args = parser.parse_args(argv)
    incoming, outgoing = _private_channel()
    try:
        return run(incoming, outgoing, args.timeout, args.work)
    except BrokenPipeError:
        return 4


if __name__ == "__main__":
    sys.exit(main())
