"""Lesson 9's grouped-query exercise: the K/V head a query head reads, checked against
SDPA with enable_gqa=True; wrong head maps are named by attention with that map."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ... import runtime
from ...i18n import _
from ...kernels import modern_attention as ma
from .. import buffers, guards, registry
from .common import SECTION_GQA, attention_inputs, device, launch, named, passed, place, tolerance

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
        extra = (_(", inputs are transposed views of (B, N, H, D) tensors")
                 if self.layout == "bnhd" else "")
        return (_("case {number}/{total} ({kind}: B={b}, H={h}, H_KV={h_kv}, N={n}, D={d}, "
                  "{dtype_name}{extra}, seed={seed})").format(number=number, total=total,
                  kind=kind, b=self.B, h=self.H, h_kv=self.H_KV, n=self.N, d=self.D,
                  dtype_name=guards.dtype_name(self.dtype), extra=extra, seed=self.seed))


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
         _("query heads are dealt to the K/V heads in turn, like cards. The convention of "
           "PyTorch's enable_gqa, and of the models' weights, makes a group of consecutive query "
           "heads share one K/V head ({section_gqa}).").format(section_gqa=_(SECTION_GQA))),
        (lambda h: h // H_KV, lambda h: h // H_KV,
         _("the head is divided by the number of K/V heads, not by the group size H // H_KV "
           "({section_gqa}).").format(section_gqa=_(SECTION_GQA))),
        (lambda h: 0, lambda h: 0,
         _("every query head reads K/V head 0: that is MQA, not GQA ({section_gqa}).").format(
           section_gqa=_(SECTION_GQA))),
        (lambda h: h // group, lambda h: h % H_KV,
         _("K and V are read from different heads: both use kv_h ({section_gqa}).").format(
           section_gqa=_(SECTION_GQA))),
        (lambda h: h % H_KV, lambda h: h // group,
         _("K and V are read from different heads: both use kv_h ({section_gqa}).").format(
           section_gqa=_(SECTION_GQA))),
    ]


def check_gqa(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/gqa-kernel")
    cases = registry.with_hidden(GQA_CASES, GQA_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        q, k, v = attention_inputs(case.B, case.H, case.H_KV, case.N, case.D, case.dtype,
                                    case.seed, False)
        qp, kp, vp = (place(x, case.layout, 16) for x in (q, k, v))
        out = buffers.Canaried(q.shape, case.dtype, device(), pad_rows=16)
        runtime.check_tensors(qp, kp, vp, names=("q", "k", "v"), dot=True)
        launch(label, ma.launch_gqa, kernel, qp, kp, vp, out.tensor, 16, 16)
        out.verify(label)
        expected = ma.gqa_reference(q, k, v).numpy()
        got = out.tensor.detach().cpu().double().numpy()
        atol, rtol = tolerance(case.dtype)
        try:
            registry.compare(got, expected, label, atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            candidates = []
            for head_k, head_v, why in _gqa_mistakes(case.H, case.H_KV):
                candidate = gqa_candidate(q, k, v, head_k, head_v)
                if candidate is not None:
                    candidates.append((candidate, why))
            fallback = (
                _("Likely mistake: some query heads read K/V rows that do not exist (the grader "
                  "puts NaN after the {h_kv} K/V heads): a K/V head number lies between 0 and "
                  "H_KV - 1, and the K and V pointers use K's and V's own batch and head strides "
                  "({section_gqa}).").format(h_kv=case.H_KV, section_gqa=_(SECTION_GQA))
                if np.isnan(got).any() else
                _("Hint: the query heads of a group are not the ones reading this K/V head, or "
                  "the K/V pointers do not use K's and V's own batch and head strides "
                  "({section_gqa}).").format(section_gqa=_(SECTION_GQA)))
            raise registry.WrongAnswer(f"{err}\n{named(got, candidates, fallback)}") from None
    return passed(len(cases), _("match SDPA with enable_gqa=True"))
