"""The class edition's exercises in a student's notebook, registered from the lesson's
examples file (`checks/examples/NN-slug.json.gz`), which holds no answer:

- a code exercise runs its visible cases as examples (`examples.run_examples`);
- a question or a veto statement is only recorded: its check says that every part is answered
  with the right kind of value, never whether it is right, so answers cannot be found by
  trying them one by one. The instructor's grader scores them on the submitted notebook.

The lesson's scorecard says so: points come from the grader, not from this notebook.
"""

from __future__ import annotations

from . import examples, registry
from .errors import WrongAnswer

RECORDED = "recorded"
GRADED_ON_SUBMISSION = ("recorded; graded when your instructor grades the notebook (the class "
                        "edition does not say here whether it is right)")
KINDS = {"number": "a number", "string": "a string", "bool": "True or False"}


def register(stem: str) -> None:
    """Register the lesson of `stem` from its examples file."""
    data = examples.read(examples.path_of(stem))
    meta = data["lesson"]
    registry.lesson(meta["id"], meta["title"], meta["pass_line"])
    for item in data["items"]:
        run = _code_check(item) if item["kind"] == "code" else _recorded_check(item)
        registry.exercise(item["id"], item["title"], item["points"], kind=item["kind"],
                          kernel=item.get("kernel", False))(run)
        registry.EXERCISES[item["id"]].sections = item.get("sections")
        registry.EXERCISES[item["id"]].numbers = item.get("numbers")  # fc.numbers shows them


def _code_check(item: dict):
    def run(answer) -> str:
        return examples.run_examples(item["id"], answer, item)

    return run


def _right_kind(value, kind: str) -> bool:
    import numpy as np

    if kind == "bool":
        return isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, bool)
    return isinstance(value, str)


def _recorded_check(item: dict):
    keys = item.get("keys", {})

    def run(answers) -> str:
        registry.require_answers(answers, list(keys), item["id"])
        wrong_kind = [f"  {key} wants {KINDS[kind]}, not {registry.printable_answer(answers[key])}"
                      for key, kind in keys.items() if not _right_kind(answers[key], kind)]
        if wrong_kind:
            raise WrongAnswer(f"{item['id']}: answer each part with the kind of value its "
                              "comment asks for:\n" + "\n".join(wrong_kind))
        return f"{len(keys)} answers {GRADED_ON_SUBMISSION}"

    return run


def scorecard(lesson_id: str) -> float:
    """The class edition's scorecard: what this notebook can say before grading. Code
    exercises pass or fail their visible cases; questions and statements are recorded or not
    answered yet. Raises when something is not done, so Run All shows it."""
    lesson = registry.LESSONS[lesson_id]
    lines = [f"Scorecard (class edition): {lesson.title}"]
    todo = []
    for ex in lesson.exercises:
        state = "passed" if ex.id in registry.RESULTS else \
            registry.ATTEMPTS.get(ex.id, registry.NOT_STARTED)
        if ex.kind == "code":
            shown = "visible cases pass" if state == "passed" else state
            lines.append(f"  {'✓' if state == 'passed' else '✗'} {ex.title} "
                         f"({ex.points:g} points): {shown}")
        else:
            shown = RECORDED if state == "passed" else state
            kind = "veto" if ex.kind == "veto" else f"{ex.points:g} points"
            lines.append(f"  {'•' if state == 'passed' else '✗'} {ex.title} ({kind}): {shown}")
        if state != "passed":
            todo.append(f"  - {ex.title}: {registry.STATE_ADVICE.get(state, 'run its check')}")
    lines.append(f"Points ({lesson.total_points:g}, pass line {lesson.pass_line:g}) come from "
                 "your instructor's grader: it runs hidden cases on inputs of your own and "
                 "scores the questions, statements and written answers.")
    if todo:
        lines += ["What to do next:", *todo]
    print("\n".join(lines))
    if todo:
        from ..messages import install_message_handler

        install_message_handler()
        raise WrongAnswer(f"Not done yet: {len(todo)} item(s) of {lesson_id} to finish.")
    return 0.0
