"""Grading throughput: make N submissions of lesson 1 (blanks filled with right or known-wrong
answers), grade them serially (--jobs 1: one sandbox at a time) and in parallel (--jobs J
sandboxes at once), print submissions/minute.

    python scripts/grading_throughput.py [--count 50] [--jobs 2] [--timeout 60]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from flashcourse.grader import cli, collect, samples

ROOT = Path(__file__).resolve().parents[1]
# one in three submissions is wrong, cycling through the known mistakes
WRONG = [("no-rescale",), ("q1-wrong", "q2-wrong"), ("veto",), ("no-final-divide", "q1-wrong")]


def make_submissions(folder: Path, count: int) -> int:
    """Write `count` notebooks; return how many should pass."""
    right = 0
    for number in range(count):
        mistakes = () if number % 3 else WRONG[(number // 3) % len(WRONG)]
        right += not mistakes
        nb = samples.filled_notebook(ROOT, mistakes=mistakes)
        samples.write(nb, folder / f"student{number:03d}" / "01-gpu-flash.ipynb")
    return right


def measure(folder: Path, jobs: int, timeout: float) -> tuple[float, int]:
    started = time.monotonic()
    found, missing = collect.collect([folder])
    subs = cli.grade(found, missing, out=None, jobs=jobs, timeout=timeout, root=ROOT)
    seconds = time.monotonic() - started
    for sub in subs:  # a right one that failed, or a wrong one that passed: say why
        right = int(sub.label[len("student"):][:3]) % 3 != 0
        if sub.passed != right:
            reasons = [f"{i.id}: {i.status} {i.message[:200]}" for i in sub.exercises
                       if i.status != "pass"] + sub.problems + sub.tampering + sub.vetoes
            print(f"  UNEXPECTED {sub.label}: {sub.status}; " + " | ".join(reasons)[:600])
    return seconds, sum(s.passed for s in subs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--skip-serial", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "submissions"
        expected = make_submissions(folder, args.count)
        print(f"{args.count} submissions of lesson 1 ({expected} right, "
              f"{args.count - expected} wrong), {os.cpu_count()} CPU cores")
        runs = [] if args.skip_serial else [1]
        for jobs in [*runs, args.jobs]:
            seconds, passed = measure(folder, jobs, args.timeout)
            print(f"jobs={jobs}: {passed} passed (expected {expected}), {seconds:.1f} s, "
                  f"{args.count / seconds * 60:.1f} "
                  f"submissions/minute, {seconds / args.count:.2f} s each")


if __name__ == "__main__":
    main()
