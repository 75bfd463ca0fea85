"""A lesson's self-check file, `checks/self_checks/NN-slug.toml`: its questions and veto
misconceptions as data (the format: AUTHORING.md, "Self-check questions and veto misconceptions
are data"). This module reads and validates a file; `registry` registers what it returns."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, released as tomli
    import tomli as tomllib

FOLDER = Path(__file__).with_name("self_checks")

LESSON_KEYS = {"lesson", "question", "misconceptions"}
QUESTION_KEYS = {"id", "title", "points", "answers", "why", "rtol", "round", "section",
                 "sections", "numbers", "formula"}
MIN_CHOICES = 3  # of a varying number: the lesson's own and at least two others
STATEMENT_KEYS = {"truth", "why", "section"}


class SelfCheckFileError(ValueError):
    """A self-check file off the format; the message names the file, the item and the key."""


@dataclass
class Question:
    id: str
    title: str
    points: float
    answers: dict  # key -> the right answer
    why: dict  # key -> the reasoning behind it (never shown)
    sections: str | dict  # where the lesson explains it: one for all keys, or {key: section}
    rtol: float = 1e-9
    rounded: tuple[str, ...] = ()  # keys whose answers are rounded to a whole number first
    # each student's own numbers (checks/numbers.py): name -> choices, the lesson's first
    numbers: dict = field(default_factory=dict)
    formulas: dict = field(default_factory=dict)  # answer key -> its expression of the numbers


@dataclass
class SelfChecks:
    lesson: str
    questions: list[Question]
    statements: dict[str, tuple[bool, str]]  # misconception key -> (truth, why)
    statement_sections: dict[str, str]


def path_of(stem: str) -> Path:
    """The self-check file of lessons/<stem>.qmd."""
    return FOLDER / f"{stem}.toml"


def read(path: Path) -> SelfChecks:
    """Parse and validate one self-check file; raise SelfCheckFileError on any mistake."""
    shown = f"checks/self_checks/{path.name}" if path.parent == FOLDER else str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise SelfCheckFileError(f"{shown}: not valid TOML: {err}") from None
    _known_keys(data, LESSON_KEYS, shown)
    lesson = data.get("lesson")
    if not isinstance(lesson, str) or not lesson:
        raise SelfCheckFileError(f'{shown}: name the lesson id first: lesson = "<lesson id>"')
    items = data.get("question", [])
    if not isinstance(items, list):
        raise SelfCheckFileError(f"{shown}: write each question as a [[question]] table")
    questions = [_question(item, lesson, f"{shown}: [[question]] #{number}")
                 for number, item in enumerate(items, 1)]
    ids = [q.id for q in questions]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise SelfCheckFileError(f"{shown}: question id(s) {twice} appear twice")
    statements, sections = {}, {}
    table = data.get("misconceptions", {})
    if not isinstance(table, dict):
        raise SelfCheckFileError(f"{shown}: write each statement as [misconceptions.<key>]")
    for key, item in table.items():
        where = f"{shown}: [misconceptions.{key}]"
        if not isinstance(item, dict):
            raise SelfCheckFileError(f"{where}: must be a table with truth, why and section")
        _known_keys(item, STATEMENT_KEYS, where)
        truth = _required(item, "truth", bool, where, "true or false")
        statements[key] = (truth, _text(item, "why", where))
        sections[key] = _text(item, "section", where)
    return SelfChecks(lesson, questions, statements, sections)


def _question(item, lesson: str, where: str) -> Question:
    if not isinstance(item, dict):
        raise SelfCheckFileError(f"{where}: must be a table")
    _known_keys(item, QUESTION_KEYS, where)
    exercise_id = _text(item, "id", where)
    where = f"{where} ({exercise_id})"
    if not exercise_id.startswith(f"{lesson}/"):
        raise SelfCheckFileError(f"{where}: the id must start with the lesson id, {lesson}/")
    title = _text(item, "title", where)
    points = _number(item, "points", where)
    answers = _required(item, "answers", dict, where, "a table answers.<key> = <right answer>")
    if not answers:
        raise SelfCheckFileError(f"{where}: answers is empty: give at least one answers.<key>")
    for key, value in answers.items():
        if not isinstance(value, (bool, int, float, str)):
            raise SelfCheckFileError(f"{where}: answers.{key} must be a number, a string, "
                                     f"true or false, not {type(value).__name__}")
    why = _required(item, "why", dict, where, "a table why.<key> = <reasoning>")
    _same_keys(answers, why, "why", where)
    for key in why:
        _text(why, key, f"{where}: why")
    rtol = _number(item, "rtol", where) if "rtol" in item else 1e-9
    rounded = _required(item, "round", list, where, "a list of answer keys") \
        if "round" in item else []
    for key in rounded:
        if key not in answers or isinstance(answers[key], (bool, str)):
            raise SelfCheckFileError(f"{where}: round names {key!r}, which is not a numeric "
                                     "answer of this question")
    numbers, formulas = _varying(item, answers, where)
    return Question(exercise_id, title, points, answers, why, _sections(item, answers, where),
                    rtol, tuple(rounded), numbers, formulas)


def _varying(item: dict, answers: dict, where: str) -> tuple[dict, dict]:
    """`numbers.<name>` (choices, the lesson's first) and `formula.<key>` (an answer computed
    from them), checked together: every number is used and every formula's name is known."""
    from .numbers import FORMULA_NAMES, names_used, private_attributes

    numbers = _required(item, "numbers", dict, where, "a table numbers.<name> = [choices]") \
        if "numbers" in item else {}
    formulas = _required(item, "formula", dict, where, "a table formula.<key> = <expression>") \
        if "formula" in item else {}
    for name, choices in numbers.items():
        at = f"{where}: numbers.{name}"
        if name in FORMULA_NAMES:
            raise SelfCheckFileError(f"{at}: the name is taken by the formulas' namespace "
                                     f"({name}); choose another")
        if not isinstance(choices, list) or len(choices) < MIN_CHOICES:
            raise SelfCheckFileError(f"{at}: give a list of at least {MIN_CHOICES} choices, the "
                                     f"lesson's own first, not {choices!r}")
        for choice in choices:
            if isinstance(choice, bool) or not isinstance(choice, (int, float)):
                raise SelfCheckFileError(f"{at}: every choice must be a number, not {choice!r}")
        if len(set(choices)) < len(choices):
            raise SelfCheckFileError(f"{at}: a choice appears twice in {choices}")
    used: set[str] = set()
    for key, formula in formulas.items():
        at = f"{where}: formula.{key}"
        if key not in answers:
            raise SelfCheckFileError(f"{at} names no answer (answers.{key} is missing)")
        if isinstance(answers[key], (bool, str)):
            raise SelfCheckFileError(f"{at}: answers.{key} is not a number; only numbers have "
                                     "formulas")
        _text(formulas, key, f"{where}: formula")
        try:
            names = names_used(formula)
        except SyntaxError as err:
            raise SelfCheckFileError(f"{at} is not a Python expression: {err.msg}") from None
        unknown = sorted(names - set(numbers) - set(FORMULA_NAMES))
        if unknown:
            raise SelfCheckFileError(f"{at} names {unknown[0]!r}, which is neither a number of "
                                     "this question (numbers.<name>) nor a formula name")
        if private_attributes(formula):
            raise SelfCheckFileError(f"{at} reaches for {private_attributes(formula)[0]!r}: "
                                     "no names starting with '_'")
        if not names & set(numbers):
            raise SelfCheckFileError(f"{at} uses none of the question's numbers")
        used |= names
    unused = [name for name in numbers if name not in used]
    if unused:
        raise SelfCheckFileError(f"{where}: numbers.{unused[0]} is used by no formula "
                                 "(add formula.<key> = an expression of it)")
    return numbers, formulas


def _sections(item: dict, answers: dict, where: str) -> str | dict:
    """`section` for every key, `sections.<key>` for some or all: a section for every key."""
    default = _text(item, "section", where) if "section" in item else None
    per_key = _required(item, "sections", dict, where, "a table sections.<key> = <section>") \
        if "sections" in item else {}
    unknown = sorted(set(per_key) - set(answers))
    if unknown:
        raise SelfCheckFileError(f"{where}: sections.{unknown[0]} names no answer")
    for key in per_key:
        _text(per_key, key, f"{where}: sections")
    if not per_key:
        if default is None:
            raise SelfCheckFileError(f"{where}: missing section: name where the lesson "
                                     "explains it (section = ..., or sections.<key> = ...)")
        return default
    lacking = [key for key in answers if key not in per_key]
    if lacking and default is None:
        raise SelfCheckFileError(f"{where}: answers.{lacking[0]} has no section: add "
                                 f"sections.{lacking[0]} or a section for every key")
    return {key: per_key.get(key, default) for key in answers}


def _known_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise SelfCheckFileError(f"{where}: unknown field {unknown[0]!r} (known: "
                                 f"{', '.join(sorted(allowed))})")


def _same_keys(answers: dict, other: dict, name: str, where: str) -> None:
    for key in answers:
        if key not in other:
            raise SelfCheckFileError(f"{where}: answers.{key} has no {name}.{key}")
    for key in other:
        if key not in answers:
            raise SelfCheckFileError(f"{where}: {name}.{key} names no answer (answers.{key} "
                                     "is missing)")


def _required(table: dict, key: str, kind: type, where: str, wanted: str):
    if key not in table:
        raise SelfCheckFileError(f"{where}: missing {key} ({wanted})")
    value = table[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise SelfCheckFileError(f"{where}: {key} must be {wanted}, not {value!r}")
    return value


def _text(table: dict, key: str, where: str) -> str:
    value = _required(table, key, str, where, "a string")
    if not value.strip():
        raise SelfCheckFileError(f"{where}: {key} is empty")
    return value


def _number(table: dict, key: str, where: str) -> float:
    if key not in table:
        raise SelfCheckFileError(f"{where}: missing {key} (a number)")
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise SelfCheckFileError(f"{where}: {key} must be a number >= 0, not {value!r}")
    return value
