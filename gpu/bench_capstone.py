"""Lesson 11's measurement on a CUDA GPU: the capstone's solution against FlexAttention.

    python gpu/bench_capstone.py --out DIR                 # about 6 minutes on an H200
    python gpu/bench_capstone.py --out DIR --budget 120    # fewer shapes

Loads the solution cells of lessons/11-capstone.qmd, runs the lesson's checks on them first
(compiled, hidden cases and bfloat16 included), then times them against FlexAttention compiled
(torch.compile(flex_attention)) on the same shapes: causal attention with a sliding window of
1024 keys or with packed documents, both with tanh soft-capping (cap 50) and ALiBi, fp16 and
bf16, d = 64 and 128, N = 4k to 16k, forward and forward+backward. FlexAttention gets the same
score_mod and mask as functions and a BlockMask from create_block_mask; our block maps and its
BlockMask are built once, outside the timings. Every output and gradient is compared with
FlexAttention's before timing. Each time is the median of 5 repetitions of
triton.testing.do_bench's median (L2 flushed); the spread is their min and max. Rows are
written to DIR/11-capstone.csv after each shape (the torch and Triton versions in every row);
shapes are started while --budget seconds last. Exits 2 without a GPU, 1 when a check fails.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
LESSON = ROOT / "lessons" / "11-capstone.qmd"
CELLS = ["imports", "exercise-block-map", "exercise-forward", "exercise-backward",
         "exercise-function"]
WINDOW = 1024
CAP = 50.0
HEADS = 16
TOKENS = 65536  # B * N: 16 sequences of 4k tokens, 4 of 16k
REPEATS = 5
# (dtype, head dim, N, mask), most wanted first: every dtype, head dim and mask appear in the
# first eight
SHAPES = [(dtype, d, n, mask) for n in (4096, 16384) for mask in ("window", "docs")
          for dtype in ("float16", "bfloat16") for d in (64, 128)]
SHAPES = SHAPES[0::2] + SHAPES[1::2]


def document_ids(batch: int, n: int, seed: int):
    """Packed documents of 256 to 4096 tokens, the last one cut at n (no padding)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(batch):
        lengths, total = [], 0
        while total < n:
            length = int(torch.randint(256, 4097, (1,), generator=gen))
            lengths.append(min(length, n - total))
            total += lengths[-1]
        rows.append(lengths)
    return rows


def timed(fn, grads=None) -> tuple[float, float, float]:
    """(median, min, max) over REPEATS of do_bench's median, in ms."""
    from flashcourse import bench

    runs = [bench.median_ms(fn, rep_ms=60, grad_to_none=grads) for _ in range(REPEATS)]
    return statistics.median(runs), min(runs), max(runs)


def measure(runs: dict, inputs, do):
    """Compare every run's output and gradients with FlexAttention's, then time them: returns
    ({(name, pass): (median, min, max)}, max error of o, max relative error of the grads)."""
    import torch

    results = {}
    for name, run in runs.items():
        o = run()
        results[name] = (o, *torch.autograd.grad(o, inputs, do))
    err_o = float((results["ours"][0] - results["flex"][0]).abs().max())
    err_grads = max(float((a - b).abs().max() / max(1.0, float(b.abs().max())))
                    for a, b in zip(results["ours"][1:], results["flex"][1:], strict=True))
    del results
    times = {}
    for name, run in runs.items():
        times[name, "forward"] = timed(run)  # with autograd on, as in training
        times[name, "forward+backward"] = timed(lambda run=run: run().backward(do),
                                                grads=list(inputs))
    return times, err_o, err_grads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--budget", type=float, default=360.0,
                        help="seconds during which new shapes are started")
    parser.add_argument("--dims", type=int, nargs="*", default=[64, 128],
                        help="head dims to measure")
    parser.add_argument("--no-checks", action="store_true",
                        help="skip the lesson's checks (when a run has just passed them)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return 2
    started = time.time()
    import flashcourse as fc
    from flashcourse import bench, check
    from flashcourse.authoring import cells
    from flashcourse.checks import registry

    fc.setup()
    module = cells.load_cells(LESSON, CELLS)
    attention = module.capstone_attention
    os.environ[registry.GRADING_MODE_ENV] = "1"
    failed = False
    for exercise in () if args.no_checks else ("capstone/forward", "capstone/backward"):
        try:
            check(exercise, attention)
        except Exception as err:  # noqa: BLE001  (report every failure, then exit 1)
            failed = True
            print(f"FAILED {exercise}: {err}")
    print(f"checks done after {time.time() - started:.0f} s")
    if failed:
        return 1

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from flashcourse.kernels import capstone as cap

    # one compilation per dtype, head dim, mask and N: more than dynamo's default limit of 8,
    # past which it would fall back to FlexAttention's dense eager path
    torch._dynamo.config.cache_size_limit = 64
    torch._dynamo.config.accumulated_cache_size_limit = 256
    flex = torch.compile(flex_attention)
    slopes = cap.alibi_slopes(HEADS, "cuda")
    state = {}  # what the mask functions read: the window or the document ids

    def score_mod(score, b, h, q_idx, kv_idx):
        return CAP * torch.tanh(score / CAP) + slopes[h] * (kv_idx - q_idx)

    def window_mask(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - WINDOW)

    def docs_mask(b, h, q_idx, kv_idx):
        docs = state["docs"]
        return (kv_idx <= q_idx) & (docs[b, q_idx] == docs[b, kv_idx]) & (docs[b, q_idx] >= 0)

    rows = []
    for dtype_name, d, n, mask in SHAPES:
        if d not in args.dims:
            continue
        if time.time() - started > args.budget:
            print(f"budget spent: {dtype_name} d={d} N={n} {mask} not run")
            continue
        dtype = getattr(torch, dtype_name)
        batch = TOKENS // n
        q, k, v = (x.requires_grad_() for x in cap.make_inputs(batch, HEADS, n, d, dtype,
                                                                seed=n + d, device="cuda"))
        do = torch.randn_like(q)
        spec = cap.AttentionSpec(softcap=CAP, alibi=slopes)
        if mask == "window":
            spec.window = WINDOW
            block_mask = create_block_mask(window_mask, None, None, n, n, device="cuda")
        else:
            spec.docs = cap.packed_documents(document_ids(batch, n, n), n, device="cuda")
            state["docs"] = spec.docs
            block_mask = create_block_mask(docs_mask, batch, None, n, n, device="cuda")
        note = ""
        try:
            times, err_o, err_grads = measure(
                {"ours": functools.partial(attention, q, k, v, spec),
                 "flex": functools.partial(flex, q, k, v, score_mod=score_mod,
                                           block_mask=block_mask)},
                (q, k, v), do)
        except Exception as err:  # noqa: BLE001  (record what did not run, and why)
            traceback.print_exc()
            note = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
            times, err_o, err_grads = {}, float("nan"), float("nan")
        for which in ("forward", "forward+backward"):
            ours = times.get(("ours", which), (float("nan"),) * 3)
            theirs = times.get(("flex", which), (float("nan"),) * 3)
            row = {"dtype": dtype_name, "D": d, "N": n, "B": batch, "H": HEADS, "mask": mask,
                   "softcap": CAP, "alibi": "yes", "pass": which,
                   "ours_ms": round(ours[0], 4), "ours_min_ms": round(ours[1], 4),
                   "ours_max_ms": round(ours[2], 4), "flex_ms": round(theirs[0], 4),
                   "flex_min_ms": round(theirs[1], 4), "flex_max_ms": round(theirs[2], 4),
                   "speedup": round(theirs[0] / ours[0], 3) if ours[0] == ours[0] else "",
                   "max_err_o_vs_flex": f"{err_o:.2e}",
                   "max_rel_err_grads_vs_flex": f"{err_grads:.2e}", "note": note}
            rows.append(row)
            print({key: row[key] for key in ("dtype", "D", "N", "mask", "pass", "ours_ms",
                                             "flex_ms", "speedup", "max_err_o_vs_flex")},
                  flush=True)
        bench.write_csv(args.out / "11-capstone.csv", rows)
    print(f"done after {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
