"""Load code cells of a lesson's solution as a real Python module.

`@triton.jit` needs the source of the functions it decorates, so cells cannot simply be
exec()'d: they are written to a temporary .py file and imported. Tests use this to build
known-wrong answers by replacing text in a solution cell; the GPU check script uses it to run
the lessons' own kernels compiled.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import tempfile
from pathlib import Path

from . import build

PRELUDE = """\
import numpy as np
import torch
import triton
import triton.language as tl

from flashcourse import ______  # noqa: F401
from flashcourse.models import roofline, traffic  # noqa: F401
"""
# Just Triton: for the kernel cells the GPU scripts and the benchmark load on their own.
TRITON_PRELUDE = "import triton\nimport triton.language as tl\n\n\n"
_counter = itertools.count()
_TMP = Path(tempfile.mkdtemp(prefix="flashcourse-cells-"))


def _code_cell(lesson_path: Path, cell_id: str):
    lesson = build.parse(Path(lesson_path))
    for cell in lesson.cells:
        if cell.kind == "code" and cell.options.get("id") == cell_id:
            return lesson, cell
    raise KeyError(f"{lesson_path} has no code cell with id {cell_id!r}")


def solution_source(lesson_path: Path, cell_id: str) -> str:
    """The solution text of the code cell with `#| id: cell_id` (markers removed)."""
    return build._solution_source(_code_cell(lesson_path, cell_id)[1])


def exercise_source(lesson_path: Path, cell_id: str) -> str:
    """The student's text of the same cell (blanks and stubs in place)."""
    lesson, cell = _code_cell(lesson_path, cell_id)
    return build._exercise_source(cell, lesson.path)


def edit(source: str, replace=(), assign: dict[str, str] | None = None) -> str:
    """`source` with text replaced, as a student might have written it.

    replace: (old, new) pairs that must match exactly once, or (old, new, count) that must
    match exactly count times; an old starting with "re:" is a regular expression.
    assign: {target: value} rewrites the one line `target = ...` to `target = value` (indent
    kept); the target "return" rewrites the one `return ...` line.
    """
    for old, new, *count in replace:
        expected = count[0] if count else 1
        if old.startswith("re:"):
            source, found = re.subn(old[3:], new, source)
        else:
            found = source.count(old)
            source = source.replace(old, new)
        if found != expected:
            raise ValueError(f"{old!r} occurs {found} times in the cell, expected {expected}")
    for target, value in (assign or {}).items():
        head = "return " if target == "return" else f"{target} = "
        new_line = head + value
        source, found = re.subn(rf"^(\s*){re.escape(head)}.*$",
                                lambda match, new_line=new_line: match.group(1) + new_line,
                                source, flags=re.M)
        if found != 1:
            raise ValueError(f"{found} lines assign {target!r} in the cell, expected one")
    return source


def load(source: str, replace: list[tuple[str, str]] | tuple = (), prelude: str = PRELUDE):
    """Import `source` (after `edit(source, replace)`) as a fresh module and return it."""
    source = edit(source, replace)
    name = f"flashcourse_cell_{next(_counter)}"
    path = _TMP / f"{name}.py"
    path.write_text(prelude + "\n" + source + "\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_cells(lesson_path: Path, cell_ids: list[str], replace=(), prelude: str = PRELUDE):
    """Import several solution cells of one lesson together, in the order given."""
    source = "\n\n".join(solution_source(lesson_path, cell_id) for cell_id in cell_ids)
    return load(source, replace, prelude)


# The teaching FlashAttention: the solution kernels of lessons 6 (forward) and 7 (backward),
# which the benchmarks and GPU scripts load as one module.
FLASH_KERNEL_CELLS = (("06-flash-forward", ("exercise-forward",)),
                      ("07-flash-backward", ("delta-kernel", "exercise-dkdv", "exercise-dq")))


def flash_kernels_source(lessons_dir: Path,
                         extra: dict[str, tuple[str, ...]] | None = None) -> str:
    """The source of lessons 6 and 7's solution kernels, plus `extra` cells per lesson stem."""
    parts = []
    for stem, cell_ids in FLASH_KERNEL_CELLS:
        ids = [*cell_ids, *(extra or {}).get(stem, ())]
        parts += [solution_source(Path(lessons_dir) / f"{stem}.qmd", i) for i in ids]
    return "\n\n\n".join(parts)


def load_name(lesson_path: Path, cell_id: str, name: str, replace=(), prelude: str = PRELUDE):
    """`name` (a function or kernel) defined by one solution cell, after `replace`."""
    return getattr(load_cells(lesson_path, [cell_id], replace, prelude), name)
