"""Nsight Compute summary of the course kernel, fp16, N = 4096.

Run from the repository root on a CUDA machine with ncu:

    python gpu/ncu_summary.py [OUT_FILE] [--modes fwd,bwd] [--d 64,128] [--causal both]
                              [--stalls]

fwd profiles the forward kernel, bwd the backward's dK/dV and dQ kernels (one launch each);
--stalls adds issue-slot use and the warp stall reasons (report.NCU_STALL_METRICS).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from flashcourse import bench  # noqa: E402
from flashcourse.bench import report  # noqa: E402

CAUSAL = {"both": (False, True), "no": (False,), "yes": (True,)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--modes", default="fwd")
    parser.add_argument("--d", default="64,128")
    parser.add_argument("--causal", choices=list(CAUSAL), default="both")
    parser.add_argument("--stalls", action="store_true")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu/ncu_summary.py profiles a kernel on a CUDA GPU; there is none here.")
        return 0
    parts = [str(bench.environment())]
    for mode in args.modes.split(","):
        for d in (int(x) for x in args.d.split(",")):
            for causal in CAUSAL[args.causal]:
                name = "forward" if mode == "fwd" else "backward (dK/dV, dQ)"
                parts.append(f"== {name} fp16 d={d} N=4096 {'causal' if causal else 'full'}")
                parts.append(report.ncu_profile(mode, d, 4096, causal, stalls=args.stalls))
                print(parts[-2], parts[-1], sep="\n", flush=True)
    if args.out:
        args.out.write_text("\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
