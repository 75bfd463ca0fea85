"""Explore forward-kernel variants of the reference FlashAttention on a CUDA GPU.

    python gpu/explore_fwd.py [--out DIR] [--n 16384] [--variants a,b]

Compiles every (variant, config, case) in parallel worker processes first (Triton's cache is
shared), then checks each one on ragged inputs and on the timing case against an fp32
reference, and times it beside SDPA's cuDNN and flash backends (fp16, B * N = 32k tokens) with
the harness's own timer and SDPA calls (flashcourse.bench.harness). Forward+backward against the
backends is the harness's job: python -m flashcourse bench --modes fwdbwd.

What it found on an H200 with Triton 3.6 (assets/results/08-explore-fwd.csv): the fused scale
and the MMA accumulating into acc help a little everywhere; host-built (B, H, N, d) descriptors
for Q, K, V and O beat device-built ones at d = 128; lazy rescaling (a CTA-wide branch) and a
rotated loop that issues the next Q K^T before this softmax were slower; warp_specialize failed
to compile with 4 warps and changed nothing with 8. Run 4: halving the special-function-unit
work was slower too, with exponentials as fp16 pairs (exp16, ex2.approx.f16x2: 0.92-0.97x the
fma-host4 kernel) or every second one as a polynomial on the FMA pipe (poly: 0.83-0.91x).
Run 5: the query tile as two row halves (split-early, the ladder's step 7) gave 1.03-1.04x at
d = 64 (128 x 64 tiles, 4 warps, 3 stages) and nothing at d = 128 (0.96-1.02x). Run 5 also
timed split-late, a kernel not kept here that issued half 1's Q K^T after half 0's softmax:
1.06-1.07x at d = 64 but 0.89-0.98x at d = 128; at d = 64 that is within one run's noise of
the early order, so the course kept the early order, the better one at d = 128.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from flashcourse import bench  # noqa: E402
from flashcourse.bench import cases, providers  # noqa: E402
from flashcourse.kernels import verify  # noqa: E402
from flashcourse.kernels.common import LN2, LOG2E, load_rows  # noqa: E402
from flashcourse.kernels.forward import attn_fwd_halves_kernel  # noqa: E402
from flashcourse.kernels.ladder import TensorDescriptor  # noqa: E402


@triton.jit
def load_kv(src, bh, b, h, start, offs, offs_d, stride_n, N, MASK: tl.constexpr,
            TMA: tl.constexpr, BLOCK: tl.constexpr, HEAD_D: tl.constexpr):
    """Pointer loads (TMA 0) and 4D host descriptors (4) are the course kernel's own; 1 is a
    per-head descriptor built in the kernel, 3 a host descriptor of the (B * H, N, d) view."""
    if TMA == 1:
        x = src.load([start, 0])
    elif TMA == 3:
        x = src.load([bh, start, 0]).reshape(BLOCK, HEAD_D)
    else:
        x = load_rows(src, b, h, start, offs, offs_d, stride_n, 1, N, MASK_ROWS=MASK,
                      USE_TMA=TMA == 4)
    return x


@triton.jit
def update_lazy(s, m_i, l_i, acc, v, qk_scale):
    """Rescale only when some row's maximum grew by more than 2^8 (CTA-uniform branch)."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    if tl.max(m_new - m_i, 0) > 8.0:
        alpha = tl.exp2(m_i - m_new)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
        m_i = m_new
    p = tl.exp2(s * qk_scale - m_i[:, None])
    l_i = l_i + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_i


@triton.jit
def exp2_f16(x):
    """2^x for fp32 x, computed as fp16 pairs by ex2.approx.f16x2: two results per special-
    function-unit op instead of one (compiled only: the interpreter runs no inline PTX)."""
    return tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [x.to(tl.float16)],
                                     dtype=tl.float16, is_pure=True, pack=2)


@triton.jit
def update_exp16(s, m_i, l_i, acc, v, qk_scale):
    """P in fp16 straight from the SFU; the row sum and the rescale stay in fp32."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = exp2_f16(s * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def exp2_poly(x):
    """2^x on the FMA pipe, no special-function unit: x = j + f with j an integer (adding
    1.5 * 2^23 rounds it) and |f| <= 1/2, a degree-3 polynomial for 2^f (relative error
    7.5e-5, below fp16's half ulp) and j added into the exponent field."""
    x = tl.maximum(x, -126.0)  # keeps the exponent field of the result positive
    shifted = x + 12582912.0
    f = x - (shifted - 12582912.0)
    two_f = ((0.05517155 * f + 0.24261105) * f + 0.69326097) * f + 0.99992806
    bits = two_f.to(tl.int32, bitcast=True) + (shifted.to(tl.int32, bitcast=True) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def update_poly(s, m_i, l_i, acc, v, qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Half the exponentials (every odd column) on the FMA pipe, half on the SFU."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    x = s * qk_scale - m_new[:, None]
    x_even, x_odd = tl.split(x.reshape(BLOCK_M, BLOCK_N // 2, 2))
    p = tl.join(tl.exp2(x_even), exp2_poly(x_odd)).reshape(BLOCK_M, BLOCK_N)
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def update(s, m_i, l_i, acc, v, qk_scale, FMA: tl.constexpr, DOT_ACC: tl.constexpr):
    if FMA:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.exp2(s * qk_scale - m_new[:, None])
    else:
        s = s * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    if DOT_ACC:
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.jit
def inner(acc, l_i, m_i, q, k_src, v_src, bh, b, h, stride_kn, stride_vn, offs_m, offs_d,
          lo, hi, N, qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          HEAD_D: tl.constexpr,
          MASKED: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr, FMA: tl.constexpr,
          DOT_ACC: tl.constexpr, WS: tl.constexpr, SOFTMAX: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        k = load_kv(k_src, bh, b, h, start_n, offs_n, offs_d, stride_kn, N, MASK=MASKED,
                    TMA=TMA, BLOCK=BLOCK_N, HEAD_D=HEAD_D)
        s = tl.dot(q, tl.trans(k))
        if MASKED:
            keep = (start_n + offs_n)[None, :] < N
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= (start_n + offs_n)[None, :])
            s = tl.where(keep, s, float("-inf"))
        v = load_kv(v_src, bh, b, h, start_n, offs_n, offs_d, stride_vn, N, MASK=MASKED,
                    TMA=TMA, BLOCK=BLOCK_N, HEAD_D=HEAD_D)
        if SOFTMAX == 1 and not MASKED:
            acc, l_i, m_i = update_lazy(s, m_i, l_i, acc, v, qk_scale)
        elif SOFTMAX == 2 and not MASKED:
            acc, l_i, m_i = update_exp16(s, m_i, l_i, acc, v, qk_scale)
        elif SOFTMAX == 3 and not MASKED:
            acc, l_i, m_i = update_poly(s, m_i, l_i, acc, v, qk_scale, BLOCK_M=BLOCK_M,
                                        BLOCK_N=BLOCK_N)
        else:
            acc, l_i, m_i = update(s, m_i, l_i, acc, v, qk_scale, FMA=FMA, DOT_ACC=DOT_ACC)
    return acc, l_i, m_i


@triton.jit
def inner_rotated(acc, l_i, m_i, q, k_src, v_src, bh, b, h, stride_kn, stride_vn, offs_m,
                  offs_d, lo, hi, N, qk_scale, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
                  TMA: tl.constexpr, FMA: tl.constexpr, DOT_ACC: tl.constexpr):
    """Unmasked blocks only: S of block j+1 is issued before the softmax of block j."""
    offs_n = tl.arange(0, BLOCK_N)
    if lo < hi:
        k = load_kv(k_src, bh, b, h, lo, offs_n, offs_d, stride_kn, N, MASK=False, TMA=TMA,
                    BLOCK=BLOCK_N, HEAD_D=HEAD_D)
        s = tl.dot(q, tl.trans(k))
        for start_n in tl.range(lo, hi - BLOCK_N, BLOCK_N):
            k = load_kv(k_src, bh, b, h, start_n + BLOCK_N, offs_n, offs_d, stride_kn, N,
                        MASK=False, TMA=TMA, BLOCK=BLOCK_N, HEAD_D=HEAD_D)
            s_next = tl.dot(q, tl.trans(k))
            v = load_kv(v_src, bh, b, h, start_n, offs_n, offs_d, stride_vn, N,
                        MASK=False, TMA=TMA, BLOCK=BLOCK_N, HEAD_D=HEAD_D)
            acc, l_i, m_i = update(s, m_i, l_i, acc, v, qk_scale, FMA=FMA, DOT_ACC=DOT_ACC)
            s = s_next
        v = load_kv(v_src, bh, b, h, hi - BLOCK_N, offs_n, offs_d, stride_vn, N,
                    MASK=False, TMA=TMA, BLOCK=BLOCK_N, HEAD_D=HEAD_D)
        acc, l_i, m_i = update(s, m_i, l_i, acc, v, qk_scale, FMA=FMA, DOT_ACC=DOT_ACC)
    return acc, l_i, m_i


@triton.jit
def fwd(Q, K, V, O, LSE, sm_scale, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh,
        stride_kn, stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_on, H, N,
        HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr, TMA: tl.constexpr, FMA: tl.constexpr, DOT_ACC: tl.constexpr,
        ROTATE: tl.constexpr, WS: tl.constexpr, SOFTMAX: tl.constexpr):
    start_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    if TMA >= 3:
        k_src = K
        v_src = V
        if TMA == 3:
            q = Q.load([bh, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_D)
        else:
            q = Q.load([b, h, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_D)
    else:
        q = tl.load(Q + b64 * stride_qb + h64 * stride_qh + offs_m[:, None] * stride_qn
                    + offs_d[None, :], mask=offs_m[:, None] < N, other=0.0)
        k_base = K + b64 * stride_kb + h64 * stride_kh
        v_base = V + b64 * stride_vb + h64 * stride_vh
        if TMA == 1:
            k_src = tl.make_tensor_descriptor(k_base, shape=[N, HEAD_D], strides=[stride_kn, 1],
                                              block_shape=[BLOCK_N, HEAD_D])
            v_src = tl.make_tensor_descriptor(v_base, shape=[N, HEAD_D], strides=[stride_vn, 1],
                                              block_shape=[BLOCK_N, HEAD_D])
        else:
            k_src = k_base
            v_src = v_base
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
    diag = start_m * BLOCK_M
    if CAUSAL:
        free_hi = diag
        masked_hi = tl.minimum(diag + BLOCK_M, N)
    else:
        free_hi = (N // BLOCK_N) * BLOCK_N
        masked_hi = N
    if ROTATE:
        acc, l_i, m_i = inner_rotated(acc, l_i, m_i, q, k_src, v_src, bh, b, h, stride_kn,
                                      stride_vn, offs_m, offs_d, 0, free_hi, N, qk_scale,
                                      BLOCK_N=BLOCK_N, HEAD_D=HEAD_D, TMA=TMA, FMA=FMA,
                                      DOT_ACC=DOT_ACC)
    else:
        acc, l_i, m_i = inner(acc, l_i, m_i, q, k_src, v_src, bh, b, h, stride_kn, stride_vn,
                              offs_m, offs_d, 0, free_hi, N, qk_scale, BLOCK_M=BLOCK_M,
                              BLOCK_N=BLOCK_N, HEAD_D=HEAD_D, MASKED=False, CAUSAL=CAUSAL,
                              TMA=TMA, FMA=FMA, DOT_ACC=DOT_ACC, WS=WS, SOFTMAX=SOFTMAX)
    acc, l_i, m_i = inner(acc, l_i, m_i, q, k_src, v_src, bh, b, h, stride_kn, stride_vn,
                          offs_m, offs_d, free_hi, masked_hi, N, qk_scale, BLOCK_M=BLOCK_M,
                          BLOCK_N=BLOCK_N, HEAD_D=HEAD_D, MASKED=True, CAUSAL=CAUSAL, TMA=TMA,
                          FMA=FMA, DOT_ACC=DOT_ACC, WS=False, SOFTMAX=False)
    acc = acc / l_i[:, None]
    lse = (m_i + tl.log2(l_i)) * LN2
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)
    out = acc.to(q.dtype)
    if TMA == 3:
        O.store([bh, start_m * BLOCK_M, 0], out.reshape(1, BLOCK_M, HEAD_D))
    elif TMA == 4:
        O.store([b, h, start_m * BLOCK_M, 0], out.reshape(1, 1, BLOCK_M, HEAD_D))
    else:
        tl.store(O + b64 * stride_ob + h64 * stride_oh + offs_m[:, None] * stride_on
                 + offs_d[None, :], out, mask=(offs_m < N)[:, None])


VARIANTS = {  # (TMA, FMA, DOT_ACC, ROTATE, WS, SOFTMAX: 0 plain, 1 lazy, 2 fp16 exp2, 3 poly)
    "cur-dev-tma": (1, False, False, False, False, 0),  # the ladder before this search
    "fma-dev-tma": (1, True, True, False, False, 0),
    "fma-ptr": (0, True, True, False, False, 0),
    "fma-host3": (3, True, True, False, False, 0),
    "fma-host4": (4, True, True, False, False, 0),  # what the ladder's steps 4-5 became
    "rot-host3": (3, True, True, True, False, 0),
    "ws-host3": (3, True, True, False, True, 0),
    "lazy-ptr": (0, True, True, False, False, 1),
    "lazy-host4": (4, True, True, False, False, 1),
    "exp16-host4": (4, True, True, False, False, 2),
    "poly-host4": (4, True, True, False, False, 3),
    "poly-ptr": (0, True, True, False, False, 3),
    "split-early": None,  # the ladder's step-7 kernel: the query tile as two row halves
}
COMPILED_ONLY = {"exp16-host4"}  # inline PTX: no interpreter
APPROXIMATE_EXP = {"exp16-host4", "poly-host4", "poly-ptr"}  # relative error ~1e-4 per score
CONFIGS = {  # (BLOCK_M, BLOCK_N, num_warps, num_stages); BLOCK_N <= d pays on Hopper
    64: [(64, 64, 4, 3), (64, 64, 4, 2), (64, 32, 4, 3), (128, 64, 4, 3), (128, 64, 4, 2),
         (128, 64, 8, 2), (128, 64, 8, 3), (128, 64, 8, 4), (128, 32, 4, 3), (128, 32, 8, 3),
         (128, 128, 8, 3), (256, 64, 8, 3)],
    128: [(64, 64, 4, 3), (64, 64, 4, 2), (64, 32, 4, 3), (128, 64, 4, 2), (128, 64, 4, 3),
          (128, 64, 8, 3), (128, 64, 8, 4), (128, 32, 4, 2), (128, 32, 4, 3),
          (128, 128, 8, 3), (256, 64, 16, 2)],
}
SPLIT_CONFIGS = {  # halves of BLOCK_M // 2 >= 64 rows: one wgmma tile per warpgroup
    64: [(128, 64, 4, 2), (128, 64, 4, 3), (128, 64, 4, 4), (128, 128, 4, 2), (128, 128, 4, 3),
         (256, 64, 8, 2), (256, 64, 8, 3), (256, 128, 8, 2)],
    128: [(128, 64, 4, 2), (128, 64, 4, 3), (128, 32, 4, 2), (128, 32, 4, 3), (256, 64, 8, 2),
          (256, 64, 8, 3), (256, 32, 8, 3)],
}
CASES = [(64, False), (64, True), (128, False), (128, True)]


def configs(variant, d):
    return (SPLIT_CONFIGS if VARIANTS[variant] is None else CONFIGS)[d]


def launch(variant, cfg, q, k, v, causal, o=None, lse=None):
    bm, bn, warps, stages = cfg
    B, H, N, D = q.shape
    o = torch.empty_like(q) if o is None else o
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32) if lse is None else lse
    if VARIANTS[variant] is None:  # the course kernel itself, at any head dim
        args = [TensorDescriptor.from_tensor(x, [1, 1, blk, D])
                for x, blk in ((q, bm // 2), (k, bn), (v, bn), (o, bm // 2))]
        strides = [s for x in (q, k, v, o) for s in x.stride()]
        attn_fwd_halves_kernel[(triton.cdiv(N, bm), B * H)](
            *args, lse, D ** -0.5, *strides, H, N, HEAD_D=D, BLOCK_M=bm, BLOCK_N=bn,
            CAUSAL=causal, USE_TMA=True, num_warps=warps, num_stages=stages)
        return o, lse
    tma, fma, dot_acc, rotate, ws, softmax = VARIANTS[variant]
    if tma == 3:
        args = [TensorDescriptor.from_tensor(x.view(B * H, N, D), [1, blk, D])
                for x, blk in ((q, bm), (k, bn), (v, bn), (o, bm))]
    elif tma == 4:
        args = [TensorDescriptor.from_tensor(x, [1, 1, blk, D])
                for x, blk in ((q, bm), (k, bn), (v, bn), (o, bm))]
    else:
        args = [q, k, v, o]
    strides = [s for x in (q, k, v, o) for s in x.stride()[:3]]
    fwd[(triton.cdiv(N, bm), B * H)](*args, lse, D ** -0.5, *strides, H, N, HEAD_D=D,
                                     BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, TMA=tma, FMA=fma,
                                     DOT_ACC=dot_acc, ROTATE=rotate, WS=ws, SOFTMAX=softmax,
                                     num_warps=warps,
                                     num_stages=stages)
    return o, lse


def set_allocator():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                  device="cuda"))


def warm(jobs):
    """Worker: compile each job on a small input with the same specialisation."""
    set_allocator()
    failures = {}
    for variant, cfg, d, causal, dtype in jobs:
        heads = 32 if d == 64 else 16
        q, k, v = (torch.randn(1, heads, 512, d, device="cuda", dtype=dtype) for _ in range(3))
        try:
            launch(variant, cfg, q, k, v, causal)
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001
            failures[(variant, cfg, d, causal, str(dtype))] = \
                f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[-1][:150]}"
    return failures


def check(variant, cfg, d, causal, dtype, big=None):
    """'' or what is wrong: two ragged shapes, then the timing case `big` = (q, k, v, ref)."""
    shapes = [(2, 3, 333, d), (1, 2, 1000, d)]
    for B, H, N, D in shapes:
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=dtype) for _ in range(3))
        o, lse = launch(variant, cfg, q, k, v, causal)
        ref, ref_lse = verify.reference_fp32(q, k, v, causal)
        err, ok = verify.max_error(o, ref, 2e-2)
        lerr, lok = verify.max_error(lse, ref_lse, 2e-2)
        if not (ok and lok):
            return f"N={N}: max error {err:.3g} lse {lerr:.3g}"
    if big is not None:
        q, k, v, ref = big
        o, _ = launch(variant, cfg, q, k, v, causal)
        err, ok = verify.max_error(o, ref, 2e-2)
        if not ok:
            return f"big: max error {err:.3g}"
    return ""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("explore-results"))
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--workers", type=int, default=14)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu/explore_fwd.py times kernels on a CUDA GPU; there is none here.")
        return 0
    from flashcourse import runtime

    runtime.setup()
    set_allocator()
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
    variants = args.variants.split(",")
    dtype = torch.float16
    jobs = [(var, cfg, d, causal, dtype) for var in variants for d, causal in CASES
            for cfg in configs(var, d)]
    start = time.time()
    chunks = [jobs[i::args.workers] for i in range(args.workers)]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        failures = {}
        for part in pool.map(warm, chunks):
            failures.update(part)
    print(f"compiled {len(jobs)} kernels in {time.time() - start:.0f} s, "
          f"{len(failures)} failed", flush=True)
    for key, why in sorted(failures.items(), key=str)[:40]:
        print("  compile failure", key, why)
    rows = []
    for d, causal in CASES:
        case = cases.Case("fwd", "fp16", d, args.n, causal)  # B * N = 32k tokens
        n, flops = case.n, case.flops()
        q, k, v, _ = cases.make_inputs(case)
        with torch.no_grad():
            ref, _ = verify.reference_fp32(q, k, v, causal)
        sdpa = {}
        for name in ("cudnn", "flash"):
            call = providers.make_call(f"sdpa-{name}", causal, d ** -0.5)
            sdpa[name] = bench.median_ms(lambda call=call, q=q, k=k, v=v: call(q, k, v),
                                           rep_ms=40, warmup_ms=10)
        best = None
        for variant in variants:
            for cfg in configs(variant, d):
                key = (variant, cfg, d, causal, str(dtype))
                row = {"d": d, "causal": causal, "N": n, "variant": variant,
                       "config": "x".join(map(str, cfg)), "tflops": "", "vs_cudnn": "",
                       "vs_flash": "", "status": ""}
                rows.append(row)
                if key in failures:
                    row["status"] = "compile failed: " + failures[key]
                    continue
                try:
                    problem = check(variant, cfg, d, causal, dtype, (q, k, v, ref))
                    if problem:
                        row["status"] = "WRONG " + problem
                        continue
                    ms = bench.median_ms(
                        lambda variant=variant, cfg=cfg, q=q, k=k, v=v, causal=causal:
                        launch(variant, cfg, q, k, v, causal), rep_ms=40, warmup_ms=10)
                except Exception as err:  # noqa: BLE001
                    row["status"] = f"error {type(err).__name__}: {str(err)[:120]}"
                    continue
                row["tflops"] = round(flops / ms / 1e9, 1)
                row["vs_cudnn"] = round(sdpa["cudnn"] / ms, 3)
                row["vs_flash"] = round(sdpa["flash"] / ms, 3)
                row["status"] = "ok"
                if best is None or row["tflops"] > best["tflops"]:
                    best = row
        print(f"d={d} causal={causal} N={n}: cudnn {flops / sdpa['cudnn'] / 1e9:.1f} "
              f"flash {flops / sdpa['flash'] / 1e9:.1f} TFLOP/s", flush=True)
        for row in rows:
            if row["d"] == d and row["causal"] == causal:
                print(f"  {row['variant']:12s} {row['config']:12s} {row['tflops']!s:>7s} "
                      f"cudnn x{row['vs_cudnn']!s:6s} flash x{row['vs_flash']!s:6s} "
                      f"{row['status'][:100]}", flush=True)
        if best:
            print("  BEST", best, flush=True)
        torch.cuda.empty_cache()
    bench.write_csv(args.out / "explore-fwd.csv", rows)
    print(f"total {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
