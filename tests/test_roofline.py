"""Lesson 2's grader: the solutions pass; known-wrong answers, built by editing the lesson's own
solution cells, are rejected with the message meant for them."""

import re
from pathlib import Path

import numpy as np
import pytest

import flashcourse as fc
from flashcourse import BlankNotFilled, check
from flashcourse.authoring import cells
from flashcourse.checks import registry

REJECTED = []
# code or a formula in a message: a numpy call, an assignment, a product of names
CODE_IN_TEXT = re.compile(r"np\.\w+\(|\w\s*=\s*[\w(]|\w\s*\*\s*\w")
CASE = re.compile(r"case \d+/\d+ \([^)]*\)")


@pytest.fixture(scope="module")
def lesson(root):
    fc.setup(verbose=False)  # before any @triton.jit: the interpreter in tests
    return root / "lessons" / "02-memory-roofline.qmd"


def answer(lesson, cell_id, name, *replace):
    return cells.load_name(lesson, cell_id, name, replace)


CELLS = {
    "roofline/gemm-intensity": ("exercise-gemm-intensity", "gemm_intensity"),
    "roofline/attainable": ("exercise-attainable", "attainable_tflops"),
    "roofline/attention-intensity": ("exercise-attention-intensity", "attention_intensities"),
    "roofline/copy-kernel": ("exercise-copy-kernel", "copy_kernel"),
    "roofline/axpy-kernel": ("exercise-axpy-kernel", "axpy_kernel"),
}
FROM_SCRATCH = ["roofline/axpy-kernel"]  # whole bodies, not blanks: five known-wrong each


@pytest.mark.parametrize("exercise_id", list(CELLS))
def test_solution_passes(lesson, exercise_id, capsys):
    cell_id, name = CELLS[exercise_id]
    check(exercise_id, answer(lesson, cell_id, name))
    assert capsys.readouterr().out.startswith(f"\u2713 {exercise_id}: ")
    assert exercise_id in registry.RESULTS


def test_hidden_cases_run_in_grading_mode(lesson, capsys, monkeypatch):
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("roofline/copy-kernel", answer(lesson, *CELLS["roofline/copy-kernel"]))
    check("roofline/gemm-intensity", answer(lesson, *CELLS["roofline/gemm-intensity"]))
    check("roofline/axpy-kernel", answer(lesson, *CELLS["roofline/axpy-kernel"]))
    out = capsys.readouterr().out
    assert "16 cases copied exactly" in out and "6 shapes right" in out
    assert "16 cases right, canaries intact" in out


WRONG = {
    "roofline/gemm-intensity": {
        "one FLOP per multiply-add": (
            [("flops = 2 * m * n * k", "flops = m * n * k")], "half the right one"),
        "C not written": (
            [("(m * k + k * n + m * n) * element_bytes", "(m * k + k * n) * element_bytes")],
            "also writes C"),
        "elements, not bytes": (
            [("(m * k + k * n + m * n) * element_bytes", "(m * k + k * n + m * n)")],
            "count elements, not bytes"),
        "C read and written": (
            [("(m * k + k * n + m * n) * element_bytes",
              "(m * k + k * n + 2 * m * n) * element_bytes")], "C is counted twice"),
    },
    "roofline/attainable": {
        "maximum": ([("np.minimum(", "np.maximum(")],
                    "exceed the compute peak where intensity is high"),
        "no compute ceiling": (
            [("np.minimum(peak_tflops, intensity * bandwidth_tbs)",
              "intensity * bandwidth_tbs")], "no compute ceiling"),
        "python min": ([("np.minimum(", "min(")], "element by element"),
        "factor 1000": (
            [("intensity * bandwidth_tbs)", "intensity * bandwidth_tbs * 1000)")],
            "no factor of 1000"),
        "divide": ([("intensity * bandwidth_tbs)", "intensity / bandwidth_tbs)")],
                   "divides intensity by bandwidth"),
    },
    "roofline/attention-intensity": {
        "matmul FLOPs halved": (
            [("matmul_flops = 2 * n * n * d", "matmul_flops = n * n * d")], "half the right"),
        "read bytes only": (
            [("f / k.total", "f / k.read_bytes")], "only what a kernel reads"),
        "fused with one matmul": (
            [("(2 * matmul_flops + softmax_flops)", "(matmul_flops + softmax_flops)")],
            "both products"),
        "fused without softmax": (
            [("(2 * matmul_flops + softmax_flops)", "(2 * matmul_flops)")],
            "leave out the softmax"),
        "dtype ignored": (
            [("traffic.standard_attention_traffic(n, d, dtype)",
              "traffic.standard_attention_traffic(n, d)"),
             ("traffic.flash_attention_traffic(n, d, dtype, block_rows=128)",
              "traffic.flash_attention_traffic(n, d, block_rows=128)")], "ignores dtype"),
    },
    "roofline/copy-kernel": {
        "no store mask": (
            [("values, mask=mask)", "values)")], "Mask the stores"),
        "no masks at all": (
            [("tl.load(x_ptr + offsets, mask=mask)", "tl.load(x_ptr + offsets)"),
             ("values, mask=mask)", "values)")],
            "wrote"),
        "off-by-one mask": ([("offsets < n_elements", "offsets <= n_elements")],
                            "Mask the stores"),
        "mask drops the last element": ([("offsets < n_elements", "offsets < n_elements - 1")],
                                        "last element was never written"),
        "no program offset": (
            [("pid * BLOCK + tl.arange(0, BLOCK)", "tl.arange(0, BLOCK)")],
            "Only the first block was written"),
        "program id instead of block start": (
            [("pid * BLOCK + tl.arange(0, BLOCK)", "pid + tl.arange(0, BLOCK)")],
            "never written"),
        "values changed": (
            [("values, mask=mask)", "values * 2, mask=mask)")], "reproduce its input exactly"),
    },
    "roofline/axpy-kernel": {
        "no masks at all": (
            [("tl.load(x_ptr + offsets, mask=mask)", "tl.load(x_ptr + offsets)"),
             ("tl.load(y_ptr + offsets, mask=mask)", "tl.load(y_ptr + offsets)"),
             ("alpha * x + y, mask=mask)", "alpha * x + y)")], "outside the output"),
        "store without a mask": ([("alpha * x + y, mask=mask)", "alpha * x + y)")],
                                 "Mask the stores"),
        "off-by-one mask": ([("offsets < n_elements", "offsets <= n_elements")],
                            "Mask the stores"),
        "mask drops the last element": ([("offsets < n_elements", "offsets < n_elements - 1")],
                                        "last element was never written"),
        "no program offset": ([("pid * BLOCK + tl.arange(0, BLOCK)", "tl.arange(0, BLOCK)")],
                              "Only the first block was written"),
        "alpha missing": ([("alpha * x + y, mask", "x + y, mask")], "alpha is missing"),
        "x and y swapped": ([("alpha * x + y, mask", "alpha * y + x, mask")], "swapped"),
        "alpha scales the sum": ([("alpha * x + y, mask", "alpha * (x + y), mask")],
                                 "alpha multiplies the sum"),
    },
}


@pytest.mark.parametrize("exercise_id,mistake",
                         [(e, m) for e, wrongs in WRONG.items() for m in wrongs])
def test_known_wrong_answer_is_rejected_with_its_message(lesson, known_wrong, exercise_id,
                                                         mistake):
    replace, message = WRONG[exercise_id][mistake]
    wrong = answer(lesson, *CELLS[exercise_id], *replace)
    with known_wrong(exercise_id, mistake, match=re.escape(message)) as caught:
        check(exercise_id, wrong)
    assert re.search(r"case \d+/\d+ \(", str(caught.value)), str(caught.value)
    if exercise_id not in FROM_SCRATCH + ["roofline/copy-kernel"]:  # their specs are code
        assert not CODE_IN_TEXT.search(CASE.sub("", str(caught.value))), str(caught.value)
        assert re.search(r"section \d", str(caught.value)), str(caught.value)
    assert exercise_id not in registry.RESULTS
    REJECTED.append((exercise_id, mistake))


def test_copy_failure_says_where(lesson, known_wrong):
    wrong = answer(lesson, *CELLS["roofline/copy-kernel"],
                   ("offsets < n_elements", "offsets <= n_elements"))
    with known_wrong("roofline/copy-kernel", "off-by-one mask",
                     match=r"case 1/12 \(n_elements=1, BLOCK=64, fp32\): your kernel wrote 1 "
                           r"value\(s\) outside the output, first at index 1, past the last "
                           r"index 0"):
        check("roofline/copy-kernel", wrong)


@pytest.mark.parametrize("exercise_id", [e for e in CELLS if e not in FROM_SCRATCH])
def test_untouched_exercise_says_fill_in_the_blank(lesson, exercise_id):
    cell_id, name = CELLS[exercise_id]
    source = cells.exercise_source(lesson, cell_id)
    module = cells.load(source)
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        check(exercise_id, getattr(module, name))


def test_run_kernel_turns_a_blank_into_a_short_error(lesson):
    source = cells.exercise_source(lesson, "exercise-copy-kernel")
    module = cells.load(source, prelude=cells.PRELUDE +
                               "from flashcourse import run_kernel\n")
    import torch
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        module.copy(torch.zeros(10))


def test_stub_kernel_says_implement(lesson, known_wrong):
    stub = cells.load(
        "@triton.jit\ndef copy_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):\n"
        "    raise NotImplementedError('write this function')\n")
    with known_wrong("roofline/copy-kernel", "stub still raises NotImplementedError",
                     match="NotImplementedError"):
        check("roofline/copy-kernel", stub.copy_kernel)


@pytest.mark.parametrize("exercise_id", FROM_SCRATCH)
def test_untouched_from_scratch_exercise_says_implement(lesson, known_wrong, exercise_id):
    cell_id, name = CELLS[exercise_id]
    stub = getattr(cells.load(cells.exercise_source(lesson, cell_id)), name)
    with known_wrong(exercise_id, "body not written (the exercise as handed out)",
                     match="still raises NotImplementedError"):
        check(exercise_id, stub)


def test_axpy_is_replayed_by_the_grader(lesson, record_check, replay_agrees):
    """The grader's replay of a record gives the check's own verdict, right or wrong."""
    exercise_id = "roofline/axpy-kernel"
    for folder, replace in (("right", ()), ("wrong", (("alpha * x + y, mask", "x + y, mask"),))):
        raised, record = record_check(
            exercise_id, answer(lesson, *CELLS[exercise_id], *replace), folder=folder)
        assert (raised is None) == (folder == "right"), raised
        replay_agrees(exercise_id, raised, record, "16 cases right")


def test_a_plain_function_is_not_a_kernel(known_wrong):
    with known_wrong("roofline/copy-kernel", "plain function, not a kernel", match="@triton.jit"):
        check("roofline/copy-kernel", lambda *args: None)


def test_intensity_numbers_are_consistent():
    # the lesson's claims: softmax 1.25 FLOP/B, matmuls approach d, ridge ~159
    from flashcourse.models import roofline

    points = roofline.attention_points(32768, 128)
    assert points[1].intensity == pytest.approx(1.25)
    assert points[0].intensity == pytest.approx(128, rel=0.01)
    assert roofline.H200_PEAK_TFLOPS / roofline.H200_BANDWIDTH_TBS == pytest.approx(159, abs=0.5)
    assert np.all(roofline.attainable_tflops([1e-3, 1e4], 682, 4.3) == [4.3e-3, 682])


def test_question_numbers_are_the_roofline_models():
    from flashcourse.models import roofline

    q1 = registry.get("roofline/q1-intensity").answers
    q2 = registry.get("roofline/q2-attention").answers
    assert q1["fp32_add_intensity"] == 1 / 12
    assert q1["h200_ridge"] == round(roofline.H200_PEAK_TFLOPS / roofline.H200_BANDWIDTH_TBS)
    # standard attention's three kernels (QK^T, softmax, PV) at N = 4096, d = 128
    kernels = roofline.attention_points(4096, 128)[:3]
    assert q2["standard_us_n4096_d128"] == round(sum(map(roofline.time_bound_us, kernels)))


def test_a_rounded_answer_is_echoed_as_entered_with_the_rounding_rule():
    q1, q2 = "roofline/q1-intensity", "roofline/q2-attention"
    with pytest.raises(registry.WrongAnswer) as raised:
        check(q2, dict(registry.get(q2).answers, standard_us_n4096_d128=16.1))
    assert ("standard_us_n4096_d128 = 16.1 is not right (graded after rounding to the nearest "
            "whole number)") in str(raised.value)
    with pytest.raises(registry.WrongAnswer, match="h200_ridge = 158 is not right .*nearest"):
        check(q1, dict(registry.get(q1).answers, h200_ridge=158))
    lesson_text = (Path(__file__).parents[1] / "lessons" / "02-memory-roofline.qmd").read_text()
    assert lesson_text.count("rounded to\n    # the nearest whole number") == 1


def test_an_exact_fraction_is_a_number():
    from fractions import Fraction

    q1 = "roofline/q1-intensity"
    check(q1, dict(registry.get(q1).answers, fp32_add_intensity=Fraction(1, 12)))
    assert q1 in registry.RESULTS


def test_zz_at_least_three_wrong_answers_per_exercise():
    for exercise_id in CELLS:  # questions: tests/test_self_checks.py
        least = 5 if exercise_id in FROM_SCRATCH else 3
        assert len([r for r in REJECTED if r[0] == exercise_id]) >= least, exercise_id


def test_feedback_never_shows_the_right_value(known_wrong):
    from flashcourse.checks.memory_roofline import GEMM_CASES
    from flashcourse.models import roofline as model

    right = f"{model.gemm_intensity(*GEMM_CASES[0]):.6g}"
    with known_wrong("roofline/gemm-intensity", "a constant, answer not shown",
                     match="not this GEMM's intensity") as caught:
        check("roofline/gemm-intensity", lambda m, n, k, b: 1.0)
    assert right not in str(caught.value)
