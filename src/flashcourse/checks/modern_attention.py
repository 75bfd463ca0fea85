"""Checks of lesson 8, "Attention as people run it today".

Six code exercises: the block map of a mask (numpy), the block-sparse attention kernel that
walks only the listed key blocks, the head arithmetic of grouped-query attention, the split-KV
decoding kernel that writes partial softmax states, the kernel that merges them, and decoding
through the page table of a paged KV cache. The three self-check questions and five veto
misconceptions are data: checks/self_checks/08-modern-attention.toml.

Every kernel is launched by the grader (`kernels.modern_attention.launch_*`), with inputs inside
NaN padding and outputs inside canaries. Known mistakes are named by computing, in float64, what
the kernel would give with that mistake and comparing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from .. import runtime
from ..kernels import modern_attention as ma
from ..softmax_states import merge_all, normalised, safe_max
from . import buffers, guards, registry

LESSON = registry.lesson("modern-attention", "Lesson 8: Attention as people run it today",
                         pass_line=8)

NEG_INF = float("-inf")
SECTION_MASKS = 'section 1 ("Masks described block by block")'
SECTION_SPARSE = 'section 2 ("A kernel that skips empty blocks")'
SECTION_GQA = 'section 3 ("Grouped-query attention")'
SECTION_SPLIT = 'section 4 ("Decoding: one query against a long cache")'
SECTION_MERGE = 'section 5 ("Merging the splits")'
SECTION_PAGED = 'section 6 ("A paged KV cache")'


def _device() -> str:
    return runtime.current().device


def _require_callable(answer, exercise_id: str, name: str) -> None:
    if not callable(answer):
        raise registry.WrongAnswer(f"{exercise_id}: pass the function itself: "
                                   f"check(\"{exercise_id}\", {name}).")


def _passed(count: int, what: str) -> str:
    return f"{count} cases {what}{registry.hidden_note()}"


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return guards.dot_tolerance(guards.ATTENTION_TOLERANCES, dtype)


def _launch(label: str, launcher, *args, **kwargs) -> None:
    """Run a launcher on the student's kernel; every tensor argument is named to the record."""
    with np.errstate(all="ignore"):  # the interpreter computes with numpy: no warning noise
        guards.guarded(label, lambda: launcher(*args, **kwargs),
                       tensors=guards.tensors_in(args, kwargs))


def _close(actual: np.ndarray, candidate: np.ndarray, tol: float = 2e-3) -> bool:
    if actual.shape != candidate.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(actual, candidate, rtol=tol, atol=tol, equal_nan=True))


def _named(output: np.ndarray, candidates, fallback: str, tol: float = 2e-3) -> str:
    """'Likely mistake: ...' for the first candidate output that matches, else `fallback`."""
    for candidate, hint in candidates:
        if _close(output, np.asarray(candidate, dtype=np.float64), tol):
            return "Likely mistake: " + hint
    return fallback


# ---------------------------------------------------------------- masks of the cases


@dataclasses.dataclass(frozen=True)
class MaskCase:
    """A mask of the lesson's family: a window (left, right) and packed documents."""

    kind: str  # "causal", "sliding", "causal-sliding", "documents", "causal-documents", ...
    n: int
    window: int = 0
    docs: tuple = ()  # document lengths; the rest of the sequence is padding (-1)

    def left_right(self) -> tuple[int, int]:
        w, big = self.window, ma.UNLIMITED
        return {"causal": (big, 0), "sliding": (w, w), "causal-sliding": (w - 1, 0),
                "documents": (big, big), "causal-documents": (big, 0),
                "strictly-past": (w, -1), "full": (big, big)}[self.kind]

    def doc_ids(self) -> np.ndarray:
        if not self.docs:
            return np.zeros(self.n, np.int32)
        return ma.packed_documents(self.docs, self.n - sum(self.docs))

    def dense(self) -> np.ndarray:
        left, right = self.left_right()
        return ma.dense_mask(self.n, self.n, left, right, self.doc_ids())

    def describe(self) -> str:
        if self.kind in ("documents", "causal-documents"):
            pad = self.n - sum(self.docs)
            return (f"{self.kind} mask, documents of {', '.join(map(str, self.docs))} tokens"
                    f"{f', then {pad} padding tokens that see nothing' if pad else ''}")
        if self.kind == "strictly-past":
            return (f"each query sees the {self.window} keys before it, not itself (row 0 "
                    "sees nothing)")
        if self.kind == "full":
            return "no mask (every pair visible)"
        if self.kind in ("sliding", "causal-sliding"):
            return f"{self.kind} window of {self.window}"
        return f"{self.kind} mask"


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
    return _random_mask(n_q, n_k, seed), f"a random {n_q} x {n_k} mask, seed={seed}"


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
        "the last key block is cut off at n_k, and it was judged on its real keys only: it "
        "comes out FULL where its keys past the end are not visible. The kernel skips the "
        "mask on a FULL block, so it would use those keys. Count keys past the end as hidden "
        f"({SECTION_MASKS})."),
    "rows_padded": (
        "rows past the last query were counted as hidden rows, so the last query block is "
        "never FULL. That map is safe (FlexAttention's BlockMask does the same) but does more "
        "masking than needed: those rows do not exist (the kernel never stores them), and "
        f"this exercise judges a tile on its real rows ({SECTION_MASKS})."),
    "transposed": (
        "block_m and block_n are swapped: query blocks are block_m rows, key blocks block_n "
        "columns."),
    "any_is_full": (
        "a tile with some visible pairs is marked FULL. FULL means every pair of the tile is "
        "visible (the kernel then evaluates no mask); some but not all is PARTIAL."),
    "full_empty_swapped": (
        f"FULL and EMPTY are swapped: EMPTY = {ma.EMPTY} (no visible pair), PARTIAL = "
        f"{ma.PARTIAL}, FULL = {ma.FULL} (every pair visible)."),
}


@registry.exercise("modern-attention/block-map", "the block map of a mask (numpy)", 1)
def _check_block_map(block_map) -> str:
    _require_callable(block_map, "modern-attention/block-map", "block_map")
    cases = registry.with_hidden(MAP_CASES, MAP_HIDDEN)
    for number, (spec, block_m, block_n) in enumerate(cases, 1):
        mask, what = _map_mask(spec)
        label = (f"case {number}/{len(cases)} ({what}, block_m={block_m}, "
                 f"block_n={block_n})")
        original = mask.copy()
        try:
            got = registry.run_student(block_map, label, mask, block_m, block_n)
        except registry.WrongAnswer as err:
            if "broadcast" not in str(err):
                raise
            raise registry.WrongAnswer(
                f"{err}\nHint: the padded mask must be as wide as the key blocks cover, at "
                "least n_k: round the block counts up (-(-n // block)).") from None
        if not np.array_equal(mask, original):
            raise registry.WrongAnswer(f"{label}: your function modified the mask in place.")
        expected = ma.classify_blocks(mask, block_m, block_n)
        got_array = registry.to_numpy(got)
        if got_array.shape != expected.shape:
            floor = (mask.shape[0] // block_m, mask.shape[1] // block_n)
            rounded_down = got_array.ndim == 2 and any(
                g == f != e
                for g, f, e in zip(got_array.shape, floor, expected.shape, strict=True))
            hint = ("a cut-off last block counts as a block: round the block counts up "
                    "(-(-n // block))" if rounded_down else
                    "one row per query block, one column per key block")
            raise registry.WrongAnswer(f"{label}: the map has shape {got_array.shape}, "
                                       f"expected {expected.shape}: {hint}.")
        if not np.issubdtype(got_array.dtype, np.integer):
            raise registry.WrongAnswer(f"{label}: return an integer array of EMPTY, PARTIAL "
                                       f"and FULL, not {got_array.dtype}.")
        wrong = np.argwhere(got_array != expected)
        if len(wrong):
            i, j = (int(x) for x in wrong[0])
            names = {ma.EMPTY: "EMPTY", ma.PARTIAL: "PARTIAL", ma.FULL: "FULL"}
            message = (f"{label}: {len(wrong)} of {expected.size} tiles are wrong, first "
                       f"(query block {i}, key block {j}): you gave "
                       f"{names.get(int(got_array[i, j]), int(got_array[i, j]))}, the tile is "
                       f"{names[int(expected[i, j])]}.")
            hint = (f"Hint: a tile is EMPTY when no pair of it is visible, FULL when every "
                    f"pair is, PARTIAL otherwise ({SECTION_MASKS}).")
            for mistake, why in MAP_MISTAKES.items():
                candidate = map_candidate(mask, block_m, block_n, mistake)
                if candidate.shape == got_array.shape and np.array_equal(candidate, got_array):
                    hint = "Likely mistake: " + why
                    break
            raise registry.WrongAnswer(f"{message}\n{hint}")
    return _passed(len(cases), "classify every tile right")


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
        extra = ", scores ~1e3" if self.large else ""
        if self.layout == "bnhd":
            extra += ", inputs are transposed views of (B, N, H, D) tensors"
        return (f"case {number}/{total} (B={self.B}, H={self.H}, N={self.mask.n}, D={self.D}, "
                f"{guards.dtype_name(self.dtype)}, {self.mask.describe()}, "
                f"BLOCK_M={self.block_m}, BLOCK_N={self.block_n}{extra}, seed={self.seed})")


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
     "a row with no visible key at all comes out NaN (0 / 0): its output must be 0. Divide "
     f"by a running sum that is 1 where it is 0 ({SECTION_SPARSE})."),
    (dict(guard=False),
     "a row whose first listed blocks hide all its keys turns NaN: its running max is still "
     "-inf there, and exp2(-inf - (-inf)) is NaN. Shift by a safe max, 0 while the running "
     f"max is -inf (lesson 5, section 4; {SECTION_SPARSE})."),
    (dict(mask_partial=False),
     "the mask is not applied in the PARTIAL blocks, so hidden pairs take part in the "
     f"softmax. FULL blocks skip the mask; PARTIAL ones must evaluate it ({SECTION_SPARSE})."),
    (dict(use_partial=False),
     "only the FULL blocks are visited: the PARTIAL blocks (the diagonal, the edges of the "
     f"window, the borders of documents) are missing ({SECTION_SPARSE})."),
    (dict(use_full=False),
     f"only the PARTIAL blocks are visited: the FULL blocks are missing ({SECTION_SPARSE})."),
    (dict(row0_lists=True),
     "every query block walks the key blocks of query block 0: the counts and the index row "
     "of query block start_m begin at counts + start_m and index + start_m * index_stride "
     f"({SECTION_SPARSE})."),
    (dict(scaled_index=False),
     "the index holds key block numbers, not key positions: the first key of listed block "
     f"j is j * BLOCK_N ({SECTION_SPARSE})."),
    (dict(swap_window=True),
     "the window's sides are swapped: a query at row r sees keys c with r - left <= c <= "
     f"r + right, so c - r <= right and r - c <= left ({SECTION_MASKS})."),
    (dict(pad_doc=0),
     "keys past N get document 0: the document ids past N must load as -1, which no query "
     "matches, so that the padding keys (loaded as 0, a score of 0) stay hidden "
     f"({SECTION_SPARSE})."),
    (dict(use_docs=False),
     "the document ids of query and key are not compared: a query may only see keys of its "
     f"own document ({SECTION_MASKS})."),
]


def _sparse_inputs(case: SparseCase):
    mask = case.mask.dense()
    q, k, v = _attention_inputs(case.B, case.H, case.H, case.mask.n, case.D, case.dtype,
                                case.seed, case.large)
    return mask, q, k, v


def _attention_inputs(B, H, H_KV, N, D, dtype, seed, large, n_q=None):
    gen = torch.Generator().manual_seed(registry.case_seed(seed))
    q = torch.randn(B, H, n_q or N, D, generator=gen, dtype=torch.float64)
    k = torch.randn(B, H_KV, N, D, generator=gen, dtype=torch.float64)
    v = torch.randn(B, H_KV, N, D, generator=gen, dtype=torch.float64)
    if large:  # scaled scores of about 1e3
        factor = (1000.0 * D ** 0.5 / D) ** 0.5
        q, k = q * factor, k * factor
    return tuple(x.to(dtype) for x in (q, k, v))


def _place(x: torch.Tensor, layout: str, pad: int) -> torch.Tensor:
    return guards.place_heads(x, layout, pad)


@registry.exercise("modern-attention/sparse-kernel",
                   "block-sparse attention kernel over the listed blocks", 2, kernel=True)
def _check_sparse(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/sparse-kernel")
    cases = registry.with_hidden(SPARSE_CASES, SPARSE_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        mask, q, k, v = _sparse_inputs(case)
        pad = max(case.block_m, case.block_n)
        qp, kp, vp = (_place(x, case.layout, pad) for x in (q, k, v))
        kinds = ma.classify_blocks(mask, case.block_m, case.block_n)
        lists = ma.block_list_tensors(kinds, _device())
        docs = buffers.poisoned(torch.from_numpy(case.mask.doc_ids()).to(_device()))
        left, right = case.mask.left_right()
        out = buffers.Canaried(q.shape, case.dtype, _device(), pad_rows=pad)
        runtime.check_tensors(qp, kp, vp, names=("q", "k", "v"), dot=True)
        _launch(label, ma.launch_sparse, kernel, qp, kp, vp, out.tensor, docs, left, right,
                lists, case.block_m, case.block_n)
        out.verify(label)
        expected = ma.masked_reference(q, k, v, mask).numpy()
        got = out.tensor.detach().cpu().double().numpy()
        atol, rtol = _tolerance(case.dtype)
        try:
            registry.compare(got, expected, label, atol=atol, rtol=rtol,
                             tile_rows=case.block_m)
        except registry.WrongAnswer as err:
            candidates = [
                (sparse_model(q, k, v, kinds, case.mask.doc_ids(), left, right, case.block_m,
                              case.block_n, case.D ** -0.5, **switches), hint)
                for switches, hint in SPARSE_MISTAKES]
            hint = _named(got, candidates, (
                "None of the mistakes the grader knows matches this output. Check the loop "
                "bounds (count), the key block of the i-th entry, the mask of a PARTIAL block "
                f"and the safe max ({SECTION_SPARSE}); the row block named above is where it "
                "first goes wrong."))
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return _passed(len(cases), "match masked attention, rows without a key are 0")


# ---------------------------------------------------------------- 3. grouped-query heads


@dataclasses.dataclass(frozen=True)
class GqaCase:
    B: int
    H: int
    H_KV: int
    N: int
    D: int = 16
    dtype: torch.dtype = torch.float32
    seed: int = 0
    layout: str = "bhnd"

    def label(self, number: int, total: int) -> str:
        kind = "MQA" if self.H_KV == 1 else "MHA" if self.H_KV == self.H else "GQA"
        extra = (", inputs are transposed views of (B, N, H, D) tensors"
                 if self.layout == "bnhd" else "")
        return (f"case {number}/{total} ({kind}: B={self.B}, H={self.H}, H_KV={self.H_KV}, "
                f"N={self.N}, D={self.D}, {guards.dtype_name(self.dtype)}{extra}, "
                f"seed={self.seed})")


GQA_CASES = [
    GqaCase(1, 4, 2, 20, seed=1),
    GqaCase(2, 6, 3, 33, seed=2),  # group 2, 3 K/V heads: h % H_KV and h // group differ
    GqaCase(1, 4, 1, 40, seed=3),  # MQA
    GqaCase(2, 2, 2, 17, seed=4),  # MHA
    GqaCase(1, 8, 2, 30, D=32, dtype=torch.float16, seed=5, layout="bnhd"),
]
GQA_HIDDEN = [
    GqaCase(2, 9, 3, 45, seed=101, layout="bnhd"),
    GqaCase(1, 12, 4, 16, dtype=torch.float16, seed=102),
]


def gqa_candidate(q, k, v, head_of_k, head_of_v) -> np.ndarray | None:
    """float64 attention where query head h reads K head head_of_k(h) and V head
    head_of_v(h); None when a head lies outside the K/V heads (the kernel read padding)."""
    H, H_KV = q.shape[1], k.shape[1]
    ks, vs = [head_of_k(h) for h in range(H)], [head_of_v(h) for h in range(H)]
    if any(not 0 <= x < H_KV for x in ks + vs):
        return None
    k_rep, v_rep = k[:, ks], v[:, vs]
    return ma.masked_reference(q, k_rep, v_rep, np.ones((q.shape[2], k.shape[2]), bool)).numpy()


def _gqa_mistakes(H: int, H_KV: int):
    group = H // H_KV
    return [
        (lambda h: h % H_KV, lambda h: h % H_KV,
         "query heads are dealt to the K/V heads in turn (h % H_KV). The convention of "
         "PyTorch's enable_gqa, and of the models' weights, puts the group's heads next to "
         f"each other: head h reads K/V head h // (H // H_KV) ({SECTION_GQA})."),
        (lambda h: h // H_KV, lambda h: h // H_KV,
         "the head is divided by the number of K/V heads, not by the group size H // H_KV "
         f"({SECTION_GQA})."),
        (lambda h: 0, lambda h: 0,
         f"every query head reads K/V head 0: that is MQA, not GQA ({SECTION_GQA})."),
        (lambda h: h // group, lambda h: h % H_KV,
         f"K and V are read from different heads: both use kv_h ({SECTION_GQA})."),
        (lambda h: h % H_KV, lambda h: h // group,
         f"K and V are read from different heads: both use kv_h ({SECTION_GQA})."),
    ]


@registry.exercise("modern-attention/gqa-kernel", "grouped-query heads in the kernel", 1,
                   kernel=True)
def _check_gqa(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/gqa-kernel")
    cases = registry.with_hidden(GQA_CASES, GQA_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        q, k, v = _attention_inputs(case.B, case.H, case.H_KV, case.N, case.D, case.dtype,
                                    case.seed, False)
        qp, kp, vp = (_place(x, case.layout, 16) for x in (q, k, v))
        out = buffers.Canaried(q.shape, case.dtype, _device(), pad_rows=16)
        runtime.check_tensors(qp, kp, vp, names=("q", "k", "v"), dot=True)
        _launch(label, ma.launch_gqa, kernel, qp, kp, vp, out.tensor, 16, 16)
        out.verify(label)
        expected = ma.gqa_reference(q, k, v).numpy()
        got = out.tensor.detach().cpu().double().numpy()
        atol, rtol = _tolerance(case.dtype)
        try:
            registry.compare(got, expected, label, atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            candidates = []
            for head_k, head_v, why in _gqa_mistakes(case.H, case.H_KV):
                candidate = gqa_candidate(q, k, v, head_k, head_v)
                if candidate is not None:
                    candidates.append((candidate, why))
            fallback = (
                "Likely mistake: some query heads read K/V rows that do not exist (the grader "
                f"puts NaN after the {case.H_KV} K/V heads): query head h reads head "
                "h // (H // H_KV), and the K and V pointers use K's and V's own batch and "
                f"head strides ({SECTION_GQA})."
                if np.isnan(got).any() else
                "Hint: query head h reads K/V head h // (H // H_KV), and the K/V pointers "
                f"use K's and V's own batch and head strides ({SECTION_GQA}).")
            raise registry.WrongAnswer(f"{err}\n{_named(got, candidates, fallback)}") from None
    return _passed(len(cases), "match SDPA with enable_gqa=True")


# ---------------------------------------------------------------- 4. split-KV decoding


@dataclasses.dataclass(frozen=True)
class DecodeCase:
    lengths: tuple
    H: int
    H_KV: int
    n_max: int
    split_size: int = 32
    block_n: int = 16
    D: int = 16
    dtype: torch.dtype = torch.float32
    seed: int = 0
    large: bool = False
    page_size: int = 16

    @property
    def B(self) -> int:
        return len(self.lengths)

    def label(self, number: int, total: int, paged: bool = False) -> str:
        what = (f"page size {self.page_size}, pages out of order" if paged else
                f"split size {self.split_size}")
        return (f"case {number}/{total} (lengths {list(self.lengths)} in a cache of "
                f"{self.n_max}, H={self.H}, H_KV={self.H_KV}, D={self.D}, "
                f"{guards.dtype_name(self.dtype)}, {what}, BLOCK_N={self.block_n}"
                f"{', scores ~1e3' if self.large else ''}, seed={self.seed})")


SPLIT_CASES = [
    DecodeCase((64, 40), 2, 2, 64, seed=1),  # MHA, one split cut short
    DecodeCase((100, 37, 5), 4, 2, 100, seed=2),  # GQA, ragged lengths, empty splits
    DecodeCase((50,), 4, 1, 64, split_size=16, seed=3),  # MQA, batch 1
    DecodeCase((90, 0), 2, 1, 96, split_size=48, seed=4),  # a sequence with no key
    DecodeCase((77, 64), 6, 3, 80, D=32, dtype=torch.float16, seed=5, large=True),
]
SPLIT_HIDDEN = [
    DecodeCase((128, 1, 65), 8, 2, 128, split_size=64, seed=101),
    DecodeCase((33, 31), 2, 2, 40, split_size=16, dtype=torch.float16, seed=102),
]


def _decode_inputs(case: DecodeCase):
    """q (B, H, D); k, v (B, H_KV, n_max, D) with every slot past a sequence's length NaN."""
    q, k, v = _attention_inputs(case.B, case.H, case.H_KV, case.n_max, case.D, case.dtype,
                                case.seed, case.large, n_q=1)
    q = q[:, :, 0]
    for b, n in enumerate(case.lengths):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    return q, k, v, torch.tensor(case.lengths, dtype=torch.int32)


def _split_mistakes(case: DecodeCase, q, k, v, lengths):
    """(candidate (m, l, o), hint) of the known mistakes of the split kernel."""
    group = case.H // case.H_KV
    m, l, o = ma.split_states(q, k, v, lengths, case.split_size)
    mistakes = [((m, l, normalised(l, o)),
                 "o is stored divided by l: a split's state is unnormalised (the merge "
                 f"rescales it and divides once, at the end) ({SECTION_SPLIT}).")]
    if group > 1 and case.H_KV > 1:
        wrong = ma.split_states(q, k, v, lengths, case.split_size,
                                head_of=lambda h: h % case.H_KV)
        mistakes.append((wrong, "the query heads of K/V head kv_h are kv_h * group + g, "
                                f"g = 0 .. group - 1 ({SECTION_GQA})."))
    if case.split_size != case.block_n:
        wrong = ma.split_states(q, k, v, lengths, case.split_size,
                                start_of=lambda s: s * case.block_n)
        mistakes.append((wrong, "split s starts at key s * SPLIT_SIZE, not s * BLOCK_N: the "
                                f"splits are SPLIT_SIZE keys apart ({SECTION_SPLIT})."))
    return mistakes


@registry.exercise("modern-attention/split-kv", "split-KV decoding: partial states", 1,
                   kernel=True)
def _check_split(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/split-kv")
    cases = registry.with_hidden(SPLIT_CASES, SPLIT_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        q, k, v, lengths = _decode_inputs(case)
        qp = buffers.poisoned(q.to(_device()))
        kp, vp = (guards.place_heads(x, "bhnd", case.block_n) for x in (k, v))
        splits = ma.split_count(case.n_max, case.split_size)
        m = buffers.Canaried((case.B, case.H, splits), torch.float32, _device())
        l = buffers.Canaried((case.B, case.H, splits), torch.float32, _device())
        o = buffers.Canaried((case.B, case.H, splits, case.D), torch.float32, _device())
        lengths_t = lengths.to(_device())
        runtime.check_tensors(qp, kp, vp, names=("q", "k", "v"), dot=True)
        _launch(label, ma.launch_split_decode, kernel, qp, kp, vp, lengths_t, m.tensor,
                l.tensor, o.tensor, case.split_size, case.block_n)
        for buffer, name in ((m, "m"), (l, "l"), (o, "o")):
            buffer.verify(f"{label}, the states' {name}")
        expected = ma.split_states(q, k, v, lengths, case.split_size)
        got = tuple(x.tensor.detach().cpu().double().numpy() for x in (m, l, o))
        atol, rtol = _tolerance(case.dtype)
        for name, mine, ref in zip(("m", "l", "o"), got, expected, strict=True):
            try:
                registry.compare(mine, ref, f"{label}, the states' {name}", atol=atol,
                                 rtol=rtol)
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_diagnose_split(got, expected, case, q, k, v, lengths)}"
                ) from None
    return _passed(len(cases), "give every split's (m, l, o)")


def _diagnose_split(got, expected, case, q, k, v, lengths) -> str:
    m, l, o = got
    if m.shape[-1] > 1 and not np.isnan(m[..., 0]).any() and np.isnan(m[..., 1:]).all():
        return ("Likely mistake: the states of splits 1, 2, ... were never written (they still "
                "hold the grader's NaN): each split stores at its own index, b * smb + heads * "
                f"smh + split ({SECTION_SPLIT}).")
    if np.isnan(o).any() or np.isnan(l).any():
        return ("Likely mistake: the split holding a sequence's last key read past its length "
                "(the grader puts NaN in every slot past it): the split ends at the smaller of "
                "lo + SPLIT_SIZE and seq_len, and the last block masks keys at or past that "
                f"end ({SECTION_SPLIT}).")
    empty = np.isneginf(expected[0])
    if empty.any() and not np.isneginf(m[empty]).all():
        return ("Likely mistake: a split past a sequence's length must store the empty state "
                f"(m = -inf, l = 0, o = 0) ({SECTION_SPLIT}).")
    for candidate, hint in _split_mistakes(case, q, k, v, lengths):
        if all(_close(a, np.asarray(b)) for a, b in zip(got, candidate, strict=True)):
            return "Likely mistake: " + hint
    cut = ma.split_states(q, k, v, lengths, case.split_size)
    if _close(m, cut[0]) and not _close(l, cut[1]):
        return ("Likely mistake: the running max is right but the sums are not: scores of keys "
                "past the split's end must be -inf before the softmax update, or the loaded 0s "
                f"count as keys ({SECTION_SPLIT}).")
    return ("Hint: split s covers keys [s * SPLIT_SIZE, min((s + 1) * SPLIT_SIZE, seq_len)) and "
            "stores its running max, running sum and unnormalised accumulator "
            f"({SECTION_SPLIT}).")


# ---------------------------------------------------------------- 5. merging the splits


MERGE_CASES = [
    DecodeCase((64, 40), 2, 2, 64, seed=11),
    DecodeCase((100, 37, 5), 4, 2, 100, seed=12),  # splits past the lengths: empty states
    DecodeCase((90, 0), 2, 1, 96, split_size=16, seed=13),  # a sequence with no key
    DecodeCase((77,), 4, 4, 80, split_size=16, seed=14, large=True),
]
MERGE_HIDDEN = [
    DecodeCase((200, 3), 2, 1, 200, split_size=16, seed=111, large=True),
    DecodeCase((0, 0), 2, 2, 16, split_size=16, seed=112),
]


def merge_candidate(m, l, o, mistake: str) -> np.ndarray:
    """The merged output with a known mistake, from states m, l (B, H, S), o (B, H, S, D),
    computed in float32 like the kernel (so that underflows happen where the kernel's do)."""
    m, l, o = (np.asarray(x, dtype=np.float32) for x in (m, l, o))
    with np.errstate(all="ignore"):
        top = m.max(axis=-1, keepdims=True)
        if mistake == "no_rescale":
            return normalised(l.sum(-1), o.sum(-2))
        if mistake == "no_guard":
            w = np.exp(m - top)
            return (w[..., None] * o).sum(-2) / (w * l).sum(-1)[..., None]
        if mistake == "pad_zero":
            top = np.maximum(top, 0.0)
            w = np.exp(m - top)
            return normalised((w * l).sum(-1), (w[..., None] * o).sum(-2))
        if mistake == "no_divide":
            return merge_all(m, l, o)[2]
        if mistake == "o_not_rescaled":
            w = np.exp(m - safe_max(top))
            return normalised((w * l).sum(-1), o.sum(-2))
        if mistake == "flipped":
            w = np.exp(safe_max(top) - m)
            w = np.where(np.isneginf(m), 0.0, w)
            return normalised((w * l).sum(-1), (w[..., None] * o).sum(-2))
    raise KeyError(mistake)


MERGE_MISTAKES = {
    "no_rescale": "the states are added without rescaling: each split's l and o were measured "
                  f"against its own max; bring them to the common max first ({SECTION_MERGE}).",
    "no_guard": "a sequence with no key at all (every split empty) comes out NaN: use a safe max "
                f"(0 when every m is -inf) and divide by 1 where l is 0 ({SECTION_MERGE}).",
    "pad_zero": "the lanes past the last split load m as 0, not -inf: 0 then wins the max, and "
                "the real states underflow when their scores are far below 0. Padding must load "
                f"as -inf (and l, o as 0) ({SECTION_MERGE}).",
    "no_divide": f"the merged o is stored without dividing by the merged l ({SECTION_MERGE}).",
    "o_not_rescaled": "l is rescaled but o is not: both need the same per-split weights "
                      f"({SECTION_MERGE}).",
    "flipped": "the weights point the wrong way: exp(m_s - m) brings split s down to the "
               f"common max (a factor of at most 1) ({SECTION_MERGE}).",
}


def _shifted_states(case: DecodeCase):
    """Split states of a case; with `large`, every score sits near -500, so that a merge whose
    max includes a spurious 0 underflows."""
    q, k, v, lengths = _decode_inputs(dataclasses.replace(case, large=False))
    m, l, o = ma.split_states(q, k, v, lengths, case.split_size)
    if case.large:
        m = m - 500.0
    return m, l, o


@registry.exercise("modern-attention/merge-splits", "merge kernel for the split states", 1,
                   kernel=True)
def _check_merge(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/merge-splits")
    cases = registry.with_hidden(MERGE_CASES, MERGE_HIDDEN)
    for number, case in enumerate(cases, 1):
        splits = ma.split_count(case.n_max, case.split_size)
        label = (f"case {number}/{len(cases)} ({case.B} sequences of lengths "
                 f"{list(case.lengths)}, H={case.H}, D={case.D}, {splits} splits of "
                 f"{case.split_size} keys{', scores near -500' if case.large else ''}, "
                 f"seed={case.seed})")
        m, l, o = _shifted_states(case)
        mp, lp, op = (buffers.poisoned(torch.from_numpy(x).float().to(_device()))
                      for x in (m, l, o))
        out = buffers.Canaried((case.B, case.H, case.D), torch.float32, _device())
        _launch(label, ma.launch_merge, kernel, mp, lp, op, out.tensor)
        out.verify(label)
        m32, l32, o32 = (x.astype(np.float32).astype(np.float64) for x in (m, l, o))
        _, l_all, o_all = merge_all(m32, l32, o32)
        expected = normalised(l_all, o_all)
        got = out.tensor.detach().cpu().double().numpy()
        try:
            registry.compare(got, expected, label, atol=1e-5, rtol=1e-4)
        except registry.WrongAnswer as err:
            candidates = [(merge_candidate(m32, l32, o32, name), why)
                          for name, why in MERGE_MISTAKES.items()]
            hint = _named(got, candidates, (
                "Hint: m = max of the splits' m; weight_s = exp(m_s - m) (m safe when every "
                "m_s is -inf); l = sum weight_s l_s; o = sum weight_s o_s / l "
                f"({SECTION_MERGE})."),
                tol=1e-4)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return _passed(len(cases), "merge to attention over the whole cache")


# ---------------------------------------------------------------- 6. the paged cache


PAGED_CASES = [
    DecodeCase((64, 40, 9), 2, 2, 64, seed=21),  # pages out of order, MHA, a one-page sequence
    DecodeCase((37, 100, 5), 4, 2, 100, seed=22, page_size=16),  # lengths not whole pages
    DecodeCase((50,), 4, 1, 64, seed=23, page_size=8, block_n=16),  # a block spans two pages
    DecodeCase((90, 0), 2, 1, 96, seed=24, page_size=32, block_n=16),  # a sequence with no key
    DecodeCase((45, 61), 6, 3, 64, D=32, dtype=torch.float16, seed=25, page_size=16),
]
PAGED_HIDDEN = [
    DecodeCase((3, 129, 16), 8, 2, 129, seed=121, page_size=4, block_n=16),
    DecodeCase((70,), 2, 2, 70, dtype=torch.float16, seed=122, page_size=64, block_n=16,
               large=True),
]


def _zero_keys_counted(q, k, v, lengths, block_n: int) -> np.ndarray:
    """Decoding where the positions past each length, up to the end of the last block of
    BLOCK_N, count as keys whose key and value are 0 (masked loads, scores not masked)."""
    rounded = [ma.cdiv(int(n), block_n) * block_n for n in lengths]
    size = max(rounded + [1])
    kk = torch.zeros(*k.shape[:2], size, k.shape[3], dtype=torch.float64)
    vv = torch.zeros_like(kk)
    for b, n in enumerate(lengths):
        kk[b, :, :int(n)] = k[b, :, :int(n)].double()
        vv[b, :, :int(n)] = v[b, :, :int(n)].double()
    return ma.decode_reference(q, kk, vv, rounded).numpy()


def _paged_candidates(case, q, k, v, lengths, k_pages, v_pages, table):
    """(candidate output, hint) of the known mistakes of the paged kernel."""
    B = case.B
    page_size = case.page_size
    total = k_pages.shape[0]
    flat_k = k_pages.double().reshape(total * page_size, case.H_KV, case.D)
    flat_v = v_pages.double().reshape(total * page_size, case.H_KV, case.D)

    def through(address_of):
        """Attention over keys read from the flat page storage at address_of(b, pos)."""
        kk = torch.zeros_like(k.double())
        vv = torch.zeros_like(v.double())
        for b in range(B):
            for pos in range(int(lengths[b])):
                a = address_of(b, pos)
                inside = 0 <= a < total * page_size
                kk[b, :, pos] = flat_k[a] if inside else float("nan")
                vv[b, :, pos] = flat_v[a] if inside else float("nan")
        return ma.decode_reference(q, kk, vv, lengths, keep_nan=True).numpy()

    return [
        (_zero_keys_counted(q, k, v, lengths, case.block_n),
         "the scores of the positions past seq_len in the last block are not -inf: their keys "
         "load as 0, and a score of 0 counts as a key with weight exp(0 - m) "
         f"({SECTION_PAGED})."),
        (through(lambda b, p: p),
         "the page number is the position's page index itself: look it up in the page "
         "table, page = Pages[b, pos // PAGE_SIZE] (the pages of a sequence are scattered) "
         f"({SECTION_PAGED})."),
        (through(lambda b, p: int(table[b, p // page_size]) * page_size + p),
         "the slot inside the page is the position itself: it is pos % PAGE_SIZE "
         f"({SECTION_PAGED})."),
        (through(lambda b, p: int(table[0, p // page_size]) * page_size + p % page_size),
         "every sequence reads the page table of sequence 0: its row starts at Pages + b * "
         f"s_pages ({SECTION_PAGED})."),
        (through(lambda b, p: int(table[b, p // case.block_n]) * page_size + p % page_size),
         "the page index divides the position by BLOCK_N, not by PAGE_SIZE: a page holds "
         f"PAGE_SIZE keys whatever the block size ({SECTION_PAGED})."),
    ]


@registry.exercise("modern-attention/paged-decode", "decoding through a page table", 1,
                   kernel=True)
def _check_paged(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/paged-decode")
    cases = registry.with_hidden(PAGED_CASES, PAGED_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases), paged=True)
        q, k, v, lengths = _decode_inputs(case)
        k_pages, v_pages, table, _ = ma.paged_cache(k, v, case.lengths, case.page_size,
                                                    seed=registry.case_seed(case.seed))
        qp = buffers.poisoned(q.to(_device()))
        kp = buffers.poisoned(k_pages.to(_device()), pad_rows=case.block_n)
        vp = buffers.poisoned(v_pages.to(_device()), pad_rows=case.block_n)
        table_t, lengths_t = table.to(_device()), lengths.to(_device())
        out = buffers.Canaried((case.B, case.H, case.D), case.dtype, _device())
        runtime.check_tensors(qp, kp, vp, names=("q", "k_pages", "v_pages"), dot=True)
        _launch(label, ma.launch_paged_decode, kernel, qp, kp, vp, table_t, lengths_t,
                out.tensor, case.block_n)
        out.verify(label)
        expected = ma.decode_reference(q, k, v, lengths).numpy()
        got = out.tensor.detach().cpu().double().numpy()
        atol, rtol = _tolerance(case.dtype)
        try:
            registry.compare(got, expected, label, atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            candidates = _paged_candidates(case, q, k, v, lengths, k_pages, v_pages, table)
            where = ("Key position pos of sequence b lives in page Pages[b, pos // PAGE_SIZE], "
                     "slot pos % PAGE_SIZE; K and V each use their own page and slot strides "
                     f"({SECTION_PAGED}).")
            fallback = ("Likely mistake: a key or value was read from a page or slot it does "
                        "not live in (the grader fills unused pages and slots with NaN). "
                        + where if np.isnan(got).any() else "Hint: " + where)
            empty = np.asarray(case.lengths) == 0
            if empty.any() and np.isnan(got[empty]).all() and not np.isnan(got[~empty]).any():
                fallback = ("Likely mistake: a sequence with no key (length 0) comes out NaN "
                            "(0 / 0): its output must be 0, as in exercise 2: divide by a sum "
                            f"that is 1 where it is 0 ({SECTION_PAGED}).")
            hint = _named(got, candidates, fallback)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return _passed(len(cases), "match attention over each sequence's keys")

