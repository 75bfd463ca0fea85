"""The reference FlashAttention-2 backward kernels.

A delta pre-pass (rowsum(dO * O)), a dK/dV kernel (one program per key block, looping over query
blocks) and a dQ kernel (one program per query block), both recomputing P from the forward's
saved logsumexp. With USE_TMA the dK/dV and dQ kernels read and write the (B, H, N, d) tensors
through host-built tensor descriptors (TMA on Hopper), as the forward's ladder steps 4-7 do.
host.py launches them. Import after `fc.setup()` (it picks the runtime itself if nobody did).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    LOG2E,
    head_rows,
    head_source,
    key_value_sources,
    load_rows,
    load_tile,
    store_tile,
)


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
                        q_src, do_src, lse_base, delta_base, lse_row, dq_dst, b, h,  # queries
                        stride_qn, stride_qd, stride_don, stride_dod,  # strides
                        offs_n, offs_d, lo, hi, N, qk_scale, sm_scale,  # keys, rows, scales
                        HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
                        MASKED: tl.constexpr, FUSED_DQ: tl.constexpr, USE_TMA: tl.constexpr,
                        DQ_BULK: tl.constexpr, WARP_SPEC: tl.constexpr,
                        STATS_TMA: tl.constexpr):
    """Accumulate dK, dV of one key block over the query blocks lo..hi, recomputing P^T.

    Query rows >= N load as zeros (q = dO = lse = delta = 0), so they add exactly 0. With
    FUSED_DQ, also add this key block's share of dQ (sm_scale * dS K) into dq_dst's fp32 rows:
    element by element with atomics, or with DQ_BULK as one TMA reduction of the whole tile
    through a descriptor (compiled only), instead of recomputing P and dP in the dQ kernel.
    STATS_TMA: lse_base and delta_base are (B * H, N) descriptors, this head's row lse_row;
    rows >= N fall outside them and load as zeros.
    """
    offs = tl.arange(0, BLOCK_M)
    for start_m in tl.range(lo, hi, BLOCK_M, warp_specialize=WARP_SPEC):
        offs_m = start_m + offs
        rows = offs_m < N
        q = load_rows(q_src, b, h, start_m, offs, offs_d, stride_qn, stride_qd, N,
                      MASK_ROWS=True, USE_TMA=USE_TMA)  # (BLOCK_M, HEAD_D)
        do = load_rows(do_src, b, h, start_m, offs, offs_d, stride_don, stride_dod, N,
                       MASK_ROWS=True, USE_TMA=USE_TMA)
        if STATS_TMA:
            lse2 = lse_base.load([lse_row, start_m]).reshape(BLOCK_M) * LOG2E
            delta = delta_base.load([lse_row, start_m]).reshape(BLOCK_M)
        else:
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
            if DQ_BULK:  # rows >= N fall outside the descriptor and are dropped
                dq_dst.atomic_add([b, h, start_m, 0], dq.reshape(1, 1, BLOCK_M, HEAD_D))
            else:
                tl.atomic_add(dq_dst + offs_m[:, None] * HEAD_D + offs_d[None, :], dq,
                              mask=rows[:, None])
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ_ACC, sm_scale,  # tensors, scale
                         stride_qb, stride_qh, stride_qn, stride_qd,  # strides
                         stride_kb, stride_kh, stride_kn, stride_kd,
                         stride_vb, stride_vh, stride_vn, stride_vd,
                         stride_dob, stride_doh, stride_don, stride_dod,
                         stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                         stride_dvb, stride_dvh, stride_dvn, stride_dvd,
                         H, N,  # sizes
                         HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
                         BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                         FUSED_DQ: tl.constexpr, USE_TMA: tl.constexpr,
                         DQ_BULK: tl.constexpr, WARP_SPEC: tl.constexpr,
                         STATS_TMA: tl.constexpr = False):
    """dK and dV of one key block (BLOCK_N rows). Grid: (cdiv(N, BLOCK_N), B * H).

    USE_TMA: Q, K, V, DO, DK and DV are (B, H, N, HEAD_D) descriptors whose blocks are BLOCK_M
    (Q, DO) or BLOCK_N (the others) rows. FUSED_DQ: also dQ, added up in DQ_ACC, a zeroed
    contiguous (B, H, N, HEAD_D) float32 tensor (a descriptor of it with DQ_BULK; unused
    without FUSED_DQ), so that no dQ kernel is needed. WARP_SPEC: the unmasked query loop is
    warp-specialised (tl.range(..., warp_specialize=True)). STATS_TMA (an experiment): LSE and
    DELTA are (B * H, N) descriptors with blocks of BLOCK_M rows of one head, not pointers.
    """
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    k = load_tile(K, b, h, start_n, offs_d, stride_kb, stride_kh, stride_kn, stride_kd, N,
                  ROWS=BLOCK_N, USE_TMA=USE_TMA)  # (BLOCK_N, HEAD_D), resident for the loop
    v = load_tile(V, b, h, start_n, offs_d, stride_vb, stride_vh, stride_vn, stride_vd, N,
                  ROWS=BLOCK_N, USE_TMA=USE_TMA)
    q_src = head_source(Q, b, h, stride_qb, stride_qh, USE_TMA=USE_TMA)
    do_src = head_source(DO, b, h, stride_dob, stride_doh, USE_TMA=USE_TMA)
    if STATS_TMA:
        lse_base = LSE
        delta_base = DELTA
    else:
        lse_base = LSE + bh.to(tl.int64) * N
        delta_base = DELTA + bh.to(tl.int64) * N
    lse_row = bh  # this head's row in the STATS_TMA descriptors
    if DQ_BULK:
        dq_dst = DQ_ACC
    else:
        dq_dst = DQ_ACC + bh.to(tl.int64) * N * HEAD_D
    qk_scale = sm_scale * LOG2E
    dk = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_D], dtype=tl.float32)
    if CAUSAL:  # rows < start_n see none of these keys; the diagonal rows need the mask
        dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base,
                                     lse_row, dq_dst, b, h, stride_qn, stride_qd, stride_don,
                                     stride_dod, offs_n, offs_d, start_n,
                                     tl.minimum(start_n + BLOCK_N, N), N, qk_scale, sm_scale,
                                     HEAD_D=HEAD_D, BLOCK_M=BLOCK_M,
                                     MASKED=True, FUSED_DQ=FUSED_DQ, USE_TMA=USE_TMA,
                                     DQ_BULK=DQ_BULK, WARP_SPEC=False, STATS_TMA=STATS_TMA)
        lo = start_n + BLOCK_N
    else:
        lo = 0
    dk, dv = attn_bwd_dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, lse_row,
                                 dq_dst, b, h, stride_qn, stride_qd, stride_don, stride_dod,
                                 offs_n, offs_d, lo, N, N, qk_scale, sm_scale, HEAD_D=HEAD_D,
                                 BLOCK_M=BLOCK_M, MASKED=False, FUSED_DQ=FUSED_DQ,
                                 USE_TMA=USE_TMA, DQ_BULK=DQ_BULK, WARP_SPEC=WARP_SPEC,
                                 STATS_TMA=STATS_TMA)
    dk = dk * sm_scale  # S = sm_scale * Q K^T: the scale comes back once in dK
    store_tile(DK, dk, b, h, start_n, offs_d, stride_dkb, stride_dkh, stride_dkn, stride_dkd, N,
               ROWS=BLOCK_N, HEAD_D=HEAD_D, USE_TMA=USE_TMA)
    store_tile(DV, dv, b, h, start_n, offs_d, stride_dvb, stride_dvh, stride_dvn, stride_dvd, N,
               ROWS=BLOCK_N, HEAD_D=HEAD_D, USE_TMA=USE_TMA)


@triton.jit
def attn_bwd_dq_inner(dq, q, do, lse2, delta,  # accumulator and the resident query block
                      k_src, v_src, b, h,  # K and V: this head's first rows, or descriptors
                      stride_kn, stride_kd, stride_vn, stride_vd,  # strides
                      offs_m, offs_d, lo, hi, N, qk_scale,  # rows, key range, sizes, scale
                      BLOCK_N: tl.constexpr, MASKED: tl.constexpr,  # meta-parameters
                      USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Accumulate dQ of one query block over the key blocks lo..hi (keys >= N load as 0 and
    add 0, because dQ += dS K)."""
    offs = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        offs_n = start_n + offs
        k = load_rows(k_src, b, h, start_n, offs, offs_d, stride_kn, stride_kd, N,
                      MASK_ROWS=True, USE_TMA=USE_TMA)  # (BLOCK_N, HEAD_D)
        v = load_rows(v_src, b, h, start_n, offs, offs_d, stride_vn, stride_vd, N,
                      MASK_ROWS=True, USE_TMA=USE_TMA)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N)
        p = tl.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        dp = tl.dot(do, tl.trans(v))  # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)  # dQ += dS K
    return dq


@triton.jit
def attn_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, sm_scale,  # tensors, scale
                       stride_qb, stride_qh, stride_qn, stride_qd,  # strides
                       stride_kb, stride_kh, stride_kn, stride_kd,
                       stride_vb, stride_vh, stride_vn, stride_vd,
                       stride_dob, stride_doh, stride_don, stride_dod,
                       stride_dqb, stride_dqh, stride_dqn, stride_dqd,
                       H, N,  # sizes
                       HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
                       BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr,
                       WARP_SPEC: tl.constexpr):
    """dQ of one query block (BLOCK_M rows). Grid: (cdiv(N, BLOCK_M), B * H).

    USE_TMA: Q, K, V, DO and DQ are (B, H, N, HEAD_D) descriptors whose blocks are BLOCK_M
    (Q, DO, DQ) or BLOCK_N (K, V) rows."""
    block = tl.program_id(0)
    if CAUSAL:  # the last query blocks see the most keys: start them first
        block = tl.num_programs(0) - 1 - block
    start_m = block * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m < N
    q = load_tile(Q, b, h, start_m, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                  ROWS=BLOCK_M, USE_TMA=USE_TMA)
    do = load_tile(DO, b, h, start_m, offs_d, stride_dob, stride_doh, stride_don, stride_dod, N,
                   ROWS=BLOCK_M, USE_TMA=USE_TMA)
    lse2 = tl.load(LSE + bh.to(tl.int64) * N + offs_m, mask=rows, other=0.0) * LOG2E
    delta = tl.load(DELTA + bh.to(tl.int64) * N + offs_m, mask=rows, other=0.0)
    k_src, v_src = key_value_sources(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh,
                                     USE_TMA=USE_TMA)
    qk_scale = sm_scale * LOG2E
    dq = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
    if CAUSAL:  # keys left of the block need no mask; the diagonal keys do
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_src, v_src, b, h, stride_kn,
                               stride_kd, stride_vn, stride_vd, offs_m, offs_d, 0, start_m, N,
                               qk_scale, BLOCK_N=BLOCK_N, MASKED=False, USE_TMA=USE_TMA,
                               WARP_SPEC=WARP_SPEC)
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_src, v_src, b, h, stride_kn,
                               stride_kd, stride_vn, stride_vd, offs_m, offs_d, start_m,
                               tl.minimum(start_m + BLOCK_M, N), N, qk_scale, BLOCK_N=BLOCK_N,
                               MASKED=True, USE_TMA=USE_TMA, WARP_SPEC=False)
    else:
        dq = attn_bwd_dq_inner(dq, q, do, lse2, delta, k_src, v_src, b, h, stride_kn,
                               stride_kd, stride_vn, stride_vd, offs_m, offs_d, 0, N, N,
                               qk_scale, BLOCK_N=BLOCK_N, MASKED=False, USE_TMA=USE_TMA,
                               WARP_SPEC=WARP_SPEC)
    store_tile(DQ, dq * sm_scale, b, h, start_m, offs_d, stride_dqb, stride_dqh, stride_dqn,
               stride_dqd, N, ROWS=BLOCK_M, HEAD_D=HEAD_D, USE_TMA=USE_TMA)
