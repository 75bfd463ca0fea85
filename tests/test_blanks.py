import numpy as np
import pytest

from flashcourse import BlankNotFilled, ______, check


@pytest.mark.parametrize("use", [
    lambda: ______ + 1,
    lambda: np.exp(______),
    lambda: np.maximum(np.zeros(3), ______),
    lambda: ______[:, None],
    lambda: np.zeros(3) * ______,
    lambda: float(______),
    lambda: ______.sum(axis=-1),
])
def test_every_use_of_a_blank_says_fill_in_the_blank(use):
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        use()


def test_assigning_a_blank_into_an_array_says_fill_in_the_blank():
    out = np.zeros((4, 2))
    with pytest.raises(BlankNotFilled):
        out[0:2] = ______


def test_check_names_the_lines_with_blanks():
    def flash_attention(Q, K, V, block_size=64):
        m_new = ______
        return m_new

    with pytest.raises(BlankNotFilled, match=r"line 2: m_new = ______"):
        check("gpu-flash/flash-attention", flash_attention)


def test_blank_answer_object():
    with pytest.raises(BlankNotFilled):
        check("gpu-flash/q1-memory", ______)


def test_student_code_returning_the_blank_is_refused():
    from flashcourse import grading

    with pytest.raises(BlankNotFilled, match=r"case 2/5 \(n=3\) returned ______"):
        grading.run_student(lambda n: ______, "case 2/5 (n=3)", 3)
    assert grading.run_student(lambda n: n + 1, "case 1/5", 3) == 4
