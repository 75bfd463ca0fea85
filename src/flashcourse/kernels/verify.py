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


def _defaults(dtype, shapes):
    interpreter = runtime.current().interpreter
    dtype = dtype or (torch.float32 if interpreter else torch.float16)
    return dtype, shapes or (CHECK_SHAPES if interpreter else GPU_CHECK_SHAPES)


def check_forward(launch, dtype=None, shapes=None, causal_values=(False, True),
                  atol: float | None = None, name: str = "forward") -> list[str]:
    """Run launch(q, k, v, causal) -> (o, lse) on ragged, batched, multi-head and transposed
    inputs against the fp32 reference; return one line per case; raise AssertionError on a
    mismatch (atol: tolerance(dtype) unless given)."""
    device = runtime.current().device
    dtype, shapes = _defaults(dtype, shapes)
    atol = tolerance(dtype) if atol is None else atol
    lines = []
    for number, (B, H, N, D) in enumerate(shapes):
        for causal in causal_values:
            layout = "bnhd" if number % 2 else "bhnd"
            q, k, v = make_qkv(B, H, N, D, dtype, device, seed=number, layout=layout)
            o, lse = launch(q, k, v, causal)
            ref, ref_lse = reference_fp32(q, k, v, causal)
            err, ok = max_error(o, ref, atol)
            lse_err, lse_ok = max_error(lse, ref_lse, atol)
            label = (f"{name} B={B} H={H} N={N} D={D} {str(dtype).replace('torch.', '')} "
                     f"{'causal' if causal else 'full'} {layout}")
            if not (ok and lse_ok):
                raise AssertionError(f"{label}: max error {err:.3g} (lse {lse_err:.3g})")
            lines.append(f"{label}: ok (max error {err:.1e})")
    return lines


def check_step(step, dtype=None, shapes=None, causal_values=(False, True),
               autotune: bool = False) -> list[str]:
    """check_forward of a ladder step."""
    return check_forward(
        lambda q, k, v, causal: forward(q, k, v, causal, step=step, autotune=autotune),
        dtype, shapes, causal_values, name=f"step {as_step(step).number}")


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
                   attention=None) -> list[str]:
    """Gradients of attention(q, k, v, causal) (flash_attention unless given) against autograd
    through the fp32 reference; raise AssertionError on a mismatch."""
    device = runtime.current().device
    dtype, shapes = _defaults(dtype, shapes)
    lines = []
    for number, (B, H, N, D) in enumerate(shapes):
        for causal in causal_values:
            layout = "bnhd" if number % 2 else "bhnd"
            q, k, v = make_qkv(B, H, N, D, dtype, device, seed=10 + number, layout=layout)
            do = torch.randn(q.shape, generator=torch.Generator().manual_seed(number)).to(
                device=device, dtype=dtype)
            q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
            o = (attention or flash_attention)(q, k, v, causal)
            grads = torch.autograd.grad(o, (q, k, v), do)
            rq, rk, rv = (x.detach().float().requires_grad_(True) for x in (q, k, v))
            ro, _ = reference_fp32(rq, rk, rv, causal)
            ref_grads = torch.autograd.grad(ro, (rq, rk, rv), do.float())
            label = (f"backward B={B} H={H} N={N} D={D} {str(dtype).replace('torch.', '')} "
                     f"{'causal' if causal else 'full'}")
            problems = gradient_problems(grads, ref_grads, tolerance(dtype))
            if problems:
                raise AssertionError(f"{label}: {problems[0]}")
            lines.append(f"{label}: ok")
    return lines
