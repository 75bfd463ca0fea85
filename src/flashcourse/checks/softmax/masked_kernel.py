"""Lesson 5's masked softmax kernel, written from scratch: per-row lengths (a key-padding
mask), a scale, rows longer than one block (online softmax), and rows with nothing visible,
which are NaN as torch.softmax gives. The grader launches the kernel itself
(`launch_masked_softmax`), with inputs inside NaN padding and the output inside canaries."""

from __future__ import annotations

import numpy as np
import torch

from ... import runtime
from ...i18n import _
from ...kernels.softmax import launch_masked_softmax, masked_softmax  # noqa: F401
from ...reference import softmax as reference_softmax
from .. import buffers, guards, registry
from .common import blocked_stats, describe, logits, passed
from .kernel_exercises import DTYPES, KERNEL_TOLERANCE, NO_MAX_HINT, normalised

# (rows, n_cols, BLOCK, dtype, logit scale, kind, lengths, kernel scale, seed); kinds as in
# `logits`, plus "equal" (every score of a row the same); lengths "full" (every column
# visible), "ragged" (1..n_cols, the last row full) or "empty" (ragged, the last row 0)
MASKED_CASES = [
    (3, 7, 16, "fp32", 1.0, "normal", "full", 1.0, 0),  # shorter than one block
    (4, 100, 16, "fp32", 1.0, "ramp", "ragged", 0.5, 1),  # the max grows in every block
    (3, 64, 16, "fp16", 1.0, "normal", "ragged", 0.125, 2),
    (4, 150, 32, "fp32", 1e3, "normal", "ragged", 1.0, 3),  # e^1000 overflows
    (4, 100, 16, "fp32", 30.0, "masked", "empty", 0.5, 4),  # first blocks -inf, empty rows
    (3, 40, 16, "fp32", 1.0, "equal", "ragged", 2.0, 5),  # equal scores: uniform weights
    (3, 50, 16, "fp16", 1.0, "offset", "full", 1.0, 6),  # rows far below 0
]
MASKED_HIDDEN = [
    (5, 333, 64, "fp16", 30.0, "neg_inf", "ragged", 0.125, 101),
    (2, 1000, 256, "fp32", 1e3, "ramp", "empty", 1.0, 102),
    (6, 17, 16, "fp16", 1.0, "equal", "empty", 2.0, 103),
    (3, 300, 64, "fp16", 1.0, "masked", "ragged", 0.5, 104),
]


def masked_inputs(rows, n, block, scale, kind, lengths_kind, seed):
    """(logits (rows, n) float64, lengths (rows,) int) of a masked-softmax case."""
    if kind == "equal":
        x = np.repeat(logits(rows, 1, seed, scale), n, axis=1)
    else:
        x = logits(rows, n, seed, scale, kind, block)
    rng = np.random.default_rng(registry.case_seed(seed + 7919))
    lengths = np.full(rows, n)
    if lengths_kind != "full":
        lengths = rng.integers(1, n + 1, rows)
        lengths[-1] = n if lengths_kind == "ragged" else 0
    return x, lengths


def masked_reference(x64, lengths, scale, pad_zero=False):
    """softmax of scale * x with the hidden columns at -inf (0 when pad_zero: the padding a
    masked load with other=0.0 gives, up to the end of the last block)."""
    hidden = np.arange(x64.shape[1])[None, :] >= lengths[:, None]
    with np.errstate(all="ignore"):
        return np.where(hidden, 0.0 if pad_zero else -np.inf, scale * x64)


def _masked_mistakes(x64, lengths, scale, block):
    """(candidate output, hint) for the known mistakes of a masked-softmax kernel, computed in
    float32 like the kernel."""
    n = x64.shape[1]

    def output(z, divide=True, **switches):
        m, total = blocked_stats(z, block, dtype=np.float32, **switches)
        return normalised(z, m, total, np.float32, divide)

    scores = masked_reference(x64, lengths, scale)
    padded = masked_reference(x64, lengths, scale, pad_zero=True)
    with np.errstate(all="ignore"):
        unscaled = masked_reference(x64, lengths, 1.0)
        right = reference_softmax(scores)
    empty_as_zero = np.where(np.isnan(right), 0.0, right)
    hidden = np.arange(n)[None, :] >= lengths[:, None]
    return [
        (output(padded, pad_zero=True),
         _("The hidden columns are loaded as 0 (other=0.0, or no other= at all), so each adds "
           "exp(0 - max) to the sum and gets a weight of its own. Load them as -inf: its "
           "exponential is 0 and it never wins the max.")),
        (output(scale * x64),
         _("Every column of the row is visible in your output: the loads' mask must follow the "
           "row's own length (in lengths), not the tensor's width (section 5).")),
        (empty_as_zero,
         _("A row with no visible finite score must be NaN throughout, as torch.softmax gives "
           "(section 4: a row masked entirely has no distribution); yours writes 0 there.")),
        (output(scores, guard=False),
         _("A row whose first blocks are hidden or -inf turns NaN: its running max is still -inf, "
           "and exp(-inf - (-inf)) is NaN. Shift by a safe max, 0 while the running max is -inf "
           "(section 4).")),
        (output(unscaled) if scale != 1.0 else None,
         _("The scores are not multiplied by scale: y = softmax(scale * x) over the visible "
           "columns, with the same scale in both passes.")),
        (output(scores, rescale=False),
         _("The running sum is not rescaled when the max grows (section 4).")),
        (output(scores, subtract_max=False), NO_MAX_HINT),
        (np.where(hidden, np.nan, right),
         _("The columns past the row's length were never written: every column below n_cols gets "
           "a value, 0 for a hidden one: the store's mask is the tensor's width, not the row's "
           "length (section 5).")),
    ]


def check_masked_softmax(kernel) -> str:
    guards.require_jit_kernel(kernel, "softmax/masked-softmax")
    cases = registry.with_hidden(MASKED_CASES, MASKED_HIDDEN)
    device = runtime.current().device
    for number, case in enumerate(cases, 1):
        rows, n, block, dtype_name, magnitude, kind, lengths_kind, scale, seed = case
        x_np, lengths_np = masked_inputs(rows, n, block, magnitude, kind, lengths_kind, seed)
        equal = _(", all scores of a row equal") if kind == "equal" else ""
        label = _("case {number}/{total} ({described}{equal}, scale={scale:g}, lengths "
                  "{lengths})").format(
            number=number, total=len(cases),
            described=describe(rows, n, magnitude, kind, dtype_name, block, seed), equal=equal,
            scale=scale, lengths=lengths_np.tolist())
        dtype = DTYPES[dtype_name]
        x_values = torch.from_numpy(x_np).to(dtype)
        x = buffers.poisoned(x_values.to(device))
        lengths = buffers.poisoned(torch.from_numpy(lengths_np).to(torch.int32).to(device))
        y = buffers.Canaried((rows, n), dtype, device)
        with np.errstate(all="ignore"):
            guards.guarded(label, lambda x=x, y=y, lengths=lengths, scale=scale, block=block:
                           launch_masked_softmax(kernel, x, y.tensor, lengths, scale, block),
                           tensors=[x, lengths, y.tensor])
        y.verify(label)
        x64 = x_values.to(torch.float64).numpy()
        with np.errstate(all="ignore"):  # a row with nothing visible: NaN, as torch gives
            expected = reference_softmax(masked_reference(x64, lengths_np, scale))
        output = y.tensor.detach().cpu().to(torch.float64).numpy()
        atol, rtol = KERNEL_TOLERANCE[dtype_name]
        try:
            registry.compare(output, expected, label, atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            hint = (_("Hint: the columns from the row's length on are hidden, loaded so that "
                      "they weigh nothing; the scores are scaled in float32; the running max "
                      "uses a safe max and the running sum is rescaled; every column below "
                      "n_cols is stored, normalised (sections 4 and 5)."))
            for candidate, why in _masked_mistakes(x64, lengths_np, scale, block):
                if candidate is not None and registry.same_result(output, candidate,
                                                                  max(1e-3, 10 * atol)):
                    hint = _("Likely mistake: ") + _(why)
                    break
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return passed(len(cases), _("match torch.softmax of the masked scores, no write outside the "
                                "output"))
