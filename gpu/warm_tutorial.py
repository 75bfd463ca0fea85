"""Compile every autotune config of Triton's fused-attention tutorial in parallel processes.

    python gpu/warm_tutorial.py FILE [--workers 14] [--n 4096]

FILE is python/tutorials/06-fused-attention.py of a Triton checkout. Its forward autotunes
over some thirty configs and compiles them one after another on first use, minutes for each
head dim and mask. Each worker here gives the tutorial's autotuner one config at a time and
runs it, so Triton's on-disk cache holds every kernel when the harness (--tutorial FILE)
then autotunes: the timings are the tutorial's own, only the waiting is shorter.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _autotuners(module) -> list:
    """The tutorial's autotuned forward kernels (objects with a `configs` list)."""
    return [obj for obj in vars(module).values() if hasattr(obj, "configs")
            and hasattr(obj, "fn") and isinstance(obj.configs, list)]


def warm(job) -> list[str]:
    path, index, workers, n = job
    import torch

    from flashcourse.bench import providers

    providers.load_tutorial(path)
    module = providers.tutorial_module()
    failures = []
    tuners = _autotuners(module)
    everything = {id(t): list(t.configs) for t in tuners}
    for tuner in tuners:
        for other in tuners:  # one config each, so only `tuner` spans its list here
            other.configs = everything[id(other)][:1]
            other.cache.clear()
        for config in everything[id(tuner)][index::workers]:
            tuner.configs = [config]
            tuner.cache.clear()
            for d, heads in ((64, 32), (128, 16)):
                q, k, v = (torch.randn(1, heads, n, d, device="cuda", dtype=torch.float16)
                           for _ in range(3))
                for causal in (False, True):
                    try:
                        module.attention(q, k, v, causal, d ** -0.5)
                        torch.cuda.synchronize()
                    except Exception as err:  # noqa: BLE001  (e.g. BLOCK_N > HEAD_DIM)
                        failures.append(f"{config} d={d}: {type(err).__name__}")
    for tuner in tuners:
        tuner.configs = everything[id(tuner)]
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tutorial", type=Path)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--n", type=int, default=4096)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu/warm_tutorial.py compiles the tutorial for a CUDA GPU; there is none here.")
        return 0
    start = time.time()
    jobs = [(str(args.tutorial), i, args.workers, args.n) for i in range(args.workers)]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        failures = [line for part in pool.map(warm, jobs) for line in part]
    print(f"tutorial configs compiled by {args.workers} workers in {time.time() - start:.0f} s; "
          f"{len(failures)} (config, d, mask) runs failed (the autotuner skips those too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
