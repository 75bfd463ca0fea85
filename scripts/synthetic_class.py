"""A synthetic class of real lesson 1 notebooks with planted mistakes, to grade a whole class
for real (sandboxed) and see its analytics: each notebook is the exercise filled with the
solution (samples.filled_notebook, answered with the student's own numbers), then one known
mistake planted, or none.

    python scripts/synthetic_class.py --out DIR [--grade] [--jobs 2] [--shards N] [--secret S]

writes DIR/submissions/studentNN/01-gpu-flash.ipynb and DIR/planted.json (who got which
mistake). With --grade it grades them (./course grade ... --out DIR/reports, or in N shards
and a merge with --shards N), prints the time per submission and checks that progress.html's
analytics found every planted mistake on exactly the students it was planted on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from flashcourse.checks import LESSON_MODULES
from flashcourse.grader import analytics, samples, submission

ROOT = Path(__file__).resolve().parents[1]
KERNEL_CELL = "exercise-flash-attention"
# (planted mistake, how many students, the item it shows on, the finding it must produce)
PLAN = [
    ("no-rescale", 6, "flash-attention", "not rescaled when the running max grew"),
    ("no-final-divide", 3, "flash-attention", "never divided by the running sum"),
    ("q1-wrong", 4, "q1-memory", "nxn_hbm_passes"),
    ("q2-wrong", 3, "q2-coalescing", "sectors_contiguous"),
    ("veto", 3, "misconceptions", "flash_reduces_flops"),
    ("blank", 2, "flash-attention", None),  # an outcome, not a finding: blank
    ("right", 15, None, None),
]


def lesson() -> str:
    return next(iter(LESSON_MODULES))  # lesson 1, whose known mistakes samples.py plants


def make_class(folder: Path) -> dict[str, list[str]]:
    """Write the notebooks; {planted mistake: its labels}."""
    planted: dict[str, list[str]] = {}
    number = 0
    for mistake, count, _, _ in PLAN:
        for _ in range(count):
            student = f"student{number:02d}"
            number += 1
            nb = samples.filled_notebook(
                ROOT, lesson(), student=student,
                mistakes=(mistake,) if mistake in samples.LESSON1_MISTAKES else (),
                unfilled=(KERNEL_CELL,) if mistake == "blank" else ())
            label = f"{student}/{lesson()}.ipynb"
            samples.write(nb, folder / label)
            planted.setdefault(mistake, []).append(label)
    return planted


def check(reports: Path, planted: dict[str, list[str]]) -> list[str]:
    """Lines saying where the analytics disagree with what was planted (none: all found)."""
    data = json.loads((reports / "results.json").read_text(encoding="utf-8"))
    subs = [submission.from_dict(item) for item in data["submissions"]]
    (stats,) = analytics.class_stats(subs)
    ident = lesson().split("-", 1)[1]
    wrong = []
    for mistake, _, item_name, finding in PLAN:
        if item_name is None:
            continue
        item = stats.items[f"{ident}/{item_name}"]
        found = item.outcomes["blank"] if finding is None else next(
            (labels for what, labels in {**item.mistakes, **item.parts}.items()
             if finding in what), [])
        if sorted(found) != sorted(planted[mistake]):
            wrong.append(f"{mistake}: planted on {len(planted[mistake])}, found on "
                         f"{len(found)}: {sorted(set(found) ^ set(planted[mistake]))[:5]}")
    passed = sum(sub.passed for sub in subs)
    print(f"analytics: {stats.count} submissions, {passed} passed; every planted mistake "
          + ("found on exactly its students" if not wrong else "NOT found as planted"))
    return wrong


def grade(folder: Path, out: Path, jobs: int, shards: int, secret: str | None) -> float:
    course = [sys.executable, "-m", "flashcourse", "grade"]
    given = [str(folder), "--jobs", str(jobs), *(["--secret", secret] if secret else [])]
    started = time.monotonic()
    if shards <= 1:
        runs = [[*course, *given, "--out", str(out)]]
    else:
        runs = [[*course, *given, "--shard", f"{k}/{shards}", "--out", f"{out}-part-{k}"]
                for k in range(1, shards + 1)]
    for argv in runs:  # one after the other: on one machine the parts share its cores
        if subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL).returncode > 1:
            sys.exit(f"grading failed: {' '.join(argv)}")
    if shards > 1:
        merge = [*course, "merge", *(f"{out}-part-{k}" for k in range(1, shards + 1)),
                 "--out", str(out)]
        if subprocess.run(merge, cwd=ROOT).returncode > 1:
            sys.exit("the merge failed")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grade", action="store_true", help="grade them and check")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--secret", default=None,
                        help="grade's --secret: the same inputs in every run (to compare runs)")
    args = parser.parse_args()
    folder = args.out / "submissions"
    planted = make_class(folder)
    (args.out / "planted.json").write_text(json.dumps(planted, indent=1), encoding="utf-8")
    count = sum(len(labels) for labels in planted.values())
    print(f"{count} submissions of {lesson()} in {folder}: "
          + ", ".join(f"{mistake} {len(labels)}" for mistake, labels in planted.items()))
    if not args.grade:
        return
    seconds = grade(folder, args.out / "reports", args.jobs, args.shards, args.secret)
    print(f"graded in {seconds:.1f} s with --jobs {args.jobs} on {os.cpu_count()} CPU cores"
          f"{f' in {args.shards} shards' if args.shards > 1 else ''}: "
          f"{seconds / count:.2f} s per submission, {count / seconds * 60:.1f} per minute")
    wrong = check(args.out / "reports", planted)
    for line in wrong:
        print(f"  MISMATCH {line}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
