"""What lesson 6's teaching forward lacks, one optimisation at a time, beside the reference.

    python gpu/explore_lesson6.py [--out DIR] [--n 1024,4096,16384] [--d 64,128] [--repeats 3]

`lesson6_style_kernel` below is lesson 6's flash_forward_kernel (same signature, same loop)
with four tl.constexpr switches, each one thing the reference forward (lesson 8) does and the
teaching kernel does not:

  LAST_FIRST  causal: the last query blocks, which have the most keys, are started first
  FAST_PATH   key blocks that need no mask are loaded and scored without one (the reference's
              split loop); only the diagonal block (causal) or the ragged tail is masked
  FMA         the scale is folded into exp2's argument, s * qk_scale - m, one FMA per score,
              instead of scaling every score before the max
  DESCRIPTORS K and V are read through tensor descriptors built in the kernel
              (tl.make_tensor_descriptor): on Hopper the TMA engine copies whole tiles

For fp16, d = 64 and 128, causal and not, B * N = 32k tokens and H * d = 2048, it times every
variant at a few tile configs, lesson 6's own solution kernel at its table's tiles, and the
reference forward, round-robin, `--repeats` times (medians of triton.testing.do_bench). Every
variant and config is first compiled in parallel worker processes, then checked against fp32
attention on ragged, batched, multi-head and transposed inputs in fp16 and bf16
(kernels.verify.check_forward) and on the timing case; one that fails is never timed. Writes
explore-lesson6.csv: one row per (case, variant, config) with the median ms, the spread of the
repeats and the ratio to the reference (>= 0.85 is within 15%).

What it found on an H200 with Triton 3.9 (assets/results/06-explore-lesson6.csv; the d = 64 rows
ran before lesson 6 took these switches, so their "lesson6" is the kernel of then, with pointer
loads): at d = 128 the descriptors are worth 1.14-1.42x at 128 x 64 tiles with 4 warps, which
pointer loads cannot use (out of registers), and all four together 1.20-1.52x there; at d = 64
the masks 1.02-1.10x and all four 1.04-1.15x. Lesson 6's kernel now has all four.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from flashcourse import bench, runtime  # noqa: E402
from flashcourse.bench import harness, providers  # noqa: E402
from flashcourse.kernels import LOG2E, attention, host, verify  # noqa: E402

runtime.current()  # compiled Triton or the interpreter, before the kernels below are defined


@triton.jit
def attend_blocks(acc, l_i, m_i, q, K_src, V_src, stride_kn, stride_vn,
                  offs_m, N, qk_scale, lo, hi,
                  D: tl.constexpr, BLOCK_N: tl.constexpr, ON_DIAGONAL: tl.constexpr,
                  MASKED: tl.constexpr, FMA: tl.constexpr, DESCRIPTORS: tl.constexpr):
    """Lesson 6's attend_blocks; MASKED=False skips the bounds mask (every key < N)."""
    offs_d = tl.arange(0, D)                                            # (D,)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)                          # (BLOCK_N,)
        if DESCRIPTORS:  # rows >= N come back as 0: the descriptor knows the shape
            k = K_src.load([start_n, 0])                                # (BLOCK_N, D)
            v = V_src.load([start_n, 0])                                # (BLOCK_N, D)
        elif MASKED:
            k = tl.load(K_src + cols[:, None] * stride_kn + offs_d[None, :],
                        mask=cols[:, None] < N, other=0.0)
            v = tl.load(V_src + cols[:, None] * stride_vn + offs_d[None, :],
                        mask=cols[:, None] < N, other=0.0)
        else:
            k = tl.load(K_src + cols[:, None] * stride_kn + offs_d[None, :])
            v = tl.load(V_src + cols[:, None] * stride_vn + offs_d[None, :])
        s = tl.dot(q, tl.trans(k))                                      # (BLOCK_M, BLOCK_N)
        if not FMA:
            s = s * qk_scale
        if MASKED:
            keep = cols[None, :] < N
            if ON_DIAGONAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            s = tl.where(keep, s, float("-inf"))
        if FMA:  # qk_scale > 0, so the max of raw scores, scaled, is the scaled max
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            p = tl.exp2(s * qk_scale - m_new[:, None])
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def lesson6_style_kernel(Q, K, V, O, L,  # Q, K, V, O: (B, H, N, D); L: (B, H, N) float32
                         sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sob, soh, son, slb, slh,
                         H, N, qk_scale,  # qk_scale = sm_scale * log2(e)
                         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, LAST_FIRST: tl.constexpr,
                         FAST_PATH: tl.constexpr, FMA: tl.constexpr,
                         DESCRIPTORS: tl.constexpr):
    start_m = tl.program_id(0)
    if CAUSAL and LAST_FIRST:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)                  # (BLOCK_M,)
    offs_d = tl.arange(0, D)
    rows_ok = offs_m[:, None] < N
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqn + offs_d[None, :],
                mask=rows_ok, other=0.0)                                # (BLOCK_M, D)
    K_src = K + b * skb + h * skh
    V_src = V + b * svb + h * svh
    if DESCRIPTORS:
        K_src = tl.make_tensor_descriptor(K_src, shape=[N, D], strides=[skn, 1],
                                          block_shape=[BLOCK_N, D])
        V_src = tl.make_tensor_descriptor(V_src, shape=[N, D], strides=[svn, 1],
                                          block_shape=[BLOCK_N, D])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    if CAUSAL:
        lo = start_m * BLOCK_M  # the diagonal block's first key
        hi = tl.minimum(lo + BLOCK_M, N)
    elif FAST_PATH:
        lo = (N // BLOCK_N) * BLOCK_N  # the ragged tail's first key
        hi = N
    else:
        lo = N
        hi = N
    acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, K_src, V_src, skn, svn, offs_m, N,
                                  qk_scale, 0, lo, D=D, BLOCK_N=BLOCK_N, ON_DIAGONAL=False,
                                  MASKED=not FAST_PATH, FMA=FMA, DESCRIPTORS=DESCRIPTORS)
    acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, K_src, V_src, skn, svn, offs_m, N,
                                  qk_scale, lo, hi, D=D, BLOCK_N=BLOCK_N, ON_DIAGONAL=CAUSAL,
                                  MASKED=True, FMA=FMA, DESCRIPTORS=DESCRIPTORS)
    acc = acc / l_i[:, None]
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
    tl.store(O + b * sob + h * soh + offs_m[:, None] * son + offs_d[None, :],
             acc.to(O.dtype.element_ty), mask=rows_ok)
    tl.store(L + b * slb + h * slh + offs_m, lse, mask=offs_m < N)


# name: (LAST_FIRST, FAST_PATH, FMA, DESCRIPTORS); "lesson6" is the solution kernel itself
VARIANTS = {
    "none": (False, False, False, False),
    "last-first": (True, False, False, False),
    "fast-path": (False, True, False, False),
    "fma": (False, False, True, False),
    "descriptors": (False, False, False, True),
    "all-but-descriptors": (True, True, True, False),
    "all": (True, True, True, True),
}
CONFIGS = {  # (BLOCK_M, BLOCK_N, num_warps, num_stages)
    64: [(128, 64, 8, 3), (128, 64, 8, 4), (128, 64, 4, 3)],
    128: [(128, 128, 8, 3), (128, 64, 4, 2), (128, 64, 8, 3)],
}
TOKENS, WIDTH = 32768, 2048
CHECK_SHAPES = ((2, 3, 333), (3, 2, 257))  # (B, H, N); the second as (B, N, H, D) views
CHECK_DTYPES = (torch.float16, torch.bfloat16)


def launch(variant: str, config, q, k, v, causal: bool):
    """(o, lse) of one variant at one config: lesson 6's launcher, plus the switches."""
    if variant == "lesson6":
        return attention.flash_forward(providers.lesson6_kernels().flash_forward_kernel,
                                       q, k, v, causal)
    last_first, fast_path, fma, descriptors = VARIANTS[variant]
    bm, bn, warps, stages = config
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    B, H, N, D = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device)
    strides = [s for x in (q, k, v, out) for s in x.stride()[:3]]
    attention.allow_kernel_scratch()  # descriptors built in the kernel need scratch memory
    lesson6_style_kernel[(triton.cdiv(N, bm), B * H)](
        q, k, v, out, lse, *strides, lse.stride(0), lse.stride(1), H, N,
        D ** -0.5 * LOG2E, D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal,
        LAST_FIRST=last_first, FAST_PATH=fast_path, FMA=fma, DESCRIPTORS=descriptors,
        num_warps=warps, num_stages=stages)
    return out, lse


def specs(ds):
    """Every (variant, config, d) timed: the variants at CONFIGS, the solution at its table's."""
    return [(variant, config, d) for d in ds
            for variant in VARIANTS for config in CONFIGS[d]] + \
        [("lesson6", None, d) for d in ds]


def check(spec, causal: bool) -> str:
    """'' or what is wrong with one spec on the check shapes, in fp16 and bf16."""
    variant, config, d = spec
    try:
        for dtype in CHECK_DTYPES:
            verify.check_forward(lambda q, k, v, c: launch(variant, config, q, k, v, c), dtype,
                                 [(*bhn, d) for bhn in CHECK_SHAPES], (causal,), name=variant)
    except AssertionError as err:
        return f"WRONG: {err}"[:200]
    except Exception as err:  # noqa: BLE001 - out of shared memory, a config Triton refuses
        return f"failed: {type(err).__name__}: {(str(err).strip().splitlines() or [''])[-1]}"[
            :200]
    return ""


def warm(jobs) -> dict:
    """Worker process: compile (and check) each (spec, causal); {key: problem} of failures."""
    runtime.setup()
    problems = {}
    for spec, causal in jobs:
        problem = check(spec, causal)
        if problem:
            problems[(spec, causal)] = problem
    return problems


def time_case(d: int, causal: bool, n: int, timed, repeats: int) -> list[dict]:
    """Rows of one case: each spec's median ms beside the reference's, round-robin."""
    q, k, v = attention.make_inputs(TOKENS // n, WIDTH // d, n, d, torch.float16,
                                    device="cuda", seed=n + d)
    expected, _ = verify.reference_fp32(q, k, v, causal)
    rows, calls = [], {}
    for spec in timed:
        variant, config, _ = spec
        row = {"d": d, "causal": causal, "N": n, "variant": variant,
               "config": "table" if config is None else "x".join(map(str, config)),
               "ms": "", "spread_pct": "", "course_ms": "", "vs_course": "", "status": ""}
        out, _ = launch(variant, config, q, k, v, causal)
        error, ok = verify.max_error(out, expected, verify.tolerance(torch.float16))
        if not ok:
            rows.append({**row, "status": f"WRONG on the timing case: max error {error:.3g}"})
            continue
        calls[spec] = row
    times = {spec: [] for spec in [*calls, "course"]}
    for _ in range(repeats):
        for spec in calls:
            times[spec].append(bench.median_ms(
                lambda spec=spec: launch(spec[0], spec[1], q, k, v, causal), rep_ms=40))
        times["course"].append(bench.median_ms(lambda: host.forward(q, k, v, causal),
                                               rep_ms=40))
    course_ms = statistics.median(times["course"])
    for spec, row in calls.items():
        ms = statistics.median(times[spec])
        rows.append({**row, "ms": round(ms, 4), "spread_pct": harness.spread_pct(times[spec]),
                     "course_ms": round(course_ms, 4), "vs_course": round(course_ms / ms, 3),
                     "status": "ok"})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--n", default="1024,4096,16384")
    parser.add_argument("--d", default="64,128")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=14)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("explore_lesson6: no CUDA GPU here; this script times compiled kernels only.")
        return 0
    runtime.setup()
    ds = [int(x) for x in args.d.split(",")]
    lengths = [int(x) for x in args.n.split(",")]
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
    start = time.time()
    jobs = [(spec, causal) for spec in specs(ds) for causal in (False, True)]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        problems = {}
        for part in pool.map(warm, [jobs[i::args.workers] for i in range(args.workers)]):
            problems.update(part)
    print(f"compiled and checked {len(jobs)} in {time.time() - start:.0f} s, "
          f"{len(problems)} failed", flush=True)
    rows = []
    for d in ds:
        for causal in (False, True):
            timed = [spec for spec in specs([d]) if (spec, causal) not in problems]
            for spec in specs([d]):
                if (spec, causal) in problems:
                    rows.append({"d": d, "causal": causal, "N": "", "variant": spec[0],
                                 "config": "x".join(map(str, spec[1] or ())) or "table",
                                 "ms": "", "spread_pct": "", "course_ms": "", "vs_course": "",
                                 "status": problems[(spec, causal)]})
                    print("not timed:", rows[-1], flush=True)
            for n in lengths:
                case_rows = time_case(d, causal, n, timed, args.repeats)
                rows += case_rows
                for row in case_rows:
                    print(f"d={d} causal={causal!s:5s} N={n:5d} {row['variant']:20s} "
                          f"{row['config']:12s} x{row['vs_course']!s:6s} "
                          f"spread {row['spread_pct']!s:5s} {row['status'][:80]}", flush=True)
                torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    bench.write_csv(args.out / "explore-lesson6.csv", rows)
    print(f"total {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
