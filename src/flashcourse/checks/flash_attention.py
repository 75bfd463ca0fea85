"""Checks of lesson 6, "FlashAttention forward and backward in Triton".

The grader launches the student's @triton.jit kernels itself (through `attention.flash_forward`
and friends), with inputs inside NaN padding (`buffers.poisoned`) and outputs inside canaries
(`buffers.Canaried`), and compares with float64 attention in torch. Known mistakes are named by
rerunning a float64 simulation of the kernel's block order with that mistake switched on.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from .. import runtime
from ..kernels import attention
from . import buffers, guards, registry

LESSON = registry.lesson("flash-triton", "Lesson 6: FlashAttention forward and backward in Triton",
                        pass_line=8)


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


def _device() -> str:
    """Kernel arguments live here; references are always computed on the CPU in float64."""
    return runtime.current().device


def _for_device(case: Case) -> Case:
    """On a GPU, tl.dot rounds float32 to TF32 (10-bit mantissa): with scores of 1e3 that alone
    moves scores by about 0.5, so large-logit cases run in float16 there (exact products)."""
    if _device() != "cpu" and case.dtype == torch.float32 and case.large:
        return dataclasses.replace(case, dtype=torch.float16)
    return case


# ---------------------------------------------------------------- helpers


def _pad(case: Case) -> int:
    return max(case.block_m, case.block_n)


OFFSET_HINT = ("If the stores are masked, check the batch and head offsets of this output: use "
               "its own batch and head strides, never the head stride times a head count. "
               'See "Strides, not shapes" and "Masks" in section 2 ("The FA2 forward kernel").')


def _verify(buffer, label: str) -> None:
    try:
        buffer.verify(label)
    except registry.WrongAnswer as err:
        raise registry.WrongAnswer(f"{err}\n{OFFSET_HINT}") from None


def _inputs(case: Case):
    q, k, v = attention.make_inputs(case.B, case.H, case.N, case.D, case.dtype, seed=case.seed,
                                    large_logits=case.large, sm_scale=case.sm_scale)
    return q, k, v


def _launch(fn, label, *args, **kwargs):
    """Run a launcher; turn Triton and Python errors into a WrongAnswer naming the case."""
    try:
        return guards.guarded(label, lambda: fn(*args, **kwargs),
                                      tensors=guards.tensors_in(args, kwargs))
    except registry.WrongAnswer as err:
        if "launching your kernel raised" not in str(err):
            raise
        cause = err.__cause__
        text = f"{err} {cause!r}" if cause is not None else str(err)
        raise registry.WrongAnswer(f"{err}\n{launch_hint(text)}") from cause


def _close(actual: np.ndarray, candidate: np.ndarray, tol: float = 2e-3) -> bool:
    """True when actual equals candidate up to fp32 rounding (NaN where it has NaN)."""
    if actual.shape != candidate.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(actual, candidate, rtol=tol, atol=tol, equal_nan=True))


def _where_wrong(actual: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> str:
    """A hint when only some (batch, head) slices are wrong: an offset mistake."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(actual - expected) <= atol + rtol * np.abs(expected))  # NaN counts
    per_slice = bad.reshape(bad.shape[0], bad.shape[1], -1).any(-1)  # (B, H)
    if per_slice.all() or not per_slice.any():
        return ""
    if not per_slice[0].any():
        return ("Likely mistake: batch 0 is right but later batches are not. The batch offset "
                "must use the batch stride: here the inputs are not contiguous, so the batch "
                "stride is not H times the head stride. See \"Strides, not shapes\" in "
                "section 2.")
    return ("Likely mistake: the (batch, head) slice (0, 0) is right but others are not: "
            "compute b = bh // H, h = bh % H and offset every pointer by b * stride_b + "
            "h * stride_h, using the strides you are given. See \"Strides, not shapes\" in "
            "section 2.")


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


FORWARD_SECTION = 'section 2 ("The FA2 forward kernel")'
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
     "Keys past N take part in the softmax: the masked loads return 0, which gives a score of "
     f"0, not \"no key\". See \"Masks\" in {FORWARD_SECTION}."),
]
NAN_TAIL_HINT = (
    "Likely mistake: the last block reads past N. The grader surrounds the inputs with NaN, so "
    "an unmasked load or store past the end shows up here. See \"Masks\" in "
    f"{FORWARD_SECTION}.")
GENERIC_FORWARD_HINT = (
    "None of the mistakes the grader knows matches this output. Compare each update of the "
    "online softmax (running max, rescale factor, weights, running sum, accumulator) and the "
    f"two lines after the loop with the recurrences of lesson 1, in base 2 ({FORWARD_SECTION}); "
    "the row block named above is where it first goes wrong.")
DOT_DTYPE_HINT = (
    "Likely mistake: the operands of a tl.dot have different dtypes. The weights p (or dS) "
    "are float32 but V (or K, Q) are float16 here: convert the float32 operand to the other "
    "operand's dtype with .to(...) before tl.dot. The float32 cases pass because both "
    f"operands are float32 there. See {FORWARD_SECTION}.")
SIGNATURE_HINT = ("Read the kernel's signature in the lesson: the grader passes exactly those "
                  "arguments.")


def launch_hint(text: str) -> str:
    """The hint for a kernel that failed to compile or run, from the error's text."""
    if "same dtype" in text or ("dtype" in text and "dot" in text):
        return DOT_DTYPE_HINT
    if any(word in text for word in ("argument", "positional", "keyword", "missing")):
        return SIGNATURE_HINT
    return ("The error above names the line of your kernel that failed: the message says "
            "what Triton could not do there.")


def _diagnose_forward(out: np.ndarray, case: Case, q, k, v) -> str:
    if case.dtype == torch.float32:
        for switches, hint in FORWARD_MISTAKES:
            if switches.get("strict_mask") and not case.causal:
                continue
            candidate = blocked_forward(q, k, v, case.causal, case.scale(), case.block_m,
                                        case.block_n, **switches).numpy()
            if _close(out, candidate):
                return "Likely mistake: " + hint
    if np.isnan(out).any() and case.N % case.block_n:
        return NAN_TAIL_HINT
    return GENERIC_FORWARD_HINT


def _run_forward(kernel, case: Case, label: str):
    q, k, v = _inputs(case)
    qp, kp, vp = (guards.place_heads(x, case.layout, _pad(case)) for x in (q, k, v))
    out = buffers.Canaried((case.B, case.H, case.N, case.D), case.dtype, _device(),
                           pad_rows=_pad(case))
    lse = buffers.Canaried((case.B, case.H, case.N), torch.float32, _device(),
                           pad_cols=_pad(case))
    _launch(attention.flash_forward, label, kernel, qp, kp, vp, case.causal, case.sm_scale,
            block_m=case.block_m, block_n=case.block_n, out=out.tensor, lse=lse.tensor)
    for buffer, name in ((out, "output O"), (lse, "logsumexp L")):
        _verify(buffer, f"{label}, {name}")
    return q, k, v, out.tensor.detach().cpu(), lse.tensor.detach().cpu()


@registry.exercise("flash-triton/forward", "FA2 forward kernel in Triton (O and L)", 2,
                   kernel=True)
def _check_forward(kernel) -> str:
    guards.require_jit_kernel(kernel, "flash-triton/forward")
    cases = registry.with_hidden(FORWARD_CASES, FORWARD_HIDDEN)
    for number, case in enumerate(cases, 1):
        case = _for_device(case)
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
            hint = _where_wrong(out64, ref.numpy(), atol, rtol) or \
                _diagnose_forward(out64, case, q, k, v)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
        lse64 = lse.to(torch.float64).numpy()
        try:
            l_atol, l_rtol = (2e-3, 1e-5) if _device() == "cpu" else (4e-3, 4e-3)  # TF32
            registry.compare(lse64, ref_lse.numpy(), label + ", logsumexp L", atol=l_atol,
                            rtol=l_rtol)
        except registry.WrongAnswer as err:
            if _close(lse64, ref_lse.numpy() * LOG2E, 1e-4):
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


# ---------------------------------------------------------------- backward


def reference_grads(q, k, v, do, causal, sm_scale, *, use_delta=True, scale_grads=True,
                    keep=None, delta_sign=1.0):
    """float64 dQ, dK, dV from the explicit formulas, with switches for known mistakes.
    keep: an (N, N) boolean mask used for P instead of the causal one (a kernel that skips
    whole tiles but forgets the mask inside the tiles it visits)."""
    q, k, v, do = (x.to(torch.float64) for x in (q, k, v, do))
    s = (q @ k.transpose(-1, -2)) * sm_scale
    n = s.shape[-1]
    above = torch.ones(n, n, dtype=torch.bool).triu(1)
    lse = torch.logsumexp(s.masked_fill(above, float("-inf")) if causal else s, -1)
    p = torch.exp(s - lse[..., None])
    if keep is not None:
        p = p.masked_fill(~keep, 0.0)
    elif causal:
        p = p.masked_fill(above, 0.0)
    o = attention.standard_attention(q, k, v, causal, sm_scale)
    delta = (do * o).sum(-1) if use_delta else torch.zeros_like(lse)
    dv = p.transpose(-1, -2) @ do
    ds = p * (do @ v.transpose(-1, -2) - delta_sign * delta[..., None])
    factor = sm_scale if scale_grads else 1.0
    return ds @ k * factor, ds.transpose(-1, -2) @ q * factor, dv


BACKWARD_SECTION = 'section 4 ("The backward pass")'
BACKWARD_MISTAKES = [
    (dict(scale_grads=False),
     "dK (or dQ) lacks the factor sm_scale: S = sm_scale * Q K^T, so the chain rule brings "
     f"that factor into the gradients of Q and K. See {BACKWARD_SECTION}."),
    (dict(use_delta=False),
     "delta is missing from dS: the softmax's gradient subtracts one number per query row. "
     f"See {BACKWARD_SECTION}."),
    (dict(delta_sign=-1.0),
     "delta enters dS with the wrong sign: the softmax's gradient subtracts delta from dP, it "
     f"does not add it. See {BACKWARD_SECTION}."),
    (dict(keep="tiles"),
     "P is not causally masked: recomputing P from s and L gives nonzero weights above the "
     f"diagonal, which the forward never used. See {BACKWARD_SECTION}."),
]
BACKWARD_GENERIC_HINT = (
    "None of the mistakes the grader knows matches this output. Compare each step (recomputed "
    "P in base 2, dV, dP, dS with delta, dQ and dK with their scale factor) with the formulas "
    f"of {BACKWARD_SECTION}; the row block named above is where it first goes wrong.")


def _backward_inputs(case: Case):
    q, k, v = _inputs(case)
    gen = torch.Generator().manual_seed(registry.case_seed(case.seed + 1000))
    do = torch.randn(q.shape, generator=gen, dtype=torch.float64).to(case.dtype)
    q64, k64, v64 = (x.to(torch.float64) for x in (q, k, v))
    o, lse = attention.standard_attention(q64, k64, v64, case.causal, case.scale(),
                                          return_lse=True)
    delta = (do.to(torch.float64) * o).sum(-1)
    return q, k, v, do, lse.to(torch.float32), delta.to(torch.float32)


def _check_backward(kernel, exercise_id: str, which: str) -> str:
    guards.require_jit_kernel(kernel, exercise_id)
    cases = registry.with_hidden(BACKWARD_CASES, BACKWARD_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        q, k, v, do, lse, delta = _backward_inputs(case)
        pad = _pad(case)
        placed = [guards.place_heads(x, case.layout, pad) for x in (q, k, v, do)]
        lse_p, delta_p = (buffers.poisoned(x.to(_device()), pad_cols=pad) for x in (lse, delta))
        shape = (case.B, case.H, case.N, case.D)
        if which == "dkdv":
            dk, dv = (buffers.Canaried(shape, case.dtype, _device(), pad_rows=pad)
                      for _ in range(2))
            _launch(attention.launch_dkdv, label, kernel, *placed, lse_p, delta_p, case.causal,
                    case.scale(), dk=dk.tensor, dv=dv.tensor, block_m=case.block_m,
                    block_n=case.block_n)
            outputs = {"dK": dk, "dV": dv}
        else:
            dq = buffers.Canaried(shape, case.dtype, _device(), pad_rows=pad)
            _launch(attention.launch_dq, label, kernel, *placed, lse_p, delta_p, case.causal,
                    case.scale(), dq=dq.tensor, block_m=case.block_m, block_n=case.block_n)
            outputs = {"dQ": dq}
        ref_dq, ref_dk, ref_dv = reference_grads(q, k, v, do, case.causal, case.scale())
        refs = {"dQ": ref_dq, "dK": ref_dk, "dV": ref_dv}
        atol, rtol = guards.dot_tolerance(GRAD_TOLERANCES, case.dtype)
        for name, buffer in outputs.items():
            _verify(buffer, f"{label}, {name}")
            got = buffer.tensor.detach().cpu().to(torch.float64).numpy()
            # scale the absolute tolerance with the gradient's size
            expected = refs[name].numpy()
            scale = max(1.0, float(np.abs(expected).max()))
            try:
                registry.compare(got, expected, f"{label}, {name}", atol=atol * scale, rtol=rtol,
                                tile_rows=case.block_n if which == "dkdv" else case.block_m)
            except registry.WrongAnswer as err:
                hint = _where_wrong(got, expected, atol * scale, rtol) or \
                    _diagnose_backward(got, name, case, q, k, v, do, which)
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    hidden = registry.hidden_note()
    names = "dK and dV" if which == "dkdv" else "dQ"
    return f"{len(cases)} cases match torch autograd, {names}{hidden}"


def _visited_tiles(case: Case, which: str) -> torch.Tensor:
    """(N, N) mask of the (row, column) pairs inside tiles the causal kernel visits."""
    rows = torch.arange(case.N)[:, None]
    cols = torch.arange(case.N)[None, :]
    if which == "dkdv":  # key block j starts at query row (j * BLOCK_N) // BLOCK_M * BLOCK_M
        return rows >= (cols // case.block_n * case.block_n) // case.block_m * case.block_m
    return cols < (rows // case.block_m + 1) * case.block_m


def _diagnose_backward(got, name, case, q, k, v, do, which) -> str:
    index = {"dQ": 0, "dK": 1, "dV": 2}[name]
    if case.dtype == torch.float32:
        for switches, hint in BACKWARD_MISTAKES:
            if "keep" in switches:
                if not case.causal:
                    continue
                switches = dict(keep=_visited_tiles(case, which))
            candidate = reference_grads(q, k, v, do, case.causal, case.scale(), **switches)
            if _close(got, candidate[index].numpy()):
                return "Likely mistake: " + hint
    if np.isnan(got).any() and case.N % min(case.block_m, case.block_n):
        return NAN_TAIL_HINT
    return BACKWARD_GENERIC_HINT


# ---------------------------------------------------------------- backward in numpy

# (n, d, sm_scale, seed, how): how = "normal", "large" (scores in the hundreds: a softmax
# without its max subtracted overflows) or "equal" (every score of a row equal)
NUMPY_BACKWARD_CASES = [
    (5, 4, 0.5, 21, "normal"),
    (37, 16, 0.25, 22, "normal"),  # ragged: n is no power of two
    (29, 8, 1.0, 23, "large"),
]
NUMPY_BACKWARD_HIDDEN = [
    (1, 8, 0.35, 121, "normal"),
    (64, 32, 1.0, 122, "large"),
    (12, 8, 0.5, 123, "equal"),
]


def _numpy_backward_inputs(n: int, d: int, seed: int, how: str):
    rng = np.random.default_rng(registry.case_seed(seed))
    q, k, v, d_out = (rng.standard_normal((n, d)) for _ in range(4))
    if how == "large":
        q, k = q * 10.0, k * 10.0
    elif how == "equal":
        q = np.zeros_like(q)
    return q, k, v, d_out


def numpy_backward(q, k, v, d_out, sm_scale, *, delta="o", scale_grads=True, scale_dv=False,
                   transpose_dk=True, transpose_dv=True, delta_sign=1.0):
    """float64 dQ, dK, dV of one head from the explicit formulas, with switches for known
    mistakes (delta: "o" = rowsum(dO * O), "dp" = rowsum(dP), "none")."""
    s = sm_scale * q @ k.T
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    o = p @ v
    dp = d_out @ v.T
    row = {"o": (d_out * o).sum(1), "dp": dp.sum(1), "none": np.zeros(len(q))}[delta]
    ds = p * (dp - delta_sign * row[:, None])
    factor = sm_scale if scale_grads else 1.0
    dq = ds @ k * factor
    dk = (ds.T if transpose_dk else ds) @ q * factor
    dv = (p.T if transpose_dv else p) @ d_out * (sm_scale if scale_dv else 1.0)
    return dq, dk, dv


def _autograd_grads(q, k, v, d_out, sm_scale):
    """dQ, dK, dV of standard attention by torch autograd, in float64."""
    q64, k64, v64 = (torch.tensor(x, dtype=torch.float64, requires_grad=True)
                     for x in (q, k, v))
    out = torch.softmax(sm_scale * q64 @ k64.T, dim=-1) @ v64
    out.backward(torch.tensor(d_out, dtype=torch.float64))
    return tuple(x.grad.numpy() for x in (q64, k64, v64))


NUMPY_BACKWARD_MISTAKES = [
    (dict(delta="none"),
     "D is missing from dS: the softmax's Jacobian subtracts one number per query row, the "
     "P-weighted mean of that row of dP."),
    (dict(delta="dp"),
     "D is the plain row sum of dP: each entry of dP must be weighted by its probability "
     "P before summing (which equals the row sum of dO * O)."),
    (dict(delta_sign=-1.0),
     "D enters dS with the wrong sign: the softmax's Jacobian subtracts D from dP."),
    (dict(scale_grads=False),
     "dQ and dK lack the factor sm_scale: S = sm_scale * Q K^T, so the chain rule brings that "
     "factor into the gradients of Q and K."),
    (dict(scale_dv=True),
     "dV carries sm_scale: V does not enter S, so its gradient has no such factor."),
    (dict(transpose_dk=False),
     "dK is built from dS where the chain rule needs its transpose: a key's gradient sums "
     "over the queries, which index the rows of dS."),
    (dict(transpose_dv=False),
     "dV is built from P where the chain rule needs its transpose: a value's gradient sums "
     "over the queries, which index the rows of P."),
]
NUMPY_BACKWARD_HINT = (
    "None of the mistakes the grader knows matches this output. Check each step against the "
    f"derivation of {BACKWARD_SECTION}: P (with the row max subtracted), dV, dP, D, dS, then "
    "dQ and dK.")


@registry.exercise("flash-triton/backward-numpy", "backward of one head in numpy, derived", 1)
def _check_backward_numpy(attention_backward) -> str:
    if not callable(attention_backward):
        raise registry.WrongAnswer(
            "Pass the function itself: check(\"flash-triton/backward-numpy\", "
            "attention_backward).")
    cases = registry.with_hidden(NUMPY_BACKWARD_CASES, NUMPY_BACKWARD_HIDDEN)
    for number, (n, d, sm_scale, seed, how) in enumerate(cases, 1):
        label = f"case {number}/{len(cases)} (n={n}, d={d}, sm_scale={sm_scale}, {how} scores)"
        q, k, v, d_out = _numpy_backward_inputs(n, d, seed, how)
        got = registry.run_student(attention_backward, label, q.copy(), k.copy(), v.copy(),
                                  d_out.copy(), sm_scale)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise registry.WrongAnswer(f"{label}: return the tuple (dq, dk, dv), got "
                                      f"{type(got).__name__}.")
        expected = _autograd_grads(q, k, v, d_out, sm_scale)
        for index, name in enumerate(("dQ", "dK", "dV")):
            scale = max(1.0, float(np.abs(expected[index]).max()))
            try:
                registry.compare(got[index], expected[index], f"{label}, {name}",
                                atol=1e-7 * scale, rtol=1e-6)
            except registry.WrongAnswer as err:
                answer = np.asarray(got[index], dtype=np.float64)
                hint = NUMPY_BACKWARD_HINT
                if answer.shape == expected[index].shape and np.isfinite(answer).all():
                    for switches, text in NUMPY_BACKWARD_MISTAKES:
                        candidate = numpy_backward(q, k, v, d_out, sm_scale, **switches)
                        if np.allclose(answer, candidate[index], atol=1e-7 * scale, rtol=1e-6):
                            hint = f"Likely mistake: {text} See {BACKWARD_SECTION}."
                            break
                elif how == "large":
                    hint = ("the scores of this case reach the hundreds: exp overflows unless "
                            "each row's maximum is subtracted before it.")
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return f"{len(cases)} cases match torch autograd, dQ, dK and dV{registry.hidden_note()}"


@registry.exercise("flash-triton/backward-dkdv", "backward: dK and dV kernel", 1, kernel=True)
def _check_dkdv(kernel) -> str:
    return _check_backward(kernel, "flash-triton/backward-dkdv", "dkdv")


@registry.exercise("flash-triton/backward-dq", "backward: dQ kernel", 1, kernel=True)
def _check_dq(kernel) -> str:
    return _check_backward(kernel, "flash-triton/backward-dq", "dq")
