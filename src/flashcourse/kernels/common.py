"""@triton.jit helpers shared by the reference FlashAttention kernels (forward.py, backward.py).

Every tensor is (B, H, N, HEAD_D) with any strides; b and h index the head, offs the rows.
Import after `fc.setup()` (it picks the runtime itself if nobody did).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .. import kernels, runtime

runtime.current()  # choose compiled Triton or the interpreter before any kernel is defined

# kernels.LOG2E and kernels.LN2 as constexprs: a @triton.jit function may read a global only if
# it is one.
LOG2E = tl.constexpr(kernels.LOG2E)  # exp(x) == exp2(x * LOG2E)
LN2 = tl.constexpr(kernels.LN2)  # log(x) == log2(x) * LN2


@triton.jit
def head_rows(X, b, h, stride_b, stride_h, stride_n, stride_d, offs, offs_d):
    """Pointers to rows offs of head (b, h) of a (B, H, N, HEAD_D) tensor: (len(offs), HEAD_D).
    b and h are int64, so that b * stride_b cannot overflow on large tensors."""
    return X + b * stride_b + h * stride_h + offs[:, None] * stride_n + offs_d[None, :] * stride_d


@triton.jit
def load_rows(src, b, h, start, offs, offs_d,  # where: a head's rows, or a descriptor
              stride_n, stride_d,  # strides of src (unused with USE_TMA)
              N,  # sizes
              MASK_ROWS: tl.constexpr, USE_TMA: tl.constexpr):  # meta-parameters
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
def load_key_value_rows(k_src, v_src, b, h, start_n, offs_n, offs_d,  # where, which rows
                        stride_kn, stride_kd, stride_vn, stride_vd,  # strides (or unused)
                        N,  # sizes
                        MASK_ROWS: tl.constexpr, USE_TMA: tl.constexpr):  # meta-parameters
    """load_rows of one key block of K and of V, both (len(offs_n), HEAD_D), as the kernels
    that hold their queries as two halves load them: both before either half's Q K^T."""
    k = load_rows(k_src, b, h, start_n, offs_n, offs_d, stride_kn, stride_kd, N,
                  MASK_ROWS=MASK_ROWS, USE_TMA=USE_TMA)
    v = load_rows(v_src, b, h, start_n, offs_n, offs_d, stride_vn, stride_vd, N,
                  MASK_ROWS=MASK_ROWS, USE_TMA=USE_TMA)
    return k, v


@triton.jit
def head_source(X, b, h, stride_b, stride_h,  # pointer or descriptor, head, strides
                USE_TMA: tl.constexpr):  # meta-parameters
    """What load_tile and store_tile read and write head (b, h) of X through: the descriptor
    itself, or the head's first row."""
    if USE_TMA:
        src = X
    else:
        src = X + b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h
    return src


@triton.jit
def store_tile(X, tile, b, h, start, offs_d,  # pointer or descriptor, what, head, first row
               stride_b, stride_h, stride_n, stride_d,  # strides (unused with USE_TMA)
               N,  # sizes
               ROWS: tl.constexpr, HEAD_D: tl.constexpr,  # meta-parameters
               USE_TMA: tl.constexpr):
    """Store a (ROWS, HEAD_D) tile as rows start..start+ROWS of head (b, h), converted to the
    tensor's dtype; rows >= N are not written."""
    dst = head_source(X, b, h, stride_b, stride_h, USE_TMA=USE_TMA)
    if USE_TMA:  # rows >= N fall outside the descriptor's shape and are dropped
        dst.store([b, h, start, 0], tile.to(dst.dtype).reshape(1, 1, ROWS, HEAD_D))
    else:
        rows = start + tl.arange(0, ROWS)
        ptrs = dst + rows[:, None] * stride_n + offs_d[None, :] * stride_d
        tl.store(ptrs, tile.to(dst.dtype.element_ty), mask=rows[:, None] < N)


@triton.jit
def softmax_update(s, acc, l_i, m_i, v,  # scores (BLOCK_M, BLOCK_N), running state, values
                   offs_m, offs_n,  # query rows and keys of s
                   N, qk_scale,  # sizes and scale
                   MASKED: tl.constexpr, CAUSAL: tl.constexpr,  # meta-parameters
                   USE_EXP2: tl.constexpr):
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
def load_tile(X, b, h, start, offs_d,  # pointer or descriptor, head, first row
              stride_b, stride_h, stride_n, stride_d,  # strides (unused with USE_TMA)
              N,  # sizes
              ROWS: tl.constexpr, USE_TMA: tl.constexpr):  # meta-parameters
    """Rows start..start+ROWS of head (b, h) of X, (ROWS, HEAD_D); rows >= N read as 0. With
    USE_TMA the copy engine moves the whole tile: the descriptor carries shape and strides."""
    return load_rows(head_source(X, b, h, stride_b, stride_h, USE_TMA=USE_TMA), b, h, start,
                     tl.arange(0, ROWS), offs_d, stride_n, stride_d, N, MASK_ROWS=True,
                     USE_TMA=USE_TMA)


@triton.jit
def key_value_sources(K, V, b, h,  # pointers or descriptors, head
                      stride_kb, stride_kh, stride_vb, stride_vh,  # strides
                      USE_TMA: tl.constexpr):  # meta-parameters
    """What load_rows reads K and V of head (b, h) from: the descriptors, or the head's first
    row."""
    return (head_source(K, b, h, stride_kb, stride_kh, USE_TMA=USE_TMA),
            head_source(V, b, h, stride_vb, stride_vh, USE_TMA=USE_TMA))


@triton.jit
def key_ranges(start, N,  # first query row, sizes
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # meta-parameters
               CAUSAL: tl.constexpr):
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
def store_rows(O, LSE, acc, l_i, m_i,  # outputs (pointers or O's descriptor), running state
               b, h, bh, start, offs_d,  # head, first row
               stride_ob, stride_oh, stride_on, stride_od,  # strides
               N,  # sizes
               ROWS: tl.constexpr, HEAD_D: tl.constexpr,  # meta-parameters
               USE_EXP2: tl.constexpr, USE_TMA: tl.constexpr):
    """O = acc / l_i and the natural-log LSE for query rows start..start+ROWS; rows >= N are
    not written."""
    acc = acc / l_i[:, None]
    if USE_EXP2:
        lse = (m_i + tl.log2(l_i)) * LN2  # back to natural log for backward
    else:
        lse = m_i + tl.log(l_i)
    store_tile(O, acc, b, h, start, offs_d, stride_ob, stride_oh, stride_on, stride_od, N,
               ROWS=ROWS, HEAD_D=HEAD_D, USE_TMA=USE_TMA)
    offs_m = start + tl.arange(0, ROWS)
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)

