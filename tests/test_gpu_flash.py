"""Lesson 1's grader: the solution passes, known-wrong answers are rejected with a message that
names the mistake, questions and misconceptions are checked."""

import re

import numpy as np
import pytest

from flashcourse import WrongAnswer, check
from flashcourse.authoring import cells
from flashcourse.checks import gpu_flash, registry
from flashcourse.models.traffic import score_matrix_bytes


def student_answer(root, **lines):
    """The lesson's solution with some lines rewritten ({target: value}; "return" for the
    return line), as a student would write them."""
    source = cells.solution_source(root / "lessons" / "01-gpu-flash.qmd",
                                          "exercise-flash-attention")
    inner = {t if t == "return" else " " * 12 + t: v for t, v in lines.items()}  # the loop
    return cells.load(cells.edit(source, assign=inner)).flash_attention


def test_solution_passes(root, capsys):
    check("gpu-flash/flash-attention", student_answer(root))
    out = capsys.readouterr().out
    assert out == ("\u2713 gpu-flash/flash-attention: 8 cases match standard attention "
                   "(graders also run hidden cases)\n")


def test_hidden_cases_run_in_grading_mode(root, capsys, monkeypatch):
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("gpu-flash/flash-attention", student_answer(root))
    assert "11 cases match" in capsys.readouterr().out


WRONG_ANSWERS = {
    "no rescale of the old sum and output": (
        dict(scale="np.ones_like(m_new)"), "were not rescaled"),
    "no running max": (
        dict(m_new="np.zeros_like(mi)"), "Without a running max"),
    "per-block softmax, then concatenate": (
        dict(m_new="S_ij.max(axis=-1)", scale="np.ones_like(m_new)",
             l_new="np.ones_like(m_new)",
             Oi="Oi + (p_ij / p_ij.sum(axis=-1, keepdims=True)) @ Vj"),
        "softmax each block separately"),
    "per-block softmax, then average": (
        dict(m_new="S_ij.max(axis=-1)", scale="np.ones_like(m_new)", l_new="li + 1",
             Oi="Oi + (p_ij / p_ij.sum(axis=-1, keepdims=True)) @ Vj"),
        "softmax each block separately"),
    "forgetting the final division": (
        dict(**{"return": "O"}), "never divided by the running sum"),
    "wrong scale direction": (
        dict(scale="np.exp(m_new - mi)"), "points the wrong way"),
    "running max floored at 0 (max with initial=0): NaN on very negative rows": (
        dict(m_new="np.maximum(mi, S_ij.max(axis=-1, initial=0))"), "never goes below 0"),
    "running max without the old max": (
        dict(m_new="S_ij.max(axis=-1)"), "ignores the old one"),
    "row sum over the whole block": (
        dict(l_new="li * scale + p_ij.sum()"), "None of the mistakes the grader knows"),
    "output not rescaled": (
        dict(Oi="Oi + p_ij @ Vj"), "but the output O is not"),
    "running sum not rescaled": (
        dict(l_new="li + p_ij.sum(axis=-1)"), "but the running sum l is not"),
}
# Code of the reference answer that no message may show (feedback names the mistake only).
ANSWER_CODE = ["np.maximum(", "np.exp(mi - m_new)", "li * scale", "Oi * scale",
               "exp(m_old - m_new)", "O / l"]


@pytest.mark.parametrize("mistake", list(WRONG_ANSWERS))
def test_known_wrong_answer_is_rejected_with_its_message(root, mistake, known_wrong):
    lines, message = WRONG_ANSWERS[mistake]
    with known_wrong("gpu-flash/flash-attention", mistake, match=re.escape(message)) as caught:
        check("gpu-flash/flash-attention", student_answer(root, **lines))
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(n=\d+", text), text  # names the case
    assert "section 6" in text, text  # points to the section that explains it
    assert not [code for code in ANSWER_CODE if code in text], text
    assert "gpu-flash/flash-attention" not in registry.RESULTS


def test_failure_message_says_where(root, known_wrong):
    with known_wrong("gpu-flash/flash-attention", "output not rescaled") as caught:
        check("gpu-flash/flash-attention", student_answer(root, Oi="Oi + p_ij @ Vj"))
    assert re.search(r"max abs error [0-9.e+-]+ .* at row \d+, column \d+ \(row block \d+",
                     str(caught.value))


def test_a_crash_names_the_case(root, known_wrong):
    with known_wrong("gpu-flash/flash-attention", "row sum of the wrong shape (crash)",
                     match=r"case 1/8 .*raised ValueError"):
        crash = student_answer(root, l_new="li + p_ij.sum(axis=-1)[:-1]")
        check("gpu-flash/flash-attention", crash)


def test_modifying_inputs_is_rejected(known_wrong):
    def sneaky(Q, K, V, block_size=64):
        Q *= 0
        return gpu_flash.blocked_attention(Q, K, V, block_size)

    with known_wrong("gpu-flash/flash-attention", "modifies Q in place",
                     match="modified Q, K or V"):
        check("gpu-flash/flash-attention", sneaky)


def test_an_answer_that_forms_the_whole_score_matrix_is_rejected(known_wrong):
    """Right outputs from standard attention written out (no blocks): the memory case names
    what it held against the n x n scores, and the section, not the code to write."""
    def unblocked(Q, K, V, block_size=64):
        scores = Q @ K.T
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return weights / weights.sum(axis=-1, keepdims=True) @ V

    with known_wrong("gpu-flash/flash-attention", "forms the whole n x n score matrix",
                     match=r"case 8/8 .*held \d+ MiB at once, where the whole n x n score "
                           r"matrix takes 32 MiB") as caught:
        check("gpu-flash/flash-attention", unblocked)
    assert "section 6" in str(caught.value)
    assert "gpu-flash/flash-attention" not in registry.RESULTS


def test_the_memory_case_cannot_be_blinded_by_stopping_the_tracing(known_wrong):
    import tracemalloc

    def blind(Q, K, V, block_size=64):
        tracemalloc.stop()
        return gpu_flash.blocked_attention(Q, K, V, block_size)

    with known_wrong("gpu-flash/flash-attention", "stops the memory tracing",
                     match="could not be measured"):
        check("gpu-flash/flash-attention", blind)


def test_stub_says_implement(known_wrong):
    def flash_attention(Q, K, V, block_size=64):
        raise NotImplementedError("write this function")

    with known_wrong("gpu-flash/flash-attention", "stub still raises NotImplementedError",
                     match="NotImplementedError"):
        check("gpu-flash/flash-attention", flash_attention)


def _answers(exercise_id):
    registry._load_checks()  # the self-checks register as their lesson's checks load
    return dict(registry.EXERCISES[exercise_id].answers)


def _right_misconceptions():
    return _answers("gpu-flash/misconceptions")


def test_q1_score_matrix_bytes_is_the_traffic_models():
    assert _answers("gpu-flash/q1-memory")["s_bytes"] == score_matrix_bytes(16384, "fp16")


def test_scorecard_below_pass_line(capsys):
    registry.ATTEMPTS.clear()
    check("gpu-flash/q1-memory", _answers("gpu-flash/q1-memory"))
    check("gpu-flash/misconceptions", _right_misconceptions())
    with pytest.raises(WrongAnswer, match="2 of 10 points, the pass line is 8"):
        fc_scorecard()
    out = capsys.readouterr().out
    # why first, on the line above the scorecard's own
    assert "\nNot passed yet: 2 of 10 points, the pass line is 8\nScorecard: Lesson 1" in out
    assert "0/4 numpy FlashAttention" in out and "(not started)" in out
    assert "What to do next:\n  - numpy FlashAttention (online softmax): answer it" in out
    assert "Total: 2/10 (pass line 8): not passed yet" in out
    # the next lesson is named only once this one passes
    assert "Next:" not in out and "02-memory-roofline.ipynb" not in out


def test_scorecard_of_a_correct_run_passes_and_points_to_the_next_lesson(root, capsys):
    registry.ATTEMPTS.clear()
    check("gpu-flash/flash-attention", student_answer(root))
    for number in (1, 2, 3):
        question = next(e for e in registry.list_ids() if e.startswith(f"gpu-flash/q{number}"))
        check(question, _answers(question))
    check("gpu-flash/misconceptions", _right_misconceptions())
    assert fc_scorecard() == 10  # returns normally: no error at the end of a correct run
    out = capsys.readouterr().out
    assert "Total: 10/10 (pass line 8): PASS" in out and "What to do next" not in out
    assert out.rstrip().endswith("Next: Lesson 2: Memory and the roofline "
                                 "(02-memory-roofline.ipynb).")


def test_scorecard_says_what_to_do_with_wrong_and_blank_items(root, capsys, known_wrong):
    registry.ATTEMPTS.clear()
    with known_wrong("gpu-flash/flash-attention", "output not rescaled (scorecard)"):
        check("gpu-flash/flash-attention", student_answer(root, Oi="Oi + p_ij @ Vj"))
    with pytest.raises(registry.BlankNotFilled):
        check("gpu-flash/q1-memory", registry.blanks.______)
    check("gpu-flash/misconceptions", _right_misconceptions())
    with pytest.raises(WrongAnswer, match="the pass line is 8"):
        fc_scorecard()
    out = capsys.readouterr().out
    assert "numpy FlashAttention (online softmax): fix it and run its check again" in out
    assert "Q1: why materialising S is slow and big: fill in its blanks" in out


def fc_scorecard():
    return registry.scorecard("gpu-flash")


def test_every_known_wrong_answer_is_listed():
    # test_known_wrong_answer_is_rejected_with_its_message records each of these; the suite's
    # summary prints "known-wrong answers rejected: R / T" (tests/conftest.py)
    assert len(WRONG_ANSWERS) >= 5


def test_question_feedback_names_the_part_and_section_not_the_answer(known_wrong):
    wrong = dict(_answers("gpu-flash/q1-memory"), nxn_hbm_passes=3, flash_extra_memory=1)
    with known_wrong("gpu-flash/q1-memory", "two parts wrong") as caught:
        check("gpu-flash/q1-memory", wrong)
    text = str(caught.value)
    assert "nxn_hbm_passes = 3 is not right" in text
    assert "flash_extra_memory = 1 is not right (this part wants one of the strings" in text
    assert "section 5" in text and "O(N)" not in text and "4" not in text.split("wrong:")[1]
    assert "S written" not in text  # the reasoning of the reference answer stays hidden


def test_misconception_feedback_does_not_say_the_truth(known_wrong):
    wrong = _right_misconceptions()
    wrong["hbm_as_fast_as_shared"] = True
    with known_wrong("gpu-flash/misconceptions", "HBM as fast as shared memory") as caught:
        check("gpu-flash/misconceptions", wrong)
    text = str(caught.value)
    assert "hbm_as_fast_as_shared" in text and 'section 1 ("How a GPU is organised")' in text
    assert "False" not in text and "True" not in text and "TB/s" not in text
