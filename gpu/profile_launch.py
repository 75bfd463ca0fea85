"""Where the reference sparse forward's host time goes, function by function (lesson 9).

    python gpu/profile_launch.py [--out assets/results/09-launch-profile-3.9.txt]
    python gpu/profile_launch.py --interpreter   # smoke test on a CPU

cProfile over QUEUED calls of the reference sparse forward on the causal window at N = 8k,
fp16, d = 64, B = 1, H = 16 (the cell whose kernel is shorter than its launch), checked against
float32 attention first and warmed up (compiled) before the profile; the functions with the
most time of their own, then the most time below them. cProfile adds its own cost to every
Python call, so read the shares, not the milliseconds.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "gpu"))

import bench_modern_attention as bma  # noqa: E402

from flashcourse import bench  # noqa: E402

QUEUED = 200
SHOWN = 25


def strip_paths(report: str) -> str:
    """The report with the folders Python imports from left out of its file names: what is
    left names the project's files from its root (src/...) and the packages' own."""
    report = report.replace(str(ROOT) + "/", "")
    folders = {entry.rstrip("/") for entry in sys.path if entry.rstrip("/")}
    for folder in sorted(folders, key=len, reverse=True):
        if not Path(folder).resolve().is_relative_to(ROOT):  # src/... stays named
            report = report.replace(folder + "/", "")
    return re.sub(r"(?:\S*/)?(?:site|dist)-packages/|\S*/lib/python3\.\d+/", "", report)


def main(argv=None) -> int:
    started = bma.bench_script(argv, __doc__, "gpu/profile_launch.py", "profiles launches",
                               "smoke test on a CPU: N = 128, H = 2, d = 32")
    if started is None:
        return 0
    args, b = started
    import torch

    from flashcourse.kernels import modern_attention as ma
    from flashcourse.kernels import sparse_forward as sf

    n, d, heads, window, queued = ((128, 32, 2, 32, 2) if args.interpreter else
                                   (8192, 64, 16, bma.WINDOW, QUEUED))
    (case,) = bma.mask_cases(ma, sf, n, window, ("window",))
    q, k, v = (torch.randn(1, heads, n, d, device=b.device, dtype=torch.float16)
               for _ in range(3))
    config = sf.sparse_reference_config(d, case.left, case.docs)
    plan = sf.sparse_plan(n, d, b.device, case.left, case.right, case.docs,
                          kinds=case.kinds(ma, sf, *config[:2]), config=config)
    row = {"mask": case.name, "dtype": "float16"}
    reference = bma.masked_reference(torch, q, k, v,
                                     torch.from_numpy(case.dense(ma, sf)).to(b.device))
    call = lambda: sf.sparse_forward(q, k, v, plan)[0]  # noqa: E731
    if not bma.checked(b, row, "reference", call, reference, True,
                       where=f"N = {n}, d = {d}"):
        print("FAIL", *b.failures)
        return 1
    for _ in range(3):
        call()
    b.sync()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(queued):
        call()
    profile.disable()
    b.sync()
    text = io.StringIO()
    title = (f"{case.name}, N = {n}, fp16, d = {d}, H = {heads}: {queued} calls of "
             f"sparse_forward, config {config}\n{bench.environment()}")
    text.write(title + "\n")
    for order in ("tottime", "cumulative"):
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(SHOWN)
    report = "\n".join(line.rstrip() for line in text.getvalue().splitlines()) + "\n"
    report = strip_paths(report)
    print(report)
    if args.out is not None:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
