"""What lesson 9's checks share: where the lesson explains each exercise, the launch of a
student's kernel, the comparison with candidate outputs of known mistakes, the masks and the
decoding cases, and their inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ... import i18n, runtime
from ...i18n import N_, _
from ...kernels import modern_attention as ma
from .. import guards, registry

NEG_INF = float("-inf")
SECTION_MASKS = N_("section 1 (\"Masks described block by block\")")
SECTION_SPARSE = N_("section 2 (\"A kernel that skips empty blocks\")")
SECTION_GQA = N_("section 3 (\"Grouped-query attention\")")
SECTION_SPLIT = N_("section 4 (\"Decoding: one query against a long cache\")")
SECTION_MERGE = N_("section 5 (\"Merging the splits\")")
SECTION_PAGED = N_("section 6 (\"A paged KV cache\")")
SECTIONS = {"section_masks": SECTION_MASKS, "section_sparse": SECTION_SPARSE,
            "section_gqa": SECTION_GQA, "section_split": SECTION_SPLIT,
            "section_merge": SECTION_MERGE, "section_paged": SECTION_PAGED}


def shown(message: str, **fields) -> str:
    """A message of lesson 9's tables in the current language, with the sections it names
    ({section_masks}, ...) and `fields` filled in."""
    return i18n.filled(message, SECTIONS, **fields)


def device() -> str:
    return runtime.current().device


FENCE = 4096  # elements around a fenced integer tensor


def fenced(x: torch.Tensor, fill: int) -> torch.Tensor:
    """A copy of an integer tensor (block lists, page tables, lengths) on the kernel's device,
    inside FENCE elements of `fill` on either side. These tensors hold addresses, so they get a
    harmless fill (a real block, the NaN page, 0) instead of poison: a kernel that reads them
    with a wrong offset computes wrong results (which the check names) instead of jumping to
    an address outside every buffer, which would crash the interpreter."""
    storage = torch.full((2 * FENCE + x.numel(),), fill, dtype=x.dtype, device=device())
    view = torch.as_strided(storage, x.shape, x.contiguous().stride(), storage_offset=FENCE)
    view.copy_(x)
    return view


def require_callable(answer, exercise_id: str, name: str) -> None:
    if not callable(answer):
        raise registry.WrongAnswer(_("{exercise_id}: pass the function itself: "
                                     "check(\"{exercise_id}\", {name}).").format(
                                     exercise_id=exercise_id, name=name))


def passed(count: int, what: str) -> str:
    return _("{count} cases {what}{hidden}").format(count=count, what=what,
                                                     hidden=registry.hidden_note())


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return guards.dot_tolerance(guards.ATTENTION_TOLERANCES, dtype)


def launch(label: str, launcher, *args, **kwargs) -> None:
    """Run a launcher on the student's kernel; every tensor argument is named to the record."""
    with np.errstate(all="ignore"):  # the interpreter computes with numpy: no warning noise
        guards.guarded(label, lambda: launcher(*args, **kwargs),
                       tensors=guards.tensors_in(args, kwargs))


def close(actual: np.ndarray, candidate: np.ndarray, tol: float = 2e-3) -> bool:
    if actual.shape != candidate.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(actual, candidate, rtol=tol, atol=tol, equal_nan=True))


def named(output: np.ndarray, candidates, fallback: str, tol: float = 2e-3) -> str:
    """'Likely mistake: ...' for the first candidate output that matches, else `fallback`."""
    for candidate, hint in candidates:
        if close(output, np.asarray(candidate, dtype=np.float64), tol):
            return _("Likely mistake: ") + hint
    return fallback


def attention_inputs(B, H, H_KV, N, D, dtype, seed, large, n_q=None):
    gen = torch.Generator().manual_seed(registry.case_seed(seed))
    q = torch.randn(B, H, n_q or N, D, generator=gen, dtype=torch.float64)
    k = torch.randn(B, H_KV, N, D, generator=gen, dtype=torch.float64)
    v = torch.randn(B, H_KV, N, D, generator=gen, dtype=torch.float64)
    if large:  # scaled scores of about 1e3
        factor = (1000.0 * D ** 0.5 / D) ** 0.5
        q, k = q * factor, k * factor
    return tuple(x.to(dtype) for x in (q, k, v))


def place(x: torch.Tensor, layout: str, pad: int) -> torch.Tensor:
    return guards.place_heads(x, layout, pad)


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
            padding = (_(", then {pad} padding tokens that see nothing").format(pad=pad) if pad
                       else "")
            return _("{kind} mask, documents of {sizes} tokens{padding}").format(
                kind=self.kind, sizes=", ".join(map(str, self.docs)), padding=padding)
        if self.kind == "strictly-past":
            return (_("each query sees the {window} keys before it, not itself (row 0 sees "
                      "nothing)").format(window=self.window))
        if self.kind == "full":
            return _("no mask (every pair visible)")
        if self.kind in ("sliding", "causal-sliding"):
            return _("{kind} window of {window}").format(kind=self.kind, window=self.window)
        return _("{kind} mask").format(kind=self.kind)


# ---------------------------------------------------------------- decoding cases


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


def decode_inputs(case: DecodeCase):
    """q (B, H, D); k, v (B, H_KV, n_max, D) with every slot past a sequence's length NaN."""
    q, k, v = attention_inputs(case.B, case.H, case.H_KV, case.n_max, case.D, case.dtype,
                                case.seed, case.large, n_q=1)
    q = q[:, :, 0]
    for b, n in enumerate(case.lengths):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    return q, k, v, torch.tensor(case.lengths, dtype=torch.int32)
