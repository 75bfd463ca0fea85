"""Registers and spills of the course kernels as compiled on this GPU (ptxas's own counts).

    python gpu/kernel_resources.py [--out assets/results/08-kernel-resources.csv]

Runs the reference forward and backward once (fp16, N = 4096, d = 64 and 128, with and
without the causal mask, pointer loads and tensor descriptors), then reads every compiled
kernel's register count and spilled bytes from Triton's cache. A spill is a value that did
not fit in registers and lives in local memory: each use of it is a load that shows up in
Nsight Compute as a long-scoreboard stall, like a load from global memory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from flashcourse import bench  # noqa: E402

N = 4096


def compiled(kernel) -> list:
    """Every compiled binary of a @triton.jit function on the current device."""
    import torch

    caches = kernel.device_caches.get(torch.cuda.current_device())
    return list(caches[0].values()) if caches else []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not bench.cuda_script_ready("gpu/kernel_resources.py", "reads compiled kernels"):
        return 0
    import torch

    from flashcourse.kernels import backward, forward, host, verify

    rows = []
    kernels = {"forward": forward.attn_fwd_kernel,
               "forward (halves)": forward.attn_fwd_halves_kernel,
               "dK/dV": backward.attn_bwd_dkdv_kernel, "dQ": backward.attn_bwd_dq_kernel}
    for d in (64, 128):
        for causal in (False, True):
            for tma in (False, True):
                for kernel in kernels.values():
                    kernel.device_caches.clear()
                q, k, v = verify.make_qkv(4, 16, N, d, torch.float16, "cuda", seed=0)
                o, lse = host.forward(q, k, v, causal)
                host.backward(q, k, v, o, lse, torch.randn_like(o), causal, tma=tma)
                torch.cuda.synchronize()
                for name, kernel in kernels.items():
                    for binary in compiled(kernel):
                        rows.append({"kernel": name, "d": d, "causal": causal,
                                     "backward loads": "descriptors" if tma else "pointers",
                                     "registers": binary.n_regs,
                                     "spilled bytes": binary.n_spills})
                        print(rows[-1], flush=True)
    if args.out:
        bench.write_csv(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
