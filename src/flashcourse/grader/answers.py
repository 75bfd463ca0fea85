"""Which cells answer which exercise, and whether a submitted answer cell is still blank
(grader side, static: nothing here runs student code).

In every exercise notebook each grading cell `check-*` follows the answer cells it grades:
the cells with a blank (`______`) or a stub (`raise NotImplementedError`) since the previous
grading cell. A record for an exercise earns nothing while one of its answer cells still holds
a blank or the stub, or did not run before the grading cell (`score.py`): points come only
from answers written in their own cells.
"""

from __future__ import annotations

import io
import tokenize

from . import scan

BLANK = "______"
STUB = "raise NotImplementedError"


def answer_cells(pristine: dict, checks: dict[str, tuple[str, str]]) -> dict[str, list[str]]:
    """exercise id -> ids of its answer cells, in notebook order (`checks`: exercise id ->
    (grading cell id, name), as `collect.check_cells` gives it)."""
    exercise_of = {cell_id: exercise for exercise, (cell_id, _) in checks.items()}
    found: dict[str, list[str]] = {}
    pending: list[str] = []
    for cell in pristine["cells"]:
        cell_id = cell.get("id")
        if cell.get("cell_type") != "code" or not isinstance(cell_id, str):
            continue
        if cell_id in exercise_of:
            found[exercise_of[cell_id]] = pending
            pending = []
        elif scan.is_grading_id(cell_id):
            pending = []
        elif is_answer_cell(cell):
            pending.append(cell_id)
    return found


def is_answer_cell(cell: dict) -> bool:
    """A code cell of an exercise notebook that the student fills in: not a grading cell, and
    holding a blank or a stub."""
    cell_id = cell.get("id")
    return (cell.get("cell_type") == "code" and isinstance(cell_id, str) and bool(cell_id)
            and not scan.is_grading_id(cell_id)
            and bool(_unanswered(scan.cell_source(cell), [], any_stub=True)))


def _stub_lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if STUB in line]


def _unanswered(source: str, stubs: list[str], any_stub: bool = False) -> str:
    """Why `source` is not answered yet ('' when it is): a blank as a name, or a stub line of
    the exercise left as it was (`stubs`; with `any_stub`, any stub line)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(scan._to_python(source)).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError, RecursionError, ValueError):
        tokens = []
    if any(t.type == tokenize.NAME and t.string == BLANK for t in tokens):
        return f"still holds a blank `{BLANK}`"
    lines = {line.strip() for line in source.splitlines()}
    if any(stub in lines for stub in stubs) or (any_stub and _stub_lines(source)):
        return "still holds the stub `raise NotImplementedError`"
    return ""


def blank_answers(pristine: dict, submitted_cells: list[dict],
                  cells_of: dict[str, list[str]]) -> dict[str, str]:
    """exercise id -> why it earns nothing statically: an answer cell still blank, or gone."""
    pristine_source = {c.get("id"): scan.cell_source(c) for c in pristine["cells"]}
    submitted = {}
    for cell in submitted_cells:
        cell_id = cell.get("id")
        if isinstance(cell_id, str) and cell.get("cell_type") == "code":
            submitted.setdefault(cell_id, scan.cell_source(cell))
    reasons = {}
    for exercise, cell_ids in cells_of.items():
        for cell_id in cell_ids:
            if cell_id not in submitted:
                reasons[exercise] = (f"its answer cell `{cell_id}` is missing: answers are "
                                     "graded in their own cells (restore it from the exercise "
                                     "notebook)")
                break
            why = _unanswered(submitted[cell_id], _stub_lines(pristine_source[cell_id]))
            if why:
                reasons[exercise] = f"its answer cell `{cell_id}` {why}"
                break
    return reasons
