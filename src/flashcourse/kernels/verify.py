"""Correctness checks of the reference kernels (host.py) against torch attention in fp32.

Used by tests/test_perf.py, lesson 8's ladder cell, the benchmark harness and gpu/perf.py: each
check raises AssertionError on a mismatch and otherwise returns one line per case. These check
the course's own kernels; the graders of the student's kernels live in `flashcourse.checks`.
Import after `fc.setup()` (host.py defines kernels).
"""

from __future__ import annotations

import math

import torch

from .. import runtime
from . import attention
from .host import flash_attention, forward
from .ladder import as_step

CHECK_SHAPES = [  # (B, H, N, D) with ragged N, B > 1 and H > 1
    (2, 3, 37, 16),
    (2, 2, 50, 32),
]
GPU_CHECK_SHAPES = [(2, 3, 333, 64), (2, 2, 1000, 128), (3, 2, 257, 64)]
REFERENCE_CHUNK = 2048  # query rows per step of the fp32 reference (N = 16k fits in memory)
# The large-logit case: q times LOGIT_BOOST and sm_scale = CUSTOM_SCALE / sqrt(d), so that the
# logits have a standard deviation of 16 and reach 50 and more, past the range of fp16's exp
# unless the running max is subtracted, and a kernel that ignores sm_scale is caught.
LOGIT_BOOST = 8.0
CUSTOM_SCALE = 2.0


def reference_fp32(q, k, v, causal: bool = False, sm_scale: float | None = None):
    """(o, lse) of attention.standard_attention computed in float32, in query chunks."""
    return attention.standard_attention(q.float(), k.float(), v.float(), causal, sm_scale,
                                        return_lse=True, chunk=REFERENCE_CHUNK)


def tolerance(dtype) -> float:
    """atol = rtol used for outputs: fp32 1e-4 (interpreter), fp16 1e-2, bf16 2e-2."""
    return {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]


def max_error(actual, expected, atol: float) -> tuple[float, bool]:
    """(max abs error, within atol + atol * |expected| everywhere, no NaN)."""
    a, e = actual.float(), expected.float()
    err = (a - e).abs()
    worst = float(err.max()) if err.numel() else 0.0
    ok = bool(torch.isfinite(a).all()) and bool((err <= atol + atol * e.abs()).all())
    return (worst if math.isfinite(worst) else float("inf")), ok


def make_qkv(B, H, N, D, dtype, device, seed=0, layout="bhnd"):
    """Random q, k, v (attention.make_inputs); layout "bnhd" gives transposed views of
    (B, N, H, D) tensors."""
    if layout != "bnhd":
        return list(attention.make_inputs(B, H, N, D, dtype, device, seed=seed))
    # make_inputs only uses its four sizes as a shape: ask for (B, N, H, D), then transpose
    xs = attention.make_inputs(B, N, H, D, dtype, device, seed=seed)
    return [x.transpose(1, 2) for x in xs]


def large_logit_inputs(shape, dtype, device, seed: int = 0):
    """(q, k, v, sm_scale) of the large-logit case for shape (B, H, N, D)."""
    B, H, N, D = shape
    q, k, v = make_qkv(B, H, N, D, dtype, device, seed=seed)
    return q * LOGIT_BOOST, k, v, CUSTOM_SCALE / math.sqrt(D)


def _cases(shapes, causal_values, custom_scale: bool):
    """(number, shape, causal, scaled) of each case: every shape with each causal value, then
    (custom_scale) the first shape once more with large logits and a custom sm_scale."""
    cases = [(number, shape, causal, False) for number, shape in enumerate(shapes)
             for causal in causal_values]
    if custom_scale:
        cases.append((0, shapes[0], causal_values[-1], True))
    return cases


def _defaults(dtype, shapes):
    interpreter = runtime.current().interpreter
    dtype = dtype or (torch.float32 if interpreter else torch.float16)
    return dtype, shapes or (CHECK_SHAPES if interpreter else GPU_CHECK_SHAPES)


def _label(name, shape, dtype, causal, layout, sm_scale) -> str:
    B, H, N, D = shape
    scale = f" large logits, sm_scale={sm_scale:.3g}" if sm_scale is not None else ""
    return (f"{name} B={B} H={H} N={N} D={D} {str(dtype).replace('torch.', '')} "
            f"{'causal' if causal else 'full'} {layout}{scale}")


def check_forward(launch, dtype=None, shapes=None, causal_values=(False, True),
                  atol: float | None = None, name: str = "forward",
                  custom_scale: bool = False) -> list[str]:
    """Run launch(q, k, v, causal) -> (o, lse) on ragged, batched, multi-head and transposed
    inputs against the fp32 reference; return one line per case; raise AssertionError on a
    mismatch (atol: tolerance(dtype) unless given). custom_scale: one more case with large
    logits, launched as launch(q, k, v, causal, sm_scale=...)."""
    device = runtime.current().device
    dtype, shapes = _defaults(dtype, shapes)
    atol = tolerance(dtype) if atol is None else atol
    lines = []
    for number, shape, causal, scaled in _cases(shapes, causal_values, custom_scale):
        layout = "bnhd" if number % 2 else "bhnd"
        if scaled:
            q, k, v, sm_scale = large_logit_inputs(shape, dtype, device, seed=number)
            o, lse = launch(q, k, v, causal, sm_scale=sm_scale)
        else:
            q, k, v = make_qkv(*shape, dtype, device, seed=number, layout=layout)
            sm_scale = None
            o, lse = launch(q, k, v, causal)
        ref, ref_lse = reference_fp32(q, k, v, causal, sm_scale)
        err, ok = max_error(o, ref, atol)
        lse_err, lse_ok = max_error(lse, ref_lse, atol)
        label = _label(name, shape, dtype, causal, layout, sm_scale)
        if not (ok and lse_ok):
            raise AssertionError(f"{label}: max error {err:.3g} (lse {lse_err:.3g})")
        lines.append(f"{label}: ok (max error {err:.1e})")
    return lines


def check_step(step, dtype=None, shapes=None, causal_values=(False, True),
               autotune: bool = False) -> list[str]:
    """check_forward of a ladder step, the large-logit case included."""
    return check_forward(
        lambda q, k, v, causal, sm_scale=None: forward(q, k, v, causal, sm_scale, step=step,
                                                       autotune=autotune),
        dtype, shapes, causal_values, name=f"step {as_step(step).number}", custom_scale=True)


def gradient_problems(grads, ref_grads, atol: float) -> list[str]:
    """One line per gradient (dq, dk, dv) further from its fp32 reference than atol times the
    reference's largest magnitude (at least 1)."""
    problems = []
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads, strict=True):
        tol = atol * max(1.0, float(r.abs().max()))
        err, ok = max_error(g, r, tol)
        if not ok:
            problems.append(f"{name} max error {err:.3g} > {tol:.3g}")
    return problems


def check_backward(dtype=None, shapes=None, causal_values=(False, True),
                   attention=None, custom_scale: bool = False) -> list[str]:
    """Gradients of attention(q, k, v, causal) (flash_attention unless given) against autograd
    through the fp32 reference; raise AssertionError on a mismatch. custom_scale: one more
    case with large logits, as attention(q, k, v, causal, sm_scale=...)."""
    device = runtime.current().device
    dtype, shapes = _defaults(dtype, shapes)
    lines = []
    for number, shape, causal, scaled in _cases(shapes, causal_values, custom_scale):
        layout = "bnhd" if number % 2 else "bhnd"
        if scaled:
            q, k, v, sm_scale = large_logit_inputs(shape, dtype, device, seed=10 + number)
        else:
            q, k, v = make_qkv(*shape, dtype, device, seed=10 + number, layout=layout)
            sm_scale = None
        do = torch.randn(q.shape, generator=torch.Generator().manual_seed(number)).to(
            device=device, dtype=dtype)
        q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
        scale = {} if sm_scale is None else {"sm_scale": sm_scale}
        o = (attention or flash_attention)(q, k, v, causal, **scale)
        grads = torch.autograd.grad(o, (q, k, v), do)
        rq, rk, rv = (x.detach().float().requires_grad_(True) for x in (q, k, v))
        ro, _ = reference_fp32(rq, rk, rv, causal, sm_scale)
        ref_grads = torch.autograd.grad(ro, (rq, rk, rv), do.float())
        label = _label("backward", shape, dtype, causal, layout, sm_scale)
        problems = gradient_problems(grads, ref_grads, tolerance(dtype))
        if problems:
            raise AssertionError(f"{label}: {problems[0]}")
        lines.append(f"{label}: ok")
    return lines
