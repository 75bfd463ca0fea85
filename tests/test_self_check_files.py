"""The self-check files (checks/self_checks/NN-slug.toml): every lesson's file is valid, and a
file off the format is refused with an error naming the file, the item and the key."""

import pytest

from flashcourse.checks import LESSON_MODULES, registry, self_check_files
from flashcourse.checks.self_check_files import SelfCheckFileError

GOOD = '''
lesson = "softmax"

[[question]]
id = "softmax/q9-test"
title = "Q9: a test"
points = 1
round = ["bytes"]
section = "section 1"
answers.bytes = 4
why.bytes = "Two bytes read, two written."
answers.bound = "memory"
why.bound = "Few FLOPs per byte."

[misconceptions.shift_matters]
truth = false
why = "A shift cancels."
section = "section 2"
'''


def _read(tmp_path, text):
    path = tmp_path / "99-test.toml"
    path.write_text(text)
    return self_check_files.read(path)


def test_every_self_check_file_belongs_to_a_lesson():
    stems = {path.stem for path in self_check_files.FOLDER.glob("*.toml")}
    assert stems <= set(LESSON_MODULES), stems - set(LESSON_MODULES)
    registry._load_checks()
    for stem in stems:
        items = self_check_files.read(self_check_files.path_of(stem))
        for question in items.questions:
            assert registry.EXERCISES[question.id].answers == question.answers


def test_a_good_file_reads(tmp_path):
    items = _read(tmp_path, GOOD)
    (question,) = items.questions
    assert question.answers == {"bytes": 4, "bound": "memory"}
    assert question.rounded == ("bytes",) and question.rtol == 1e-9
    assert question.sections == "section 1"
    assert items.statements == {"shift_matters": (False, "A shift cancels.")}
    assert items.statement_sections == {"shift_matters": "section 2"}


@pytest.mark.parametrize("change, message", [
    (('why.bound = "Few FLOPs per byte."\n', ""), r"answers\.bound has no why\.bound"),
    (('answers.bound = "memory"\n', ""), r"why\.bound names no answer"),
    (("points = 1\n", "points = 1\nhint = 2\n"), "unknown field 'hint'"),
    (('section = "section 1"\n', ""), "missing section"),
    (('section = "section 1"\n', 'sections.bytes = "s1"\n'), r"answers\.bound has no section"),
    (('round = ["bytes"]', 'round = ["bound"]'), "round names 'bound'"),
    (('id = "softmax/q9-test"', 'id = "tiling/q9-test"'), "must start with the lesson id"),
    (("truth = false\n", ""), r"\[misconceptions\.shift_matters\]: missing truth"),
    (("truth = false", 'truth = "no"'), "truth must be true or false"),
    (('section = "section 2"\n', ""), r"shift_matters\]: missing section"),
    (("points = 1\n", ""), "missing points"),
    (('lesson = "softmax"', "lesson = 3"), "name the lesson id"),
    (("answers.bytes = 4", "answers.bytes = [4]"), "must be a number, a string"),
    (("[[question]]", "[question"), "not valid TOML"),
])
def test_a_file_off_the_format_is_refused_naming_file_and_key(tmp_path, change, message):
    old, new = change
    assert old in GOOD
    with pytest.raises(SelfCheckFileError, match=message) as err:
        _read(tmp_path, GOOD.replace(old, new, 1))
    assert "99-test.toml" in str(err.value)


def test_question_errors_name_the_item(tmp_path):
    with pytest.raises(SelfCheckFileError, match=r"\[\[question\]\] #1 \(softmax/q9-test\)"):
        _read(tmp_path, GOOD.replace("points = 1", "points = -1"))


def test_rounded_answers_are_compared_as_whole_numbers(known_wrong):
    registry._load_checks()
    rounded = [(e.id, key) for e in registry.EXERCISES.values() if e.kind == "question"
               for key in _rounded_keys(e.id)]
    for exercise_id, key in rounded:
        right = dict(registry.EXERCISES[exercise_id].answers)
        registry.check(exercise_id, dict(right, **{key: right[key] + 0.4}))
        with known_wrong(exercise_id, f"{key} one off", match=key):
            registry.check(exercise_id, dict(right, **{key: right[key] + 1}))
        with known_wrong(exercise_id, f"{key} not finite", match=key):
            registry.check(exercise_id, dict(right, **{key: float("nan")}))


def _rounded_keys(exercise_id: str) -> tuple[str, ...]:
    for stem in LESSON_MODULES:
        path = self_check_files.path_of(stem)
        if path.exists():
            for question in self_check_files.read(path).questions:
                if question.id == exercise_id:
                    return question.rounded
    return ()


def test_the_example_in_authoring_reads(root, tmp_path):
    text = (root / "AUTHORING.md").read_text()
    section = text[text.index("### Self-check questions and veto misconceptions are data"):]
    example = section[section.index("```toml\n") + 8:section.index("```\n")]
    items = _read(tmp_path, example)
    assert items.lesson == "softmax" and items.questions[0].rounded == ("largest_int_exp_fp32",)
