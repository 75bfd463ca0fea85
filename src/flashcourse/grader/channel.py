"""The grader's end of the channel to one sandbox (grader side; `inside.py` is the other end).

The grader sends the notebook to run, then answers the runner before each cell: for the
grading cell of an exercise, the key of that exercise's inputs (derived from the grader's own
secret, different for every submission and exercise, never known to the sandbox before that
cell). It keeps, for each exercise, only the record that exercise's own grading cell produced
while it ran, once; a record from any other cell, a second one, one for another exercise, or
anything after the run's end is not taken, and the odd ones are flagged. Every message is read
as untrusted data, within size limits. A hint note (`fc.hint` showed a level, in any cell) only
adds the level to what the reports say was opened: it carries no record and no points.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from ..checks import recording
from .inside import FrameError, read_frame, write_frame

FRAME_LIMIT = recording.MAX_RECORD_BYTES + 2**20  # a record, base64 and JSON included
EXECUTED_LIMIT = 64 * 2**20  # largest executed notebook kept for the reports
# A frame may hold one JSON object or array per this many bytes (beyond inside.MIN_CONTAINERS):
# an executed notebook has one per 100 bytes or more, a record almost none.
BYTES_PER_CONTAINER = 32
MAX_TRIPWIRES = 200  # hits kept per submission
MAX_HINT_LEVEL = 9  # a note of a higher level is no hint of the course's


def exercise_key(secret: bytes, label: str, exercise_id: str) -> str:
    """The key of one exercise's inputs for one submission."""
    message = f"{label}\0{exercise_id}".encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


@dataclass
class Conversation:
    """What one sandbox's run told the grader."""
    notebook: dict
    grading_cells: dict[str, str]  # grading cell id -> exercise id
    keys: dict[str, str]  # exercise id -> key issued for its cases
    order: list[str] = field(default_factory=list)  # cells in the order they started
    records: dict[str, dict] = field(default_factory=dict)  # exercise id -> its record
    hits: dict[str, list[str]] = field(default_factory=dict)  # exercise id -> references hit
    hints: dict[str, set[int]] = field(default_factory=dict)  # exercise id -> levels shown
    account: list[dict] = field(default_factory=list)  # the runner's entry of each cell
    running: str | None = None  # the cell that had started and not ended
    executed: bytes | None = None  # the executed notebook
    executed_problem: str = ""  # why there is no executed notebook
    flags: list[str] = field(default_factory=list)  # odd messages: tampering to report
    notes: list[str] = field(default_factory=list)
    finished: bool = False  # the runner reached the end and said so
    kernel_started: bool = False  # the runner said the notebook's kernel answered
    failed_starts: list[str] = field(default_factory=list)  # each failed try at starting it
    # each of the grader's own cells that failed in the kernel: (had a notebook cell started
    # yet, the error); one that failed before any did is the grading machine's fault
    setup_failures: list[tuple[bool, str]] = field(default_factory=list)
    issued: set[str] = field(default_factory=set)

    def talk(self, to_sandbox, from_sandbox) -> None:
        """Conduct the whole run; returns when the sandbox's end of the channel closes."""
        try:
            write_frame(to_sandbox, {"notebook": self.notebook})
        except (BrokenPipeError, OSError):
            return
        while True:
            try:
                message = read_frame(from_sandbox, FRAME_LIMIT, BYTES_PER_CONTAINER)
            except FrameError as err:
                self.notes.append(f"the sandbox's channel broke off: {err}")
                return
            except OSError:
                return
            if message is None:
                return
            if self.finished:
                self.flags.append("the sandbox sent more after the end of its run")
                return
            reply = self._handle(message)
            if reply is not None:
                try:
                    write_frame(to_sandbox, reply)
                except (BrokenPipeError, OSError):
                    return

    def _handle(self, message: dict) -> dict | None:
        kind = message.get("type")
        if kind == "cell":
            cell_id = message.get("id")
            cell_id = cell_id if isinstance(cell_id, str) else ""
            self.order.append(cell_id)
            self.running = cell_id
            exercise = self.grading_cells.get(cell_id)
            if exercise is None:
                return {"key": None, "grading": False}  # its records and hits are not sent
            if exercise in self.issued:
                return {"key": None, "grading": True}
            self.issued.add(exercise)
            return {"key": self.keys[exercise], "exercise": exercise, "grading": True}
        if kind == "record":
            self._take_record(message.get("cell"), message.get("record"))
        elif kind == "tripwire":
            self._take_hit(message.get("cell"), message.get("hit"))
        elif kind == "hint":
            self._take_hint(message.get("hint"))
        elif kind == "ran":
            entry = message.get("entry")
            if isinstance(entry, dict) and len(self.account) < 10_000:
                self.account.append(entry)
            self.running = None
        elif kind == "kernel":
            if message.get("ok") is True:
                self.kernel_started = True
            elif len(self.failed_starts) < 10:
                seconds = message.get("seconds")
                seconds = float(seconds) if isinstance(seconds, (int, float)) else 0.0
                self.failed_starts.append(
                    f"after {seconds:.0f} s: {str(message.get('error', ''))[:200]}")
        elif kind == "setup":
            if message.get("ok") is not True and len(self.setup_failures) < 100:
                self.setup_failures.append((bool(self.order),
                                            str(message.get("error", ""))[:300]))
        elif kind == "executed":
            text = message.get("notebook")
            data = text.encode("utf-8", "replace") if isinstance(text, str) else None
            if data is not None and len(data) <= EXECUTED_LIMIT:
                self.executed = data
            elif data is not None:
                self.executed_problem = (f"it is {len(data) / 2**20:.1f} MiB (limit "
                                         f"{EXECUTED_LIMIT / 2**20:.0f} MiB)")
        elif kind in ("too large", "too complex"):
            size = message.get("bytes", 0)
            self.executed_problem = self.executed_problem or f"a message was {kind}"
            over = "over the limit" if kind == "too large" else \
                "with more JSON objects than its size allows"
            self.notes.append(f"the sandbox sent a message of {int(size) / 2**20:.0f} MiB, {over}"
                              "; it was not read (a record or the executed notebook)")
        elif kind == "done":
            self.finished = True
        return None

    def _take_record(self, cell, record) -> None:
        exercise = self.grading_cells.get(cell) if isinstance(cell, str) else None
        if exercise is None:
            return  # a check the student ran in a cell of their own: not the grading cell
        if not isinstance(record, dict) or record.get("exercise") != exercise:
            self.flags.append(f"{exercise}: its grading cell produced a record that is not "
                              "this exercise's")
            return
        if exercise in self.records:
            self.flags.append(f"{exercise}: its grading cell produced more than one record")
            self.records[exercise] = {"duplicate": True}
            return
        self.records[exercise] = record

    def _take_hit(self, cell, hit) -> None:
        exercise = self.grading_cells.get(cell) if isinstance(cell, str) else None
        if exercise is None or not isinstance(hit, dict):
            return
        hits = self.hits.setdefault(exercise, [])
        if sum(len(h) for h in self.hits.values()) < MAX_TRIPWIRES:
            hits.append(str(hit.get("name", "?"))[:120])

    def _take_hint(self, note) -> None:
        """A hint level shown: kept when it names one of the lesson's graded exercises and a
        level number, whichever cell showed it."""
        if not isinstance(note, dict):
            return
        exercise, level = note.get("exercise"), note.get("level")
        if exercise in self.grading_cells.values() and type(level) is int and \
                1 <= level <= MAX_HINT_LEVEL:
            self.hints.setdefault(exercise, set()).add(level)

    def state(self) -> dict:
        """The runner's account, in the form `score.cell_runs` reads."""
        return {"cells": list(self.account), "running": self.running}
