"""What lesson 4's checks share: the torch dtype of a case, its random operands, the
tolerance of a tiled product, the product as an fp16 accumulator computes it, and the notes
of a passed kernel check."""

from __future__ import annotations

import numpy as np

from ... import runtime
from ...i18n import N_, _
from .. import registry

# a NaN output where the product of zero-padded edges is right: a load read past A or B
LAST_K_STEP_HINT = N_(
    "Likely mistake: the last K step reads past column K-1 of A and row K-1 of B (K is not a "
    "multiple of BLOCK_K). Both loads must switch off what lies past the end of K at that step "
    "and fill it with a value that adds nothing to the sums (section 6).")
OUTSIDE_HINT = N_(
    "Likely mistake: a load reads outside A or B. Mask the rows past M in A and the columns "
    "past N in B, filled with a value that adds nothing to the sums (section 6).")


def torch_dtype(name):
    import torch

    return getattr(torch, name)


def random_operands(shape_a, shape_b, dtype: str, seed: int, values: str):
    """A and B of a case on the runtime's device: normal values, or uniform ones (all positive:
    sums grow with K, and so does fp16 rounding)."""
    import torch

    gen = torch.Generator().manual_seed(registry.case_seed(seed))
    draw = torch.rand if values == "uniform" else torch.randn
    A, B = draw(shape_a, generator=gen), draw(shape_b, generator=gen)
    device = runtime.current().device
    return A.to(torch_dtype(dtype)).to(device), B.to(torch_dtype(dtype)).to(device)


def tolerance(in_dtype: str, out_dtype: str) -> tuple[float, float]:
    """(atol as a fraction of max(|A| @ |B|), rtol): products of fp16/bf16 values are exact in
    fp32; fp32 tl.dot uses TF32 on a GPU; the output dtype adds its rounding."""
    if in_dtype == "float32":
        dot = 1e-5 if runtime.current().interpreter else 4e-3
    else:
        dot = 1e-5
    rtol = {"float32": 0.0, "float16": 1e-3, "bfloat16": 8e-3}[out_dtype]
    return dot, rtol


def fp16_accumulation(A64, B64, BK):
    """The product as a kernel with an fp16 accumulator computes it (fp32 per K step)."""
    acc = np.zeros((A64.shape[0], B64.shape[1]), dtype=np.float16)
    for k in range(0, A64.shape[1], BK):
        step = (A64[:, k:k + BK] @ B64[k:k + BK]).astype(np.float32)
        acc = (acc.astype(np.float32) + step.astype(np.float16).astype(np.float32)) \
            .astype(np.float16)
    return acc.astype(np.float64)


def summary_notes(skipped: int) -> str:
    """The parenthesis after a passed kernel check: bf16 cases left to a GPU, hidden cases."""
    notes = []
    if skipped:
        notes.append(_("{skipped} bf16 case(s) run only on a GPU").format(skipped=skipped))
    if not registry.grading_mode():
        notes.append(_("graders also run hidden cases"))
    return f" ({'; '.join(notes)})" if notes else ""
