"""The `______` placeholder of exercise notebooks.

Any use of an unfilled blank (arithmetic, indexing, numpy, conversion) raises `BlankNotFilled`,
so a student sees "fill in the blank" instead of a NameError or a silent wrong answer.
"""

from __future__ import annotations

import inspect

from .i18n import _

BLANK_TOKEN = "______"


class BlankNotFilled(Exception):
    """Raised when code uses a `______` placeholder that the student has not replaced yet."""


def _message(where: str = "", count: int = 1) -> str:
    place = _(" in {where}").format(where=where) if where else ""
    if count > 1:
        return _(
            "Fill in the blanks{place}: {count} `{blank}` placeholders are still there. "
            "Replace each with your expression, run the cell, then run the check again."
        ).format(place=place, count=count, blank=BLANK_TOKEN)
    return _(
        "Fill in the blank{place}: a `{blank}` placeholder is still there. "
        "Replace it with your expression, run the cell, then run the check again."
    ).format(place=place, blank=BLANK_TOKEN)


class _Blank:
    __slots__ = ()

    def __repr__(self) -> str:
        return BLANK_TOKEN

    def _refuse(self, *args, **kwargs):
        raise BlankNotFilled(_message())

    # numpy hooks: np.exp(blank), np.maximum(x, blank), np.asarray(blank), arr[...] = blank
    def __array_ufunc__(self, *args, **kwargs):
        raise BlankNotFilled(_message())

    def __array_function__(self, *args, **kwargs):
        raise BlankNotFilled(_message())

    def __array__(self, *args, **kwargs):
        raise BlankNotFilled(_message())

    __call__ = __getitem__ = __setitem__ = __iter__ = __len__ = __format__ = _refuse
    __bool__ = __float__ = __int__ = __index__ = __complex__ = _refuse
    __neg__ = __pos__ = __abs__ = __invert__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refuse
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _refuse

    def __getattr__(self, name):
        raise BlankNotFilled(_message())

    # Comparisons for equality must not raise: containers compare their items with ==.
    def __eq__(self, other):
        return other is self

    def __hash__(self) -> int:
        return 0


______ = _Blank()


def is_blank(value) -> bool:
    return value is ______


def source_of(obj) -> str | None:
    """Source text of a function or Triton kernel, or None when Python cannot find it."""
    fn = getattr(obj, "fn", obj)  # a Triton JITFunction wraps the Python function in .fn
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def blank_lines(obj) -> list[int]:
    """Line numbers (1-based, within the function) that still hold a blank."""
    source = source_of(obj)
    if source is None:
        return []
    return [n for n, line in enumerate(source.splitlines(), 1) if BLANK_TOKEN in line]


_CHECKED_CODE: set = set()  # code objects already found free of blanks


def jit_helpers(kernel) -> list[tuple[str, object]]:
    """The other @triton.jit functions a Triton kernel calls, found among its global names, and
    the ones those call in turn; [] for anything that is not a Triton kernel."""
    fn = getattr(kernel, "fn", None)
    if fn is None or not hasattr(fn, "__code__"):
        return []
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        return []
    found: list[tuple[str, object]] = []
    seen, todo = {id(kernel)}, [fn]
    while todo:
        current = todo.pop(0)
        for name in current.__code__.co_names:
            helper = current.__globals__.get(name)
            if isinstance(helper, KernelInterface) and id(helper) not in seen:
                seen.add(id(helper))
                found.append((name, helper))
                if hasattr(getattr(helper, "fn", None), "__code__"):
                    todo.append(helper.fn)
    return found


def _unchecked_blank_lines(obj) -> list[tuple[int, str]]:
    """(line number, line) of each blank in `obj`; a function found clean is remembered by its
    code object (reading the source costs far more than a GPU kernel launch)."""
    code = getattr(getattr(obj, "fn", obj), "__code__", None)
    if code is not None and code in _CHECKED_CODE:
        return []
    lines = blank_lines(obj)
    if not lines:
        if code is not None:
            _CHECKED_CODE.add(code)
        return []
    source = source_of(obj).splitlines()
    return [(n, source[n - 1].strip()) for n in lines]


def refuse_blanks(obj, name: str) -> None:
    """Raise BlankNotFilled naming every line that still holds a blank, in `obj` and, for a
    Triton kernel, in the @triton.jit helpers it calls: all of them at once, so a student sees
    the whole list instead of one function at a time. Launchers call this on every launch."""
    found = [(label, lines) for label, item in [(name, obj), *jit_helpers(obj)]
             if (lines := _unchecked_blank_lines(item))]
    if not found:
        return
    if len(found) == 1:
        shown = [_("    line {number}: {text}").format(number=n, text=text)
                 for n, text in found[0][1]]
    else:
        shown = [_("    {label}, line {number}: {text}").format(label=label, number=n, text=text)
                 for label, lines in found for n, text in lines]
    where = ", ".join(label for label, _ in found)
    count = sum(len(lines) for _, lines in found)
    raise BlankNotFilled(f"{_message(where, count)}\n" + "\n".join(shown))
