"""Lesson 1's grader: the solution passes, known-wrong answers are rejected with a message that
names the mistake, questions and misconceptions are checked."""

import re

import pytest

from flashcourse import (
    WrongAnswer,
    check,
    grading,
    lesson_cells,
)
from flashcourse.checks import gpu_flash


def student_answer(root, **lines):
    """The lesson's solution with some lines rewritten ({target: value}; "return" for the
    return line), as a student would write them."""
    source = lesson_cells.solution_source(root / "lessons" / "01-gpu-flash.qmd",
                                          "exercise-flash-attention")
    inner = {t if t == "return" else " " * 12 + t: v for t, v in lines.items()}  # the loop
    return lesson_cells.load(lesson_cells.edit(source, assign=inner)).flash_attention


def test_solution_passes(root, capsys):
    check("gpu-flash/flash-attention", student_answer(root))
    out = capsys.readouterr().out
    assert out == ("\u2713 gpu-flash/flash-attention: 7 cases match standard attention "
                   "(graders also run hidden cases)\n")


def test_hidden_cases_run_in_grading_mode(root, capsys, monkeypatch):
    monkeypatch.setenv(grading.GRADING_MODE_ENV, "1")
    check("gpu-flash/flash-attention", student_answer(root))
    assert "10 cases match" in capsys.readouterr().out


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
    "running max without the old max": (
        dict(m_new="S_ij.max(axis=-1)"), "max of the old running max"),
    "row sum over the whole block": (
        dict(l_new="li * scale + p_ij.sum()"), "Check the four updates"),
    "output not rescaled": (
        dict(Oi="Oi + p_ij @ Vj"), "max abs error"),
}


@pytest.mark.parametrize("mistake", list(WRONG_ANSWERS))
def test_known_wrong_answer_is_rejected_with_its_message(root, mistake, known_wrong):
    lines, message = WRONG_ANSWERS[mistake]
    with known_wrong("gpu-flash/flash-attention", mistake, match=re.escape(message)) as caught:
        check("gpu-flash/flash-attention", student_answer(root, **lines))
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(n=\d+", text), text  # names the case
    assert "gpu-flash/flash-attention" not in grading.RESULTS


def test_failure_message_says_where(root, known_wrong):
    with known_wrong("gpu-flash/flash-attention", "output not rescaled") as caught:
        check("gpu-flash/flash-attention", student_answer(root, Oi="Oi + p_ij @ Vj"))
    assert re.search(r"max abs error [0-9.e+-]+ .* at row \d+, column \d+ \(row block \d+",
                     str(caught.value))


def test_a_crash_names_the_case(root, known_wrong):
    with known_wrong("gpu-flash/flash-attention", "row sum of the wrong shape (crash)",
                     match=r"case 1/7 .*raised ValueError"):
        crash = student_answer(root, l_new="li + p_ij.sum(axis=-1)[:-1]")
        check("gpu-flash/flash-attention", crash)


def test_modifying_inputs_is_rejected(known_wrong):
    def sneaky(Q, K, V, block_size=64):
        Q *= 0
        return gpu_flash.blocked_attention(Q, K, V, block_size)

    with known_wrong("gpu-flash/flash-attention", "modifies Q in place",
                     match="modified Q, K or V"):
        check("gpu-flash/flash-attention", sneaky)


def test_stub_says_implement(known_wrong):
    def flash_attention(Q, K, V, block_size=64):
        raise NotImplementedError("write this function")

    with known_wrong("gpu-flash/flash-attention", "stub still raises NotImplementedError",
                     match="NotImplementedError"):
        check("gpu-flash/flash-attention", flash_attention)


def test_scorecard_below_pass_line(capsys):
    check("gpu-flash/q1-memory", gpu_flash.Q1)
    with pytest.raises(WrongAnswer, match="below the pass line 8"):
        fc_scorecard()
    assert "0/4 numpy FlashAttention" in capsys.readouterr().out


def fc_scorecard():
    return grading.scorecard("gpu-flash")


def test_every_known_wrong_answer_is_listed():
    # test_known_wrong_answer_is_rejected_with_its_message records each of these; the suite's
    # summary prints "known-wrong answers rejected: R / T" (tests/conftest.py)
    assert len(WRONG_ANSWERS) >= 5
