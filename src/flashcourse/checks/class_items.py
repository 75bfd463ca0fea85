"""The class edition's exercises in a student's notebook, registered from the lesson's
examples file (`checks/examples/NN-slug.json.gz`), which holds no answer:

- a code exercise runs its visible cases as examples (`examples.run_examples`);
- a question or a veto statement is only recorded: its check says that every part is answered
  with the right kind of value, never whether it is right, so answers cannot be found by
  trying them one by one. The instructor's grader scores them on the submitted notebook.

The lesson's scorecard says so: points come from the grader, not from this notebook.
"""

from __future__ import annotations

from ..i18n import N_, _
from . import examples, registry
from .errors import WrongAnswer

RECORDED = N_("recorded")
GRADED_ON_SUBMISSION = N_("recorded; graded when your instructor grades the notebook (the "
                          "class edition does not say here whether it is right)")
KINDS = {"number": N_("a number"), "string": N_("a string"), "bool": N_("True or False")}


def register(stem: str) -> None:
    """Register the lesson of `stem` from its examples file."""
    data = examples.read(examples.path_of(stem))
    meta = data["lesson"]
    registry.lesson(meta["id"], meta["title"], meta["pass_line"])
    for item in data["items"]:
        _register(item)


def register_recorded(stem: str) -> None:
    """Only the questions and veto statements of `stem`'s examples file, recorded (its code
    exercises come from the lesson's check module): in the grading sandbox, which holds no
    self-check file; the grader scores what they record."""
    for item in examples.read(examples.path_of(stem))["items"]:
        if item["kind"] != "code" and item["id"] not in registry.EXERCISES:
            _register(item)


def _register(item: dict) -> None:
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
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "number":
        return registry.is_number(value)
    return isinstance(value, str)


def _recorded_check(item: dict):
    keys = item.get("keys", {})

    def run(answers) -> str:
        registry.require_answers(answers, list(keys), item["id"])
        wrong_kind = [_("  {key} wants {kind}, not {answer}").format(
                          key=key, kind=_(KINDS[kind]),
                          answer=registry.printable_answer(answers[key]))
                      for key, kind in keys.items() if not _right_kind(answers[key], kind)]
        if wrong_kind:
            raise WrongAnswer(_("{exercise_id}: answer each part with the kind of value its "
                                "comment asks for:").format(exercise_id=item["id"])
                              + "\n" + "\n".join(wrong_kind))
        return _("{count} answers {graded}").format(count=len(keys),
                                                    graded=_(GRADED_ON_SUBMISSION))

    return run


def scorecard(lesson_id: str) -> float:
    """The class edition's scorecard: what this notebook can say before grading. Code
    exercises pass or fail their visible cases; questions and statements are recorded or not
    answered yet. Raises when something is not done, so Run All shows it."""
    lesson = registry.LESSONS[lesson_id]
    lines = [_("Scorecard (class edition): {title}").format(title=_(lesson.title))]
    todo = []
    for ex in lesson.exercises:
        state = "passed" if ex.id in registry.RESULTS else \
            registry.ATTEMPTS.get(ex.id, registry.NOT_STARTED)
        title = _(ex.title)
        worth = registry.state_name("veto") if ex.kind == "veto" else \
            _("{points:g} points").format(points=ex.points)
        if ex.kind == "code":
            mark, passed_as = "✓", _("visible cases pass")
        else:
            mark, passed_as = "•", _(RECORDED)
        lines.append(_("  {mark} {title} ({worth}): {state}").format(
            mark=mark if state == "passed" else "✗", title=title, worth=worth,
            state=passed_as if state == "passed" else registry.state_name(state)))
        if state != "passed":
            todo.append(_("  - {title}: {advice}").format(title=title,
                                                           advice=registry.advice(state)))
    lines.append(_("Points ({total:g}, pass line {pass_line:g}) come from your instructor's "
                   "grader: it runs hidden cases on inputs of your own and scores the "
                   "questions, statements and written answers.").format(
        total=lesson.total_points, pass_line=lesson.pass_line))
    if todo:
        lines += [_("What to do next:"), *todo]
    print("\n".join(lines))
    if todo:
        from ..messages import install_message_handler

        install_message_handler()
        raise WrongAnswer(_("Not done yet: {count} item(s) of {lesson_id} to finish.").format(
            count=len(todo), lesson_id=lesson_id))
    return 0.0
