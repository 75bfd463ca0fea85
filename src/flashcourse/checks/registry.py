"""Exercise registry, the `check` call of grading cells, comparisons and lesson scorecards.

A grading cell is one call: `check("lesson-id/exercise", answer)`. The reference it compares
against lives in this package, so redefining names inside a notebook cannot make a wrong answer
pass. A wrong answer raises `WrongAnswer` with the failing case, the largest error, where it is,
and a hint; success prints one short deterministic line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real

import numpy as np

from .. import blanks, student
from ..blanks import BlankNotFilled, is_blank, refuse_blanks
from ..i18n import N_, _
from ..messages import install_message_handler, word_list
from ..runtime import book_page, current
from . import cases, recording
from . import numbers as varying

# Checks reach these through `registry.`: each has its one home in the module named.
from .cases import (  # noqa: F401
    GRADING_MODE_ENV,
    SECRET_ENV,
    case_seed,
    grading_mode,
    hidden_note,
    with_hidden,
)
from .compare import compare, printable_answer, same_result, to_numpy  # noqa: F401
from .edition import class_edition
from .errors import CourseInputError, NotStarted, VetoMisconception, WrongAnswer


@dataclass
class Exercise:
    id: str  # stable id "lesson/name", used by grading cells and scorecards
    title: str  # what the student is asked to do, in a few words
    points: float  # rubric points this item is worth
    run: Callable[[object], str]  # checks an answer; returns the success summary or raises
    kind: str = "code"  # "code", "question" or "veto"
    answers: dict | None = None  # the right answers of a self-check item, for tests
    kernel: bool = False  # answered by a @triton.jit kernel that the check launches
    sections: str | dict | None = None  # where the lesson explains a self-check item
    numbers: dict | None = None  # a question's own numbers per student: name -> choices

    @property
    def lesson(self) -> str:
        return self.id.split("/", 1)[0]


@dataclass
class Lesson:
    id: str  # lesson id, the prefix of its exercise ids
    title: str
    pass_line: float = 8.0
    exercises: list[Exercise] = field(default_factory=list)

    @property
    def total_points(self) -> float:
        return sum(e.points for e in self.exercises)


LESSONS: dict[str, Lesson] = {}
EXERCISES: dict[str, Exercise] = {}
# What passed in this process: exercise id -> points earned (vetoes record 0 when hit).
RESULTS: dict[str, float] = {}
VETOES_HIT: dict[str, str] = {}
# How the last check of each exercise ended when it did not pass: "wrong", "blank", "veto" or
# "not started".
ATTEMPTS: dict[str, str] = {}
# Lessons (file stems) whose self-check file is registered.
_SELF_CHECKS_DONE: set[str] = set()


def lesson(lesson_id: str, title: str, pass_line: float = 8.0) -> Lesson:
    if lesson_id not in LESSONS:
        LESSONS[lesson_id] = Lesson(lesson_id, title, pass_line)
    return LESSONS[lesson_id]


def exercise(exercise_id: str, title: str, points: float, kind: str = "code",
             answers: dict | None = None, kernel: bool = False):
    """Decorator registering a check function under a stable exercise id."""

    def register(run: Callable[[object], str]) -> Callable[[object], str]:
        item = Exercise(exercise_id, title, points, run, kind, answers, kernel)
        if item.lesson not in LESSONS:
            raise KeyError(f"register lesson {item.lesson!r} before its exercises")
        if exercise_id in EXERCISES:
            raise KeyError(f"exercise id {exercise_id!r} registered twice")
        EXERCISES[exercise_id] = item
        LESSONS[item.lesson].exercises.append(item)
        return run

    return register


def _load_checks() -> None:
    """Import the lesson check modules, which register their exercises here. Found by name,
    like plugins: the registry does not depend on the lessons, the lessons depend on it."""
    import importlib

    from . import LESSON_MODULES

    # Choose the runtime before any check module defines a Triton kernel: Triton reads
    # TRITON_INTERPRET when a kernel is decorated, not when it runs.
    current()
    if class_edition():  # its items come from data; found by name, like the lessons
        class_items = importlib.import_module(f"{__package__}.class_items")
        for stem in LESSON_MODULES:
            if stem not in _SELF_CHECKS_DONE:
                class_items.register(stem)
                _SELF_CHECKS_DONE.add(stem)
        return
    for stem in LESSON_MODULES:
        _import_lesson(stem)


def _load_lesson(lesson_id: str) -> None:
    """Import the check module of `lesson_id` only (a notebook checks its own lesson); every
    module where the id names no lesson, or in the class edition."""
    from . import LESSON_IDS

    stem = next((stem for stem, known in LESSON_IDS.items() if known == lesson_id), None)
    if stem is None or class_edition():
        _load_checks()
        return
    current()  # as in _load_checks: before the module defines any Triton kernel
    _import_lesson(stem)


def _import_lesson(stem: str) -> None:
    import importlib

    from . import LESSON_MODULES

    importlib.import_module(f"{__package__}.{LESSON_MODULES[stem]}")
    if stem not in _SELF_CHECKS_DONE:
        _register_self_checks(stem)
        _SELF_CHECKS_DONE.add(stem)


def _register_self_checks(stem: str) -> None:
    """Register the questions and veto misconceptions of checks/self_checks/<stem>.toml, if the
    lesson has one, after its code exercises (the scorecard's order)."""
    from . import self_check_files

    path = self_check_files.path_of(stem)
    if not path.exists():
        if os.environ.get(recording.RECORD_CHANNEL_ENV):  # the grading sandbox hides them
            import importlib

            importlib.import_module(f"{__package__}.class_items").register_recorded(stem)
        return
    items = self_check_files.read(path)
    if items.lesson not in LESSONS:
        raise self_check_files.SelfCheckFileError(
            f"checks/self_checks/{path.name}: lesson {items.lesson!r} is not registered by "
            f"its check module (known: {', '.join(LESSONS)})")
    for q in items.questions:
        questions(q.id, q.title, q.points, q.answers, q.why, rtol=q.rtol, sections=q.sections,
                  rounded=q.rounded, numbers=q.numbers, formulas=q.formulas)
    if items.statements:
        misconceptions(items.lesson, items.statements, sections=items.statement_sections)


def section_of(exercise_id: str) -> str | dict | None:
    """Where the lesson explains a self-check item (its `section` in the self-check file)."""
    return get(exercise_id).sections


def get(exercise_id: str) -> Exercise:
    if exercise_id not in EXERCISES:
        _load_lesson(exercise_id.split("/", 1)[0])
    if exercise_id not in EXERCISES:
        _load_checks()  # every known id, for the message below
    if exercise_id not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise KeyError(_("unknown exercise id {exercise_id!r}; known ids: {known}").format(
            exercise_id=exercise_id, known=known))
    return EXERCISES[exercise_id]


def check(exercise_id: str, answer) -> None:
    """Grade `answer` for `exercise_id`: print one line on success, raise on a wrong answer."""
    item = get(exercise_id)
    RESULTS.pop(exercise_id, None)
    try:
        with cases.keyed(cases.issued_key(exercise_id)), \
                recording.recording(exercise_id, answer), \
                _captured(exercise_id, answer) as answer:
            summary = _run_check(item, answer)
    except BaseException as err:
        ATTEMPTS[exercise_id] = attempt_state(err)
        raise
    ATTEMPTS.pop(exercise_id, None)
    RESULTS[exercise_id] = item.points
    VETOES_HIT.pop(exercise_id, None)
    print(f"\u2713 {exercise_id}: {summary}")


def _captured(exercise_id: str, answer):
    """The answer as the check sees it: itself, or, while the class edition's examples are
    captured from a solution ($FLASHCOURSE_CAPTURE_DIR), a stand-in that keeps its calls."""
    import contextlib
    import importlib
    import os

    if not os.environ.get(recording.CAPTURE_DIR_ENV):
        return contextlib.nullcontext(answer)
    # found by name, like the lesson modules: the build depends on the checks, not back
    capture = importlib.import_module("flashcourse.authoring.capture")
    return capture.capturing(exercise_id, answer)


def _run_check(item: Exercise, answer) -> str:
    if is_blank(answer):
        raise BlankNotFilled(_("Fill in the blank: the answer to {exercise_id} is still "
                               "______.").format(exercise_id=item.id))
    if callable(answer) and recording.current_exercise() is not None:
        from . import tripwires

        tripwires.flag_answer(answer)
    if callable(answer):
        recording.inspected("the answer holds no blank",
                            lambda: refuse_blanks(answer, getattr(answer, "__name__", item.id)))
    try:
        return item.run(answer)
    except VetoMisconception as err:
        VETOES_HIT[item.id] = str(err)
        raise
    except NotImplementedError as err:
        raise NotStarted(_(
            "{exercise_id}: the function still raises NotImplementedError. Replace the "
            "`raise NotImplementedError` line with your implementation."
        ).format(exercise_id=item.id)) from err


def replay(exercise_id: str, record: dict, key: str | None = None) -> str:
    """Run the check of `exercise_id` again in the grader, on what a submission recorded
    (see `recording`): return the success summary or raise like `check`. No student code
    runs here: a function answer is a stand-in whose calls return the recorded results.
    `key`: the key the grader issued for this exercise's cases (`cases.issue_key`)."""
    item = get(exercise_id)
    described = record.get("answer") if isinstance(record, dict) else None
    if not isinstance(described, dict):
        raise recording.RecordMismatch("the record names no answer")
    if described.get("blank") is True:
        answer = blanks.______
    elif "callable" in described:
        answer = recording.StandIn(exercise_id.rsplit("/", 1)[-1])
    elif "value" in described:
        answer = recording.decode(described["value"])
    else:
        raise WrongAnswer(_("{exercise_id}: the answer is not plain data ({kind}): answer with "
                            "numbers, strings, booleans and arrays.").format(
            exercise_id=exercise_id, kind=described.get("unsupported", "unknown")))
    with cases.keyed(key), recording.replaying(record):
        summary = _run_check(item, answer)
        left = recording.replay_left()
    if left:
        raise recording.RecordMismatch(f"the record holds {left} more step(s) than the "
                                       "grader's check took")
    return summary


def run_student(fn: Callable, case: str, *args, **kwargs):
    """Call student code; turn a crash into a WrongAnswer that names the case, and a blank
    returned as the answer into a BlankNotFilled."""
    try:
        result = recording.student_call(case, lambda: fn(*args, **kwargs), inputs=(args, kwargs))
    except (BlankNotFilled, NotImplementedError, WrongAnswer):
        raise
    except Exception as err:  # the student's code crashed: say where, keep the traceback
        raise WrongAnswer(_("{case}: your code raised {error_type}: {error}").format(
            case=case, error_type=type(err).__name__, error=err)) from err
    if is_blank(result):
        raise BlankNotFilled(_("Fill in the blank: {case} returned ______.").format(case=case))
    return result


# How an exercise that did not pass stands, as the scorecard says it, and what to do about it.
NOT_STARTED = "not started"
STATE_ADVICE = {
    "wrong": N_("fix it and run its check again"),
    "blank": N_("fill in its blanks, then run its check"),
    NOT_STARTED: N_("answer it, then run its check"),
    "veto": N_("judge the statements again"),
}
OTHER_ADVICE = N_("run its check")
# the states' names as the scorecard shows them (a veto statement judged wrongly is "wrong")
STATE_NAMES = {"passed": N_("passed"), "wrong": N_("wrong"), "blank": N_("blank"),
               NOT_STARTED: N_("not started"), "veto": N_("veto"), "ok": N_("ok")}
VETO_JUDGED_WRONGLY = N_("a veto statement is judged wrongly")
VETO_NOT_JUDGED = N_("the veto statements are not judged yet")
POINTS_SHORT = N_("{earned:g} of {total:g} points, the pass line is {pass_line:g}")


def attempt_state(err: BaseException) -> str:
    """The state a failed check leaves its exercise in: an answer that is still the stub handed
    out (`NotStarted`, from a function or a kernel) is not started, not wrong."""
    if isinstance(err, VetoMisconception):
        return "veto"
    if isinstance(err, BlankNotFilled):
        return "blank"
    return NOT_STARTED if isinstance(err, NotStarted) else "wrong"


def _state(ex: Exercise) -> str:
    return "passed" if ex.id in RESULTS else ATTEMPTS.get(ex.id, NOT_STARTED)


def _sections_to_reread(ex: Exercise, state: str) -> str:
    """' Re-read <sections>.' for an item answered wrongly whose lesson names where it is
    explained; for a veto, only the sections of the statements its message names."""
    if state not in ("wrong", "veto") or not ex.sections:
        return ""
    if isinstance(ex.sections, str):
        return where_explained(ex.sections, "")
    wanted = [_(where) for where in dict.fromkeys(ex.sections.values())
              if state != "veto" or where_explained(where, "") in VETOES_HIT.get(ex.id, "")]
    return _(" Re-read {sections}.").format(sections=_(" or ").join(wanted)) if wanted else ""


def _item_line(ex: Exercise, state: str) -> str:
    title = _(ex.title)
    if ex.kind == "veto":
        shown = {"passed": "ok", "veto": "wrong"}.get(state, state)  # a hit veto is one wrong
        return _("  [veto] {title}: {state}").format(title=title, state=state_name(shown))
    if state == "passed":
        return f"  \u2713 {ex.points:g}/{ex.points:g} {title}"
    return f"  \u2717 0/{ex.points:g} {title} ({state_name(state)})"


def state_name(state: str) -> str:
    """A state as the scorecard says it, in the current language."""
    return _(STATE_NAMES[state]) if state in STATE_NAMES else state


def advice(state: str) -> str:
    """What to do about an exercise in `state`, in the current language."""
    return _(STATE_ADVICE.get(state, OTHER_ADVICE))


def _why_not_passed(lesson_id: str, earned: float, veto_states: list[str]) -> list[str]:
    """Why the lesson is not passed, most serious first: a veto, then the points (untranslated:
    `VETO_JUDGED_WRONGLY`, `VETO_NOT_JUDGED` or `POINTS_SHORT`; `reason_text` says them)."""
    item = LESSONS[lesson_id]
    reasons = []
    if _vetoes(lesson_id) or "veto" in veto_states:
        reasons.append(VETO_JUDGED_WRONGLY)
    elif any(state != "passed" for state in veto_states):
        reasons.append(VETO_NOT_JUDGED)
    if earned < item.pass_line:
        reasons.append(POINTS_SHORT)
    return reasons


def reason_text(reason: str, earned: float, lesson_id: str) -> str:
    """One reason of `_why_not_passed`, in the current language."""
    item = LESSONS[lesson_id]
    return _(reason).format(earned=earned, total=item.total_points, pass_line=item.pass_line)


def scorecard(lesson_id: str) -> float:
    """Print the lesson's rubric with the points earned in this session. Not passed: first why,
    then each item's state (passed, wrong, blank, not started), what to do and which section to
    re-read, then raise one short course error so the notebook run fails. Passed: the items and
    the next lesson; return the points."""
    _load_lesson(lesson_id)
    if class_edition():
        import importlib

        return importlib.import_module(f"{__package__}.class_items").scorecard(lesson_id)
    item = LESSONS[lesson_id]
    states = {ex.id: _state(ex) for ex in item.exercises}
    earned = sum(RESULTS.get(ex.id, 0.0) for ex in item.exercises)
    reasons = _why_not_passed(lesson_id, earned,
                              [states[ex.id] for ex in item.exercises if ex.kind == "veto"])
    said = [reason_text(reason, earned, lesson_id) for reason in reasons]
    joined = _("; ").join(said)
    lines = [_("Not passed yet: {reasons}").format(reasons=joined)] if reasons else []
    lines.append(_("Scorecard: {title}").format(title=_(item.title)))
    lines += [_item_line(ex, states[ex.id]) for ex in item.exercises]
    total = _("Total: {earned:g}/{total:g} (pass line {pass_line:g})").format(
        earned=earned, total=item.total_points, pass_line=item.pass_line)
    if not reasons:
        total += _(": PASS")
    elif earned >= item.pass_line:  # the points are enough: say what else holds it back
        total += _(", but {reason}").format(reason=said[0])
    else:
        total += _(": not passed yet")
    lines.append(total)
    todo = [_("  - {title}: {advice}").format(title=_(ex.title), advice=advice(states[ex.id]))
            + _sections_to_reread(ex, states[ex.id])
            for ex in item.exercises if states[ex.id] != "passed"]
    if todo:
        lines += [_("What to do next:"), *todo]
    upcoming = next_lesson(lesson_id) if not reasons else None
    if upcoming:
        lines.append(_("Next: {title} ({notebook}).").format(title=_(upcoming[0]),
                                                             notebook=upcoming[1]))
    print("\n".join(lines))
    if upcoming:
        _show_link(*upcoming)
    if reasons:
        install_message_handler()  # also when the setup cell was skipped
        # one line under the scorecard (messages.py shows course errors without a traceback);
        # raising is what makes Run All, nbval and the grader see the lesson as not passed
        raise _scorecard_error(reasons, states.values())(
            _("Not passed yet: {reasons}.").format(reasons=joined))
    return earned


def _scorecard_error(reasons: list[str], states) -> type[WrongAnswer]:
    """A misjudged veto fails the lesson as a veto; a lesson with nothing answered wrongly (only
    blanks and items not started yet) is not started; anything else is a wrong answer."""
    if reasons[0] == VETO_JUDGED_WRONGLY:
        return VetoMisconception
    if all(state in ("passed", "blank", NOT_STARTED) for state in states):
        return NotStarted
    return WrongAnswer


def lesson_notebooks(root=None) -> list[str]:
    """The lesson notebooks' names in course order (NN-slug.ipynb), from lessons/NN-slug.qmd."""
    from pathlib import Path

    from ..paths import COURSE_ROOT

    folder = Path(root) if root else COURSE_ROOT
    return sorted(f"{p.stem}.ipynb" for p in (folder / "lessons").glob("[0-9][0-9]-*.qmd"))


def next_lesson(lesson_id: str, root=None) -> tuple[str, str] | None:
    """(title, notebook name) of the lesson after `lesson_id` in course order, or None."""
    import re

    _load_lesson(lesson_id)
    number = re.match(r"Lesson (\d+)", LESSONS[lesson_id].title)
    if not number:
        return None
    wanted = int(number.group(1)) + 1
    name = next((n for n in lesson_notebooks(root) if int(n[:2]) == wanted), None)
    if name is None:
        return None
    # its registered title where its checks are loaded, else its page's (the same words,
    # tests/test_lesson_loading.py): the link does not import another lesson's checks
    title = next((lesson.title for lesson in LESSONS.values()
                  if lesson.title.startswith(f"Lesson {wanted}:")), None)
    return title or lesson_title(name, root) or f"Lesson {wanted}", name


def lesson_title(notebook: str, root=None) -> str | None:
    """The `title:` of lessons/NN-slug.qmd for notebook NN-slug.ipynb, or None."""
    from pathlib import Path

    from ..paths import COURSE_ROOT, FRONT_MATTER, TITLE_LINE

    page = (Path(root) if root else COURSE_ROOT) / "lessons" / f"{Path(notebook).stem}.qmd"
    try:
        front = FRONT_MATTER.match(page.read_text(encoding="utf-8"))
    except OSError:
        return None
    found = TITLE_LINE.search(front.group(1)) if front else None
    return found.group(1) if found else None


def _show_link(title: str, notebook: str) -> None:
    """In a notebook, a link that opens the next lesson (it sits beside this one in work/)."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        return
    # a book page links its lessons itself, and an HTML output there would make Quarto load
    # script libraries from a CDN
    if get_ipython() is None or book_page():
        return
    import html

    label = _("Open {title}").format(title=_(title))
    display(HTML(f'<a href="{html.escape(notebook)}">{html.escape(label)}</a>'))


def _vetoes(lesson_id: str) -> list[str]:
    return [msg for ex_id, msg in VETOES_HIT.items() if EXERCISES[ex_id].lesson == lesson_id]


def list_ids() -> list[str]:
    _load_checks()
    return sorted(EXERCISES)


# ---------------------------------------------------------------- self-check answers


def require_answers(answers, keys, exercise_id: str) -> None:
    """`answers` must be a dict holding every key, none of them still a blank."""
    if is_blank(answers) or not isinstance(answers, dict):
        raise BlankNotFilled(_("Fill in the blank: {exercise_id} expects a dict of "
                               "answers.").format(exercise_id=exercise_id))
    missing = [key for key in keys if key not in answers]
    if missing:
        raise WrongAnswer(_("{exercise_id}: missing answers for {keys}.").format(
            exercise_id=exercise_id, keys=word_list(missing)))
    blanks = [key for key in keys if is_blank(answers[key])]
    if len(blanks) == 1:
        raise BlankNotFilled(_("Fill in the blank for {key} in {exercise_id}.").format(
            key=blanks[0], exercise_id=exercise_id))
    if blanks:
        raise BlankNotFilled(_("Fill in the blanks for {keys} in {exercise_id}.").format(
            keys=word_list(blanks), exercise_id=exercise_id))


def is_number(value) -> bool:
    """A real number of any kind (int, float, numpy, Fraction), not a bool."""
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


def _same_answer(given, right, rtol: float) -> bool:
    if isinstance(right, bool) or isinstance(given, bool):
        return given is right  # True is not 1 here: a yes/no question wants a bool
    if isinstance(right, (int, float)):
        return is_number(given) and bool(np.isclose(float(given), right, rtol=rtol, atol=0))
    if isinstance(right, str):
        return isinstance(given, str) and given.strip().lower() == right.lower()
    return given == right


def _kind_of_mistake(given, right) -> str:
    """What is wrong with one self-check answer, without saying the right one."""
    if isinstance(right, bool):
        return "" if isinstance(given, bool) else _(" (answer True or False)")
    if isinstance(right, (int, float)):
        return "" if is_number(given) else _(" (this part wants a number)")
    if isinstance(right, str) and not isinstance(given, str):
        return _(" (this part wants one of the strings named in the cell's comment)")
    return ""


def where_explained(sections, key: str) -> str:
    """' Re-read <section>.' for a key of a question or a statement, or ''."""
    where = sections.get(key) if isinstance(sections, dict) else sections
    return _(" Re-read {sections}.").format(sections=_(where)) if where else ""


def grade_answers(exercise_id: str, answers, expected: dict, explanations: dict,
                  rtol: float = 1e-9, sections: str | dict | None = None,
                  rounded: tuple[str, ...] = ()) -> str:
    """Compare a dict of self-check answers with `expected`; numbers within `rtol` (those of the
    `rounded` keys rounded to the nearest whole number first), strings without regard to case.
    Raise WrongAnswer naming every wrong key as entered and the section of the lesson that
    explains it (`sections`: one for all keys, or {key: section}), never the right value:
    `explanations` hold the reasoning for the reference answers and are not shown."""
    require_answers(answers, list(expected), exercise_id)
    graded = {key: round(answers[key]) if key in rounded and _finite_number(answers[key])
              else answers[key] for key in expected}
    wrong = [_("  {key} = {answer} is not right{kind}.{reread}").format(
                 key=key, answer=printable_answer(answers[key]),
                 kind=_kind_of_mistake(answers[key], right) or (
                     _(" (graded after rounding to the nearest whole number)")
                     if key in rounded else ""),
                 reread=where_explained(sections, key))
             for key, right in expected.items() if not _same_answer(graded[key], right, rtol)]
    if wrong:
        raise WrongAnswer(_("{exercise_id}: {wrong} of {total} answers are wrong:").format(
            exercise_id=exercise_id, wrong=len(wrong), total=len(expected))
            + "\n" + "\n".join(wrong))
    return _("all {count} answers right").format(count=len(expected))


def questions(exercise_id: str, title: str, points: float, expected: dict, explanations: dict,
              rtol: float = 1e-9, sections: str | dict | None = None,
              rounded: tuple[str, ...] = (), numbers: dict | None = None,
              formulas: dict | None = None) -> None:
    """Register a self-check question: a dict of answers graded by `grade_answers`;
    `sections` names where the lesson explains each part; the answers of the `rounded` keys
    are rounded to a whole number first. With `numbers` and `formulas` (checks/numbers.py),
    the keys that have a formula are graded with the current student's own numbers."""
    missing = set(expected) ^ set(explanations)
    if missing:
        raise KeyError(f"{exercise_id}: answers and explanations differ in {sorted(missing)}")

    @exercise(exercise_id, title, points, kind="question", answers=dict(expected))
    def _check(answers) -> str:
        require_answers(answers, list(expected), exercise_id)
        graded_as = student.current() if formulas else None
        right = varying.expected_answers(exercise_id, expected, numbers or {}, formulas or {},
                                         graded_as)
        try:
            return grade_answers(exercise_id, answers, right, explanations, rtol=rtol,
                                 sections=sections, rounded=tuple(rounded))
        except WrongAnswer as err:
            if graded_as is None:  # the lesson's numbers, as the text says
                raise
            raise WrongAnswer(f"{err}\n" + _(
                '  (graded with the numbers of student {student_id}: fc.numbers("{exercise_id}") '
                "prints them)").format(student_id=graded_as, exercise_id=exercise_id)) from None

    EXERCISES[exercise_id].sections = sections
    EXERCISES[exercise_id].numbers = dict(numbers) if formulas else None


def show_numbers(exercise_id: str) -> None:
    """`fc.numbers("lesson/qN-...")`: print the numbers of that question for this student
    (without a student id, the lesson's own)."""
    item = get(exercise_id)
    if not item.numbers:
        raise CourseInputError(_("{exercise_id} has no numbers of its own per student: use "
                                 "the numbers in its text").format(exercise_id=exercise_id))
    print(varying.numbers_line(item.id, item.title, item.numbers, student.current()))


def _finite_number(value) -> bool:
    return is_number(value) and bool(np.isfinite(float(value)))


def misconceptions(lesson_id: str, statements: dict[str, tuple[bool, str]],
                   sections: str | dict | None = None) -> None:
    """Register `<lesson_id>/misconceptions`: true/false statements, {key: (truth, why)}.
    A wrong answer is a veto: it fails the lesson whatever the other points. The message names
    the statement and the section that explains it (`sections`), never its truth or `why`."""
    exercise_id = f"{lesson_id}/misconceptions"

    truths = {key: truth for key, (truth, _why) in statements.items()}

    @exercise(exercise_id, N_("veto misconceptions (true/false)"), 0, kind="veto",
              answers=truths)
    def _check(answers) -> str:
        require_answers(answers, list(statements), exercise_id)
        wrong = []
        for key, (truth, _why) in statements.items():
            given = answers[key]
            if not isinstance(given, bool):
                raise WrongAnswer(_("{exercise_id}: answer {key} with True or False, not "
                                    "{answer}.").format(exercise_id=exercise_id, key=key,
                                                        answer=printable_answer(given)))
            if given != truth:
                wrong.append(_("  {key}: your judgement of this statement is not right.")
                             .format(key=key) + where_explained(sections, key))
        if wrong:
            raise VetoMisconception(_("{exercise_id}: a wrong answer here fails the lesson "
                                      "whatever the other points:").format(
                exercise_id=exercise_id) + "\n" + "\n".join(wrong))
        return _("all {count} statements judged right").format(count=len(statements))

    EXERCISES[exercise_id].sections = sections


