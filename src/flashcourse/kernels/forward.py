"""The reference FlashAttention-2 forward kernels (lesson 8's ladder).

One program per (query block, batch * head) walks over the key/value blocks with an online
softmax. tl.constexpr switches turn on one optimisation after another (ladder.py lists the
steps), so every step is this source compiled differently; step 7 holds the query tile as two
row halves and is a kernel of its own (attn_fwd_halves_kernel). host.py launches them.
Import after `fc.setup()` (it picks the runtime itself if nobody did).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    LOG2E,
    key_ranges,
    key_value_sources,
    load_key_value_rows,
    load_rows,
    load_tile,
    softmax_update,
    store_rows,
)


@triton.jit
def attn_fwd_inner(acc, l_i, m_i, q,  # running state (fp32) and the query tile
                   k_src, v_src, b, h,  # K and V: a head's first row, or descriptors
                   stride_kn, stride_kd, stride_vn, stride_vd,  # strides
                   offs_m, offs_d, lo, hi, N, qk_scale,  # rows, key range, sizes, scale
                   BLOCK_N: tl.constexpr, MASKED: tl.constexpr,  # meta-parameters
                   CAUSAL: tl.constexpr, USE_EXP2: tl.constexpr, USE_TMA: tl.constexpr,
                   WARP_SPEC: tl.constexpr):
    """Online softmax over the key blocks lo..hi (lo a multiple of BLOCK_N) of head (b, h).

    MASKED=False is the fast path: every key is < N and (causal) left of every query row, so
    no bounds check and no -inf mask. acc: (BLOCK_M, HEAD_D) fp32; l_i, m_i: (BLOCK_M,).
    """
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        k = load_rows(k_src, b, h, start_n, offs_n, offs_d, stride_kn, stride_kd, N,
                      MASK_ROWS=MASKED, USE_TMA=USE_TMA)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) raw scores, not yet scaled
        v = load_rows(v_src, b, h, start_n, offs_n, offs_d, stride_vn, stride_vd, N,
                      MASK_ROWS=MASKED, USE_TMA=USE_TMA)
        acc, l_i, m_i = softmax_update(s, acc, l_i, m_i, v, offs_m, start_n + offs_n, N,
                                       qk_scale, MASKED=MASKED, CAUSAL=CAUSAL,
                                       USE_EXP2=USE_EXP2)
    return acc, l_i, m_i


@triton.jit
def attn_fwd_inner_halves(acc0, l0, m0, acc1, l1, m1, q0, q1,  # two halves' state and queries
                          k_src, v_src, b, h,  # K and V: a head's first row, or descriptors
                          stride_kn, stride_kd, stride_vn, stride_vd,  # strides
                          offs_m0, offs_m1, offs_d, lo, hi, N, qk_scale,  # rows, range, sizes
                          BLOCK_N: tl.constexpr, MASKED: tl.constexpr,  # meta-parameters
                          CAUSAL: tl.constexpr, USE_TMA: tl.constexpr):
    """attn_fwd_inner for a query tile held as two independent halves (step 7).

    Both halves' Q K^T are issued before either softmax: the tensor cores work on half 1's
    scores while half 0's softmax runs, then on half 0's P V while half 1's softmax runs.
    """
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        k, v = load_key_value_rows(k_src, v_src, b, h, start_n, offs_n, offs_d, stride_kn,
                                   stride_kd, stride_vn, stride_vd, N, MASK_ROWS=MASKED,
                                   USE_TMA=USE_TMA)
        s0 = tl.dot(q0, tl.trans(k))
        s1 = tl.dot(q1, tl.trans(k))
        acc0, l0, m0 = softmax_update(s0, acc0, l0, m0, v, offs_m0, start_n + offs_n, N,
                                      qk_scale, MASKED=MASKED, CAUSAL=CAUSAL, USE_EXP2=True)
        acc1, l1, m1 = softmax_update(s1, acc1, l1, m1, v, offs_m1, start_n + offs_n, N,
                                      qk_scale, MASKED=MASKED, CAUSAL=CAUSAL, USE_EXP2=True)
    return acc0, l0, m0, acc1, l1, m1


@triton.jit
def attn_fwd_kernel(Q, K, V, O, LSE, sm_scale,  # pointers (or descriptors), scale
                    stride_qb, stride_qh, stride_qn, stride_qd,  # strides
                    stride_kb, stride_kh, stride_kn, stride_kd,
                    stride_vb, stride_vh, stride_vn, stride_vd,
                    stride_ob, stride_oh, stride_on, stride_od,
                    H, N,  # sizes
                    HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters: tiles
                    BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, USE_EXP2: tl.constexpr,  # ... and the ladder's
                    SPLIT: tl.constexpr, USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
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
    q = load_tile(Q, b, h, start, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                  ROWS=BLOCK_M, USE_TMA=USE_TMA)  # (BLOCK_M, HEAD_D), kept for the loop
    k_src, v_src = key_value_sources(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh,
                                     USE_TMA=USE_TMA)
    if USE_EXP2:
        qk_scale = sm_scale * LOG2E  # exp(x * sm_scale) == exp2(x * qk_scale)
    else:
        qk_scale = sm_scale
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)

    if SPLIT:
        free_hi, masked_lo, masked_hi = key_ranges(start, N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                                   CAUSAL=CAUSAL)
        acc, l_i, m_i = attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn,
                                       stride_kd, stride_vn, stride_vd, offs_m, offs_d, 0,
                                       free_hi, N, qk_scale, BLOCK_N=BLOCK_N, MASKED=False,
                                       CAUSAL=CAUSAL, USE_EXP2=USE_EXP2, USE_TMA=USE_TMA,
                                       WARP_SPEC=WARP_SPEC)
        acc, l_i, m_i = attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn,
                                       stride_kd, stride_vn, stride_vd, offs_m, offs_d,
                                       masked_lo, masked_hi, N, qk_scale, BLOCK_N=BLOCK_N,
                                       MASKED=True, CAUSAL=CAUSAL, USE_EXP2=USE_EXP2,
                                       USE_TMA=USE_TMA, WARP_SPEC=False)  # one or two blocks
    else:  # one loop, every block masked
        if CAUSAL:
            hi = tl.minimum(start + BLOCK_M, N)
        else:
            hi = N
        acc, l_i, m_i = attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn,
                                       stride_kd, stride_vn, stride_vd, offs_m, offs_d, 0, hi,
                                       N, qk_scale, BLOCK_N=BLOCK_N, MASKED=True,
                                       CAUSAL=CAUSAL, USE_EXP2=USE_EXP2, USE_TMA=USE_TMA,
                                       WARP_SPEC=WARP_SPEC)
    store_rows(O, LSE, acc, l_i, m_i, b, h, bh, start, offs_d, stride_ob, stride_oh, stride_on,
               stride_od, N, ROWS=BLOCK_M, HEAD_D=HEAD_D, USE_EXP2=USE_EXP2, USE_TMA=USE_TMA)


@triton.jit
def attn_fwd_halves_kernel(Q, K, V, O, LSE, sm_scale,  # pointers (or descriptors), scale
                           stride_qb, stride_qh, stride_qn, stride_qd,  # strides
                           stride_kb, stride_kh, stride_kn, stride_kd,
                           stride_vb, stride_vh, stride_vn, stride_vd,
                           stride_ob, stride_oh, stride_on, stride_od,
                           H, N,  # sizes
                           HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
                           BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                           USE_TMA: tl.constexpr):
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
    q0 = load_tile(Q, b, h, start, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                   ROWS=HALF, USE_TMA=USE_TMA)
    q1 = load_tile(Q, b, h, start + HALF, offs_d, stride_qb, stride_qh, stride_qn,
                   stride_qd, N, ROWS=HALF, USE_TMA=USE_TMA)
    k_src, v_src = key_value_sources(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh,
                                     USE_TMA=USE_TMA)
    qk_scale = sm_scale * LOG2E
    m0 = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l0 = tl.zeros([HALF], dtype=tl.float32)
    acc0 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
    m1 = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l1 = tl.zeros([HALF], dtype=tl.float32)
    acc1 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
    free_hi, masked_lo, masked_hi = key_ranges(start, N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                               CAUSAL=CAUSAL)
    acc0, l0, m0, acc1, l1, m1 = attn_fwd_inner_halves(
        acc0, l0, m0, acc1, l1, m1, q0, q1, k_src, v_src, b, h, stride_kn, stride_kd,
        stride_vn, stride_vd, offs_m0, offs_m1, offs_d, 0, free_hi, N, qk_scale,
        BLOCK_N=BLOCK_N, MASKED=False, CAUSAL=CAUSAL, USE_TMA=USE_TMA)
    acc0, l0, m0, acc1, l1, m1 = attn_fwd_inner_halves(
        acc0, l0, m0, acc1, l1, m1, q0, q1, k_src, v_src, b, h, stride_kn, stride_kd,
        stride_vn, stride_vd, offs_m0, offs_m1, offs_d, masked_lo, masked_hi, N, qk_scale,
        BLOCK_N=BLOCK_N, MASKED=True, CAUSAL=CAUSAL, USE_TMA=USE_TMA)
    store_rows(O, LSE, acc0, l0, m0, b, h, bh, start, offs_d, stride_ob, stride_oh, stride_on,
               stride_od, N, ROWS=HALF, HEAD_D=HEAD_D, USE_EXP2=True, USE_TMA=USE_TMA)
    store_rows(O, LSE, acc1, l1, m1, b, h, bh, start + HALF, offs_d, stride_ob, stride_oh,
               stride_on, stride_od, N, ROWS=HALF, HEAD_D=HEAD_D, USE_EXP2=True,
               USE_TMA=USE_TMA)
