"""Lesson 6's forward kernel written from scratch: attention of left-padded batches, where key
blocks and whole rows see no key. The launcher and the float64 reference are in
kernels/padded.py (the lesson shows them); named mistakes are found from where the NaN lie,
and by a float64 simulation of the kernel's block order with that mistake switched on."""

from __future__ import annotations

import math

import numpy as np
import torch

from ...i18n import N_, _
from ...kernels.padded import padded_forward, padded_reference, visible_keys  # noqa: F401
from .. import buffers, guards, registry
from ..flash_cases import (
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

SCRATCH_ID = "flash-triton/forward-from-scratch"
SCRATCH_SECTION = (N_("section 2 (\"The FA2 forward kernel\"), \"A forward kernel from scratch: "
                      "padded batches\""))


FLOAT32_TINY = 2.0**-149  # the smallest float32 above 0


def simulate_padded(q, k, v, kv_start, causal, sm_scale, block_m, block_n, *, skip_padding=True,
                    rescale=True, strict_mask=False, ignore_padding=False, lse_without_max=False,
                    scale=None, normalise_each_block=False, m_start=float("-inf")):
    """float64 simulation of the kernel's block order (key blocks from the one holding
    kv_start, or from 0), with switches for known mistakes; rows with no key: O = 0, L = -inf
    (NaN mistakes are recognised from where the NaN lie, not simulated). Returns (O, L)."""
    q, k, v = (x.to(torch.float64).cpu() for x in (q, k, v))
    B, H, N, D = q.shape
    qk = (sm_scale * LOG2E if scale is None else scale)
    out = torch.zeros_like(q)
    lse = torch.full((B, H, N), float("-inf"), dtype=torch.float64)
    for b in range(B):
        start_key = int(kv_start[b])
        first_seen = 0 if ignore_padding else start_key
        for start in range(0, N, block_m):
            rows = torch.arange(start, min(start + block_m, N))
            qi = q[b, :, rows]
            m = torch.full((H, len(rows)), m_start, dtype=torch.float64)
            l_sum = torch.zeros(H, len(rows), dtype=torch.float64)
            acc = torch.zeros(H, len(rows), D, dtype=torch.float64)
            hi = min(start + block_m, N) if causal else N
            lo = start_key // block_n * block_n if skip_padding else 0
            for j in range(lo, hi, block_n):
                cols = torch.arange(j, min(j + block_n, N))
                s = (qi @ k[b, :, cols].transpose(-1, -2)) * qk
                keep = (cols[None, :] >= first_seen).expand(len(rows), -1)
                if causal:
                    keep = keep & ((rows[:, None] > cols[None, :]) if strict_mask
                                   else (rows[:, None] >= cols[None, :]))
                s = s.masked_fill(~keep, float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                shift = torch.where(torch.isinf(m_new), 0.0, m_new)
                alpha = torch.exp2(m - shift) if rescale else torch.ones_like(m)
                p = torch.exp2(s - shift[..., None])
                p = p.masked_fill(p < FLOAT32_TINY, 0.0)  # what float32 underflows to 0
                l_sum = l_sum * alpha + p.sum(-1)
                acc = acc * alpha[..., None] + p @ v[b, :, cols]
                if normalise_each_block:
                    acc = acc / torch.where(l_sum > 0, l_sum, 1.0)[..., None]
                m = m_new
            has = l_sum > 0
            out[b, :, rows] = acc if normalise_each_block else \
                acc / torch.where(has, l_sum, 1.0)[..., None]
            safe_l = torch.where(has, l_sum, 1.0)
            lse_rows = torch.log2(safe_l) if lse_without_max else m + torch.log2(safe_l)
            lse[b, :, rows] = torch.where(has, lse_rows * math.log(2.0), float("-inf"))
    return out, lse


# (case, kv_start of each batch): keys j < kv_start[b] are padding
SCRATCH_CASES = [
    (Case(2, 2, 40, 16, False, seed=31), (0, 21)),  # batch 1: its first key block is padding
    (Case(2, 2, 40, 16, True, seed=32, sm_scale=0.3), (0, 21)),  # rows 0-20 of batch 1: no key
    (Case(2, 1, 50, 32, True, seed=33, large=True, layout="bnhd", block_m=32, block_n=16),
     (3, 50)),  # batch 1 is padding only: every row sees no key
    (Case(1, 2, 33, 16, True, torch.float16, seed=34), (0,)),
    (Case(2, 2, 45, 32, False, torch.float16, seed=35, layout="bnhd"), (17, 0)),
]
SCRATCH_HIDDEN = [
    (Case(1, 1, 1, 16, True, seed=131), (0,)),
    (Case(2, 1, 97, 16, True, seed=132, block_m=64, block_n=32), (40, 96)),
    (Case(1, 2, 70, 32, False, torch.float16, seed=133, large=True), (5,)),
]
SCRATCH_MISTAKES = [
    (dict(rescale=False),
     N_("The running sum and the accumulator are not rescaled when the running max grows: both "
        "hold weights computed against the old max.")),
    (dict(strict_mask=True),
     N_("The causal mask is off by one: row i must see key i itself (keys j <= i).")),
    (dict(ignore_padding=True),
     N_("Padding keys take part in the softmax: keys j < kv_start[b] of batch b must get a score "
        "of -inf, like the keys past N.")),
    (dict(scale="ln2"),
     N_("The scores are scaled by sm_scale but the kernel uses exp2: exp(x) = exp2(x * log2(e)), "
        "so log2(e) belongs in the scale.")),
    (dict(scale="rsqrt_d"),
     N_("The kernel scales by 1 / sqrt(D) instead of the sm_scale it is given (this case passes "
        "another scale).")),
    (dict(m_start=0.0),
     N_("The running max starts at 0 instead of -inf: a row whose scores all lie far below 0 then "
        "gets weights exp2(s - 0) that underflow to 0, and ends up like a row without keys: the "
        "running max must start where no score has been seen yet.")),
    (dict(normalise_each_block=True),
     N_("The accumulator is divided by the running sum inside the loop; earlier blocks are then "
        "divided again and again. Normalise once, after the loop.")),
]
SCRATCH_NAN_KEYED = (
    N_("Likely mistake: rows that do see keys come out NaN, and each of them starts with a key "
       "block where it sees none. There the running max is still -inf and the weights are "
       "exp2(-inf - (-inf)) = NaN, which poisons the running sum for good. Where the new max is "
       "-inf, shift the scores by 0 instead (lesson 5's safe max), or skip key blocks that lie "
       "entirely in the padding."))
SCRATCH_NAN_EMPTY = (
    N_("Likely mistake: rows that see no key at all come out NaN. Such a row keeps a running max "
       "of -inf and a running sum of 0 to the end: the weights exp2(s - m_new) compute -inf - "
       "(-inf) = NaN unless the shift is 0 where the new max is -inf (lesson 5's safe max), and "
       "acc / l is 0 / 0 unless you divide only where l > 0. Such a row must end with O = 0 and L "
       "= -inf."))
SCRATCH_GENERIC = (
    N_("None of the mistakes the grader knows matches this output. Check, in order: the offsets "
       "of batch b and head h, the padding and causal masks (-inf scores), the online softmax in "
       "base 2 with the scale log2(e) * sm_scale, and the division after the loop; the row block "
       "named above is where it first goes wrong."))


def _scratch_label(case: Case, starts, number: int, total: int) -> str:
    return case_label(case, number, total)[:-1] + f", kv_start={list(starts)})"


def _first_block_empty(seen: torch.Tensor, block_n: int) -> torch.Tensor:
    """(B, 1, N): rows that see a key but none in key block 0."""
    return seen.any(-1) & ~seen[..., :block_n].any(-1)


def _diagnose_scratch(out, lse, case: Case, starts, q, k, v) -> str:
    kv_start = torch.tensor(starts)
    seen = visible_keys(case.N, kv_start, case.causal)  # (B, 1, N, N)
    has_key = seen.any(-1).expand(case.B, case.H, case.N).numpy()
    nan_rows = np.isnan(out).any(-1)
    if nan_rows.any():
        if (nan_rows & has_key).any():
            late = _first_block_empty(seen, case.block_n).expand(case.B, case.H, case.N)
            if not (nan_rows & has_key & ~late.numpy()).any():
                return _(SCRATCH_NAN_KEYED)
            return shown(NAN_TAIL_HINT) if case.N % case.block_n else _(SCRATCH_GENERIC)
        return _(SCRATCH_NAN_EMPTY)
    tol = guards.mistake_tolerance(case.dtype)
    scales = {"ln2": case.scale(), "rsqrt_d": LOG2E / math.sqrt(case.D)}
    for switches, hint in SCRATCH_MISTAKES:
        if switches.get("strict_mask") and not case.causal:
            continue
        if switches.get("scale") == "rsqrt_d" and case.sm_scale is None:
            continue
        options = dict(switches)
        if "scale" in options:
            options["scale"] = scales[options["scale"]]
        for skip in (True, False):
            candidate, _unused = simulate_padded(q, k, v, kv_start, case.causal,
                                                 case.scale(), case.block_m, case.block_n,
                                                 skip_padding=skip, **options)
            if close_to(out, candidate.numpy(), tol):
                return _("Likely mistake: {hint} See {section}.").format(
                    hint=_(hint), section=_(SCRATCH_SECTION))
    return _(SCRATCH_GENERIC)


def _diagnose_scratch_lse(lse, ref_lse, case: Case, starts, q, k, v) -> str:
    empty = np.isneginf(ref_lse)
    if np.isnan(lse[empty]).any():
        return _(SCRATCH_NAN_EMPTY)
    if not np.isneginf(lse[empty]).all():
        return (_("Likely mistake: a row that sees no key must store L = -inf (the log of an "
                  "empty sum), not a number. See {section}.").format(
                  section=_(SCRATCH_SECTION)))
    finite = ~empty
    if close_to(lse[finite], ref_lse[finite] * LOG2E, 1e-4):
        return (_("Likely mistake: L is in log2 units: the running max and log2 of the running "
                  "sum are base 2 because the kernel uses exp2; multiply by ln(2)."))
    _unused, candidate = simulate_padded(q, k, v, torch.tensor(starts), case.causal,
                                         case.scale(), case.block_m, case.block_n,
                                         lse_without_max=True)
    if close_to(lse, candidate.numpy(), 1e-3):
        return (_("Likely mistake: L leaves out the running max: the running sum holds weights "
                  "taken against the running max, so the logsumexp of the scores is not the log "
                  "of that sum alone. See {section}.").format(
                  section=_(SCRATCH_SECTION)))
    return (_("L must be the natural-log logsumexp of each row's visible scaled scores, rebuilt "
              "from the running max and sum the loop ends with, which live in base 2. See "
              "{section}.").format(section=_(SCRATCH_SECTION)))


@registry.exercise(SCRATCH_ID, N_("FlashAttention forward from scratch: padding, causal, O "
                                  "and L"), 3,
                   kernel=True)
def _check_forward_from_scratch(kernel) -> str:
    guards.require_jit_kernel(kernel, SCRATCH_ID)
    cases = registry.with_hidden(SCRATCH_CASES, SCRATCH_HIDDEN)
    for number, (case, starts) in enumerate(cases, 1):
        case = case_for_device(case)
        label = _scratch_label(case, starts, number, len(cases))
        q, k, v = case_inputs(case)
        kv_start = torch.tensor(starts, dtype=torch.int32)
        pad = pad_of(case)
        placed = [guards.place_heads(x, case.layout, pad) for x in (q, k, v)]
        starts_placed = buffers.poisoned(kv_start.to(kernel_device()))
        out = buffers.Canaried((case.B, case.H, case.N, case.D), case.dtype, kernel_device(),
                               pad_rows=pad)
        lse = buffers.Canaried((case.B, case.H, case.N), torch.float32, kernel_device(),
                               pad_cols=pad)
        launch_case(padded_forward, label, kernel, *placed, starts_placed, case.causal,
                case.sm_scale, block_m=case.block_m, block_n=case.block_n, out=out.tensor,
                lse=lse.tensor)
        for buffer, name in ((out, _("output O")), (lse, _("logsumexp L"))):
            verify_canaries(buffer, f"{label}, {name}")
        ref, ref_lse = padded_reference(q, k, v, kv_start, case.causal, case.scale())
        out64 = out.tensor.detach().cpu().to(torch.float64).numpy()
        lse64 = lse.tensor.detach().cpu().to(torch.float64).numpy()
        atol, rtol = attention_tolerance(case)
        try:
            registry.compare(out64, ref.numpy(), f"{label}, {_('output O')}", atol=atol, rtol=rtol,
                             tile_rows=case.block_m)
        except registry.WrongAnswer as err:
            hint = _diagnose_scratch(out64, lse64, case, starts, q, k, v)
            if hint == _(SCRATCH_GENERIC):
                hint = where_wrong(out64, ref.numpy(), atol, rtol) or hint
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
        try:
            l_atol, l_rtol = (2e-3, 1e-5) if kernel_device() == "cpu" else (4e-3, 4e-3)  # TF32
            registry.compare(lse64, ref_lse.numpy(), f"{label}, {_('logsumexp L')}", atol=l_atol,
                             rtol=l_rtol)
        except registry.WrongAnswer as err:
            hint = _diagnose_scratch_lse(lse64, ref_lse.numpy(), case, starts, q, k, v)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return (_("{total} cases match attention, O and L, rows without keys "
              "included{hidden}").format(total=len(cases), hidden=registry.hidden_note()))
