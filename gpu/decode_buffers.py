"""How many blocks of K and V the reference decoding kernel keeps in flight, compiled for Hopper.

    python gpu/decode_buffers.py [--out assets/results/09-decode-buffers.csv]

Calls the reference decoding step's plan (kernels/decode.py) with CPU tensors (fp16, batch 8,
32 query heads over 8 K/V heads, pages of 64 keys, one split), records the launch, and compiles
it for sm_90a as Triton would at that launch (bench/compile_counts.py), for each way of reading
K and V (decode.KV_LOADS) and each (BLOCK_N, num_warps, num_stages) below, and the tuned
configs' split kernel as it runs with 8 splits (storing states for the merge), at d = 128
also capped at 96 registers a thread (maxnreg, as gpu/measure_decode_cap.py times it). Prints
the binary's registers, shared memory, blocks per SM and the buffers the software pipeliner gave
the K and V tiles: as many blocks of them can be in flight at once. Nothing is launched, so it
runs on a machine without a GPU; the counts are those of the Triton that runs it (another
version unpacked in a folder first on PYTHONPATH gives that version's). Lesson 9 reads them
beside the stage counts of 09-decode-tune.csv.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

BATCH, HEADS, KV_HEADS, PAGE_SIZE, PAGES = 8, 32, 8, 64, 512
# (head dim, kv_loads, configs): the tuned configs (tiles.DECODE_CONFIGS) and their neighbours
VARIANTS = (
    (64, "rows", [(128, 4, s) for s in (2, 3, 4, 5)] + [(64, 4, s) for s in (3, 4, 5)]),
    (64, "pages ahead", [(128, 4, s) for s in (2, 3, 4)] + [(64, 4, s) for s in (3, 4)]),
    (64, "tma", [(PAGE_SIZE, 4, s) for s in (2, 3, 4)]),
    (128, "rows", [(64, 4, s) for s in (2, 3, 4, 5)]),
    (128, "pages ahead", [(64, 4, s) for s in (2, 3, 4)]),
    (128, "tma", [(PAGE_SIZE, 4, s) for s in (2, 3, 4)]),
)


# (head dim, config) of the split kernel compiled as it runs with more than one split: it stores
# states for the merge instead of the output (a different kernel, with its own registers)
# (and at d = 128 capped at 96 registers a thread, 5 blocks per SM: measure_decode_cap.py)
SPLIT_VARIANTS = ((64, (128, 4, 3)), (128, (64, 4, 3)), (128, (64, 4, 3, 96)),
                  (128, (64, 4, 2, 96)))
SPLITS = 8


def compile_variant(d: int, kv_loads: str, config: tuple[int, ...],
                    splits: int = 1) -> dict:
    """The binary's counts for one way of reading K and V at one config, of the split kernel
    of a step of `splits` splits."""
    import torch

    from flashcourse.bench import compile_counts
    from flashcourse.kernels import decode

    q = torch.empty(BATCH, HEADS, d, dtype=torch.float16)
    pool = torch.empty(BATCH * PAGES, PAGE_SIZE, KV_HEADS, d, dtype=torch.float16)
    table = torch.zeros(BATCH, PAGES, dtype=torch.int32)
    lengths = torch.full((BATCH,), PAGES * PAGE_SIZE, dtype=torch.int32)
    with compile_counts.captured_launches() as launches:
        decode.DecodePlan(q, pool, pool, table, lengths, splits=splits, config=config,
                          kv_loads=kv_loads).run()
    (kernel, args, kwargs), *_ = launches  # the split kernel, then any merge
    counts = compile_counts.resources(kernel, args, kwargs)
    return {"gpu": compile_counts.GPU_NOTE, "d": d, "splits": splits, "kv loads": kv_loads,
            "BLOCK_N": config[0], "warps": config[1], "stages": config[2],
            "maxnreg": config[3] if len(config) > 3 else "",
            "K/V buffers": counts["pipeline buffers"], "registers": counts["registers"],
            "spilled B": counts["spilled B"], "shared KiB": counts["shared KiB"],
            "blocks/SM": counts["blocks/SM"], "ptxas notes": counts["ptxas notes"]}


def measure():
    """One row per head dim, way of reading K and V, and config."""
    for d, kv_loads, configs in VARIANTS:
        for config in configs:
            yield compile_variant(d, kv_loads, config)
    for d, config in SPLIT_VARIANTS:
        yield compile_variant(d, "rows", config, splits=SPLITS)


if __name__ == "__main__":
    from flashcourse.bench import compile_counts

    sys.exit(compile_counts.script_main(__doc__, measure))
