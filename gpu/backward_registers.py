"""Registers, spills and blocks per SM of the reference backward's kernels, compiled for Hopper.

    python gpu/backward_registers.py [--out assets/results/08-backward-registers.csv]

Records the launches of the reference backward (host.backward, tensor descriptors, fp16,
N = 4096, H = 16, d = 64 and 128, with and without the causal mask) with CPU tensors and
compiles its dK/dV and dQ kernels for sm_90a as Triton would at those launches
(bench/compile_counts.py): at the tiles of tiles.LADDER_BACKWARD and at candidate tiles
(smaller tiles, fewer stages), each as it compiles and then, where shared memory leaves room
for one more block on an SM, capped at the registers per thread that let that block fit
(Triton's `maxnreg`). For each it prints the registers and spilled bytes per thread, the shared
memory per block, and how many blocks fit on an SM by registers, by shared memory and in all.
Nothing is launched, so it runs on a machine without a GPU; the counts are those of the Triton
that runs it. Lesson 8's profile found every backward kernel at 2 blocks of 4 warps per SM
(12.5% of the warp slots); this table says which tiles could run more, and at what cost in
spills, before any is timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

N, HEADS = 4096, 16  # as lesson 8's profile (B = 1 here: the batch is not an argument)

# (BLOCK_M, BLOCK_N, num_warps, num_stages), keyed on (kernel, head dim <= 64); the table's
# entry is compiled first. dK/dV: BLOCK_N a multiple of BLOCK_M; dQ the other way round.
CANDIDATES = {
    ("dkdv", False): [(64, 64, 4, 1), (32, 64, 4, 2), (32, 64, 4, 3), (64, 128, 8, 2),
                      (32, 128, 8, 2)],
    ("dq", False): [(64, 64, 4, 2), (64, 32, 4, 2), (64, 32, 4, 3), (128, 32, 4, 3),
                    (128, 64, 8, 2)],
    ("dkdv", True): [(64, 64, 4, 2), (32, 64, 4, 3), (32, 64, 4, 2), (64, 128, 8, 3)],
    ("dq", True): [(64, 64, 4, 3), (64, 64, 4, 2), (128, 64, 4, 2), (128, 32, 4, 3)],
}


def compile_one(torch, host, d: int, causal: bool, dkdv, dq, only: str) -> dict:
    """Record host.backward's launches at these configs (each a tuple of BLOCK_M, BLOCK_N,
    warps, stages, maxnreg) with CPU tensors, and compile the launch of kernel `only`
    ("dK/dV" or "dQ")."""
    from flashcourse.bench import compile_counts
    from flashcourse.kernels import backward

    q, k, v, o, do = (torch.empty(1, HEADS, N, d, dtype=torch.float16) for _ in range(5))
    lse = torch.empty(1, HEADS, N)
    with compile_counts.captured_launches() as launches:
        host.backward(q, k, v, o, lse, do, causal, configs=(dkdv, dq))
    wanted, config = ((backward.attn_bwd_dkdv_kernel, dkdv) if only == "dK/dV"
                      else (backward.attn_bwd_dq_kernel, dq))
    (args, kwargs), = [(a, kw) for kernel, a, kw in launches if kernel is wanted]
    counts = compile_counts.resources(wanted, args, kwargs)
    return {"gpu": compile_counts.GPU_NOTE, "kernel": only, "d": d, "causal": causal,
            "BLOCK_M": config[0], "BLOCK_N": config[1], "warps": config[2],
            "stages": config[3], "maxnreg": config[4] or "", **counts}


def measure():
    """One row per (head dim, mask, kernel, tile), and per cap where one more block fits."""
    import torch

    from flashcourse.bench import compile_counts
    from flashcourse.kernels import host, tiles

    for d in (64, 128):
        table = [(*config, None) for config in tiles.LADDER_BACKWARD[d <= 64]]
        for causal in (False, True):
            for kernel, index in (("dkdv", 0), ("dq", 1)):
                name = "dK/dV" if index == 0 else "dQ"
                tiles_tried = [table[index][:4], *CANDIDATES[(kernel, d <= 64)]]
                for number, tile in enumerate(tiles_tried):
                    cap = None
                    for _attempt in range(2):  # as it compiles, then capped for one more block
                        pair = [*table]
                        pair[index] = (*tile, cap)  # the other kernel keeps the table's tiles
                        row = compile_one(torch, host, d, causal, *pair, only=name)
                        row["table's"] = number == 0 and cap is None
                        yield row
                        cap = compile_counts.cap_for_one_more_block(row, row["warps"])
                        if cap is None:
                            break


if __name__ == "__main__":
    from flashcourse.bench import compile_counts

    sys.exit(compile_counts.script_main(__doc__, measure))
