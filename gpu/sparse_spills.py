"""Registers and spills of the reference sparse forward's variants, compiled for Hopper.

    python gpu/sparse_spills.py [--out assets/results/09-sparse-spills.csv]

Calls the reference sparse forward's launcher with CPU tensors (fp16, N = 16384, B = 1, H = 16,
a causal mask with and without packed documents, the reference's tiles tiles.SPARSE_REFERENCE),
records the launch it makes, with every test, with partial_tests (with branches, and as
selects: tests_as_selects) and with row_ranges, and
compiles each for sm_90a as Triton would at that launch (bench/compile_counts.py). Prints the
binary's registers and spilled bytes per thread, and how many K and V tiles the pipeliner keeps
in flight in the loop that keeps fewest (also each head dim's FULL lists read the other way:
entries loaded, step 5, or walked as runs, step 6; and at d = 64 the entries loaded a step
ahead, entries_ahead). Nothing is launched, so it runs on a machine
without a GPU; the counts are those of the Triton that runs it (another version unpacked in a
folder first on PYTHONPATH gives that version's). Lesson 9 reads them beside the timings of
--part steps.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

N, HEADS = 16384, 16
DOCUMENTS = [N // 8] * 8  # lengths of the packed documents of the plans with documents
# (D, documents, halves, full_range): each head dim's default variant, with and without ids
VARIANTS = ((64, False, True, True), (64, True, True, True),
            (128, False, False, False), (128, True, False, False))


def compile_variant(sf, d, has_docs, halves, full_range, tests, ranges=False,
                    selects=False, ahead=False) -> dict:
    """The binary's counts for one variant (tensor descriptors, fp16)."""
    import torch

    from flashcourse.bench import compile_counts
    from flashcourse.kernels import modern_attention as ma

    plan = sf.sparse_plan(N, d, "cpu", right=0,
                          docs=ma.packed_documents(DOCUMENTS) if has_docs else None)
    q, k, v, o = (torch.empty(1, HEADS, N, d, dtype=torch.float16) for _ in range(4))
    lse = torch.empty(1, HEADS, N)
    with compile_counts.captured_launches() as launches:
        sf._launch(q, k, v, o, plan=plan, lse=lse, qk_scale=0.1275, use_tma=True,
                   halves=halves, full_range=full_range, partial_tests=tests,
                   row_ranges=ranges, tests_as_selects=selects, entries_ahead=ahead)
    (kernel, args, kwargs), = launches
    counts = compile_counts.resources(kernel, args, kwargs)
    return {"gpu": compile_counts.GPU_NOTE, "D": d, "documents": has_docs,
            "halves": halves, "full range": full_range, "partial tests": tests,
            "row ranges": ranges, "tests as selects": selects, "entries ahead": ahead,
            "registers": counts["registers"],
            "spilled B": counts["spilled B"], "ptxas notes": counts["ptxas notes"],
            "warpgroup syncs": counts["warpgroup syncs"],
            "K/V buffers": counts["pipeline buffers"]}


def measure():
    """One row per variant: each head dim's default, with and without documents, with every
    test, partial tests (branches or selects) and row ranges."""
    from flashcourse.kernels import sparse_forward as sf

    for d, has_docs, halves, full_range in VARIANTS:
        for tests, ranges, selects in ((False, False, False), (True, False, False),
                                       (True, False, True), (False, True, False)):
            yield compile_variant(sf, d, has_docs, halves, full_range, tests, ranges, selects)
    for has_docs in (False, True):  # d = 64 at step 5 (the FULL lists' entries loaded, one
        yield compile_variant(sf, 64, has_docs, True, False, False)  # per tile), d = 128 at 6
        yield compile_variant(sf, 128, has_docs, False, True, False)
        yield compile_variant(sf, 64, has_docs, True, False, False, ahead=True)  # a step ahead


if __name__ == "__main__":
    from flashcourse.bench import compile_counts

    sys.exit(compile_counts.script_main(__doc__, measure))
