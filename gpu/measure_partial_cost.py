"""What the masked code of PARTIAL tiles costs the reference sparse forward (lesson 9).

    python gpu/measure_partial_cost.py [--out assets/results/09-partial-cost.csv]
    python gpu/measure_partial_cost.py --interpreter   # smoke test on a CPU, nothing timed

On the two masks where the reference sparse forward with every PARTIAL tile fully masked
stays under 1.15x FlexAttention (the causal window at d = 64, the causal documents at
d = 128), fp16, B = 1, H = 16, N = 8k to 32k, nine calls are timed side by side, median of
bench_modern_attention.REPEATS interleaved timings:

* the reference sparse forward with every test on every PARTIAL tile ("every test",
  partial_tests=False), checked against float32 attention first;
* the same with each PARTIAL tile masked only by the tests it needs ("partial tests",
  partial_tests=True: the default at d = 128 with documents before row ranges), checked too;
* the same with those tests applied as selects, without branches ("tests as selects",
  tests_as_selects=True, an experiment: ptxas serializes the wgmma instructions of the
  branches' form on plans with documents), checked first too;
* the same with each PARTIAL tile masked by its rows' ranges of keys ("row ranges",
  row_ranges=True: two compares per pair, no key ids; the reference's default at d = 128 with
  documents since this table), checked first too;
* the same kernel on the same tiles with every PARTIAL tile sent down the FULL path (no mask,
  no safe max, no bounds checks). Its output is wrong, so it is never checked and never a
  kernel to use: it is a bound on what cheaper masked code could win on those tiles. Timed
  twice: as the reference's default variant compiles it ("partial as full"), and compiled
  without the partial tests' code ("partial as full, every-test code": its wgmma instructions
  not serialized; no PARTIAL tile runs, so which masked code the binary holds changes only
  how it was compiled);
* the reference on query blocks of 64 rows (tiles.SPARSE_SMALL_BLOCKS, a plan of its own): its
  default variant for that plan ("64-row blocks": no halves, each a 32-row matmul), and with
  its FULL lists walked as runs and the partial tests as selects ("64-row blocks, runs,
  selects"), both checked first;
* FlexAttention compiled with the mask's own mask_mod (the fair one of --fair-flex), checked
  first, its block map equal to ours at 128 x 128.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "gpu"))

import bench_modern_attention as bma  # noqa: E402

CASES = (("window", 64), ("documents", 128))  # (mask kind, D): the misses
SIZES = (8192, 16384, 32768)
HEADS = 16


def main(argv=None) -> int:
    setup = bma.fair_flex_script(
        argv, __doc__, "gpu/measure_partial_cost.py", "times masked tiles",
        "smoke test on a CPU: N = 128, H = 2, a window of 32, untimed")
    if setup is None:
        return 0
    args, b, flex, create_block_mask, ma, sf = setup
    sizes, heads, window = ((128,), 2, 32) if args.interpreter else (SIZES, HEADS, bma.WINDOW)
    cells = [(kind, d, n) for kind, d in CASES for n in sizes]

    def measure(b, kind, d, n):
        return measure_cell(b, bma, ma, sf, flex, create_block_mask, kind, d, n, heads, window)
    return bma.measure_each(b, args.out, cells, measure, bma.row_line)


def measure_cell(b, bma, ma, sf, flex, create_block_mask, kind, d, n, heads, window) -> dict:
    """One (mask, d, N): check, then time the reference with every PARTIAL tile fully masked,
    with partial tests (branches and selects), with row ranges, its PARTIAL-as-FULL bound
    (compiled two ways) and flex."""
    import numpy as np
    import torch

    gen = torch.Generator(device=b.device).manual_seed(n + d)
    q, k, v = (torch.randn(1, heads, n, d, device=b.device, dtype=torch.float16,
                           generator=gen) for _ in range(3))
    (case,) = bma.mask_cases(ma, sf, n, window, (kind,))
    config = sf.sparse_reference_config(d)
    kinds = case.kinds(ma, sf, *config[:2])
    plan = sf.sparse_plan(n, d, b.device, case.left, case.right, case.docs, kinds=kinds,
                          config=config)
    unmasked = sf.sparse_plan(n, d, b.device, case.left, case.right, case.docs,
                              kinds=np.where(kinds == ma.PARTIAL, ma.FULL, kinds), config=config)
    tiles = plan.tile_counts
    row = {"mask": case.name, "N": n, "dtype": "float16", "D": d,
           "partial share of computed tiles": tiles["partial"]
           / (tiles["full"] + tiles["partial"])}
    reference = bma.masked_reference(torch, q, k, v,
                                     torch.from_numpy(case.dense(ma, sf)).to(b.device))
    timed = {"partial as full": lambda: sf.sparse_forward(q, k, v, unmasked)[0],
             "partial as full, every-test code": lambda: sf.sparse_forward(
                 q, k, v, unmasked, partial_tests=False)[0]}
    checked_calls = {"every test": lambda: sf.sparse_forward(q, k, v, plan,
                                                             partial_tests=False)[0],
                     "partial tests": lambda: sf.sparse_forward(q, k, v, plan,
                                                                partial_tests=True)[0],
                     "tests as selects": lambda: sf.sparse_forward(
                         q, k, v, plan, partial_tests=True, tests_as_selects=True)[0],
                     "row ranges": lambda: sf.sparse_forward(q, k, v, plan,
                                                             row_ranges=True)[0]}
    small = sf.sparse_plan(n, d, b.device, case.left, case.right, case.docs,
                           config=ma.tiles.SPARSE_SMALL_BLOCKS if b.mode != "interpreter"
                           else None)
    checked_calls.update({
        "64-row blocks": lambda: sf.sparse_forward(q, k, v, small)[0],
        "64-row blocks, runs, selects": lambda: sf.sparse_forward(
            q, k, v, small, halves=False, full_range=small.full_ranges, partial_tests=True,
            tests_as_selects=True)[0]})
    for label, call in checked_calls.items():
        if bma.checked(b, row, label, call, reference, True):
            timed[label] = call
    flex_call = bma.flex_mask_call(b, ma, sf, flex, create_block_mask, q, k, v, case, row)
    if flex_call is not None and bma.checked(b, row, "flex", flex_call, reference, False):
        timed["flex"] = flex_call
    del reference
    for label, timing in bma.interleaved(b, timed).items():
        bma.spread_columns(row, label, timing)
    ours = [label for label in [*checked_calls, *timed] if label != "flex"]
    for label in dict.fromkeys(ours):  # each reference call that ran, once
        if not row.get(f"{label} ms"):
            continue
        if row.get("flex ms"):
            row[f"{label} vs flex"] = row["flex ms"] / row[f"{label} ms"]
        if row.get("every test ms") and label != "every test":
            row[f"{label} speed-up"] = row["every test ms"] / row[f"{label} ms"]
    return row


if __name__ == "__main__":
    sys.exit(main())
