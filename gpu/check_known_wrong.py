"""Run every from-scratch exercise's known-wrong answers through its check, compiled on a GPU,
and see that each gets the diagnosis the test suite asserts in the interpreter.

Run from the repository root:  python gpu/check_known_wrong.py [--out FILE.csv]
The known-wrong answers are the test suite's own tables (tests/), each an edit of the lesson's
solution cell with the message its check must give. Without a GPU, or with
`FLASHCOURSE_INTERPRET=1`, it runs the same sets in the interpreter (as the suite does), so the
two tables can be compared row by row. Writes one row per answer: exercise, mistake, runtime,
verdict, the message's line that names the mistake. Exits 1 when any verdict is not "diagnosed".
"""

from __future__ import annotations

import argparse
import csv
import importlib
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

from flashcourse import runtime  # noqa: E402

RUNTIME = runtime.setup()  # before triton is imported: the interpreter or the GPU

import triton  # noqa: E402

from flashcourse import check  # noqa: E402
from flashcourse.checks import registry  # noqa: E402
from flashcourse.checks.errors import CourseInputError, WrongAnswer  # noqa: E402

LESSONS = ROOT / "lessons"


def _roofline():
    tests = importlib.import_module("test_roofline")
    lesson = LESSONS / "02-memory-roofline.qmd"
    exercise = "roofline/axpy-kernel"
    return exercise, {
        mistake: (lambda edits=edits: tests.answer(lesson, *tests.CELLS[exercise], *edits),
                  message)
        for mistake, (edits, message) in tests.WRONG[exercise].items()}


def _softmax():
    tests = importlib.import_module("test_softmax")
    exercise = "softmax/masked-softmax"
    return exercise, {
        mistake: (lambda edits=edits: tests.answer(ROOT, exercise, **edits), message)
        for (exercise_id, mistake), (edits, message) in tests.WRONG.items()
        if exercise_id == exercise}


def _flash_scratch():
    tests = importlib.import_module("test_flash_forward")
    return tests.SCRATCH_ID, {
        mistake: (lambda edits=edits: tests.scratch_kernel(*edits), message)
        for mistake, (edits, message) in tests.WRONG_SCRATCH.items()}


def _table_sets(module_name: str) -> list:
    """A lesson's tables of its own (tests/wrong_kernels_NN.py): TABLES = {exercise id:
    {mistake: (edits, message)}} and answer(edits, exercise_id)."""
    table = importlib.import_module(module_name)

    def loader(exercise):
        return lambda: (exercise, {
            mistake: (lambda edits=edits: table.answer(edits, exercise), message)
            for mistake, (edits, message) in table.TABLES[exercise].items()})
    return [loader(exercise) for exercise in table.TABLES]


SETS = [_roofline, _softmax, _flash_scratch, *_table_sets("wrong_kernels_09"),
        *_table_sets("wrong_kernels_11")]


def _id_of(load) -> str:
    return load()[0]


def first_line_naming(text: str, pattern: str) -> str:
    for line in text.splitlines():
        if re.search(pattern, line):
            return line.strip()
    return text.strip().splitlines()[-1] if text.strip() else ""


def run_set(load, where: str) -> list[dict]:
    exercise, wrong = load()
    rows = []
    for mistake, (make, message) in wrong.items():
        pattern = re.escape(message) if not message.startswith("re:") else message[3:]
        registry.RESULTS.pop(exercise, None)
        try:
            check(exercise, make())
        except (WrongAnswer, CourseInputError) as err:
            text = str(err)
            verdict = "diagnosed" if re.search(pattern, text) else "other message"
            line = first_line_naming(text, pattern)
        except Exception as err:  # noqa: BLE001 (a crash is a finding, reported as such)
            verdict, line = "crashed", f"{type(err).__name__}: {err}"[:300]
        else:
            verdict, line = "accepted", ""
        rows.append({"exercise": exercise, "mistake": mistake, "runtime": where,
                     "verdict": verdict, "message": line, "expected": message})
        print(f"{verdict:13s} {exercise}: {mistake}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the table (default: assets/results/"
                        "known-wrong-gpu.csv, or known-wrong-interpreter.csv without a GPU)")
    parser.add_argument("--only", default="", help="comma-separated exercise ids: run just "
                        "their sets (several processes can then share the work)")
    parser.add_argument("--list", action="store_true", help="print the exercise ids and stop")
    args = parser.parse_args()
    sets = {exercise: load for exercise, load in ((_id_of(load), load) for load in SETS)}
    if args.list:
        print("\n".join(sets))
        return 0
    wanted = [name for name in args.only.split(",") if name] or list(sets)
    unknown = sorted(set(wanted) - set(sets))
    if unknown:
        print(f"no known-wrong set for {', '.join(unknown)}; the sets: {', '.join(sets)}")
        return 2
    rt = RUNTIME
    kind = "interpreter" if rt.interpreter else "gpu"
    args.out = args.out or ROOT / "assets" / "results" / f"known-wrong-{kind}.csv"
    where = ("interpreter" if rt.interpreter else
             f"{torch.cuda.get_device_name()}, Triton {triton.__version__}, torch "
             f"{torch.__version__}")
    os.environ.pop(registry.GRADING_MODE_ENV, None)  # the suite's visible cases
    rows = [row for name in wanted for row in run_set(sets[name], where)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    wrong = [row for row in rows if row["verdict"] != "diagnosed"]
    print(f"{len(rows) - len(wrong)} of {len(rows)} known-wrong answers diagnosed as in the "
          f"suite ({where}); table: {args.out}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
