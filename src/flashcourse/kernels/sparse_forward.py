"""The reference block-sparse forward (lesson 9): the teaching kernel's algorithm, lesson 8's
optimisations.

The algorithm is exercise 2's: one program per (query block, batch x head) walks the FULL key
blocks its query block lists without any mask, then the PARTIAL ones with the mask rule
(a window `left`, `right` and document ids) evaluated pair by pair; EMPTY blocks are never
touched. The block lists are `modern_attention.block_lists` (FlexAttention's BlockMask keeps the
same four arrays). What this kernel adds, each the reference forward's (forward.py):

* FULL tiles go through the reference's own online-softmax step (common.softmax_update): no
  bounds check on the loads, no -inf select, no safe max (after a FULL tile every row has seen a
  key), the scale folded into one FMA before exp2, P V accumulated into acc by the MMA;
* Q, K, V and O through tensor descriptors (TMA on Hopper) where the tensors allow it;
* programs ordered longest block list first (`SparsePlan.order`), so that the last programs to
  start are the short ones;
* tiles, warps and stages of its own (tiles.SPARSE_REFERENCE);
* at head dims up to 64, each query block held as two row halves (the dense reference's step
  7), and FULL lists that are runs of consecutive blocks (a causal mask's, a window's, a
  document mask's) walked without loading their entries (`reference_variant`).

* at head dims up to 64, a sliding window on query blocks of 64 rows
  (`sparse_reference_config`): fewer PARTIAL tiles along the window's two edges;
* at wider head dims, on masks with documents, each PARTIAL tile masked by its rows' ranges of
  keys (`row_ranges`, `key_ranges`: under a window and packed documents each row sees one
  range), two compares per pair and no key ids loaded; where some row's keys are not one range,
  only by the tests it needs (the window's right side, its left side, the documents, the bound
  n), which `sparse_plan` works out per tile (`partial_tile_tests`). Elsewhere their branches
  cost more than they save (`reference_variant`).

An experiment, off by default: `tests_as_selects=True`, the partial tests applied as selects
against per-row limits, with no branch (`tests_as_selects`).

Host side: `sparse_plan` builds the block lists and the program order once per mask (not per
head or per call), `sparse_forward` launches; any head dim up to 256 (zero-padded, as the other
launchers). `SparseForward` does sparse_forward's host work once for bound tensors, so that a
short call pays only for the launch. Masks given as a table of visible blocks (a random block
mask): `block_table_kinds`.
Import after `fc.setup()` (it picks the runtime itself if nobody did).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import triton
import triton.language as tl

from .. import hardware, runtime
from ..models.matmul import cdiv
from . import LOG2E, tiles
from .common import (
    key_value_sources,
    load_key_value_rows,
    load_rows,
    load_tile,
    softmax_update,
    store_rows,
)
from .host import (
    RecordedLaunch,
    check_reference_qkv,
    kernel_head_dim,
    run_at_kernel_width,
    tensor_descriptors,
    tma_ok,
)
from .ladder import tma_supported
from .modern_attention import (
    EMPTY,
    FULL,
    MIN_DOT_ROWS,
    PARTIAL,
    UNLIMITED,
    block_lists,
    classify_rule,
)

INT32_MAX = 2**31 - 1
# The tests a PARTIAL tile may need (bit flags, partial_tile_tests): a key past row + right (the
# causal diagonal), a key before row - left (a window's far edge), rows and keys not all in one
# document (or an id -1), keys past n.
TEST_RIGHT, TEST_LEFT, TEST_DOCS, TEST_BOUND = 1, 2, 4, 8
# Where the flags sit in SparsePlan.part_tests: above the key block's index, in bits 27-30 of
# the int32 entry, so that the loop reads one word per tile as the default path does (a tensor
# of flags beside part_index would be a second scalar load per tile). Indices stay below 2**27.
TESTS_SHIFT = 27
_RIGHT, _LEFT, _DOCS, _BOUND, _SHIFT = (tl.constexpr(x) for x in (
    TEST_RIGHT, TEST_LEFT, TEST_DOCS, TEST_BOUND, TESTS_SHIFT))
_INDEX_MASK = tl.constexpr((1 << TESTS_SHIFT) - 1)
_UNLIMITED = tl.constexpr(UNLIMITED)


@triton.jit
def needed_tests(s, rows, cols, docs_q, Docs, N, left, right,  # scores, where, the rule
                 tests,  # the tile's TEST_* flags
                 HAS_DOCS: tl.constexpr):
    """s with -inf on the pairs the flagged tests hide: the pairs the whole rule hides on this
    tile, since sparse_plan flags every test that hides one. One branch per test, on a scalar
    that every thread of the program shares: it never diverges, and the K and V loads stay
    outside it, so the pipeliner still prefetches them across the whole PARTIAL list (one loop
    per class of tiles would cut a causal window's 4 PARTIAL tiles per query block, 2 of each
    side, into pipelines that mostly fill and drain). Each side of the window is one compare
    against a per-row limit; left and right come clamped to +-UNLIMITED, so that rows +- them
    fits in int32. With documents these branches make ptxas serialize the kernel's wgmma
    instructions (lesson 9); tests_as_selects applies the same tests without them."""
    if (tests & _RIGHT) != 0:
        s = tl.where(cols[None, :] <= (rows + right)[:, None], s, float("-inf"))
    if (tests & _LEFT) != 0:
        s = tl.where(cols[None, :] >= (rows - left)[:, None], s, float("-inf"))
    if HAS_DOCS:  # loaded on every tile, outside the branch, so that it is prefetched too
        docs_k = tl.load(Docs + cols, mask=cols < N, other=-1)
        if (tests & _DOCS) != 0:
            same = (docs_q[:, None] == docs_k[None, :]) & (docs_q[:, None] >= 0)
            s = tl.where(same, s, float("-inf"))
    if (tests & _BOUND) != 0:
        s = tl.where(cols[None, :] < N, s, float("-inf"))
    return s


@triton.jit
def tests_as_selects(s, rows, cols, docs_q, Docs, N, left, right, tests,
                     HAS_DOCS: tl.constexpr):
    """needed_tests without a branch (an experiment): a test the tile does not need gets a
    limit that hides nothing, so every pair takes the window's two compares against per-row
    limits (the bound n folded into the right one) and, with documents, the id compare unless
    the flags leave it out. With branches and documents, ptxas serializes the kernel's wgmma
    instructions (lesson 9); without them it does not."""
    hi = tl.where((tests & _RIGHT) != 0, rows + right, rows + _UNLIMITED)
    hi = tl.minimum(hi, tl.where((tests & _BOUND) != 0, N - 1, _UNLIMITED))
    lo = tl.where((tests & _LEFT) != 0, rows - left, rows - _UNLIMITED)
    keep = (cols[None, :] >= lo[:, None]) & (cols[None, :] <= hi[:, None])
    if HAS_DOCS:
        docs_k = tl.load(Docs + cols, mask=cols < N, other=-1)
        same = (docs_q[:, None] == docs_k[None, :]) & (docs_q[:, None] >= 0)
        keep = keep & (same | ((tests & _DOCS) == 0))
    return tl.where(keep, s, float("-inf"))


@triton.jit
def tile_update(s, acc, l_i, m_i, v,  # raw scores (rows, BLOCK_N), running state, values
                rows, cols, docs_q, Docs,  # query rows, keys, the rows' ids (or key ranges)
                N, left, right, qk_scale, tests,  # sizes, the rule, the scale, TEST_* flags
                MASKED: tl.constexpr, HAS_DOCS: tl.constexpr,  # meta-parameters
                TESTS: tl.constexpr, ROW_RANGES: tl.constexpr, SELECTS: tl.constexpr):
    """One online-softmax step of a listed tile. MASKED=False: a FULL tile, through the dense
    reference's step (no mask, no safe max). MASKED=True: a PARTIAL tile, masked by the window,
    the documents and N (with TESTS, only by the tests `tests` flags; with ROW_RANGES, by each
    row's range of keys, docs_q = (first, last)), with the safe max (a row may have seen no key
    yet; rows that see nothing stay at m = -inf, l = 0)."""
    if MASKED:
        if ROW_RANGES:  # the whole rule in two compares, no key ids to load
            first, last = docs_q
            keep = (cols[None, :] >= first[:, None]) & (cols[None, :] <= last[:, None])
            s = tl.where(keep, s, float("-inf"))
        elif TESTS and SELECTS:
            s = tests_as_selects(s, rows, cols, docs_q, Docs, N, left, right, tests,
                                 HAS_DOCS=HAS_DOCS)
        elif TESTS:
            s = needed_tests(s, rows, cols, docs_q, Docs, N, left, right, tests,
                             HAS_DOCS=HAS_DOCS)
        else:
            offset = cols[None, :] - rows[:, None]  # key position minus query position
            keep = (offset <= right) & (-offset <= left)
            if HAS_DOCS:  # id -1 past N and for padding: hidden
                docs_k = tl.load(Docs + cols, mask=cols < N, other=-1)
                keep = keep & (docs_q[:, None] == docs_k[None, :]) & (docs_q[:, None] >= 0)
            else:
                keep = keep & (cols[None, :] < N)
            s = tl.where(keep, s, float("-inf"))
        # the safe max stays with TESTS: one select per row beside the mask's BLOCK_N, too
        # little to skip in the blocks that have a FULL tile
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s * qk_scale - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    else:
        acc, l_i, m_i = softmax_update(s, acc, l_i, m_i, v, rows, cols, N, qk_scale,
                                       MASKED=False, CAUSAL=False, USE_EXP2=True)
    return acc, l_i, m_i


@triton.jit
def entry_fields(entry, TESTS: tl.constexpr):
    """(key block, TEST_* flags) of a list entry: with TESTS the entry holds the flags above
    the index (SparsePlan.part_tests); flags 0 otherwise."""
    if TESTS:
        return entry & _INDEX_MASK, entry >> _SHIFT
    return entry, 0


@triton.jit
def next_listed_block(index_row, first, i, count, RANGE: tl.constexpr, AHEAD: tl.constexpr,
                      TESTS: tl.constexpr):
    """(key block, TEST_* flags, first) of entry i of a list of count entries: first + i with
    RANGE; with AHEAD `first` holds entry i, loaded one step earlier, and comes back holding
    entry i + 1 (0 past the end), so that the tile's K and V loads wait on no load of their
    own step (the pipeliner then keeps as many tiles of them in flight as with a run);
    otherwise entry i is loaded now."""
    if RANGE:
        return first + i, 0, first
    if AHEAD:
        block, tests = entry_fields(first, TESTS=TESTS)
        return block, tests, tl.load(index_row + i + 1, mask=i + 1 < count, other=0)
    block, tests = entry_fields(tl.load(index_row + i), TESTS=TESTS)
    return block, tests, first


@triton.jit
def attend_listed_blocks(acc, l_i, m_i, q,  # running state (fp32) and the query tile
                         k_src, v_src, b, h,  # K and V: a head's first row, or descriptors
                         stride_kn, stride_kd, stride_vn, stride_vd,  # strides
                         rows, offs_d, docs_q, Docs,  # query rows, their document ids
                         count, index_row, N, left, right, qk_scale,  # the list, the rule
                         BLOCK_N: tl.constexpr, MASKED: tl.constexpr,  # meta-parameters
                         HAS_DOCS: tl.constexpr, USE_TMA: tl.constexpr, RANGE: tl.constexpr,
                         TESTS: tl.constexpr, ROW_RANGES: tl.constexpr,
                         SELECTS: tl.constexpr, AHEAD: tl.constexpr):
    """Online softmax of one query block over the key blocks index_row[0 .. count): FULL
    blocks (MASKED=False; every key of the tile visible to every row, and < N) or PARTIAL ones
    (MASKED=True). RANGE: the list is index_row[0], index_row[0] + 1, ...: the first index is
    read once, not one per step (an experiment that measures what the list's loads cost).
    TESTS: each entry carries the tests its PARTIAL tile needs (SparsePlan.part_tests), applied
    as selects without branches with SELECTS. ROW_RANGES: docs_q is each row's (first, last)
    visible key (SparsePlan.row_ranges). AHEAD: each entry loaded one step ahead
    (next_listed_block)."""
    offs_n = tl.arange(0, BLOCK_N)
    # entry 0, in bounds: every row has one entry or more
    first = tl.load(index_row) if RANGE or AHEAD else 0
    for i in tl.range(0, count):
        block, tests, first = next_listed_block(index_row, first, i, count, RANGE=RANGE,
                                                AHEAD=AHEAD, TESTS=TESTS)
        start_n = block * BLOCK_N
        k = load_rows(k_src, b, h, start_n, offs_n, offs_d, stride_kn, stride_kd, N,
                      MASK_ROWS=MASKED, USE_TMA=USE_TMA)
        s = tl.dot(q, tl.trans(k))  # raw scores: the scale is folded into exp2's FMA
        v = load_rows(v_src, b, h, start_n, offs_n, offs_d, stride_vn, stride_vd, N,
                      MASK_ROWS=MASKED, USE_TMA=USE_TMA)
        acc, l_i, m_i = tile_update(s, acc, l_i, m_i, v, rows, start_n + offs_n, docs_q, Docs,
                                    N, left, right, qk_scale, tests, MASKED=MASKED,
                                    HAS_DOCS=HAS_DOCS, TESTS=TESTS, ROW_RANGES=ROW_RANGES,
                                    SELECTS=SELECTS)
    return acc, l_i, m_i


@triton.jit
def attend_listed_blocks_halves(acc0, l0, m0, acc1, l1, m1, q0, q1,  # two halves' state, Q
                                k_src, v_src, b, h,  # K and V: a head's first row, or descriptors
                                stride_kn, stride_kd, stride_vn, stride_vd,  # strides
                                rows0, rows1, offs_d, docs0, docs1, Docs,  # rows, document ids
                                count, index_row, N, left, right, qk_scale,  # list, rule, scale
                                BLOCK_N: tl.constexpr, MASKED: tl.constexpr,  # meta-parameters
                                HAS_DOCS: tl.constexpr, USE_TMA: tl.constexpr,
                                RANGE: tl.constexpr, TESTS: tl.constexpr,
                                ROW_RANGES: tl.constexpr, SELECTS: tl.constexpr,
                                AHEAD: tl.constexpr):
    """attend_listed_blocks for a query block held as two halves (lesson 8's step 7): both
    halves' Q K^T are issued before either softmax, so that the tensor cores work on one half's
    matmuls while the other half's softmax runs. Both halves walk the block's one list."""
    offs_n = tl.arange(0, BLOCK_N)
    first = tl.load(index_row) if RANGE or AHEAD else 0
    for i in tl.range(0, count):
        block, tests, first = next_listed_block(index_row, first, i, count, RANGE=RANGE,
                                                AHEAD=AHEAD, TESTS=TESTS)
        start_n = block * BLOCK_N
        k, v = load_key_value_rows(k_src, v_src, b, h, start_n, offs_n, offs_d, stride_kn,
                                   stride_kd, stride_vn, stride_vd, N, MASK_ROWS=MASKED,
                                   USE_TMA=USE_TMA)
        s0 = tl.dot(q0, tl.trans(k))
        s1 = tl.dot(q1, tl.trans(k))
        cols = start_n + offs_n
        acc0, l0, m0 = tile_update(s0, acc0, l0, m0, v, rows0, cols, docs0, Docs, N, left,
                                   right, qk_scale, tests, MASKED=MASKED, HAS_DOCS=HAS_DOCS,
                                   TESTS=TESTS, ROW_RANGES=ROW_RANGES, SELECTS=SELECTS)
        acc1, l1, m1 = tile_update(s1, acc1, l1, m1, v, rows1, cols, docs1, Docs, N, left,
                                   right, qk_scale, tests, MASKED=MASKED, HAS_DOCS=HAS_DOCS,
                                   TESTS=TESTS, ROW_RANGES=ROW_RANGES, SELECTS=SELECTS)
    return acc0, l0, m0, acc1, l1, m1


@triton.jit
def row_rule_inputs(Docs, rows, N, HAS_DOCS: tl.constexpr, ROW_RANGES: tl.constexpr):
    """What the mask rule of PARTIAL tiles needs per query row: its document id (-1 past N);
    with ROW_RANGES, Docs is SparsePlan.row_ranges and each row's (first, last) visible key
    comes instead (none past N); the rows themselves (unused) without either."""
    # one return for every branch: the compiler types a function by all its returns
    if ROW_RANGES:
        row_info = (tl.load(Docs + rows, mask=rows < N, other=0),
                    tl.load(Docs + N + rows, mask=rows < N, other=-1))
    elif HAS_DOCS:
        row_info = tl.load(Docs + rows, mask=rows < N, other=-1)
    else:
        row_info = rows
    return row_info


@triton.jit
def finish_rows(O, LSE, acc, l_i, m_i, b, h, bh, start, offs_d,  # state, where the rows go
                stride_ob, stride_oh, stride_on, stride_od, N,  # strides and size of O
                ROWS: tl.constexpr, HEAD_D: tl.constexpr, USE_TMA: tl.constexpr):
    """Store O = acc / l and LSE of `ROWS` rows from `start`; a row that saw no key gets O = 0
    and LSE = -inf."""
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    store_rows(O, LSE, acc, l_safe, m_i, b, h, bh, start, offs_d, stride_ob, stride_oh,
               stride_on, stride_od, N, ROWS=ROWS, HEAD_D=HEAD_D, USE_EXP2=True,
               USE_TMA=USE_TMA)


@triton.jit
def sparse_forward_kernel(Q, K, V, O, LSE, qk_scale,  # pointers (or descriptors), scale
                          stride_qb, stride_qh, stride_qn, stride_qd,  # strides
                          stride_kb, stride_kh, stride_kn, stride_kd,
                          stride_vb, stride_vh, stride_vn, stride_vd,
                          stride_ob, stride_oh, stride_on, stride_od,
                          H, N,  # sizes
                          Docs, left, right,  # the mask rule of PARTIAL tiles
                          Order, full_counts, full_index, part_counts, part_index,
                          index_stride,  # the block lists, one row per query block
                          HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,  # meta-parameters
                          BLOCK_N: tl.constexpr, HAS_DOCS: tl.constexpr,
                          USE_TMA: tl.constexpr, HALVES: tl.constexpr,
                          FULL_RANGE: tl.constexpr, PARTIAL_TESTS: tl.constexpr,
                          ROW_RANGES: tl.constexpr, TEST_SELECTS: tl.constexpr,
                          ENTRIES_AHEAD: tl.constexpr):
    """O = softmax(mask(sm_scale Q K^T)) V and LSE (natural log; -inf for a row that sees no
    key, whose O is 0) for one query block of one head; qk_scale = sm_scale * log2(e).

    Grid: (cdiv(N, BLOCK_M), B * H); program p runs query block Order[p]. LSE is a contiguous
    (B, H, N) float32 tensor. With USE_TMA, Q, K, V and O are (B, H, N, HEAD_D) descriptors
    (Q's and O's blocks BLOCK_M // 2 rows with HALVES). HALVES: the query block is held as two
    halves of BLOCK_M // 2 rows, each with its own state (lesson 8's step 7). FULL_RANGE: every
    FULL list is a run of consecutive blocks (SparsePlan.full_ranges), walked without its loads.
    PARTIAL_TESTS: part_index is SparsePlan.part_tests, each PARTIAL tile masked only by the tests
    it needs (TEST_SELECTS: applied as selects, without branches). ROW_RANGES: Docs is
    SparsePlan.row_ranges, each PARTIAL tile masked by its rows' ranges of keys (HAS_DOCS is
    then False). ENTRIES_AHEAD: each list's entries loaded one step ahead (next_listed_block).
    """
    start_m = tl.load(Order + tl.program_id(0))  # the longest lists first
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    start = start_m * BLOCK_M
    offs_d = tl.arange(0, HEAD_D)
    k_src, v_src = key_value_sources(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh,
                                     USE_TMA=USE_TMA)
    full_count = tl.load(full_counts + start_m)
    full_row = full_index + start_m * index_stride
    part_count = tl.load(part_counts + start_m)
    part_row = part_index + start_m * index_stride
    # FULL first: after one of them every row has a finite max, as softmax_update assumes
    if HALVES:
        HALF: tl.constexpr = BLOCK_M // 2
        rows0 = start + tl.arange(0, HALF)
        rows1 = rows0 + HALF
        q0 = load_tile(Q, b, h, start, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                       ROWS=HALF, USE_TMA=USE_TMA)
        q1 = load_tile(Q, b, h, start + HALF, offs_d, stride_qb, stride_qh, stride_qn,
                       stride_qd, N, ROWS=HALF, USE_TMA=USE_TMA)
        docs0 = row_rule_inputs(Docs, rows0, N, HAS_DOCS=HAS_DOCS, ROW_RANGES=ROW_RANGES)
        docs1 = row_rule_inputs(Docs, rows1, N, HAS_DOCS=HAS_DOCS, ROW_RANGES=ROW_RANGES)
        m0 = tl.full([HALF], float("-inf"), dtype=tl.float32)
        l0 = tl.zeros([HALF], dtype=tl.float32)
        acc0 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
        m1 = tl.full([HALF], float("-inf"), dtype=tl.float32)
        l1 = tl.zeros([HALF], dtype=tl.float32)
        acc1 = tl.zeros([HALF, HEAD_D], dtype=tl.float32)
        acc0, l0, m0, acc1, l1, m1 = attend_listed_blocks_halves(
            acc0, l0, m0, acc1, l1, m1, q0, q1, k_src, v_src, b, h, stride_kn, stride_kd,
            stride_vn, stride_vd, rows0, rows1, offs_d, docs0, docs1, Docs, full_count,
            full_row, N, left, right, qk_scale, BLOCK_N=BLOCK_N, MASKED=False,
            HAS_DOCS=HAS_DOCS, USE_TMA=USE_TMA, RANGE=FULL_RANGE, TESTS=False,
            ROW_RANGES=False, SELECTS=False, AHEAD=ENTRIES_AHEAD)
        acc0, l0, m0, acc1, l1, m1 = attend_listed_blocks_halves(
            acc0, l0, m0, acc1, l1, m1, q0, q1, k_src, v_src, b, h, stride_kn, stride_kd,
            stride_vn, stride_vd, rows0, rows1, offs_d, docs0, docs1, Docs, part_count,
            part_row, N, left, right, qk_scale, BLOCK_N=BLOCK_N, MASKED=True,
            HAS_DOCS=HAS_DOCS, USE_TMA=USE_TMA, RANGE=False, TESTS=PARTIAL_TESTS,
            ROW_RANGES=ROW_RANGES, SELECTS=TEST_SELECTS, AHEAD=ENTRIES_AHEAD)
        finish_rows(O, LSE, acc0, l0, m0, b, h, bh, start, offs_d, stride_ob, stride_oh,
                    stride_on, stride_od, N, ROWS=HALF, HEAD_D=HEAD_D, USE_TMA=USE_TMA)
        finish_rows(O, LSE, acc1, l1, m1, b, h, bh, start + HALF, offs_d, stride_ob,
                    stride_oh, stride_on, stride_od, N, ROWS=HALF, HEAD_D=HEAD_D,
                    USE_TMA=USE_TMA)
    else:
        rows = start + tl.arange(0, BLOCK_M)
        q = load_tile(Q, b, h, start, offs_d, stride_qb, stride_qh, stride_qn, stride_qd, N,
                      ROWS=BLOCK_M, USE_TMA=USE_TMA)
        docs_q = row_rule_inputs(Docs, rows, N, HAS_DOCS=HAS_DOCS, ROW_RANGES=ROW_RANGES)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
        acc, l_i, m_i = attend_listed_blocks(
            acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn, stride_kd, stride_vn, stride_vd,
            rows, offs_d, docs_q, Docs, full_count, full_row, N, left, right, qk_scale,
            BLOCK_N=BLOCK_N, MASKED=False, HAS_DOCS=HAS_DOCS, USE_TMA=USE_TMA,
            RANGE=FULL_RANGE, TESTS=False, ROW_RANGES=False, SELECTS=False, AHEAD=ENTRIES_AHEAD)
        acc, l_i, m_i = attend_listed_blocks(
            acc, l_i, m_i, q, k_src, v_src, b, h, stride_kn, stride_kd, stride_vn, stride_vd,
            rows, offs_d, docs_q, Docs, part_count, part_row, N, left, right, qk_scale,
            BLOCK_N=BLOCK_N, MASKED=True, HAS_DOCS=HAS_DOCS, USE_TMA=USE_TMA, RANGE=False,
            TESTS=PARTIAL_TESTS, ROW_RANGES=ROW_RANGES, SELECTS=TEST_SELECTS,
            AHEAD=ENTRIES_AHEAD)
        finish_rows(O, LSE, acc, l_i, m_i, b, h, bh, start, offs_d, stride_ob, stride_oh,
                    stride_on, stride_od, N, ROWS=BLOCK_M, HEAD_D=HEAD_D, USE_TMA=USE_TMA)


# ---------------------------------------------------------------- host side


def sparse_reference_config(d: int, left: int = UNLIMITED,
                            docs=None) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the reference sparse kernel on this runtime,
    for head dim d (the entry of the width it runs padded to) and the mask's left side and
    documents: a sliding window with no documents at kernel head dims up to 64 takes query
    blocks of 64 rows (tiles.SPARSE_SMALL_BLOCKS)."""
    if runtime.current().interpreter:
        return tiles.INTERPRETER
    width = kernel_head_dim(d)
    if width <= HALVES_AND_RANGES_UP_TO and left != UNLIMITED and docs is None:
        return tiles.SPARSE_SMALL_BLOCKS
    return tiles.SPARSE_REFERENCE.get(width, tiles.SPARSE_REFERENCE[64])


@dataclass(frozen=True)
class SparsePlan:
    """What sparse_forward needs besides q, k, v: built once per mask and sequence length."""

    n: int  # sequence length
    config: tuple[int, int, int, int]  # BLOCK_M, BLOCK_N, num_warps, num_stages
    left: int  # the window of PARTIAL tiles' rule
    right: int
    docs: torch.Tensor | None  # (n,) int32 document ids, or None: one document
    lists: tuple[torch.Tensor, ...]  # full_counts, full_index, part_counts, part_index
    order: torch.Tensor  # (query blocks,) int32: the query block of each program
    tile_counts: dict  # FULL, PARTIAL and EMPTY tiles of the block map
    full_ranges: bool = False  # every query block's FULL list is a run of consecutive blocks
    # part_index with each PARTIAL tile's TEST_* flags from bit TESTS_SHIFT on (partial_tests);
    # None where the indices or the rows do not leave room for them
    part_tests: torch.Tensor | None = None
    # (2 * n,) int32: each row's first visible key, then each row's last (row_ranges); None
    # where a row's keys are not one range (a document id in two separate runs)
    row_ranges: torch.Tensor | None = None


_require = runtime.require


def _check_window(name: str, value) -> int:
    _require(isinstance(value, (int, np.integer)) and not isinstance(value, bool)
             and -INT32_MAX <= int(value) <= INT32_MAX,
             f"{name}={value!r} must be an integer that fits in int32 (a window side; "
             f"modern_attention.UNLIMITED for none).")
    return int(value)


def program_order(kinds, longest_first: bool = True) -> np.ndarray:
    """The query block each program runs: the most listed blocks (FULL + PARTIAL) first, ties
    in increasing order; longest_first=False keeps the natural order."""
    kinds = np.asarray(kinds)
    work = ((kinds == FULL) | (kinds == PARTIAL)).sum(axis=1)
    order = np.argsort(-work, kind="stable") if longest_first else np.arange(len(work))
    return order.astype(np.int32)


def sparse_plan(n: int, d: int, device, left: int = UNLIMITED, right: int = UNLIMITED,
                docs=None, kinds=None, config=None, longest_first: bool = True) -> SparsePlan:
    """The block lists and program order of a mask of n x n, for head dim d.

    The mask: query i sees key j when i - left <= j <= i + right and docs[i] == docs[j] >= 0
    (modern_attention.dense_mask). `kinds`: a block map at the config's tiles to use instead of
    the one this rule gives (classify_rule); its FULL tiles are computed without a mask and its
    PARTIAL ones with the rule, so the rule must describe the mask on every PARTIAL tile (a
    random block mask whose blocks are multiples of the tiles has PARTIAL tiles only at a
    cut-off end: block_table_kinds). `config`: (BLOCK_M, BLOCK_N, num_warps, num_stages)."""
    _require(isinstance(n, (int, np.integer)) and n >= 1, f"n={n!r} must be a positive int.")
    left, right = _check_window("left", left), _check_window("right", right)
    config = (tuple(config) if config is not None
              else sparse_reference_config(d, left, docs))
    _require(len(config) == 4, f"config={config!r} must be (BLOCK_M, BLOCK_N, num_warps, "
             "num_stages).")
    block_m, block_n = config[:2]
    runtime.check_block_size("BLOCK_M", block_m)
    runtime.check_block_size("BLOCK_N", block_n)
    docs_t = None
    if docs is not None:
        ids = np.asarray(docs)
        _require(ids.shape == (n,) and np.issubdtype(ids.dtype, np.integer),
                 f"docs must be {n} integer document ids (one per position, -1 for padding); "
                 f"got {ids.dtype} of shape {ids.shape}.")
        docs_t = torch.from_numpy(ids.astype(np.int32)).to(device)
    if kinds is None:
        kinds = classify_rule(n, block_m, block_n, left, right, docs)
    kinds = np.asarray(kinds)
    shape = (cdiv(n, block_m), cdiv(n, block_n))
    _require(kinds.shape == shape, f"the block map has shape {kinds.shape}, but n={n} with "
             f"BLOCK_M={block_m}, BLOCK_N={block_n} needs {shape}: build it at the plan's tiles "
             "(sparse_reference_config).")
    _require(bool(np.isin(kinds, (EMPTY, PARTIAL, FULL)).all()),
             "the block map may only hold EMPTY (0), PARTIAL (1) and FULL (2).")
    if n % block_n:
        _require(not (kinds[:, -1] == FULL).any(), "the last key block is cut off at n="
                 f"{n}: it may be PARTIAL, never FULL (its missing keys would be read as keys).")
    host_lists = block_lists(kinds)
    lists = tuple(torch.from_numpy(a).to(device) for a in host_lists)
    order = torch.from_numpy(program_order(kinds, longest_first)).to(device)
    counts = {"full": int((kinds == FULL).sum()), "partial": int((kinds == PARTIAL).sum()),
              "empty": int((kinds == EMPTY).sum())}
    part_tests = None
    if tests_fit(n, block_m, block_n):
        tests = partial_tile_tests(kinds, n, block_m, block_n, left, right, docs)
        part_tests = torch.from_numpy(host_lists[3] | (tests << TESTS_SHIFT)).to(device)
    ranges = key_ranges(n, left, right, docs)
    return SparsePlan(n=int(n), config=config, left=left, right=right, docs=docs_t,
                      lists=lists, order=order, tile_counts=counts,
                      full_ranges=consecutive_lists(*host_lists[:2]), part_tests=part_tests,
                      row_ranges=None if ranges is None else torch.from_numpy(
                          ranges.reshape(-1)).to(device))


def document_runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(run, starts) of a sequence of ids: run[i] numbers the run of equal ids position i is
    in (0, 1, ...), starts[r] is the first position of run r."""
    change = ids[1:] != ids[:-1]
    return (np.concatenate([[0], np.cumsum(change)]),
            np.flatnonzero(np.concatenate([[True], change])))


def key_ranges(n: int, left: int = UNLIMITED, right: int = UNLIMITED, docs=None):
    """(2, n) int32: row i sees exactly the keys first[i] <= j <= last[i] under the rule (a
    row that sees none gets first 0, last -1), or None when some row's keys are not one range:
    a document id >= 0 that occurs in two separate runs. Packed documents are runs, so the
    window, the documents and the bound n become two compares per pair (row_ranges)."""
    rows = np.arange(n, dtype=np.int64)
    first = np.maximum(rows - left, 0)
    last = np.minimum(rows + right, n - 1)
    if docs is not None:
        ids = np.asarray(docs).astype(np.int64)
        run, starts = document_runs(ids)
        run_ids = ids[starts]
        named = run_ids[run_ids >= 0]
        if len(np.unique(named)) != len(named):
            return None
        ends = np.concatenate([starts[1:], [n]])
        first = np.maximum(first, starts[run])
        last = np.minimum(last, ends[run] - 1)
        last = np.where(ids >= 0, last, -1)
    empty = first > last
    first, last = np.where(empty, 0, first), np.where(empty, -1, last)
    return np.stack([first, last]).astype(np.int32)


def tests_fit(n: int, block_m: int, block_n: int) -> bool:
    """Whether partial_tests applies at this size: key block indices below 2**TESTS_SHIFT
    (the flags sit above them) and rows +- a window side clamped to UNLIMITED within int32."""
    return cdiv(n, block_n) <= 1 << TESTS_SHIFT and cdiv(n, block_m) * block_m <= UNLIMITED


def partial_tile_tests(kinds, n: int, block_m: int, block_n: int, left: int = UNLIMITED,
                       right: int = UNLIMITED, docs=None) -> np.ndarray:
    """The TEST_* flags of each PARTIAL tile, laid out as block_lists(kinds)'s part_index (0 in
    its padding): from the rule on the tile's real rows and keys (< n), so right for any block
    map, a custom `kinds` included. A test is flagged when it may hide a pair of the tile:
    TEST_RIGHT when some key lies past row + right, TEST_LEFT when some key lies before
    row - left, TEST_DOCS when the rows and keys are not all in one document >= 0, TEST_BOUND
    when the tile reaches past n. Every other test keeps every pair, so skipping it changes
    nothing."""
    kinds = np.asarray(kinds)
    qi, kj = np.nonzero(kinds == PARTIAL)  # row by row, keys in increasing order: the lists'
    r0 = qi.astype(np.int64) * block_m  # first and last real row and key of each tile
    r1 = np.minimum(r0 + block_m, n) - 1
    c0 = kj.astype(np.int64) * block_n
    c1 = np.minimum(c0 + block_n, n) - 1
    tests = (np.where(c1 - r0 > right, TEST_RIGHT, 0) | np.where(r1 - c0 > left, TEST_LEFT, 0)
             | np.where(c0 + block_n > n, TEST_BOUND, 0))
    if docs is not None:
        ids = np.asarray(docs)
        run, _ = document_runs(ids)  # run[i] == run[j]: one id from i to j
        one_doc = ((run[r0] == run[r1]) & (run[c0] == run[c1]) & (ids[r0] == ids[c0])
                   & (ids[r0] >= 0))
        tests |= np.where(one_doc, 0, TEST_DOCS)
    counts = (kinds == PARTIAL).sum(axis=1)
    slot = np.arange(len(qi)) - (np.cumsum(counts) - counts)[qi]  # the entry within its row
    table = np.zeros((kinds.shape[0], max(1, kinds.shape[1])), dtype=np.int32)
    table[qi, slot] = tests
    return table


def consecutive_lists(counts: np.ndarray, index: np.ndarray) -> bool:
    """Whether every row's first counts[r] indices run j, j + 1, j + 2, ... (a causal mask's
    or a window's FULL blocks do; a random block mask's need not)."""
    steps = np.arange(index.shape[1])
    runs = index == index[:, :1] + steps
    return bool(all(runs[r, :c].all() for r, c in enumerate(counts)))


# At kernel head dims up to this, the reference holds a query block as two halves and walks
# FULL lists that are runs without their loads (09-sparse-steps.csv, steps 5 and 6: 1.09-1.30x
# the teaching kernel at d = 64; at d = 128 the halves' registers do not fit and step 6 changed
# -1 to 2%).
HALVES_AND_RANGES_UP_TO = 64


class Variant(NamedTuple):
    """What sparse_forward takes by default for a plan and head dim (reference_variant)."""
    halves: bool
    full_range: bool
    partial_tests: bool
    row_ranges: bool


def reference_variant(plan: SparsePlan, d: int) -> Variant:
    """The variant sparse_forward takes by default for this plan and head dim d, as timed on
    an H200 (gpu/bench_modern_attention.py --part steps, gpu/measure_partial_cost.py): halves
    and full_range at kernel head dims up to HALVES_AND_RANGES_UP_TO, halves only where each
    half fills the tensor cores' matmul (halves_fill_the_tensor_cores), full_range only where
    the plan's FULL lists are runs; above that width and only on a plan with documents (where
    they won; the tests lost on every other mask and width), row_ranges where every row's keys
    are one range, else partial_tests where the plan has room for the tests."""
    narrow = kernel_head_dim(d) <= HALVES_AND_RANGES_UP_TO
    docs = not narrow and plan.docs is not None
    ranges = docs and plan.row_ranges is not None
    tests = docs and not ranges and plan.part_tests is not None
    return Variant(narrow and halves_fill_the_tensor_cores(plan.config),
                   narrow and plan.full_ranges, tests, ranges)


def halves_fill_the_tensor_cores(config: tuple[int, int, int, int]) -> bool:
    """Each half of a BLOCK_M query block holds hardware.HOPPER_WGMMA_ROWS rows per warpgroup
    of the config's warps: a smaller half compiles to the older mma instructions (a 64-row
    block in 4 warps: halves of 32 rows, no wgmma, 250 registers and more). In the
    interpreter, where nothing compiles, the rule scales down to tl.dot's MIN_DOT_ROWS."""
    block_m, _, warps, _ = config
    rows = MIN_DOT_ROWS if runtime.current().interpreter else hardware.HOPPER_WGMMA_ROWS
    return block_m // 2 >= rows * max(1, warps // hardware.WARPS_PER_WARPGROUP)


def sparse_forward(q, k, v, plan: SparsePlan, sm_scale: float | None = None,
                   use_tma: bool = True, halves: bool | None = None,
                   full_range: bool | None = None, partial_tests: bool | None = None,
                   row_ranges: bool | None = None, tests_as_selects: bool = False,
                   entries_ahead: bool = False):
    """Block-sparse attention of q, k, v (B, H, N, D), any strides, with the plan's mask;
    returns (o, lse): o like q, lse (B, H, N) float32 in natural log (-inf for a row that sees
    no key; its o is 0). sm_scale: 1 / sqrt(D) of the real head dim unless given. use_tma:
    tensor descriptors where this Triton, the GPU and the tensors' alignment allow. halves:
    hold each query block as two halves (lesson 8's step 7). full_range: walk each FULL list as
    a run of consecutive blocks without loading its entries (only for a plan whose FULL lists
    are runs, SparsePlan.full_ranges). partial_tests: mask each PARTIAL tile only by the tests
    it needs (SparsePlan.part_tests; gpu/measure_partial_cost.py times it). row_ranges: mask
    each PARTIAL tile by its rows' ranges of keys (SparsePlan.row_ranges: two compares per
    pair, no key ids loaded), instead of the rule's tests; unset, it is the reference's choice
    only when partial_tests is unset too. None (the default) for any of the four:
    reference_variant's choice; gpu/bench_modern_attention.py --part steps times each on and
    off. tests_as_selects: an experiment,
    off until timed: with partial_tests, each tile's tests applied as selects against per-row
    limits, with no branch (the branches make ptxas serialize the wgmma instructions on plans
    with documents: lesson 9). entries_ahead: an experiment, off until timed: each list's
    entries loaded one step ahead, so that a tile's K and V wait on no load of their own step
    (with a list the pipeliner keeps one tile fewer in flight: lesson 9)."""
    o, lse, launch = _checked_launch(q, k, v, plan, sm_scale, use_tma, halves, full_range,
                                     partial_tests, row_ranges, tests_as_selects,
                                     entries_ahead)
    run_at_kernel_width(launch, (q, k, v), (o,))
    return o, lse


def _checked_launch(q, k, v, plan, sm_scale, use_tma, halves, full_range, partial_tests,
                    row_ranges, tests_as_selects, entries_ahead):
    """sparse_forward's checks and choices: (o, lse, launch), the outputs to fill and
    launch(q, k, v, o) at a kernel head dim with every option resolved."""
    check_reference_qkv(q, k, v)
    B, H, N, D = q.shape
    _require(N == plan.n, f"the plan was built for n={plan.n}, but q, k, v have N={N}: build "
             "one with sparse_plan(N, ...).")
    _require(plan.order.device == q.device, f"the plan lives on {plan.order.device} and q on "
             f"{q.device}: build it with device=q.device.")
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    _require(math.isfinite(sm_scale) and sm_scale > 0, f"sm_scale={sm_scale!r} must be a "
             "positive finite number (the kernel takes row maxima of scaled scores).")
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    _require(halves is None or isinstance(halves, bool),
             f"halves={halves!r} must be True, False or None (the reference's choice).")
    _require(full_range is None or isinstance(full_range, bool),
             f"full_range={full_range!r} must be True, False or None (the reference's choice).")
    chosen = reference_variant(plan, D)
    chosen_halves, chosen_range, chosen_tests, chosen_ranges = chosen
    halves = chosen_halves if halves is None else halves
    full_range = chosen_range if full_range is None else full_range
    _require(not full_range or plan.full_ranges, "full_range=True walks each FULL list as a "
             "run of consecutive key blocks, but this plan's FULL lists are not runs (a random "
             "block mask, say): leave full_range False for it.")
    _require(not halves or plan.config[0] >= 2 * MIN_DOT_ROWS or runtime.current().interpreter,
             f"halves=True splits BLOCK_M={plan.config[0]} into two halves, and tl.dot needs "
             f"at least {MIN_DOT_ROWS} rows on a GPU: build the plan with BLOCK_M >= "
             f"{2 * MIN_DOT_ROWS}.")
    _require(partial_tests is None or isinstance(partial_tests, bool),
             f"partial_tests={partial_tests!r} must be True, False or None (the reference's "
             "choice).")
    _require(row_ranges is None or isinstance(row_ranges, bool),
             f"row_ranges={row_ranges!r} must be True, False or None (the reference's choice).")
    if row_ranges is None:  # partial_tests given: the caller picked the rule's tests
        row_ranges = chosen_ranges and partial_tests is None
    _require(not row_ranges or plan.row_ranges is not None, "row_ranges=True masks each row "
             "by one range of keys, but this plan's document ids repeat an id in two separate "
             "runs, so some row's keys are not one range: leave it False.")
    _require(not (row_ranges and partial_tests), "row_ranges=True replaces the rule's tests on "
             "every PARTIAL tile: leave partial_tests unset (or False) with it.")
    # the ranges replace every test; a plan chosen for them falls back to the partial tests
    fallback_tests = chosen_tests or (chosen_ranges and plan.part_tests is not None)
    partial_tests = (not row_ranges and fallback_tests) if partial_tests is None else partial_tests
    _require(not partial_tests or plan.part_tests is not None, "partial_tests=True packs each "
             f"PARTIAL tile's tests above its key block's index, and n={plan.n} leaves no room "
             "at these tiles (tests_fit): leave it False.")
    _require(isinstance(tests_as_selects, bool),
             f"tests_as_selects={tests_as_selects!r} must be True or False.")
    _require(not tests_as_selects or partial_tests, "tests_as_selects=True changes how the "
             "partial tests are applied, and this call runs without them: pass "
             "partial_tests=True with it.")
    _require(isinstance(entries_ahead, bool),
             f"entries_ahead={entries_ahead!r} must be True or False.")
    launch = functools.partial(_launch, plan=plan, lse=lse, qk_scale=sm_scale * LOG2E,
                               use_tma=use_tma, halves=halves, full_range=full_range,
                               partial_tests=partial_tests, row_ranges=row_ranges,
                               tests_as_selects=tests_as_selects, entries_ahead=entries_ahead)
    return o, lse, launch


class SparseForward:
    """sparse_forward planned once for bound tensors, for calls too short to pay for its host
    work each time (lesson 9: the window at N = 8k runs 0.1 ms, about what the checks, the
    variant's choice and the tensor descriptors cost the host). The constructor takes
    sparse_forward's arguments, checks them and makes the kernel's arguments once; `run()`
    launches the kernel alone and returns (o, lse), the same tensors at every call. As with
    decode.DecodePlan, the tensors are bound: a next call writes its q, k, v into them in
    place (as replaying a CUDA graph needs anyway). A head dim the kernels do not run at is
    padded into buffers of the plan's, and run() copies in and out around the launch."""

    def __init__(self, q, k, v, plan: SparsePlan, sm_scale: float | None = None,
                 use_tma: bool = True, halves: bool | None = None,
                 full_range: bool | None = None, partial_tests: bool | None = None,
                 row_ranges: bool | None = None, tests_as_selects: bool = False,
                 entries_ahead: bool = False):
        self.o, self.lse, launch = _checked_launch(
            q, k, v, plan, sm_scale, use_tma, halves, full_range, partial_tests, row_ranges,
            tests_as_selects, entries_ahead)
        self.inputs = (q, k, v)
        width = kernel_head_dim(q.shape[-1])
        self.wide = None
        if width != q.shape[-1]:  # zero columns, written once: the copies fill the rest
            self.wide = [x.new_zeros((*x.shape[:-1], width)) for x in (q, k, v, self.o)]
        recorded = RecordedLaunch()
        launch(*(self.wide or (q, k, v, self.o)), kernel=recorded)
        self.grid, self.args, self.options = recorded.last

    def run(self):
        if self.wide is not None:
            d = self.o.shape[-1]
            for wide, x in zip(self.wide[:3], self.inputs, strict=True):
                wide[..., :d].copy_(x)
        sparse_forward_kernel[self.grid](*self.args, **self.options)
        if self.wide is not None:
            self.o.copy_(self.wide[3][..., :self.o.shape[-1]])
        return self.o, self.lse


def _launch(q, k, v, o, *, plan, lse, qk_scale, use_tma, halves, full_range, partial_tests,
            row_ranges, tests_as_selects, entries_ahead=False, kernel=None):
    """sparse_forward's launch at a kernel head dim (q.shape[-1] a power of two)."""
    B, H, N, D = q.shape
    block_m, block_n, warps, stages = plan.config
    tma = use_tma and tma_supported() and tma_ok(q, k, v, o)
    args = [q, k, v, o]
    if tma:  # with halves, Q and O move half a query block at a time
        args = tensor_descriptors(q, k, v, o, block_m // 2 if halves else block_m, block_n)
    full_counts, full_index, part_counts, part_index = plan.lists
    if row_ranges:  # what the rule reads per row
        docs = plan.row_ranges
    elif plan.docs is not None:
        docs = plan.docs
    else:
        docs = plan.order  # unused: the rule reads nothing per row
    left, right = plan.left, plan.right
    if partial_tests:  # rows +- left, right must fit int32; every pair has |offset| < n anyway
        part_index = plan.part_tests
        left, right = (min(max(x, -UNLIMITED), UNLIMITED) for x in (left, right))
    (kernel or sparse_forward_kernel)[(cdiv(N, block_m), B * H)](
        *args, lse, qk_scale, *q.stride(), *k.stride(), *v.stride(), *o.stride(), H, N,
        docs, left, right, plan.order, full_counts, full_index, part_counts,
        part_index, full_index.stride(0), HEAD_D=D, BLOCK_M=block_m, BLOCK_N=block_n,
        HAS_DOCS=plan.docs is not None and not row_ranges, USE_TMA=tma, HALVES=halves,
        FULL_RANGE=full_range, PARTIAL_TESTS=partial_tests, ROW_RANGES=row_ranges,
        TEST_SELECTS=tests_as_selects, ENTRIES_AHEAD=entries_ahead,
        num_warps=warps, num_stages=stages)


# ---------------------------------------------------------------- block masks given as tables


def random_block_table(n: int, block: int, density: float, seed: int) -> np.ndarray:
    """A random block mask: (cdiv(n, block), cdiv(n, block)) booleans, each block visible with
    probability `density`."""
    blocks = cdiv(n, block)
    return np.random.default_rng(seed).random((blocks, blocks)) < density


def block_table_mask(table: np.ndarray, block: int, n: int) -> np.ndarray:
    """The dense (n, n) mask of a block table (for references; a gigabyte at n = 32k)."""
    return np.repeat(np.repeat(table, block, axis=0), block, axis=1)[:n, :n]


def block_table_kinds(table: np.ndarray, block: int, n: int, block_m: int,
                      block_n: int) -> np.ndarray:
    """classify_blocks(block_table_mask(table, block, n), block_m, block_n) without the dense
    mask: every tile lies inside one block of the table, so it is FULL or EMPTY, except a
    cut-off last key block, which is PARTIAL where visible."""
    _require(block % block_m == 0 and block % block_n == 0,
             f"the table's blocks ({block}) must be multiples of BLOCK_M={block_m} and "
             f"BLOCK_N={block_n}: a tile across two blocks would be PARTIAL with no rule for it.")
    rows = np.arange(cdiv(n, block_m)) * block_m // block
    cols = np.arange(cdiv(n, block_n)) * block_n // block
    seen = np.asarray(table, bool)[rows][:, cols]
    kinds = np.where(seen, FULL, EMPTY).astype(np.int8)
    if n % block_n:
        kinds[:, -1] = np.where(seen[:, -1], PARTIAL, EMPTY)
    return kinds
