"""Checks of lesson 2, "Memory and the roofline": arithmetic intensity of a GEMM, the roofline
itself, where attention's kernels sit, a Triton copy kernel, and an axpy kernel written from
scratch. Its self-check questions and veto misconceptions are data:
self_checks/02-memory-roofline.toml."""

from __future__ import annotations

import numpy as np
import torch
import triton

from .. import runtime
from ..blanks import BlankNotFilled
from ..i18n import N_, _
from ..models import roofline, traffic
from . import buffers, guards, recording, registry

LESSON = registry.lesson("roofline", N_("Lesson 2: Memory and the roofline"), pass_line=8)


def _number(value, case: str) -> float:
    try:
        return float(np.asarray(value, dtype=np.float64))
    except (TypeError, ValueError) as err:
        raise registry.WrongAnswer(_("{case}: return one number, not {value!r}.").format(case=case,
                                     value=value)) from err


# ---------------------------------------------------------------- GEMM intensity

# (m, n, k, element bytes)
GEMM_CASES = [
    (4096, 4096, 4096, 2),  # a large square bf16 GEMM
    (1, 4096, 4096, 2),  # a matrix-vector product (one token of decoding)
    (128, 8192, 64, 4),  # a thin fp32 product
    (1000, 7, 333, 2),  # ragged
]
GEMM_HIDDEN = [(64, 64, 64, 4), (8192, 128, 8192, 2)]


def _gemm_variants(m, n, k, b):
    return [
        (m * n * k / ((m * k + k * n + m * n) * b),
         _("Your FLOPs are half the right count: each term of the sum is a multiply and an add, 2 "
           "FLOPs, so flops = 2*m*n*k.")),
        (2 * m * n * k / ((m * k + k * n) * b),
         _("The bytes count only the reads of A and B: the kernel also writes C (m*n elements).")),
        (2 * m * n * k / (m * k + k * n + m * n),
         _("The bytes count elements, not bytes: multiply by element_bytes.")),
        (2 * m * n * k / ((m * k + k * n + 2 * m * n) * b),
         _("C is counted twice: C = A @ B only writes C, it does not read it.")),
    ]


@registry.exercise("roofline/gemm-intensity", N_("arithmetic intensity of a GEMM"), 1)
def _check_gemm(gemm_intensity) -> str:
    cases = registry.with_hidden(GEMM_CASES, GEMM_HIDDEN)
    for number, (m, n, k, b) in enumerate(cases, 1):
        case = _("case {number}/{total} (m={m}, n={n}, k={k}, element_bytes={b})").format(
                 number=number, total=len(cases), m=m, n=n, k=k, b=b)
        got = _number(registry.run_student(gemm_intensity, case, m, n, k, b), case)
        want = roofline.gemm_intensity(m, n, k, b)
        if not np.isclose(got, want, rtol=1e-9):
            hint = next((why for value, why in _gemm_variants(m, n, k, b)
                         if np.isclose(got, value, rtol=1e-9)),
                        _("Count the FLOPs of one multiply-add per output element and k, and the "
                          "bytes of reading A and B once and writing C once: {section}.").format(
                          section=_(registry.section_of('roofline/q1-intensity'))))
            raise registry.WrongAnswer(_("{case}: you returned {got:.6g} FLOP/B, which is not "
                                         "this GEMM's intensity. {hint}").format(case=case,
                                         got=got, hint=hint))
    return _("{total} shapes right{hidden}").format(total=len(cases),
             hidden=registry.hidden_note())


# ---------------------------------------------------------------- the roofline

ROOF_CASES = [(682.0, 4.3), (989.0, 4.8), (60.0, 2.0)]  # (peak TFLOP/s, TB/s)
ROOF_HIDDEN = [(1979.0, 3.35)]
INTENSITIES = np.logspace(-2, 4, 25)


@registry.exercise("roofline/attainable", N_("attainable throughput under a roofline"), 1)
def _check_attainable(attainable_tflops) -> str:
    cases = registry.with_hidden(ROOF_CASES, ROOF_HIDDEN)
    for number, (peak, bw) in enumerate(cases, 1):
        case = (_("case {number}/{total} (peak={peak:g} TFLOP/s, bandwidth={bw:g} TB/s, 25 "
                  "intensities from 0.01 to 1e4 FLOP/B as one numpy array)").format(number=number,
                  total=len(cases), peak=peak, bw=bw))
        intensity = INTENSITIES.copy()
        try:
            args = (intensity, peak, bw)
            got = recording.student_call(case, lambda a=args: attainable_tflops(*a),
                                         inputs=args)
        except ValueError as err:
            if "truth value" in str(err):
                raise registry.WrongAnswer(
                    _("{case}: your function raised ValueError ({err}). Python's min() cannot "
                      "compare whole arrays: use np.minimum(a, b), which works element "
                      "by element.").format(case=case, err=err)) from err
            raise registry.WrongAnswer(_("{case}: your code raised ValueError: {err}").format(
                                         case=case, err=err)) from err
        except (BlankNotFilled, NotImplementedError, registry.WrongAnswer):
            raise
        except Exception as err:
            raise registry.WrongAnswer(
                _("{case}: your code raised {error_type}: {err}").format(case=case,
                  error_type=type(err).__name__, err=err)) from err
        want = roofline.attainable_tflops(intensity, peak, bw)
        variants = [
            (np.maximum(peak, intensity * bw), _("You took the maximum: attainable throughput is "
                                                 "the LOWER of the two ceilings, np.minimum(peak, "
                                                 "intensity * bandwidth).")),
            (intensity * bw, _("There is no compute ceiling: above the ridge point the answer "
                               "must stay at peak_tflops.")),
            (np.full_like(intensity, peak), _("Below the ridge the memory ceiling limits: "
                                              "intensity * bandwidth.")),
            (np.minimum(peak, intensity * bw * 1000), _("Units: FLOP/B times TB/s is already "
                                                        "TFLOP/s; there is no factor of 1000.")),
            (np.minimum(peak, intensity / bw), _("Multiply intensity by bandwidth (FLOP/B x B/s = "
                                                 "FLOP/s), do not divide.")),
        ]
        try:
            registry.compare(got, want, case, atol=1e-9, rtol=1e-9,
                            hint=_("attainable = np.minimum(peak, intensity * bandwidth)."))
        except registry.WrongAnswer as err:
            hint = next((why for value, why in variants
                         if registry.same_result(got, value, 1e-9)), "")
            raise registry.WrongAnswer(f"{err}\n{hint}".rstrip()) from None
    return _("{total} machines right{hidden}").format(total=len(cases),
             hidden=registry.hidden_note())


# ---------------------------------------------------------------- attention on the roofline

ATTENTION_CASES = [(1024, 64, "bf16"), (4096, 128, "bf16"), (2048, 64, "fp32"),
                   (1000, 80, "fp16"), (32768, 128, "bf16")]
ATTENTION_HIDDEN = [(3000, 96, "fp32"), (512, 256, "bf16")]
KERNELS = ["S = Q K^T", "P = softmax(S)", "O = P V", "fused"]


def _attention_variants(n, d, dtype):
    points = roofline.attention_points(n, d, dtype)
    f = roofline.SOFTMAX_FLOPS_PER_SCORE
    right = [p.intensity for p in points]
    bf16 = roofline.attention_intensities(n, d, "bf16")
    reads = [p.flops / k.read_bytes for p, k in
             zip(points, traffic.standard_attention_traffic(n, d, dtype), strict=False)]
    fused = traffic.flash_attention_traffic(n, d, dtype, block_rows=roofline.FUSED_BLOCK_ROWS)
    return [
        (np.array([right[0] / 2, right[1], right[2] / 2,
                   (2 * n * n * d + f * n * n) / fused.total]),
         _("The matmul FLOPs are half the right count: an (n, d) @ (d, n) product does n*n*d "
           "multiply-adds, 2*n*n*d FLOPs.")),
        (np.array(reads + [right[3]]),
         _("The bytes count only what a kernel reads: use kernel.total (read + written).")),
        (np.array(right[:3] + [(2 * n * n * d + f * n * n) / fused.total]),
         _("The fused kernel does both matmuls (QK^T and PV) plus the softmax: 2 * matmul_flops + "
           "softmax_flops.")),
        (np.array(right[:3] + [4 * n * n * d / fused.total]),
         _("The fused kernel also does the softmax's FLOPs: 2 * matmul_flops + softmax_flops.")),
        (bf16, _("Your result ignores dtype: pass it on to the traffic functions.")),
    ]


@registry.exercise("roofline/attention-intensity", N_("where attention's kernels sit"), 2)
def _check_attention(attention_intensities) -> str:
    cases = registry.with_hidden(ATTENTION_CASES, ATTENTION_HIDDEN)
    for number, (n, d, dtype) in enumerate(cases, 1):
        case = _("case {number}/{total} (n={n}, d={d}, dtype={dtype})").format(number=number,
                 total=len(cases), n=n, d=d, dtype=dtype)
        got = registry.run_student(attention_intensities, case, n, d, dtype)
        want = roofline.attention_intensities(n, d, dtype)
        try:
            registry.compare(got, want, case, atol=0, rtol=1e-9,
                            hint=_("Order: [S = Q K^T, P = softmax(S), O = P V, fused]."))
        except registry.WrongAnswer as err:
            got_array = np.asarray(got, dtype=np.float64) if not isinstance(got, str) else got
            hint = next((why for value, why in _attention_variants(n, d, dtype)
                         if registry.same_result(got_array, value, 0)), "")
            if not hint and np.shape(got_array) == (4,):
                off = [KERNELS[i] for i in range(4)
                       if not np.isclose(got_array[i], want[i], rtol=1e-9)]
                hint = _("Wrong for: {kernels}.").format(kernels=', '.join(off))
            raise registry.WrongAnswer(f"{err}\n{hint}".rstrip()) from None
    return _("{total} shapes right{hidden}").format(total=len(cases),
             hidden=registry.hidden_note())


# ---------------------------------------------------------------- Triton copy kernel

# (n, BLOCK): every n leaves a ragged last block; padding covers a whole block past the end
COPY_CASES = [(1, 64), (1000, 128), (4096, 1024), (3 * 1024 + 7, 1024), (300, 256), (129, 128)]
COPY_HIDDEN = [(2 * 4096 - 1, 4096), (77, 32)]


def run_copy(copy_kernel, n: int, block: int, dtype: torch.dtype, case: str, seed: int = 0):
    """Launch the student's copy kernel the way the lesson does; returns (output, input)."""
    device = runtime.current().device
    generator = torch.Generator().manual_seed(registry.case_seed(seed))
    values = (torch.randn(n, generator=generator) * 100).to(dtype).to(device)
    x = buffers.poisoned(values, pad_cols=block)
    out = buffers.Canaried((n,), dtype, device, pad_cols=block)
    grid = (triton.cdiv(n, block),)
    guards.launch(copy_kernel, grid, case, x, out.tensor, n, BLOCK=block)
    return out, values


def _copy_hint(out, values, n, block, does: str = N_("copies")) -> str:
    written = ~out.unwritten().cpu()
    if n > block and bool(written[:block].all()) and not bool(written[block:].any()):
        return (_("Only the first block was written: every program stored to the same offsets. "
                  "Each program must start at its own block (its program id times the block "
                  "size): {section}.").format(section=_(registry.section_of('roofline/q3-copy'))))
    if bool(written[:-1].all()) and not bool(written[-1]):
        return (_("The last element was never written: the mask switches off one index too many "
                  "at the end: {section}.").format(
                  section=_(registry.section_of('roofline/q3-copy'))))
    return (_("Each program {does} the elements of its own block that lie inside the vector: load "
              "and store them with the same offsets and mask ({section}).").format(does=_(does),
              section=_(registry.section_of('roofline/q3-copy'))))


@registry.exercise("roofline/copy-kernel", N_("Triton copy kernel (masked tail)"), 1, kernel=True)
def _check_copy(copy_kernel) -> str:
    guards.require_jit_kernel(copy_kernel, "roofline/copy-kernel", "copy_kernel")
    cases = registry.with_hidden(COPY_CASES, COPY_HIDDEN)
    dtypes = guards.graded_dtypes()
    total = len(cases) * len(dtypes)
    number = 0
    for dtype in dtypes:
        for n, block in cases:
            number += 1
            case = (_("case {number}/{total} (n_elements={n}, BLOCK={block}, {dtype})").format(
                      number=number, total=total, n=n, block=block,
                      dtype=guards.dtype_name(dtype)))
            out, values = run_copy(copy_kernel, n, block, dtype, case, seed=number)
            out.verify(case)
            try:
                guards.unwritten_hint(out.unwritten(), case, _("(NaN: never stored, or loaded "
                                                               "from outside the input.)"))
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_copy_hint(out, values, n, block)}") from None
            registry.compare(out.tensor, values, case, atol=0,
                            hint=_("A copy must reproduce its input exactly: load and store the "
                                   "same offsets, without arithmetic on the values."))
    names = ", ".join(guards.dtype_name(t) for t in dtypes)
    return _("{total} cases copied exactly, canaries intact ({dtypes}){hidden}").format(
        total=total, dtypes=names, hidden=registry.hidden_note())


# ---------------------------------------------------------------- axpy kernel, from scratch

# (n_elements, BLOCK, alpha): ragged last blocks, one element, a block longer than the vector
AXPY_CASES = [(1, 64, 2.0), (1000, 128, -0.5), (4096, 1024, 3.0), (3 * 1024 + 7, 1024, 0.25),
              (129, 128, -1.5)]
AXPY_HIDDEN = [(2 * 4096 - 1, 4096, -2.0), (77, 32, 10.0), (300, 256, 0.0)]
FLOAT32_ROUNDING = 2.0**-24  # the unit roundoff of float32
AXPY_TOLERANCE = {torch.float32: (1e-6, 1e-6), torch.float16: (1e-3, 2e-3),
                  torch.bfloat16: (1e-2, 1.6e-2)}  # (atol, rtol): one rounding of the output


def run_axpy(axpy_kernel, n: int, block: int, alpha: float, dtype: torch.dtype, case: str,
             seed: int = 0):
    """Launch the student's axpy kernel the way the lesson does; returns (out, x, y)."""
    device = runtime.current().device
    generator = torch.Generator().manual_seed(registry.case_seed(seed))
    x_values = (torch.randn(n, generator=generator) * 10).to(dtype).to(device)
    y_values = (torch.randn(n, generator=generator) * 10).to(dtype).to(device)
    x = buffers.poisoned(x_values, pad_cols=block)
    y = buffers.poisoned(y_values, pad_cols=block)
    out = buffers.Canaried((n,), dtype, device, pad_cols=block)
    guards.launch(axpy_kernel, (triton.cdiv(n, block),), case, x, y, out.tensor, alpha, n,
                  BLOCK=block)
    return out, x_values, y_values


def _axpy_hint(got, x, y, alpha, atol) -> str:
    x, y = x.double().cpu(), y.double().cpu()
    variants = [
        (x + y, _("alpha is missing: out = alpha * x + y.")),
        (alpha * y + x, _("x and y are swapped: alpha multiplies x, not y.")),
        (alpha * (x + y), _("alpha multiplies the sum: out = alpha * x + y, only x is scaled.")),
        (alpha * x, _("y is never added: out = alpha * x + y.")),
        (y, _("The output is y alone: alpha * x is never added.")),
    ]
    for value, why in variants:
        if alpha not in (0.0, 1.0) and registry.same_result(got, value, atol):
            return _("Likely mistake: ") + why
    return (_("Hint: load x and y with the same offsets and mask, convert both to float32, store "
              "alpha * x + y."))


@registry.exercise("roofline/axpy-kernel", N_("Triton axpy kernel, written from scratch"), 2,
                   kernel=True)
def _check_axpy(axpy_kernel) -> str:
    guards.require_jit_kernel(axpy_kernel, "roofline/axpy-kernel")
    cases = registry.with_hidden(AXPY_CASES, AXPY_HIDDEN)
    dtypes = guards.graded_dtypes()
    total, number = len(cases) * len(dtypes), 0
    for dtype in dtypes:
        for n, block, alpha in cases:
            number += 1
            case = (_("case {number}/{total} (n_elements={n}, BLOCK={block}, alpha={alpha:g}, "
                      "{dtype})").format(number=number, total=total, n=n, block=block, alpha=alpha,
                      dtype=guards.dtype_name(dtype)))
            out, x, y = run_axpy(axpy_kernel, n, block, alpha, dtype, case, seed=number)
            out.verify(case)
            try:
                guards.unwritten_hint(out.unwritten(), case, _("(NaN: never stored, or loaded "
                                                               "from outside the inputs.)"))
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_copy_hint(out, x, n, block, does=N_('computes'))}") from None
            want = (alpha * x.double() + y.double()).to(dtype)
            atol, rtol = AXPY_TOLERANCE[dtype]
            # float32 arithmetic rounds alpha * x and the sum (or fuses them): allow a few
            # float32 roundings of the terms, which matters where alpha * x and y cancel
            magnitude = float((abs(alpha) * x.double().abs() + y.double().abs()).max())
            atol = max(atol, 4 * FLOAT32_ROUNDING * magnitude)
            try:
                registry.compare(out.tensor, want, case, atol=atol, rtol=rtol)
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_axpy_hint(out.tensor, x, y, alpha, atol)}") from None
    names = ", ".join(guards.dtype_name(t) for t in dtypes)
    return _("{total} cases right, canaries intact ({dtypes}){hidden}").format(
        total=total, dtypes=names, hidden=registry.hidden_note())
