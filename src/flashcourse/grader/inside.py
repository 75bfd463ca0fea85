"""Runs INSIDE the sandbox, beside the student's code: execute the run notebook cell by cell.

`python -m flashcourse.grader.inside RUN.ipynb OUT_DIR --timeout S` starts one Jupyter kernel,
runs every cell (an error does not stop the run; a cell past S seconds is interrupted), keeps at
most OUTPUT_LIMIT characters of each cell's output, and writes OUT_DIR/cells.json (one entry per
cell: status, error name and message, seconds; rewritten after every cell, so a run killed at the
wall-clock limit still says where it was) and OUT_DIR/executed.ipynb.

Everything it writes is for the instructor's reports only: the student's code runs in the same
sandbox and could rewrite it. Points come from the grader replaying the checks
(`flashcourse.checks.recording`), never from these files. This module imports no part of the
course.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

OUTPUT_LIMIT = 100_000  # characters of output kept per cell
# Seconds a notebook kernel may take to start (nbclient's default is 60): on a loaded machine
# a start can take longer, and that is no fault of the notebook.
KERNEL_STARTUP_TIMEOUT = 600


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


def run(notebook_path: Path, out: Path, timeout: float) -> int:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    notebook = nbformat.read(notebook_path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, allow_errors=True, kernel_name="python3",
                            startup_timeout=KERNEL_STARTUP_TIMEOUT,
                            interrupt_on_timeout=True, record_timing=False,
                            shutdown_kernel="immediate",  # a graceful stop costs seconds
                            resources={"metadata": {"path": str(notebook_path.parent)}})
    cells: list[dict] = []

    def save(running: str | None = None) -> None:
        state = {"cells": cells, "running": running}
        (out / "cells.json").write_text(json.dumps(state), encoding="utf-8")

    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            save(running=cell.get("id"))
            started = time.monotonic()
            entry = {"id": cell.get("id"), "status": "ok", "ename": "", "evalue": "",
                     "dropped": 0}
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError:
                entry["status"] = "timeout"
            except DeadKernelError:
                entry["status"] = "kernel died"
            entry["seconds"] = round(time.monotonic() - started, 2)
            cell.outputs, entry["dropped"] = _cap(list(cell.get("outputs", [])))
            entry["ename"], entry["evalue"] = _error(cell.outputs)
            if entry["status"] == "ok" and entry["ename"]:
                entry["status"] = "timeout" if entry["seconds"] >= timeout and \
                    entry["ename"] == "KeyboardInterrupt" else "error"
            cells.append(entry)
            if entry["status"] == "kernel died":
                break
    save()
    nbformat.write(notebook, out / "executed.ipynb")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashcourse.grader.inside")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    return run(args.notebook, args.out, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
