"""Each student's own numbers in the self-check questions (checks/numbers.py, student.py): the
formulas give the files' answers at the lesson's numbers, two students get different numbers
in every lesson, a question is graded with the current student's numbers (in the notebook and
in the grader's replay), no id means the lesson's numbers, and a malformed file is refused
naming file, item and key."""

import pytest

import flashcourse as fc
from flashcourse import student
from flashcourse.checks import LESSON_MODULES, numbers, recording, registry, self_check_files
from flashcourse.checks.errors import CourseInputError
from flashcourse.checks.self_check_files import SelfCheckFileError
from flashcourse.grader import samples, score
from flashcourse.grader.submission import Submission

ADA, GRACE = "ada", "grace"


def _varying_questions() -> list[self_check_files.Question]:
    return [q for stem in LESSON_MODULES
            for q in self_check_files.read(self_check_files.path_of(stem)).questions
            if q.formulas]


VARYING = _varying_questions()


@pytest.fixture(autouse=True)
def _no_student(monkeypatch):
    monkeypatch.delenv(student.STUDENT_ENV, raising=False)
    student.reset_for_tests()
    yield
    student.reset_for_tests()


def _expected(q, student_id):
    return numbers.expected_answers(q.id, q.answers, q.numbers, q.formulas, student_id)


def _differ(q, one: dict, other: dict) -> bool:
    return any(not registry._same_answer(one[key], other[key], q.rtol) for key in q.formulas)


@pytest.mark.parametrize("q", VARYING, ids=[q.id for q in VARYING])
def test_formulas_at_the_first_choices_give_the_files_answers(q):
    first = {name: choices[0] for name, choices in q.numbers.items()}
    for key, formula in q.formulas.items():
        value = numbers.evaluate(formula, first)
        if key in q.rounded:
            value = round(value)
        assert registry._same_answer(value, q.answers[key], q.rtol), (q.id, key, value)


def test_two_students_get_other_numbers_in_every_lesson():
    lessons = {q.id.split("/")[0] for q in VARYING}
    assert lessons == {self_check_files.read(self_check_files.path_of(stem)).lesson
                       for stem in LESSON_MODULES}
    for lesson in lessons:
        differing = [q.id for q in VARYING if q.id.startswith(f"{lesson}/")
                     and numbers.chosen(q.numbers, q.id, ADA)
                     != numbers.chosen(q.numbers, q.id, GRACE)
                     and _differ(q, _expected(q, ADA), _expected(q, GRACE))]
        assert differing, lesson


@pytest.mark.parametrize("q", VARYING, ids=[q.id for q in VARYING])
def test_a_question_is_graded_with_the_current_students_numbers(q, known_wrong, capsys):
    right_for_ada = _expected(q, ADA)
    with student.as_student(ADA):
        registry.check(q.id, right_for_ada)
    assert capsys.readouterr().out.startswith(f"\u2713 {q.id}: ")
    if not _differ(q, right_for_ada, _expected(q, GRACE)):
        pytest.skip("ada's and grace's answers coincide here")
    with known_wrong(q.id, "a classmate's answers", match=f"numbers of student {GRACE}"), \
            student.as_student(GRACE):
        registry.check(q.id, right_for_ada)


def test_the_id_comes_from_setup_else_the_environment(monkeypatch, capsys):
    q = next(q for q in VARYING if q.id == "roofline/q3-copy")
    right_for_ada = _expected(q, ADA)
    monkeypatch.setenv(student.STUDENT_ENV, ADA)
    assert student.current() == ADA
    registry.check(q.id, right_for_ada)
    fc.setup(verbose=False, student=GRACE)  # setup's id wins over the environment
    assert student.current() == GRACE
    with pytest.raises(fc.WrongAnswer, match="numbers of student grace"):
        registry.check(q.id, right_for_ada)
    with student.as_student(ADA):  # and the grader's over both
        registry.check(q.id, right_for_ada)
    assert fc.setup(verbose=False).interpreter in (True, False)  # setup() works as before
    assert student.current() == GRACE
    capsys.readouterr()


@pytest.mark.parametrize("bad", ["alice smith", "a__b", "-x", "a" * 65, ""])
def test_a_bad_id_is_refused_naming_the_rule(monkeypatch, bad):
    if bad:
        with pytest.raises(CourseInputError, match="letters, digits"):
            fc.setup(verbose=False, student=bad)
    monkeypatch.setenv(student.STUDENT_ENV, bad)
    if bad:
        with pytest.raises(CourseInputError, match=student.STUDENT_ENV):
            student.current()
    else:  # an empty variable is no id
        assert student.current() is None


def test_without_an_id_the_lessons_numbers_are_used(capsys):
    assert student.current() is None
    for q in VARYING:
        assert numbers.chosen(q.numbers, q.id, None) == {
            name: choices[0] for name, choices in q.numbers.items()}
        assert _expected(q, None) == q.answers == registry.EXERCISES[q.id].answers
        registry.check(q.id, dict(q.answers))
    capsys.readouterr()


def test_fc_numbers_prints_one_deterministic_line(monkeypatch, capsys):
    fc.numbers("roofline/q3-copy")
    fc.numbers("roofline/q3-copy")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1]
    assert lines[0].startswith("Numbers for Q3: n_elements = 1,000,000, block = 1,024 (the "
                               "lesson's own: no student id is set. Your grader checks Q3 "
                               "with the numbers of the id you hand in under")
    assert 'fc.setup(student="ID")' in lines[0] and "FLASHCOURSE_STUDENT=ID" in lines[0]
    monkeypatch.setenv(student.STUDENT_ENV, ADA)
    fc.numbers("roofline/q3-copy")
    mine = capsys.readouterr().out
    q = next(q for q in VARYING if q.id == "roofline/q3-copy")
    values = numbers.chosen(q.numbers, q.id, ADA)
    assert mine == (f"Your numbers for Q3 (student ada): n_elements = {values['n_elements']:,}, "
                    f"block = {values['block']:,}\n")
    with student.as_student(ADA):
        fc.numbers("roofline/q3-copy")
    assert capsys.readouterr().out == mine
    with pytest.raises(CourseInputError, match="no numbers of its own"):
        fc.numbers("roofline/q1-intensity")


def test_the_grader_replays_a_question_as_the_submissions_student():
    q = next(q for q in VARYING if q.id == "gpu-flash/q1-memory")
    item = registry.get(q.id)
    record = {"answer": recording.describe_answer(_expected(q, ADA)), "events": []}
    assert score.replay_item(item, record, student=ADA)[0] == "pass"
    status, message = score.replay_item(item, record, student=GRACE)
    assert status == "wrong" and "numbers of student grace" in message
    assert score.replay_item(item, {"answer": recording.describe_answer(dict(q.answers)),
                                    "events": []})[0] == "pass"  # no student: the lesson's
    assert score.graded_student(Submission(label="ada/01-gpu-flash.ipynb", path="x")) == ADA
    alone = Submission(label="01-gpu-flash.ipynb", path="x")  # nobody's: named by its label
    assert score.graded_student(alone) == "01-gpu-flash.ipynb"


def test_samples_answer_for_their_student(root):
    q = next(q for q in VARYING if q.id == "gpu-flash/q1-memory")
    nb = samples.filled_notebook(root, student=ADA)
    cell = next(c for c in nb["cells"] if c.get("id") == "answer-q1")
    assert f'"s_bytes": {_expected(q, ADA)["s_bytes"]!r},' in samples.cell_source(cell)
    untouched = samples.answered_as(samples.filled_notebook(root, unfilled=("answer-q1",)), ADA)
    cell = next(c for c in untouched["cells"] if c.get("id") == "answer-q1")
    assert '"s_bytes": ______,' in samples.cell_source(cell)  # a blank stays a blank


GOOD = '''
lesson = "roofline"

[[question]]
id = "roofline/q9-test"
title = "Q9: a test"
points = 1
section = "section 4"
numbers.n_elements = [1000, 1300, 750]
numbers.block = [128, 256, 64]
formula.programs = "cdiv(n_elements, block)"
answers.programs = 8
why.programs = "cdiv(1000, 128) = 8."
answers.bound = "memory"
why.bound = "Few FLOPs per byte."
'''


def _read(tmp_path, text):
    path = tmp_path / "99-test.toml"
    path.write_text(text)
    return self_check_files.read(path)


def test_a_good_file_with_numbers_reads(tmp_path):
    (q,) = _read(tmp_path, GOOD).questions
    assert q.numbers == {"n_elements": [1000, 1300, 750], "block": [128, 256, 64]}
    assert q.formulas == {"programs": "cdiv(n_elements, block)"}
    assert _expected(q, None) == q.answers


@pytest.mark.parametrize("change, message", [
    (('formula.programs = "cdiv(n_elements, block)"\n', ""), r"numbers\.n_elements is used by "
     "no formula"),
    (('"cdiv(n_elements, block)"', '"cdiv(n_elements, blocks)"'), "names 'blocks', which is "
     "neither a number"),
    (("formula.programs =", "formula.program ="), r"formula\.program names no answer"),
    (('formula.programs = "cdiv(n_elements, block)"',
      'formula.bound = "cdiv(n_elements, block)"'), r"formula\.bound: answers\.bound is not a "
     "number"),
    (("[128, 256, 64]", "[128, 256]"), r"numbers\.block: give a list of at least 3 choices"),
    (("[128, 256, 64]", "128"), r"numbers\.block: give a list of at least 3 choices"),
    (("[128, 256, 64]", '[128, "256", 64]'), r"numbers\.block: every choice must be a number"),
    (("[128, 256, 64]", "[128, true, 64]"), r"numbers\.block: every choice must be a number"),
    (("[128, 256, 64]", "[128, 256, 128]"), r"numbers\.block: a choice appears twice"),
    (('"cdiv(n_elements, block)"', '"cdiv(n_elements, block"'), "is not a Python expression"),
    (('"cdiv(n_elements, block)"', '"cdiv(n_elements, block).__class__"'), "reaches for "
     "'__class__'"),
    (("numbers.block =", "numbers.max ="), r"numbers\.max: the name is taken"),
    (('"cdiv(n_elements, block)"', '"8"'), "uses none of the question's numbers"),
])
def test_malformed_numbers_are_refused_naming_file_item_and_key(tmp_path, change, message):
    old, new = change
    assert old in GOOD
    with pytest.raises(SelfCheckFileError, match=message) as err:
        _read(tmp_path, GOOD.replace(old, new, 1))
    assert "99-test.toml" in str(err.value) and "roofline/q9-test" in str(err.value)


def test_a_formula_is_evaluated_without_builtins():
    with pytest.raises(numbers.FormulaError, match="NameError"):
        numbers.evaluate("open('x')", {})
    assert numbers.evaluate("memory.warp_efficiency([t < 40 for t in range(n)])",
                            {"n": 128}) == pytest.approx(0.8)


def test_choices_are_spread_and_stable():
    picks = {numbers.choice_index(f"student{i}", "q", "n", 4) for i in range(40)}
    assert picks == {0, 1, 2, 3}
    assert numbers.choice_index(ADA, "q", "n", 4) == numbers.choice_index(ADA, "q", "n", 4)
    assert numbers.choice_index(None, "q", "n", 4) == 0
