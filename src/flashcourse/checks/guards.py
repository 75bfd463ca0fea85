"""Helpers for graders that launch a student's Triton kernel themselves.

A grader hands the kernel inputs from `buffers.poisoned` and an output in `buffers.Canaried`,
launches it, then checks the canaries and the values. This module adds what every such check
needs: padding wide enough for the largest block a case uses (so an unmasked access lands in
poison or canaries, never in memory that belongs to someone else), a launch that turns a crash
into a message naming the case, and the dtypes a runtime can grade.
"""

from __future__ import annotations

import torch

from .. import runtime
from ..blanks import BlankNotFilled, refuse_blanks, source_of
from ..i18n import _
from ..kernels import attention
from ..launch import raise_blank_or_stub
from . import buffers, recording, registry
from .errors import LaunchFailed, NotStarted

# (atol, rtol) of attention outputs (lessons 6 and 8); L and the gradients have their own
ATTENTION_TOLERANCES = {torch.float32: (2e-4, 1e-3), torch.float16: (4e-3, 8e-3)}


def dot_tolerance(table: dict, dtype: torch.dtype) -> tuple[float, float]:
    """table[dtype], except on a GPU, where tl.dot runs float32 as TF32 (10-bit mantissa):
    float32 is graded like float16 there."""
    if dtype == torch.float32 and runtime.current().device != "cpu":
        return table[torch.float16]
    return table[dtype]


def mistake_tolerance(dtype: torch.dtype) -> float:
    """How close an attention output must be to a simulated mistake to be named as it: twice
    the dtype's grading tolerance (TF32's for float32 on a GPU), never below fp32 rounding, so
    the interpreter and a GPU name the same mistake."""
    return max(2e-3, 2 * max(dot_tolerance(ATTENTION_TOLERANCES, dtype)))


def place_heads(x: torch.Tensor, layout: str, pad: int) -> torch.Tensor:
    """An attention input on the kernel's device inside NaN padding of at least `pad` rows (a
    whole block), so that an unmasked block load stays inside the buffer and reads NaN."""
    return buffers.poisoned_heads(x, layout, pad, runtime.current().device)


def graded_dtypes() -> list[torch.dtype]:
    """fp32 and fp16 everywhere; bf16 too on a GPU (the interpreter is only tested on the two)."""
    dtypes = [torch.float32, torch.float16]
    if not runtime.current().interpreter:
        dtypes.append(torch.bfloat16)
    return dtypes


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


def require_jit_kernel(kernel, exercise_id: str, name: str | None = None) -> None:
    """Refuse anything but a @triton.jit kernel, and a kernel that, or whose @triton.jit
    helpers, still hold a blank or still raise NotImplementedError. `name`, the kernel's name
    in the lesson, goes into the message as the check call to make."""
    recording.inspected(f"{exercise_id}: the answer is a kernel",
                        lambda: _require_jit_kernel(kernel, exercise_id, name))


def _require_jit_kernel(kernel, exercise_id: str, name: str | None) -> None:
    from triton.runtime.jit import KernelInterface

    if not isinstance(kernel, KernelInterface):
        call = f': check("{exercise_id}", {name})' if name else ""
        raise registry.WrongAnswer(_(
            "{exercise_id}: pass the @triton.jit kernel itself (got {got}), not the result of "
            "calling it or its .fn; the grader launches it{call}.").format(
            exercise_id=exercise_id, got=type(kernel).__name__, call=call))
    recording.kernel_handed(kernel)
    for name, obj in [(kernel.fn.__name__, kernel), *attention.kernel_helpers(kernel)]:
        refuse_blanks(obj, name)
        if "raise NotImplementedError" in (source_of(obj) or ""):
            raise NotStarted(_(
                "{exercise_id}: {name} still raises NotImplementedError. Replace the "
                "`raise NotImplementedError` line with your implementation.").format(
                exercise_id=exercise_id, name=name))


def launch(kernel, grid, case: str, *args, **kwargs) -> None:
    """Run `kernel[grid](*args, **kwargs)` through `guarded`. What the launch returns is
    dropped: compiled Triton returns a CompiledKernel, which is no data to record (the kernel's
    results are the tensors it wrote)."""

    def run() -> None:
        kernel[grid](*args, **kwargs)

    guarded(case, run, tensors=tensors_in(args, kwargs))


def tensors_in(args, kwargs) -> list[torch.Tensor]:
    """The tensors among a launch's arguments: the ones a kernel may write."""
    return [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]


def guarded(case: str, run, hint: str = "", tensors=()):
    """Run `run()`, which launches a student's kernel: a crash becomes a WrongAnswer naming the
    case (plus `hint`), a stub stays a NotImplementedError, a blank a BlankNotFilled, and a
    refused input its CourseInputError. Waits for the GPU, so a fault surfaces here.

    `tensors`: every tensor the kernel reads or writes (see `recording.student_call`)."""
    try:
        result = recording.student_call(case, lambda: _synchronized(run), tensors=tensors)
    except (BlankNotFilled, NotImplementedError, registry.WrongAnswer,
            runtime.CourseInputError):
        raise
    except Exception as err:  # noqa: BLE001  (any crash inside student code)
        raise_blank_or_stub(err)
        text = str(err)
        if "NotImplementedError" in text:  # a stub compiled on the GPU
            raise NotImplementedError(text) from None
        if "______" in text or "BlankNotFilled" in text:
            raise BlankNotFilled(_("Fill in the blank in your kernel ({case}).").format(
                case=case)) from None
        first = next((line for line in text.splitlines() if line.strip()), type(err).__name__)
        raise LaunchFailed(
            _("{case}: launching your kernel raised {error_type}: {error}").format(
                case=case, error_type=type(err).__name__, error=first[:300])
            + (f"\n{hint}" if hint else "")) from err
    return result


def _synchronized(run):
    result = run()
    if not runtime.current().interpreter:
        torch.cuda.synchronize()
    return result


def unwritten_hint(unwritten: torch.Tensor, case: str, what: str) -> None:
    """Raise when some outputs were never stored, saying where the first one is."""
    if not bool(unwritten.any()):
        return
    flat = torch.nonzero(unwritten.reshape(-1))[0, 0].item()
    count = int(unwritten.sum())
    if unwritten.dim() == 1:
        where = _("index {index}").format(index=flat)
    else:
        cols = unwritten.shape[-1]
        where = _("row {row}, column {column}").format(row=flat // cols, column=flat % cols)
    raise registry.WrongAnswer(_(
        "{case}: {count} of {size} outputs were never written, first at {where}. {what}").format(
        case=case, count=count, size=unwritten.numel(), where=where, what=what))
