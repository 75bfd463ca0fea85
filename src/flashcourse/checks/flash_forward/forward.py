"""Lesson 6's forward checks: the FA2 forward kernel, named mistakes found by a float64
simulation of its block order, and the count of causal tiles never loaded."""

from __future__ import annotations

import numpy as np
import torch

from ...kernels import attention
from .. import buffers, guards, registry
from ..flash_cases import (
    FORWARD_CASES,
    FORWARD_HIDDEN,
    FORWARD_SECTION,
    LOG2E,
    NAN_TAIL_HINT,
    Case,
    case_for_device,
    case_inputs,
    close_to,
    kernel_device,
    launch_case,
    pad_of,
    verify_canaries,
    where_wrong,
)

# ---------------------------------------------------------------- forward


def blocked_forward(q, k, v, causal, sm_scale, block_m, block_n, *, rescale=True,
                    normalise_each_block=False, strict_mask=False, key_mask=True,
                    rescale_sum=True, rescale_acc=True, exp_p=False, exp_alpha=False):
    """float64 simulation of the lesson kernel's block order, with switches that reproduce
    the classic mistakes. Returns the output (B, H, N, D)."""
    q, k, v = (x.to(torch.float64) for x in (q, k, v))
    B, H, N, D = q.shape
    out = torch.empty_like(q)
    scale = sm_scale * LOG2E
    for start in range(0, N, block_m):
        qi = q[:, :, start:start + block_m]
        rows = torch.arange(start, start + qi.shape[2])
        m = torch.full(qi.shape[:3], float("-inf"), dtype=torch.float64)
        l_sum = torch.zeros(qi.shape[:3], dtype=torch.float64)
        acc = torch.zeros_like(qi)
        ranges = ([(0, start, False), (start, min(start + block_m, N), True)] if causal
                  else [(0, N, False)])
        for lo, hi, diagonal in ranges:
            for j in range(lo, hi, block_n):
                kj, vj = k[:, :, j:j + block_n], v[:, :, j:j + block_n]
                cols = torch.arange(j, j + block_n)
                if not key_mask and kj.shape[2] < block_n:  # padded keys read as zeros
                    pad = block_n - kj.shape[2]
                    kj = torch.cat([kj, kj.new_zeros(B, H, pad, D)], 2)
                    vj = torch.cat([vj, vj.new_zeros(B, H, pad, D)], 2)
                s = (qi @ kj.transpose(-1, -2)) * scale
                keep = torch.ones(len(rows), kj.shape[2], dtype=torch.bool)
                if diagonal:
                    c = cols[:kj.shape[2]]
                    keep = rows[:, None] > c[None, :] if strict_mask else \
                        rows[:, None] >= c[None, :]
                s = s.masked_fill(~keep, float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                alpha = (torch.exp if exp_alpha else torch.exp2)(m - m_new) if rescale \
                    else torch.ones_like(m)
                p = (torch.exp if exp_p else torch.exp2)(s - m_new[..., None])
                l_sum = l_sum * (alpha if rescale_sum else 1.0) + p.sum(-1)
                acc = acc * (alpha[..., None] if rescale_acc else 1.0) + p @ vj
                if normalise_each_block:
                    acc = acc / l_sum[..., None]
                m = m_new
        out[:, :, start:start + block_m] = acc if normalise_each_block else \
            acc / l_sum[..., None]
    return out


EXP_HINT = (
    "The kernel works in base 2 (the wrapper folds log2(e) into qk_scale), but {what} uses the "
    "natural exponential: every weight then comes out wrong. Re-read \"Base 2\" in "
    + FORWARD_SECTION + ".")
FORWARD_MISTAKES = [
    (dict(rescale=False),
     "The old running sum and accumulator are not rescaled when the running max grows: both "
     "were computed against the old max. See the online softmax of lesson 1 and "
     f"{FORWARD_SECTION}."),
    (dict(rescale_acc=False),
     "The running sum l_i is rescaled when the running max grows, but the accumulator acc is "
     "not: acc holds weights computed against the old max too and needs the same rescaling. "
     f"See {FORWARD_SECTION}."),
    (dict(rescale_sum=False),
     "The accumulator acc is rescaled when the running max grows, but the running sum l_i is "
     "not: l_i holds weights computed against the old max too and needs the same rescaling. "
     f"See {FORWARD_SECTION}."),
    (dict(exp_p=True, exp_alpha=True), EXP_HINT.format(what="the kernel")),
    (dict(exp_p=True), EXP_HINT.format(what="the weights p")),
    (dict(exp_alpha=True), EXP_HINT.format(what="the rescale factor alpha")),
    (dict(normalise_each_block=True),
     "The accumulator is divided by the running sum inside the loop, so earlier blocks are "
     "divided again and again. FlashAttention-2 defers the normalisation to after the loop "
     f"({FORWARD_SECTION})."),
    (dict(strict_mask=True),
     "The causal mask is off by one: a query may attend to its own key. With the diagonal "
     "excluded, row 0 sees no key at all and comes out NaN. See \"Causal split\" in "
     f"{FORWARD_SECTION}."),
    (dict(key_mask=False),
     "Keys past N take part in the softmax: a key past N reads as 0 (a tensor descriptor "
     "fills rows past the shape with 0, as a masked load does), which gives a score of 0, not "
     f"\"no key\". Mask the ragged last block. See \"Masks\" in {FORWARD_SECTION}."),
]
GENERIC_FORWARD_HINT = (
    "None of the mistakes the grader knows matches this output. Compare each update of the "
    "online softmax (running max, rescale factor, weights, running sum, accumulator) and the "
    f"two lines after the loop with the recurrences of lesson 1, in base 2 ({FORWARD_SECTION}); "
    "the row block named above is where it first goes wrong.")
STRIDE_HINT = (
    "Likely mistake: every output is NaN, so K or V rows come from the NaN padding the grader "
    "puts around the inputs. Rows of a head are a row stride apart, not D: give each tensor "
    "descriptor the strides you are given (and each pointer the batch and head offsets). See "
    f"\"Strides, not shapes\" and \"K and V through tensor descriptors\" in {FORWARD_SECTION}.")


OVERFLOW_HINT = (
    "Likely mistake: with large scores every output is NaN or inf, so the weights overflowed "
    "or all underflowed to 0. exp2(s * qk_scale - m) stays in (0, 1] only if m is the running "
    "max of the *scaled* scores, max(s) * qk_scale, the same scaling as in the exponent. See "
    f"\"Base 2, with the scale in the FMA\" in {FORWARD_SECTION}.")


def _diagnose_forward(out: np.ndarray, case: Case, q, k, v) -> str:
    if case.dtype == torch.float32:
        for switches, hint in FORWARD_MISTAKES:
            if switches.get("strict_mask") and not case.causal:
                continue
            candidate = blocked_forward(q, k, v, case.causal, case.scale(), case.block_m,
                                        case.block_n, **switches).numpy()
            if close_to(out, candidate):
                return "Likely mistake: " + hint
    if not np.isfinite(out).any():  # no tail read gives NaN: K and V come through descriptors
        return OVERFLOW_HINT if case.large else STRIDE_HINT
    if np.isnan(out).any() and case.N % case.block_n:
        return NAN_TAIL_HINT
    return GENERIC_FORWARD_HINT


def _run_forward(kernel, case: Case, label: str):
    q, k, v = case_inputs(case)
    qp, kp, vp = (guards.place_heads(x, case.layout, pad_of(case)) for x in (q, k, v))
    out = buffers.Canaried((case.B, case.H, case.N, case.D), case.dtype, kernel_device(),
                           pad_rows=pad_of(case))
    lse = buffers.Canaried((case.B, case.H, case.N), torch.float32, kernel_device(),
                           pad_cols=pad_of(case))
    launch_case(attention.flash_forward, label, kernel, qp, kp, vp, case.causal, case.sm_scale,
            block_m=case.block_m, block_n=case.block_n, out=out.tensor, lse=lse.tensor)
    for buffer, name in ((out, "output O"), (lse, "logsumexp L")):
        verify_canaries(buffer, f"{label}, {name}")
    return q, k, v, out.tensor.detach().cpu(), lse.tensor.detach().cpu()


@registry.exercise("flash-triton/forward", "FA2 forward kernel in Triton (O and L)", 2,
                   kernel=True)
def _check_forward(kernel) -> str:
    guards.require_jit_kernel(kernel, "flash-triton/forward")
    cases = registry.with_hidden(FORWARD_CASES, FORWARD_HIDDEN)
    for number, case in enumerate(cases, 1):
        case = case_for_device(case)
        label = case.label(number, len(cases))
        q, k, v, out, lse = _run_forward(kernel, case, label)
        ref, ref_lse = attention.standard_attention(
            *(x.to(torch.float64) for x in (q, k, v)), causal=case.causal,
            sm_scale=case.scale(), return_lse=True)
        atol, rtol = guards.dot_tolerance(guards.ATTENTION_TOLERANCES, case.dtype)
        out64 = out.to(torch.float64).numpy()
        try:
            registry.compare(out64, ref.numpy(), label + ", output O", atol=atol, rtol=rtol,
                            tile_rows=case.block_m)
        except registry.WrongAnswer as err:
            hint = where_wrong(out64, ref.numpy(), atol, rtol) or \
                _diagnose_forward(out64, case, q, k, v)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
        lse64 = lse.to(torch.float64).numpy()
        try:
            l_atol, l_rtol = (2e-3, 1e-5) if kernel_device() == "cpu" else (4e-3, 4e-3)  # TF32
            registry.compare(lse64, ref_lse.numpy(), label + ", logsumexp L", atol=l_atol,
                            rtol=l_rtol)
        except registry.WrongAnswer as err:
            if close_to(lse64, ref_lse.numpy() * LOG2E, 1e-4):
                hint = ("Likely mistake: L is in log2 units. m_i and log2(l_i) are base 2 "
                        "because the kernel uses exp2; store (m_i + log2(l_i)) * ln(2).")
            else:
                hint = ("L must be the natural-log logsumexp of each row of sm_scale * q k^T: "
                        "(m_i + log2(l_i)) * ln(2) with the kernel's base-2 running max.")
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    hidden = registry.hidden_note()
    return f"{len(cases)} cases match standard attention, O and L{hidden}"


# ---------------------------------------------------------------- skipped blocks


SKIP_CASES = [(64, 16, 16), (4096, 64, 64), (100, 32, 16), (50, 32, 32), (1, 16, 16),
              (4096, 128, 64), (1000, 64, 32), (16384, 128, 128)]


@registry.exercise("flash-triton/skipped-blocks", "count the causal tiles never loaded", 1)
def _check_skipped(skipped_tiles) -> str:
    if not callable(skipped_tiles):
        raise registry.WrongAnswer("Pass the function itself: check(..., causal_skipped_tiles).")
    for n, bm, bn in SKIP_CASES:
        label = f"n={n}, block_m={bm}, block_n={bn}"
        got = registry.run_student(skipped_tiles, label, n, bm, bn)
        visited, skipped = attention.causal_tiles(n, bm, bn)
        if got != skipped:
            total = visited + skipped
            hint = ("you returned the tiles visited, not skipped" if got == visited else
                    f"there are {total} tiles in all, a partial last block counting as a "
                    "block (round up, not down); count, for each query block, the key blocks "
                    "that lie entirely right of its last row")
            raise registry.WrongAnswer(f"{label}: you returned {got!r}, which is not the number "
                                      f"of tiles skipped here: {hint}.")
    return f"{len(SKIP_CASES)} sizes counted right"
