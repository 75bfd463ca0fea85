"""What the checks of lessons 6 and 7 share: the cases, where kernel inputs live, guarded
launches, and the hints for launches that fail or outputs wrong in some slices."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from .. import i18n, runtime
from ..i18n import N_, _
from ..kernels import attention
from . import guards, registry

LOG2E = attention.LOG2E


Case = attention.AttentionCase


FORWARD_CASES = [
    Case(2, 2, 40, 16, False, seed=1),  # ragged N: 40 = 2.5 blocks of 16
    Case(2, 3, 50, 32, True, seed=2, block_m=32, block_n=16, sm_scale=0.25),
    Case(1, 2, 77, 16, False, seed=3, large=True, block_m=32, block_n=32),
    Case(2, 2, 40, 16, True, seed=4, layout="bnhd", sm_scale=0.3),
    Case(2, 2, 70, 32, True, torch.float16, seed=5, large=True, block_m=32, block_n=32),
    Case(1, 1, 33, 64, False, torch.float16, seed=6),
]
FORWARD_HIDDEN = [
    Case(1, 1, 1, 16, True, seed=101),
    Case(1, 2, 97, 16, True, seed=102, block_m=64, block_n=32),
    Case(2, 1, 45, 32, False, torch.float16, seed=103, layout="bnhd", large=True),
]
BACKWARD_CASES = [
    Case(2, 2, 40, 16, True, seed=11),
    Case(2, 2, 37, 32, False, seed=12, block_m=16, block_n=32, sm_scale=0.3),
    Case(2, 2, 36, 16, True, seed=13, layout="bnhd", block_m=32, block_n=16),
    Case(1, 2, 45, 16, True, torch.float16, seed=14),
]
BACKWARD_HIDDEN = [
    Case(1, 1, 1, 16, True, seed=111),
    Case(2, 1, 50, 32, False, torch.float16, seed=112, layout="bnhd", large=True),
]
GRAD_TOLERANCES = {torch.float32: (2e-4, 1e-3), torch.float16: (1e-2, 1e-2)}


def kernel_device() -> str:
    """Kernel arguments live here; references are always computed on the CPU in float64."""
    return runtime.current().device


def case_for_device(case: Case) -> Case:
    """On a GPU, tl.dot rounds float32 to TF32 (10-bit mantissa): with scores of 1e3 that alone
    moves scores by about 0.5, so large-logit cases run in float16 there (exact products)."""
    if kernel_device() != "cpu" and case.dtype == torch.float32 and case.large:
        return dataclasses.replace(case, dtype=torch.float16)
    return case


# Scores of ~1e3 in float32 carry a rounding error of about 1e3 * 2**-24 * sqrt(D) each, which
# exp turns into relative errors of that size in the weights, and the order of a dot's sums
# (the interpreter's BLAS threads) moves it: right kernels were seen 2.8e-4 off at one output.
LARGE_SCORE_FP32_ATOL = 1e-3


def attention_tolerance(case: Case) -> tuple[float, float]:
    """(atol, rtol) of an attention output in `case`: the dtype's (guards.dot_tolerance), with
    the absolute part widened for float32 cases of large scores."""
    atol, rtol = guards.dot_tolerance(guards.ATTENTION_TOLERANCES, case.dtype)
    if case.large and case.dtype == torch.float32:
        atol = max(atol, LARGE_SCORE_FP32_ATOL)
    return atol, rtol


# ---------------------------------------------------------------- helpers


def case_label(case: Case, number: int, total: int) -> str:
    """How a failure names an attention case (the checks of lessons 6 to 8)."""
    extras = [f"sm_scale={case.sm_scale:g}"] if case.sm_scale is not None else []
    if case.large:
        extras.append(_("scores ~1e3"))
    if case.layout == "bnhd":
        extras.append(_("inputs are transposed views of (B, N, H, D) tensors"))
    return _("case {number}/{total} (B={B}, H={H}, N={N}, D={D}, {dtype}, {causal}, "
             "BLOCK_M={block_m}, BLOCK_N={block_n}{extra})").format(
        number=number, total=total, B=case.B, H=case.H, N=case.N, D=case.D,
        dtype=str(case.dtype).replace("torch.", ""),
        causal=_("causal") if case.causal else _("not causal"), block_m=case.block_m,
        block_n=case.block_n, extra="".join(f", {e}" for e in extras))


def shown(message: str, **fields) -> str:
    """A message of the tables of lessons 6 and 7 in the current language, with the section
    it names ({forward_section}) and `fields` filled in."""
    return i18n.filled(message, {"forward_section": FORWARD_SECTION}, **fields)


def pad_of(case: Case) -> int:
    return max(case.block_m, case.block_n)


OFFSET_HINT = (N_("If the stores are masked, check the batch and head offsets of this output: use "
                  "its own batch and head strides, never the head stride times a head count. See "
                  "\"Strides, not shapes\" and \"Masks\" in lesson 6, section 2 (\"The FA2 "
                  "forward kernel\")."))


def verify_canaries(buffer, label: str) -> None:
    try:
        buffer.verify(label)
    except registry.WrongAnswer as err:
        raise registry.WrongAnswer(f"{err}\n{_(OFFSET_HINT)}") from None


def case_inputs(case: Case):
    q, k, v = attention.make_inputs(case.B, case.H, case.N, case.D, case.dtype, seed=case.seed,
                                    large_logits=case.large, sm_scale=case.sm_scale)
    return q, k, v


def launch_case(fn, label, *args, **kwargs):
    """Run a launcher; turn Triton and Python errors into a WrongAnswer naming the case."""
    try:
        return guards.guarded(label, lambda: fn(*args, **kwargs),
                              tensors=guards.tensors_in(args, kwargs))
    except registry.WrongAnswer as err:
        if not isinstance(err, guards.LaunchFailed):  # its message is translated
            raise
        cause = err.__cause__
        text = f"{err} {cause!r}" if cause is not None else str(err)
        raise registry.WrongAnswer(f"{err}\n{launch_hint(text)}") from cause


def close_to(actual: np.ndarray, candidate: np.ndarray, tol: float = 2e-3) -> bool:
    """True when actual equals candidate up to fp32 rounding (NaN where it has NaN)."""
    if actual.shape != candidate.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(actual, candidate, rtol=tol, atol=tol, equal_nan=True))


def where_wrong(actual: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> str:
    """A hint when only some (batch, head) slices are wrong: an offset mistake."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(actual - expected) <= atol + rtol * np.abs(expected))  # NaN counts
    per_slice = bad.reshape(bad.shape[0], bad.shape[1], -1).any(-1)  # (B, H)
    if per_slice.all() or not per_slice.any():
        return ""
    if per_slice[0, 0]:  # the first slice is wrong too: not an offset mistake
        return ""
    if not per_slice[0].any():
        return (_("Likely mistake: batch 0 is right but later batches are not. The batch offset "
                  "must use the batch stride: here the inputs are not contiguous, so the batch "
                  "stride is not H times the head stride. See \"Strides, not shapes\" in lesson "
                  "6, section 2."))
    return (_("Likely mistake: the (batch, head) slice (0, 0) is right but others are not: the "
              "offset of each program's (batch, head) slice is wrong. Which slice a program owns, "
              "and how far its data lies from the start, are explained in \"Strides, not shapes\" "
              "in lesson 6, section 2."))


FORWARD_SECTION = N_("lesson 6, section 2 (\"The FA2 forward kernel\")")
NAN_TAIL_HINT = (
    N_("Likely mistake: the last block reads past N. The grader surrounds the inputs with NaN, so "
       "an unmasked load or store past the end shows up here. See \"Masks\" in "
       "{forward_section}."))
DOT_DTYPE_HINT = (
    N_("Likely mistake: the operands of a tl.dot have different dtypes. The weights p (or dS) are "
       "float32 but V (or K, Q) are float16 here: convert the float32 operand to the other "
       "operand's dtype with .to(...) before tl.dot. The float32 cases pass because both operands "
       "are float32 there. See {forward_section}."))
SIGNATURE_HINT = (N_("Read the kernel's signature in the lesson: the grader passes exactly those "
                     "arguments."))


def launch_hint(text: str) -> str:
    """The hint for a kernel that failed to compile or run, from the error's text."""
    if "same dtype" in text or ("dtype" in text and "dot" in text):
        return shown(DOT_DTYPE_HINT)
    if any(word in text for word in ("argument", "positional", "keyword", "missing")):
        return _(SIGNATURE_HINT)
    return (_("The error above names the line of your kernel that failed: the message says what "
              "Triton could not do there."))
