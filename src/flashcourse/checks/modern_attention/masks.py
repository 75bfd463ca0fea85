"""Lesson 9's mask exercises: the block map of a mask (numpy) and the block-sparse attention
kernel that walks only the listed key blocks. Known mistakes of the kernel are named by a
float64 run of its block order with the mistake switched on (`sparse_model`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ... import runtime
from ...i18n import N_, _
from ...kernels import modern_attention as ma
from .. import buffers, guards, registry
from .common import (
    NEG_INF,
    SECTION_MASKS,
    SECTION_SPARSE,
    MaskCase,
    attention_inputs,
    device,
    fenced,
    launch,
    named,
    passed,
    place,
    require_callable,
    shown,
    tolerance,
)

# ---------------------------------------------------------------- 1. the block map (numpy)


def _random_mask(n_q: int, n_k: int, seed: int) -> np.ndarray:
    """A mask with whole visible and whole hidden regions and scattered pairs."""
    rng = np.random.default_rng(registry.case_seed(seed))
    mask = rng.random((n_q, n_k)) < 0.3
    mask[: n_q // 2, : n_k // 2] = True
    mask[n_q // 2:, n_k // 2:] = False
    return mask


# (mask, block_m, block_n): the mask is a MaskCase or (n_q, n_k, seed) of a random mask
MAP_CASES = [
    (MaskCase("causal", 64), 16, 16),
    (MaskCase("full", 45), 16, 16),  # the cut-off last key block is visible but not FULL
    (MaskCase("causal", 50), 16, 16),  # 50 keys: the last key block is cut off
    (MaskCase("sliding", 64, window=10), 16, 8),
    (MaskCase("causal-sliding", 70, window=20), 32, 16),
    (MaskCase("causal-documents", 48, docs=(16, 24)), 16, 16),
    (MaskCase("documents", 45, docs=(10, 20, 10)), 8, 16),  # padding rows at the end
    ((40, 70, 3), 16, 32),  # a random mask, 40 queries and 70 keys
    ((33, 33, 4), 16, 16),
]
MAP_HIDDEN = [
    (MaskCase("causal", 33), 32, 16),
    (MaskCase("strictly-past", 40, window=6), 8, 8),
    ((17, 100, 103), 16, 64),
]


def _map_mask(spec) -> tuple[np.ndarray, str]:
    if isinstance(spec, MaskCase):
        return spec.dense(), f"{spec.describe()}, N={spec.n}"
    n_q, n_k, seed = spec
    return _random_mask(n_q, n_k, seed), _("a random {n_q} x {n_k} mask, seed={seed}").format(
                                           n_q=n_q, n_k=n_k, seed=seed)


def map_candidate(mask: np.ndarray, block_m: int, block_n: int, mistake: str) -> np.ndarray:
    """What a block map with a known `mistake` returns."""
    n_q, n_k = mask.shape
    if mistake == "keys_not_padded":  # a cut-off key block judged on its real keys only
        kinds = ma.classify_blocks(mask, block_m, block_n)
        last = n_k - (ma.cdiv(n_k, block_n) - 1) * block_n
        for i in range(kinds.shape[0]):
            tail = mask[i * block_m:(i + 1) * block_m, n_k - last:]
            if tail.all():
                kinds[i, -1] = ma.FULL
        return kinds
    if mistake == "rows_padded":  # rows past the end counted as hidden
        padded = np.zeros((ma.cdiv(n_q, block_m) * block_m, n_k), dtype=bool)
        padded[:n_q] = mask
        return ma.classify_blocks(padded, block_m, block_n)
    if mistake == "transposed":  # the tile sliced with the block sizes swapped
        kinds = ma.classify_blocks(mask, block_m, block_n)
        padded = np.zeros((n_q, kinds.shape[1] * block_n), dtype=bool)
        padded[:, :n_k] = mask
        for i in range(kinds.shape[0]):
            for j in range(kinds.shape[1]):
                tile = padded[i * block_n:(i + 1) * block_n, j * block_m:(j + 1) * block_m]
                kinds[i, j] = ma.FULL if tile.all() else ma.PARTIAL if tile.any() else ma.EMPTY
        return kinds
    if mistake == "any_is_full":
        kinds = ma.classify_blocks(mask, block_m, block_n)
        return np.where(kinds == ma.PARTIAL, ma.FULL, kinds)
    if mistake == "full_empty_swapped":
        kinds = ma.classify_blocks(mask, block_m, block_n)
        return np.where(kinds == ma.FULL, ma.EMPTY, np.where(kinds == ma.EMPTY, ma.FULL, kinds))
    raise KeyError(mistake)


MAP_MISTAKES = {
    "keys_not_padded": (
        N_("the last key block is cut off at n_k, and it was judged on its real keys only: it "
           "comes out FULL where its keys past the end are not visible. The kernel skips the mask "
           "on a FULL block, so it would use those keys. Count keys past the end as hidden "
           "({section_masks}).")),
    "rows_padded": (
        N_("rows past the last query were counted as hidden rows, so the last query block is "
           "never FULL. That map is safe (FlexAttention's BlockMask does the same) but does more "
           "masking than needed: those rows do not exist (the kernel never stores them), and this "
           "exercise judges a tile on its real rows ({section_masks}).")),
    "transposed": (
        N_("block_m and block_n are swapped: query blocks are block_m rows, key blocks block_n "
           "columns.")),
    "any_is_full": (
        N_("a tile with some visible pairs is marked FULL. FULL means every pair of the tile is "
           "visible (the kernel then evaluates no mask); some but not all is PARTIAL.")),
    "full_empty_swapped": (
        N_("FULL and EMPTY are swapped: EMPTY = {empty} (no visible pair), PARTIAL = {partial}, "
           "FULL = {full} (every pair visible).")),
}


def check_block_map(block_map) -> str:
    require_callable(block_map, "modern-attention/block-map", "block_map")
    cases = registry.with_hidden(MAP_CASES, MAP_HIDDEN)
    for number, (spec, block_m, block_n) in enumerate(cases, 1):
        mask, what = _map_mask(spec)
        label = (_("case {number}/{total} ({what}, block_m={block_m}, block_n={block_n})").format(
                   number=number, total=len(cases), what=what, block_m=block_m, block_n=block_n))
        original = mask.copy()
        try:
            got = registry.run_student(block_map, label, mask, block_m, block_n)
        except registry.WrongAnswer as err:
            if "broadcast" not in str(err):
                raise
            raise registry.WrongAnswer(
                _("{err}\nHint: the padded mask must be as wide as the key blocks cover, at least "
                  "n_k: round the block counts up (a cut-off last block is still a "
                  "block).").format(err=err)) from None
        if not np.array_equal(mask, original):
            raise registry.WrongAnswer(_("{label}: your function modified the mask in "
                                         "place.").format(label=label))
        expected = ma.classify_blocks(mask, block_m, block_n)
        got_array = registry.to_numpy(got)
        if got_array.shape != expected.shape:
            floor = (mask.shape[0] // block_m, mask.shape[1] // block_n)
            rounded_down = got_array.ndim == 2 and any(
                g == f != e
                for g, f, e in zip(got_array.shape, floor, expected.shape, strict=True))
            hint = (_("a cut-off last block counts as a block: round the block counts up")
                    if rounded_down else
                    _("one row per query block, one column per key block"))
            raise registry.WrongAnswer(_("{label}: the map has shape {shape}, expected "
                                         "{expected}: {hint}.").format(
                label=label, shape=got_array.shape, expected=expected.shape, hint=hint))
        if not np.issubdtype(got_array.dtype, np.integer):
            raise registry.WrongAnswer(_("{label}: return an integer array of EMPTY, PARTIAL and "
                                         "FULL, not {dtype}.").format(label=label,
                                         dtype=got_array.dtype))
        wrong = np.argwhere(got_array != expected)
        if len(wrong):
            i, j = (int(x) for x in wrong[0])
            names = {ma.EMPTY: "EMPTY", ma.PARTIAL: "PARTIAL", ma.FULL: "FULL"}
            message = _("{label}: {count} of {size} tiles are wrong, first (query block {i}, "
                        "key block {j}): you gave {given}, the tile is {kind}.").format(
                label=label, count=len(wrong), size=expected.size, i=i, j=j,
                given=names.get(int(got_array[i, j]), int(got_array[i, j])),
                kind=names[int(expected[i, j])])
            hint = (_("Hint: a tile is EMPTY when no pair of it is visible, FULL when every pair "
                      "is, PARTIAL otherwise ({section_masks}).").format(
                      section_masks=_(SECTION_MASKS)))
            for mistake, why in MAP_MISTAKES.items():
                candidate = map_candidate(mask, block_m, block_n, mistake)
                if candidate.shape == got_array.shape and np.array_equal(candidate, got_array):
                    hint = _("Likely mistake: ") + shown(why, empty=ma.EMPTY,
                                                         partial=ma.PARTIAL, full=ma.FULL)
                    break
            raise registry.WrongAnswer(f"{message}\n{hint}")
    return passed(len(cases), _("classify every tile right"))


# ---------------------------------------------------------------- 2. the sparse kernel


@dataclasses.dataclass(frozen=True)
class SparseCase:
    B: int
    H: int
    mask: MaskCase
    D: int = 16
    dtype: torch.dtype = torch.float32
    seed: int = 0
    large: bool = False
    block_m: int = 16
    block_n: int = 16
    layout: str = "bhnd"

    def label(self, number: int, total: int) -> str:
        extra = _(", scores ~1e3") if self.large else ""
        if self.layout == "bnhd":
            extra += _(", inputs are transposed views of (B, N, H, D) tensors")
        return (_("case {number}/{total} (B={b}, H={h}, N={n}, D={d}, {dtype_name}, {mask}, "
                  "BLOCK_M={block_m}, BLOCK_N={block_n}{extra}, seed={seed})").format(
                  number=number, total=total, b=self.B, h=self.H, n=self.mask.n, d=self.D,
                  dtype_name=guards.dtype_name(self.dtype), mask=self.mask.describe(),
                  block_m=self.block_m, block_n=self.block_n, extra=extra, seed=self.seed))


SPARSE_CASES = [
    SparseCase(1, 2, MaskCase("causal", 40), seed=1),
    SparseCase(2, 1, MaskCase("causal-sliding", 64, window=12), seed=2),  # rows whose first
    # listed blocks hide every key
    SparseCase(1, 2, MaskCase("sliding", 48, window=9), seed=3),
    SparseCase(2, 1, MaskCase("causal-documents", 48, docs=(13, 22)), seed=4),  # 13 padding
    SparseCase(1, 1, MaskCase("documents", 45, docs=(20, 17)), D=32, seed=5),  # keys past N
    SparseCase(1, 2, MaskCase("strictly-past", 36, window=20), seed=6, layout="bnhd"),
    SparseCase(1, 1, MaskCase("sliding", 50, window=9), D=32, seed=7, dtype=torch.float16,
               large=True),
]
SPARSE_HIDDEN = [
    SparseCase(2, 1, MaskCase("causal-sliding", 77, window=30), seed=101, block_m=32,
               block_n=16, dtype=torch.float16),
    SparseCase(1, 1, MaskCase("causal-documents", 33, docs=(1, 7, 20)), seed=102),
    SparseCase(1, 2, MaskCase("full", 20), seed=103),
]


def sparse_model(q, k, v, kinds, docs, left, right, block_m, block_n, sm_scale, *,
                 guard=True, l_guard=True, mask_partial=True, use_full=True, use_partial=True,
                 row0_lists=False, scaled_index=True, swap_window=False, use_docs=True,
                 pad_doc=-1) -> np.ndarray:
    """float64 run of the lesson kernel's order (full blocks, then partial ones), with
    switches that reproduce known mistakes. Returns the output (B, H, N, D) as numpy."""
    q, k, v = (x.double().cpu() for x in (q, k, v))
    B, H, N, D = q.shape
    full_counts, full_index, part_counts, part_index = ma.block_lists(kinds)
    docs = torch.as_tensor(np.asarray(docs), dtype=torch.int64)
    if swap_window:
        left, right = right, left
    out = torch.zeros_like(q)
    scale = sm_scale * ma.LOG2E
    with np.errstate(all="ignore"):
        for i in range(ma.cdiv(N, block_m)):
            rows = torch.arange(i * block_m, min((i + 1) * block_m, N))
            qi = q[:, :, rows]
            m = torch.full(qi.shape[:3], NEG_INF, dtype=torch.float64)
            total = torch.zeros(qi.shape[:3], dtype=torch.float64)
            acc = torch.zeros_like(qi)
            listed = 0 if row0_lists else i
            passes = [(full_counts, full_index, False, use_full),
                      (part_counts, part_index, True, use_partial)]
            for counts, index, masked, used in passes:
                if not used:
                    continue
                for t in range(int(counts[listed])):
                    start = int(index[listed, t]) * (block_n if scaled_index else 1)
                    cols = torch.arange(start, start + block_n)
                    inside = cols < N
                    safe = cols.clamp(max=N - 1)
                    kj = torch.where(inside[:, None], k[:, :, safe], 0.0)
                    vj = torch.where(inside[:, None], v[:, :, safe], 0.0)
                    s = (qi @ kj.transpose(-1, -2)) * scale
                    if masked and mask_partial:
                        c, r = cols[None, :], rows[:, None]
                        keep = (c - r <= right) & (r - c <= left)
                        doc_k = torch.where(inside, docs[safe], pad_doc)
                        if use_docs:
                            keep &= docs[rows][:, None] == doc_k[None, :]
                        keep &= docs[rows][:, None] >= 0
                        s = s.masked_fill(~keep, NEG_INF)
                    m_new = torch.maximum(m, s.amax(-1))
                    shift = torch.where(m_new == NEG_INF, 0.0, m_new) if guard else m_new
                    alpha = torch.exp2(m - shift)
                    p = torch.exp2(s - shift[..., None])
                    total = total * alpha + p.sum(-1)
                    acc = acc * alpha[..., None] + p @ vj
                    m = m_new
            divisor = torch.where(total == 0, 1.0, total) if l_guard else total
            out[:, :, rows] = acc / divisor[..., None]
    return out.numpy()


SPARSE_MISTAKES = [
    (dict(l_guard=False),
     N_("a row with no visible key at all comes out NaN (0 / 0): its output must be 0. Divide by "
        "a running sum that is 1 where it is 0 ({section_sparse}).")),
    (dict(guard=False),
     N_("a row whose first listed blocks hide all its keys turns NaN: its running max is still "
        "-inf there, and exp2(-inf - (-inf)) is NaN. Shift by a safe max, 0 while the running max "
        "is -inf (lesson 5, section 4; {section_sparse}).")),
    (dict(mask_partial=False),
     N_("the mask is not applied in the PARTIAL blocks, so hidden pairs take part in the softmax. "
        "FULL blocks skip the mask; PARTIAL ones must evaluate it ({section_sparse}).")),
    (dict(use_partial=False),
     N_("only the FULL blocks are visited: the PARTIAL blocks (the diagonal, the edges of the "
        "window, the borders of documents) are missing ({section_sparse}).")),
    (dict(use_full=False),
     N_("only the PARTIAL blocks are visited: the FULL blocks are missing ({section_sparse}).")),
    (dict(row0_lists=True),
     N_("every query block walks the key blocks of query block 0: each query block has its own "
        "count and its own row of the index, one row stride apart ({section_sparse}).")),
    (dict(scaled_index=False),
     N_("the index holds key block numbers, not key positions: a listed block number still has to "
        "become the position of the block's first key ({section_sparse}).")),
    (dict(swap_window=True),
     N_("the window's sides are swapped: `left` bounds how far back a query sees, `right` how far "
        "ahead ({section_masks}).")),
    (dict(pad_doc=0),
     N_("keys past N get document 0: the document ids past N must load as an id no query matches, "
        "so that the padding keys (loaded as 0, a score of 0) stay hidden ({section_sparse}).")),
    (dict(use_docs=False),
     N_("the document ids of query and key are not compared: a query may only see keys of its own "
        "document ({section_masks}).")),
]


def _sparse_inputs(case: SparseCase):
    mask = case.mask.dense()
    q, k, v = attention_inputs(case.B, case.H, case.H, case.mask.n, case.D, case.dtype,
                                case.seed, case.large)
    return mask, q, k, v


def check_sparse(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/sparse-kernel")
    cases = registry.with_hidden(SPARSE_CASES, SPARSE_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        mask, q, k, v = _sparse_inputs(case)
        pad = max(case.block_m, case.block_n)
        qp, kp, vp = (place(x, case.layout, pad) for x in (q, k, v))
        kinds = ma.classify_blocks(mask, case.block_m, case.block_n)
        lists = tuple(fenced(x, 0) for x in ma.block_list_tensors(kinds, "cpu"))
        docs = buffers.poisoned(torch.from_numpy(case.mask.doc_ids()).to(device()))
        left, right = case.mask.left_right()
        out = buffers.Canaried(q.shape, case.dtype, device(), pad_rows=pad)
        runtime.check_tensors(qp, kp, vp, names=("q", "k", "v"), dot=True)
        launch(label, ma.launch_sparse, kernel, qp, kp, vp, out.tensor, docs, left, right,
                lists, case.block_m, case.block_n)
        out.verify(label)
        expected = ma.masked_reference(q, k, v, mask).numpy()
        got = out.tensor.detach().cpu().double().numpy()
        atol, rtol = tolerance(case.dtype)
        try:
            registry.compare(got, expected, label, atol=atol, rtol=rtol,
                             tile_rows=case.block_m)
        except registry.WrongAnswer as err:
            candidates = [
                (sparse_model(q, k, v, kinds, case.mask.doc_ids(), left, right, case.block_m,
                              case.block_n, case.D ** -0.5, **switches), shown(hint))
                for switches, hint in SPARSE_MISTAKES]
            hint = named(got, candidates, (
                _("None of the mistakes the grader knows matches this output. Check the loop "
                  "bounds (count), the key block of the i-th entry, the mask of a PARTIAL block "
                  "and the safe max ({section_sparse}); the row block named above is where it "
                  "first goes wrong.").format(section_sparse=_(SECTION_SPARSE))))
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return passed(len(cases), _("match masked attention, rows without a key are 0"))
