"""Submissions made from the exercise notebook, for the grader's tests and throughput script:
every blank filled with the solution's answer, then chosen answers made wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .scan import cell_source

# Known-wrong answers of lesson 1: cell id -> (pattern, replacement) applied to the solution.
LESSON1_MISTAKES = {
    "no-rescale": ("exercise-flash-attention", r"^(\s*)scale = .*$",
                   r"\1scale = np.ones_like(m_new)"),
    "no-final-divide": ("exercise-flash-attention", r"^(\s*)return O / .*$", r"\1return O"),
    "q1-wrong": ("answer-q1", r'"nxn_hbm_passes": \d+', '"nxn_hbm_passes": 2'),
    "q2-wrong": ("answer-q2", r'"sectors_contiguous": \d+', '"sectors_contiguous": 8'),
    "veto": ("answer-misconceptions", r'"flash_reduces_flops": \w+',
             '"flash_reduces_flops": True'),
}


def filled_notebook(root: Path, slug: str = "01-gpu-flash", mistakes: tuple[str, ...] = (),
                    unfilled: tuple[str, ...] = (), student: str | None = None,
                    exercises: Path | None = None) -> dict:
    """The exercise notebook with its blanks and stubs replaced by the solution's cells, except
    the cells named in `unfilled`; then each named mistake applied. `student`: the questions
    with numbers of their own are answered for that student (`answered_as`); None: with the
    lesson's numbers, as the solution answers them. `exercises`: the folder to take the
    exercise notebook from (a class edition's), root/exercises by default."""
    folder = exercises or root / "exercises"
    exercise = json.loads((folder / f"{slug}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((root / "solutions" / f"{slug}.ipynb").read_text(encoding="utf-8"))
    answers = {c["id"]: cell_source(c) for c in solution["cells"]}
    for cell in exercise["cells"]:
        text = cell_source(cell)
        if cell["cell_type"] == "code" and cell["id"] not in unfilled and (
                "______" in text or "NotImplementedError" in text) and cell["id"] != "setup":
            cell["source"] = answers[cell["id"]]
    by_id = {c["id"]: c for c in exercise["cells"]}
    for name in mistakes:
        cell_id, pattern, replacement = LESSON1_MISTAKES[name]
        new, count = re.subn(pattern, replacement, cell_source(by_id[cell_id]), flags=re.M)
        if count != 1:
            raise ValueError(f"mistake {name!r} matched {count} lines of {cell_id}")
        by_id[cell_id]["source"] = new
    return exercise if student is None else answered_as(exercise, student, slug, root)


def answered_as(nb: dict, student: str, slug: str = "01-gpu-flash",
                root: Path | None = None) -> dict:
    """`nb` (changed in place) answering each question with numbers of its own
    (checks/numbers.py) with `student`'s values, as the grader replays it for that student:
    each such key's line in the question's answer cell (`answer-qN`) that still holds the
    solution's answer gets the student's value. Blanks and other answers are left as they are."""
    from ..checks import numbers, self_check_files
    from ..paths import COURSE_ROOT

    solution = json.loads((Path(root or COURSE_ROOT) / "solutions" / f"{slug}.ipynb")
                          .read_text(encoding="utf-8"))
    solved = {c.get("id"): cell_source(c) for c in solution["cells"]}
    cells = {c.get("id"): c for c in nb["cells"] if c.get("cell_type") == "code"}
    for q in self_check_files.read(self_check_files.path_of(slug)).questions:
        cell_id = f"answer-{q.id.split('/', 1)[1].split('-', 1)[0]}"
        if not q.formulas or cell_id not in cells:
            continue
        right = numbers.expected_answers(q.id, q.answers, q.numbers, q.formulas, student)
        text = cell_source(cells[cell_id])
        for key in q.formulas:
            text = _answer_line_replaced(text, solved.get(cell_id, ""), key, right[key])
        cells[cell_id]["source"] = text
    return nb


def _answer_line_replaced(text: str, solution: str, key: str, value) -> str:
    """`text` with the line `"key": <the solution's answer>,` answering `value` instead."""
    line = re.compile(rf'^(\s*"{key}": )(.*?),(\s*#.*)?$', re.M)
    solved = line.search(solution)
    if solved is None:
        return text

    def answer(found: re.Match) -> str:
        if found.group(2) != solved.group(2):  # a blank, or another answer: left as it is
            return found.group(0)
        return f"{found.group(1)}{value!r},{found.group(3) or ''}"

    return line.sub(answer, text)


def write(nb: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return path


def flip_vetoes(nb: dict) -> dict:
    """`nb` (changed in place) with every true/false statement of its misconceptions cell
    judged the other way."""
    cell = next(c for c in nb["cells"] if c["id"] == "answer-misconceptions")
    cell["source"] = re.sub(r": (True|False),", lambda m: f": {m.group(1) == 'False'},",
                            cell_source(cell))
    return nb
