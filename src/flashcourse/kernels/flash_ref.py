"""The course's reference FlashAttention-2 in Triton: one kernel source, an optimisation ladder.

Forward: one program per (query block, batch * head) walks over the key/value blocks with an
online softmax (lesson 6). Switches (tl.constexpr) turn on one optimisation after another, so
every step of the ladder is the same source compiled differently:

  step 0  plain FA2: exp, every key block masked (no split)
  step 1  exp2, with log2(e) folded into the softmax scale
  step 2  causal loop split: unmasked blocks left of the diagonal, one masked diagonal block
  step 3  tuned tiles and warps, from a table keyed on d (autotuned per (N, d, causal) when
          compiled)
  step 4  K and V loaded through tensor descriptors (TMA on Hopper), where Triton has them
  step 5  pipelining depth: num_stages from the table (swept by autotune when compiled)
  step 6  warp specialisation of the key loop (tl.range(..., warp_specialize=True))
  step 7  step 5 with the query tile as two row halves, so that the softmax of one overlaps
          the matmuls of the other (a kernel of its own: attn_fwd_halves_kernel)

Backward (FA2): a delta pre-pass (rowsum(dO * O)), a dK/dV kernel (one program per key block,
looping over query blocks) and a dQ kernel (one program per query block), both recomputing P
from the saved logsumexp. `flash_attention(q, k, v, causal, sm_scale)` wraps it all as a
torch.autograd.Function for (B, H, N, D) tensors with any strides.

Import this module after `fc.setup()` (it picks the runtime itself if nobody did).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

try:  # host-side tensor descriptors (Triton >= 3.4)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

from .. import attention, runtime
from ..runtime import CourseInputError

runtime.current()  # choose compiled Triton or the interpreter before any kernel is defined

LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E)
LN2 = 0.6931471805599453  # log(x) == log2(x) * LN2


# ---------------------------------------------------------------- forward kernel


@triton.jit
def head_rows(X, b, h, stride_b, stride_h, stride_n, stride_d, offs, offs_d):
    """Pointers to rows offs of head (b, h) of a (B, H, N, HEAD_D) tensor: (len(offs), HEAD_D).
    b and h are int64, so that b * stride_b cannot overflow on large tensors."""
    return X + b * stride_b + h * stride_h + offs[:, None] * stride_n + offs_d[None, :] * stride_d


@triton.jit
def load_rows(src, b, h, start, offs, offs_d, stride_n, stride_d, N,
              MASK_ROWS: tl.constexpr, USE_TMA: tl.constexpr):
    """Rows start..start+len(offs) of head (b, h), an (N, HEAD_D) matrix; rows >= N read as 0.

    USE_TMA: src is a (B, H, N, HEAD_D) tensor descriptor whose block is (1, 1, rows, HEAD_D);
    the descriptor knows the shape, so out-of-range rows come back as 0 without a mask.
    Otherwise src points at this head's first row.
    """
    if USE_TMA:
        x = src.load([b, h, start, 0])
        x = x.reshape(x.shape[2], x.shape[3])
    else:
        ptrs = src + (start + offs)[:, None] * stride_n + offs_d[None, :] * stride_d
        if MASK_ROWS:
            x = tl.load(ptrs, mask=(start + offs)[:, None] < N, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def softmax_update(s, acc, l_i, m_i, v, offs_m, offs_n, N, qk_scale, MASKED: tl.constexpr,
                   CAUSAL: tl.constexpr, USE_EXP2: tl.constexpr):
    """One online-softmax step on raw scores s (BLOCK_M, BLOCK_N) of keys offs_n: mask them
    (MASKED), rescale acc and l_i to the new row max, then acc += P V."""
    if MASKED:
        keep = offs_n[None, :] < N
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        s = tl.where(keep, s, float("-inf"))
    if USE_EXP2:  # scale and subtract in one FMA, then ex2.approx: the SFU's instruction
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # qk_scale > 0: max commutes
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
    else:  # exp(x) compiles to exp2(x * log2e): an extra multiply per score
        s = s * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # the MMA adds into acc
    return acc, l_i, m_new


@triton.jit
def attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn, stride_kd, stride_vn,
                   stride_vd, offs_m, offs_d, lo, hi, N, qk_scale,
                   BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                   USE_EXP2: tl.constexpr, USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Online softmax over the key blocks lo..hi (lo a multiple of BLOCK_N) of head (b, h).

    MASKED=False is the fast path: every key is < N and (causal) left of every query row, so
    no bounds check and no -inf mask. acc: (BLOCK_M, HEAD_D) fp32; l_i, m_i: (BLOCK_M,).
    """
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        k = load_rows(k_src, b, h, start_n, offs_n, offs_d, stride_kn, stride_kd, N, MASKED,
                      USE_TMA)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) raw scores, not yet scaled
        v = load_rows(v_src, b, h, start_n, offs_n, offs_d, stride_vn, stride_vd, N, MASKED,
                      USE_TMA)
        acc, l_i, m_i = softmax_update(s, acc, l_i, m_i, v, offs_m, start_n + offs_n, N,
                                       qk_scale, MASKED, CAUSAL, USE_EXP2)
    return acc, l_i, m_i


@triton.jit
def attn_fwd_inner_halves(acc0, l0, m0, acc1, l1, m1, q0, q1, k_src, v_src, b, h, stride_kn,
                          stride_kd, stride_vn, stride_vd, offs_m0, offs_m1, offs_d, lo, hi, N,
                          qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                          CAUSAL: tl.constexpr, USE_TMA: tl.constexpr):
    """attn_fwd_inner for a query tile held as two independent halves (step 7).

    Both halves' Q K^T are issued before either softmax: the tensor cores work on half 1's
    scores while half 0's softmax runs, then on half 0's P V while half 1's softmax runs.
    """
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = load_rows(k_src, b, h, start_n, offs_n, offs_d, stride_kn, stride_kd, N, MASKED,
                      USE_TMA)
        v = load_rows(v_src, b, h, start_n, offs_n, offs_d, stride_vn, stride_vd, N, MASKED,
                      USE_TMA)
        s0 = tl.dot(q0, tl.trans(k))
        s1 = tl.dot(q1, tl.trans(k))
        acc0, l0, m0 = softmax_update(s0, acc0, l0, m0, v, offs_m0, start_n + offs_n, N,
                                      qk_scale, MASKED, CAUSAL, True)
        acc1, l1, m1 = softmax_update(s1, acc1, l1, m1, v, offs_m1, start_n + offs_n, N,
                                      qk_scale, MASKED, CAUSAL, True)
    return acc0, l0, m0, acc1, l1, m1


@triton.jit
def load_query_rows(Q, b, h, start, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                    ROWS: tl.constexpr, USE_TMA: tl.constexpr):
    """Query rows start..start+ROWS of head (b, h), (ROWS, HEAD_D); rows >= N read as 0."""
    offs = tl.arange(0, ROWS)
    if USE_TMA:  # the copy engine moves whole tiles; the descriptor carries shape and strides
        q = load_rows(Q, b, h, start, offs, offs_d, 0, 0, N, True, True)
    else:
        q = load_rows(Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh, b, h, start,
                      offs, offs_d, stride_qn, stride_qd, N, True, False)
    return q


@triton.jit
def key_value_sources(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh,
                      USE_TMA: tl.constexpr):
    """What load_rows reads K and V of head (b, h) from: the descriptors, or the head's first
    row."""
    if USE_TMA:
        k_src = K
        v_src = V
    else:
        k_src = K + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
        v_src = V + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    return k_src, v_src


@triton.jit
def key_ranges(start, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(free_hi, masked_lo, masked_hi) of the split loop for query rows start..start+BLOCK_M:
    keys [0, free_hi) need no mask, keys [masked_lo, masked_hi) do."""
    if CAUSAL:  # keys < start are left of every row of this block: no mask needed
        free_hi = start
        masked_hi = tl.minimum(start + BLOCK_M, N)
    else:  # full key blocks, then the ragged tail (if any)
        free_hi = (N // BLOCK_N) * BLOCK_N
        masked_hi = N
    return free_hi, free_hi, masked_hi


@triton.jit
def store_rows(O, LSE, acc, l_i, m_i, b, h, bh, start, offs_d, stride_ob, stride_oh, stride_on,
               stride_od, N, ROWS: tl.constexpr, HEAD_D: tl.constexpr,
               USE_EXP2: tl.constexpr, USE_TMA: tl.constexpr):
    """O = acc / l_i and the natural-log LSE for query rows start..start+ROWS; rows >= N are
    not written."""
    acc = acc / l_i[:, None]
    if USE_EXP2:
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # back to natural log for backward
    else:
        lse = m_i + tl.log(l_i)
    offs_m = start + tl.arange(0, ROWS)
    rows = offs_m < N
    if USE_TMA:  # rows >= N fall outside the descriptor's shape and are dropped
        O.store([b, h, start, 0], acc.to(O.dtype).reshape(1, 1, ROWS, HEAD_D))
    else:
        tl.store(head_rows(O, b.to(tl.int64), h.to(tl.int64), stride_ob, stride_oh, stride_on,
                           stride_od, offs_m, offs_d), acc.to(O.dtype.element_ty),
                 mask=rows[:, None])
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=rows)


@triton.jit
def attn_fwd_kernel(Q, K, V, O, LSE, sm_scale,
                    stride_qb, stride_qh, stride_qn, stride_qd,
                    stride_kb, stride_kh, stride_kn, stride_kd,
                    stride_vb, stride_vh, stride_vn, stride_vd,
                    stride_ob, stride_oh, stride_on, stride_od,
                    H, N,
                    HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, USE_EXP2: tl.constexpr, SPLIT: tl.constexpr,
                    USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """O = softmax(sm_scale * Q K^T) V and LSE (natural log) for one query block of one head.

    Grid: (cdiv(N, BLOCK_M), B * H). LSE is a contiguous (B, H, N) float32 tensor. With
    USE_TMA, Q, K, V and O are (B, H, N, HEAD_D) tensor descriptors built on the host.
    """
    start_m = tl.program_id(0)
    if CAUSAL:  # the last query blocks have the most keys: start them first
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    start = start_m * BLOCK_M
    offs_m = start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    q = load_query_rows(Q, b, h, start, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                        BLOCK_M, USE_TMA)  # (BLOCK_M, HEAD_D), read once, kept for the loop
    k_src, v_src = key_value_sources(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh,
                                     USE_TMA)
    if USE_EXP2:
        qk_scale = sm_scale * 1.4426950408889634  # exp(x * sm_scale) == exp2(x * qk_scale)
    else:
        qk_scale = sm_scale
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)

    if SPLIT:
        free_hi, masked_lo, masked_hi = key_ranges(start, N, BLOCK_M, BLOCK_N, CAUSAL)
        acc, l_i, m_i = attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn,
                                       stride_kd, stride_vn, stride_vd, offs_m, offs_d, 0,
                                       free_hi, N, qk_scale, BLOCK_N, False, CAUSAL, USE_EXP2,
                                       USE_TMA, WARP_SPEC)
        acc, l_i, m_i = attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn,
                                       stride_kd, stride_vn, stride_vd, offs_m, offs_d,
                                       masked_lo, masked_hi, N, qk_scale, BLOCK_N, True, CAUSAL,
                                       USE_EXP2, USE_TMA, False)  # one or two blocks
    else:  # one loop, every block masked
        if CAUSAL:
            hi = tl.minimum(start + BLOCK_M, N)
        else:
            hi = N
        acc, l_i, m_i = attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn,
                                       stride_kd, stride_vn, stride_vd, offs_m, offs_d, 0, hi,
                                       N, qk_scale, BLOCK_N, True, CAUSAL, USE_EXP2, USE_TMA,
                                       WARP_SPEC)
    store_rows(O, LSE, acc, l_i, m_i, b, h, bh, start, offs_d, stride_ob, stride_oh, stride_on,
               stride_od, N, BLOCK_M, HEAD_D, USE_EXP2, USE_TMA)


@triton.jit
def attn_fwd_halves_kernel(Q, K, V, O, LSE, sm_scale,
                           stride_qb, stride_qh, stride_qn, stride_qd,
                           stride_kb, stride_kh, stride_kn, stride_kd,
                           stride_vb, stride_vh, stride_vn, stride_vd,
                           stride_ob, stride_oh, stride_on, stride_od,
                           H, N,
                           HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           CAUSAL: tl.constexpr, USE_TMA: tl.constexpr):
    """Step 7: step 5's kernel with its query tile held as two halves of BLOCK_M // 2 rows, each
    with its own acc, l_i and m_i, so that one half's softmax overlaps the other's matmuls.
    With USE_TMA the Q and O descriptors' blocks are BLOCK_M // 2 rows."""
    HALF: tl.constexpr = BLOCK_M // 2
    start_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    start = start_m * BLOCK_M
    offs_m0 = start + tl.arange(0, HALF)
    offs_m1 = offs_m0 + HALF
    offs_d = tl.arange(0, HEAD_D)
    q0 = load_query_rows(Q, b, h, start, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                         HALF, USE_TMA)
    q1 = load_query_rows(Q, b, h, start + HALF, offs_d, stride_qb, stride_qh, stride_qn,
                         stride_qd, N, HALF, USE_TMA)
    k_src, v_src = key_value_sources(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh,
                                     USE_TMA)
    qk_scale = sm_scale * 1.4426950408889634
    m0 = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l0 = tl.zeros([HALF], dtype=tl.float32)
    acc0 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
    m1 = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l1 = tl.zeros([HALF], dtype=tl.float32)
    acc1 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
    free_hi, masked_lo, masked_hi = key_ranges(start, N, BLOCK_M, BLOCK_N, CAUSAL)
    acc0, l0, m0, acc1, l1, m1 = attn_fwd_inner_halves(
        acc0, l0, m0, acc1, l1, m1, q0, q1, k_src, v_src, b, h, stride_kn, stride_kd,
        stride_vn, stride_vd, offs_m0, offs_m1, offs_d, 0, free_hi, N, qk_scale, BLOCK_N,
        False, CAUSAL, USE_TMA)
    acc0, l0, m0, acc1, l1, m1 = attn_fwd_inner_halves(
        acc0, l0, m0, acc1, l1, m1, q0, q1, k_src, v_src, b, h, stride_kn, stride_kd,
        stride_vn, stride_vd, offs_m0, offs_m1, offs_d, masked_lo, masked_hi, N, qk_scale,
        BLOCK_N, True, CAUSAL, USE_TMA)
    store_rows(O, LSE, acc0, l0, m0, b, h, bh, start, offs_d, stride_ob, stride_oh, stride_on,
               stride_od, N, HALF, HEAD_D, True, USE_TMA)
    store_rows(O, LSE, acc1, l1, m1, b, h, bh, start + HALF, offs_d, stride_ob, stride_oh,
               stride_on, stride_od, N, HALF, HEAD_D, True, USE_TMA)


# ---------------------------------------------------------------- backward kernels


@triton.jit
def attn_bwd_delta_kernel(O, DO, DELTA,
                          stride_ob, stride_oh, stride_on, stride_od,
                          stride_dob, stride_doh, stride_don, stride_dod,
                          H, N, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta = rowsum(dO * O), the term every dS = P * (dP - delta) needs. Grid as forward."""
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m < N
    o = tl.load(head_rows(O, b, h, stride_ob, stride_oh, stride_on, stride_od, offs_m, offs_d),
                mask=rows[:, None], other=0.0)
    do = tl.load(head_rows(DO, b, h, stride_dob, stride_doh, stride_don, stride_dod, offs_m,
                           offs_d), mask=rows[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + bh.to(tl.int64) * N + offs_m, delta, mask=rows)


@triton.jit
def attn_bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                        stride_qn, stride_qd, stride_don, stride_dod, offs_n, offs_d,
                        lo, hi, N, qk_scale,
                        BLOCK_M: tl.constexpr, MASKED: tl.constexpr):
    """Accumulate dK, dV of one key block over the query blocks lo..hi, recomputing P^T.

    Query rows >= N load as zeros (q = dO = lse = delta = 0), so they add exactly 0.
    """
    for start_m in tl.range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows = offs_m < N
        q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd,
                    mask=rows[:, None], other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_don + offs_d[None, :] * stride_dod,
                     mask=rows[:, None], other=0.0)
        lse2 = tl.load(lse_base + offs_m, mask=rows, other=0.0) * 1.4426950408889634
        delta = tl.load(delta_base + offs_m, mask=rows, other=0.0)
        s_t = tl.dot(k, tl.trans(q))  # S^T: (BLOCK_N, BLOCK_M)
        p_t = tl.exp2(s_t * qk_scale - lse2[None, :])  # P^T, recomputed from the logsumexp
        if MASKED:  # the diagonal: key n is seen only by query rows m >= n
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)  # dV += P^T dO
        dp_t = tl.dot(v, tl.trans(do))  # dP^T = V dO^T
        ds_t = p_t * (dp_t - delta[None, :])  # dS^T = P^T * (dP^T - delta)
        dk += tl.dot(ds_t.to(q.dtype), q)  # dK += dS^T Q
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, sm_scale,
                         stride_qb, stride_qh, stride_qn, stride_qd,
                         stride_kb, stride_kh, stride_kn, stride_kd,
                         stride_vb, stride_vh, stride_vn, stride_vd,
                         stride_dob, stride_doh, stride_don, stride_dod,
                         stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                         stride_dvb, stride_dvh, stride_dvn, stride_dvd,
                         H, N, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dK and dV of one key block (BLOCK_N rows). Grid: (cdiv(N, BLOCK_N), B * H)."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    keys = offs_n < N
    k = tl.load(head_rows(K, b, h, stride_kb, stride_kh, stride_kn, stride_kd, offs_n, offs_d),
                mask=keys[:, None], other=0.0)
    v = tl.load(head_rows(V, b, h, stride_vb, stride_vh, stride_vn, stride_vd, offs_n, offs_d),
                mask=keys[:, None], other=0.0)
    q_base = Q + b * stride_qb + h * stride_qh
    do_base = DO + b * stride_dob + h * stride_doh
    lse_base = LSE + bh.to(tl.int64) * N
    delta_base = DELTA + bh.to(tl.int64) * N
    qk_scale = sm_scale * 1.4426950408889634
    dk = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    if CAUSAL:  # rows < start_n see none of these keys; the diagonal rows need the mask
        dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                     stride_qn, stride_qd, stride_don, stride_dod, offs_n,
                                     offs_d, start_n, tl.minimum(start_n + BLOCK_N, N), N,
                                     qk_scale, BLOCK_M, True)
        dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                     stride_qn, stride_qd, stride_don, stride_dod, offs_n,
                                     offs_d, start_n + BLOCK_N, N, N, qk_scale, BLOCK_M, False)
    else:
        dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                     stride_qn, stride_qd, stride_don, stride_dod, offs_n,
                                     offs_d, 0, N, N, qk_scale, BLOCK_M, False)
    dk = dk * sm_scale  # S = sm_scale * Q K^T: the scale comes back once in dK
    tl.store(head_rows(DK, b, h, stride_dkb, stride_dkh, stride_dkn, stride_dkd, offs_n,
                       offs_d), dk.to(DK.dtype.element_ty), mask=keys[:, None])
    tl.store(head_rows(DV, b, h, stride_dvb, stride_dvh, stride_dvn, stride_dvd, offs_n,
                       offs_d), dv.to(DV.dtype.element_ty), mask=keys[:, None])


@triton.jit
def attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd,
                      stride_vn, stride_vd, offs_m, offs_d, lo, hi, N, qk_scale,
                      BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """Accumulate dQ of one query block over the key blocks lo..hi (keys >= N load as 0 and
    add 0, because dQ += dS K)."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        keys = offs_n < N
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=keys[:, None], other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=keys[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N)
        p = tl.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        dp = tl.dot(do, tl.trans(v))  # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)  # dQ += dS K
    return dq


@triton.jit
def attn_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, sm_scale,
                       stride_qb, stride_qh, stride_qn, stride_qd,
                       stride_kb, stride_kh, stride_kn, stride_kd,
                       stride_vb, stride_vh, stride_vn, stride_vd,
                       stride_dob, stride_doh, stride_don, stride_dod,
                       stride_dqb, stride_dqh, stride_dqn, stride_dqd,
                       H, N, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dQ of one query block (BLOCK_M rows). Grid: (cdiv(N, BLOCK_M), B * H)."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m < N
    q = tl.load(head_rows(Q, b, h, stride_qb, stride_qh, stride_qn, stride_qd, offs_m, offs_d),
                mask=rows[:, None], other=0.0)
    do = tl.load(head_rows(DO, b, h, stride_dob, stride_doh, stride_don, stride_dod, offs_m,
                           offs_d), mask=rows[:, None], other=0.0)
    lse2 = tl.load(LSE + bh.to(tl.int64) * N + offs_m, mask=rows, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh.to(tl.int64) * N + offs_m, mask=rows, other=0.0)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    qk_scale = sm_scale * 1.4426950408889634
    dq = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
    if CAUSAL:
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd,
                               stride_vn, stride_vd, offs_m, offs_d, 0, start_m, N, qk_scale,
                               BLOCK_N, False)
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd,
                               stride_vn, stride_vd, offs_m, offs_d, start_m,
                               tl.minimum(start_m + BLOCK_M, N), N, qk_scale, BLOCK_N, True)
    else:
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd,
                               stride_vn, stride_vd, offs_m, offs_d, 0, N, N, qk_scale,
                               BLOCK_N, False)
    dq = dq * sm_scale
    tl.store(head_rows(DQ, b, h, stride_dqb, stride_dqh, stride_dqn, stride_dqd, offs_m,
                       offs_d), dq.to(DQ.dtype.element_ty), mask=rows[:, None])


# ---------------------------------------------------------------- the ladder


@dataclass(frozen=True)
class Step:
    number: int
    name: str
    what: str  # one sentence: what changes and why it is faster
    use_exp2: bool
    split: bool
    tuned: bool  # tiles and warps from TUNED (else BASELINE)
    tma: bool
    tuned_stages: bool  # num_stages from TUNED (else 2)
    warp_spec: bool
    halves: bool = False  # the query tile as two halves (attn_fwd_halves_kernel)


STEPS = [
    Step(0, "plain FA2", "exp() and one loop in which every key block is masked", False, False,
         False, False, False, False),
    Step(1, "exp2", "exp2 with log2(e) folded into the scale: scale and max subtraction in one "
         "FMA, then the native ex2 instruction per score", True, False, False, False, False,
         False),
    Step(2, "causal split", "unmasked blocks left of the diagonal, one masked diagonal block: "
         "no bounds checks or -inf selects in the main loop", True, True, False, False, False,
         False),
    Step(3, "tuned tiles", "BLOCK_M, BLOCK_N and warps from a table keyed on d (autotuned per "
         "(N, d, causal) when compiled)", True, True, True, False, False, False),
    Step(4, "TMA loads", "Q, K, V and O through host-built tensor descriptors: on Hopper the TMA "
         "engine copies whole tiles, freeing registers and threads", True, True, True, True,
         False, False),
    Step(5, "pipelining", "num_stages from the table (swept when compiled): more K/V tiles in "
         "flight hide HBM latency", True, True, True, True, True, False),
    Step(6, "warp specialisation", "tl.range(..., warp_specialize=True): producer warps load, "
         "consumer warps compute", True, True, True, True, True, True),
    Step(7, "two row halves", "step 5 with the query tile as two halves issued back to back: "
         "one half's softmax overlaps the other's matmuls (d <= 64; at d = 128 it runs step 5)",
         True, True, True, True, True, False, True),
]

# (BLOCK_M, BLOCK_N, num_warps, num_stages)
BASELINE = (64, 32, 4, 2)  # a first guess, before any tuning
# Measured best on an H200 with Triton 3.6 (gpu/explore_fwd.py, fp16, N = 4096 and 16384),
# keyed on head dim <= 64: the best config did not depend on N or on causal masking.
# BLOCK_M % BLOCK_N == 0 always. d = 128 wants one warpgroup per 128 query rows so that two CTAs
# share an SM and hide each other's softmax; d = 64 wants two warpgroups and four K/V tiles in
# flight.
TUNED = {True: (128, 64, 8, 4), False: (128, 64, 4, 2)}
# Step 7 where the halves paid (d <= 64: one warpgroup, two 64-row halves); at d = 128 the second
# half's scores and acc do not fit in the registers beside the first's and step 5 is faster.
HALVES = {True: (128, 64, 4, 3), False: None}
AUTOTUNE_TILES = [(64, 64, 4), (128, 64, 4), (128, 64, 8), (128, 32, 4)]  # step 3 search
AUTOTUNE_STAGES = [2, 3, 4]  # step 5 search
AUTOTUNE_STEPS = (3, 5)  # the steps forward(..., autotune=True) searches (compiled only)
INTERPRETER_CONFIG = (16, 16, 4, 1)  # small tiles: the interpreter's cost grows with tile area
# Backward configs keyed on head dim <= 64: dK/dV (BLOCK_M, BLOCK_N, warps, stages), dQ (...)
BACKWARD = {
    True: ((32, 128, 4, 3), (128, 32, 4, 3)),
    False: ((64, 128, 8, 2), (128, 64, 8, 2)),
}
BACKWARD_FALLBACK = ((32, 64, 4, 2), (64, 32, 4, 2))
DEFAULT_STEP = 7  # what flash_attention() runs unless told otherwise


def ladder_steps() -> list[Step]:
    """The optimisation ladder, step 0 (plain FA2) to step 7 (two row halves)."""
    return list(STEPS)


def _step(step) -> Step:
    if isinstance(step, Step):
        return step
    if step is None:
        return STEPS[DEFAULT_STEP]
    if not 0 <= int(step) < len(STEPS):
        raise CourseInputError(f"step {step} does not exist: the ladder has steps 0 to "
                               f"{len(STEPS) - 1}.")
    return STEPS[int(step)]


def config_for(step, d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of a ladder step for this problem."""
    step = _step(step)
    if runtime.current().interpreter:
        return INTERPRETER_CONFIG
    if not step.tuned:
        return BASELINE
    if step.halves and HALVES[d <= 64]:
        return HALVES[d <= 64]
    bm, bn, warps, stages = TUNED[d <= 64]
    if step.warp_spec:  # Hopper's warp specialisation wants two consumer warpgroups
        bm, warps = 128, 8
    return bm, bn, warps, stages if step.tuned_stages else 2


# ---------------------------------------------------------------- features


def _capability() -> tuple[int, int]:
    if runtime.current().interpreter or not torch.cuda.is_available():
        return (0, 0)
    return torch.cuda.get_device_capability()


def tma_supported() -> bool:
    """Host-side tensor descriptors exist in this Triton (compiled: also a Hopper-or-newer
    GPU)."""
    if TensorDescriptor is None:
        return False
    return runtime.current().interpreter or _capability() >= (9, 0)


def warp_spec_supported() -> bool:
    """tl.range takes warp_specialize (Triton >= 3.4) and the GPU is Hopper or newer."""
    params = inspect.signature(tl.range.__init__).parameters
    if "warp_specialize" not in params:
        return False
    return runtime.current().interpreter or _capability() >= (9, 0)


def step_supported(step) -> tuple[bool, str]:
    """(True, "") or (False, why) for this Triton and GPU."""
    step = _step(step)
    if step.tma and not tma_supported():
        return False, "no tensor descriptors in this Triton or not a Hopper-class GPU"
    if step.warp_spec and not warp_spec_supported():
        return False, "tl.range has no warp_specialize in this Triton or GPU too old"
    return True, ""


def _tma_ok(*tensors) -> bool:
    """TMA needs a unit last stride, 16-byte aligned base and 16-byte multiples as the other
    strides."""
    for x in tensors:
        size = x.element_size()
        if x.stride(-1) != 1 or x.data_ptr() % 16:
            return False
        if any((stride * size) % 16 for stride in x.stride()[:-1]):
            return False
    return True


def _descriptors(q, k, v, o, block_m: int, block_n: int) -> list:
    """(B, H, N, D) descriptors of q, k, v, o whose blocks are one head's row tiles."""
    d = q.shape[-1]
    return [TensorDescriptor.from_tensor(x, [1, 1, rows, d])
            for x, rows in ((q, block_m), (k, block_n), (v, block_n), (o, block_m))]


# ---------------------------------------------------------------- launchers


def _strides(x) -> list[int]:
    return list(x.stride())


_AUTOTUNED: dict[int, object] = {}
_TUNERS: dict[tuple, object] = {}


def _autotuned(step: Step, d: int):
    """The forward kernel under @triton.autotune for step 3 (tiles) or 5 (stages): compiled
    only; the interpreter has no driver to time configs with."""
    if step.tuned_stages:  # the tiles are fixed (the descriptors' blocks): search the stages
        bm, bn, warps, _ = TUNED[d <= 64]
        key = (step.number, bm, bn, warps)
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=s)
                   for s in AUTOTUNE_STAGES]
    else:
        key = (step.number,)
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=2)
                   for bm, bn, w in AUTOTUNE_TILES]
    if key not in _TUNERS:
        _TUNERS[key] = triton.autotune(configs=configs, key=["N", "HEAD_D", "CAUSAL"])(
            attn_fwd_kernel)
    _AUTOTUNED[step.number] = _TUNERS[key]  # best_config() reports the last one used
    return _TUNERS[key]


def forward(q, k, v, causal: bool = False, sm_scale: float | None = None, step=None,
            config: tuple[int, int, int, int] | None = None, autotune: bool = False,
            out=None, lse=None, kernel=None):
    """Run the forward of a ladder step; returns (o, lse) with lse (B, H, N) float32.

    config overrides (BLOCK_M, BLOCK_N, num_warps, num_stages); autotune=True (compiled only)
    searches tiles for step 3 and stages for step 5. `kernel` runs a kernel with the
    exercise's signature (no ladder switches) instead of the reference.
    """
    attention.check_qkv(q, k, v)
    step = _step(step)
    ok, why = step_supported(step)
    if not ok:
        raise CourseInputError(f"ladder step {step.number} ({step.name}) cannot run here: {why}.")
    B, H, N, D = q.shape
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    o = torch.empty_like(q) if out is None else out
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device) if lse is None else lse
    if lse.shape != (B, H, N) or not lse.is_contiguous():
        raise CourseInputError("lse must be a contiguous (B, H, N) float32 tensor.")
    bm, bn, warps, stages = config or config_for(step, D)
    runtime.check_block_size("BLOCK_M", bm)
    runtime.check_block_size("BLOCK_N", bn)
    if bm % bn:
        raise CourseInputError(f"BLOCK_M={bm} must be a multiple of BLOCK_N={bn}.")
    args = [q, k, v, o, lse, sm_scale, *_strides(q), *_strides(k), *_strides(v), *_strides(o),
            H, N]
    if kernel is not None:  # the exercise kernel: step 2's switches are built in
        attention.refuse_unfinished(kernel, getattr(kernel, "__name__", "kernel"))
        kernel[(triton.cdiv(N, bm), B * H)](*args, HEAD_D=D, BLOCK_M=bm, BLOCK_N=bn,
                                            CAUSAL=causal, num_warps=warps, num_stages=stages)
        return o, lse
    use_tma = step.tma and _tma_ok(q, k, v, o)
    interpreter = runtime.current().interpreter
    if step.halves and (interpreter or HALVES[D <= 64]):
        if bm < 32 and not interpreter:
            raise CourseInputError(f"step 7 splits BLOCK_M={bm} into two halves of at least 16 "
                                   "rows (the smallest tl.dot): use BLOCK_M >= 32.")
        if use_tma:
            args[:4] = _descriptors(q, k, v, o, bm // 2, bn)
        attn_fwd_halves_kernel[(triton.cdiv(N, bm), B * H)](
            *args, HEAD_D=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, USE_TMA=use_tma,
            num_warps=warps, num_stages=stages)
        return o, lse
    if use_tma:  # the kernel reads the tensors through these; strides stay as arguments
        args[:4] = _descriptors(q, k, v, o, bm, bn)
    switches = dict(HEAD_D=D, CAUSAL=causal, USE_EXP2=step.use_exp2, SPLIT=step.split,
                    USE_TMA=use_tma, WARP_SPEC=step.warp_spec)
    if autotune and not interpreter and config is None and step.number in AUTOTUNE_STEPS:
        tuned = _autotuned(step, D)

        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_M"]), B * H)

        tuned[grid](*args, **switches)
        return o, lse
    attn_fwd_kernel[(triton.cdiv(N, bm), B * H)](*args, BLOCK_M=bm, BLOCK_N=bn,
                                                 num_warps=warps, num_stages=stages, **switches)
    return o, lse


def best_config(step) -> dict | None:
    """The config autotune picked last for step 3 or 5 (None before any autotuned run)."""
    tuner = _AUTOTUNED.get(_step(step).number)
    cfg = getattr(tuner, "best_config", None)
    if cfg is None:
        return None
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def backward_configs(d: int):
    if runtime.current().interpreter:
        return (16, 16, 4, 1), (16, 16, 4, 1)
    return BACKWARD[d <= 64]


def backward(q, k, v, o, lse, do, causal: bool, sm_scale: float | None = None,
             configs=None):
    """dq, dk, dv of attention, given the forward's output and logsumexp."""
    B, H, N, D = q.shape
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    block = 16 if runtime.current().interpreter else 64
    attn_bwd_delta_kernel[(triton.cdiv(N, block), B * H)](
        o, do, delta, *_strides(o), *_strides(do), H, N, HEAD_D=D, BLOCK_M=block)
    attempts = [configs] if configs else [backward_configs(D), BACKWARD_FALLBACK]
    for number, (kv_cfg, q_cfg) in enumerate(attempts):
        try:
            bm, bn, warps, stages = kv_cfg
            attn_bwd_dkdv_kernel[(triton.cdiv(N, bn), B * H)](
                q, k, v, do, lse, delta, dk, dv, sm_scale, *_strides(q), *_strides(k),
                *_strides(v), *_strides(do), *_strides(dk), *_strides(dv), H, N, HEAD_D=D,
                BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)
            bm, bn, warps, stages = q_cfg
            attn_bwd_dq_kernel[(triton.cdiv(N, bm), B * H)](
                q, k, v, do, lse, delta, dq, sm_scale, *_strides(q), *_strides(k),
                *_strides(v), *_strides(do), *_strides(dq), H, N, HEAD_D=D, BLOCK_M=bm,
                BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)
            break
        except triton.runtime.errors.OutOfResources:  # too much shared memory: smaller tiles
            if number == len(attempts) - 1:
                raise
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, step):
        o, lse = forward(q, k, v, causal, sm_scale, step=step)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None


def flash_attention(q, k, v, causal: bool = False, sm_scale: float | None = None, step=None):
    """softmax(sm_scale * q k^T) v for (B, H, N, D) tensors, differentiable (Triton forward of
    ladder step `step`, DEFAULT_STEP by default, and the FA2 backward)."""
    step = _step(step)
    while not step_supported(step)[0] or step.number in BROKEN_STEPS:
        step = STEPS[step.number - 1]  # fall back to the best step this machine can run
    try:
        return FlashAttentionFunction.apply(q, k, v, causal, sm_scale, step)
    except (CourseInputError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as err:  # noqa: BLE001  (e.g. TMA failing to compile on this Triton)
        if step.number <= 2 or runtime.current().interpreter:
            raise
        first_line = (str(err).splitlines() or [""])[0][:200]
        BROKEN_STEPS[step.number] = f"{type(err).__name__}: {first_line}"
        return flash_attention(q, k, v, causal, sm_scale, step.number - 1)


BROKEN_STEPS: dict[int, str] = {}  # steps that failed to compile here, with the error


# ---------------------------------------------------------------- references and checks


def reference_attention(q, k, v, causal: bool = False, sm_scale: float | None = None,
                        dtype=torch.float32, chunk: int = 2048):
    """softmax(sm_scale * q k^T) v computed in `dtype`, query rows in chunks (so an fp32
    reference at N = 16k fits in memory); returns (o, lse)."""
    B, H, N, D = q.shape
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    q, k, v = (x.to(dtype) for x in (q, k, v))
    outs, lses = [], []
    for start in range(0, N, chunk):
        s = (q[:, :, start:start + chunk] @ k.transpose(-1, -2)) * sm_scale
        if causal:
            rows = torch.arange(start, start + s.shape[2], device=q.device)[:, None]
            s = s.masked_fill(torch.arange(N, device=q.device)[None, :] > rows, float("-inf"))
        lse = torch.logsumexp(s, -1)
        outs.append(torch.exp(s - lse[..., None]) @ v)
        lses.append(lse)
    return torch.cat(outs, 2), torch.cat(lses, 2)


def tolerance(dtype) -> float:
    """atol = rtol used for outputs: fp32 1e-4 (interpreter), fp16 1e-2, bf16 2e-2."""
    return {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]


def max_error(actual, expected, atol: float) -> tuple[float, bool]:
    """(max abs error, within atol + atol * |expected| everywhere, no NaN)."""
    a, e = actual.float(), expected.float()
    err = (a - e).abs()
    worst = float(err.max()) if err.numel() else 0.0
    ok = bool(torch.isfinite(a).all()) and bool((err <= atol + atol * e.abs()).all())
    return (worst if math.isfinite(worst) else float("inf")), ok


CHECK_SHAPES = [  # (B, H, N, D) with ragged N, B > 1 and H > 1
    (2, 3, 37, 16),
    (2, 2, 50, 32),
]
GPU_CHECK_SHAPES = [(2, 3, 333, 64), (2, 2, 1000, 128), (3, 2, 257, 64)]


def make_qkv(B, H, N, D, dtype, device, seed=0, layout="bhnd"):
    """Random q, k, v (attention.make_inputs); layout "bnhd" gives transposed views of
    (B, N, H, D) tensors."""
    if layout != "bnhd":
        return list(attention.make_inputs(B, H, N, D, dtype, device, seed=seed))
    # make_inputs only uses its four sizes as a shape: ask for (B, N, H, D), then transpose
    xs = attention.make_inputs(B, N, H, D, dtype, device, seed=seed)
    return [x.transpose(1, 2) for x in xs]


def check_forward(launch, dtype=None, shapes=None, causal_values=(False, True),
                  atol: float | None = None, name: str = "forward") -> list[str]:
    """Run launch(q, k, v, causal) -> (o, lse) on ragged, batched, multi-head and transposed
    inputs against the fp32 reference; return one line per case; raise AssertionError on a
    mismatch (atol: tolerance(dtype) unless given)."""
    device = runtime.current().device
    dtype = dtype or (torch.float32 if runtime.current().interpreter else torch.float16)
    shapes = shapes or (CHECK_SHAPES if runtime.current().interpreter else GPU_CHECK_SHAPES)
    atol = tolerance(dtype) if atol is None else atol
    lines = []
    for number, (B, H, N, D) in enumerate(shapes):
        for causal in causal_values:
            layout = "bnhd" if number % 2 else "bhnd"
            q, k, v = make_qkv(B, H, N, D, dtype, device, seed=number, layout=layout)
            o, lse = launch(q, k, v, causal)
            ref, ref_lse = reference_attention(q, k, v, causal)
            err, ok = max_error(o, ref, atol)
            lse_err, lse_ok = max_error(lse, ref_lse, atol)
            label = (f"{name} B={B} H={H} N={N} D={D} {str(dtype).replace('torch.', '')} "
                     f"{'causal' if causal else 'full'} {layout}")
            if not (ok and lse_ok):
                raise AssertionError(f"{label}: max error {err:.3g} (lse {lse_err:.3g})")
            lines.append(f"{label}: ok (max error {err:.1e})")
    return lines


def check_step(step, dtype=None, shapes=None, causal_values=(False, True),
               autotune: bool = False) -> list[str]:
    """check_forward of a ladder step."""
    return check_forward(
        lambda q, k, v, causal: forward(q, k, v, causal, step=step, autotune=autotune),
        dtype, shapes, causal_values, name=f"step {_step(step).number}")


def gradient_problems(grads, ref_grads, atol: float) -> list[str]:
    """One line per gradient (dq, dk, dv) further from its fp32 reference than atol times the
    reference's largest magnitude (at least 1)."""
    problems = []
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads, strict=True):
        tol = atol * max(1.0, float(r.abs().max()))
        err, ok = max_error(g, r, tol)
        if not ok:
            problems.append(f"{name} max error {err:.3g} > {tol:.3g}")
    return problems


def check_backward(dtype=None, shapes=None, causal_values=(False, True)) -> list[str]:
    """Gradients of flash_attention against autograd through the fp32 reference."""
    device = runtime.current().device
    dtype = dtype or (torch.float32 if runtime.current().interpreter else torch.float16)
    shapes = shapes or (CHECK_SHAPES if runtime.current().interpreter else GPU_CHECK_SHAPES)
    lines = []
    for number, (B, H, N, D) in enumerate(shapes):
        for causal in causal_values:
            layout = "bnhd" if number % 2 else "bhnd"
            q, k, v = make_qkv(B, H, N, D, dtype, device, seed=10 + number, layout=layout)
            do = torch.randn(q.shape, generator=torch.Generator().manual_seed(number)).to(
                device=device, dtype=dtype)
            q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
            o = flash_attention(q, k, v, causal)
            grads = torch.autograd.grad(o, (q, k, v), do)
            rq, rk, rv = (x.detach().float().requires_grad_(True) for x in (q, k, v))
            ro, _ = reference_attention(rq, rk, rv, causal)
            ref_grads = torch.autograd.grad(ro, (rq, rk, rv), do.float())
            label = (f"backward B={B} H={H} N={N} D={D} {str(dtype).replace('torch.', '')} "
                     f"{'causal' if causal else 'full'}")
            problems = gradient_problems(grads, ref_grads, tolerance(dtype))
            if problems:
                raise AssertionError(f"{label}: {problems[0]}")
            lines.append(f"{label}: ok")
    return lines
