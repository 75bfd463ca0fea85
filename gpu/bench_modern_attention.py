"""Lesson 9's measurements on a CUDA GPU: masked attention and decoding, against PyTorch.

    python gpu/bench_modern_attention.py --out DIR            # meant to take about 4 minutes
    python gpu/bench_modern_attention.py --out DIR --quick    # meant to take under a minute
    python gpu/bench_modern_attention.py --out DIR --interpreter   # smoke test on a CPU

Writes DIR/09-masks.csv and DIR/09-decode.csv (copy them to assets/results/ to show them in
the lesson). The kernels are the solution cells of lessons/09-modern-attention.qmd.

* 09-masks.csv: the block-sparse forward (B=1, H=16, D=128) on causal, causal-window (1024
  keys) and causal document masks at N = 4k to 32k, against FlexAttention compiled, given a
  BlockMask built from the same mask function, and against SDPA given the dense boolean mask
  (and SDPA with is_causal=True for the causal mask). Our block map and FlexAttention's
  BlockMask are built once, outside the timings.
* 09-decode.csv: one new token per sequence against a cache of 4k to 128k keys, batch 1, 8 and
  64, 32 query heads: fp16 at d = 128 with MHA (32 K/V heads) and GQA (8), fp16 GQA at d = 64,
  bf16 GQA at d = 128 (shapes whose K and V pass 16 GiB are left out): exercise 4's paged
  split-KV kernel plus merge (pages of 64, shuffled) at the split size of the lesson's
  `choose_split_size`, the same with one split per sequence ("unsplit"), SDPA's flash,
  efficient, cuDNN and math
  backends (enable_gqa=True) and FlexAttention compiled. Figures are bytes of K and V read per
  second; "copy figure GB/s" is the same number of bytes over the time a device-to-device copy
  of them takes (the copy also writes them, so a kernel that only reads can exceed it).

Every kernel's output is checked against a reference before it is timed (our kernels against
float32 math, the baselines against the same); a kernel that fails is not timed and
the script exits 1. Each time is triton.testing.do_bench's median over repeated runs with the
L2 cache flushed, with the 20th and 80th percentiles as the spread. FlexAttention compiles once
per shape (seconds each): it runs while its time budget lasts (FLEX_BUDGET_S; not in --quick)
and its cells say when it did not. The grid and the budgets are sized for an H200. Exits 2
without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
LESSON = ROOT / "lessons" / "09-modern-attention.qmd"
KERNEL_CELLS = ("exercise-sparse-kernel", "exercise-split-size", "exercise-paged-split",
                "exercise-merge-states")
TOLERANCE = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 5e-3}  # max abs error, O(1) outputs
WINDOW = 1024
PAGE_SIZE = 64
MAX_KV_BYTES = 16 * 2**30  # decode shapes above this are left out of the grid
COPY_BYTES_CAP = 4 * 2**30  # the copy figure of larger caches is timed on this many bytes
# Seconds FlexAttention may take (compilation included) in each section; past them its cells
# say "not run (time budget)". The quick mode leaves it out: its first compilation alone can
# take most of a minute.
FLEX_BUDGET_S = {"full": {"masks": 100.0, "decode": 60.0}, "quick": {"masks": 0.0, "decode": 0.0},
                 "interpreter": {"masks": 1e9, "decode": 1e9}}


class Bench:
    def __init__(self, mode: str):
        import torch

        self.torch = torch
        self.mode = mode
        self.device = "cpu" if mode == "interpreter" else "cuda"
        self.started = time.time()
        self.flex_seconds = {"masks": 0.0, "decode": 0.0}
        self.failures = []

    def time(self, fn) -> tuple[float, float, float]:
        """(median, 20th, 80th percentile) in ms; the interpreter runs fn once (time 0)."""
        if self.mode == "interpreter":
            fn()
            return 0.0, 0.0, 0.0
        import triton.testing

        p20, p50, p80 = triton.testing.do_bench(fn, warmup=25, rep=100,
                                                quantiles=[0.2, 0.5, 0.8])
        return float(p50), float(p20), float(p80)

    def flex_allowed(self, section: str) -> bool:
        return self.flex_seconds[section] < FLEX_BUDGET_S[self.mode][section]

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()


def timed_columns(row: dict, name: str, times, bytes_read: float | None = None) -> None:
    median, p20, p80 = times
    row[f"{name} ms"] = median
    row[f"{name} spread %"] = 100.0 * (p80 - p20) / median if median else 0.0
    if bytes_read is not None:
        row[f"{name} GB/s"] = bytes_read / (median * 1e-3) / 1e9 if median else 0.0


def max_error(a, b) -> float:
    diff = (a.double() - b.double()).abs()
    return float(diff.nan_to_num(nan=float("inf")).max())


def load_kernels():
    from flashcourse.authoring import cells

    return cells.load_cells(LESSON, list(KERNEL_CELLS), prelude=cells.TRITON_PRELUDE)


# ---------------------------------------------------------------- masks


def document_ids(n: int, seed: int) -> np.ndarray:
    """Causal documents of random lengths (about n / 8 each) filling exactly n tokens."""
    rng = np.random.default_rng(seed)
    lengths, total = [], 0
    while total < n:
        length = int(min(n - total, max(16, rng.exponential(n / 8))))
        lengths.append(length)
        total += length
    return np.concatenate([np.full(k, i, np.int32) for i, k in enumerate(lengths)])


def bench_masks(b: Bench, kernels, ma) -> list[dict]:
    torch = b.torch
    if b.mode == "interpreter":
        grid, (B, H, D) = [(128, torch.float16)], (1, 2, 32)
    elif b.mode == "quick":
        grid, (B, H, D) = [(4096, torch.float16)], (1, 16, 128)
    else:
        grid = [(n, torch.float16) for n in (4096, 8192, 16384, 32768)] + [
            (8192, torch.bfloat16)]
        B, H, D = 1, 16, 128
    window = 32 if b.mode == "interpreter" else WINDOW
    flex, create_block_mask = flex_functions(b)
    rows = []
    for n, dtype in grid:
        docs = document_ids(n, seed=n)
        masks = {"causal": (ma.UNLIMITED, 0, np.zeros(n, np.int32)),
                 f"causal window {window}": (window - 1, 0, np.zeros(n, np.int32)),
                 "causal documents": (ma.UNLIMITED, 0, docs)}
        gen = torch.Generator(device=b.device).manual_seed(n)
        q, k, v = (torch.randn(B, H, n, D, device=b.device, dtype=dtype, generator=gen)
                   for _ in range(3))
        for name, (left, right, ids) in masks.items():
            row = mask_case(b, kernels, ma, flex, create_block_mask, q, k, v, name, left,
                            right, ids)
            rows.append(row)
            print(f"masks: {name:22s} N={n:6d} {row['dtype']:8s} ours "
                  f"{row.get('ours ms', 0):.3f} ms, flex {row.get('flex ms', 0):.3f} ms, "
                  f"sdpa {row.get('sdpa ms', 0):.3f} ms, "
                  f"{row['tiles computed']:.1%} of tiles", flush=True)
    return rows


def masked_reference(torch, q, k, v, dense, chunk: int = 1024):
    """float32 attention with a dense boolean mask, computed for `chunk` query rows at a time
    (the full score matrix of 32k x 32k would not fit); rows with no visible key give 0."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    scale = q.shape[-1] ** -0.5
    kf, vf = k.float(), v.float()
    for start in range(0, q.shape[2], chunk):
        s = (q[:, :, start:start + chunk].float() @ kf.transpose(-1, -2)) * scale
        s = s.masked_fill(~dense[start:start + chunk], float("-inf"))
        out[:, :, start:start + chunk] = torch.softmax(s, -1).nan_to_num(0.0) @ vf
    return out


def mask_case(b: Bench, kernels, ma, flex, create_block_mask, q, k, v, name, left, right,
              ids) -> dict:
    """One mask at one size: check our kernel, FlexAttention and SDPA, then time them."""
    torch = b.torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, n, D = q.shape
    block_m, block_n, warps, stages = ma.sparse_config(D)
    mask = ma.dense_mask(n, n, left, right, ids)  # SDPA's dense mask
    kinds = ma.classify_rule(n, block_m, block_n, left, right, ids)
    tiles = ma.tile_counts(kinds)
    lists = ma.block_list_tensors(kinds, b.device)
    docs_t = torch.from_numpy(ids).to(b.device)
    dense = torch.from_numpy(mask).to(b.device)
    out = torch.empty_like(q)

    def ours():
        ma.launch_sparse(kernels.sparse_attention_kernel, q, k, v, out, docs_t, left, right,
                         lists, block_m, block_n, num_warps=warps, num_stages=stages)

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=dense)

    row = {"mask": name, "N": n, "dtype": str(q.dtype)[6:], "B": B, "H": H, "D": D,
           "BLOCK_M": block_m, "BLOCK_N": block_n,
           "tiles computed": (tiles["full"] + tiles["partial"]) / sum(tiles.values()),
           "partial tiles": tiles["partial"]}
    reference = masked_reference(torch, q, k, v, dense)
    ours()
    b.sync()
    row["ours max err"] = error = max_error(out, reference)
    if not error <= TOLERANCE[row["dtype"]]:
        b.failures.append(f"sparse kernel, {name}, N={n}, {row['dtype']}: max error "
                          f"{error:.3g} against float32 attention")
        return row
    timed_columns(row, "ours", b.time(ours))
    try:
        row["sdpa max err"] = error = max_error(sdpa(), reference)
        if error <= TOLERANCE[row["dtype"]]:
            timed_columns(row, "sdpa", b.time(sdpa))
        else:
            row["sdpa note"] = f"wrong (max error {error:.3g}), not timed"
    except Exception as err:  # noqa: BLE001  (out of memory at 32k, an unsupported mask)
        row["sdpa note"] = f"failed: {type(err).__name__}: {str(err)[:100]}"
    if name == "causal":
        def causal():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        timed_columns(row, "sdpa is_causal", b.time(causal))
    if flex is not None and b.flex_allowed("masks"):
        row.update(flex_mask_columns(b, ma, flex, create_block_mask, q, k, v, left, right,
                                     ids, docs_t, reference))
    else:
        row["flex note"] = "not run (time budget or no FlexAttention)"
    if row["ours ms"]:
        if row.get("sdpa ms"):
            row["ours vs sdpa"] = row["sdpa ms"] / row["ours ms"]
        if row.get("flex ms"):
            row["ours vs flex"] = row["flex ms"] / row["ours ms"]
    return row


def flex_functions(b: Bench):
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None, None
    if b.mode == "interpreter":  # eager (unfused) flex: enough to smoke-test this script
        return flex_attention, create_block_mask
    import torch._dynamo

    # every shape of the grid compiles once; the default limit (8) would fall back to eager
    torch._dynamo.config.cache_size_limit = 256
    torch._dynamo.config.accumulated_cache_size_limit = 4096
    return b.torch.compile(flex_attention, dynamic=False), create_block_mask


FLEX_BLOCK = 128  # FlexAttention's default tile of the BlockMask
_FLEX_RULES: dict = {}  # sequence length -> (window, documents, mask_mod)


def flex_rule(b: Bench, n: int, left: int, right: int, docs_t):
    """The lesson's mask rule as a FlexAttention mask_mod. One function per sequence length,
    reading the window and the documents from tensors updated in place: every mask of one size
    then reuses one compiled kernel (Python numbers captured in the closure would be compiled
    in, one compilation per mask)."""
    torch = b.torch
    if n not in _FLEX_RULES:
        window = torch.zeros(2, dtype=torch.int64, device=b.device)
        docs = torch.zeros(n, dtype=torch.int32, device=b.device)

        def mask_mod(batch, head, q_idx, kv_idx):
            return ((kv_idx - q_idx <= window[1]) & (q_idx - kv_idx <= window[0])
                    & (docs[q_idx] == docs[kv_idx]) & (docs[q_idx] >= 0))

        _FLEX_RULES[n] = (window, docs, mask_mod)
    window, docs, mask_mod = _FLEX_RULES[n]
    window.copy_(torch.tensor([left, right]))
    docs.copy_(docs_t)
    return mask_mod


def flex_mask_columns(b: Bench, ma, flex, create_block_mask, q, k, v, left, right, ids,
                      docs_t, reference) -> dict:
    """FlexAttention on the same mask: its BlockMask is built from the same rule, and its
    counts of FULL and PARTIAL blocks per query block must equal our block map's at its tile
    size (128 x 128) ("flex block map same"); then it is checked and timed."""
    start = time.time()
    n = q.shape[2]
    mask_mod = flex_rule(b, n, left, right, docs_t)
    columns = {}
    try:
        block_mask = create_block_mask(mask_mod, None, None, n, n, device=b.device,
                                       BLOCK_SIZE=FLEX_BLOCK)
        full_counts, _, part_counts, _ = ma.block_lists(
            ma.classify_rule(n, FLEX_BLOCK, FLEX_BLOCK, left, right, ids))
        columns["flex block map same"] = bool(
            np.array_equal(block_mask.full_kv_num_blocks.flatten().cpu().numpy(), full_counts)
            and np.array_equal(block_mask.kv_num_blocks.flatten().cpu().numpy(), part_counts))
        if not columns["flex block map same"]:
            b.failures.append(f"block map differs from FlexAttention's BlockMask, N={n}, "
                              f"left={left}, right={right}")
        out = flex(q, k, v, block_mask=block_mask)
        b.sync()
        columns["flex max err"] = error = max_error(out, reference)
        if error <= TOLERANCE[str(q.dtype)[6:]]:
            timed_columns(columns, "flex", b.time(lambda: flex(q, k, v, block_mask=block_mask)))
        else:
            columns["flex note"] = f"wrong (max error {error:.3g}), not timed"
    except Exception as err:  # noqa: BLE001  (a baseline that fails is reported, not fatal)
        columns["flex note"] = f"failed: {type(err).__name__}: {str(err)[:120]}"
    b.flex_seconds["masks"] += time.time() - start
    return columns


# ---------------------------------------------------------------- decoding


def paged_copy(torch, k, v, page_size: int, seed: int):
    """k, v (B, H_KV, N, D) scattered into shuffled pages (B * N / page_size, page_size, H_KV,
    D) with their page table (B, N / page_size) int32; N a multiple of page_size."""
    B, H_KV, N, D = k.shape
    per_seq = N // page_size
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(B * per_seq, generator=gen).to(k.device)
    table = order.view(B, per_seq).to(torch.int32)
    pages = []
    for x in (k, v):
        blocks = x.permute(0, 2, 1, 3).reshape(B * per_seq, page_size, H_KV, D)
        pool = torch.empty_like(blocks)
        pool[order] = blocks
        pages.append(pool)
    return pages[0], pages[1], table


def decode_reference(torch, q, k, v):
    """float32 attention of q (B, H, D) over all keys of k, v (B, H_KV, N, D), one sequence at
    a time (the math backend, K/V heads repeated)."""
    import torch.nn.functional as F

    group = q.shape[1] // k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for i in range(q.shape[0]):
        kk = k[i:i + 1].float().repeat_interleave(group, 1)
        vv = v[i:i + 1].float().repeat_interleave(group, 1)
        out[i] = F.scaled_dot_product_attention(q[i:i + 1, :, None].float(), kk, vv)[0, :, 0]
    return out


def decode_grid(b: Bench):
    torch = b.torch
    if b.mode == "interpreter":
        return [(torch.float16, 32, 4, 2, 1, 256), (torch.float16, 32, 4, 4, 2, 128)]
    if b.mode == "quick":
        configs, batches, caches = [(torch.float16, 128, 32, 8), (torch.float16, 128, 32, 32)], \
            [1, 8], [4096, 32768]
    else:  # (dtype, d, heads, K/V heads): MHA and GQA at d = 128, GQA at d = 64, bf16 once
        configs = [(torch.float16, 128, 32, 8), (torch.float16, 128, 32, 32),
                   (torch.float16, 64, 32, 8), (torch.bfloat16, 128, 32, 8)]
        batches, caches = [1, 8, 64], [4096, 32768, 131072]
    return [(dtype, d, h, h_kv, batch, cache) for dtype, d, h, h_kv in configs
            for batch in batches for cache in caches
            if 2 * batch * h_kv * cache * d * 2 <= MAX_KV_BYTES]


def copy_figure(b: Bench, kv_bytes: int) -> tuple[float, float]:
    """(GB/s, ms) of a device-to-device copy of kv_bytes (timed on at most COPY_BYTES_CAP and
    scaled: the copy runs at full bandwidth long before that)."""
    torch = b.torch
    size = min(kv_bytes, COPY_BYTES_CAP)
    src = torch.empty(size, dtype=torch.uint8, device=b.device)
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)

    median, _, _ = b.time(copy)
    if not median:
        return 0.0, 0.0
    return size / (median * 1e-3) / 1e9, median * kv_bytes / size


def bench_decode(b: Bench, kernels, ma) -> list[dict]:
    from torch.nn.attention import SDPBackend

    flex, _ = flex_functions(b)
    backends = {"sdpa flash": SDPBackend.FLASH_ATTENTION,
                "sdpa efficient": SDPBackend.EFFICIENT_ATTENTION,
                "sdpa cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa math": SDPBackend.MATH}
    rows = []
    for dtype, d, h, h_kv, batch, cache in decode_grid(b):
        row = decode_case(b, kernels, ma, flex, backends, dtype, d, h, h_kv, batch, cache)
        rows.append(row)
        print(f"decode: B={batch:3d} cache={cache:6d} {row['dtype']:8s} d={d:3d} {h}/{h_kv}: "
              f"ours {row.get('ours split-KV GB/s', 0):7.0f} GB/s, unsplit "
              f"{row.get('ours paged, unsplit GB/s', 0):7.0f}, flash "
              f"{row.get('sdpa flash GB/s', 0):7.0f}, flex {row.get('flex GB/s', 0):7.0f}, "
              f"copy figure {row['copy figure GB/s']:7.0f}", flush=True)
    return rows


def decode_case(b: Bench, kernels, ma, flex, backends, dtype, d, h, h_kv, batch, cache) -> dict:
    """One decoding shape: check every kernel against float32 math, then time it."""
    torch = b.torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    block_n = ma.tiles.DECODE_BLOCK_N["interpreter" if b.mode == "interpreter" else "gpu"]
    page_size = 16 if b.mode == "interpreter" else PAGE_SIZE
    gen = torch.Generator(device=b.device).manual_seed(cache + batch)
    q = torch.randn(batch, h, d, device=b.device, dtype=dtype, generator=gen)
    k, v = (torch.randn(batch, h_kv, cache, d, device=b.device, dtype=dtype,
                        generator=gen) for _ in range(2))
    lengths = torch.full((batch,), cache, dtype=torch.int32, device=b.device)
    kv_bytes = 2 * k.numel() * k.element_size()
    dtype_name = str(dtype)[6:]
    tolerance = TOLERANCE[dtype_name]
    row = {"batch": batch, "cache": cache, "dtype": dtype_name, "d": d, "heads": h,
           "kv heads": h_kv, "KV MiB": kv_bytes / 2**20}
    reference = decode_reference(torch, q, k, v)
    sms = (4 if b.mode == "interpreter" else
           torch.cuda.get_device_properties(0).multi_processor_count)
    split = kernels.choose_split_size(batch, h_kv, cache, sms, block_n)
    row["split size"], row["splits"] = split, ma.split_count(cache, split)
    k_pages, v_pages, table = paged_copy(torch, k, v, page_size, seed=cache)

    def decoder(split_size):
        splits = ma.split_count(cache, split_size)
        m = torch.empty(batch, h, splits, device=b.device)
        l = torch.empty_like(m)
        o = torch.empty(batch, h, splits, d, device=b.device)
        out = torch.empty_like(q)

        def run():
            ma.launch_paged_split(kernels.paged_split_kernel, q, k_pages, v_pages, table,
                                  lengths, m, l, o, split_size, block_n)
            ma.launch_merge(kernels.merge_states_kernel, m, l, o, out)
            return out
        return run

    ours = decoder(split)
    paged = decoder(ma.cdiv(cache, block_n) * block_n)  # one split per sequence

    candidates = {"ours split-KV": ours, "ours paged, unsplit": paged}
    q4 = q[:, :, None]
    for name, backend in backends.items():
        if name == "sdpa math" and kv_bytes > 2**30:
            row[f"{name} note"] = "not run (K/V over 1 GiB: the math path repeats them)"
            continue

        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q4, k, v, enable_gqa=h != h_kv)[:, :, 0]

        candidates[name] = sdpa
    if flex is not None and b.flex_allowed("decode"):
        def flex_decode():
            return flex(q4, k, v, enable_gqa=h != h_kv)[:, :, 0]

        candidates["flex"] = flex_decode
    elif flex is not None:
        row["flex note"] = "not run (time budget)"
    for name, fn in candidates.items():
        start = time.time()
        try:
            result = fn()
            b.sync()
        except Exception as err:  # noqa: BLE001  (an unsupported baseline is reported)
            if name.startswith("ours"):
                b.failures.append(f"{name}, {row}: raised {type(err).__name__}: {err}")
            row[f"{name} note"] = f"failed: {type(err).__name__}: {str(err)[:100]}"
            continue
        finally:
            if name == "flex":
                b.flex_seconds["decode"] += time.time() - start
        error = max_error(result, reference)
        row[f"{name} max err"] = error
        if not error <= tolerance:
            if name.startswith("ours"):
                b.failures.append(f"{name}, batch {batch}, cache {cache}, {dtype_name}, "
                                  f"d={d}, {h}/{h_kv} heads: max error {error:.3g}")
            row[f"{name} note"] = f"wrong (max error {error:.3g}), not timed"
            continue
        timed_columns(row, name, b.time(fn), kv_bytes)
    row["copy figure GB/s"], row["copy ms"] = copy_figure(b, kv_bytes)
    if row.get("ours split-KV GB/s") and row["copy figure GB/s"]:
        row["ours vs copy"] = row["ours split-KV GB/s"] / row["copy figure GB/s"]
    return row


def write(path: Path, rows: list[dict], bench_module) -> None:
    """CSV with one header holding every column any row has (missing cells empty)."""
    columns = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    bench_module.write_csv(path, [{c: row.get(c, "") for c in columns} for row in rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the CSV files")
    parser.add_argument("--quick", action="store_true", help="a small grid, under a minute")
    parser.add_argument("--interpreter", action="store_true",
                        help="smoke test on a CPU: tiny shapes, nothing timed")
    args = parser.parse_args()
    mode = "interpreter" if args.interpreter else "quick" if args.quick else "full"
    os.environ["FLASHCOURSE_INTERPRET"] = "1" if args.interpreter else "0"
    import torch

    if not args.interpreter and not torch.cuda.is_available():
        print("no CUDA GPU: run with --interpreter for a smoke test on a CPU")
        return 2
    from flashcourse import bench as bench_module
    from flashcourse import runtime
    from flashcourse.kernels import modern_attention as ma

    runtime.setup()
    kernels = load_kernels()
    b = Bench(mode)
    masks = bench_masks(b, kernels, ma)
    write(args.out / "09-masks.csv", masks, bench_module)
    decode = bench_decode(b, kernels, ma)
    write(args.out / "09-decode.csv", decode, bench_module)
    elapsed = time.time() - b.started
    print(f"wrote {args.out / '09-masks.csv'} ({len(masks)} rows) and "
          f"{args.out / '09-decode.csv'} ({len(decode)} rows) in {elapsed:.0f} s "
          f"(FlexAttention, compilation included: {sum(b.flex_seconds.values()):.0f} s)")
    for failure in b.failures:
        print("FAIL", failure)
    return 1 if b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
