"""Triton's interpreter without re-patching triton.language at every device-function call.

When a kernel launch starts, Triton's interpreter (3.6 to 3.9) swaps the builtins of
triton.language for numpy versions, and puts them back when the launch ends. A call of one
@triton.jit function from another patches the language again: it scans every builtin of four
namespaces (inspect.getmembers) to set what the running launch has already set. The course's
kernels call helpers in their inner loops, and those scans were most of their interpreter
time (lesson 8's two-halves forward: 4.1 s of 7.0 s under cProfile).

`install()` makes a device call skip the patch when the running launch has already patched
every language module the called function sees; anything else (a launch's own patch, a
function that sees a module the launch did not patch, a call outside any launch) goes to
Triton's own function, as before. What runs, and every result, is unchanged. runtime.setup
installs it once Triton's interpreter is imported (install_when_imported), so that a
numpy-only lesson never imports Triton."""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
import threading

INTERPRETER_MODULE = "triton.runtime.interpreter"

# Triton's own functions, once install() has wrapped them
triton_patch_lang = None
triton_launch = None


class _NothingToRestore:
    def restore(self) -> None:
        pass


class _Launches(threading.local):
    """Per thread: one entry per running launch, the ids of the language modules it patched
    (None before its own patch)."""

    def __init__(self) -> None:
        self.running: list[set[int] | None] = []


_launches = _Launches()


def _languages_seen(fn) -> set[int]:
    import triton.language as tl

    return {id(value) for value in fn.__globals__.values()
            if inspect.ismodule(value) and (value is tl or value is tl.core)}


def patch_once_per_launch(fn):
    """In place of the interpreter's _patch_lang."""
    running = _launches.running
    if not running:  # outside any launch: Triton's own behaviour
        return triton_patch_lang(fn)
    seen = _languages_seen(fn)
    if running[-1] is not None and seen <= running[-1]:
        return _NothingToRestore()  # the launch has patched every module this function sees
    scope = triton_patch_lang(fn)
    running[-1] = (running[-1] or set()) | seen
    return scope


def launch_tracking_patches(self, *args, **kwargs):
    """In place of the interpreter's GridExecutor.__call__ (one kernel launch)."""
    running = _launches.running
    running.append(None)  # nothing patched yet: the launch's own patch comes first
    try:
        return triton_launch(self, *args, **kwargs)
    finally:
        running.pop()


def install(interpreter=None) -> bool:
    """Reuse a launch's patches in its device calls; False where this Triton's interpreter
    lacks the two functions it wraps (then nothing changes)."""
    global triton_patch_lang, triton_launch
    if interpreter is None:
        from triton.runtime import interpreter

    patch_lang = getattr(interpreter, "_patch_lang", None)
    executor = getattr(interpreter, "GridExecutor", None)
    if patch_lang is patch_once_per_launch:
        return True  # installed already
    if not callable(patch_lang) or not isinstance(executor, type):
        return False
    triton_patch_lang, triton_launch = patch_lang, executor.__call__
    interpreter._patch_lang = patch_once_per_launch
    executor.__call__ = launch_tracking_patches
    return True


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Finds Triton's interpreter module like the other finders, and installs once it runs."""

    def find_spec(self, fullname, path, target=None):
        if fullname != INTERPRETER_MODULE:
            return None
        sys.meta_path.remove(self)  # once, and so that the search below does not find itself
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run_module = spec.loader.exec_module

            def run_then_install(module):
                run_module(module)
                install(module)

            spec.loader.exec_module = run_then_install
        return spec


def install_when_imported() -> None:
    """install() now if Triton's interpreter is imported, else as soon as it is."""
    if INTERPRETER_MODULE in sys.modules:
        install(sys.modules[INTERPRETER_MODULE])
    elif not any(isinstance(finder, _InstallOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())
