"""The sweep behind tiles.DECODE_CONFIGS, DECODE_PROGRAMS_PER_SM and READ_ONLY_CONFIG.

    python gpu/tune_decode.py --out DIR            # about two minutes on an H200
    python gpu/tune_decode.py --out DIR --d 64 --kv-loads "pages ahead,tma" --no-read-only

First checks the reference decoding kernel (kernels/decode.py), each way of reading K and V
(decode.KV_LOADS), against decode_reference (float64) on ragged lengths with NaN in every
unused page and slot (fp16 and bf16, d = 64, 80 and 128, MHA, GQA and MQA, one split and
several); exits 1 on a wrong output. Then writes DIR/09-decode-tune.csv: for shapes of
09-decode.csv (pages of 64, shuffled), the time of each way of reading K and V, (BLOCK_N,
num_warps, num_stages) and split count, replayed in a CUDA graph, beside SDPA's cuDNN backend;
and the read-only kernel's GB/s for each (programs per SM, block, warps) on buffers of 8 MiB
to 4 GiB. --d and --kv-loads keep some of the shapes and ways. Exits 2 without a GPU.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "gpu"))

# (batch, cache, d, heads, K/V heads), fp16
SHAPES = [(1, 4096, 128, 32, 8), (1, 32768, 128, 32, 8), (1, 131072, 128, 32, 8),
          (8, 4096, 128, 32, 8), (8, 131072, 128, 32, 8), (64, 4096, 128, 32, 8),
          (1, 4096, 128, 32, 32), (1, 131072, 128, 32, 32), (8, 32768, 128, 32, 32),
          (1, 4096, 64, 32, 8), (1, 131072, 64, 32, 8), (8, 32768, 64, 32, 8),
          (64, 32768, 64, 32, 8)]
# (BLOCK_N, num_warps, num_stages) per head dim and way of reading K and V. With "rows" K and
# V wait on the page numbers loaded in the same iteration: 2 to 4 stages keep one block in
# flight, 5 keep two (09-decode-buffers.csv); loaded a block ahead, s stages keep s - 1.
CONFIGS = {
    128: {"rows": [(64, 4, 2), (64, 4, 3), (64, 8, 3), (128, 4, 3), (128, 8, 3), (32, 4, 3),
                   (64, 4, 5)],
          "pages ahead": [(64, 4, 3), (64, 4, 4), (32, 4, 4), (64, 8, 3)],
          "tma": [(64, 4, 2), (64, 4, 3), (64, 4, 4), (64, 8, 3)]},
    64: {"rows": [(64, 4, 3), (128, 4, 3), (128, 4, 4), (128, 8, 3), (256, 8, 3), (128, 4, 5),
                  (64, 4, 5)],
         "pages ahead": [(128, 4, 3), (128, 4, 4), (64, 4, 3), (64, 4, 4), (128, 8, 3)],
         "tma": [(64, 4, 2), (64, 4, 3), (64, 4, 4), (64, 8, 4)]},
}
READ_SIZES_MIB = [8, 64, 512, 4096]
READ_CONFIGS = [(p, blk, w) for p in (4, 8, 16) for blk in (2048, 8192) for w in (4, 8)]


def check(torch, dec, ma, kv_loads) -> list[str]:
    """Max errors of the reference kernel, each way of reading K and V, against float64 on
    ragged, NaN-padded caches."""
    failures = []
    for loads, dtype, tol in ((loads, dtype, tol) for loads in kv_loads
                              for dtype, tol in ((torch.float16, 2e-2),
                                                 (torch.bfloat16, 6e-2))):
        for d in (64, 80, 128):
            for h, h_kv in ((32, 32), (32, 8), (8, 1)):
                lengths = [3000, 1, 0, 777, 2048]
                gen = torch.Generator().manual_seed(d + h_kv)
                q = torch.randn(len(lengths), h, d, generator=gen).to(dtype)
                k, v = (torch.randn(len(lengths), h_kv, 3000, d, generator=gen).to(dtype)
                        for _ in range(2))
                kp, vp, table, _ = ma.paged_cache(k, v, lengths, page_size=64, seed=d)
                expected = ma.decode_reference(q, k, v, lengths)
                for splits in (1, None, 40):
                    plan = dec.DecodePlan(q.cuda(), kp.cuda(), vp.cuda(), table.cuda(),
                                          torch.tensor(lengths, dtype=torch.int32).cuda(),
                                          max_len=3000, splits=splits, kv_loads=loads)
                    error = float((plan.run().double().cpu() - expected).abs()
                                  .nan_to_num(float("inf")).max())
                    line = (f"check {loads} {str(dtype)[6:]} d={d} {h}/{h_kv} "
                            f"splits={plan.splits}: max error {error:.2e}")
                    print(line, flush=True)
                    if not error <= tol:
                        failures.append(line)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--d", default="64,128", help="head dims to time (of 64, 128)")
    parser.add_argument("--kv-loads", default="rows,pages ahead,tma",
                        help="ways of reading K and V to check and time")
    parser.add_argument("--no-read-only", action="store_true",
                        help="leave out the read-only kernel's sweep")
    args = parser.parse_args()
    head_dims = [int(d) for d in args.d.split(",")]
    kv_loads = args.kv_loads.split(",")
    for d in head_dims:
        if d not in CONFIGS:
            parser.error(f"--d {d}: configs exist for {sorted(CONFIGS)} only")
    for loads in kv_loads:
        if loads not in CONFIGS[128]:
            parser.error(f"--kv-loads {loads!r}: one of {sorted(CONFIGS[128])}")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU")
        return 2
    import bench_modern_attention as bma
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashcourse import bench as bench_module
    from flashcourse import runtime

    runtime.setup(verbose=False)
    from flashcourse.kernels import decode as dec
    from flashcourse.kernels import modern_attention as ma

    failures = check(torch, dec, ma, kv_loads)
    b = bma.Bench("full")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for batch, cache, d, h, h_kv in (shape for shape in SHAPES if shape[2] in head_dims):
        q = torch.randn(batch, h, d, device="cuda", dtype=torch.float16)
        k, v = (torch.randn(batch, h_kv, cache, d, device="cuda", dtype=torch.float16)
                for _ in range(2))
        kp, vp, table = bma.paged_copy(torch, k, v, bma.PAGE_SIZE, seed=cache)
        lengths = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
        kv_bytes = 2 * k.numel() * k.element_size()
        shape = {"batch": batch, "cache": cache, "d": d, "heads": h, "kv heads": h_kv,
                 "KV MiB": kv_bytes / 2**20}

        def cudnn(q4=q[:, :, None], k=k, v=v, gqa=h != h_kv):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q4, k, v, enable_gqa=gqa)[:, :, 0]

        ms = b.time_graph(cudnn, rep=40)[0]
        cudnn_rate = kv_bytes / ms / 1e6
        rows.append({**shape, "kind": "sdpa cudnn", "graph ms": ms, "GB/s": cudnn_rate})
        best = None
        for loads, config in ((way, c) for way in kv_loads for c in CONFIGS[d][way]):
            blocks = -(-cache // config[0])
            splits = 1
            while splits <= min(blocks, 256):
                if batch * h_kv * splits <= 16 * sms:
                    plan = dec.DecodePlan(q, kp, vp, table, lengths, max_len=cache,
                                          config=config, splits=splits, kv_loads=loads)
                    ms = b.time_graph(plan.run, rep=40)[0]
                    rows.append({**shape, "kind": "reference", "kv loads": loads,
                                 "BLOCK_N": config[0], "warps": config[1],
                                 "stages": config[2], "splits": plan.splits,
                                 "programs": batch * h_kv * plan.splits,
                                 "graph ms": ms, "GB/s": kv_bytes / ms / 1e6})
                    best = min(best or (ms, ""),
                               (ms, f"{loads} {config} x {plan.splits} splits"))
                splits *= 2
        print(f"B={batch} cache={cache} d={d} {h}/{h_kv}: cudnn {cudnn_rate:.0f} GB/s, "
              f"best reference {best}", flush=True)
        # written after each shape, so that a call cut short keeps what it timed
        bench_module.write_csv(args.out / "09-decode-tune.csv", rows)
    for mib in [] if args.no_read_only else READ_SIZES_MIB:
        buffer = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
        for per_sm, block, warps in READ_CONFIGS:
            programs = min(per_sm * sms, -(-buffer.numel() // (4 * block)))
            ms = b.time_graph(partial(dec.read_only, buffer, programs, block, warps), rep=40)[0]
            rows.append({"kind": "read-only", "KV MiB": mib, "programs per SM": per_sm,
                         "block": block, "warps": warps, "graph ms": ms,
                         "GB/s": buffer.numel() / ms / 1e6})
        rates = [r["GB/s"] for r in rows if r["kind"] == "read-only" and r["KV MiB"] == mib]
        print(f"read-only {mib} MiB: best {max(rates):.0f} GB/s", flush=True)
    bench_module.write_csv(args.out / "09-decode-tune.csv", rows)
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
