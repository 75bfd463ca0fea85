"""Does the paged pool's layout cost decoding bandwidth at d = 64? (lesson 9)

    python gpu/measure_decode_layout.py [--out assets/results/09-decode-layout.csv]

The decoding pool stores a page as (page_size, kv_heads, d): one K/V head's keys are rows of
d values with the other heads' rows between them (at d = 64 in fp16, 128-byte rows 1 KiB
apart with 8 heads). cuDNN's cache holds each head's keys together. decode.paged_read reads a
pool the way a decoding program does (one program per split and K/V head, pages through a
shuffled page table) and only sums, so the two layouts are timed on the same bytes, the same
grid and the same page order, beside the read-only kernel on a flat buffer of that size.
Median of 5 rounds, the three taken in turn each round; GB/s of the pool's bytes.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from flashcourse import bench  # noqa: E402

POOL_BYTES = 2**30
PAGE_SIZE = 64
KV_HEADS = 8
ROUNDS = 5


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not bench.cuda_script_ready("gpu/measure_decode_layout.py", "times reads"):
        return 0
    import torch
    import triton

    from flashcourse.kernels import decode, tiles

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    programs = 64  # per head: 512 programs, about tiles.DECODE_PROGRAMS_PER_SM per SM
    per_sm, block, warps = tiles.READ_ONLY_CONFIG
    rows = []
    for d in (64, 128):
        page_bytes = PAGE_SIZE * KV_HEADS * d * 2
        num_pages = POOL_BYTES // page_bytes
        generator = torch.Generator(device="cuda").manual_seed(0)
        order = torch.randperm(num_pages, device="cuda", generator=generator).to(torch.int32)
        pools = {
            "heads side by side (the decoding pool)": (torch.randn(
                num_pages, PAGE_SIZE, KV_HEADS, d, device="cuda", dtype=torch.float16), False),
            "each head's rows together": (torch.randn(
                num_pages, KV_HEADS, PAGE_SIZE, d, device="cuda", dtype=torch.float16), True),
        }
        runs = {name: functools.partial(decode.paged_read, pool, order, programs, together)
                for name, (pool, together) in pools.items()}
        flat = pools["each head's rows together"][0]
        runs["read-only kernel, flat"] = functools.partial(decode.read_only, flat, per_sm * sms,
                                                           block, warps)
        for name, (pool, together) in pools.items():  # both layouts read the same sums
            by_head = decode.paged_read(pool, order, programs, together).sum(0).to(torch.int32)
            words = pool.view(torch.int32)
            want = words.sum(dim=(0, 2, 3) if together else (0, 1, 3)).to(torch.int32)
            if not torch.equal(by_head, want):
                raise SystemExit(f"paged_read read the wrong words ({name}, d = {d}).")
        times = {name: [] for name in runs}
        for _ in range(ROUNDS):
            for name, run in runs.items():
                times[name].append(triton.testing.do_bench(run, warmup=25, rep=100,
                                                           return_mode="median"))
        for name, samples in times.items():
            median = statistics.median(samples)
            rows.append({"d": d, "kv heads": KV_HEADS, "page size": PAGE_SIZE,
                         "MiB": POOL_BYTES // 2**20, "read": name, "ms": median,
                         "GB/s": POOL_BYTES / median / 1e6,
                         "spread %": 100 * (max(samples) - min(samples)) / median})
            print(f"d = {d:3d} {name:40s} {rows[-1]['GB/s']:7.0f} GB/s "
                  f"(spread {rows[-1]['spread %']:.1f}%)", flush=True)
    if args.out:
        bench.write_csv(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
