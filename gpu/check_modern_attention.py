"""Run lesson 9's solution kernels compiled on a CUDA GPU and compare them with float64 references.

    python gpu/check_modern_attention.py                 # kernels, then the lesson's graders
    python gpu/check_modern_attention.py --no-graders
    python gpu/check_modern_attention.py --reference-only   # kernels/sparse_forward.py alone
    python gpu/check_modern_attention.py --planned-only     # its default and SparseForward
    python gpu/check_modern_attention.py --interpreter   # smoke test of this script on a CPU

The kernels are the solution cells of lessons/09-modern-attention.qmd, taken by cell id and
imported from a real file (flashcourse.authoring.cells). Every kernel runs in fp16 and bf16 at
head dims 64 and 128 (fp32 and fp16 at small sizes with --interpreter): the block-sparse forward
on causal, window and document masks, the GQA forward, and exercise 4's paged split-KV decoding
(the split kernel with the merge) with pages out of order and ragged lengths, at the split size
of the lesson's `choose_split_size` and with one split per sequence. Inputs are non-contiguous
views; outputs sit inside NaN padding that must stay untouched. Then the reference sparse
forward (kernels/sparse_forward.py) in every variant its plan allows (halves, FULL lists as
runs, partial tests or row ranges, pointer loads, entries loaded a step ahead), and its
default, on ragged N with B and H > 1, views with the heads as the middle axis of (B, N, H,
D), a custom sm_scale with large logits and rows that see no key, at head dims 64, 80 and 128
(its output and logsumexp), and planned once (SparseForward), called twice with new q, k, v
written in place. Exits 1 on any mismatch, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # flashcourse is imported once Triton's mode is chosen
LESSON = ROOT / "lessons" / "09-modern-attention.qmd"
KERNEL_CELLS = ("exercise-sparse-kernel", "exercise-gqa-kernel", "exercise-split-size",
                "exercise-paged-split", "exercise-merge-states")
TOLERANCE = {"fp32": 5e-3, "fp16": 2e-2, "bf16": 6e-2}  # max abs error, outputs of size ~1
PAD = 8  # NaN columns after each output row
SPARSE_SCALE = 0.5  # the reference sparse forward's custom sm_scale: logits up to about 40


def load_kernels():
    from flashcourse.authoring import cells  # after --interpreter has chosen Triton's mode

    return cells.load_cells(LESSON, list(KERNEL_CELLS), prelude=cells.TRITON_PRELUDE)


class Checker:
    def __init__(self, device: str, small: bool):
        import torch

        self.torch = torch
        self.device = device
        self.small = small
        self.failures = 0
        self.count = 0
        self.dtypes = ({"fp32": torch.float32, "fp16": torch.float16} if small else
                       {"fp16": torch.float16, "bf16": torch.bfloat16})

    def view(self, x):
        """A non-contiguous copy of x on the device: its last axis is padded by 8."""
        torch = self.torch
        wide = torch.full((*x.shape[:-1], x.shape[-1] + 8), float("nan"), dtype=x.dtype,
                          device=self.device)
        wide[..., :x.shape[-1]] = x.to(self.device)
        return wide[..., :x.shape[-1]]

    def output(self, shape, dtype):
        """An output view with NaN after every row, and the padded storage."""
        torch = self.torch
        wide = torch.full((*shape[:-1], shape[-1] + PAD), float("nan"), dtype=dtype,
                          device=self.device)
        return wide[..., :shape[-1]], wide

    def report(self, label, out, wide, expected, dtype_name):
        torch = self.torch
        if self.device == "cuda":
            torch.cuda.synchronize()
        error = (out.double().cpu() - expected).abs()
        worst = float(torch.nan_to_num(error, nan=float("inf")).max())
        problems = []
        if not worst <= TOLERANCE[dtype_name]:
            problems.append(f"max error {worst:.3g}")
        if not torch.isnan(wide[..., out.shape[-1]:]).all():
            problems.append("wrote past the end of a row")
        self.count += 1
        self.failures += bool(problems)
        print(f"{'FAIL' if problems else 'ok  '} {label}: "
              + ("; ".join(problems) if problems else f"max error {worst:.2e}"))

    def inputs(self, shapes, dtype, seed):
        torch = self.torch
        gen = torch.Generator().manual_seed(seed)
        return [torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
                for shape in shapes]


def check_sparse(c: Checker, kernels, ma):
    torch = c.torch
    sizes = [(1, 2, 77), (2, 1, 100)] if c.small else [(2, 3, 1000), (1, 4, 2125)]
    for B, H, N in sizes:
        window = max(8, N // 8)
        docs = ma.packed_documents([N // 3, N // 2], padding=N - N // 3 - N // 2)
        masks = {
            "causal": (ma.UNLIMITED, 0, None),
            f"causal window {window}": (window - 1, 0, None),
            f"sliding {window // 2}": (window // 2, window // 2, None),
            "causal documents + padding": (ma.UNLIMITED, 0, docs),
            f"the {window} keys before": (window, -1, None),
        }
        for D in ((16, 32) if c.small else (64, 128)):
            block_m, block_n, warps, stages = ma.sparse_config(D)
            for dtype_name, dtype in c.dtypes.items():
                q, k, v = c.inputs([(B, H, N, D)] * 3, dtype, N + D)
                for name, (left, right, doc_ids) in masks.items():
                    ids = np.zeros(N, np.int32) if doc_ids is None else doc_ids
                    mask = ma.dense_mask(N, N, left, right, ids)
                    lists = ma.block_list_tensors(ma.classify_blocks(mask, block_m, block_n),
                                                  c.device)
                    out, wide = c.output((B, H, N, D), dtype)
                    ma.launch_sparse(kernels.sparse_attention_kernel, c.view(q), c.view(k),
                                     c.view(v), out, torch.from_numpy(ids).to(c.device), left,
                                     right, lists, block_m, block_n, num_warps=warps,
                                     num_stages=stages)
                    expected = ma.masked_reference(q, k, v, mask)
                    c.report(f"sparse B={B} H={H} N={N} D={D} {dtype_name} {name}", out, wide,
                             expected, dtype_name)


def check_gqa(c: Checker, kernels, ma):
    sizes = [(1, 4, 40)] if c.small else [(2, 8, 1000), (1, 32, 777)]
    for B, H, N in sizes:
        for H_KV in sorted({H, H // 4, 1}):
            for D in ((16,) if c.small else (64, 128)):
                for dtype_name, dtype in c.dtypes.items():
                    q, k, v = c.inputs([(B, H, N, D), (B, H_KV, N, D), (B, H_KV, N, D)], dtype,
                                       N + H_KV)
                    out, wide = c.output((B, H, N, D), dtype)
                    blocks = (16, 16) if c.small else (64, 64)
                    ma.launch_gqa(kernels.gqa_attention_kernel, c.view(q), c.view(k), c.view(v),
                                  out, *blocks)
                    c.report(f"gqa B={B} H={H} H_KV={H_KV} N={N} D={D} {dtype_name}", out, wide,
                             ma.gqa_reference(q, k, v), dtype_name)


def check_decode(c: Checker, kernels, ma):
    torch = c.torch
    lengths = [100, 37, 0, 64] if c.small else [5000, 1, 0, 4096, 2049, 333]
    n_max = max(lengths)
    block_n = ma.tiles.DECODE_BLOCK_N["interpreter" if c.small else "gpu"]
    for H, H_KV in ((4, 2), (4, 4)) if c.small else ((32, 8), (32, 32), (8, 1)):
        for D in ((16,) if c.small else (64, 128)):
            for dtype_name, dtype in c.dtypes.items():
                B = len(lengths)
                q, k, v = c.inputs([(B, H, D), (B, H_KV, n_max, D), (B, H_KV, n_max, D)],
                                   dtype, H + D)
                lens = torch.tensor(lengths, dtype=torch.int32, device=c.device)
                expected = ma.decode_reference(q, k, v, lengths)
                label = f"H={H} H_KV={H_KV} D={D} {dtype_name} lengths {lengths}"
                sms = 32 if c.small else torch.cuda.get_device_properties(0).multi_processor_count
                chosen = kernels.choose_split_size(B, H_KV, n_max, sms, block_n)
                one_split = ma.cdiv(n_max, block_n) * block_n
                for page_size in (16, 64):
                    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths, page_size, seed=D)
                    for split in sorted({chosen, one_split}):
                        splits = ma.split_count(n_max, split)
                        m, _ = c.output((B, H, splits), torch.float32)
                        l, _ = c.output((B, H, splits), torch.float32)
                        o, _ = c.output((B, H, splits, D), torch.float32)
                        ma.launch_paged_split(kernels.paged_split_kernel, c.view(q),
                                              k_pages.to(c.device), v_pages.to(c.device),
                                              table.to(c.device), lens, m, l, o, split, block_n)
                        out, wide = c.output((B, H, D), dtype)
                        ma.launch_merge(kernels.merge_states_kernel, m, l, o, out)
                        c.report(f"paged split-KV + merge (pages of {page_size}, out of order; "
                                 f"{splits} splits of {split}) {label}", out, wide, expected,
                                 dtype_name)


def check_sparse_reference(c: Checker, ma, default_only: bool = False):
    """The reference sparse forward, every variant (or its default alone) and planned once:
    o against float64 and its LSE (natural log, -inf exactly on rows that see no key)."""
    from flashcourse.kernels import sparse_forward as sf

    torch = c.torch
    sizes = [(1, 2, 77, (16, 32))] if c.small else [(2, 3, 1000, (64, 80, 128)),
                                                    (1, 2, 2125, (128,))]
    for B, H, N, dims in sizes:
        window = max(8, N // 8)
        docs = ma.packed_documents([N // 3, N // 2], padding=N - N // 3 - N // 2)
        masks = {"causal": (ma.UNLIMITED, 0, None),
                 f"sliding {window // 2}": (window // 2, window // 2, None),
                 "causal documents + padding": (ma.UNLIMITED, 0, docs)}
        for D, (dtype_name, dtype), (name, (left, right, ids)) in itertools.product(
                dims, c.dtypes.items(), masks.items()):
            gen = torch.Generator().manual_seed(N + D)
            # (B, N, H, D) storage seen as (B, H, N, D); q and k scaled for large logits
            q, k, v = (torch.randn(B, N, H, D, generator=gen, dtype=torch.float64)
                       .mul(scale).to(dtype).to(c.device).transpose(1, 2)
                       for scale in (3.0, 3.0, 1.0))
            mask = ma.dense_mask(N, N, left, right,
                                 np.zeros(N, np.int32) if ids is None else ids)
            expected = ma.masked_reference(q.cpu(), k.cpu(), v.cpu(), mask, SPARSE_SCALE)
            expected_lse = ma.masked_lse(q.cpu(), k.cpu(), mask, SPARSE_SCALE)
            plan = sf.sparse_plan(N, D, c.device, left, right, ids)
            for variant in [{}] if default_only else sparse_variants(sf, plan, c.small):
                out, lse = sf.sparse_forward(q, k, v, plan, sm_scale=SPARSE_SCALE, **variant)
                label = (f"reference sparse B={B} H={H} N={N} D={D} {dtype_name} {name} "
                         + (", ".join(f"{key}={value}" for key, value in variant.items())
                            or "default"))
                c.report(label, out, out, expected, dtype_name)
                report_lse(c, label, lse, expected_lse)
            # planned once for these tensors; a second call after new q, k, v written in place
            planned = sf.SparseForward(q, k, v, plan, sm_scale=SPARSE_SCALE)
            label = f"reference sparse B={B} H={H} N={N} D={D} {dtype_name} {name} planned"
            for call in ("", ", second call with new q, k, v in place"):
                if call:
                    for x, flip in zip((q, k, v), (2, 2, 3), strict=True):
                        x.copy_(x.flip(flip))  # (B, H, N, D) views: new rows, new columns
                    expected = ma.masked_reference(q.cpu(), k.cpu(), v.cpu(), mask,
                                                   SPARSE_SCALE)
                    expected_lse = ma.masked_lse(q.cpu(), k.cpu(), mask, SPARSE_SCALE)
                out, lse = planned.run()
                c.report(label + call, out, out, expected, dtype_name)
                report_lse(c, label + call, lse, expected_lse)


def report_lse(c: Checker, label: str, lse, expected_lse) -> None:
    """The logsumexp against float64's: within 1e-2, and -inf exactly on rows that see no
    key."""
    hidden = c.torch.isinf(expected_lse)
    lse = lse.cpu()
    lse_ok = (c.torch.equal(c.torch.isinf(lse), hidden) and bool(
        ((lse.double() - expected_lse)[~hidden].abs() <= 1e-2).all()))
    c.count += 1
    c.failures += not lse_ok
    print(f"{'ok  ' if lse_ok else 'FAIL'} {label}: logsumexp"
          + ("" if lse_ok else " differs, or is not -inf exactly on rows that see no key"))


def sparse_variants(sf, plan, small: bool) -> list[dict]:
    """The default, and every combination of the options this plan allows."""
    variants = [{}]
    masks = ({"partial_tests": False}, {"partial_tests": True},
             {"partial_tests": True, "tests_as_selects": True}, {"row_ranges": True})
    for halves, full_range, tma, mask in itertools.product((False, True), (False, True),
                                                          (False, True), masks):
        if full_range and not plan.full_ranges or (mask.get("partial_tests")
                                                   and plan.part_tests is None):
            continue
        if mask.get("row_ranges") and plan.row_ranges is None:
            continue
        if halves and not small and plan.config[0] < 2 * sf.MIN_DOT_ROWS:
            continue
        variants.append({"halves": halves, "full_range": full_range, "use_tma": tma, **mask})
    # the lists' entries loaded a step ahead, with the descriptors the reference uses
    return variants + [{**variant, "entries_ahead": True} for variant in variants
                       if variant.get("use_tma")]


def run_graders() -> int:
    from flashcourse.checks import registry

    kernels = load_kernels()
    answers = {"modern-attention/sparse-kernel": kernels.sparse_attention_kernel,
               "modern-attention/gqa-kernel": kernels.gqa_attention_kernel,
               "modern-attention/split-size": kernels.choose_split_size,
               "modern-attention/paged-split": kernels.paged_split_kernel,
               "modern-attention/merge-states": kernels.merge_states_kernel}
    failures = 0
    os.environ[registry.GRADING_MODE_ENV] = "1"  # hidden cases too
    for exercise_id, kernel in answers.items():
        try:
            registry.check(exercise_id, kernel)
        except Exception as err:  # noqa: BLE001  (report every grader, then fail)
            failures += 1
            print(f"FAIL grader {exercise_id}: {type(err).__name__}: {err}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-graders", action="store_true")
    parser.add_argument("--reference-only", action="store_true",
                        help="only the reference sparse forward (kernels/sparse_forward.py)")
    parser.add_argument("--planned-only", action="store_true",
                        help="only the reference's default and its planned call (SparseForward)")
    parser.add_argument("--interpreter", action="store_true",
                        help="run in Triton's interpreter on the CPU (small sizes)")
    args = parser.parse_args()
    os.environ["FLASHCOURSE_INTERPRET"] = "1" if args.interpreter else "0"
    import torch

    if not args.interpreter and not torch.cuda.is_available():
        print("no CUDA GPU: this script checks the compiled kernels (use --interpreter on a CPU)")
        return 2
    from flashcourse import runtime

    rt = runtime.setup()
    assert rt.interpreter == args.interpreter
    from flashcourse.kernels import modern_attention as ma

    kernels = load_kernels()
    checker = Checker(rt.device, small=args.interpreter)
    reference_only = args.reference_only or args.planned_only
    if not reference_only:
        check_sparse(checker, kernels, ma)
        check_gqa(checker, kernels, ma)
        check_decode(checker, kernels, ma)
    check_sparse_reference(checker, ma, default_only=args.planned_only)
    print(f"{checker.count - checker.failures} of {checker.count} cases match float64")
    failures = checker.failures
    if not (args.no_graders or reference_only):
        failures += run_graders()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
