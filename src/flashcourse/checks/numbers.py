"""Each student's own numbers in the self-check questions, so that a classmate's answers are not
a valid answer.

A question of `self_checks/NN-slug.toml` may list `numbers.<name> = [lesson's, other, ...]`
and compute some answers with `formula.<key> = "<expression>"` (the format: AUTHORING.md,
"Each student's own numbers"). A student's choice of each number is derived from (student id,
question id, number name); without a student id (`student.current()` is None) every number is
the first choice, the lesson's own, and the answers are those of the file.
"""

from __future__ import annotations

import ast
import hashlib
import math

from .. import hardware, student
from ..i18n import _
from ..models import matmul, memory, roofline, softmax_states, traffic

as_student = student.as_student  # the grader's replay: `with numbers.as_student(id): ...`

_MATH = ("ceil", "floor", "sqrt", "exp", "log", "log2", "log10", "prod", "isqrt", "comb", "pi",
         "e", "inf")
# What a formula may name besides the question's numbers (evaluated without builtins).
FORMULA_NAMES = {
    **{name: getattr(math, name) for name in _MATH},
    "cdiv": matmul.cdiv,
    **{f.__name__: f for f in (abs, min, max, round, sum, len, range, int, float)},
    "hardware": hardware, "matmul": matmul, "memory": memory, "roofline": roofline,
    "softmax_states": softmax_states, "traffic": traffic,
}


class FormulaError(ValueError):
    """A formula that cannot be evaluated: the message names the question and the key."""


def names_used(formula: str) -> set[str]:
    """The free names of `formula` (names bound inside it, by a comprehension, left out)."""
    tree = ast.parse(formula, mode="eval")
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)}
    return loaded - bound


def private_attributes(formula: str) -> list[str]:
    """Attributes starting with `_` that `formula` reaches for (refused: no way out of the
    namespace through `__class__` and the like)."""
    tree = ast.parse(formula, mode="eval")
    return sorted({n.attr for n in ast.walk(tree)
                   if isinstance(n, ast.Attribute) and n.attr.startswith("_")})


def choice_index(student_id: str | None, question_id: str, name: str, count: int) -> int:
    """Which of `count` choices of number `name` the student gets: 0 (the lesson's) without
    an id, else a SHA-256 of (student, question, name): the same every run, on every machine."""
    if student_id is None:
        return 0
    digest = hashlib.sha256(f"{student_id}\0{question_id}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def chosen(numbers: dict, question_id: str, student_id: str | None) -> dict:
    """name -> the student's value of each number of a question ({name: [choices]})."""
    return {name: choices[choice_index(student_id, question_id, name, len(choices))]
            for name, choices in numbers.items()}


def evaluate(formula: str, values: dict, where: str = "formula"):
    """The value of `formula` at `values` (the numbers), a plain int or float."""
    scope = {"__builtins__": {}, **FORMULA_NAMES, **values}  # numbers as globals: comprehensions
    try:
        value = eval(compile(formula, where, "eval"), scope)  # noqa: S307  (the course's own text)
    except Exception as err:  # a broken formula is the course's bug: say where it is
        raise FormulaError(_("{where} = {formula!r} failed at {values}: {error_type}: "
                             "{err}").format(where=where, formula=formula, values=values,
                             error_type=type(err).__name__, err=err)) from None
    if hasattr(value, "item"):  # a numpy scalar from a model
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormulaError(_("{where} = {formula!r} gave {value!r}, not a number").format(
                             where=where, formula=formula, value=value))
    return value


def expected_answers(question_id: str, answers: dict, numbers: dict, formulas: dict,
                     student_id: str | None) -> dict:
    """The right answers for `student_id`: the file's `answers`, with each key that has a
    formula computed at the student's numbers. No id: the file's answers as they are."""
    if student_id is None or not formulas:
        return dict(answers)
    values = chosen(numbers, question_id, student_id)
    return {key: evaluate(formulas[key], values, f"{question_id}: formula.{key}")
            if key in formulas else right for key, right in answers.items()}


def _shown(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def values_text(question_id: str, numbers: dict, student_id: str | None) -> str:
    """`n_elements = 1,300,000, block = 512`: a student's numbers of a question, as the
    numbers line prints them in every language (`workspace.submit` looks for them in a saved
    output)."""
    return ", ".join(f"{name} = {_shown(value)}"
                     for name, value in chosen(numbers, question_id, student_id).items())


def short_label(title: str) -> str:
    """`Q3` of a question's title `Q3: ...`."""
    return title.split(":", 1)[0]


def numbers_line(question_id: str, title: str, numbers: dict, student_id: str | None) -> str:
    """`Your numbers for Q3 (student ada): n_elements = 1,300,000, block = 512`."""
    label = short_label(title)
    values = values_text(question_id, numbers, student_id)
    if student_id is None:
        return _("Numbers for {label}: {values} (the lesson's own: no student id is set. "
                 "Your grader checks {label} with the numbers of the id you hand in under: "
                 "set it first, fc.setup(student=\"ID\") in the first cell or "
                 "FLASHCOURSE_STUDENT=ID before the lab starts, then run the notebook "
                 "again)").format(label=label, values=values)
    return _("Your numbers for {label} (student {student_id}): {values}").format(
        label=label, student_id=student_id, values=values)
