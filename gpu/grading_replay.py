"""Run every solution notebook the way the grader's sandbox does, then replay its records.

Each notebook runs in a Jupyter kernel with FLASHCOURSE_GRADING=1, FLASHCOURSE_SKIP_BENCH=1 and
a record folder of its own (FLASHCOURSE_RECORD_DIR), so every `check(...)` writes a record.
A fresh Python process, which has run none of the notebooks' code, then calls
`registry.replay` on each record, as the grader does. The solutions are right answers: every
exercise of the lesson must have a record and every replay must pass. Prints a table and exits
non-zero on a failure.

On a CUDA machine the kernels run compiled; elsewhere in Triton's interpreter.

    python gpu/grading_replay.py [--keep DIR] [--csv FILE] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODE = {"FLASHCOURSE_GRADING": "1", "FLASHCOURSE_SKIP_BENCH": "1"}


def child_env(records: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg", **MODE)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("FLASHCOURSE_RECORD_DIR", None)
    if records is not None:
        env["FLASHCOURSE_RECORD_DIR"] = str(records)
    return env


def this_python_kernel():
    """A kernel manager that starts this interpreter's ipykernel, whatever kernel specs the
    machine holds (as `pytest --nbval-current-env` does)."""
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())

    return KernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def execute(notebook: Path, records: Path, timeout: int) -> tuple[float, list[str]]:
    """Run the notebook with a record folder; (seconds, the first line of each error)."""
    import nbformat
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT / "src"))
    from flashcourse.grader.inside import KERNEL_START_WAITS

    nb = nbformat.read(notebook, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, km=this_python_kernel(), timeout=timeout, allow_errors=True,
                   startup_timeout=max(KERNEL_START_WAITS),
                   resources={"metadata": {"path": str(notebook.parent)}}
                   ).execute(env=child_env(records))
    seconds = time.perf_counter() - start
    errors = [f"{out.get('ename')}: {str(out.get('evalue', '')).splitlines()[:1]}"
              for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    return seconds, errors


def lesson_of(notebook: Path) -> str | None:
    found = re.search(r"check\(\s*\\?[\"']([\w-]+)/", notebook.read_text(encoding="utf-8"))
    return found.group(1) if found else None


def replay_folder(folder: Path, lesson: str | None) -> list[dict]:
    """In this (fresh) process: replay each record of `folder` as the grader does."""
    import flashcourse as fc
    from flashcourse.checks import recording, registry

    fc.setup()
    registry._load_checks()
    rows = []
    expected = [e.id for e in registry.LESSONS[lesson].exercises] if lesson else []
    seen = set()
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        exercise = record.get("exercise", path.stem)
        seen.add(exercise)
        start = time.perf_counter()
        try:
            if path.stat().st_size > recording.MAX_RECORD_BYTES:  # the grader reads none of it
                raise recording.RecordMismatch(f"{path.stat().st_size} bytes, over the "
                                               f"grader's {recording.MAX_RECORD_BYTES}")
            summary = registry.replay(exercise, record)
            status, message = "PASS", summary
        except recording.RecordMismatch as err:
            status, message = "MISMATCH", str(err)
        except BaseException as err:  # noqa: BLE001  (any verdict other than a pass)
            status, message = "FAIL", f"{type(err).__name__}: {err}"
        finally:
            registry.VETOES_HIT.pop(exercise, None)
        rows.append({"exercise": exercise, "status": status,
                     "seconds": round(time.perf_counter() - start, 2),
                     "events": len(record.get("events", [])),
                     "bytes": path.stat().st_size, "message": " ".join(message.split())[:300]})
    for exercise in expected:
        if exercise not in seen:
            rows.append({"exercise": exercise, "status": "NO RECORD", "seconds": 0.0,
                         "events": 0, "bytes": 0, "message": "the notebook wrote no record"})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--keep", type=Path, help="write the records here (else a temp folder)")
    parser.add_argument("--csv", type=Path, help="write one row per record here")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)  # the child's side
    parser.add_argument("--lesson", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.replay:
        print(json.dumps(replay_folder(args.replay, args.lesson)))
        return 0

    notebooks = args.notebooks or sorted((ROOT / "solutions").glob("*.ipynb"))
    base = args.keep or Path(tempfile.mkdtemp(prefix="replay-"))
    failed = False
    table = []
    for notebook in notebooks:
        notebook = notebook.resolve()
        records = base / notebook.stem
        records.mkdir(parents=True, exist_ok=True)
        for old in records.glob("*.json"):
            old.unlink()
        try:
            seconds, errors = execute(notebook, records, args.timeout)
        except Exception as err:  # noqa: BLE001  (the kernel did not start or died)
            seconds, errors = 0.0, [f"{type(err).__name__}: {err}"]
        lesson = lesson_of(notebook)
        start = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--replay", str(records)]
            + (["--lesson", lesson] if lesson else []),
            env=child_env(), capture_output=True, text=True, check=False)
        replay_s = time.perf_counter() - start
        try:
            rows = json.loads(child.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            rows = [{"exercise": "(replay process)", "status": "ERROR", "seconds": 0.0,
                     "events": 0, "bytes": 0,
                     "message": " ".join(child.stderr.split())[-300:]}]
        passed = sum(r["status"] == "PASS" for r in rows)
        bad = [r for r in rows if r["status"] != "PASS"]
        failed |= bool(bad or errors)
        print(f"{notebook.name}: ran {seconds:.1f} s, {len(errors)} error cell(s); "
              f"replayed {len(rows)} record(s) in {replay_s:.1f} s: {passed} pass, "
              f"{len(bad)} not", flush=True)
        for error in errors:
            print(f"   error cell: {error[:300]}")
        for row in rows:
            print(f"   {row['status']:9} {row['exercise']:34} {row['events']:4d} events "
                  f"{row['seconds']:6.2f} s  {row['message'][:120] if row in bad else ''}")
            table.append({"notebook": notebook.stem, "run_s": round(seconds, 1),
                          "error_cells": len(errors), **row})
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]) if table else ["notebook"])
            writer.writeheader()
            writer.writerows(table)
    total = sum(r["status"] == "PASS" for r in table)
    print(f"{total} of {len(table)} replays passed" + ("" if not failed else "; FAILURES above"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
