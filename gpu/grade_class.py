"""Grade a small class with `python -m flashcourse grade`, sandboxed, and check every verdict.

The class: the solution of each lesson named (`--lessons`, default 02,04,05,06,08), a known-wrong
lesson 1, and lesson 1's second-round attacks that matter most on a GPU: records forged on the
public inputs, and SDPA reached by a name built at run time. Each right one must pass 10/10,
the wrong one fail on its item, the attacks get nothing for their forged or disguised items.
Writes `OUT/grade-class.csv` (submission, expected, status, points, seconds) and the reports
under `OUT/grade/`. On a GPU the kernels run compiled; on a CPU, in the interpreter.

    python gpu/grade_class.py --out DIR [--lessons 02,05] [--jobs 4] [--timeout 300]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from flashcourse.grader import samples  # noqa: E402

ATTACKS = ("forged-records-answered", "getattr-sdpa")


def build(folder: Path, lessons: list[str]) -> dict[str, str]:
    """Write the class; submission folder -> what it must get ("pass", "fail", "refused")."""
    import attacks

    expected = {}
    slugs = {p.stem[:2]: p.stem for p in (ROOT / "exercises").glob("*.ipynb")}
    for number in lessons:
        name = f"right-{number}"
        samples.write(samples.filled_notebook(ROOT, slug=slugs[number], student=name),
                      folder / name / f"{slugs[number]}.ipynb")
        expected[name] = "pass"
    samples.write(samples.filled_notebook(ROOT, mistakes=("no-rescale",)),
                  folder / "wrong-01" / "01-gpu-flash.ipynb")
    expected["wrong-01"] = "fail"
    attacks.build_round_two(ROOT, folder, names=ATTACKS)
    expected.update({name: "refused" for name in ATTACKS})
    return expected


def verdict(sub: dict, wanted: str) -> bool:
    if wanted == "pass":
        return sub["status"] == "PASS" and sub["earned"] == sub["total"]
    if wanted == "fail":
        return sub["status"] == "FAIL" and sub["earned"] < sub["pass_line"]
    return sub["status"] == "TAMPERED" and sub["earned"] < sub["pass_line"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lessons", default="02,04,05,06,08")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fcclass-", dir="/var/tmp") as tmp:
        folder = Path(tmp) / "submissions"
        expected = build(folder, args.lessons.split(","))
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "flashcourse", "grade", str(folder),
                               "--out", str(args.out / "grade"), "--jobs", str(args.jobs),
                               "--timeout", f"{args.timeout:g}"], cwd=ROOT, check=False)
        seconds = time.monotonic() - started
    report = json.loads((args.out / "grade" / "results.json").read_text())
    rows, wrong = [], 0
    for sub in report["submissions"]:
        name = sub["label"].split("/")[0]
        ok = verdict(sub, expected.get(name, "?"))
        wrong += not ok
        rows.append({"submission": sub["label"], "expected": expected.get(name, "?"),
                     "status": sub["status"], "points": sub["earned"],
                     "seconds": sub.get("seconds", ""), "verdict_ok": ok})
        print(f"{'ok ' if ok else 'BAD'} {sub['label']}: {sub['status']} {sub['earned']:g}/"
              f"{sub['total']:g} (expected {expected.get(name, '?')})")
        if not ok:
            print("   ", sub.get("problems"), sub.get("tampering"),
                  [(i["id"], i["status"], i["message"][:200]) for i in sub["exercises"]
                   if i["status"] != "pass"])
    with (args.out / "grade-class.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows) - wrong} of {len(rows)} verdicts as expected; the class took "
          f"{seconds:.0f} s (grade exit status {done.returncode})")
    return 0 if wrong == 0 and len(rows) == len(expected) else 1


if __name__ == "__main__":
    sys.exit(main())
