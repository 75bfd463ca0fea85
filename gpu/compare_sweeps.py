"""One table of the course kernel against cuDNN and the flash backend, per Triton version.

    python gpu/compare_sweeps.py DIR [DIR ...] --out assets/results/08-vs-cudnn.csv

Each DIR holds the harness's 08-attention-fwd.csv and 08-attention-fwdbwd.csv (one run on one
Triton version: `python -m flashcourse bench --out DIR`); the table keeps, per case, the three
providers' TFLOP/s, the course kernel's ratios, the spread of repeated timings and the
Triton version and date of the run. No GPU needed: it only reads CSVs.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

COLUMNS = ("date", "gpu", "torch", "triton", "mode", "dtype", "d", "N", "causal", "course",
           "sdpa-cudnn", "sdpa-flash", "course/cudnn", "course/flash", "course spread %",
           "sdpa-cudnn spread %")


def rows_of(folder: Path) -> list[dict]:
    rows = []
    for mode in ("fwd", "fwdbwd"):
        path = folder / f"08-attention-{mode}.csv"
        if not path.is_file():
            raise SystemExit(f"{path}: missing; run the harness with --out {folder} first.")
        with path.open() as handle:
            rows += [{c: row.get(c, "") for c in COLUMNS} for row in csv.DictReader(handle)]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rows = [row for folder in args.folders for row in rows_of(folder)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
