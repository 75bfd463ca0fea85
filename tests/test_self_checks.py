"""Every self-check question and veto item of every lesson: the right answers pass, each wrong
answer is rejected naming its key, blanks say "fill in the blank"."""

import re

import pytest

from flashcourse import BlankNotFilled, VetoMisconception, WrongAnswer, ______, check
from flashcourse.checks import registry

SELF_CHECKS = [i for i in registry.list_ids() if registry.EXERCISES[i].kind != "code"]


def _wrong(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 3 + 1
    return "not-the-answer"


def test_every_lesson_has_questions_and_vetoes():
    for lesson_id, lesson in registry.LESSONS.items():
        kinds = [e.kind for e in lesson.exercises]
        assert kinds.count("question") >= 3, lesson_id
        assert kinds.count("veto") == 1, lesson_id
        assert lesson.total_points == 10 and lesson.pass_line == 8, lesson_id


@pytest.mark.parametrize("exercise_id", SELF_CHECKS)
def test_right_answers_pass_and_each_wrong_one_is_named(exercise_id, known_wrong, capsys):
    item = registry.EXERCISES[exercise_id]
    right = dict(item.answers)
    check(exercise_id, right)
    assert capsys.readouterr().out.startswith(f"\u2713 {exercise_id}: ")
    rejection = VetoMisconception if item.kind == "veto" else WrongAnswer
    for key, value in right.items():
        with known_wrong(exercise_id, f"wrong {key}", exc=rejection, match=re.escape(key)):
            check(exercise_id, dict(right, **{key: _wrong(value)}))
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        check(exercise_id, dict(right, **{next(iter(right)): ______}))
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        check(exercise_id, ______)
    missing = dict(right)
    missing.pop(next(iter(right)))
    with pytest.raises(WrongAnswer, match="missing answers"):
        check(exercise_id, missing)


@pytest.mark.parametrize("exercise_id", [i for i in SELF_CHECKS if i.endswith("/misconceptions")])
def test_misconception_answers_must_be_booleans(exercise_id, known_wrong):
    right = dict(registry.EXERCISES[exercise_id].answers)
    key = next(iter(right))
    with known_wrong(exercise_id, "answer not a boolean", match="True or False"):
        check(exercise_id, dict(right, **{key: "no"}))


@pytest.mark.parametrize("lesson_id", sorted(registry.LESSONS))
def test_a_veto_fails_the_lesson_and_full_marks_pass(lesson_id, known_wrong, capsys):
    lesson = registry.LESSONS[lesson_id]
    for item in lesson.exercises:
        if item.kind == "code":  # kernels and numpy answers are graded in each lesson's tests
            registry.RESULTS[item.id] = item.points
        elif item.kind == "question":
            check(item.id, dict(item.answers))
    veto = registry.EXERCISES[f"{lesson_id}/misconceptions"]
    key = next(iter(veto.answers))
    with pytest.raises(VetoMisconception):
        check(veto.id, dict(veto.answers, **{key: not veto.answers[key]}))
    with known_wrong(veto.id, "full marks with one veto", exc=VetoMisconception,
                     match="Not passed yet: a veto statement is judged wrongly"):
        registry.scorecard(lesson_id)
    out = capsys.readouterr().out
    assert "Not passed yet: a veto statement is judged wrongly\nScorecard: " in out
    assert "Total: 10/10 (pass line 8), but a veto statement is judged wrongly" in out
    assert "PASS" not in out and "Next:" not in out
    check(veto.id, dict(veto.answers))
    assert registry.scorecard(lesson_id) == 10
    assert "Total: 10/10 (pass line 8): PASS" in capsys.readouterr().out
