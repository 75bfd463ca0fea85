"""Registers and spills of the course kernels as compiled on this GPU (the driver's own counts).

    python gpu/kernel_resources.py [--out assets/results/08-kernel-resources.csv]
    python gpu/kernel_resources.py --compile-only [--out FILE]   # no GPU needed

Runs the reference forward and backward once (fp16, N = 4096, d = 64 and 128, with and
without the causal mask, pointer loads and tensor descriptors), then reads every compiled
kernel's register count and spilled bytes per thread from Triton's cache (the driver reports
the local memory a thread spills into; Triton's `n_spills` is that in 4-byte words).
--compile-only records the same launches with CPU tensors and compiles each for sm_90a as
Triton would (bench/compile_counts.py), on a machine without a GPU. A spill is a value that
did not fit in registers and lives in local memory: each use of it is a load that shows up in
Nsight Compute as a long-scoreboard stall, like a load from global memory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from flashcourse import bench  # noqa: E402

N = 4096
SPILL_WORD = 4  # Triton's n_spills counts the driver's local memory per thread in words


def compiled(kernel) -> list:
    """Every compiled binary of a @triton.jit function on the current device."""
    import torch

    caches = kernel.device_caches.get(torch.cuda.current_device())
    return list(caches[0].values()) if caches else []


def cases():
    for d in (64, 128):
        for causal in (False, True):
            for tma in (False, True):
                yield d, causal, tma


def run_once(torch, host, verify, d, causal, tma, device):
    q, k, v = verify.make_qkv(4, 16, N, d, torch.float16, device, seed=0)
    o, lse = host.forward(q, k, v, causal)
    host.backward(q, k, v, o, lse, torch.randn_like(o), causal, tma=tma)


def on_gpu(kernels) -> list[dict]:
    import torch

    from flashcourse.kernels import host, verify

    rows = []
    for d, causal, tma in cases():
        for kernel in kernels.values():
            kernel.device_caches.clear()
        run_once(torch, host, verify, d, causal, tma, "cuda")
        torch.cuda.synchronize()
        for name, kernel in kernels.items():
            for binary in compiled(kernel):
                rows.append({"kernel": name, "d": d, "causal": causal,
                             "backward loads": "descriptors" if tma else "pointers",
                             "registers": binary.n_regs,
                             "spilled B": binary.n_spills * SPILL_WORD})
                print(rows[-1], flush=True)
    return rows


def compile_only(kernels) -> list[dict]:
    import torch

    from flashcourse.bench import compile_counts
    from flashcourse.kernels import host, verify

    names = {kernel: name for name, kernel in kernels.items()}
    rows = []
    for d, causal, tma in cases():
        with compile_counts.captured_launches() as launches:
            run_once(torch, host, verify, d, causal, tma, "cpu")
        for kernel, args, kwargs in launches:
            if kernel in names:  # not the delta pre-pass
                counts = compile_counts.resources(kernel, args, kwargs)
                rows.append({"gpu": compile_counts.GPU_NOTE, "kernel": names[kernel], "d": d,
                             "causal": causal,
                             "backward loads": "descriptors" if tma else "pointers",
                             "registers": counts["registers"],
                             "spilled B": counts["spilled B"],
                             "ptxas notes": counts["ptxas notes"]})
                print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--compile-only", action="store_true",
                        help="compile for sm_90a without a GPU, launching nothing")
    args = parser.parse_args(argv)
    if args.compile_only:
        from flashcourse import runtime

        runtime.compile_only()  # before the kernels' import: their @triton.jit must compile
    elif not bench.cuda_script_ready("gpu/kernel_resources.py", "reads compiled kernels"):
        return 0
    from flashcourse.kernels import backward, forward

    kernels = {"forward": forward.attn_fwd_kernel,
               "forward (halves)": forward.attn_fwd_halves_kernel,
               "dK/dV": backward.attn_bwd_dkdv_kernel, "dQ": backward.attn_bwd_dq_kernel}
    rows = compile_only(kernels) if args.compile_only else on_gpu(kernels)
    if args.out:
        bench.write_csv(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
