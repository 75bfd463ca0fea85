"""Time lesson 7's backward kernels over a few block configurations on a CUDA GPU.

Run from the repository root:  python gpu/tune_flash_backward.py
Prints, for each kernel (dK/dV, dQ) and head dim, the fastest configuration whose result matches
the default configuration's, summed over causal and non-causal at N = 4096 (fp16).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "gpu"))

import torch  # noqa: E402
from check_flash_attention import load_kernels  # noqa: E402

from flashcourse import bench, runtime  # noqa: E402
from flashcourse.kernels import attention, tiles  # noqa: E402

CANDIDATES = {
    "dkdv": [(64, 64, 4, 2), (64, 64, 8, 2), (64, 64, 4, 3), (32, 128, 4, 2), (32, 128, 4, 3),
             (32, 128, 8, 2), (64, 128, 8, 2), (64, 128, 4, 2), (32, 64, 4, 3),
             (128, 128, 8, 2), (128, 64, 8, 2)],
    "dq": [(64, 64, 4, 2), (64, 64, 8, 2), (64, 64, 4, 3), (128, 32, 4, 2), (128, 32, 4, 3),
           (128, 32, 8, 2), (128, 64, 8, 2), (128, 64, 4, 2), (64, 32, 4, 3),
           (128, 128, 8, 2), (64, 128, 8, 2)],
}


def tune_one(name, d, causal, key, configs, launch, totals) -> None:
    """Time every config of one kernel on one case against the (64, 64, 4, 2) reference
    output; add each config's time to totals (inf for a mismatch or a failure)."""
    reference = [t.float() for t in (launch[name]() if name == "dkdv" else (launch[name](),))]
    for config in configs:
        tiles.BACKWARD_CONFIGS[key] = config
        try:
            got = launch[name]()
            got = got if name == "dkdv" else (got,)
            error = max((a.float() - b).abs().max().item()
                        for a, b in zip(got, reference, strict=True))
            ms = bench.median_ms(launch[name], rep_ms=50)
        except Exception as err:  # out of shared memory, etc.
            print(f"skip {name} d={d} causal={causal} {config}: {type(err).__name__}")
            totals[(name, config)] = float("inf")
            continue
        ok = error < 2e-2
        print(f"{name:4s} d={d:3d} causal={causal!s:5s} {config}: {ms:.3f} ms "
              f"err {error:.1e}{'' if ok else '  MISMATCH'}")
        totals[(name, config)] = totals.get((name, config), 0.0) + (ms if ok else float("inf"))


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU")
        return 2
    runtime.setup()
    kernels = load_kernels()
    best_overall = {}
    for d, heads in ((64, 32), (128, 16)):
        totals: dict[tuple[str, tuple], float] = {}
        for causal in (False, True):
            B, N = 4, 4096
            q, k, v = attention.make_inputs(B, heads, N, d, torch.float16, device="cuda", seed=1)
            do = torch.randn_like(q)
            o, lse = attention.flash_forward(kernels.flash_forward_kernel, q, k, v, causal)
            delta = attention.launch_delta(kernels.flash_delta_kernel, o, do)
            scale = d ** -0.5
            args = (q, k, v, do, lse, delta, causal, scale)
            launch = {
                "dkdv": functools.partial(attention.launch_dkdv, kernels.flash_dkdv_kernel, *args),
                "dq": functools.partial(attention.launch_dq, kernels.flash_dq_kernel, *args),
            }
            for name, configs in CANDIDATES.items():
                key = (name, d)
                default = tiles.BACKWARD_CONFIGS[key]
                tiles.BACKWARD_CONFIGS[key] = (64, 64, 4, 2)
                try:  # the launchers read the table: try each config in it, then restore it
                    tune_one(name, d, causal, key, configs, launch, totals)
                finally:
                    tiles.BACKWARD_CONFIGS[key] = default
        for name in CANDIDATES:
            mine = {c: t for (n, c), t in totals.items() if n == name}
            best = min(mine, key=mine.get)
            base = mine[(64, 64, 4, 2)]
            best_overall[(name, d)] = best
            print(f"BEST {name} d={d}: {best} {mine[best]:.3f} ms vs 64x64x4x2 {base:.3f} ms "
                  f"({base / mine[best]:.2f}x)")
    print("tiles.BACKWARD_CONFIGS updates:", best_overall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
