"""Clear signals: a lesson's scorecard says first why the lesson is not passed, names the
section to re-read for each item answered wrongly and the next lesson only once this one
passes; it still fails the notebook, with one short line instead of a traceback. The Triton
interpreter's floating-point warnings stay out of the student's way."""

import re
import warnings

import nbformat
import pytest
from notebook_runs import run_notebook

from flashcourse import BlankNotFilled, VetoMisconception, WrongAnswer, ______, check, runtime
from flashcourse.checks import registry
from flashcourse.checks.errors import NotStarted
from flashcourse.messages import course_errors, short_message

LESSON = "gpu-flash"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def every_lesson_registered():
    registry.list_ids()  # conftest empties the session's results before each test


def _right(exercise_id):
    return dict(registry.EXERCISES[exercise_id].answers)


def _full_marks_but_the_veto():
    for item in registry.LESSONS[LESSON].exercises:
        if item.kind == "code":  # the numpy answer is graded in test_gpu_flash.py
            registry.RESULTS[item.id] = item.points
        elif item.kind == "question":
            check(item.id, _right(item.id))


def _misjudged_veto():
    veto = f"{LESSON}/misconceptions"
    right = _right(veto)
    key = "hbm_as_fast_as_shared"  # explained in section 1, unlike the other statements
    with pytest.raises(VetoMisconception):
        check(veto, dict(right, **{key: not right[key]}))


def _scorecard_text(capsys, expected=None):
    capsys.readouterr()  # the checks' own lines
    if expected is None:
        registry.scorecard(LESSON)
    else:
        with pytest.raises(expected) as raised:
            registry.scorecard(LESSON)
        return capsys.readouterr().out, raised.value
    return capsys.readouterr().out, None


def test_a_misjudged_veto_is_said_first_with_its_section_and_no_next_lesson(capsys):
    _full_marks_but_the_veto()
    _misjudged_veto()
    out, err = _scorecard_text(capsys, VetoMisconception)
    assert out.startswith("Not passed yet: a veto statement is judged wrongly\nScorecard: "), out
    assert "Total: 10/10 (pass line 8), but a veto statement is judged wrongly" in out
    assert "PASS" not in out and "FAIL" not in out and "Next:" not in out
    assert "  [veto] veto misconceptions (true/false): wrong\n" in out
    veto_todo = next(line for line in out.splitlines() if line.startswith("  - veto"))
    assert 'Re-read section 1 ("How a GPU is organised").' in veto_todo
    assert "section 6" not in veto_todo  # only the sections of the misjudged statements
    assert str(err) == "Not passed yet: a veto statement is judged wrongly."


def test_a_passed_lesson_names_the_next_one(capsys):
    _full_marks_but_the_veto()
    check(f"{LESSON}/misconceptions", _right(f"{LESSON}/misconceptions"))
    out, _ = _scorecard_text(capsys)
    assert out.startswith("Scorecard: ") and "Not passed yet" not in out
    assert "Total: 10/10 (pass line 8): PASS" in out
    assert out.rstrip().endswith("Next: Lesson 2: Memory and the roofline "
                                 "(02-memory-roofline.ipynb).")


def test_each_item_says_how_it_stands(capsys):
    def flash_attention(Q, K, V, block_size=64):
        raise NotImplementedError  # the stub as handed out

    with pytest.raises(WrongAnswer):
        check(f"{LESSON}/flash-attention", flash_attention)
    q1 = f"{LESSON}/q1-memory"
    with pytest.raises(WrongAnswer):
        check(q1, {key: 10**9 for key in _right(q1)})
    q2 = next(i for i in registry.list_ids() if i.startswith(f"{LESSON}/q2"))
    with pytest.raises(BlankNotFilled):
        check(q2, ______)
    out, err = _scorecard_text(capsys, WrongAnswer)
    assert type(err) is WrongAnswer  # Q1 is wrong; the veto is only not judged yet
    assert out.startswith("Not passed yet: the veto statements are not judged yet; 0 of 10 "
                          "points, the pass line is 8\n"), out
    assert "0/4 numpy FlashAttention (online softmax) (not started)" in out
    assert "Q1: why materialising S is slow and big (wrong)" in out
    assert "Q2: coalescing, tiling and coarsening (blank)" in out
    assert "(not started)" in out.split("Q3:")[1].splitlines()[0]
    assert "veto misconceptions (true/false): not started" in out
    assert "not run" not in out
    q1_todo = next(line for line in out.splitlines() if line.startswith("  - Q1"))
    assert "fix it" in q1_todo and "Re-read section 5" in q1_todo
    assert set(registry.STATE_ADVICE) == {"wrong", "blank", "not started", "veto"}


def test_the_scorecard_error_fails_the_run_and_shows_one_line(capsys):
    _full_marks_but_the_veto()
    _misjudged_veto()
    _, err = _scorecard_text(capsys, VetoMisconception)
    assert isinstance(err, course_errors())  # the message handler shows it, not a traceback
    shown = ANSI.sub("", "\n".join(short_message(err)))
    assert shown == "VetoMisconception: Not passed yet: a veto statement is judged wrongly."


def test_an_untouched_exercise_ends_with_its_scorecard_and_one_line(root):
    nb = nbformat.read(root / "exercises" / "01-gpu-flash.ipynb", as_version=4)
    run_notebook(nb, root / "exercises")
    cell = next(c for c in nb.cells if c.get("id") == "scorecard")
    assert [o.output_type for o in cell.outputs] == ["stream", "error"], cell.outputs
    assert cell.outputs[0].text.startswith("Not passed yet: ")
    error = cell.outputs[1]
    assert error.ename == "NotStarted"  # nothing answered: no veto, nothing wrong
    assert len(error.traceback) == 1 and "Traceback" not in error.traceback[0]
    assert "registry.py" not in error.traceback[0]


def test_an_untouched_scorecard_is_not_started_not_a_veto(capsys):
    out, err = _scorecard_text(capsys, NotStarted)
    assert out.startswith("Not passed yet: the veto statements are not judged yet")
    shown = ANSI.sub("", "\n".join(short_message(err)))
    assert shown.startswith("NotStarted: Not passed yet: "), shown


def test_blank_answers_are_named_as_a_sentence():
    question = f"{LESSON}/q1-memory"
    keys = list(_right(question))
    assert len(keys) > 2
    with pytest.raises(BlankNotFilled) as raised:
        check(question, dict.fromkeys(keys, ______))
    listed = f"{', '.join(keys[:-1])} and {keys[-1]}"
    assert str(raised.value) == f"Fill in the blanks for {listed} in {question}."
    with pytest.raises(BlankNotFilled, match=rf"Fill in the blank for {keys[0]} in "):
        check(question, dict(_right(question), **{keys[0]: ______}))


def test_only_the_interpreters_floating_point_warnings_are_hidden():
    def warned(message, module):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runtime.quiet_interpreter_warnings()
            warnings.warn_explicit(message, RuntimeWarning, "kernel.py", 1, module=module)
        return [str(w.message) for w in caught]

    interpreter = "triton.runtime.interpreter"
    assert warned("overflow encountered in exp", interpreter) == []
    assert warned("invalid value encountered in subtract", interpreter) == []
    assert warned("All-NaN slice encountered", interpreter) == []
    assert warned("overflow encountered in exp", "__main__") == ["overflow encountered in exp"]
    assert warned("something else", interpreter) == ["something else"]


def test_setup_hides_them_when_the_interpreter_runs():
    if not runtime.current().interpreter:
        pytest.skip("kernels are compiled here: no interpreter warnings to hide")
    with warnings.catch_warnings():
        warnings.resetwarnings()
        runtime.setup(verbose=False)
        assert any(action == "ignore" and category is RuntimeWarning
                   and message.pattern == runtime.INTERPRETER_WARNINGS
                   for action, message, category, _module, _line in warnings.filters)


def test_a_kernel_still_the_stub_handed_out_is_not_started():
    """A kernel exercise's stub is refused by the kernel guard, not by calling it: it is not
    started either, as a function's stub is."""
    runtime.setup(verbose=False)  # the interpreter before @triton.jit
    import triton
    import triton.language as tl

    @triton.jit
    def softmax_row_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        raise NotImplementedError("write the kernel")

    with pytest.raises(WrongAnswer, match="still raises NotImplementedError"):
        check("softmax/row-kernel", softmax_row_kernel)
    assert registry.ATTEMPTS["softmax/row-kernel"] == "not started"
