"""Lesson 9's measurements on a CUDA GPU: masked attention and decoding, against PyTorch.

    python gpu/bench_modern_attention.py --out DIR            # meant to take about 4 minutes
    python gpu/bench_modern_attention.py --out DIR --quick    # meant to take under a minute
    python gpu/bench_modern_attention.py --out DIR --interpreter   # smoke test on a CPU

Writes DIR/09-masks.csv and DIR/09-decode.csv (copy them to assets/results/ to show them in
the lesson). The kernels are the solution cells of lessons/09-modern-attention.qmd.

* 09-masks.csv: the reference block-sparse forward (kernels/sparse_forward.py) and the lesson's
  teaching kernel (B=1, H=16) on causal, causal-window (1024 keys), causal document and 50%
  random block masks at N = 8k, 16k, 32k, fp16 and bf16, D = 64 and 128, against FlexAttention
  compiled, given a BlockMask built from the same mask function, against SDPA given the dense
  boolean mask, and on the causal mask against the dense reference forward and SDPA with
  is_causal=True; times are medians of REPEATS interleaved timings, spreads (max - min) /
  median. Block maps and BlockMasks are built once, outside the timings.
* 09-sparse-steps.csv (--part steps): the step from the teaching kernel to the reference, one
  optimisation at a time, N = 16k, fp16; with --sweep also 09-sparse-tiles.csv, the reference at
  each of SWEEP_CONFIGS.
* 09-decode.csv: one new token per sequence against a cache of 4k to 128k keys, batch 1, 8 and
  64, 32 query heads: fp16 at d = 128 with MHA (32 K/V heads) and GQA (8), fp16 GQA at d = 64,
  bf16 GQA at d = 128 (shapes whose K and V pass 16 GiB are left out): exercise 4's paged
  split-KV kernel plus merge (pages of 64, shuffled) at the split size of the lesson's
  `choose_split_size`, the same with one split per sequence ("unsplit"), the course's
  reference decoding step (kernels/decode.py: splits from decode_splits, planned once), the
  same step on a pool that keeps each K/V head's rows of a page together ("reference, heads
  together": (pages, H_KV, 64, D) seen as the kernel's (pages, 64, H_KV, D) through strides),
  the same step reading K and V each other way of decode.KV_LOADS ("pages ahead": each
  block's page numbers loaded a block ahead; "TMA pages": a page per block through tensor
  descriptors, on either pool),
  SDPA's flash, efficient, cuDNN and math backends (enable_gqa=True) and FlexAttention
  compiled. Figures are bytes of K and V read per second. Ours, the reference, flash and cuDNN
  are timed twice: launched from Python ("ms"), and replayed in a CUDA graph ("graph ms", the
  GPU's time without the host's launch work, as serving engines run a step). "read-only GB/s"
  is the read-only kernel (decode.read_only) reading as many bytes, in a graph: the measured
  ceiling; "% of HBM" and "% of read-only" set the graph figures against the datasheet's
  4.8 TB/s and that ceiling.

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
import types
from pathlib import Path
from typing import NamedTuple

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
READ_BYTES_CAP = 4 * 2**30  # the read-only figure of larger caches is timed on this many bytes
# Seconds FlexAttention may take (compilation included) in each section; past them its cells
# say "not run (time budget)". The quick mode leaves it out: its first compilation alone can
# take most of a minute.
FLEX_BUDGET_S = {"full": {"masks": 400.0, "decode": 60.0}, "quick": {"masks": 0.0, "decode": 0.0},
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
        self.fair_flex = False  # --fair-flex: one minimal mask_mod per mask
        self.fair_flex_dtypes = ("float16",)  # --fair-flex's dtypes (--dtype)
        self.mask_head_dims: tuple[int, ...] = ()  # --d: only these head dims in the masks part

    def time(self, fn) -> tuple[float, float, float]:
        """(median, 20th, 80th percentile) in ms; the interpreter runs fn once (time 0)."""
        if self.mode == "interpreter":
            fn()
            return 0.0, 0.0, 0.0
        import triton.testing

        p20, p50, p80 = triton.testing.do_bench(fn, warmup=25, rep=100,
                                                quantiles=[0.2, 0.5, 0.8])
        return float(p50), float(p20), float(p80)

    def graph_replay(self, fn):
        """fn captured once in a CUDA graph, as that graph's replay: a call that runs fn's
        kernels without the host's work of launching them (how serving engines run a decoding
        step). The interpreter, which has no graphs, gets fn itself."""
        if self.mode == "interpreter":
            return fn
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compile and warm up outside the capture
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay

    def time_graph(self, fn, rep: int = 100) -> tuple[float, float, float]:
        """Bench.time of fn's graph_replay: the GPU's time for fn's kernels. The interpreter
        runs fn once (time 0)."""
        replay = self.graph_replay(fn)
        if self.mode == "interpreter":
            replay()
            return 0.0, 0.0, 0.0
        import triton.testing

        p20, p50, p80 = triton.testing.do_bench(replay, warmup=10, rep=rep,
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


REPEATS = 5  # interleaved timings per kernel in the masks part (median and spread of these)
RANDOM_DENSITY = 0.5  # the random block mask: each 128 x 128 block visible with this chance
# Tiles tried for the reference sparse kernel with --sweep (BLOCK_M, BLOCK_N, warps, stages).
SWEEP_CONFIGS = {64: [(128, 64, 8, 4), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3),
                      (64, 64, 4, 3)],
                 128: [(128, 64, 4, 2), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2),
                       (64, 64, 4, 3)]}


def document_ids(n: int, seed: int) -> np.ndarray:
    """Causal documents of random lengths (about n / 8 each) filling exactly n tokens."""
    rng = np.random.default_rng(seed)
    lengths, total = [], 0
    while total < n:
        length = int(min(n - total, max(16, rng.exponential(n / 8))))
        lengths.append(length)
        total += length
    return np.concatenate([np.full(k, i, np.int32) for i, k in enumerate(lengths)])


class MaskCase:
    """One mask of the grid: the lesson's rule (a window and documents) or a random table of
    visible FLEX_BLOCK x FLEX_BLOCK blocks (whose tiles are FULL or EMPTY, never PARTIAL)."""

    def __init__(self, name, n, left, right, docs=None, table=None):
        self.name, self.n, self.left, self.right = name, n, left, right
        self.docs, self.table = docs, table  # docs None: one document

    def kinds(self, ma, sf, block_m, block_n):
        if self.table is not None:
            return sf.block_table_kinds(self.table, FLEX_BLOCK, self.n, block_m, block_n)
        return ma.classify_rule(self.n, block_m, block_n, self.left, self.right, self.docs)

    def dense(self, ma, sf):
        if self.table is not None:
            return sf.block_table_mask(self.table, FLEX_BLOCK, self.n)
        return ma.dense_mask(self.n, self.n, self.left, self.right, self.docs)

    def ids(self):
        """Document ids for the teaching kernel, which always reads them."""
        return self.docs if self.docs is not None else np.zeros(self.n, np.int32)


MASK_KINDS = ("causal", "window", "documents", "random")  # lesson 9's masks, the tables' order


def mask_cases(ma, sf, n: int, window: int, kinds=MASK_KINDS) -> list[MaskCase]:
    """Lesson 9's masks at N = n: those of `kinds` (names from MASK_KINDS), in that order."""
    unknown = sorted(set(kinds) - set(MASK_KINDS))
    if unknown:
        raise ValueError(f"unknown mask kinds {unknown}: choose from {', '.join(MASK_KINDS)}")
    build = {
        "causal": lambda: MaskCase("causal", n, ma.UNLIMITED, 0),
        "window": lambda: MaskCase(f"causal window {window}", n, window - 1, 0),
        "documents": lambda: MaskCase("causal documents", n, ma.UNLIMITED, 0,
                                      docs=document_ids(n, seed=n)),
        "random": lambda: MaskCase(
            f"random blocks {RANDOM_DENSITY:.0%}", n, ma.UNLIMITED, ma.UNLIMITED,
            table=sf.random_block_table(n, FLEX_BLOCK, RANDOM_DENSITY, seed=n)),
    }
    return [build[kind]() for kind in kinds]


def mask_grid(b: Bench, torch):
    """(N, dtype, D) of the masks part, B = 1 and H = 16 (2 in the interpreter)."""
    if b.mode == "interpreter":
        return [(128, torch.float16, 32)], 2
    if b.mode == "quick":
        return [(8192, torch.float16, 128)], 16
    return [(n, dtype, d) for d in (128, 64) for dtype in (torch.float16, torch.bfloat16)
            for n in (8192, 16384, 32768)], 16


def bench_masks(b: Bench, kernels, ma, sf, write_rows) -> list[dict]:
    """Every mask of mask_cases at every (N, dtype, D) of mask_grid; write_rows(rows) after
    each shape, so that a run cut short keeps what it measured."""
    torch = b.torch
    from flashcourse.kernels import host

    grid, H = mask_grid(b, torch)
    if b.fair_flex:
        grid = [(n, dtype, d) for n, dtype, d in grid
                if str(dtype)[6:] in b.fair_flex_dtypes]
    if b.mask_head_dims:
        grid = [(n, dtype, d) for n, dtype, d in grid if d in b.mask_head_dims]
    window = 32 if b.mode == "interpreter" else WINDOW
    flex, create_block_mask = flex_functions(b)
    rows = []
    for n, dtype, D in grid:
        gen = torch.Generator(device=b.device).manual_seed(n + D)
        q, k, v = (torch.randn(1, H, n, D, device=b.device, dtype=dtype, generator=gen)
                   for _ in range(3))
        for case in mask_cases(ma, sf, n, window):
            row = mask_case(b, kernels, ma, sf, flex, create_block_mask, q, k, v, case,
                            dense_causal=host.forward if case.name == "causal" else None)
            rows.append(row)
            print(f"masks: {case.name:20s} N={n:6d} {row['dtype']:8s} D={D:3d} reference "
                  f"{row.get('reference sparse ms', 0):.3f} ms, teaching "
                  f"{row.get('ours ms', 0):.3f}, flex {row.get('flex ms', 0):.3f}, dense causal "
                  f"{row.get('dense reference causal ms', 0):.3f}, ref/flex "
                  f"{row.get('reference vs flex', 0):.2f}", flush=True)
        write_rows(rows)
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


def interleaved(b: Bench, candidates: dict, repeats: int = REPEATS) -> dict:
    """{name: (median, min, max)} in ms of `repeats` timings of each candidate taken round-robin
    (each a do_bench median with the L2 flushed), so that a drift of the GPU's clock touches
    every candidate alike; every other round runs them in reverse order, so that no candidate
    always follows the same one. The interpreter runs each once (time 0)."""
    if b.mode == "interpreter":
        for fn in candidates.values():
            fn()
        return {name: (0.0, 0.0, 0.0) for name in candidates}
    import statistics

    import triton.testing

    times = {name: [] for name in candidates}
    names = list(candidates)
    for round_index in range(repeats):
        for name in names if round_index % 2 == 0 else names[::-1]:
            fn = candidates[name]
            times[name].append(float(triton.testing.do_bench(fn, warmup=5, rep=25,
                                                             return_mode="median")))
    return {name: (statistics.median(t), min(t), max(t)) for name, t in times.items()}


def spread_columns(row: dict, name: str, timing) -> None:
    """{name} ms (the median) and {name} spread % ((slowest - fastest) / median)."""
    median, fastest, slowest = timing
    row[f"{name} ms"] = median
    row[f"{name} spread %"] = 100.0 * (slowest - fastest) / median if median else 0.0


def checked(b: Bench, row: dict, name: str, fn, reference, failures_fatal: bool,
            where: str | None = None) -> bool:
    """Run fn once and compare it with the float32 reference: True if it may be timed. A
    failure of a fatal one goes into b.failures with `where` (default: the row's mask and
    shape)."""
    where = where or f"{row['mask']}, N={row['N']}, D={row['D']}, {row['dtype']}"
    try:
        result = fn()
        b.sync()
    except Exception as err:  # noqa: BLE001  (a baseline that fails is reported, not fatal)
        row[f"{name} note"] = f"failed: {type(err).__name__}: {str(err)[:120]}"
        if failures_fatal:
            b.failures.append(f"{name}, {where}: {row[f'{name} note']}")
        return False
    row[f"{name} max err"] = error = max_error(result, reference)
    if error <= TOLERANCE[row["dtype"]]:
        return True
    row[f"{name} note"] = f"wrong (max error {error:.3g}), not timed"
    if failures_fatal:
        b.failures.append(f"{name}, {where}: max error {error:.3g} against float32 attention")
    return False


def mask_case(b: Bench, kernels, ma, sf, flex, create_block_mask, q, k, v, case: MaskCase,
              dense_causal) -> dict:
    """One mask at one shape: check the reference sparse kernel, the lesson's teaching kernel,
    FlexAttention, SDPA (and on the causal mask the dense reference forward, `dense_causal`,
    and SDPA's causal path), then time them interleaved."""
    torch = b.torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, n, D = q.shape
    block_m, block_n, warps, stages = ma.sparse_config(D)
    teaching_lists = ma.block_list_tensors(case.kinds(ma, sf, block_m, block_n), b.device)
    config = sf.sparse_reference_config(D, case.left, case.docs)
    plan = sf.sparse_plan(n, D, b.device, case.left, case.right, case.docs,
                          kinds=case.kinds(ma, sf, *config[:2]))
    tiles = plan.tile_counts
    ids_t = torch.from_numpy(case.ids()).to(b.device)
    dense = torch.from_numpy(case.dense(ma, sf)).to(b.device)
    out = torch.empty_like(q)

    def teaching():
        ma.launch_sparse(kernels.sparse_attention_kernel, q, k, v, out, ids_t, case.left,
                         case.right, teaching_lists, block_m, block_n, num_warps=warps,
                         num_stages=stages)
        return out

    candidates = {"reference sparse": lambda: sf.sparse_forward(q, k, v, plan)[0],
                  "ours": teaching,
                  "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense)}
    if b.fair_flex:  # only the reference against FlexAttention, to keep the run short
        candidates = {"reference sparse": candidates["reference sparse"]}
    elif dense_causal is not None:
        def sdpa_causal():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        candidates["dense reference causal"] = lambda: dense_causal(q, k, v, causal=True)[0]
        candidates["sdpa is_causal"] = sdpa_causal
    halves, full_range, partial_tests, row_ranges = sf.reference_variant(plan, D)
    row = {"mask": case.name, "N": n, "dtype": str(q.dtype)[6:], "B": B, "H": H, "D": D,
           "BLOCK_M": block_m, "BLOCK_N": block_n,
           "reference config": "x".join(str(x) for x in config),
           "reference halves": halves, "reference full range": full_range,
           "reference partial tests": partial_tests, "reference row ranges": row_ranges,
           "tiles computed": (tiles["full"] + tiles["partial"]) / sum(tiles.values()),
           "partial tiles": tiles["partial"]}
    reference = masked_reference(torch, q, k, v, dense)
    ours_names = ("reference sparse", "ours", "dense reference causal")
    timed = {name: fn for name, fn in candidates.items()
             if checked(b, row, name, fn, reference, failures_fatal=name in ours_names)}
    if flex is not None and b.flex_allowed("masks"):
        flex_call = flex_mask_call(b, ma, sf, flex, create_block_mask, q, k, v, case, row)
        if flex_call is not None and checked(b, row, "flex", flex_call, reference, False):
            timed["flex"] = flex_call
    else:
        row["flex note"] = "not run (time budget or no FlexAttention)"
    del reference  # dense stays: SDPA's candidate reads it
    for name, timing in interleaved(b, timed).items():
        spread_columns(row, name, timing)
    reference_ms = row.get("reference sparse ms")
    if reference_ms:
        for name, column in (("ours", "reference vs teaching"), ("flex", "reference vs flex"),
                             ("dense reference causal", "reference vs dense causal")):
            if row.get(f"{name} ms"):
                row[column] = row[f"{name} ms"] / reference_ms
    if row.get("ours ms"):
        if row.get("sdpa ms"):
            row["ours vs sdpa"] = row["sdpa ms"] / row["ours ms"]
        if row.get("flex ms"):
            row["ours vs flex"] = row["flex ms"] / row["ours ms"]
    return row


class FairFlexScript(NamedTuple):
    """What a script needs to time the reference sparse forward beside FlexAttention written
    fairly (one mask_mod per mask): its arguments, the bench, flex and the kernel modules."""

    args: argparse.Namespace
    b: Bench
    flex: object
    create_block_mask: object
    ma: types.ModuleType  # flashcourse.kernels.modern_attention
    sf: types.ModuleType  # flashcourse.kernels.sparse_forward


def fair_flex_script(argv, doc: str, script: str, what: str, smoke: str, add_arguments=None):
    """bench.script_args (--out, --interpreter: `smoke` says what it runs; add_arguments(parser)
    adds the script's own), then the fair FlexAttention bench; None where there is no CUDA GPU
    and no --interpreter."""
    started = bench_script(argv, doc, script, what, smoke, add_arguments)
    if started is None:
        return None
    args, b = started
    from flashcourse.kernels import modern_attention as ma
    from flashcourse.kernels import sparse_forward as sf

    b.fair_flex = True
    return FairFlexScript(args, b, *flex_functions(b), ma, sf)


def bench_script(argv, doc: str, script: str, what: str, smoke: str, add_arguments=None):
    """(args, Bench) of a gpu/ script taking bench.script_args (--out, --interpreter: `smoke`
    says what it runs; add_arguments(parser) adds the script's own); None where there is no
    CUDA GPU and no --interpreter."""
    from flashcourse import bench

    args = bench.script_args(argv, doc, script, what, smoke, add_arguments)
    if args is None:
        return None
    return args, Bench("interpreter" if args.interpreter else "full")


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
_FLEX_RULES: dict = {}  # sequence length -> (window, documents, block table, mask_mod)


def fair_flex_rule(b: Bench, case: MaskCase, ids_t):
    """The mask as a FlexAttention user writes it: one mask_mod per mask, with the window as a
    Python number and only what the mask reads (one compilation per mask and shape)."""
    block = FLEX_BLOCK
    if case.table is not None:
        table = b.torch.from_numpy(case.table).to(b.device)
        return lambda batch, head, q_idx, kv_idx: table[q_idx // block, kv_idx // block]
    if case.docs is not None:
        return lambda batch, head, q_idx, kv_idx: ((q_idx >= kv_idx)
                                                    & (ids_t[q_idx] == ids_t[kv_idx])
                                                    & (ids_t[q_idx] >= 0))
    from flashcourse.kernels import modern_attention as ma

    if case.left < ma.UNLIMITED:
        left = case.left
        return lambda batch, head, q_idx, kv_idx: (q_idx >= kv_idx) & (q_idx - kv_idx <= left)
    return lambda batch, head, q_idx, kv_idx: q_idx >= kv_idx


def flex_rule(b: Bench, case: MaskCase, ids_t):
    """The lesson's mask rule, and a table of visible blocks, as one FlexAttention mask_mod per
    sequence length, reading the window, the documents and the table from tensors updated in
    place: every mask of one size then reuses one compiled kernel (Python numbers captured in
    the closure would be compiled in, one compilation per mask). A rule mask has an all-true
    table; the random mask an unlimited window and one document."""
    torch = b.torch
    n = case.n
    if n not in _FLEX_RULES:
        window = torch.zeros(2, dtype=torch.int64, device=b.device)
        docs = torch.zeros(n, dtype=torch.int32, device=b.device)
        blocks = -(-n // FLEX_BLOCK)
        table = torch.ones(blocks, blocks, dtype=torch.bool, device=b.device)

        def mask_mod(batch, head, q_idx, kv_idx):
            return ((kv_idx - q_idx <= window[1]) & (q_idx - kv_idx <= window[0])
                    & (docs[q_idx] == docs[kv_idx]) & (docs[q_idx] >= 0)
                    & table[q_idx // FLEX_BLOCK, kv_idx // FLEX_BLOCK])

        _FLEX_RULES[n] = (window, docs, table, mask_mod)
    window, docs, table, mask_mod = _FLEX_RULES[n]
    window.copy_(torch.tensor([case.left, case.right]))
    docs.copy_(ids_t)
    table.fill_(True) if case.table is None else table.copy_(torch.from_numpy(case.table))
    return mask_mod


def flex_mask_call(b: Bench, ma, sf, flex, create_block_mask, q, k, v, case: MaskCase, row):
    """FlexAttention on the same mask: its BlockMask is built from the same rule, and its
    counts of FULL and PARTIAL blocks per query block must equal our block map's at its tile
    size (128 x 128) ("flex block map same"). Returns the call to check and time (None if
    building it failed); compilation happens at the check."""
    start = time.time()
    n = q.shape[2]
    try:
        rule = fair_flex_rule if b.fair_flex else flex_rule
        mask_mod = rule(b, case, b.torch.from_numpy(case.ids()).to(b.device))
        block_mask = create_block_mask(mask_mod, None, None, n, n, device=b.device,
                                       BLOCK_SIZE=FLEX_BLOCK)
        full_counts, _, part_counts, _ = ma.block_lists(case.kinds(ma, sf, FLEX_BLOCK,
                                                                   FLEX_BLOCK))
        row["flex block map same"] = same = bool(
            np.array_equal(block_mask.full_kv_num_blocks.flatten().cpu().numpy(), full_counts)
            and np.array_equal(block_mask.kv_num_blocks.flatten().cpu().numpy(), part_counts))
        if not same:
            b.failures.append(f"block map differs from FlexAttention's BlockMask, N={n}, "
                              f"{case.name}")
    except Exception as err:  # noqa: BLE001  (a baseline that fails is reported, not fatal)
        row["flex note"] = f"failed: {type(err).__name__}: {str(err)[:120]}"
        return None
    finally:
        b.flex_seconds["masks"] += time.time() - start

    def call():
        begun = time.time()
        try:
            return flex(q, k, v, block_mask=block_mask)
        finally:
            b.flex_seconds["masks"] += time.time() - begun

    return call


# ---------------------------------------------------------------- teaching kernel to reference


def bench_sparse_steps(b: Bench, kernels, ma, sf, sweep: bool) -> tuple[list[dict], list[dict]]:
    """The step from the teaching kernel to the reference, one change at a time, at N = 16k,
    fp16, D = 64 and 128, every mask: (rows of the steps, rows of the tile sweep if `sweep`).
    Steps: 0 the teaching kernel; 1 the reference kernel with pointer loads, the teaching
    kernel's tiles and program order (its inner loop: no bounds checks on FULL tiles, the scale
    folded into exp2, no safe max on FULL tiles, P V accumulated by the MMA); 2 longest block
    lists first; 3 tensor descriptors; 4 the reference's own tiles; 5 (D = 64) each query block
    as two row halves (sparse_forward(halves=True), lesson 8's step 7); 6 (masks whose FULL
    lists are runs of consecutive blocks) the last step with those lists walked without their
    loads (full_range=True). At D = 64 the reference takes steps 5 and 6 by default
    (sf.reference_variant); at D = 128 step 6 is timed to show why it does not. 7 (masks with
    PARTIAL tiles) the reference's variant of steps 5 and 6 with each PARTIAL tile masked only
    by the tests it needs (partial_tests=True: the reference's default at D = 128 on masks with
    documents whose rows do not each see one range of keys); 6a (every mask) step 5 with the
    lists' entries loaded a step ahead (entries_ahead=True, an experiment; not part of step 6's
    chain); 7s the same as 7 with those tests applied as selects, without branches
    (tests_as_selects=True, an experiment); 8 (masks whose rows each see one range of
    keys) the variant of step 7 with each PARTIAL tile masked by its rows' ranges instead
    (row_ranges=True: the reference's default at D = 128 on masks with documents). At D = 64
    a sliding window's reference tiles are query blocks of 64 rows (sf.sparse_reference_config),
    whose halves would not fill the tensor cores: no step 5 there."""
    torch = b.torch
    n, H = (128, 2) if b.mode == "interpreter" else (16384, 16)
    window = 32 if b.mode == "interpreter" else WINDOW
    steps, sweeps = [], []
    for D in ((32,) if b.mode == "interpreter" else (128, 64)):
        gen = torch.Generator(device=b.device).manual_seed(D)
        q, k, v = (torch.randn(1, H, n, D, device=b.device, dtype=torch.float16, generator=gen)
                   for _ in range(3))
        for case in mask_cases(ma, sf, n, window):
            configs = SWEEP_CONFIGS.get(D, []) if sweep and b.mode != "interpreter" else []
            case_steps, case_sweeps = step_case(b, kernels, ma, sf, q, k, v, case, configs)
            steps += case_steps
            sweeps += case_sweeps
    return steps, sweeps


def step_case(b: Bench, kernels, ma, sf, q, k, v, case: MaskCase, configs):
    """bench_sparse_steps at one mask and head dim, and the reference at each of `configs`."""
    torch = b.torch
    n, D = q.shape[2], q.shape[3]
    teaching_config = ma.sparse_config(D)
    bm, bn, warps, stages = teaching_config
    lists = ma.block_list_tensors(case.kinds(ma, sf, bm, bn), b.device)
    ids_t = torch.from_numpy(case.ids()).to(b.device)
    out = torch.empty_like(q)

    def teaching():
        ma.launch_sparse(kernels.sparse_attention_kernel, q, k, v, out, ids_t, case.left,
                         case.right, lists, bm, bn, num_warps=warps, num_stages=stages)
        return out

    def plan_for(config, longest_first=True):
        return sf.sparse_plan(n, D, b.device, case.left, case.right, case.docs,
                              kinds=case.kinds(ma, sf, *config[:2]), config=config,
                              longest_first=longest_first)

    def reference(config, longest_first=True, use_tma=True, halves=False, full_range=False,
                  partial_tests=False, row_ranges=False, tests_as_selects=False,
                  entries_ahead=False):
        plan = plan_for(config, longest_first)
        return lambda: sf.sparse_forward(q, k, v, plan, use_tma=use_tma, halves=halves,
                                         full_range=full_range, partial_tests=partial_tests,
                                         row_ranges=row_ranges,
                                         tests_as_selects=tests_as_selects,
                                         entries_ahead=entries_ahead)[0]

    final = sf.sparse_reference_config(D, case.left, case.docs)
    variants = {"0 teaching kernel": teaching,
                "1 reference inner loop": reference(teaching_config, False, False),
                "2 + longest first": reference(teaching_config, True, False),
                "3 + tensor descriptors": reference(teaching_config, True, True),
                "4 + reference tiles": reference(final)}
    final_plan = plan_for(final)
    halves, full_range = sf.reference_variant(final_plan, D)[:2]  # D = 64: the dense step 7
    if halves:
        variants["5 + two row halves"] = reference(final, halves=True)
    # every mask: the lists' entries loaded a step ahead (where the lists are runs, beside
    # step 6: how much of its gain is the tiles in flight, not the loads)
    variants["6a step 5 with list entries a step ahead (not 6)"] = reference(
        final, halves=halves, entries_ahead=True)
    if final_plan.full_ranges:  # timed at D = 128 too, where the reference leaves it off
        variants["6 + FULL lists walked as runs"] = reference(final, halves=halves,
                                                              full_range=True)
    if final_plan.tile_counts["partial"]:  # on the reference's own variant
        variants["7 + PARTIAL tiles given only their tests"] = reference(
            final, halves=halves, full_range=full_range, partial_tests=True)
        variants["7s step 7 with the tests as selects"] = reference(
            final, halves=halves, full_range=full_range, partial_tests=True,
            tests_as_selects=True)
        if final_plan.row_ranges is not None:
            variants["8 PARTIAL tiles masked by row ranges (not 7)"] = reference(
                final, halves=halves, full_range=full_range, row_ranges=True)
    tried = {"x".join(map(str, c)): reference(c) for c in configs}
    expected = masked_reference(torch, q, k, v, torch.from_numpy(case.dense(ma, sf)).to(b.device))
    errors = {name: max_error(fn(), expected) for name, fn in {**variants, **tried}.items()}
    bad = [name for name, error in errors.items() if not error <= TOLERANCE["float16"]]
    if bad:
        b.failures.append(f"sparse steps {bad}, {case.name}, D={D}: max errors "
                          f"{[errors[name] for name in bad]}")
        return [], []
    del expected
    timings = interleaved(b, {**variants, **tried})
    base = timings["0 teaching kernel"][0]
    steps, sweeps = [], []
    for name in variants:
        row = {"mask": case.name, "N": n, "dtype": "float16", "D": D, "step": name}
        spread_columns(row, "time", timings[name])
        row["vs teaching"] = base / row["time ms"] if row["time ms"] else 0.0
        steps.append(row)
    for name in tried:
        row = {"mask": case.name, "N": n, "dtype": "float16", "D": D, "config": name}
        spread_columns(row, "time", timings[name])
        sweeps.append(row)
    print(f"steps: {case.name:20s} D={D:3d} " + ", ".join(
        f"{name.split()[0]}: {timings[name][0]:.3f}" for name in variants) +
        ("; sweep " + ", ".join(f"{c}: {timings[c][0]:.3f}" for c in tried) if tried else ""),
        flush=True)
    return steps, sweeps


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


class DecodeInputs(NamedTuple):
    """One shape of the decoding grid, made once for every kernel timed on it."""
    row: dict           # the shape's columns
    q: object           # (B, H, D)
    k: object           # (B, H_KV, N, D), contiguous: SDPA's cache
    v: object
    lengths: object     # (B,) int32, every sequence N keys long
    k_pages: object     # (B * N / page, page, H_KV, D): the same keys in shuffled pages
    v_pages: object
    table: object       # (B, N / page) int32
    reference: object   # float32 attention, (B, H, D)
    sms: int
    kv_bytes: int

    def plan(self, pools=None, **options):
        """The reference decoding step (decode.DecodePlan, planned once, outside the timings)
        on this shape's paged cache, or on `pools` (K, V) holding its pages another way."""
        from flashcourse.kernels import decode

        k_pages, v_pages = pools or (self.k_pages, self.v_pages)
        return decode.DecodePlan(self.q, k_pages, v_pages, self.table, self.lengths,
                                 max_len=self.row["cache"], num_sms=self.sms, **options)

    def heads_together(self):
        """This shape's pages stored with each K/V head's rows of a page together."""
        from flashcourse.kernels import decode

        return decode.heads_together(self.k_pages), decode.heads_together(self.v_pages)


def decode_inputs(b: Bench, dtype, d, h, h_kv, batch, cache) -> DecodeInputs:
    """Random q, K and V of one decoding shape (seeded by it), their paged copy (pages of
    PAGE_SIZE keys; 16 in the interpreter) and the float32 reference."""
    torch = b.torch
    page_size = 16 if b.mode == "interpreter" else PAGE_SIZE
    gen = torch.Generator(device=b.device).manual_seed(cache + batch)
    q = torch.randn(batch, h, d, device=b.device, dtype=dtype, generator=gen)
    k, v = (torch.randn(batch, h_kv, cache, d, device=b.device, dtype=dtype, generator=gen)
            for _ in range(2))
    lengths = torch.full((batch,), cache, dtype=torch.int32, device=b.device)
    kv_bytes = 2 * k.numel() * k.element_size()
    row = {"batch": batch, "cache": cache, "dtype": str(dtype)[6:], "d": d, "heads": h,
           "kv heads": h_kv, "KV MiB": kv_bytes / 2**20}
    sms = (4 if b.mode == "interpreter" else
           torch.cuda.get_device_properties(0).multi_processor_count)
    k_pages, v_pages, table = paged_copy(torch, k, v, page_size, seed=cache)
    return DecodeInputs(row, q, k, v, lengths, k_pages, v_pages, table,
                        decode_reference(torch, q, k, v), sms, kv_bytes)


def sdpa_decode(inputs: DecodeInputs, backend):
    """SDPA's `backend` on the contiguous cache, as a call returning (B, H, D)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    q4, k, v = inputs.q[:, :, None], inputs.k, inputs.v                # q4: (B, H, 1, D)
    gqa = q4.shape[1] != k.shape[1]

    def sdpa():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q4, k, v, enable_gqa=gqa)[:, :, 0]
    return sdpa


def row_line(row: dict) -> str:
    """A row as one printed line: floats to 3 decimals, flags with their column's name."""
    return ", ".join(f"{key} {value:.3f}" if isinstance(value, float) else
                     f"{key} {value}" if isinstance(value, bool) else f"{value}"
                     for key, value in row.items())


def measure_each(b: Bench, out, shapes, measure, summary) -> int:
    """rows = measure(b, *shape) for each shape, each printed as summary(row) and written to
    `out` (when given) as soon as it is made, so that a call cut short keeps its rows; then
    the failures. Returns the exit status: 1 if any check failed."""
    from flashcourse import bench

    rows = []
    for shape in shapes:
        rows.append(measure(b, *shape))
        print(summary(rows[-1]), flush=True)
        if out is not None:
            bench.write_csv(out, rows)
    for failure in b.failures:
        print("FAIL", failure)
    return 1 if b.failures else 0


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


_READ_ONLY: dict[int, tuple[float, float]] = {}  # bytes timed -> (GB/s, ms), per run


def read_only_figure(b: Bench, kv_bytes: int) -> tuple[float, float]:
    """(GB/s, ms) of the read-only kernel (decode.read_only, tiles.READ_ONLY_CONFIG) reading
    kv_bytes, replayed in a CUDA graph (timed on at most READ_BYTES_CAP and scaled: it runs at
    full bandwidth long before that); the measured ceiling of a kernel that only reads."""
    from flashcourse.kernels import decode, tiles

    size = min(kv_bytes, READ_BYTES_CAP)
    if size not in _READ_ONLY:
        per_sm, block, warps = tiles.READ_ONLY_CONFIG
        sms = 4 if b.mode == "interpreter" else (
            b.torch.cuda.get_device_properties(0).multi_processor_count)
        buffer = b.torch.zeros(size, dtype=b.torch.uint8, device=b.device)
        programs = min(per_sm * sms, -(-size // (4 * block)))
        median, _, _ = b.time_graph(lambda: decode.read_only(buffer, programs, block, warps))
        _READ_ONLY[size] = (size / (median * 1e-3) / 1e9 if median else 0.0, median)
        del buffer
    rate, median = _READ_ONLY[size]
    return rate, median * kv_bytes / size


HEADS_TOGETHER = "reference, heads together"  # the pool as (pages, H_KV, PAGE_SIZE, D)
# the reference step's other ways of reading K and V (decode.KV_LOADS), each column's pool
# layout and kv_loads
REFERENCE_WAYS = {HEADS_TOGETHER: (True, "rows"),
                  "reference, pages ahead": (False, "pages ahead"),
                  "reference, TMA pages": (False, "tma"),
                  "reference, TMA pages, heads together": (True, "tma")}
GRAPHED = ("ours split-KV", "reference", *REFERENCE_WAYS, "sdpa flash",
           "sdpa cudnn")  # also timed in a graph


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
              f"{row.get('sdpa flash GB/s', 0):7.0f}, flex {row.get('flex GB/s', 0):7.0f}; "
              f"in a graph: reference {row.get('reference graph GB/s', 0):7.0f} (heads "
              f"together {row.get(HEADS_TOGETHER + ' graph GB/s', 0):7.0f}, pages ahead "
              f"{row.get('reference, pages ahead graph GB/s', 0):7.0f}, TMA pages "
              f"{row.get('reference, TMA pages graph GB/s', 0):7.0f}), cudnn "
              f"{row.get('sdpa cudnn graph GB/s', 0):7.0f}, read-only "
              f"{row['read-only GB/s']:7.0f}", flush=True)
    return rows


def decode_case(b: Bench, kernels, ma, flex, backends, dtype, d, h, h_kv, batch, cache) -> dict:
    """One decoding shape: check every kernel against float32 math, then time it."""
    torch = b.torch
    inputs = decode_inputs(b, dtype, d, h, h_kv, batch, cache)
    row, q, k, v, reference = inputs.row, inputs.q, inputs.k, inputs.v, inputs.reference
    sms, kv_bytes = inputs.sms, inputs.kv_bytes
    block_n = ma.tiles.DECODE_BLOCK_N["interpreter" if b.mode == "interpreter" else "gpu"]
    dtype_name = row["dtype"]
    tolerance = TOLERANCE[dtype_name]
    split = kernels.choose_split_size(batch, h_kv, cache, sms, block_n)
    row["split size"], row["splits"] = split, ma.split_count(cache, split)

    def decoder(split_size):
        splits = ma.split_count(cache, split_size)
        m = torch.empty(batch, h, splits, device=b.device)
        l = torch.empty_like(m)
        o = torch.empty(batch, h, splits, d, device=b.device)
        out = torch.empty_like(q)

        def run():
            ma.launch_paged_split(kernels.paged_split_kernel, q, inputs.k_pages,
                                  inputs.v_pages, inputs.table, inputs.lengths, m, l, o,
                                  split_size, block_n)
            ma.launch_merge(kernels.merge_states_kernel, m, l, o, out)
            return out
        return run

    ours = decoder(split)
    paged = decoder(ma.cdiv(cache, block_n) * block_n)  # one split per sequence
    plan = inputs.plan()
    row["reference splits"], row["reference BLOCK_N"] = plan.splits, plan.block_n
    pools = {False: None, True: inputs.heads_together()}
    candidates = {"ours split-KV": ours, "ours paged, unsplit": paged, "reference": plan.run}
    for name, (together, kv_loads) in REFERENCE_WAYS.items():
        candidates[name] = inputs.plan(pools[together], kv_loads=kv_loads).run
    for name, backend in backends.items():
        if name == "sdpa math" and kv_bytes > 2**30:
            row[f"{name} note"] = "not run (K/V over 1 GiB: the math path repeats them)"
            continue
        candidates[name] = sdpa_decode(inputs, backend)
    if flex is not None and b.flex_allowed("decode"):
        q4 = q[:, :, None]

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
            if name.startswith(("ours", "reference")):
                b.failures.append(f"{name}, {row}: raised {type(err).__name__}: {err}")
            row[f"{name} note"] = f"failed: {type(err).__name__}: {str(err)[:100]}"
            continue
        finally:
            if name == "flex":
                b.flex_seconds["decode"] += time.time() - start
        error = max_error(result, reference)
        row[f"{name} max err"] = error
        if not error <= tolerance:
            if name.startswith(("ours", "reference")):
                b.failures.append(f"{name}, batch {batch}, cache {cache}, {dtype_name}, "
                                  f"d={d}, {h}/{h_kv} heads: max error {error:.3g}")
            row[f"{name} note"] = f"wrong (max error {error:.3g}), not timed"
            continue
        timed_columns(row, name, b.time(fn), kv_bytes)
        if name in GRAPHED:
            try:
                timed_columns(row, f"{name} graph", b.time_graph(fn), kv_bytes)
            except Exception as err:  # noqa: BLE001  (a backend that cannot be captured)
                row[f"{name} graph note"] = f"failed: {type(err).__name__}: {str(err)[:100]}"
    row["read-only GB/s"], row["read-only ms"] = read_only_figure(b, kv_bytes)
    share_columns(row)
    return row


def share_columns(row: dict) -> None:
    """Each graph-replayed decoding kernel as % of HBM's datasheet bandwidth and of the
    read-only kernel's, and the reference against cuDNN (speed ratios, eager and graph)."""
    from flashcourse.hardware import H200_HBM_TBS

    for name in ("ours split-KV", "reference", *REFERENCE_WAYS, "sdpa cudnn"):
        rate = row.get(f"{name} graph GB/s")
        if rate and row["read-only GB/s"]:
            row[f"{name} % of HBM"] = 100 * rate / (H200_HBM_TBS * 1000)
            row[f"{name} % of read-only"] = 100 * rate / row["read-only GB/s"]
    for name in ("reference", *REFERENCE_WAYS):
        for mode in ("", " graph"):
            if row.get(f"{name}{mode} ms") and row.get(f"sdpa cudnn{mode} ms"):
                row[f"{name} vs cudnn{mode}"] = (row[f"sdpa cudnn{mode} ms"]
                                                 / row[f"{name}{mode} ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the CSV files")
    parser.add_argument("--quick", action="store_true", help="a small grid, under a minute")
    parser.add_argument("--interpreter", action="store_true",
                        help="smoke test on a CPU: tiny shapes, nothing timed")
    parser.add_argument("--part", choices=("masks", "steps", "decode"), action="append",
                        help="run only these parts (repeatable; default: all three)")
    parser.add_argument("--fair-flex", action="store_true",
                        help="the masks part times only the reference against FlexAttention "
                        "with one minimal mask_mod per mask (09-masks-flex.csv)")
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), action="append",
                        help="with --fair-flex: the dtypes to time (repeatable; default "
                        "float16)")
    parser.add_argument("--sweep", action="store_true",
                        help="the steps part also times the reference sparse kernel's "
                        "candidate tiles (SWEEP_CONFIGS)")
    parser.add_argument("--d", type=int, action="append",
                        help="the masks part's head dims (repeatable; default 128 and 64)")
    args = parser.parse_args()
    parts = args.part or ["masks", "steps", "decode"]
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
    from flashcourse.kernels import sparse_forward as sf  # after setup: it defines kernels

    kernels = load_kernels()
    b = Bench(mode)
    b.fair_flex = args.fair_flex
    b.fair_flex_dtypes = tuple(args.dtype or ("float16",))
    b.mask_head_dims = tuple(args.d or ())
    written = []
    if "steps" in parts:
        steps, sweeps = bench_sparse_steps(b, kernels, ma, sf, args.sweep)
        bench_module.write_csv(args.out / "09-sparse-steps.csv", steps)
        written.append(f"09-sparse-steps.csv ({len(steps)} rows)")
        if sweeps:
            bench_module.write_csv(args.out / "09-sparse-tiles.csv", sweeps)
            written.append(f"09-sparse-tiles.csv ({len(sweeps)} rows)")
    if "masks" in parts:
        masks_file = "09-masks-flex.csv" if args.fair_flex else "09-masks.csv"
        masks = bench_masks(b, kernels, ma, sf, lambda rows: bench_module.write_csv(
            args.out / masks_file, rows))
        written.append(f"{masks_file} ({len(masks)} rows)")
    if "decode" in parts:
        decode = bench_decode(b, kernels, ma)
        bench_module.write_csv(args.out / "09-decode.csv", decode)
        written.append(f"09-decode.csv ({len(decode)} rows)")
    elapsed = time.time() - b.started
    print(f"wrote {', '.join(written)} in {args.out} in {elapsed:.0f} s "
          f"(FlexAttention, compilation included: {sum(b.flex_seconds.values()):.0f} s)")
    for failure in b.failures:
        print("FAIL", failure)
    return 1 if b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
