"""Lesson 6's backward checks: the backward of one head in numpy, and the dK/dV and dQ
kernels against torch autograd."""

from __future__ import annotations

import numpy as np
import torch

from ...i18n import N_, _
from ...kernels import attention
from .. import buffers, guards, registry
from ..flash_cases import (
    BACKWARD_CASES,
    BACKWARD_HIDDEN,
    GRAD_TOLERANCES,
    NAN_TAIL_HINT,
    Case,
    case_inputs,
    case_label,
    close_to,
    kernel_device,
    launch_case,
    pad_of,
    shown,
    verify_canaries,
    where_wrong,
)

# ---------------------------------------------------------------- backward


def reference_grads(q, k, v, do, causal, sm_scale, *, use_delta=True, scale_grads=True,
                    keep=None, delta_sign=1.0):
    """float64 dQ, dK, dV from the explicit formulas, with switches for known mistakes.
    keep: an (N, N) boolean mask used for P instead of the causal one (a kernel that skips
    whole tiles but forgets the mask inside the tiles it visits)."""
    q, k, v, do = (x.to(torch.float64) for x in (q, k, v, do))
    s = (q @ k.transpose(-1, -2)) * sm_scale
    n = s.shape[-1]
    above = torch.ones(n, n, dtype=torch.bool).triu(1)
    lse = torch.logsumexp(s.masked_fill(above, float("-inf")) if causal else s, -1)
    p = torch.exp(s - lse[..., None])
    if keep is not None:
        p = p.masked_fill(~keep, 0.0)
    elif causal:
        p = p.masked_fill(above, 0.0)
    o = attention.standard_attention(q, k, v, causal, sm_scale)
    delta = (do * o).sum(-1) if use_delta else torch.zeros_like(lse)
    dv = p.transpose(-1, -2) @ do
    ds = p * (do @ v.transpose(-1, -2) - delta_sign * delta[..., None])
    factor = sm_scale if scale_grads else 1.0
    return ds @ k * factor, ds.transpose(-1, -2) @ q * factor, dv


BACKWARD_SECTION = N_("section 1 (\"The backward of one head\")")
BACKWARD_MISTAKES = [
    (dict(scale_grads=False),
     N_("dK (or dQ) lacks the factor sm_scale: S = sm_scale * Q K^T, so the chain rule brings "
        "that factor into the gradients of Q and K. See {backward_section}.")),
    (dict(use_delta=False),
     N_("delta is missing from dS: the softmax's gradient subtracts one number per query row. See "
        "{backward_section}.")),
    (dict(delta_sign=-1.0),
     N_("delta enters dS with the wrong sign: the softmax's gradient subtracts delta from dP, it "
        "does not add it. See {backward_section}.")),
    (dict(keep="tiles"),
     N_("P is not causally masked: recomputing P from s and L gives nonzero weights above the "
        "diagonal, which the forward never used. See {backward_section}.")),
]
BACKWARD_GENERIC_HINT = (
    N_("None of the mistakes the grader knows matches this output. Compare each step (recomputed "
       "P in base 2, dV, dP, dS with delta, dQ and dK with their scale factor) with the formulas "
       "of {backward_section}; the row block named above is where it first goes wrong."))


def _shown(message: str) -> str:
    """A message of this module's tables in the current language, its sections filled in."""
    return shown(message, backward_section=_(BACKWARD_SECTION))


def _backward_inputs(case: Case):
    q, k, v = case_inputs(case)
    gen = torch.Generator().manual_seed(registry.case_seed(case.seed + 1000))
    do = torch.randn(q.shape, generator=gen, dtype=torch.float64).to(case.dtype)
    q64, k64, v64 = (x.to(torch.float64) for x in (q, k, v))
    o, lse = attention.standard_attention(q64, k64, v64, case.causal, case.scale(),
                                          return_lse=True)
    delta = (do.to(torch.float64) * o).sum(-1)
    return q, k, v, do, lse.to(torch.float32), delta.to(torch.float32)


def _check_backward(kernel, exercise_id: str, which: str) -> str:
    guards.require_jit_kernel(kernel, exercise_id)
    cases = registry.with_hidden(BACKWARD_CASES, BACKWARD_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case_label(case, number, len(cases))
        q, k, v, do, lse, delta = _backward_inputs(case)
        pad = pad_of(case)
        placed = [guards.place_heads(x, case.layout, pad) for x in (q, k, v, do)]
        lse_p, delta_p = (buffers.poisoned(x.to(kernel_device()), pad_cols=pad)
                          for x in (lse, delta))
        shape = (case.B, case.H, case.N, case.D)
        if which == "dkdv":
            dk, dv = (buffers.Canaried(shape, case.dtype, kernel_device(), pad_rows=pad)
                      for _ in range(2))
            launch_case(attention.launch_dkdv, label, kernel, *placed, lse_p, delta_p,
                        case.causal, case.scale(), dk=dk.tensor, dv=dv.tensor,
                        block_m=case.block_m, block_n=case.block_n)
            outputs = {"dK": dk, "dV": dv}
        else:
            dq = buffers.Canaried(shape, case.dtype, kernel_device(), pad_rows=pad)
            launch_case(attention.launch_dq, label, kernel, *placed, lse_p, delta_p,
                        case.causal, case.scale(), dq=dq.tensor, block_m=case.block_m,
                        block_n=case.block_n)
            outputs = {"dQ": dq}
        ref_dq, ref_dk, ref_dv = reference_grads(q, k, v, do, case.causal, case.scale())
        refs = {"dQ": ref_dq, "dK": ref_dk, "dV": ref_dv}
        atol, rtol = guards.dot_tolerance(GRAD_TOLERANCES, case.dtype)
        for name, buffer in outputs.items():
            verify_canaries(buffer, f"{label}, {name}")
            got = buffer.tensor.detach().cpu().to(torch.float64).numpy()
            # scale the absolute tolerance with the gradient's size
            expected = refs[name].numpy()
            scale = max(1.0, float(np.abs(expected).max()))
            try:
                registry.compare(got, expected, f"{label}, {name}", atol=atol * scale, rtol=rtol,
                                tile_rows=case.block_n if which == "dkdv" else case.block_m)
            except registry.WrongAnswer as err:
                hint = where_wrong(got, expected, atol * scale, rtol) or \
                    _diagnose_backward(got, name, case, q, k, v, do, which)
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    hidden = registry.hidden_note()
    names = _("dK and dV") if which == "dkdv" else "dQ"
    return _("{total} cases match torch autograd, {names}{hidden}").format(total=len(cases),
             names=names, hidden=hidden)


def _visited_tiles(case: Case, which: str) -> torch.Tensor:
    """(N, N) mask of the (row, column) pairs inside tiles the causal kernel visits."""
    rows = torch.arange(case.N)[:, None]
    cols = torch.arange(case.N)[None, :]
    if which == "dkdv":  # key block j starts at query row (j * BLOCK_N) // BLOCK_M * BLOCK_M
        return rows >= (cols // case.block_n * case.block_n) // case.block_m * case.block_m
    return cols < (rows // case.block_m + 1) * case.block_m


def _diagnose_backward(got, name, case, q, k, v, do, which) -> str:
    index = {"dQ": 0, "dK": 1, "dV": 2}[name]
    if case.dtype == torch.float32:
        for switches, hint in BACKWARD_MISTAKES:
            if "keep" in switches:
                if not case.causal:
                    continue
                switches = dict(keep=_visited_tiles(case, which))
            candidate = reference_grads(q, k, v, do, case.causal, case.scale(), **switches)
            if close_to(got, candidate[index].numpy()):
                return _("Likely mistake: {hint}").format(hint=_shown(hint))
    if np.isnan(got).any() and case.N % min(case.block_m, case.block_n):
        return shown(NAN_TAIL_HINT)
    return _shown(BACKWARD_GENERIC_HINT)


# ---------------------------------------------------------------- backward in numpy

# (n, d, sm_scale, seed, how, causal): how = "normal", "large" (scores in the hundreds: a
# softmax without its max subtracted overflows) or "equal" (every score of a row equal)
NUMPY_BACKWARD_CASES = [
    (5, 4, 0.5, 21, "normal", False),
    (37, 16, 0.25, 22, "normal", False),  # ragged: n is no power of two
    (29, 8, 1.0, 23, "large", False),
    (6, 4, 0.5, 24, "normal", True),
    (33, 16, 0.3, 25, "large", True),
]
NUMPY_BACKWARD_HIDDEN = [
    (1, 8, 0.35, 121, "normal", False),
    (64, 32, 1.0, 122, "large", False),
    (12, 8, 0.5, 123, "equal", False),
    (1, 8, 0.35, 124, "normal", True),
    (40, 16, 1.0, 125, "large", True),
]
NUMPY_SCORES = {"normal": N_("normal scores"), "large": N_("large scores"),
                "equal": N_("equal scores")}  # how a case's label names its `how`


def _numpy_backward_inputs(n: int, d: int, seed: int, how: str):
    rng = np.random.default_rng(registry.case_seed(seed))
    q, k, v, d_out = (rng.standard_normal((n, d)) for _ in range(4))
    if how == "large":
        q, k = q * 10.0, k * 10.0
    elif how == "equal":
        q = np.zeros_like(q)
    return q, k, v, d_out


def numpy_backward(q, k, v, d_out, sm_scale, causal=False, *, delta="o", scale_grads=True,
                   scale_dv=False, transpose_dk=True, transpose_dv=True, delta_sign=1.0,
                   mask="scores"):
    """float64 dQ, dK, dV of one head from the explicit formulas, with switches for known
    mistakes (delta: "o" = rowsum(dO * O), "dp" = rowsum(dP), "none"; mask, when causal:
    "scores" (-inf before the softmax), "none", "after_softmax" (P zeroed, not renormalised),
    "ds_only" (P unmasked, dS zeroed), "upper" (keys j >= i visible), "zero" (scores set to
    0))."""
    n = len(q)
    s = sm_scale * q @ k.T
    future = ~np.tri(n, dtype=bool)  # key j > query i
    if causal and mask == "scores":
        s = np.where(future, -np.inf, s)
    elif causal and mask == "upper":
        s = np.where(future.T & ~np.eye(n, dtype=bool), -np.inf, s)
    elif causal and mask == "zero":
        s = np.where(future, 0.0, s)
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    if causal and mask == "after_softmax":
        p = np.where(future, 0.0, p)
    o = p @ v
    dp = d_out @ v.T
    row = {"o": (d_out * o).sum(1), "dp": dp.sum(1), "none": np.zeros(n)}[delta]
    ds = p * (dp - delta_sign * row[:, None])
    if causal and mask == "ds_only":
        ds = np.where(future, 0.0, ds)
    factor = sm_scale if scale_grads else 1.0
    dq = ds @ k * factor
    dk = (ds.T if transpose_dk else ds) @ q * factor
    dv = (p.T if transpose_dv else p) @ d_out * (sm_scale if scale_dv else 1.0)
    return dq, dk, dv


def _autograd_grads(q, k, v, d_out, sm_scale, causal=False):
    """dQ, dK, dV of standard attention by torch autograd, in float64 (causal: a -inf mask
    above the diagonal)."""
    q64, k64, v64 = (torch.tensor(x, dtype=torch.float64, requires_grad=True)
                     for x in (q, k, v))
    s = sm_scale * q64 @ k64.T
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ v64
    out.backward(torch.tensor(d_out, dtype=torch.float64))
    return tuple(x.grad.numpy() for x in (q64, k64, v64))


NUMPY_BACKWARD_MISTAKES = [
    (dict(delta="none"),
     N_("D is missing from dS: the softmax's Jacobian subtracts one number per query row, the "
        "P-weighted mean of that row of dP.")),
    (dict(delta="dp"),
     N_("D is the plain row sum of dP: each entry of dP must be weighted by its probability P "
        "before summing.")),
    (dict(delta_sign=-1.0),
     N_("D enters dS with the wrong sign: the softmax's Jacobian subtracts D from dP.")),
    (dict(scale_grads=False),
     N_("dQ and dK lack the factor sm_scale: S = sm_scale * Q K^T, so the chain rule brings that "
        "factor into the gradients of Q and K.")),
    (dict(scale_dv=True),
     N_("dV carries sm_scale: V does not enter S, so its gradient has no such factor.")),
    (dict(transpose_dk=False),
     N_("dK is built from dS where the chain rule needs its transpose: a key's gradient sums over "
        "the queries, which index the rows of dS.")),
    (dict(transpose_dv=False),
     N_("dV is built from P where the chain rule needs its transpose: a value's gradient sums "
        "over the queries, which index the rows of P.")),
]
NUMPY_BACKWARD_HINT = (
    N_("None of the mistakes the grader knows matches this output. Check each step against the "
       "derivation of {backward_section}: P (with the row max subtracted), dV, dP, D, dS, then dQ "
       "and dK."))


CAUSAL_MISTAKES = [
    (dict(mask="none"),
     N_("The causal mask is missing: with causal=True, query i may only see the keys j <= i.")),
    (dict(mask="after_softmax"),
     N_("P is zeroed above the diagonal after the softmax, so its rows no longer sum to 1: the "
        "mask must reach the scores, as -inf, before the softmax.")),
    (dict(mask="ds_only"),
     N_("The mask reaches dS but not P: P, and with it O, D and dV, still gives weight to future "
        "keys. Mask the scores before the softmax; dS is then zero there by itself.")),
    (dict(mask="upper"),
     N_("The mask hides the wrong triangle: query i must see the keys j <= i (the past and "
        "itself), not the keys j >= i.")),
    (dict(mask="zero"),
     N_("Future scores are set to 0 instead of -inf: exp(0) is not 0, so those keys still get "
        "weight.")),
]
CAUSAL_NAN_HINT = (
    N_("Likely mistake: with causal=True the first query row comes out NaN. The mask hides the "
       "diagonal too, so query 0 sees no key at all; query i sees the keys j <= i, itself "
       "included."))


def _numpy_backward_hint(answer, index, expected, q, k, v, d_out, sm_scale, causal, how):
    """The hint for one wrong gradient: a known mistake when the answer is exactly it."""
    scale = max(1.0, float(np.abs(expected).max()))
    if answer.shape != expected.shape:
        return _shown(NUMPY_BACKWARD_HINT)
    if not np.isfinite(answer).all():
        if causal and not np.isfinite(answer[0]).all():
            return _(CAUSAL_NAN_HINT)
        if how == "large":
            return (_("the scores of this case reach the hundreds: exp overflows unless each "
                      "row's maximum is subtracted before it."))
        return _shown(NUMPY_BACKWARD_HINT)
    mistakes = NUMPY_BACKWARD_MISTAKES + (CAUSAL_MISTAKES if causal else [])
    for switches, text in mistakes:
        candidate = numpy_backward(q, k, v, d_out, sm_scale, causal, **switches)
        if np.allclose(answer, candidate[index], atol=1e-7 * scale, rtol=1e-6):
            return _("Likely mistake: {hint} See {section}.").format(
                hint=_(text), section=_(BACKWARD_SECTION))
    return _shown(NUMPY_BACKWARD_HINT)


@registry.exercise("flash-backward/numpy",
                   N_("backward of one head in numpy, derived, causal too"), 3)
def _check_backward_numpy(attention_backward) -> str:
    if not callable(attention_backward):
        raise registry.WrongAnswer(
            _("Pass the function itself: check(\"flash-backward/numpy\", attention_backward)."))
    cases = registry.with_hidden(NUMPY_BACKWARD_CASES, NUMPY_BACKWARD_HIDDEN)
    for number, (n, d, sm_scale, seed, how, causal) in enumerate(cases, 1):
        label = _("case {number}/{total} (n={n}, d={d}, sm_scale={sm_scale}, {scores}, "
                  "{causal})").format(number=number, total=len(cases), n=n, d=d,
                                      sm_scale=sm_scale, scores=_(NUMPY_SCORES[how]),
                                      causal=_("causal") if causal else _("not causal"))
        q, k, v, d_out = _numpy_backward_inputs(n, d, seed, how)
        got = registry.run_student(attention_backward, label, q.copy(), k.copy(), v.copy(),
                                   d_out.copy(), sm_scale, causal)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise registry.WrongAnswer(_("{label}: return the tuple (dq, dk, dv), got "
                                         "{type_name}.").format(label=label,
                                         type_name=type(got).__name__))
        expected = _autograd_grads(q, k, v, d_out, sm_scale, causal)
        for index, name in enumerate(("dQ", "dK", "dV")):
            scale = max(1.0, float(np.abs(expected[index]).max()))
            try:
                registry.compare(got[index], expected[index], f"{label}, {name}",
                                 atol=1e-7 * scale, rtol=1e-6)
            except registry.WrongAnswer as err:
                answer = np.asarray(got[index], dtype=np.float64)
                hint = _numpy_backward_hint(answer, index, expected[index], q, k, v, d_out,
                                            sm_scale, causal, how)
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return _("{total} cases match torch autograd, dQ, dK and dV{hidden}").format(total=len(cases),
             hidden=registry.hidden_note())



@registry.exercise("flash-backward/dkdv", N_("backward: dK and dV kernel"), 2, kernel=True)
def _check_dkdv(kernel) -> str:
    return _check_backward(kernel, "flash-backward/dkdv", "dkdv")


@registry.exercise("flash-backward/dq", N_("backward: dQ kernel"), 2, kernel=True)
def _check_dq(kernel) -> str:
    return _check_backward(kernel, "flash-backward/dq", "dq")
