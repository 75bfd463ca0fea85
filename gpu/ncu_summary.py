"""Nsight Compute summary of the course kernel's default forward, d = 64 and 128, N = 4096.

Run from the repository root on a CUDA machine with ncu:  python gpu/ncu_summary.py [OUT_FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from flashcourse import bench  # noqa: E402
from flashcourse.bench import report  # noqa: E402


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu/ncu_summary.py profiles a kernel on a CUDA GPU; there is none here.")
        return 0
    parts = [str(bench.environment())]
    for d in (64, 128):
        for causal in (False, True):
            parts.append(f"== forward fp16 d={d} N=4096 {'causal' if causal else 'full'}")
            parts.append(report.ncu_forward(d=d, causal=causal))
    text = "\n".join(parts)
    print(text)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
