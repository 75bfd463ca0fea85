"""Host side of lesson 9 ("Attention as people run it today"): masks, block lists, launchers,
paged caches and float64 references. The kernels themselves are the lesson's exercises.

* masks: `dense_mask` builds the (n_q, n_k) boolean mask of a window (`left`, `right`) and of
  documents packed into one sequence (`docs`); `classify_blocks` is the reference block map
  (`classify_rule` builds it without the dense mask) and `block_lists` turns it into the four
  arrays the sparse kernel walks (FlexAttention's BlockMask keeps the same four).
* launchers: `launch_sparse`, `launch_gqa`, `launch_paged_split`, `launch_merge` pass
  strides and compile-time sizes (every tensor is an argument); `paged_split_decode` runs a
  split kernel and a merge kernel on a paged cache. Any head dim up to 256: a head dim that is
  not a power of two of at least 16 runs zero-padded (host.run_at_kernel_width).
* decoding: `split_count`, `paged_cache` (a cache scattered into pages in a shuffled order,
  with NaN in every unused slot).
* references (float64, on the CPU): `masked_reference`, `decode_reference`, `split_states`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import runtime
from ..models.matmul import cdiv
from ..models.softmax_states import softmax_state
from . import LOG2E, tiles

EMPTY, PARTIAL, FULL = 0, 1, 2  # the kinds of a tile of the block map
UNLIMITED = 1 << 30  # a window side without a limit (fits an int32 kernel argument)
MIN_DOT_ROWS = 16  # tl.dot's smallest tile side on a GPU


# ---------------------------------------------------------------- masks


def dense_mask(n_q: int, n_k: int | None = None, left: int = UNLIMITED,
               right: int = UNLIMITED, docs=None, offset: int = 0) -> np.ndarray:
    """(n_q, n_k) boolean mask. Query i sits at position i + offset; it sees key j when
    i + offset - left <= j <= i + offset + right and both lie in the same document
    (docs[i + offset] == docs[j] >= 0; an id of -1 marks padding: it sees nothing and nobody
    sees it). Causal is right=0; a causal sliding window of w keys is left=w-1, right=0."""
    n_k = n_q if n_k is None else n_k
    pos = np.arange(n_q)[:, None] + offset
    keys = np.arange(n_k)[None, :]
    visible = (keys - pos <= right) & (pos - keys <= left)
    if docs is not None:
        docs = np.asarray(docs)
        doc_q = docs[pos[:, 0]][:, None]
        visible &= (doc_q == docs[None, :n_k]) & (doc_q >= 0)
    return visible


def packed_documents(lengths, padding: int = 0) -> np.ndarray:
    """Document ids of sequences packed one after another (0, 0, 1, 1, 1, ...), then `padding`
    positions of id -1."""
    ids = [np.full(n, i) for i, n in enumerate(lengths)] + [np.full(padding, -1)]
    return np.concatenate(ids).astype(np.int32)


def classify_blocks(mask: np.ndarray, block_m: int, block_n: int) -> np.ndarray:
    """The reference block map: EMPTY, PARTIAL or FULL for every (query block, key block) tile.
    Keys past the end count as not visible (the kernel must mask them); rows past the end do
    not exist (the kernel never stores them)."""
    n_q, n_k = mask.shape
    cols = cdiv(n_k, block_n)
    padded = np.zeros((n_q, cols * block_n), dtype=bool)
    padded[:, :n_k] = mask
    kinds = np.empty((cdiv(n_q, block_m), cols), dtype=np.int8)
    for i in range(kinds.shape[0]):
        rows = padded[i * block_m:(i + 1) * block_m].reshape(-1, cols, block_n)
        seen = rows.sum(axis=(0, 2))
        kinds[i] = np.where(seen == 0, EMPTY, np.where(seen == rows.shape[0] * block_n,
                                                       FULL, PARTIAL))
    return kinds


def classify_rule(n: int, block_m: int, block_n: int, left: int = UNLIMITED,
                  right: int = UNLIMITED, docs=None) -> np.ndarray:
    """classify_blocks of dense_mask(n, n, left, right, docs) without the dense mask (at 32k it
    would take a gigabyte). Without documents, row r sees the interval [r - left, r + right]
    of keys, so a tile is FULL when every row's interval covers it and EMPTY when none meets
    it; with documents, the mask is built one query block at a time."""
    if docs is not None:
        rows = [classify_blocks(dense_mask(min(block_m, n - s), n, left, right, docs, offset=s),
                                block_m, block_n)[0] for s in range(0, n, block_m)]
        return np.stack(rows)
    starts = np.arange(0, n, block_n)  # first key of each key block
    ends = np.minimum(starts + block_n, n) - 1  # its last real key
    cut = starts + block_n > n  # a cut-off block: its missing keys are never visible
    kinds = np.empty((cdiv(n, block_m), len(starts)), dtype=np.int8)
    for i in range(kinds.shape[0]):
        r = np.arange(i * block_m, min((i + 1) * block_m, n))[:, None]
        lo, hi = np.maximum(r - left, 0), np.minimum(r + right, n - 1)  # (rows, 1)
        meets = (lo <= ends) & (hi >= starts) & (lo <= hi)  # (rows, key blocks)
        covers = (lo <= starts) & (hi >= ends)
        kinds[i] = np.where(~meets.any(axis=0), EMPTY,
                            np.where(covers.all(axis=0) & ~cut, FULL, PARTIAL))
    return kinds


def block_lists(kinds) -> tuple[np.ndarray, ...]:
    """The block map as the sparse kernel reads it: for each query block the number of FULL key
    blocks and their indices in increasing order, then the same for PARTIAL ones
    (full_counts, full_index, part_counts, part_index; int32, index rows padded with 0)."""
    kinds = np.asarray(kinds)
    rows, cols = kinds.shape
    lists = []
    for kind in (FULL, PARTIAL):
        counts = (kinds == kind).sum(axis=1).astype(np.int32)
        index = np.zeros((rows, max(1, cols)), dtype=np.int32)
        for i in range(rows):
            found = np.flatnonzero(kinds[i] == kind)
            index[i, :len(found)] = found
        lists += [counts, index]
    return tuple(lists)


def block_list_tensors(kinds, device) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(a).to(device) for a in block_lists(kinds))


def tile_counts(kinds) -> dict:
    """How many tiles of each kind a block map holds."""
    kinds = np.asarray(kinds)
    return {"full": int((kinds == FULL).sum()), "partial": int((kinds == PARTIAL).sum()),
            "empty": int((kinds == EMPTY).sum())}


# ---------------------------------------------------------------- launchers


def _scale(d: int, sm_scale: float | None) -> float:
    return 1.0 / math.sqrt(d) if sm_scale is None else sm_scale


def _where() -> str:
    return "interpreter" if runtime.current().interpreter else "gpu"


def _at_kernel_width(launch, inputs, outputs):
    """host.run_at_kernel_width: imported at launch, because host defines the reference
    kernels, and this module must stay importable before a runtime is chosen."""
    from .host import run_at_kernel_width

    return run_at_kernel_width(launch, inputs, outputs)


def _check_head_dims(names, tensors) -> None:
    """One head dim (the last axis) for every tensor, checked before padding hides a
    mismatch."""
    dims = [x.shape[-1] for x in tensors]
    _require(len(set(dims)) == 1, "the last axis (the head dim) must be the same for "
             + ", ".join(f"{name} ({d})" for name, d in zip(names, dims, strict=True)) + ".")


def sparse_config(d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the sparse kernel on this runtime, for
    head dim d (the entry of the width it runs padded to)."""
    if runtime.current().interpreter:
        return tiles.INTERPRETER
    from .host import kernel_head_dim  # see _at_kernel_width

    return tiles.SPARSE_CONFIGS.get(kernel_head_dim(d), tiles.SPARSE_CONFIGS[64])


def launch_sparse(kernel, q, k, v, out, docs, left, right, lists, block_m, block_n,
                  sm_scale=None, num_warps=4, num_stages=2):
    """How the grader launches your sparse kernel: one program per (query block, batch x head);
    `lists` = block_list_tensors(block map), `docs` an int32 tensor of document ids."""
    runtime.check_block_size("BLOCK_M", block_m)
    runtime.check_block_size("BLOCK_N", block_n)
    _check_head_dims(("q", "k", "v", "out"), (q, k, v, out))
    B, H, N, D = q.shape
    qk_scale = _scale(D, sm_scale) * LOG2E  # of the real head dim, not the padded one
    full_counts, full_index, part_counts, part_index = lists

    def launch(q, k, v, out):
        kernel[(cdiv(N, block_m), B * H)](
            q, k, v, out, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
            H, N, qk_scale, docs, left, right,
            full_counts, full_index, part_counts, part_index, full_index.stride(0),
            D=q.shape[-1], BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps,
            num_stages=num_stages)

    _at_kernel_width(launch, (q, k, v), (out,))


def sparse_attention(kernel, q, k, v, mask, docs=None, left=UNLIMITED, right=UNLIMITED,
                     block_m=None, block_n=None, sm_scale=None):
    """Run a sparse kernel on q, k, v (B, H, N, D); `mask` is the dense mask the window and
    documents describe (used only to build the block map). Returns a new output tensor."""
    runtime.check_tensors(q, k, v, names=("q", "k", "v"), dot=True)
    default_m, default_n, warps, stages = sparse_config(q.shape[-1])
    block_m, block_n = block_m or default_m, block_n or default_n
    N = q.shape[2]
    docs = np.zeros(N, np.int32) if docs is None else np.asarray(docs, np.int32)
    lists = block_list_tensors(classify_blocks(mask, block_m, block_n), q.device)
    out = torch.empty_like(q)
    launch_sparse(kernel, q, k, v, out, torch.from_numpy(docs).to(q.device), left, right,
                  lists, block_m, block_n, sm_scale, num_warps=warps, num_stages=stages)
    return out


def launch_gqa(kernel, q, k, v, out, block_m=16, block_n=16, sm_scale=None, num_warps=4,
               num_stages=2):
    """How the grader launches your GQA kernel: one program per (query block, batch x query
    head); K and V have H_KV heads, H a multiple of H_KV."""
    B, H, N, D = q.shape
    H_KV = k.shape[1]
    if H % H_KV:
        raise runtime.CourseInputError(f"H={H} query heads must be a multiple of the "
                                       f"H_KV={H_KV} key/value heads.")
    _check_head_dims(("q", "k", "v", "out"), (q, k, v, out))
    qk_scale = _scale(D, sm_scale) * LOG2E  # of the real head dim, not the padded one

    def launch(q, k, v, out):
        kernel[(cdiv(N, block_m), B * H)](
            q, k, v, out, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
            H, H_KV, N, qk_scale, D=q.shape[-1], BLOCK_M=block_m, BLOCK_N=block_n,
            num_warps=num_warps, num_stages=num_stages)

    _at_kernel_width(launch, (q, k, v), (out,))


def group_rows(group: int) -> int:
    """Rows of a decode tile: the query heads of one group, padded to a power of two of at
    least 16 (tl.dot's smallest tile on a GPU)."""
    return max(MIN_DOT_ROWS, 1 << max(0, (group - 1).bit_length()))


def split_count(n_max: int, split_size: int) -> int:
    return max(1, cdiv(n_max, split_size))


_require = runtime.require


def check_paged_cache(q, k_pages, v_pages, page_table, lengths) -> None:
    """Clear errors for the mistakes a caller makes with one query per sequence and a paged
    cache: the shapes, the contiguous axes, the heads, the page table and the lengths (the
    split-KV launcher here and the reference decoding step, decode.py)."""
    _require(q.dim() == 3, f"q must be (B, H, D), one new token per sequence; got shape "
             f"{tuple(q.shape)}.")
    B, H, D = q.shape
    for name, pages in (("k_pages", k_pages), ("v_pages", v_pages)):
        _require(pages.dim() == 4 and pages.shape[3] == D,
                 f"{name} must be (num_pages, PAGE_SIZE, H_KV, D) with D = {D}; got shape "
                 f"{tuple(pages.shape)}.")
        _require(pages.stride(3) == 1, f"the last axis of {name} must be contiguous.")
    _require(k_pages.shape == v_pages.shape, "k_pages and v_pages must have the same shape.")
    H_KV = k_pages.shape[2]
    _require(H % H_KV == 0, f"H={H} query heads must be a multiple of the H_KV={H_KV} "
             "key/value heads.")
    _require(q.stride(2) == 1, "the last axis of q must be contiguous.")
    _require(page_table.dtype == torch.int32 and page_table.dim() == 2
             and page_table.shape[0] == B,
             f"page_table must be a (B, max_pages) = ({B}, ...) int32 tensor; got "
             f"{page_table.dtype} of shape {tuple(page_table.shape)}.")
    _require(page_table.stride(1) == 1, "the rows of page_table must be contiguous.")
    _require(lengths.dtype == torch.int32 and tuple(lengths.shape) == (B,),
             f"lengths must be a (B,) = ({B},) int32 tensor; got {lengths.dtype} of shape "
             f"{tuple(lengths.shape)}.")
    runtime.check_block_size("PAGE_SIZE", k_pages.shape[1])


def _check_decode_inputs(q, k_pages, v_pages, page_table, lengths, m, l, o, split_size,
                         block_n) -> None:
    """Clear errors for the mistakes a caller makes with the paged split-KV launcher."""
    check_paged_cache(q, k_pages, v_pages, page_table, lengths)
    B, H, D = q.shape
    runtime.check_block_size("BLOCK_N", block_n)
    _require(split_size >= block_n and split_size % block_n == 0,
             f"split_size={split_size} must be a positive multiple of BLOCK_N={block_n}.")
    S = m.shape[-1]
    _require(tuple(m.shape) == (B, H, S) and tuple(l.shape) == (B, H, S)
             and tuple(o.shape) == (B, H, S, D),
             f"the states must be m, l (B, H, S) and o (B, H, S, D) with B={B}, H={H}, "
             f"D={D}; got {tuple(m.shape)}, {tuple(l.shape)}, {tuple(o.shape)}.")
    _require(m.stride() == l.stride(), "m and l must share their strides.")
    _require(o.stride(3) == 1, "the last axis of o must be contiguous.")
    _require(all(x.dtype == torch.float32 for x in (m, l, o)), "m, l and o must be float32.")


def launch_paged_split(kernel, q, k_pages, v_pages, page_table, lengths, m, l, o, split_size,
                       block_n, sm_scale=None, num_warps=4, num_stages=2):
    """How the grader launches your split kernel: grid (S, B * H_KV), S = m.shape[-1] splits.
    q (B, H, D); pages (num_pages, PAGE_SIZE, H_KV, D); page_table (B, max_pages) int32;
    lengths (B,) int32; states m, l (B, H, S) and o (B, H, S, D), float32."""
    _check_decode_inputs(q, k_pages, v_pages, page_table, lengths, m, l, o, split_size,
                         block_n)
    B, H, D = q.shape
    page_size, H_KV = k_pages.shape[1], k_pages.shape[2]
    scale = _scale(D, sm_scale)  # of the real head dim, not the padded one

    def launch(q, k_pages, v_pages, o):  # padded, this copies the whole pool
        kernel[(m.shape[-1], B * H_KV)](
            q, k_pages, v_pages, page_table, lengths, m, l, o,
            q.stride(0), q.stride(1), *k_pages.stride()[:3], *v_pages.stride()[:3],
            page_table.stride(0), *m.stride(), *o.stride()[:3],
            H, H_KV, scale, D=q.shape[-1], GROUP=group_rows(H // H_KV), PAGE_SIZE=page_size,
            SPLIT_SIZE=split_size, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages)

    _at_kernel_width(launch, (q, k_pages, v_pages), (o,))


def launch_merge(kernel, m, l, o, out, num_warps=4):
    """How the grader launches your merge kernel: one program per (batch, head); m, l
    (B, H, S), o (B, H, S, D), out (B, H, D)."""
    B, H, S = m.shape
    _require(m.stride() == l.stride(), "m and l must share their strides.")
    _require(tuple(o.shape[:3]) == (B, H, S) and tuple(out.shape) == (B, H, o.shape[-1]),
             f"o must be (B, H, S, D) and out (B, H, D) with B={B}, H={H}, S={S}; got "
             f"{tuple(o.shape)} and {tuple(out.shape)}.")

    def launch(o, out):
        kernel[(B * H,)](m, l, o, out, *m.stride(), *o.stride()[:3], out.stride(0),
                         out.stride(1), H, S, D=o.shape[-1],
                         S_BLOCK=max(2, 1 << max(0, (S - 1).bit_length())), num_warps=num_warps)

    _at_kernel_width(launch, (o,), (out,))


def paged_split_decode(split_kernel, merge_kernel, q, k_pages, v_pages, page_table, lengths,
                       split_size, block_n=None, sm_scale=None, max_len=None):
    """Decode one token per sequence from a paged cache: your split kernel writes every
    split's state, your merge kernel combines them. `max_len`: the longest a sequence may be
    (default: all the table can address), which sets the number of splits. Returns the
    output (B, H, D)."""
    block_n = block_n or tiles.DECODE_BLOCK_N[_where()]
    B, H, D = q.shape
    splits = split_count(max_len or page_table.shape[1] * k_pages.shape[1], split_size)
    m = torch.empty(B, H, splits, device=q.device, dtype=torch.float32)
    l = torch.empty_like(m)
    o = torch.empty(B, H, splits, D, device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    launch_paged_split(split_kernel, q, k_pages, v_pages, page_table, lengths, m, l, o,
                       split_size, block_n, sm_scale)
    launch_merge(merge_kernel, m, l, o, out)
    return out


# ---------------------------------------------------------------- paged caches


def paged_cache(k, v, lengths, page_size: int, seed: int = 0, spare_pages: int = 2,
                spare_columns: int = 3):
    """Scatter a contiguous cache k, v (B, H_KV, N_max, D) into pages (num_pages, page_size,
    H_KV, D) taken in a shuffled order, as an allocator that has served many requests hands
    them out. Returns (k_pages, v_pages, page_table, nan_page): every unused slot and the
    spare pages hold NaN; the table has `spare_columns` extra columns (its row stride is not
    the number of pages a sequence may use), and every unused entry names page `nan_page`."""
    B, H_KV, N_max, D = k.shape
    used = [cdiv(int(n), page_size) for n in lengths]
    total = sum(used) + max(1, spare_pages)
    order = np.random.default_rng(seed).permutation(total)
    nan_page = int(order[-1])
    k_pages = torch.full((total, page_size, H_KV, D), float("nan"), dtype=k.dtype)
    v_pages = torch.full_like(k_pages, float("nan"))
    table = torch.full((B, max(1, cdiv(N_max, page_size)) + spare_columns), nan_page,
                       dtype=torch.int32)
    taken = 0
    for b in range(B):
        for j in range(used[b]):
            page = int(order[taken])
            taken += 1
            table[b, j] = page
            lo, hi = j * page_size, min((j + 1) * page_size, int(lengths[b]))
            k_pages[page, :hi - lo] = k[b, :, lo:hi].transpose(0, 1)
            v_pages[page, :hi - lo] = v[b, :, lo:hi].transpose(0, 1)
    return k_pages, v_pages, table, nan_page


# ---------------------------------------------------------------- references (float64)


def _masked_scores(q, k, mask, sm_scale) -> torch.Tensor:
    """sm_scale q k^T in float64, -inf where the boolean mask hides a pair."""
    s = (q.double() @ k.double().transpose(-1, -2)) * _scale(q.shape[-1], sm_scale)
    return s.masked_fill(~torch.as_tensor(np.asarray(mask)), float("-inf"))


def masked_reference(q, k, v, mask, sm_scale=None) -> torch.Tensor:
    """softmax(sm_scale q k^T + mask) v in float64 with an explicit boolean mask (N, N) or
    (B, H, N, N); a row with no visible key gives 0 (PyTorch's SDPA does the same)."""
    s = _masked_scores(q, k, mask, sm_scale)
    return torch.softmax(s, -1).nan_to_num(0.0) @ v.double()


def masked_lse(q, k, mask, sm_scale=None) -> torch.Tensor:
    """The float64 natural-log logsumexp of each row's visible scaled scores (-inf for a row
    that sees no key): what a forward that keeps its LSE must store."""
    return _masked_scores(q, k, mask, sm_scale).logsumexp(-1)


def repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """(B, H_KV, ...) -> (B, H_KV * group, ...): query head h reads K/V head h // group."""
    return x.repeat_interleave(group, dim=1)


def gqa_reference(q, k, v, sm_scale=None) -> torch.Tensor:
    """float64 attention with grouped K/V heads: SDPA's enable_gqa (torch >= 2.5), else the
    K/V heads repeated explicitly (the same numbers)."""
    q64, k64, v64 = (x.double().cpu() for x in (q, k, v))
    try:
        return torch.nn.functional.scaled_dot_product_attention(
            q64, k64, v64, scale=_scale(q.shape[-1], sm_scale), enable_gqa=True)
    except TypeError:
        group = q.shape[1] // k.shape[1]
        return masked_reference(q64, repeat_kv(k64, group), repeat_kv(v64, group),
                                np.ones((q.shape[2], k.shape[2]), bool), sm_scale)


def decode_reference(q, k, v, lengths, sm_scale=None, keep_nan: bool = False) -> torch.Tensor:
    """float64 output of one query token per sequence over its first lengths[b] keys;
    q (B, H, D), k, v (B, H_KV, N_max, D); a sequence of length 0 gives 0. Slots past a
    length are ignored (they may hold NaN); keep_nan: a NaN key inside a length gives NaN."""
    B, H, D = q.shape
    group = H // k.shape[1]
    n_max = k.shape[2]
    visible = torch.arange(n_max)[None, :] < torch.as_tensor(lengths).cpu()[:, None]  # (B, N)
    mask = visible[:, None, None, :].expand(B, H, 1, n_max).numpy()
    unused = ~visible[:, None, :, None]  # (B, 1, N, 1): slots past each length
    k64 = repeat_kv(k.double().cpu().masked_fill(unused, 0.0), group)
    v64 = repeat_kv(v.double().cpu().masked_fill(unused, 0.0), group)
    if not keep_nan:
        k64, v64 = torch.nan_to_num(k64), torch.nan_to_num(v64)
    return masked_reference(q.double().cpu()[:, :, None], k64, v64, mask, sm_scale)[:, :, 0]


def split_states(q, k, v, lengths, split_size: int, sm_scale=None, head_of=None,
                 start_of=None):
    """float64 partial states of split-KV decoding: m, l (B, H, S) and o (B, H, S, D) of the
    keys [s * split_size, min((s + 1) * split_size, length)) of each split s; an empty split
    has the empty state (-inf, 0, 0). head_of(h): the K/V head of query head h (default
    h // group); start_of(s): the first key of split s (default s * split_size)."""
    B, H, D = q.shape
    H_KV, n_max = k.shape[1], k.shape[2]
    group = H // H_KV
    head_of = head_of or (lambda h: h // group)
    start_of = start_of or (lambda s: s * split_size)
    scale = _scale(D, sm_scale)
    splits = split_count(n_max, split_size)
    m = np.full((B, H, splits), -np.inf)
    l = np.zeros((B, H, splits))
    o = np.zeros((B, H, splits, D))
    q64, k64, v64 = (x.double().cpu().numpy() for x in (q, k, v))
    for b in range(B):
        n = int(lengths[b])
        for h in range(H):
            kv = head_of(h)
            for s in range(splits):
                lo = start_of(s)
                hi = min(lo + split_size, n)
                if lo >= hi:
                    continue
                scores = (k64[b, kv, lo:hi] @ q64[b, h]) * scale
                m[b, h, s], l[b, h, s], o[b, h, s] = (
                    a[0] for a in softmax_state(scores[None], v64[b, kv, lo:hi]))
    return m, l, o
