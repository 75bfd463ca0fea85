"""Lesson 6's forward checks: the FA2 forward kernel, named mistakes found by a float64
simulation of its block order, and the count of causal tiles never loaded."""

from __future__ import annotations

import numpy as np
import torch

from ...i18n import N_, _
from ...kernels import attention
from .. import buffers, guards, registry
from ..flash_cases import (
    FORWARD_CASES,
    FORWARD_HIDDEN,
    LOG2E,
    NAN_TAIL_HINT,
    Case,
    attention_tolerance,
    case_for_device,
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


EXP_HINT = N_(
    "The kernel works in base 2 (the wrapper folds log2(e) into qk_scale), but {what} uses the "
    "natural exponential: every weight then comes out wrong. Re-read \"Base 2\" in "
    "{forward_section}.")
FORWARD_MISTAKES = [
    (dict(rescale=False),
     N_("The old running sum and accumulator are not rescaled when the running max grows: both "
        "were computed against the old max. See the online softmax of lesson 1 and "
        "{forward_section}.")),
    (dict(rescale_acc=False),
     N_("The running sum l_i is rescaled when the running max grows, but the accumulator acc is "
        "not: acc holds weights computed against the old max too and needs the same rescaling. "
        "See {forward_section}.")),
    (dict(rescale_sum=False),
     N_("The accumulator acc is rescaled when the running max grows, but the running sum l_i is "
        "not: l_i holds weights computed against the old max too and needs the same rescaling. "
        "See {forward_section}.")),
    (dict(exp_p=True, exp_alpha=True), EXP_HINT, N_("the kernel")),
    (dict(exp_p=True), EXP_HINT, N_("the weights p")),
    (dict(exp_alpha=True), EXP_HINT, N_("the rescale factor alpha")),
    (dict(normalise_each_block=True),
     N_("The accumulator is divided by the running sum inside the loop, so earlier blocks are "
        "divided again and again. FlashAttention-2 defers the normalisation to after the loop "
        "({forward_section}).")),
    (dict(strict_mask=True),
     N_("The causal mask is off by one: a query may attend to its own key. With the diagonal "
        "excluded, row 0 sees no key at all and comes out NaN. See \"Causal split\" in "
        "{forward_section}.")),
    (dict(key_mask=False),
     N_("Keys past N take part in the softmax: a key past N reads as 0 (a tensor descriptor fills "
        "rows past the shape with 0, as a masked load does), which gives a score of 0, not \"no "
        "key\". Mask the ragged last block. See \"Masks\" in {forward_section}.")),
]
GENERIC_FORWARD_HINT = (
    N_("None of the mistakes the grader knows matches this output. Compare each update of the "
       "online softmax (running max, rescale factor, weights, running sum, accumulator) and the "
       "two lines after the loop with the recurrences of lesson 1, in base 2 ({forward_section}); "
       "the row block named above is where it first goes wrong."))
STRIDE_HINT = (
    N_("Likely mistake: every output is NaN, so K or V rows come from the NaN padding the grader "
       "puts around the inputs. Rows of a head are a row stride apart, not D: give each tensor "
       "descriptor the strides you are given (and each pointer the batch and head offsets). See "
       "\"Strides, not shapes\" and \"K and V through tensor descriptors\" in {forward_section}."))


OVERFLOW_HINT = (
    N_("Likely mistake: with large scores every output is NaN or inf, so the weights overflowed "
       "or all underflowed to 0. The weights stay in (0, 1] only if the running max is the max "
       "of the *scaled* scores, with the same scaling as the scores in the exponent. See "
       "\"Base 2, with the scale in the FMA\" in {forward_section}."))


def _diagnose_forward(out: np.ndarray, case: Case, q, k, v) -> str:
    if case.dtype == torch.float32:
        for switches, hint, *what in FORWARD_MISTAKES:
            if switches.get("strict_mask") and not case.causal:
                continue
            candidate = blocked_forward(q, k, v, case.causal, case.scale(), case.block_m,
                                        case.block_n, **switches).numpy()
            if close_to(out, candidate):
                named = shown(hint, what=_(what[0]) if what else "")
                return _("Likely mistake: {hint}").format(hint=named)
    if not np.isfinite(out).any():  # no tail read gives NaN: K and V come through descriptors
        return shown(OVERFLOW_HINT if case.large else STRIDE_HINT)
    if np.isnan(out).any() and case.N % case.block_n:
        return shown(NAN_TAIL_HINT)
    return shown(GENERIC_FORWARD_HINT)


def _run_forward(kernel, case: Case, label: str):
    q, k, v = case_inputs(case)
    qp, kp, vp = (guards.place_heads(x, case.layout, pad_of(case)) for x in (q, k, v))
    out = buffers.Canaried((case.B, case.H, case.N, case.D), case.dtype, kernel_device(),
                           pad_rows=pad_of(case))
    lse = buffers.Canaried((case.B, case.H, case.N), torch.float32, kernel_device(),
                           pad_cols=pad_of(case))
    launch_case(attention.flash_forward, label, kernel, qp, kp, vp, case.causal, case.sm_scale,
            block_m=case.block_m, block_n=case.block_n, out=out.tensor, lse=lse.tensor)
    for buffer, name in ((out, _("output O")), (lse, _("logsumexp L"))):
        verify_canaries(buffer, f"{label}, {name}")
    return q, k, v, out.tensor.detach().cpu(), lse.tensor.detach().cpu()


@registry.exercise("flash-triton/forward", N_("FA2 forward kernel in Triton (O and L)"), 2,
                   kernel=True)
def _check_forward(kernel) -> str:
    guards.require_jit_kernel(kernel, "flash-triton/forward")
    cases = registry.with_hidden(FORWARD_CASES, FORWARD_HIDDEN)
    for number, case in enumerate(cases, 1):
        case = case_for_device(case)
        label = case_label(case, number, len(cases))
        q, k, v, out, lse = _run_forward(kernel, case, label)
        ref, ref_lse = attention.standard_attention(
            *(x.to(torch.float64) for x in (q, k, v)), causal=case.causal,
            sm_scale=case.scale(), return_lse=True)
        atol, rtol = attention_tolerance(case)
        out64 = out.to(torch.float64).numpy()
        try:
            registry.compare(out64, ref.numpy(), f"{label}, {_('output O')}", atol=atol, rtol=rtol,
                            tile_rows=case.block_m)
        except registry.WrongAnswer as err:
            hint = where_wrong(out64, ref.numpy(), atol, rtol) or \
                _diagnose_forward(out64, case, q, k, v)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
        lse64 = lse.to(torch.float64).numpy()
        try:
            l_atol, l_rtol = (2e-3, 1e-5) if kernel_device() == "cpu" else (4e-3, 4e-3)  # TF32
            registry.compare(lse64, ref_lse.numpy(), f"{label}, {_('logsumexp L')}", atol=l_atol,
                            rtol=l_rtol)
        except registry.WrongAnswer as err:
            if close_to(lse64, ref_lse.numpy() * LOG2E, 1e-4):
                hint = (_("Likely mistake: L is in log2 units. The running max and the log of "
                          "the running sum are base 2 because the kernel uses exp2; L is a "
                          "natural logarithm, so convert the base before storing it (section 2)."))
            else:
                hint = (_("L must be the natural-log logsumexp of each row of the scaled scores, "
                          "built from the kernel's base-2 running max and running sum (section "
                          "2)."))
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    hidden = registry.hidden_note()
    return _("{total} cases match standard attention, O and L{hidden}").format(total=len(cases),
             hidden=hidden)


# ---------------------------------------------------------------- skipped blocks


SKIP_CASES = [(64, 16, 16), (4096, 64, 64), (100, 32, 16), (50, 32, 32), (1, 16, 16),
              (4096, 128, 64), (1000, 64, 32), (16384, 128, 128)]


@registry.exercise("flash-triton/skipped-blocks", N_("count the causal tiles never loaded"), 1)
def _check_skipped(skipped_tiles) -> str:
    if not callable(skipped_tiles):
        raise registry.WrongAnswer(_("Pass the function itself: check(..., "
                                     "causal_skipped_tiles)."))
    for n, bm, bn in SKIP_CASES:
        label = f"n={n}, block_m={bm}, block_n={bn}"
        got = registry.run_student(skipped_tiles, label, n, bm, bn)
        visited, skipped = attention.causal_tiles(n, bm, bn)
        if got != skipped:
            total = visited + skipped
            hint = (_("you returned the tiles visited, not skipped") if got == visited else
                    _("there are {total} tiles in all, a partial last block counting as a block "
                      "(round up, not down); count, for each query block, the key blocks that lie "
                      "entirely right of its last row").format(total=total))
            raise registry.WrongAnswer(_("{label}: you returned {got!r}, which is not the number "
                                         "of tiles skipped here: {hint}.").format(label=label,
                                         got=got, hint=hint))
    return _("{total} sizes counted right").format(total=len(SKIP_CASES))
