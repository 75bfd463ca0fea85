"""Load code cells of a lesson's solution as a real Python module.

`@triton.jit` needs the source of the functions it decorates, so cells cannot simply be
exec()'d: they are written to a temporary .py file and imported. Tests use this to build
known-wrong answers by replacing text in a solution cell; the GPU check script uses it to run
the lessons' own kernels compiled.
"""

from __future__ import annotations

import importlib.util
import itertools
import tempfile
from pathlib import Path

from . import notebooks

PRELUDE = """\
import numpy as np
import torch
import triton
import triton.language as tl

from flashcourse import ______, roofline, traffic  # noqa: F401
"""
_counter = itertools.count()
_TMP = Path(tempfile.mkdtemp(prefix="flashcourse-cells-"))


def solution_source(lesson_path: Path, cell_id: str) -> str:
    """The solution text of the code cell with `#| id: cell_id` (markers removed)."""
    lesson = notebooks.parse(Path(lesson_path))
    for cell in lesson.cells:
        if cell.kind == "code" and cell.options.get("id") == cell_id:
            return notebooks._solution_source(cell)
    raise KeyError(f"{lesson_path} has no code cell with id {cell_id!r}")


def exercise_source(lesson_path: Path, cell_id: str) -> str:
    """The student's text of the same cell (blanks and stubs in place)."""
    lesson = notebooks.parse(Path(lesson_path))
    for cell in lesson.cells:
        if cell.kind == "code" and cell.options.get("id") == cell_id:
            return notebooks._exercise_source(cell, lesson.path)
    raise KeyError(f"{lesson_path} has no code cell with id {cell_id!r}")


def load(source: str, replace: list[tuple[str, str]] | tuple = (), prelude: str = PRELUDE):
    """Import `source` (after exact text replacements, each of which must match exactly once)
    as a fresh module and return it."""
    for old, new in replace:
        count = source.count(old)
        if count != 1:
            raise ValueError(f"{old!r} occurs {count} times in the cell, expected once")
        source = source.replace(old, new)
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
