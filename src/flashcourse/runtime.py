"""Pick where Triton kernels run: compiled on a CUDA GPU, or the Triton interpreter on CPU.

The interpreter is chosen by the environment variable TRITON_INTERPRET, which Triton reads when
a kernel is *defined* (decorated), so `setup()` must run before any `@triton.jit` function.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from . import i18n, interpreter_calls
from .checks.errors import CourseInputError  # raised here; fc.CourseInputError
from .i18n import N_, _

FORCE_INTERPRETER_ENV = "FLASHCOURSE_INTERPRET"


@dataclass(frozen=True)
class Runtime:
    interpreter: bool  # True: Triton interpreter on CPU; False: compiled Triton on a CUDA GPU
    device: str  # torch device that kernel inputs must live on: "cpu" or "cuda"
    reason: str  # why this runtime was picked, for the one-line banner (a message, N_)

    def describe(self) -> str:
        reason = _(self.reason).format(env=FORCE_INTERPRETER_ENV)
        if self.interpreter:
            return _("Runtime: Triton interpreter on CPU ({reason}).").format(reason=reason)
        return _("Runtime: compiled Triton on a CUDA GPU ({reason}).").format(reason=reason)

    def _ipython_display_(self) -> None:
        """In a notebook, `fc.setup()` as a cell's last line prints its one line and shows no
        `Runtime(...)` value under it; shown any other time, a runtime is its line."""
        global _just_announced
        if _just_announced is self or book_page():
            _just_announced = None
            return
        print(self.describe())


_current: Runtime | None = None
_just_announced: Runtime | None = None  # printed by setup(); its display would repeat it


def require(condition: bool, message: str) -> None:
    """A launcher's input check: CourseInputError(message) unless `condition` holds."""
    if not condition:
        raise CourseInputError(message)


def truthy(value: str | None) -> bool:
    """An environment switch: 1, true, yes or on (any case) turn it on."""
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


# A GPU torch can use needs one of these device nodes on Linux: NVIDIA's driver, WSL2's GPU
# bridge, AMD's ROCm (torch.cuda covers it too).
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def _cuda_available() -> bool:
    if sys.platform.startswith("linux") and not any(map(os.path.exists, GPU_DEVICE_NODES)):
        return False  # no GPU driver: spare a numpy-only lesson torch's seconds of import
    try:
        import torch
    except ImportError:  # numpy-only use of the course still works
        return False
    return torch.cuda.is_available()


def _choose() -> Runtime:
    if truthy(os.environ.get(FORCE_INTERPRETER_ENV)):
        return Runtime(True, "cpu", N_("forced by {env}=1"))
    if truthy(os.environ.get("TRITON_INTERPRET")):
        return Runtime(True, "cpu", N_("TRITON_INTERPRET=1 was already set"))
    if _cuda_available():
        return Runtime(False, "cuda", N_("CUDA device found"))
    return Runtime(True, "cpu", N_("no CUDA GPU found"))


def setup(verbose: bool = True, student: str | None = None) -> Runtime:
    """Choose the runtime once per process and print one line saying which.

    Call this at the top of a notebook, before defining any Triton kernel. `student`: your
    student id, which picks your own numbers in the self-check questions (default:
    $FLASHCOURSE_STUDENT; without one, the lesson's numbers).
    """
    global _current, _just_announced
    from . import student as students

    i18n.set_language(None)  # first: the messages below, and a bad id's, in its language
    students.choose(student)  # a bad id stops here, before anything else changes
    if _current is None:
        _current = _choose()
        if _current.interpreter:
            os.environ["TRITON_INTERPRET"] = "1"
    if _current.interpreter:
        quiet_interpreter_warnings()
        interpreter_calls.install_when_imported()  # faster device calls; imports no Triton
    from .messages import install_message_handler

    install_message_handler()  # in a notebook, course errors show their message only
    if verbose and not book_page():  # the published page has no runtime to speak of
        print(_current.describe())
        _just_announced = _current
    return _current


def compile_only() -> Runtime:
    """Pick compiled Triton without a GPU, for a script that compiles kernels for a GPU target
    and never launches them (bench/compile_counts.py); before any kernel module is imported. Kernel
    inputs live on the CPU: a launcher is called with CPU tensors to record its launches."""
    global _current
    require(_current is None or not _current.interpreter, "the interpreter was already chosen "
            "in this process: call compile_only() before setup() and before importing any "
            "kernel module.")
    os.environ.pop("TRITON_INTERPRET", None)
    _current = Runtime(False, "cpu", N_("compiling only, nothing launched"))
    return _current


def book_page() -> bool:
    """True while Quarto renders a book page: lines meant for the notebook's reader (which
    runtime this machine has, what it cannot measure) are left out there."""
    return bool(os.environ.get("QUARTO_DOCUMENT_PATH"))


# The interpreter runs kernels with numpy, which warns where a GPU computes inf or NaN silently
# (exp of a large score, -inf - -inf or the max of a fully masked row): noise that points into
# Triton's code.
INTERPRETER_WARNINGS = (r"(overflow|underflow|invalid value|divide by zero) encountered in "
                        r"|All-NaN (slice|axis) encountered")


def quiet_interpreter_warnings() -> None:
    """Hide numpy's floating-point RuntimeWarnings raised inside Triton's interpreter only; the
    same warnings from the student's own numpy code still show."""
    import warnings

    warnings.filterwarnings("ignore", message=INTERPRETER_WARNINGS, category=RuntimeWarning,
                            module=re.escape(interpreter_calls.INTERPRETER_MODULE))


def current() -> Runtime:
    """The runtime chosen by `setup()`, choosing silently if nobody called it yet."""
    return _current if _current is not None else setup(verbose=False)


def reset_for_tests() -> None:
    """Forget the choice (tests only; kernels defined earlier keep their mode)."""
    global _current, _just_announced
    _current = _just_announced = None
    from . import student

    student.reset_for_tests()


def check_tensors(*tensors, names: tuple[str, ...] | None = None, dot: bool = False) -> None:
    """Refuse inputs the current runtime cannot handle correctly, with a message that says why.

    dot=True means the kernel multiplies these tensors with `tl.dot`: the interpreter returns
    garbage for a bf16 `tl.dot` (triton issue 11584), so bf16 is refused there, never graded.
    """
    import torch

    runtime = current()
    names = names or tuple(_("input {number}").format(number=i) for i in range(len(tensors)))
    for name, tensor in zip(names, tensors, strict=True):
        if not isinstance(tensor, torch.Tensor):
            raise CourseInputError(_(
                "{name} is a {kind}; Triton kernels take torch tensors. "
                "Convert with torch.from_numpy(array)."
            ).format(name=name, kind=type(tensor).__name__))
        if tensor.device.type != runtime.device:
            raise CourseInputError(_(
                "{name} is on {device}, but this runtime runs kernels on {wanted}. Move it with "
                "tensor.to('{wanted}')."
            ).format(name=name, device=tensor.device, wanted=runtime.device))
        if dot and runtime.interpreter and tensor.dtype == torch.bfloat16:
            raise CourseInputError(_(
                "{name} is bfloat16: the Triton interpreter computes bf16 tl.dot wrongly "
                "(silent garbage, triton issue 11584). Use float16 or float32 on CPU, or run "
                "bf16 on a CUDA GPU."
            ).format(name=name))


def check_block_size(name: str, value: int) -> None:
    """tl.arange needs a power-of-two length: say so before Triton fails deep inside."""
    if not isinstance(value, int) or value < 1 or value & (value - 1):
        lower = 1 << (max(int(value), 1).bit_length() - 1) if isinstance(value, int) else 16
        raise CourseInputError(_(
            "{name}={value!r} is not a power of two; Triton's tl.arange needs one. "
            "Use {lower} or {higher}."
        ).format(name=name, value=value, lower=lower, higher=lower * 2))
