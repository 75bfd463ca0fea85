"""Tripwires on the references, installed in the grading sandbox before any student code runs.

The static scan (`grader/scan.py`) flags answer cells that name a reference; a reference can
still be reached in ways no scan follows (a name built at run time, source decoded and run).
So the grading sandbox's runner calls `install()` in the notebook's kernel before the first
cell: every reference below is replaced, as soon as its module is loaded (an import hook; no
module is imported for it), by a wrapper that, when it is called from student code while a
check runs that code (`recording.in_student_code()`), publishes a tripwire output at once.
The runner forwards it to the grader with the cell that produced it, outside the student's
reach; the exercise being checked then earns nothing and the submission is flagged.

The references are the names below and every function a lesson's check module defines
(`lesson_check_module`). A call made by the package (a launcher the check hands the student's
kernel to, a stand-in the check hands the student, the check itself) is not a hit; one whose
nearest caller outside Python and the environment is student code is, as is one with no such
caller at all (a thread pool or a `functools` helper the student handed the reference to).
So a course function that calls a reference for whoever calls it must be a reference itself
(the course's helpers that compute an answer are listed). Each record
also says whether every loaded reference still had its tripwire when its check ended
(`intact`), so a notebook that put an original back, or took the hook away before importing
torch, is flagged too. What remains: a reference reached beneath these names (torch's internal
operators) is not seen.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import sys
import types
from pathlib import Path

from . import LESSON_MODULES, recording

# (module, attribute) of every reference an answer must not call.
REFERENCES = (
    ("torch", "softmax"),
    ("torch", "log_softmax"),
    ("torch.special", "softmax"),
    ("torch.special", "log_softmax"),
    ("torch.nn.functional", "softmax"),
    ("torch.nn.functional", "log_softmax"),
    ("torch.nn.functional", "scaled_dot_product_attention"),
    ("torch.nn.functional", "multi_head_attention_forward"),
    ("torch._C._nn", "scaled_dot_product_attention"),
    ("torch.Tensor", "softmax"),
    ("torch.Tensor", "log_softmax"),
    # private spellings (a name missing from this torch is skipped)
    ("torch", "_softmax"),
    ("torch", "_log_softmax"),
    ("torch", "_safe_softmax"),
    ("torch", "_masked_softmax"),
    ("torch", "_native_multi_head_attention"),
    ("flashcourse.models.softmax_states", "softmax_state"),
    ("flashcourse.models.softmax_states", "merge_all"),
    ("flashcourse.models.softmax_states", "merge_lse"),
    ("flashcourse.bench.providers", "naive_attention"),
    ("flashcourse.bench.providers", "make_call"),  # its calls reach SDPA from course code
    ("flashcourse.distributed.tries", "reference_gradients"),
    ("flashcourse.reference", "softmax"),
    ("flashcourse.reference", "standard_attention"),
    ("flashcourse.kernels.attention", "standard_attention"),
    ("flashcourse.kernels.host", "forward"),
    ("flashcourse.kernels.host", "backward"),
    ("flashcourse.kernels.host", "flash_attention"),
    ("flashcourse.kernels.modern_attention", "masked_reference"),
    ("flashcourse.kernels.modern_attention", "gqa_reference"),
    ("flashcourse.distributed.model", "reference_attention"),
    ("flashcourse.distributed.rings", "ring_forward"),
    ("flashcourse.distributed.rings", "ring_backward"),
)

# Package functions that compute what an exercise asks for: "module": (names...). An answer
# must not be or call one; and `./course release` replaces each in the class edition by a stub
# that answers only the calls the lessons' own cells and figures make (checks/shipped_calls.py).
# Found by tests/test_release.py, which offers every public function, kernel and data value of
# the released package as every exercise's answer.
ANSWER_FUNCTIONS = {
    "flashcourse.models.roofline": ("gemm_intensity", "attainable_tflops",
                                    "attention_intensities"),
    "flashcourse.models.memory": ("sectors_and_lines", "warp_efficiency"),
    "flashcourse.models.matmul": ("grouped_order", "launch_order"),
    "flashcourse.kernels.modern_attention": ("classify_blocks",),
    "flashcourse.kernels.capstone": ("spec_attention",),
    "flashcourse.distributed.model": ("zigzag_positions", "step_plan"),
    "flashcourse.distributed.rings": ("merge_lse", "ring_forward", "ring_backward"),
}
REFERENCES = tuple(dict.fromkeys(
    (*REFERENCES, *((module, name) for module, names in ANSWER_FUNCTIONS.items()
                    for name in names))))

_wires_installed: dict[tuple[str, str], object] = {}  # (module, attribute) -> its tripwire
_LIBRARY_ROOTS: tuple[str, ...] = ()
# Every module whose import may complete a reference: the references' modules and the packages
# above them (torch holds torch.Tensor and torch._C._nn).
_LESSON_CHECKS = frozenset(LESSON_MODULES.values())
_WATCHED = frozenset(".".join(module.split(".")[:end]) for module, _ in REFERENCES
                     for end in range(1, module.count(".") + 2))
_watched_importing = 0  # watched modules being executed right now, nested


def _library_roots() -> tuple[str, ...]:
    """Folders of code that is neither the student's nor the course's: Python, the
    environment (torch, numpy, Triton, IPython)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(str(Path(root).resolve()) + "/" for root in roots)


_PACKAGE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=4096)
def _owner(filename: str) -> str:
    """Whose code a frame of `filename` runs: "package" (the course's), "library" (Python,
    the environment, frozen importlib) or "student" (anything else: notebook cells, files the
    notebook wrote, text it ran)."""
    if filename.startswith("<frozen"):
        return "library"
    try:
        path = Path(filename).resolve()
    except (OSError, ValueError):
        return "student"
    if path.is_relative_to(_PACKAGE):
        return "package"
    return "library" if str(path).startswith(_LIBRARY_ROOTS) else "student"


def _called_by_student(attribute: str, depth: int = 2) -> bool:
    """Whether the code that made this call of the reference named `attribute`, past any
    library code between (functools, a thread pool, torch's own layers) and past course code
    that only passes on a callable it was handed (its code does not name the reference: a
    launcher, a guard), is the student's. Course code that names the reference decides for the
    course: a check hands the student course functions to call (lesson 8's stand-in backends),
    so a course helper that computes an answer is a reference itself (REFERENCES, the lesson
    check modules). A stack with no such frame (a thread or callback started for student code)
    counts as the student's, as it runs while student code does."""
    frame = sys._getframe(depth)
    while frame is not None:
        owner = _owner(frame.f_code.co_filename)
        if owner == "student":
            return True
        if owner == "package" and attribute in frame.f_code.co_names:
            return False
        frame = frame.f_back
    return True


_MONITORING = getattr(sys, "monitoring", None)  # Python 3.12 and later


def hooks_set(gettrace=sys.gettrace, getprofile=sys.getprofile,
              monitoring=_MONITORING) -> list[str]:
    """The interpreter's hooks set now that run Python at every call (a trace or profile
    function, a sys.monitoring tool): one can read and write a course launcher's locals while
    the check runs the student's kernel. Python's own functions, bound when this loads."""
    found = [name for name, get in (("sys.settrace", gettrace), ("sys.setprofile", getprofile))
             if get() is not None]
    if monitoring is not None:
        found += [f"sys.monitoring tool {tool}" for tool in range(6)
                  if monitoring.get_tool(tool) is not None]
    return found + _torch_modes() + _triton_hooks()


def _triton_hooks() -> list[str]:
    """Functions Triton runs around a launch: pre-run hooks on a kernel answer a check was
    handed (run on the host with the launch's arguments; in the interpreter, on the copies it
    writes back) and the launch hooks of Triton's knobs. Nothing is imported."""
    found = []
    for kernel in recording.kernels_handed():
        name = getattr(getattr(kernel, "fn", None), "__name__", "?")
        if getattr(kernel, "pre_run_hooks", None):
            found.append(f"pre-run hook on kernel {name}")
        found += [f"kernel {name}: {what}" for what in _kernel_changed(kernel)]
    runtime_knobs = getattr(getattr(sys.modules.get("triton"), "knobs", None), "runtime", None)
    for name in ("launch_enter_hook", "launch_exit_hook"):
        hook = getattr(runtime_knobs, name, None)
        if getattr(hook, "calls", hook):  # a chain of hooks (Triton 3.5 on) or one, or None
            found.append(f"triton {name}")
    return found


def _kernel_changed(kernel) -> list[str]:
    """What of a kernel answer's launch machinery no longer is Triton's: its class, a method
    replaced on the object (`kernel.run = fill`), the function it compiles (`kernel.fn`), or,
    in the interpreter, the rewriter and the cached rewrite of its function that run."""
    kind = type(kernel)
    if not kind.__module__.startswith("triton."):
        return [f"a class of its own ({kind.__name__})"]
    changed = [f"its {attr} replaced" for attr in sorted(vars(kernel))
               if callable(getattr(kind, attr, None))]
    rewriter = getattr(kernel, "rewriter", None)
    if rewriter is None:  # compiled: Triton compiles kernel.src, read from kernel.fn once
        src, source = getattr(kernel, "src", None), _source_of(kernel.fn)
        if isinstance(src, str) and source is not None and src.strip() not in source:
            changed.append("its function replaced")
        return changed
    if type(rewriter).__module__ != kind.__module__ or getattr(rewriter, "fn", None) \
            is not kernel.fn or any(callable(getattr(type(rewriter), attr, None))
                                    for attr in vars(rewriter)):
        return [*changed, "its rewriter replaced"]
    cache = getattr(kind, "rewritten_fn", None)
    cached = cache.get(kernel.fn) if isinstance(cache, dict) else None
    if cached is not None and not _same_code(cached, rewriter.rewrite_ast()):
        changed.append("the function the interpreter runs replaced")
    return changed


def _source_of(fn) -> str | None:
    """fn's source, dedented: Triton's decorator keeps it so, or from its `def` on (which part
    depends on the version, so kernel.src is looked for inside it)."""
    import inspect
    import textwrap

    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None


def _same_code(one, other) -> bool:
    first, second = getattr(one, "__code__", None), getattr(other, "__code__", None)
    return first is not None and second is not None and first.co_code == second.co_code \
        and first.co_names == second.co_names


def _torch_modes() -> list[str]:
    """torch's function and dispatch modes in force (each sees every torch call, the Triton
    interpreter's copies of a kernel's tensors too), but for torch's own default device
    (`torch.set_default_device`). Nothing is imported when torch is not."""
    if "torch" not in sys.modules:
        return []
    import torch
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    found = [f"torch function mode {type(mode).__name__}"
             for mode in _get_current_function_mode_stack() if type(mode) is not DeviceContext]
    if torch._C._len_torch_dispatch_stack():
        found.append("torch dispatch mode")
    return found


def _loaded(module_name: str):
    """The module (or class: torch.Tensor) `module_name` names if it is loaded, else None:
    nothing is imported."""
    found = sys.modules.get(module_name)
    if found is not None:
        return found
    parent, _, attribute = module_name.rpartition(".")
    owner = sys.modules.get(parent) if parent else None
    return None if owner is None else getattr(owner, attribute, None)


def _tripwire(name: str, original, in_student_code=recording.in_student_code,
              called_by_student=_called_by_student):
    # the two tests are this function's own (bound when the module loads): a notebook that
    # rebinds the modules' names does not change them
    attribute = name.rpartition(".")[2]

    @functools.wraps(original)
    def tripwire(*args, **kwargs):
        if in_student_code() and called_by_student(attribute):
            recording.publish(recording.TRIPWIRE_MIME,
                              {"name": name, "exercise": recording.current_exercise()})
        return original(*args, **kwargs)

    tripwire.__flashcourse_tripwire__ = name
    # functools.wraps leaves the original one attribute away, where a name resolved at run
    # time (`pydoc.locate("...standard_attention.__wrapped__")`) would call it unseen
    del tripwire.__wrapped__
    return tripwire


def flag_answer(answer) -> None:
    """A hit when the answer itself is a reference (or a partial or method of one): the check
    would call it from the package's own code, which a tripwire does not count."""
    seen = 0
    while answer is not None and seen < 8:
        name = getattr(answer, "__flashcourse_tripwire__", None)
        if name:
            recording.publish(recording.TRIPWIRE_MIME,
                              {"name": name, "exercise": recording.current_exercise()})
            return
        answer = (getattr(answer, "func", None) or getattr(answer, "__func__", None)
                  or getattr(answer, "__wrapped__", None) or getattr(answer, "pyfunc", None)
                  or _call_of(answer))
        seen += 1


def _call_of(answer):
    """What calling an object of a class of the notebook's runs: its class's __call__ (a
    staticmethod of a reference would be called by the check itself, no student frame
    between); None for functions and the like, whose __call__ is Python's own."""
    for klass in type(answer).__mro__:
        call = vars(klass).get("__call__")
        if call is not None:
            call = getattr(call, "__func__", call)  # a staticmethod or classmethod
            return call if isinstance(call, types.FunctionType) else None
    return None


class _WireAfterImport(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: a watched module's loader is wrapped so that, once the
    outermost watched import completes, every reference then loaded gets its tripwire, before
    the importing code sees the module (so a copy taken right after `import torch` is wired).
    Nothing is imported for its own sake: lesson 1 never loads torch (about 2 s a notebook)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WATCHED and not lesson_check_module(fullname):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _WiringLoader(spec.loader)
        return spec


class _WiringLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        global _watched_importing
        module.__spec__.loader = module.__loader__ = self.loader  # as a plain import leaves it
        _watched_importing += 1
        try:
            self.loader.exec_module(module)
        finally:
            _watched_importing -= 1
        if _watched_importing == 0:  # torch whole, not half-way through its own imports
            _wire_loaded()


def lesson_check_module(name: str) -> bool:
    """Whether `name` is a lesson's check module (or one of its submodules): every function
    it defines computes part of what its exercises ask, so each is a reference too."""
    parts = name.split(".")
    return len(parts) >= 3 and parts[:2] == ["flashcourse", "checks"] and \
        parts[2] in _LESSON_CHECKS


def _references_loaded():
    """(module name, attribute, owner) of every reference loaded now: REFERENCES, and the
    functions the loaded lesson check modules define."""
    for module_name, attribute in REFERENCES:
        owner = _loaded(module_name)
        if owner is not None:
            yield module_name, attribute, owner
    for module_name, module in list(sys.modules.items()):
        if module is not None and lesson_check_module(module_name):
            for attribute, value in list(vars(module).items()):
                if isinstance(value, types.FunctionType) and value.__module__ == module_name:
                    yield module_name, attribute, module


def _wire_loaded() -> None:
    """Put a tripwire on every loaded reference that has none yet (and on the names other
    loaded modules of the package bound it to)."""
    replaced: dict[int, object] = {}
    for module_name, attribute, owner in _references_loaded():
        if (module_name, attribute) in _wires_installed:
            continue
        original = getattr(owner, attribute, None)
        if original is None or getattr(original, "__flashcourse_tripwire__", None):
            continue
        wire = _tripwire(f"{module_name}.{attribute}", original)
        setattr(owner, attribute, wire)
        _wires_installed[(module_name, attribute)] = wire
        replaced[id(original)] = (original, wire)
    if not replaced:
        return
    for name, module in list(sys.modules.items()):  # `from .reference import softmax` copies
        if not name.startswith("flashcourse") or module is None:
            continue
        for key, value in list(vars(module).items()):
            hit = replaced.get(id(value))
            if hit is not None and hit[0] is value:
                setattr(module, key, hit[1])


def install() -> list[str]:
    """Put a tripwire on every reference loaded now, and on each of the others as its module's
    import completes; the names wired so far."""
    global _LIBRARY_ROOTS
    from .. import runtime

    runtime.current()  # the runtime before any module of the package defines a kernel
    _LIBRARY_ROOTS = _library_roots()
    _owner.cache_clear()
    if not any(isinstance(finder, _WireAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WireAfterImport())
    _wire_loaded()
    recording.watch_tripwires(intact, hooks_set)
    return [f"{m}.{a}" for m, a in _wires_installed]


def intact() -> list[str]:
    """The references loaded without their tripwire in place (empty when every one is): put
    back by the notebook, or imported after it took the import hook away."""
    gone = []
    for module_name, attribute in dict.fromkeys([*REFERENCES, *_wires_installed]):
        owner = _loaded(module_name)
        original = None if owner is None else getattr(owner, attribute, None)
        if original is not None and original is not _wires_installed.get((module_name, attribute)):
            gone.append(f"{module_name}.{attribute}")
    return gone
