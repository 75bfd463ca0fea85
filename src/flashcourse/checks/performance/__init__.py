"""Checks of lesson 8, "Performance engineering": the optimisation-ladder kernel (exp2 scale
folding and the split causal loop), here; the profile, tuning and deployment exercises in
`tools.py`. Its self-check questions and veto misconceptions are data:
self_checks/08-performance.toml.

The grader launches the student's @triton.jit kernel itself (through `host.forward` with
`kernel=`), with inputs inside NaN padding and outputs inside canaries, and compares with
float64 attention. Known mistakes are named by comparing the output with attention computed
the way that mistake computes it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ... import runtime
from ...i18n import N_, _
from ...kernels import attention
from .. import buffers, guards, registry
from ..flash_cases import attention_tolerance, case_label

LESSON = registry.lesson("performance", N_("Lesson 8: Performance engineering"), pass_line=8)


LN2 = math.log(2.0)
LADDER_ID = "performance/ladder-kernel"


Case = attention.AttentionCase


# Non-causal cases first: a causal-only failure then points at the causal bounds.
CASES = [
    Case(2, 2, 40, 16, False, seed=1),  # ragged: 2.5 key blocks
    Case(1, 2, 33, 16, False, torch.float16, seed=2, block_m=32, block_n=16),
    Case(2, 3, 37, 16, True, seed=3, block_m=32, block_n=16),  # BLOCK_M = 2 * BLOCK_N
    Case(2, 2, 50, 32, True, seed=4, sm_scale=0.3, layout="bnhd"),
    Case(2, 2, 64, 16, True, torch.float16, seed=5),  # N a multiple of the blocks
]
HIDDEN_CASES = [
    Case(1, 1, 1, 16, True, seed=101),
    Case(2, 1, 45, 32, False, torch.float16, seed=102, layout="bnhd", block_m=32, block_n=32),
    Case(1, 2, 97, 16, True, seed=103, block_m=64, block_n=16),
]


def _attention64(q, k, v, causal: bool, sm_scale: float, left_bonus: int = 0):
    """float64 attention; left_bonus > 0 weighs keys left of each row's diagonal block
    (block rows of left_bonus) twice: what a masked loop starting at 0 computes."""
    s = (q @ k.transpose(-1, -2)) * sm_scale
    n = q.shape[-2]
    rows = torch.arange(n)[:, None]
    cols = torch.arange(n)[None, :]
    if left_bonus:
        s = s + torch.where(cols < rows // left_bonus * left_bonus, LN2, 0.0)
    if causal:
        s = s.masked_fill(cols > rows, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.exp(s - lse[..., None]) @ v, lse


def _diagnose(out: np.ndarray, case: Case, q, k, v) -> str:
    """Name a known mistake when the output is exactly what that mistake computes."""
    if np.isnan(out).any():
        return (_("Some outputs are NaN: a loop without masks read past the last key into the "
                  "padding (the grader fills it with NaN). The unmasked loop may only visit key "
                  "blocks that lie wholly inside the sequence and, with the causal mask, wholly "
                  "left of the diagonal block (section 3, the causal split)."))
    candidates = [
        (case.scale() * LN2, _("This is attention with the scale multiplied by ln 2: exp2 was "
                               "applied to sm_scale * s without the change of base: exp(x) is "
                               "exp2 of x times log2(e) (section 3, the exp2 rung).")),
        (case.scale() * LN2 * LN2, _("This is attention with the scale multiplied by (ln 2)^2: "
                                     "log2(e) was divided out instead of multiplied in (section "
                                     "3, the exp2 rung).")),
    ]
    for scale, message in candidates:
        cand, _unused = _attention64(q, k, v, case.causal, scale)
        if registry.same_result(out, cand, atol=2e-3):
            return message
    if case.causal:
        cand, _unused = _attention64(q, k, v, False, case.scale())
        if registry.same_result(out, cand, atol=2e-3):
            return (_("This is attention without the causal mask: the masked loop must cover only "
                      "the diagonal block, and the unmasked one only keys left of it."))
        cand, _unused = _attention64(q, k, v, True, case.scale(), left_bonus=case.block_m)
        if registry.same_result(out, cand, atol=2e-3):
            return (_("The keys left of the diagonal block are counted twice: the masked loop "
                      "must start at the diagonal block, not at key 0."))
        return (_("The non-causal cases passed, so look at the causal bounds: the unmasked loop "
                  "must cover only keys left of every row of this query block, and the masked "
                  "loop only the diagonal block (re-read the split causal loop in the lesson)."))
    return (_("Without causal masking, look at the bounds: the unmasked loop must cover only the "
              "full key blocks, and the masked loop only the ragged tail up to N."))


def _run_case(kernel, case: Case, number: int, total: int) -> None:
    from ...kernels import host

    label = case_label(case, number, total)
    q64, k64, v64 = attention.make_inputs(case.B, case.H, case.N, case.D, torch.float64,
                                          seed=case.seed)
    pad = max(case.block_m, case.block_n)
    q, k, v = (guards.place_heads(x.to(case.dtype), case.layout, pad)
               for x in (q64, k64, v64))
    device = runtime.current().device
    out = buffers.Canaried((case.B, case.H, case.N, case.D), case.dtype, device)
    lse = buffers.Canaried((case.B, case.H, case.N), torch.float32, device, pad_rows=0,
                           pad_cols=0)
    guards.guarded(
        label, lambda: host.forward(q, k, v, case.causal, case.sm_scale, kernel=kernel,
                                    out=out.tensor, lse=lse.tensor,
                                    config=(case.block_m, case.block_n, 4, 1)),
        hint=_("Keep the kernel's signature as given: the grader passes exactly those "
               "arguments."),
        tensors=[q, k, v, out.tensor, lse.tensor])
    out.verify(label)
    lse.verify(label)
    # the reference uses the rounded inputs the kernel saw
    qr, kr, vr = (x.to(case.dtype).to(torch.float64) for x in (q64, k64, v64))
    expected, expected_lse = _attention64(qr, kr, vr, case.causal, case.scale())
    actual = registry.to_numpy(out.tensor).astype(np.float64)
    atol, rtol = attention_tolerance(case)
    try:
        registry.compare(actual, expected, label, atol=atol, rtol=rtol, tile_rows=case.block_m)
        registry.compare(lse.tensor, expected_lse, f"{label}, logsumexp", atol=atol * 10,
                        rtol=rtol)
    except registry.WrongAnswer as err:
        raise registry.WrongAnswer(f"{err}\n{_diagnose(actual, case, qr, kr, vr)}") from None


@registry.exercise(LADDER_ID, N_("ladder kernel: exp2 scale folding and the split causal loop"),
                   2, kernel=True)
def _check_ladder(kernel) -> str:
    guards.require_jit_kernel(kernel, LADDER_ID)
    cases = registry.with_hidden(CASES, HIDDEN_CASES)
    for number, case in enumerate(cases, 1):
        _run_case(kernel, case, number, len(cases))
    return (_("{total} cases match float64 attention (ragged N, B > 1, H > 1, causal, poisoned "
              "padding){hidden}").format(total=len(cases), hidden=registry.hidden_note()))


# The tool exercises (profile, tuning, deployment) register after the ladder: the lesson's order.
from . import tools  # noqa: E402, F401, I001
