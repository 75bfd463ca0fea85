"""Measure the two ceilings of lesson 2's roofline on a CUDA GPU: a bf16 GEMM's TFLOP/s and a
device-to-device copy's bandwidth, each the median of repeated timings with the spread.

Run from the repository root:  python gpu/measure_ceilings.py [--out assets/results]
Writes 02-ceilings.csv; `hardware.H200_MEASURED_GEMM_BF16_TFLOPS` and `H200_MEASURED_COPY_TBS`
quote it, and tests/test_results_table.py fails when they drift apart.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from flashcourse import bench  # noqa: E402
from flashcourse.bench import harness  # noqa: E402

REPEATS = 10
GEMM_SIZES = (4096, 8192)
COPY_BYTES = 2 * 1024**3  # far beyond the L2


def _times_ms(fn) -> list[float]:
    return [bench.median_ms(fn) for _ in range(REPEATS)]


def _row(kind: str, shape: str, per_ms: float, unit: str, times: list[float]) -> dict:
    median = statistics.median(times)
    return {"ceiling": kind, "shape": shape, "median ms": median, "rate": per_ms / median,
            "unit": unit, "spread %": harness.spread_pct(times),
            "repeats": len(times)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "results")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: this script measures a GPU's ceilings")
        return 0
    rows = []
    for n in GEMM_SIZES:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        times = _times_ms(lambda a=a, b=b: a @ b)
        rows.append(_row("GEMM bf16 (torch.matmul, cuBLAS)", f"{n}^3", 2 * n**3 / 1e9,
                         "TFLOP/s", times))
    source = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    times = _times_ms(lambda: target.copy_(source))
    # bytes read plus bytes written, as lesson 2 counts a copy
    rows.append(_row("device-to-device copy", "2 GiB", 2 * COPY_BYTES / 1e9, "TB/s", times))
    for row in rows:
        print(row)
    bench.write_csv(args.out / "02-ceilings.csv", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
