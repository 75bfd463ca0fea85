"""Lesson 5's Triton exercises: the fused row softmax and the online softmax over a
long row. The checks launch the student's kernel themselves, with inputs inside NaN
padding and outputs inside canaries, and name known mistakes by simulating them."""

from __future__ import annotations

import numpy as np
import torch

from ... import runtime
from ...i18n import N_, _
from ...kernels.softmax import (  # noqa: F401  (the lesson's launchers, used here)
    launch_online_softmax,
    launch_row_softmax,
    num_warps_for,
    online_softmax,
    row_softmax,
)
from ...reference import softmax as reference_softmax
from .. import buffers, guards, registry
from .common import blocked_stats, describe, logits, passed

# ---------------------------------------------------------------- kernels: known mistakes


def normalised(x, m, total, dtype=np.float64, divide=True):
    with np.errstate(all="ignore"):
        e = np.exp(x.astype(dtype) - m[:, None])
        return e / total[:, None] if divide else e


PAD_ZERO_HINT = (
    N_("The masked load fills the padding lanes with 0 (other=0.0, or no other= at all), so the "
       "padding adds exp(0 - max) to the sum. Padding must load as a value whose exponential is 0 "
       "and that never wins the max."))
NO_MAX_HINT = (
    N_("exp overflows for large logits (e^89 is inf in float32) and inf/inf is NaN: subtract the "
       "row max before tl.exp."))
NO_LOAD_MASK_HINT = (
    N_("Every output of the row is NaN: the load read past the end of the row, and the grader "
       "puts NaN there (on a GPU it would be another row's data or a fault). The load needs a "
       "mask of the row's real columns and a fill value that neither wins the max nor adds to the "
       "sum (section 3)."))
NO_GUARD_HINT = (
    N_("A row whose first block is masked entirely (all -inf) turns NaN: its running max is still "
       "-inf, and exp(-inf - (-inf)) is NaN, which then stays in the running sum. Shift by a safe "
       "max, 0 while the running max is -inf (section 4, \"The online softmax\")."))
NO_DIVIDE_HINT = N_("The outputs are exp(x - max) but never divided by the sum of the row.")
ROW_STRIDE_HINT = (
    N_("Your rows start r * n_cols apart, as if they were contiguous: the grader's rows are "
       "not contiguous (each row is followed by padding), so a row's start comes from the row "
       "stride the launcher passes (section 3)."))


def _row_mistakes(x, block):
    """(candidate output, hint) for the known mistakes of a one-block row kernel."""
    return [
        (normalised(x, *blocked_stats(x, block, subtract_max=False, dtype=np.float32),
                    np.float32), NO_MAX_HINT),
        (normalised(x, *blocked_stats(x, block, pad_zero=True)), PAD_ZERO_HINT),
        (normalised(x, *blocked_stats(x, block), divide=False), NO_DIVIDE_HINT),
    ]


def _online_mistakes(x, block):
    """(candidate output, hint) for the known mistakes of an online-softmax kernel, computed
    in float32 like the kernel (so overflows happen where the kernel's do)."""
    def output(divide=True, **switches):
        m, total = blocked_stats(x, block, dtype=np.float32, **switches)
        return normalised(x, m, total, np.float32, divide)

    return [
        (output(guard=False), NO_GUARD_HINT),
        (output(rescale=False),
         _("The running sum is not rescaled when the max grows: it was measured against the old "
           "max, and must be brought to the new one before the new block's sum is added (section "
           "4).")),
        (output(flip_scale=True),
         _("The rescale factor points the wrong way: it must shrink the old sum (a factor of at "
           "most 1, and 0 on the first block), not grow it (section 4).")),
        (output(include_old_max=False),
         _("m_new must be the max over everything seen so far, the running max included, not this "
           "block's max alone: otherwise a larger value in an earlier block makes the rescale "
           "factor > 1, which overflows for large logits.")),
        (output(pad_zero=True), PAD_ZERO_HINT),
        (output(subtract_max=False), NO_MAX_HINT),
        (output(divide=False),
         _("The second pass stores exp(x - m) without dividing by the running sum l.")),
    ]


def _diagnose_kernel(output, x, candidates, atol, stored_nothing) -> str:
    for candidate, hint in candidates:
        if registry.same_result(output, candidate, atol):
            return _("Likely mistake: ") + _(hint)
    out = np.asarray(output, dtype=np.float64)
    if np.isnan(out).all():
        if stored_nothing():
            return (_("Likely mistake: nothing was stored: the kernel must write each row's "
                      "result to the output, masked like the load."))
        if x.shape[1] > 1:
            return _("Likely mistake: ") + _(NO_LOAD_MASK_HINT)
    if out.shape[0] > 1 and np.isfinite(out[0]).all() and np.isnan(out[1:]).all():
        return _("Likely mistake: ") + _(ROW_STRIDE_HINT)
    return (_("Hint: each row is the stable softmax of section 2, computed in float32 from a "
              "masked load whose padding lanes take no part in the max or the sum (section 3)."))


def _strided_like_contiguous(canaried: buffers.Canaried, rows: int, n: int) -> bool:
    """True when every changed canary lies where a contiguous (rows, n) output would lie: the
    kernel stepped from row to row by n_cols instead of the row stride."""
    changed = canaried.changed_canaries()
    where = torch.nonzero(changed.cpu()).flatten()
    return rows > 1 and len(where) > 0 and bool(
        ((where >= buffers.GUARD) & (where < buffers.GUARD + rows * n)).all())


# (rows, n_cols, dtype, scale, kind, seed): row kernel; BLOCK = next_pow2(n_cols)
ROW_CASES = [
    (3, 7, "fp32", 1.0, "normal", 0),  # not a power of two
    (4, 1, "fp32", 1.0, "normal", 1),  # a single column
    (2, 100, "fp16", 1.0, "normal", 2),
    (3, 64, "fp16", 1.0, "normal", 3),  # exactly a power of two
    (2, 1000, "fp32", 1.0, "neg_inf", 4),
    (3, 37, "fp32", 1e3, "normal", 5),  # e^1000 overflows
    (2, 300, "fp16", 1e3, "neg_inf", 6),
]
ROW_HIDDEN = [
    (5, 513, "fp32", 30.0, "normal", 101),
    (1, 129, "fp16", 1.0, "neg_inf", 102),
    (6, 3, "fp16", 1e3, "normal", 103),
]
# (rows, n_cols, BLOCK, dtype, scale, kind, seed): online kernel
ONLINE_CASES = [
    (3, 7, 16, "fp32", 1.0, "normal", 0),  # shorter than one block
    (2, 100, 16, "fp32", 1.0, "ramp", 1),  # the max grows in every block
    (4, 1, 16, "fp32", 1.0, "normal", 2),
    (2, 64, 16, "fp16", 1.0, "normal", 3),  # a whole number of blocks
    (2, 1000, 128, "fp32", 1.0, "neg_inf", 4),
    (3, 200, 32, "fp16", 1.0, "ramp", 5),
    (2, 150, 32, "fp32", 1e3, "normal", 6),  # e^1000 overflows
    (4, 100, 16, "fp32", 30.0, "masked", 7),  # first blocks masked; row 0 masked entirely
]
ONLINE_HIDDEN = [
    (3, 333, 64, "fp16", 30.0, "neg_inf", 101),
    (1, 1000, 256, "fp32", 1e3, "ramp", 102),
    (5, 17, 16, "fp16", 1.0, "ramp", 103),
    (3, 300, 64, "fp16", 1.0, "masked", 104),
]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
KERNEL_TOLERANCE = {"fp32": (2e-6, 2e-5), "fp16": (1e-5, 2e-3)}  # (atol, rtol)


def _run_kernel_case(launch, kernel, label, rows, n, dtype_name, scale, kind, seed,
                     candidates_for, block=1):
    dtype = DTYPES[dtype_name]
    device = runtime.current().device
    x_values = torch.from_numpy(logits(rows, n, seed, scale, kind, block)).to(dtype)
    x = buffers.poisoned(x_values.to(device))
    y = buffers.Canaried((rows, n), dtype, device)
    with np.errstate(all="ignore"):  # the interpreter computes with numpy: no warning noise
        guards.guarded(label, lambda: launch(kernel, x, y.tensor),
                               tensors=[x, y.tensor])
    try:
        y.verify(label)
    except registry.WrongAnswer:
        if _strided_like_contiguous(y, rows, n):
            raise registry.WrongAnswer(
                _("{label}: your kernel wrote outside the output, where a contiguous output would "
                  "lie. {hint}").format(label=label, hint=_(ROW_STRIDE_HINT))) from None
        raise
    x64 = x_values.to(torch.float64).numpy()
    with np.errstate(invalid="ignore"):  # a row masked entirely: NaN, as torch.softmax gives
        expected = reference_softmax(x64)
    atol, rtol = KERNEL_TOLERANCE[dtype_name]
    output = y.tensor.detach().cpu().to(torch.float64).numpy()

    def stored_nothing() -> bool:  # run again into an output that starts as zeros
        again = buffers.Canaried((rows, n), dtype, device)
        again.tensor.fill_(0.0)
        with np.errstate(all="ignore"):
            guards.guarded(label, lambda: launch(kernel, x, again.tensor),
                                   tensors=[x, again.tensor])
        return bool((again.tensor == 0).all())

    try:
        registry.compare(output, expected, label, atol=atol, rtol=rtol)
    except registry.WrongAnswer as err:
        hint = _diagnose_kernel(output, x64, candidates_for(x64), max(1e-3, 10 * atol),
                                stored_nothing)
        raise registry.WrongAnswer(f"{err}\n{hint}") from None


def check_row_kernel(kernel) -> str:
    guards.require_jit_kernel(kernel, "softmax/row-kernel", "softmax_row_kernel")
    cases = registry.with_hidden(ROW_CASES, ROW_HIDDEN)
    for number, (rows, n, dtype_name, scale, kind, seed) in enumerate(cases, 1):
        block = 1 << max(0, (n - 1).bit_length())
        label = (_("case {number}/{total} ({described})").format(number=number, total=len(cases),
                   described=describe(rows, n, scale, kind, dtype_name, block, seed)))
        _run_kernel_case(launch_row_softmax, kernel, label, rows, n, dtype_name, scale, kind,
                         seed, lambda x, b=block: _row_mistakes(x, b))
    return passed(len(cases), _("match the float64 reference, no write outside the output"))


def check_online_kernel(kernel) -> str:
    guards.require_jit_kernel(kernel, "softmax/online-kernel", "online_softmax_kernel")
    cases = registry.with_hidden(ONLINE_CASES, ONLINE_HIDDEN)
    for number, (rows, n, block, dtype_name, scale, kind, seed) in enumerate(cases, 1):
        label = (_("case {number}/{total} ({described})").format(number=number, total=len(cases),
                   described=describe(rows, n, scale, kind, dtype_name, block, seed)))

        def launch(kernel, x, y, block=block):
            launch_online_softmax(kernel, x, y, block)

        _run_kernel_case(launch, kernel, label, rows, n, dtype_name, scale, kind, seed,
                         lambda x, b=block: _online_mistakes(x, b), block)
    return passed(len(cases), _("match the float64 reference, no write outside the output"))
