"""The reference FlashAttention-2 backward kernels.

A delta pre-pass (rowsum(dO * O)), a dK/dV kernel (one program per key block, looping over query
blocks) and a dQ kernel (one program per query block), both recomputing P from the forward's
saved logsumexp. host.py launches them. Import after `fc.setup()` (it picks the runtime itself
if nobody did).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import LOG2E, head_rows


@triton.jit
def attn_bwd_delta_kernel(O, DO, DELTA,  # pointers
                          stride_ob, stride_oh, stride_on, stride_od,  # strides
                          stride_dob, stride_doh, stride_don, stride_dod,
                          H, N,  # sizes
                          HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr):  # meta-parameters
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
def attn_bwd_dkdv_inner(dk, dv, k, v,  # accumulators and the resident key block
                        q_base, do_base, lse_base, delta_base, dq_base,  # a head's first rows
                        stride_qn, stride_qd, stride_don, stride_dod,  # strides
                        offs_n, offs_d, lo, hi, N, qk_scale, sm_scale,  # keys, rows, scales
                        HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
                        MASKED: tl.constexpr, FUSED_DQ: tl.constexpr):
    """Accumulate dK, dV of one key block over the query blocks lo..hi, recomputing P^T.

    Query rows >= N load as zeros (q = dO = lse = delta = 0), so they add exactly 0. With
    FUSED_DQ, also add this key block's share of dQ (sm_scale * dS K) into dq_base's fp32 rows
    with atomics, instead of recomputing P and dP in the dQ kernel (keys >= N have k = 0).
    """
    for start_m in tl.range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows = offs_m < N
        q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd,
                    mask=rows[:, None], other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_don + offs_d[None, :] * stride_dod,
                     mask=rows[:, None], other=0.0)
        lse2 = tl.load(lse_base + offs_m, mask=rows, other=0.0) * LOG2E
        delta = tl.load(delta_base + offs_m, mask=rows, other=0.0)
        s_t = tl.dot(k, tl.trans(q))  # S^T: (BLOCK_N, BLOCK_M)
        p_t = tl.exp2(s_t * qk_scale - lse2[None, :])  # P^T, recomputed from the logsumexp
        if MASKED:  # the diagonal: key n is seen only by query rows m >= n
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)  # dV += P^T dO
        dp_t = tl.dot(v, tl.trans(do))  # dP^T = V dO^T
        ds_t = p_t * (dp_t - delta[None, :])  # dS^T = P^T * (dP^T - delta)
        dk += tl.dot(ds_t.to(q.dtype), q)  # dK += dS^T Q
        if FUSED_DQ:
            dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * sm_scale  # dQ += dS K
            tl.atomic_add(dq_base + offs_m[:, None] * HEAD_D + offs_d[None, :], dq,
                          mask=rows[:, None])
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ_ACC, sm_scale,  # pointers, scale
                         stride_qb, stride_qh, stride_qn, stride_qd,  # strides
                         stride_kb, stride_kh, stride_kn, stride_kd,
                         stride_vb, stride_vh, stride_vn, stride_vd,
                         stride_dob, stride_doh, stride_don, stride_dod,
                         stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                         stride_dvb, stride_dvh, stride_dvn, stride_dvd,
                         H, N,  # sizes
                         HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
                         BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                         FUSED_DQ: tl.constexpr):
    """dK and dV of one key block (BLOCK_N rows). Grid: (cdiv(N, BLOCK_N), B * H).

    FUSED_DQ: also dQ, added up in DQ_ACC, a zeroed contiguous (B, H, N, HEAD_D) float32
    tensor (unused otherwise), so that no dQ kernel is needed."""
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
    dq_base = DQ_ACC + bh.to(tl.int64) * N * HEAD_D
    qk_scale = sm_scale * LOG2E
    dk = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    if CAUSAL:  # rows < start_n see none of these keys; the diagonal rows need the mask
        dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                     dq_base, stride_qn, stride_qd, stride_don, stride_dod,
                                     offs_n, offs_d, start_n, tl.minimum(start_n + BLOCK_N, N),
                                     N, qk_scale, sm_scale, HEAD_D=HEAD_D, BLOCK_M=BLOCK_M,
                                     MASKED=True, FUSED_DQ=FUSED_DQ)
        dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                     dq_base, stride_qn, stride_qd, stride_don, stride_dod,
                                     offs_n, offs_d, start_n + BLOCK_N, N, N, qk_scale,
                                     sm_scale, HEAD_D=HEAD_D, BLOCK_M=BLOCK_M, MASKED=False,
                                     FUSED_DQ=FUSED_DQ)
    else:
        dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                     dq_base, stride_qn, stride_qd, stride_don, stride_dod,
                                     offs_n, offs_d, 0, N, N, qk_scale, sm_scale,
                                     HEAD_D=HEAD_D, BLOCK_M=BLOCK_M, MASKED=False,
                                     FUSED_DQ=FUSED_DQ)
    dk = dk * sm_scale  # S = sm_scale * Q K^T: the scale comes back once in dK
    tl.store(head_rows(DK, b, h, stride_dkb, stride_dkh, stride_dkn, stride_dkd, offs_n,
                       offs_d), dk.to(DK.dtype.element_ty), mask=keys[:, None])
    tl.store(head_rows(DV, b, h, stride_dvb, stride_dvh, stride_dvn, stride_dvd, offs_n,
                       offs_d), dv.to(DV.dtype.element_ty), mask=keys[:, None])


@triton.jit
def attn_bwd_dq_inner(dq, q, do, lse2, delta,  # accumulator and the resident query block
                      k_base, v_base,  # this head's first key and value rows
                      stride_kn, stride_kd, stride_vn, stride_vd,  # strides
                      offs_m, offs_d, lo, hi, N, qk_scale,  # rows, key range, sizes, scale
                      BLOCK_N: tl.constexpr, MASKED: tl.constexpr):  # meta-parameters
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
def attn_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, sm_scale,  # pointers, scale
                       stride_qb, stride_qh, stride_qn, stride_qd,  # strides
                       stride_kb, stride_kh, stride_kn, stride_kd,
                       stride_vb, stride_vh, stride_vn, stride_vd,
                       stride_dob, stride_doh, stride_don, stride_dod,
                       stride_dqb, stride_dqh, stride_dqn, stride_dqd,
                       H, N,  # sizes
                       HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
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
    lse2 = tl.load(LSE + bh.to(tl.int64) * N + offs_m, mask=rows, other=0.0) * LOG2E
    delta = tl.load(DELTA + bh.to(tl.int64) * N + offs_m, mask=rows, other=0.0)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    qk_scale = sm_scale * LOG2E
    dq = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
    if CAUSAL:
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd,
                               stride_vn, stride_vd, offs_m, offs_d, 0, start_m, N, qk_scale,
                               BLOCK_N=BLOCK_N, MASKED=False)
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd,
                               stride_vn, stride_vd, offs_m, offs_d, start_m,
                               tl.minimum(start_m + BLOCK_M, N), N, qk_scale, BLOCK_N=BLOCK_N,
                               MASKED=True)
    else:
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd,
                               stride_vn, stride_vd, offs_m, offs_d, 0, N, N, qk_scale,
                               BLOCK_N=BLOCK_N, MASKED=False)
    dq = dq * sm_scale
    tl.store(head_rows(DQ, b, h, stride_dqb, stride_dqh, stride_dqn, stride_dqd, offs_m,
                       offs_d), dq.to(DQ.dtype.element_ty), mask=rows[:, None])
