"""The checks of lesson 11: the student's attention function, forward and backward, against
float64 references of the specification, on cases that exercise every part of it.

The student's function is called through `registry.run_student` once per case (forward only,
or forward and backward in one call), so the grader's replay sees plain tensors. Inputs sit
inside NaN padding (`buffers.poisoned_heads`); in cases with long runs of document padding, the
K and V rows of every 128-aligned block wholly inside the padding hold NaN too: a kernel that loads
a key block the mask leaves empty turns them into NaN outputs. Known mistakes are named by
matching the output against float64 versions of the kernel with that mistake (reference.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ... import i18n, runtime
from ...i18n import N_, _
from ...kernels import capstone as cap
from .. import buffers, recording, registry
from . import reference as ref

FORWARD_ID = "capstone/forward"
BACKWARD_ID = "capstone/backward"
SPEC_SECTION = N_("section 2 (\"The specification\")")
FORWARD_SECTION = N_("section 3 (\"The forward\")")
MAP_SECTION = N_("section 3 (\"The block map\")")
BACKWARD_SECTION = N_("section 4 (\"The backward\")")
SECTIONS = {"spec_section": SPEC_SECTION, "forward_section": FORWARD_SECTION,
            "map_section": MAP_SECTION, "backward_section": BACKWARD_SECTION}
NAN_ALIGN = 128  # K/V rows of padding blocks aligned to this many keys hold NaN
# The tiles (BLOCK_M, BLOCK_N) a student's kernel may use, most likely first: a simulated
# mistake is tried at each.
TILE_CANDIDATES = ((32, 32), (16, 16), (64, 64), (64, 32), (32, 16), (128, 64), (128, 128),
                   (64, 16), (128, 32), (16, 32), (32, 64), (64, 128))


@dataclasses.dataclass(frozen=True)
class Case:
    B: int
    H: int
    N: int
    D: int
    dtype: torch.dtype = torch.float32
    seed: int = 0
    window: int | None = None
    docs: tuple | None = None  # document lengths per batch (< 0: padding); padding after them
    softcap: float = 0.0
    alibi: bool = False
    logit_scale: float = 1.0
    sm_scale: float | None = None
    layout: str = "bhnd"

    def label(self, number: int, total: int) -> str:
        parts = [f"B={self.B}, H={self.H}, N={self.N}, D={self.D}",
                 str(self.dtype).removeprefix("torch."), _("causal")]
        if self.window is not None:
            parts.append(f"window={self.window}")
        if self.docs is not None:
            parts.append(_("documents {docs} (negative: padding)").format(
                docs=[list(d) for d in self.docs]))
        if self.softcap:
            parts.append(f"softcap={self.softcap:g}")
        if self.alibi:
            parts.append("ALiBi")
        if self.logit_scale > 1:
            parts.append(_("large logits"))
        if self.sm_scale is not None:
            parts.append(f"sm_scale={self.sm_scale:g}")
        if self.layout != "bhnd":
            parts.append(_("transposed (B, N, H, D) storage"))
        return _("case {number}/{total} ({parts})").format(number=number, total=total,
                                                            parts=", ".join(parts))


FORWARD_CASES = [
    Case(1, 2, 80, 16, seed=1),
    Case(2, 2, 100, 16, seed=2, window=20, softcap=20.0, alibi=True),
    Case(2, 1, 200, 16, seed=3, docs=((37, 50), (-128, 72)), alibi=True, layout="bnhd"),
    Case(1, 2, 96, 32, torch.float16, seed=4, window=40, docs=((30, 50),), softcap=30.0,
         logit_scale=30.0),
    Case(1, 1, 72, 16, seed=5, logit_scale=30.0, sm_scale=0.3),
    # documents cross key blocks that lie wholly left of the diagonal even for 128 x 64 tiles
    # (a GPU's): a block map that calls such a block full lets queries see another document
    Case(1, 1, 320, 16, seed=6, docs=((100, 130, 90),)),
]
FORWARD_HIDDEN = [
    Case(2, 3, 130, 16, seed=101, window=7, docs=((20, 61), (5, 90, 10)), softcap=15.0,
         alibi=True),
    Case(1, 2, 1, 16, seed=102, window=1),
    Case(1, 2, 150, 32, torch.bfloat16, seed=103, docs=((64, 40),), logit_scale=30.0),
    Case(2, 1, 90, 16, torch.float16, seed=104, window=33, logit_scale=30.0, alibi=True),
]
BACKWARD_CASES = [
    Case(1, 2, 80, 16, seed=11, softcap=20.0, alibi=True),
    Case(2, 1, 100, 16, seed=12, window=24, docs=((30, 45), (70,))),
    Case(1, 2, 64, 32, torch.float16, seed=13, softcap=30.0, logit_scale=10.0,
         layout="bnhd"),
]
BACKWARD_HIDDEN = [
    Case(2, 2, 150, 16, seed=111, window=9, docs=((40, 41), (100,)), softcap=25.0,
         alibi=True, sm_scale=0.2),
    Case(1, 1, 200, 16, torch.bfloat16, seed=112, docs=((-128, 40, 32),), alibi=True),
]
OUT_TOLERANCES = {torch.float32: (2e-4, 1e-3), torch.float16: (5e-3, 1e-2),
                  torch.bfloat16: (2e-2, 2e-2)}
GRAD_TOLERANCES = {torch.float32: (5e-4, 1e-3), torch.float16: (2e-2, 2e-2),
                   torch.bfloat16: (6e-2, 5e-2)}


def case_for_device(case: Case) -> Case:
    """bf16 runs compiled only (the interpreter's bf16 tl.dot is wrong): float16 there."""
    if runtime.current().interpreter and case.dtype == torch.bfloat16:
        return dataclasses.replace(case, dtype=torch.float16)
    if not runtime.current().interpreter and case.dtype == torch.float32:
        return dataclasses.replace(case, dtype=torch.float16)
    return case


@dataclasses.dataclass
class Inputs:
    q: torch.Tensor  # what the student gets: poisoned views on the kernel device
    k: torch.Tensor
    v: torch.Tensor
    clean: tuple  # (q, k, v) without NaN, on the CPU: what the references read
    spec: cap.AttentionSpec
    nan_keys: bool  # some K/V rows hold NaN (padding blocks)


def document_ids(case: Case) -> torch.Tensor:
    """(B, N) int32 ids of the case's documents: each batch's lengths one after another, a
    negative length being a run of padding (-1); padding after the last one."""
    ids = torch.full((case.B, case.N), -1, dtype=torch.int32)
    for b, lengths in enumerate(case.docs):
        start, doc = 0, 0
        for length in lengths:
            if length > 0:
                ids[b, start:start + length] = doc
                doc += 1
            start += abs(length)
    return ids


def nan_ranges(case: Case) -> list[tuple[int, int, int]]:
    """(batch, start, end) of the key ranges that hold NaN: the NAN_ALIGN-aligned blocks (the
    last one cut at N) that lie wholly in padding."""
    if case.docs is None:
        return []
    ids = document_ids(case)
    ranges = []
    for b in range(case.B):
        for start in range(0, case.N, NAN_ALIGN):
            end = min(start + NAN_ALIGN, case.N)
            if bool((ids[b, start:end] == -1).all()):
                ranges.append((b, start, end))
    return ranges


def build_inputs(case: Case) -> Inputs:
    device = runtime.current().device
    q, k, v = cap.make_inputs(case.B, case.H, case.N, case.D, torch.float32,
                              seed=registry.case_seed(case.seed),
                              logit_scale=case.logit_scale, device="cpu")
    q, k, v = (x.to(case.dtype) for x in (q, k, v))
    spec = cap.AttentionSpec(window=case.window, softcap=case.softcap, sm_scale=case.sm_scale)
    if case.docs is not None:
        spec.docs = document_ids(case).to(device)
    if case.alibi:
        spec.alibi = cap.alibi_slopes(case.H, device=device)
    placed = [buffers.poisoned_heads(x, case.layout, device=device) for x in (q, k, v)]
    nan = nan_ranges(case)
    for b, start, end in nan:
        for view in placed[1:]:
            view[b, :, start:end] = float("nan")
    return Inputs(*placed, clean=(q, k, v), spec=spec, nan_keys=bool(nan))


def reference_spec(spec: cap.AttentionSpec) -> cap.AttentionSpec:
    """The same specification with its tensors on the CPU (the references run there)."""
    return cap.AttentionSpec(
        window=spec.window, softcap=spec.softcap, sm_scale=spec.sm_scale,
        docs=None if spec.docs is None else spec.docs.cpu(),
        alibi=None if spec.alibi is None else spec.alibi.cpu())


# ---------------------------------------------------------------- calling the student's code


def _checked_output(o, q, what: str):
    if not isinstance(o, torch.Tensor):
        raise registry.WrongAnswer(_("{what}: your function returned a {type_name}; it must "
                                     "return the output o, a tensor. See {spec_section}.").format(
            what=what, type_name=type(o).__name__, spec_section=_(SPEC_SECTION)))
    if o.shape != q.shape or o.dtype != q.dtype or o.device != q.device:
        raise registry.WrongAnswer(
            _("{what}: your function returned a {shape} {dtype} tensor on {device}; o must be "
              "like q: {q_shape} {q_dtype} on {q_device}. See {spec_section}.").format(
                what=what, shape=tuple(o.shape), dtype=o.dtype, device=o.device,
                q_shape=tuple(q.shape), q_dtype=q.dtype, q_device=q.device,
                spec_section=_(SPEC_SECTION)))
    return o


def _forward_only(fn, q, k, v, spec, _fields):
    with torch.no_grad():
        o = fn(q, k, v, spec)
    return _checked_output(o, q, _("the forward")).detach().clone()


def _forward_backward(fn, q, k, v, do, spec, _fields):
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    o = _checked_output(fn(*leaves, spec), q, _("the forward"))
    if not o.requires_grad:
        raise registry.WrongAnswer(
            _("your function's output does not take part in autograd: o.backward() would not "
              "reach q, k and v. Return the output of your torch.autograd.Function's apply. See "
              "{backward_section}.").format(backward_section=_(BACKWARD_SECTION)))
    grads = torch.autograd.grad(o, leaves, do, allow_unused=True)
    for name, grad, x in zip(("dq", "dk", "dv"), grads, leaves, strict=True):
        if grad is None or grad.shape != x.shape:
            raise registry.WrongAnswer(
                _("your backward returned no {name} of q's shape {shape}: return one gradient per "
                  "input, in the order q, k, v (None for spec). See {backward_section}.").format(
                  name=name, shape=tuple(x.shape), backward_section=_(BACKWARD_SECTION)))
    return (o.detach().clone(), *(g.detach().clone() for g in grads))


# ---------------------------------------------------------------- recognising mistakes


def _close(actual: np.ndarray, candidate: np.ndarray, tol: float = 3e-3) -> bool:
    if actual.shape != candidate.shape:
        return False
    scale = max(1.0, float(np.nanmax(np.abs(candidate), initial=0.0)))
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(actual, candidate, rtol=tol, atol=tol * scale, equal_nan=True))


FORWARD_HINTS = {
    "alibi_sign": (
        N_("The ALiBi bias has the wrong sign: it must lower the scores of keys further in the "
           "past, so the bias of key j seen from query i grows with j - i, times the head's slope "
           "(which is positive). See {spec_section}.")),
    "alibi_first": (
        N_("The ALiBi bias is added before the soft-cap: the specification caps the scaled score "
           "first and adds the bias to the capped value, so the bias is not squeezed by tanh. See "
           "{spec_section}.")),
    "window": (
        N_("The sliding window is off by one: it lets one key too many through on the left. A "
           "window of W keys means the query itself and the W - 1 keys before it. See "
           "{spec_section}.")),
    "partial_unmasked": (
        N_("PARTIAL key blocks are walked like FULL ones: the mask is not applied inside them, so "
           "keys the specification hides (the future, outside the window, other documents, past "
           "N) take part in the softmax. See {forward_section}.")),
    "no_rescale": (
        N_("The running sum and the accumulator are not rescaled when the running max grows: "
           "weights computed against an older max are added to ones computed against the new one. "
           "See {forward_section}.")),
    "full_ignores_docs": (
        N_("Documents are ignored across a block boundary: a key block that the window and the "
           "causal mask cover whole, but that holds another document's keys, is listed as FULL, "
           "so no mask hides those keys. A tile is FULL only if every pair in it is visible. See "
           "{map_section}.")),
}
NAN_EMPTY_ROWS = (
    N_("Rows that see no key at all (padding queries, document id -1) come out NaN: they must "
       "give o = 0 (and a logsumexp of -inf for the backward). Their running sum stays 0 to the "
       "end: the division must not divide by it. See {forward_section}."))
NAN_LOADED_EMPTY = (
    N_("NaN appears in rows that do see keys, and this case stores NaN in the K and V rows of key "
       "blocks that lie wholly in the padding: your kernel loads key blocks the mask leaves "
       "empty. The block map must list no EMPTY tile: skip them, do not mask them. See "
       "{map_section}."))
NAN_SEEN_ROWS = (
    N_("Rows that do see keys come out NaN. A row whose first visited key block hides all its "
       "keys has a running max of -inf there: shift by 0 where the new max is still -inf (lesson "
       "5's safe max). See {forward_section}."))
FORWARD_GENERIC = (
    N_("None of the mistakes the grader knows matches this output. Check, in order: the score_mod "
       "(scale, soft-cap, then ALiBi), the mask (causal, window, documents), the block map (FULL, "
       "PARTIAL, EMPTY) and the online softmax. See {spec_section} and {forward_section}."))


def shown(message: str) -> str:
    """A message of this module's tables in the current language, its sections filled in."""
    return i18n.filled(message, SECTIONS)


def diagnose_forward(out: np.ndarray, inputs: Inputs, case: Case) -> str:
    q, k, v = inputs.clean
    spec = reference_spec(inputs.spec)
    expected, lse = ref.forward(q, k, v, spec)
    nan_rows = np.isnan(out).any(-1)
    if nan_rows.any():
        empty_rows = np.isneginf(lse.numpy())
        if not (nan_rows & ~empty_rows).any():
            return shown(NAN_EMPTY_ROWS)
        return shown(NAN_LOADED_EMPTY if inputs.nan_keys else NAN_SEEN_ROWS)
    dense = {"alibi_sign": dict(alibi_sign=-1.0), "alibi_first": dict(alibi_first=True)}
    for name, options in dense.items():
        if spec.alibi is not None and _close(out, ref.forward(q, k, v, spec, **options)[0]
                                             .numpy()):
            return shown(FORWARD_HINTS[name])
    B, N = case.B, case.N
    pairs = [(m, n) for m, n in TILE_CANDIDATES if m <= max(2 * N, 32) and n <= max(2 * N, 32)]
    for block_m, block_n in pairs:  # the cheap simulations first, for every tile size
        kinds = ref.classify(spec, B, N, block_m, block_n)
        tries = {"partial_unmasked": dict(unmasked_partial=True)}
        if spec.window is not None:
            tries["window"] = dict(window_extra=1)
        for name, options in tries.items():
            candidate, _ = ref.forward(q, k, v, spec, (block_m, block_n), kinds, **options)
            if _close(out, candidate.numpy()):
                return shown(FORWARD_HINTS[name])
        if spec.docs is not None:
            loose = ref.classify(spec, B, N, block_m, block_n, full_ignores_docs=True)
            candidate, _ = ref.forward(q, k, v, spec, (block_m, block_n), loose)
            if _close(out, candidate.numpy()):
                return shown(FORWARD_HINTS["full_ignores_docs"])
    for block_m, block_n in pairs:  # a walk over the blocks: slower
        kinds = ref.classify(spec, B, N, block_m, block_n)
        for full_first in (True, False):
            candidate = ref.no_rescale_forward(q, k, v, spec, block_m, block_n, kinds,
                                               full_first)
            if _close(out, candidate.numpy()):
                return shown(FORWARD_HINTS["no_rescale"])
    return shown(FORWARD_GENERIC)


BACKWARD_HINTS = {
    "softcap_grad": (dict(softcap_grad=False), (
        N_("The gradient does not pass through the soft-cap: s = cap * tanh(x / cap) has the "
           "derivative 1 - tanh^2 with respect to x, and dS must be multiplied by it before it "
           "reaches dQ and dK. See {backward_section}."))),
    "dv_unnormalised": (dict(dv_unnormalised=True), (
        N_("dV is built from weights that were never normalised: the backward must rebuild the "
           "forward's probabilities P from the saved logsumexp, and dV sums P^T dO with those. "
           "See {backward_section}."))),
    "delta_from_do": (dict(delta_from_do=True), (
        N_("delta (the row term of dS) is computed from dO alone: it also needs the forward's "
           "output O, row by row. See {backward_section}."))),
    "dk_scale": (dict(dk_scaled=False), (
        N_("dK lacks the softmax scale: the scores are sm_scale times q.k, so the chain rule "
           "brings sm_scale into dK as it does into dQ. See {backward_section}."))),
    "lse_without_max": (dict(lse_with_max=False), (
        N_("The saved logsumexp leaves out the running max: the running sum holds weights "
           "relative to the max m, so the logsumexp is m plus the log of the sum. The forward's "
           "output is right, but the backward rebuilds P from the wrong L. See "
           "{forward_section}."))),
    "backward_alibi": (dict(backward_alibi=False), (
        N_("The backward rebuilds the scores without the ALiBi bias, so its P is not the "
           "forward's: the score_mod, bias included, must be applied again wherever P is "
           "recomputed (the bias has no gradient of its own). See {backward_section}."))),
}
NAN_GRADS = (
    N_("The gradients hold NaN. Rows that see no key have a logsumexp of -inf: rebuilding P from "
       "it gives exp(-inf - (-inf)) = NaN unless such rows are left out, and their gradients must "
       "be 0. See {backward_section}."))
BACKWARD_GENERIC = (
    N_("None of the mistakes the grader knows matches these gradients. Check, in order: delta, P "
       "rebuilt from the logsumexp with the same score_mod and mask as the forward, dV, dS, the "
       "soft-cap's derivative, then dQ and dK with the scale. See {backward_section}."))


def diagnose_backward(grads, inputs: Inputs, do) -> str:
    if any(np.isnan(g).any() for g in grads):
        return shown(NAN_LOADED_EMPTY if inputs.nan_keys else NAN_GRADS)
    q, k, v = inputs.clean
    spec = reference_spec(inputs.spec)
    for name, (options, hint) in BACKWARD_HINTS.items():
        if name == "softcap_grad" and not spec.softcap:
            continue
        if name == "backward_alibi" and spec.alibi is None:
            continue
        candidate = ref.backward(q, k, v, do, spec, **options)
        if all(_close(g, c.numpy(), 1e-2) for g, c in zip(grads, candidate, strict=True)):
            return shown(hint)
    return shown(BACKWARD_GENERIC)


# ---------------------------------------------------------------- the checks


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().to(torch.float64).numpy()


def _compare_output(out: np.ndarray, inputs: Inputs, case: Case, label: str) -> None:
    q, k, v = inputs.clean
    expected, _unused = ref.forward(q, k, v, reference_spec(inputs.spec))
    atol, rtol = OUT_TOLERANCES[case.dtype]
    try:
        registry.compare(out, expected.numpy(), _("{label}, output o").format(label=label),
                         atol=atol, rtol=rtol)
    except registry.WrongAnswer as err:
        raise registry.WrongAnswer(f"{err}\n{diagnose_forward(out, inputs, case)}") from None


def _cases(visible: list, hidden: list) -> list:
    return [case_for_device(c) for c in registry.with_hidden(visible, hidden)]


def _require_function(fn, exercise_id: str) -> None:
    def inspect():  # a blank never gets here: registry's check refuses it first
        if not callable(fn):
            raise registry.WrongAnswer(
                _("{exercise_id} takes your function (q, k, v, spec) -> o, not a {type_name}. "
                  "See {spec_section}.").format(exercise_id=exercise_id,
                                                type_name=type(fn).__name__,
                                                spec_section=_(SPEC_SECTION)))
        return True

    recording.inspected(f"{exercise_id}: the answer", inspect)  # a record's step, not shown


def check_forward(fn) -> str:
    _require_function(fn, FORWARD_ID)
    cases = _cases(FORWARD_CASES, FORWARD_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        inputs = build_inputs(case)
        out = registry.run_student(_forward_only, label, fn, inputs.q, inputs.k, inputs.v,
                                   inputs.spec, inputs.spec.fields())
        _compare_output(_numpy(out), inputs, case, label)
    return (_("{total} cases match the specification's attention{hidden}").format(total=len(cases),
              hidden=registry.hidden_note()))


def check_backward(fn) -> str:
    _require_function(fn, BACKWARD_ID)
    cases = _cases(BACKWARD_CASES, BACKWARD_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        inputs = build_inputs(case)
        gen = torch.Generator().manual_seed(registry.case_seed(case.seed) + 7)
        do = torch.randn(case.B, case.H, case.N, case.D, generator=gen).to(case.dtype)
        do_placed = buffers.poisoned_heads(do, case.layout, device=runtime.current().device)
        result = registry.run_student(_forward_backward, label, fn, inputs.q, inputs.k,
                                      inputs.v, do_placed, inputs.spec, inputs.spec.fields())
        out, *grads = (_numpy(x) for x in result)
        _compare_output(out, inputs, case, label)
        q, k, v = inputs.clean
        expected = ref.backward(q, k, v, do, reference_spec(inputs.spec))
        atol, rtol = GRAD_TOLERANCES[case.dtype]
        for name, grad, want in zip(("dq", "dk", "dv"), grads, expected, strict=True):
            want = want.numpy()
            scale = max(1.0, float(np.abs(want).max(initial=0.0)))
            try:
                registry.compare(grad, want, f"{label}, {name}", atol=atol * scale, rtol=rtol)
            except registry.WrongAnswer as err:
                hint = diagnose_backward(grads, inputs, do)
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return (_("{total} cases match the specification's gradients, dq, dk and dv{hidden}").format(
              total=len(cases), hidden=registry.hidden_note()))
