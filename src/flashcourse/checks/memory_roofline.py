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
SECTION_INTENSITY = N_('section 1 ("Arithmetic intensity")')
SECTION_ROOFLINE = N_('section 2 ("The roofline")')
SECTION_ATTENTION = N_('section 3 ("Attention on the roofline")')
SECTION_KERNELS = N_('section 4 ("A Triton copy kernel")')


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
    section = _(SECTION_INTENSITY)
    return [(value, why.format(section=section)) for value, why in [
        (m * n * k / ((m * k + k * n + m * n) * b),
         _("Your FLOP count is half the right one: it counts one FLOP per term of the sums, "
           "but each term is a multiply and an add ({section}).")),
        (2 * m * n * k / ((m * k + k * n) * b),
         _("The bytes count only the reads of A and B: the kernel also writes C, once "
           "({section}).")),
        (2 * m * n * k / (m * k + k * n + m * n),
         _("The bytes count elements, not bytes: each element of this case takes element_bytes "
           "bytes ({section}).")),
        (2 * m * n * k / ((m * k + k * n + 2 * m * n) * b),
         _("C is counted twice: the product only writes C, it does not read it ({section}).")),
    ]]


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
                          "bytes of reading A and B once and writing C once ({section}).").format(
                          section=_(SECTION_INTENSITY)))
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
                    _("{case}: your function raised ValueError ({err}). Python's built-in "
                      "min() compares whole objects, not arrays element by element: the "
                      "roofline takes the lower ceiling at each intensity separately "
                      "({section}).").format(case=case, err=err,
                                             section=_(SECTION_ROOFLINE))) from err
            raise registry.WrongAnswer(_("{case}: your code raised ValueError: {err}").format(
                                         case=case, err=err)) from err
        except (BlankNotFilled, NotImplementedError, registry.WrongAnswer):
            raise
        except Exception as err:
            raise registry.WrongAnswer(
                _("{case}: your code raised {error_type}: {err}").format(case=case,
                  error_type=type(err).__name__, err=err)) from err
        want = roofline.attainable_tflops(intensity, peak, bw)
        try:
            registry.compare(got, want, case, atol=1e-9, rtol=1e-9)
        except registry.WrongAnswer as err:
            raise registry.WrongAnswer(
                f"{err}\n{_roofline_mistake(got, intensity, peak, bw)}") from None
    return _("{total} machines right{hidden}").format(total=len(cases),
             hidden=registry.hidden_note())


def _roofline_mistake(got, intensity, peak, bw) -> str:
    """What a wrong roofline does, in words: a known mistake, else which ceiling it breaks."""
    section = _(SECTION_ROOFLINE)
    variants = [
        (np.maximum(peak, intensity * bw),
         _("Your values exceed the compute peak where intensity is high and the memory ceiling "
           "where it is low: you took the higher ceiling, but an operator can beat neither, so "
           "the roofline is the lower of the two at each intensity ({section}).")),
        (intensity * bw,
         _("Your values grow past the compute peak where intensity is high: there is no compute "
           "ceiling, but above the ridge point the throughput stays at the peak ({section}).")),
        (np.full_like(intensity, peak),
         _("Your values stay at the peak at every intensity: there is no memory ceiling, but "
           "below the ridge point memory cannot feed the peak rate ({section}).")),
        (np.minimum(peak, intensity * bw * 1000),
         _("Units: FLOP/B times TB/s is already TFLOP/s; there is no factor of 1000 "
           "({section}).")),
        (np.minimum(peak, intensity / bw),
         _("Your memory ceiling divides intensity by bandwidth: FLOP/B and B/s give FLOP/s only "
           "as a product ({section}).")),
    ]
    known = next((why for value, why in variants if registry.same_result(got, value, 1e-9)),
                 None)
    if known is not None:
        return known.format(section=section)
    values = np.asarray(got, dtype=np.float64) if np.shape(got) == np.shape(intensity) else None
    if values is not None and np.any(values > peak * (1 + 1e-9)):
        why = _("Some of your values exceed the compute peak: the roofline caps attainable "
                "throughput by both ceilings ({section}).")
    elif values is not None and np.any(values > intensity * bw * (1 + 1e-9)):
        why = _("Some of your values exceed the memory ceiling where intensity is low: the "
                "roofline caps attainable throughput by both ceilings ({section}).")
    else:
        why = _("Attainable throughput is the lower of the two ceilings at each intensity, the "
                "compute peak and what memory can feed ({section}).")
    return why.format(section=section)


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
    section = _(SECTION_ATTENTION)
    return [(value, why.format(section=section)) for value, why in [
        (np.array([right[0] / 2, right[1], right[2] / 2,
                   (2 * n * n * d + f * n * n) / fused.total]),
         _("Your matmul FLOP count is half the right one: each multiply-add of a product is two "
           "FLOPs, a multiply and an add ({section}).")),
        (np.array(reads + [right[3]]),
         _("The bytes count only what a kernel reads: its intensity divides by every byte it "
           "moves, read and written ({section}).")),
        (np.array(right[:3] + [(2 * n * n * d + f * n * n) / fused.total]),
         _("The fused kernel's FLOPs hold one matmul only: it does both products (QK^T and PV) "
           "as well as the softmax ({section}).")),
        (np.array(right[:3] + [4 * n * n * d / fused.total]),
         _("The fused kernel's FLOPs leave out the softmax: it does the softmax's work as well "
           "as both products ({section}).")),
        (bf16, _("Your result ignores dtype: the bytes of every kernel depend on it "
                 "({section}).")),
    ]]


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
                            hint=_("The order: QK^T, softmax, PV, then the fused kernel."))
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
                  "Each program must start at its own block: {section}.").format(
                  section=_(registry.section_of('roofline/q3-copy'))))
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
        (x + y, _("alpha is missing: your output is the plain sum of x and y.")),
        (alpha * y + x, _("x and y are swapped: alpha multiplies x, not y.")),
        (alpha * (x + y), _("alpha multiplies the sum: only x is scaled, then y is added.")),
        (alpha * x, _("y is never added: your output is x scaled by alpha alone.")),
        (y, _("The output is y alone: the scaled x is never added.")),
    ]
    section = _(SECTION_KERNELS)
    for value, why in variants:
        if alpha not in (0.0, 1.0) and registry.same_result(got, value, atol):
            return _("Likely mistake: ") + why + " " + _("Re-read the specification of "
                                                         "{section}.").format(section=section)
    return _("Hint: both inputs are read at the same positions and with the same mask, in "
             "float32, and the output follows the specification of {section}.").format(
             section=section)


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
