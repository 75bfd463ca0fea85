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
    from flashcourse.checks import registry

    with pytest.raises(BlankNotFilled, match=r"case 2/5 \(n=3\) returned ______"):
        registry.run_student(lambda n: ______, "case 2/5 (n=3)", 3)
    assert registry.run_student(lambda n: n + 1, "case 1/5", 3) == 4


def test_every_blank_of_a_kernel_and_its_helpers_is_listed_at_once(tmp_path):
    """A Triton exercise with blanks in a kernel and in the @triton.jit helper it calls names
    them all in one message, not one function at a time."""
    import importlib.util

    from flashcourse import blanks

    source = (
        "import triton\nimport triton.language as tl\nfrom flashcourse import ______\n\n\n"
        "@triton.jit\ndef helper(x):\n    y = ______\n    return y\n\n\n"
        "@triton.jit\ndef kernel(X):\n    a = ______\n    b = helper(a)\n    c = ______\n")
    path = tmp_path / "kernels_with_blanks.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("kernels_with_blanks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert [name for name, _ in blanks.jit_helpers(module.kernel)] == ["helper"]
    with pytest.raises(BlankNotFilled) as caught:
        blanks.refuse_blanks(module.kernel, "kernel")
    message = str(caught.value)
    assert "Fill in the blanks in kernel, helper: 3 `______` placeholders" in message
    for line in ("kernel, line 3: a = ______", "kernel, line 5: c = ______",
                 "helper, line 3: y = ______"):
        assert line in message
