"""The course's reference paged split-KV decoding step, beside lesson 9's exercise 4.

Exercise 4's kernels are the student's and stay the lesson's; this module is the course's
answer to "how fast can that algorithm go": the same paged, grouped-query, split-KV decoding
(one program per split, sequence and K/V head, the group's query heads as the rows of one
`tl.dot` tile), with what the measurements of assets/results/09-decode.csv asked for:

* `decode_splits` chooses the number of splits from the shape and the GPU's SM count;
* a step that needs one split is one launch: the kernel divides by the sum and writes the
  output itself, with no states and no merge kernel;
* the number of blocks per split is a runtime argument, so one compilation serves every cache
  length (exercise 4's SPLIT_SIZE is a compile-time constant: one compilation per size);
* scores in base 2 (the scale times log2 e folded in once, exp2), as in lesson 8;
* any head dim up to 256 without padded copies of the pool: the columns past d are masked;
* `DecodePlan` checks the inputs, allocates the states and fixes the grid once per batch
  shape, and `run()` only launches, as serving engines split it (FlashInfer's plan and run):
  the Python work of a step is its one or two launches. Tiles: tiles.DECODE_CONFIGS.
* K and V read three ways (`KV_LOADS`): each block's rows through their pages' pointers (the
  default), the same with the page numbers loaded a block ahead (the K and V loads then wait
  on no load of their own iteration, and the pipeliner keeps one more block of them in
  flight), or a page per block through tensor descriptors (TMA); the last two are untimed
  (gpu/tune_decode.py times them; gpu/decode_buffers.py counts the blocks in flight);
* two other ways to run the merge, off by default and measured in 09-decode-gap.csv: a
  programmatic dependent launch that overlaps the split kernel (`dependent_launch`), and the
  merge fused into the split kernel (`fused_merge`).

`read_only` launches a kernel that reads a buffer and writes one number per program: timed,
it is the measured ceiling of a kernel that only reads, as decoding does (it writes a few KB),
to set beside the datasheet's hardware.H200_HBM_TBS (tiles.READ_ONLY_CONFIG).

Import after `fc.setup()` (it defines @triton.jit kernels).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import hardware, runtime
from ..models.matmul import cdiv
from . import LOG2E, host, ladder, tiles
from .ladder import TensorDescriptor
from .modern_attention import MIN_DOT_ROWS, _scale, check_paged_cache, group_rows

_require = runtime.require

MAX_DECODE_HEAD_DIM = 256
KV_LOADS = ("rows", "pages ahead", "tma")  # how the kernel reads K and V (DecodePlan)


# ---------------------------------------------------------------- how many splits


def decode_splits(batch: int, kv_heads: int, max_len: int, num_sms: int, block_n: int) -> int:
    """Splits per sequence for one decoding step on a GPU of num_sms SMs.

    A step reads the whole cache once, and reads it at the memory's speed only when enough
    programs run at once to keep enough loads in flight. The measured optimum is about
    tiles.DECODE_PROGRAMS_PER_SM programs per SM: fewer leave bandwidth unused, more add
    states to merge and a tail of late programs. batch * kv_heads programs exist without any
    split (64 sequences x 8 K/V heads give 512 on 132 SMs: one split, so one launch and no
    merge); fewer are multiplied by the most splits that stay within the target, and no split
    holds fewer than tiles.DECODE_MIN_SPLIT_BLOCKS blocks of block_n keys.
    """
    for name, value in (("batch", batch), ("kv_heads", kv_heads), ("num_sms", num_sms),
                        ("block_n", block_n)):
        _require(isinstance(value, int) and value >= 1,
                 f"{name} must be a positive int; got {value!r}.")
    _require(isinstance(max_len, int) and max_len >= 0,
             f"max_len must be an int >= 0 (the longest a sequence may be); got {max_len!r}.")
    blocks = max(1, cdiv(max_len, block_n))
    wanted = tiles.DECODE_PROGRAMS_PER_SM * num_sms // (batch * kv_heads)  # never past it
    most = max(1, blocks // tiles.DECODE_MIN_SPLIT_BLOCKS)
    return max(1, min(wanted, most))


def decode_config(d: int) -> tuple[int, int, int]:
    """(BLOCK_N, num_warps, num_stages) of the decoding kernel for head dim d on this
    runtime (the entry of d rounded up to a power of two)."""
    if runtime.current().interpreter:
        return tiles.INTERPRETER[1], 4, 1
    width = max(MIN_DOT_ROWS, 1 << max(0, d - 1).bit_length())
    return tiles.DECODE_CONFIGS[min(width, max(tiles.DECODE_CONFIGS))]


def decode_tma_config(page_size: int) -> tuple[int, int, int]:
    """(BLOCK_N, num_warps, num_stages) of the TMA decoding kernel: a block is one page."""
    if runtime.current().interpreter:
        return page_size, 4, 1
    return (page_size, *tiles.DECODE_TMA_CONFIG)


def _check_tma(k_pages, v_pages, block_n: int) -> None:
    """Clear errors where the pools cannot be read a page at a time through TMA."""
    page_size = k_pages.shape[1]
    _require(ladder.tma_supported(),
             'kv_loads="tma" needs tensor descriptors: Triton 3.4 or newer and a Hopper (or '
             'newer) GPU, or the interpreter; use kv_loads="rows" here.')
    _require(block_n == page_size,
             f'kv_loads="tma" reads one page per block: BLOCK_N must be the page size '
             f"{page_size}; got {block_n}.")
    _require(page_size <= hardware.TMA_BOX_MAX,
             f'kv_loads="tma" reads a page in one copy of at most {hardware.TMA_BOX_MAX} rows; '
             f'pages of {page_size} keys need kv_loads="rows".')
    _require(host.tma_ok(k_pages, v_pages),
             'kv_loads="tma" needs pools whose start and strides are multiples of 16 bytes '
             f"(strides {tuple(k_pages.stride())} of {k_pages.element_size()}-byte values); "
             'copy them with .contiguous() or use kv_loads="rows".')


# ---------------------------------------------------------------- kernels


@triton.jit
def _head_mask(rows_ok, offs_d, D: tl.constexpr, D_BLOCK: tl.constexpr):
    """rows_ok[:, None], and the columns below D when the head dim is not a power of two
    (a mask along d only then: it would split the loads of full rows into narrow ones)."""
    if D == D_BLOCK:
        return tl.broadcast_to(rows_ok[:, None], (rows_ok.shape[0], D_BLOCK))
    return rows_ok[:, None] & (offs_d < D)[None, :]


@triton.jit
def _program_split(Q, Lengths, s_qb, s_qh, H_KV, blocks_per_split,
                   D: tl.constexpr, D_BLOCK: tl.constexpr, GROUP: tl.constexpr,
                   ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """What program (split, b * H_KV + kv_h) works on: (split, b, kv_h, heads, real, offs_d,
    q, lo, hi), its query heads' rows (real: within the group) and the keys lo..hi of its
    split."""
    split = tl.program_id(0)
    bkv = tl.program_id(1)
    b = bkv // H_KV
    kv_h = bkv % H_KV
    rows = tl.arange(0, ROWS)
    real = rows < GROUP  # rows past the group exist only for tl.dot
    heads = kv_h * GROUP + rows
    offs_d = tl.arange(0, D_BLOCK)
    q = tl.load(Q + b * s_qb + heads[:, None] * s_qh + offs_d[None, :],
                mask=_head_mask(real, offs_d, D, D_BLOCK), other=0.0)       # (ROWS, D_BLOCK)
    lo = split * blocks_per_split * BLOCK_N
    hi = tl.minimum(lo + blocks_per_split * BLOCK_N, tl.load(Lengths + b))
    return split, b, kv_h, heads, real, offs_d, q, lo, hi


@triton.jit
def _block_pages(table_row, start, hi,  # a sequence's page table, first key, end of the split
                 PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """The page of each key start..start + BLOCK_N (int64), 0 past hi (never read)."""
    pos = start + tl.arange(0, BLOCK_N)
    return tl.load(table_row + pos // PAGE_SIZE, mask=pos < hi, other=0).to(tl.int64)


@triton.jit
def _attend(q, k, v, inside, m_i, l_i, acc, qk_scale,  # a block of keys, the state
            MASKED: tl.constexpr):
    """The state (m_i, l_i, acc) in base 2 after one block of keys; MASKED: the keys where
    `inside` is false count for nothing."""
    s = tl.dot(q, tl.trans(k)) * qk_scale                                   # (ROWS, BLOCK_N)
    if MASKED:
        s = tl.where(inside[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every block visited holds a key
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _write_result(M, L, O, Out, m_i, l_i, acc, b, heads, real, split, offs_d,
                  s_outb, s_outh, H_KV,
                  D: tl.constexpr, D_BLOCK: tl.constexpr, GROUP: tl.constexpr,
                  ONE_PASS: tl.constexpr):
    """ONE_PASS: the attention output; otherwise the split's state (M, L, O not divided)."""
    if ONE_PASS:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # no key: 0, not NaN
        tl.store(Out + b * s_outb + heads[:, None] * s_outh + offs_d[None, :],
                 out.to(Out.dtype.element_ty), mask=_head_mask(real, offs_d, D, D_BLOCK))
    else:
        state = (b * H_KV * GROUP + heads) * tl.num_programs(0) + split    # [b, head, split]
        tl.store(M + state, m_i, mask=real)  # an empty split keeps (-inf, 0, 0)
        tl.store(L + state, l_i, mask=real)
        tl.store(O + state[:, None] * D_BLOCK + offs_d[None, :], acc, mask=real[:, None])


@triton.jit
def paged_decode_kernel(Q,  # (B, H, D): one new token per sequence
                        K_pages, V_pages,  # (num_pages, PAGE_SIZE, H_KV, D), the same strides
                        Pages,  # (B, max_pages) int32: the page table
                        Lengths,  # (B,) int32
                        M, L, O,  # states, contiguous: M, L (B, H, S), O (B, H, S, D_BLOCK)
                        Out,  # (B, H, D): written when ONE_PASS or FUSED_MERGE
                        Arrivals,  # (B * H_KV,) int32, zeros: splits done (FUSED_MERGE only)
                        s_qb, s_qh, s_page, s_slot, s_head, s_table, s_outb, s_outh,
                        H_KV, blocks_per_split, qk_scale,
                        D: tl.constexpr, D_BLOCK: tl.constexpr, GROUP: tl.constexpr,
                        ROWS: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                        ONE_PASS: tl.constexpr, PAGES_AHEAD: tl.constexpr,
                        NO_SOFTMAX: tl.constexpr = False, FUSED_MERGE: tl.constexpr = False,
                        S_BLOCK: tl.constexpr = 2, LAUNCH_MERGE_EARLY: tl.constexpr = False):
    """Program (split, b * H_KV + kv_h): the GROUP query heads of K/V head kv_h (rows of a
    tile of ROWS >= 16) over the keys [split, split + 1) * blocks_per_split * BLOCK_N below
    Lengths[b]. ONE_PASS (one split): stores the attention output; otherwise the split's
    state in base 2: M (max of qk_scale * q.k, qk_scale holding log2 e), L, O (not divided).
    PAGES_AHEAD: each block's page numbers are loaded one block ahead, so that the K and V
    loads do not wait on a load of the same iteration (the pipeliner then keeps num_stages - 1
    blocks of K and V in flight, not one). NO_SOFTMAX: a bound for gpu/measure_decode_gap.py,
    never a result: the same loads and matmuls with the softmax's max, exp2 and rescaling left
    out (its output is wrong). FUSED_MERGE (more than one split): the last split of a K/V head
    to finish merges its group's states into Out, so that no merge kernel runs; it counts the
    splits done in Arrivals and sets the count back to 0 for the next step.
    LAUNCH_MERGE_EARLY (compiled on Hopper or newer): lets the merge kernel, launched as a
    programmatic dependent launch, start once every split has started (it then waits for this
    grid's stores before it reads a state)."""
    if LAUNCH_MERGE_EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    split, b, kv_h, heads, real, offs_d, q, lo, hi = _program_split(
        Q, Lengths, s_qb, s_qh, H_KV, blocks_per_split, D=D, D_BLOCK=D_BLOCK, GROUP=GROUP,
        ROWS=ROWS, BLOCK_N=BLOCK_N)
    table_row = Pages + b * s_table
    columns = kv_h * s_head + offs_d
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, D_BLOCK], dtype=tl.float32)
    if PAGES_AHEAD:
        next_pages = _block_pages(table_row, lo, hi, PAGE_SIZE, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):  # none for a split past its sequence's end
        pos = start + tl.arange(0, BLOCK_N)
        inside = pos < hi
        if PAGES_AHEAD:
            page = next_pages
            next_pages = _block_pages(table_row, start + BLOCK_N, hi, PAGE_SIZE, BLOCK_N)
        else:
            page = _block_pages(table_row, start, hi, PAGE_SIZE, BLOCK_N)
        at = (page * s_page + (pos % PAGE_SIZE) * s_slot)[:, None] + columns[None, :]
        kv_mask = _head_mask(inside, offs_d, D, D_BLOCK)
        k = tl.load(K_pages + at, mask=kv_mask, other=0.0)                  # (BLOCK_N, D_BLOCK)
        v = tl.load(V_pages + at, mask=kv_mask, other=0.0)
        if NO_SOFTMAX:
            s = tl.dot(q, tl.trans(k))
            acc += tl.dot(s.to(v.dtype), v)
        else:
            m_i, l_i, acc = _attend(q, k, v, inside, m_i, l_i, acc, qk_scale, MASKED=True)
    _write_result(M, L, O, Out, m_i, l_i, acc, b, heads, real, split, offs_d, s_outb, s_outh,
                  H_KV, D=D, D_BLOCK=D_BLOCK, GROUP=GROUP, ONE_PASS=ONE_PASS)
    if FUSED_MERGE:
        _merge_if_last(M, L, O, Out, Arrivals, b, kv_h, H_KV, s_outb, s_outh, D=D,
                       D_BLOCK=D_BLOCK, GROUP=GROUP, S_BLOCK=S_BLOCK)


@triton.jit
def _page_block(K_desc, V_desc, page, start, hi, kv_h, q, m_i, l_i, acc, qk_scale,
                PAGE_SIZE: tl.constexpr, D_BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """One page of K/V head kv_h through the descriptors into the state. MASKED (the page
    that holds the sequence's last key): the slots from hi on hold no key; their V rows are
    zeroed, since 0 * NaN is NaN and a slot not yet written may hold anything."""
    k = K_desc.load([page, 0, kv_h, 0]).reshape(PAGE_SIZE, D_BLOCK)      # (PAGE_SIZE, D_BLOCK)
    v = V_desc.load([page, 0, kv_h, 0]).reshape(PAGE_SIZE, D_BLOCK)
    inside = start + tl.arange(0, PAGE_SIZE) < hi
    if MASKED:
        v = tl.where(inside[:, None], v, 0.0)
    return _attend(q, k, v, inside, m_i, l_i, acc, qk_scale, MASKED=MASKED)


@triton.jit
def paged_decode_tma_kernel(Q,  # (B, H, D): one new token per sequence
                            K_desc, V_desc,  # descriptors of the pools, blocks of one page
                            Pages, Lengths, M, L, O, Out, Arrivals,  # as paged_decode_kernel's
                            s_qb, s_qh, s_table, s_outb, s_outh,
                            H_KV, blocks_per_split, qk_scale,
                            D: tl.constexpr, D_BLOCK: tl.constexpr, GROUP: tl.constexpr,
                            ROWS: tl.constexpr, PAGE_SIZE: tl.constexpr,
                            ONE_PASS: tl.constexpr, FUSED_MERGE: tl.constexpr = False,
                            S_BLOCK: tl.constexpr = 2,
                            LAUNCH_MERGE_EARLY: tl.constexpr = False):
    """paged_decode_kernel's work with a block of one page, which the copy engine (TMA) moves
    whole through the descriptors (blocks (1, PAGE_SIZE, 1, D_BLOCK) of the pools, columns
    past D read as 0), the page numbers loaded one page ahead. The full pages are unmasked;
    the page that holds the last key (if partly filled) comes after the loop, masked."""
    if LAUNCH_MERGE_EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    split, b, kv_h, heads, real, offs_d, q, lo, hi = _program_split(
        Q, Lengths, s_qb, s_qh, H_KV, blocks_per_split, D=D, D_BLOCK=D_BLOCK, GROUP=GROUP,
        ROWS=ROWS, BLOCK_N=PAGE_SIZE)
    full_hi = tl.maximum(lo, hi - hi % PAGE_SIZE)  # the end of the split's full pages
    table_row = Pages + b * s_table
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, D_BLOCK], dtype=tl.float32)
    page = tl.load(table_row + lo // PAGE_SIZE, mask=lo < hi, other=0)
    for start in range(lo, full_hi, PAGE_SIZE):
        next_page = tl.load(table_row + start // PAGE_SIZE + 1, mask=start + PAGE_SIZE < hi,
                            other=0)
        m_i, l_i, acc = _page_block(K_desc, V_desc, page, start, hi, kv_h, q, m_i, l_i, acc,
                                    qk_scale, PAGE_SIZE=PAGE_SIZE, D_BLOCK=D_BLOCK,
                                    MASKED=False)
        page = next_page
    if full_hi < hi:
        m_i, l_i, acc = _page_block(K_desc, V_desc, page, full_hi, hi, kv_h, q, m_i, l_i, acc,
                                    qk_scale, PAGE_SIZE=PAGE_SIZE, D_BLOCK=D_BLOCK,
                                    MASKED=True)
    _write_result(M, L, O, Out, m_i, l_i, acc, b, heads, real, split, offs_d, s_outb, s_outh,
                  H_KV, D=D, D_BLOCK=D_BLOCK, GROUP=GROUP, ONE_PASS=ONE_PASS)
    if FUSED_MERGE:
        _merge_if_last(M, L, O, Out, Arrivals, b, kv_h, H_KV, s_outb, s_outh, D=D,
                       D_BLOCK=D_BLOCK, GROUP=GROUP, S_BLOCK=S_BLOCK)


@triton.jit
def _merge_if_last(M, L, O, Out, Arrivals, b, kv_h, H_KV, s_outb, s_outh,
                   D: tl.constexpr, D_BLOCK: tl.constexpr, GROUP: tl.constexpr,
                   S_BLOCK: tl.constexpr):
    """Count this split as done; the last of its K/V head's splits merges the group's heads."""
    tl.debug_barrier()  # every thread's share of the state is stored before it is counted
    splits = tl.num_programs(0)
    # acq_rel: the states stored before the count are seen by the program that counts last
    done = tl.atomic_add(Arrivals + b * H_KV + kv_h, 1, sem="acq_rel")
    if done == splits - 1:
        for g in range(GROUP):
            _merge_head(M, L, O, Out, b, kv_h * GROUP + g, H_KV * GROUP, splits, s_outb,
                        s_outh, D=D, D_BLOCK=D_BLOCK, S_BLOCK=S_BLOCK, CACHE=".cg")
        tl.store(Arrivals + b * H_KV + kv_h, 0)  # ready for the next step


@triton.jit
def merge_kernel(M, L, O, Out, s_outb, s_outh, H, S,
                 D: tl.constexpr, D_BLOCK: tl.constexpr, S_BLOCK: tl.constexpr,
                 WAIT_FOR_SPLITS: tl.constexpr = False):
    """Program b * H + h: the merge of the S base-2 states of query head h of sequence b
    (lesson 5's merge over all splits at once), divided by the merged sum. WAIT_FOR_SPLITS:
    launched as a programmatic dependent launch, it may start before the split kernel ends,
    so it first waits for that grid to finish and its stores to be seen."""
    bh = tl.program_id(0)
    if WAIT_FOR_SPLITS:
        tl.extra.cuda.gdc_wait()
    _merge_head(M, L, O, Out, bh // H, bh % H, H, S, s_outb, s_outh, D=D, D_BLOCK=D_BLOCK,
                S_BLOCK=S_BLOCK, CACHE="")


@triton.jit
def _merge_head(M, L, O, Out, b, h, H, S, s_outb, s_outh,
                D: tl.constexpr, D_BLOCK: tl.constexpr, S_BLOCK: tl.constexpr,
                CACHE: tl.constexpr):
    """Out[b, h] from the S states of head h of sequence b, loaded with cache modifier CACHE
    (".cg" for states other programs of the same launch stored: from L2, never from a stale
    L1 line)."""
    bh = b * H + h
    splits = tl.arange(0, S_BLOCK)
    real = splits < S
    offs_d = tl.arange(0, D_BLOCK)
    state = bh * S + splits
    m_s = tl.load(M + state, mask=real, other=float("-inf"), cache_modifier=CACHE)
    l_s = tl.load(L + state, mask=real, other=0.0, cache_modifier=CACHE)
    o_s = tl.load(O + state[:, None] * D_BLOCK + offs_d[None, :], mask=real[:, None], other=0.0,
                  cache_modifier=CACHE)
    m = tl.max(m_s, 0)
    weight = tl.exp2(m_s - tl.where(m == float("-inf"), 0.0, m))  # all empty: 0, not NaN
    l = tl.sum(weight * l_s, 0)
    o = tl.sum(weight[:, None] * o_s, 0) / tl.where(l == 0.0, 1.0, l)
    tl.store(Out + b * s_outb + h * s_outh + offs_d, o.to(Out.dtype.element_ty),
             mask=offs_d < D)


# ---------------------------------------------------------------- host side


def _check_inputs(q, k_pages, v_pages, page_table, lengths, max_len) -> None:
    """Clear errors for the mistakes a caller makes with a paged decoding step."""
    runtime.check_tensors(q, k_pages, v_pages, page_table, lengths,
                          names=("q", "k_pages", "v_pages", "page_table", "lengths"), dot=True)
    check_paged_cache(q, k_pages, v_pages, page_table, lengths)
    D = q.shape[2]
    _require(1 <= D <= MAX_DECODE_HEAD_DIM,
             f"head dim {D} is not supported: the decoding kernel takes 1 to "
             f"{MAX_DECODE_HEAD_DIM}.")
    _require(v_pages.stride() == k_pages.stride(), "v_pages must have the strides of k_pages.")
    _require(k_pages.dtype == q.dtype == v_pages.dtype,
             f"q, k_pages and v_pages must share one dtype; got {q.dtype}, {k_pages.dtype}, "
             f"{v_pages.dtype}.")
    room = page_table.shape[1] * k_pages.shape[1]
    _require(isinstance(max_len, int) and 0 <= max_len <= room,
             f"max_len={max_len!r} must be an int from 0 to the {room} keys the page table "
             "can address.")


class DecodePlan:
    """One decoding step for a batch shape, planned once and run at every step.

    The plan checks q (B, H, D), the pools k_pages, v_pages (num_pages, PAGE_SIZE, H_KV, D),
    the page table (B, max_pages) int32 and lengths (B,) int32, chooses the splits for
    `max_len` (the longest a sequence may be; default: all the table addresses) on `num_sms`
    SMs (default: the GPU's), and allocates the states and the output. The pools may have
    any strides with a contiguous last axis: a pool stored (num_pages, H_KV, PAGE_SIZE, D),
    each K/V head's rows of a page together, is passed as its view .transpose(1, 2)
    (`heads_together`).
    `kv_loads` picks how the kernel reads K and V (KV_LOADS): "rows" (the default: each
    block's rows through their pages' pointers), "pages ahead" (the same, each block's page
    numbers loaded a block ahead) or "tma" (a page per block through tensor descriptors, the
    page numbers a page ahead: config's BLOCK_N must be the page size).
    `config`: (BLOCK_N, num_warps, num_stages), or with a fourth entry maxnreg (an experiment,
    compiled only: the split kernel's registers per thread capped).
    `no_softmax` (kv_loads "rows" only) is a bound to time, never a result: the kernel's loads
    and matmuls without its softmax (paged_decode_kernel's NO_SOFTMAX; the output is wrong).
    `dependent_launch` (compiled on Hopper or newer; no effect in the interpreter): with more
    than one split and no fused merge, the merge kernel is a programmatic dependent launch
    that starts while the split kernel runs and waits for its results, so the second launch's
    latency overlaps the first kernel. Measured (09-decode-gap.csv, H100): 1.00-1.04x the
    plain step on Triton 3.9, but 0.95-1.02x on 3.6, whose d = 128 split kernel holds 126
    registers (4 blocks per SM) and leaves the merge no room; with config (64, 4, 2, 96) there
    (5 blocks) it ran 1.00-1.02x (09-decode-cap.csv). Off by default: the config that gives
    it room differs between Triton versions.
    `fused_merge`: with more than one split, the last split of each K/V head to finish merges
    its heads' states (FUSED_MERGE), and no merge kernel runs. Measured slower than the two
    launches wherever the group has several heads (09-decode-gap.csv: that one program merges
    them one after another, and at d = 128 the merge's registers cost a block per SM); kept
    as the record of what was tried.
    `run()` launches and returns the output (B, H, D): `launch_splits()`, then `launch_merge()`
    when there is more than one split and the merge is not fused. The tensors are bound: a
    next step writes its q, pages, table and lengths into them in place (as replaying a CUDA
    graph needs anyway); no length may pass max_len (checked once, here)."""

    def __init__(self, q, k_pages, v_pages, page_table, lengths, max_len: int | None = None,
                 num_sms: int | None = None, sm_scale: float | None = None,
                 config: tuple[int, ...] | None = None, splits: int | None = None,
                 kv_loads: str = "rows", no_softmax: bool = False, fused_merge: bool = False,
                 dependent_launch: bool = False):
        page_size = k_pages.shape[1] if k_pages.dim() == 4 else 0
        max_len = page_table.shape[1] * page_size if max_len is None else max_len
        _check_inputs(q, k_pages, v_pages, page_table, lengths, max_len)
        longest, shortest = (int(lengths.max()), int(lengths.min())) if len(lengths) else (0, 0)
        _require(0 <= shortest and longest <= max_len,
                 f"lengths must lie in 0..max_len={max_len}; the longest is {longest}.")
        B, H, D = q.shape
        H_KV = k_pages.shape[2]
        _require(kv_loads in KV_LOADS, f"kv_loads={kv_loads!r} is not one of {KV_LOADS}.")
        _require(not no_softmax or kv_loads != "tma",
                 'no_softmax is a bound of the "rows" and "pages ahead" kernel only.')
        self.kv_loads = kv_loads
        if kv_loads == "tma":
            config = config or decode_tma_config(page_size)
            _check_tma(k_pages, v_pages, config[0])
        config = tuple(config or decode_config(D))
        _require(len(config) in (3, 4), "config must be (BLOCK_N, num_warps, num_stages) or "
                 f"(..., maxnreg); got {config!r}.")
        self.block_n, self.num_warps, self.num_stages = config[:3]
        self.split_options = host.launch_options(*config[1:])  # the split kernel's
        runtime.check_block_size("BLOCK_N", self.block_n)
        if num_sms is None:
            num_sms = (torch.cuda.get_device_properties(q.device).multi_processor_count
                       if q.is_cuda else 1)
        self.splits = splits or decode_splits(B, H_KV, max_len, num_sms, self.block_n)
        blocks = max(1, cdiv(max_len, self.block_n))
        self.blocks_per_split = cdiv(blocks, self.splits)
        self.splits = cdiv(blocks, self.blocks_per_split)  # no split left without a block
        self.d_block = max(MIN_DOT_ROWS, 1 << max(0, D - 1).bit_length())
        self.tensors = (q, k_pages, v_pages, page_table, lengths)
        self.out = torch.empty_like(q)
        one_pass = self.splits == 1
        shape = (B, H, self.splits) if not one_pass else (1, 1, 1)  # unused when one pass
        self.m = torch.empty(shape, device=q.device, dtype=torch.float32)
        self.l = torch.empty_like(self.m)
        self.o = torch.empty((*shape, self.d_block), device=q.device, dtype=torch.float32)
        self.grid = (self.splits, B * H_KV)
        self.s_block = max(2, 1 << max(0, self.splits - 1).bit_length())
        self.fused_merge = fused_merge and not one_pass
        self.arrivals = torch.zeros(B * H_KV if self.fused_merge else 1, device=q.device,
                                    dtype=torch.int32)  # the fused merge's counts, kept at 0
        qk_scale = _scale(D, sm_scale) * LOG2E
        self.constants = dict(D=D, D_BLOCK=self.d_block, GROUP=H // H_KV,
                              ROWS=group_rows(H // H_KV), PAGE_SIZE=page_size,
                              ONE_PASS=one_pass)
        if self.fused_merge:
            self.constants.update(FUSED_MERGE=True, S_BLOCK=self.s_block)
        self.dependent_launch = dependent_launch and not one_pass and not self.fused_merge
        if self.dependent_launch and not runtime.current().interpreter:
            _require(ladder.dependent_launch_supported(),
                     "dependent_launch needs programmatic dependent launch: a Hopper or newer "
                     "GPU and a Triton with tl.extra.cuda.gdc_wait; leave it off here.")
            self.constants["LAUNCH_MERGE_EARLY"] = True
        if kv_loads == "tma":
            self.kernel = paged_decode_tma_kernel
            block = [1, page_size, 1, self.d_block]
            self.tensors = (q, *(TensorDescriptor(x, list(x.shape), list(x.stride()), block)
                                 for x in (k_pages, v_pages)), page_table, lengths)
            self.scalars = (*q.stride()[:2], page_table.stride(0), *self.out.stride()[:2],
                            H_KV, self.blocks_per_split, qk_scale)
        else:
            self.kernel = paged_decode_kernel
            self.scalars = (*q.stride()[:2], *k_pages.stride()[:3], page_table.stride(0),
                            *self.out.stride()[:2], H_KV, self.blocks_per_split, qk_scale)
            self.constants.update(BLOCK_N=self.block_n, PAGES_AHEAD=kv_loads == "pages ahead")
            if no_softmax:
                self.constants["NO_SOFTMAX"] = True
        self.merge_grid = (B * H,)

    def run(self) -> torch.Tensor:
        self.launch_splits()
        if self.splits > 1 and not self.fused_merge:
            self.launch_merge()
        return self.out

    def launch_splits(self) -> None:
        """The split kernel: each split's state, or with one split or a fused merge the output
        itself."""
        self.kernel[self.grid](*self.tensors, self.m, self.l, self.o, self.out, self.arrivals,
                               *self.scalars, **self.constants, **self.split_options)

    def launch_merge(self) -> None:
        """The merge of the splits' states into the output (more than one split only)."""
        _require(self.splits > 1, "this plan has one split: its split kernel writes the "
                 "output, and there are no states to merge.")
        _require(not self.fused_merge, "this plan fuses the merge into its split kernel "
                 "(fused_merge=True): launch_splits() writes the output.")
        early = self.constants.get("LAUNCH_MERGE_EARLY", False)
        merge_kernel[self.merge_grid](self.m, self.l, self.o, self.out, *self.out.stride()[:2],
                                      self.out.shape[1], self.splits, D=self.constants["D"],
                                      D_BLOCK=self.d_block, S_BLOCK=self.s_block,
                                      WAIT_FOR_SPLITS=early, num_warps=4, launch_pdl=early)


def heads_together(pages: torch.Tensor) -> torch.Tensor:
    """A copy of a (num_pages, PAGE_SIZE, H_KV, D) pool stored with each K/V head's rows of a
    page together, (num_pages, H_KV, PAGE_SIZE, D) in memory, seen with the axes the decoding
    step takes."""
    return pages.transpose(1, 2).contiguous().transpose(1, 2)


def paged_decode(q, k_pages, v_pages, page_table, lengths, max_len: int | None = None,
                 sm_scale: float | None = None, num_sms: int | None = None) -> torch.Tensor:
    """One decoding step (plan and run at once): the attention output (B, H, D) of each
    sequence's new token over its first lengths[b] keys in the paged cache."""
    return DecodePlan(q, k_pages, v_pages, page_table, lengths, max_len, num_sms,
                      sm_scale).run()


# ---------------------------------------------------------------- the read-only ceiling


@triton.jit
def read_only_kernel(X, Partial, n, BLOCK: tl.constexpr):
    """Program p sums the int32 words p * BLOCK + i * grid * BLOCK of X (n words) and
    writes that one number: every byte of X is read once, almost nothing is written (the sum
    is stored so that the compiler keeps the loads)."""
    pid = tl.program_id(0)
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=tl.int32)
    for _ in range(tl.cdiv(n - pid.to(tl.int64) * BLOCK, step)):
        total += tl.load(X + offs, mask=offs < n, other=0)
        offs += step
    tl.store(Partial + pid, tl.sum(total, 0))


def read_only(buffer: torch.Tensor, programs: int, block: int, num_warps: int) -> torch.Tensor:
    """Launch read_only_kernel over the bytes of `buffer` (a multiple of 4 bytes) with
    `programs` programs of `block` words; returns their partial sums (int32, wrapping)."""
    words = buffer.view(-1).view(torch.int32)
    partial = torch.empty(programs, dtype=torch.int32, device=buffer.device)
    read_only_kernel[(programs,)](words, partial, words.numel(), BLOCK=block,
                                  num_warps=num_warps)
    return partial


@triton.jit
def paged_read_kernel(X, Pages, Partial, pages_per_program,  # pool, page order, output
                      stride_page, stride_row, stride_head,  # strides of X, in int32 words
                      PAGE: tl.constexpr, WORDS: tl.constexpr):  # rows per page, row words
    """Program (p, h) sums head h's rows of the pages Pages[p * pages_per_program + i], as a
    decoding program reads its K/V head's keys through a page table, and writes that one
    number. The strides say where a head's rows lie: side by side with the other heads' (the
    pool as decoding stores it) or each head's rows together."""
    program = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)
    rows = tl.arange(0, PAGE)
    words = tl.arange(0, WORDS)
    total = tl.zeros([PAGE, WORDS], dtype=tl.int32)
    for i in range(pages_per_program):
        page = tl.load(Pages + program * pages_per_program + i).to(tl.int64)
        total += tl.load(X + page * stride_page + h * stride_head
                         + rows[:, None] * stride_row + words[None, :])
    tl.store(Partial + program * tl.num_programs(1) + h, tl.sum(tl.sum(total, 1), 0))


def paged_read(pool: torch.Tensor, pages: torch.Tensor, programs: int,
               heads_together: bool) -> torch.Tensor:
    """Launch paged_read_kernel over a pool of (num_pages, page_size, heads, d) rows
    (heads_together=False: the decoding layout) or (num_pages, heads, page_size, d)
    (True), reading the pages in the order of `pages` (int32), `programs` programs per head.
    Returns (programs, heads) partial sums of int32 words (wrapping)."""
    words = pool.view(torch.int32)  # the last dim, d values, as d * size / 4 words
    if heads_together:
        num_pages, heads, page_size, row = words.shape
        stride_page, stride_head, stride_row = words.stride()[:3]
    else:
        num_pages, page_size, heads, row = words.shape
        stride_page, stride_row, stride_head = words.stride()[:3]
    _require(pages.numel() % programs == 0,
             f"{pages.numel()} pages do not split evenly over {programs} programs.")
    partial = torch.empty(programs, heads, dtype=torch.int32, device=pool.device)
    paged_read_kernel[(programs, heads)](words, pages, partial, pages.numel() // programs,
                                         stride_page, stride_row, stride_head,
                                         PAGE=page_size, WORDS=row)
    return partial
