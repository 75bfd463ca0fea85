"""Lesson 5's grader: the solutions pass, known-wrong answers (numpy functions and Triton kernels
built by editing the lesson's own solution cells) are rejected with the message that names the
mistake, blanks say "Fill in the blank", questions and misconceptions are checked."""

import math
import re

import numpy as np
import pytest

from flashcourse import BlankNotFilled, ______, check, runtime
from flashcourse.authoring import cells
from flashcourse.checks import registry

runtime.setup(verbose=False)  # before triton is imported or any kernel defined: the interpreter

from flashcourse.checks import softmax  # noqa: E402


def solution_source(root, cell_id):
    return cells.solution_source(root / "lessons" / "05-softmax.qmd", cell_id)


EXERCISES = {  # exercise id: (solution cell id, function name)
    "softmax/stable-softmax": ("exercise-stable-softmax", "stable_softmax"),
    "softmax/row-kernel": ("exercise-row-kernel", "softmax_row_kernel"),
    "softmax/online-stats": ("exercise-online-stats", "online_softmax_stats"),
    "softmax/online-kernel": ("exercise-online-kernel", "online_softmax_kernel"),
    "softmax/masked-softmax": ("exercise-masked-softmax", "masked_softmax_kernel"),
    "softmax/merge-states": ("exercise-merge-states", "merge_states"),
}
FROM_SCRATCH = ["softmax/masked-softmax"]  # whole bodies, not blanks: five known-wrong each


def answer(root, exercise_id, lines=None, replace=()):
    """The solution of an exercise with lines rewritten (lines: {target: value}) and text
    replaced (replace: (old, new, expected count)), imported from a real file."""
    cell_id, name = EXERCISES[exercise_id]
    runtime.setup(verbose=False)  # the interpreter must be chosen before @triton.jit runs
    source = cells.edit(solution_source(root, cell_id), replace, lines)
    return getattr(cells.load(source), name)


# ---------------------------------------------------------------- right answers


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_solution_passes(root, passes_with_points, exercise_id):
    passes_with_points(exercise_id, answer(root, exercise_id))


@pytest.mark.parametrize("exercise_id", ["softmax/stable-softmax", "softmax/row-kernel",
                                         "softmax/online-kernel", "softmax/merge-states",
                                         "softmax/online-stats", "softmax/masked-softmax"])
def test_hidden_cases_run_in_grading_mode(root, graded_case_count, exercise_id):
    assert graded_case_count(exercise_id, answer(root, exercise_id)) >= 8


# ---------------------------------------------------------------- known-wrong answers

WRONG = {
    # exercise 1: the stable numpy softmax
    ("softmax/stable-softmax", "no max subtraction"): (
        dict(lines={"shifted": "x"}), "Without subtracting the max"),
    ("softmax/stable-softmax", "max over the whole array"): (
        dict(lines={"shifted": "x - x.max()"}), "The max is taken over the whole array"),
    ("softmax/stable-softmax", "sum over the whole array"): (
        dict(lines={"probabilities": "e / e.sum()"}), "The sum runs over the whole array"),
    ("softmax/stable-softmax", "reductions down the columns"): (
        dict(lines={"shifted": "x - x.max(axis=0, keepdims=True)",
                    "probabilities": "e / e.sum(axis=0, keepdims=True)"}), "over axis 0"),
    ("softmax/stable-softmax", "max without keepdims"): (
        dict(lines={"shifted": "x - x.max(axis=-1)"}), "keepdims=True"),
    # exercise 2: the fused row kernel
    ("softmax/row-kernel", "no max subtraction"): (
        dict(lines={"row_max": "0.0"}), "subtract the row max before tl.exp"),
    ("softmax/row-kernel", "padding loaded as 0"): (
        dict(replace=[('other=float("-inf")', "other=0.0", 1)]), "fills the padding lanes"),
    ("softmax/row-kernel", "masked load without other="): (
        dict(replace=[(', other=float("-inf")', "", 1)]), "fills the padding lanes"),
    ("softmax/row-kernel", "load without a mask"): (
        dict(lines={"x": "tl.load(x_ptrs).to(tl.float32)"}), "the load read past the end"),
    ("softmax/row-kernel", "store without a mask"): (
        dict(replace=[("numerator / denominator, mask=mask)", "numerator / denominator)", 1)]),
        "Mask the stores"),
    ("softmax/row-kernel", "rows assumed contiguous"): (
        dict(replace=[("row * x_row_stride", "row * n_cols", 1),
                      ("row * y_row_stride", "row * n_cols", 1)]), "r * n_cols apart"),
    ("softmax/row-kernel", "input rows assumed contiguous"): (
        dict(replace=[("row * x_row_stride", "row * n_cols", 1)]), "r * n_cols apart"),
    ("softmax/row-kernel", "no division by the sum"): (
        dict(replace=[("numerator / denominator,", "numerator,", 1)]), "never divided"),
    ("softmax/row-kernel", "nothing stored"): (
        dict(replace=[("    tl.store(y_ptrs, numerator / denominator, mask=mask)",
                       "    pass", 1)]), "nothing was stored"),
    # exercise 3: the online statistics in numpy
    ("softmax/online-stats", "sum not rescaled"): (
        dict(lines={"scale": "np.ones_like(m_new)"}), "not rescaled"),
    ("softmax/online-stats", "rescale the wrong way"): (
        dict(lines={"scale": "np.exp(m_new - m)"}), "points the wrong way"),
    ("softmax/online-stats", "block max only"): (
        dict(lines={"m_new": "block.max(axis=-1)"}), "with the block max alone"),
    ("softmax/online-stats", "no max subtraction"): (
        dict(lines={"m_new": "np.zeros_like(m)"}), "Without subtracting the running max"),
    ("softmax/online-stats", "no safe max: a masked first block gives NaN"): (
        dict(lines={"m_safe": "m_new"}), "first block is masked entirely"),
    ("softmax/online-stats", "running max started at 0, not -inf"): (
        dict(replace=[("m = np.full(rows, -np.inf)", "m = np.zeros(rows)", 1)]),
        "not a finite number (a row masked entirely)"),
    # exercise 4: the online kernel
    ("softmax/online-kernel", "sum not rescaled"): (
        dict(replace=[("l = l * tl.exp(m - m_safe) + ", "l = l + ", 1)]), "not rescaled"),
    ("softmax/online-kernel", "rescale the wrong way"): (
        dict(replace=[("tl.exp(m - m_safe)", "tl.exp(m_new - m)", 1)]), "points the wrong way"),
    ("softmax/online-kernel", "block max only"): (
        dict(lines={"m_new": "tl.max(x, axis=0)"}), "this block's max alone"),
    ("softmax/online-kernel", "padding loaded as 0"): (
        dict(replace=[('other=float("-inf")', "other=0.0", 2)]), "fills the padding lanes"),
    ("softmax/online-kernel", "no division by the sum"): (
        dict(lines={"y": "tl.exp(x - m)"}), "without dividing"),
    ("softmax/online-kernel", "no safe max: a masked first block gives NaN"): (
        dict(lines={"m_safe": "m_new"}), "first block is masked entirely"),
    ("softmax/online-kernel", "a row masked entirely written as 0, not NaN"): (
        dict(lines={"y": "tl.where(l > 0, tl.exp(x - m) / l, 0.0)"}),
        "not a finite number (a row masked entirely)"),
    ("softmax/online-kernel", "store without a mask"): (
        dict(replace=[("tl.store(y_row + cols, y, mask=mask)", "tl.store(y_row + cols, y)", 1)]),
        "Mask the stores"),
    # exercise 5: merging two states
    ("softmax/merge-states", "states added without rescaling"): (
        dict(lines={"l": "l1 + l2", "o": "o1 + o2"}), "different maxima"),
    ("softmax/merge-states", "o not rescaled"): (
        dict(lines={"o": "o1 + o2"}), "l is rescaled but o is not"),
    ("softmax/merge-states", "factors swapped"): (
        dict(lines={"a1": "np.exp(m2 - m)", "a2": "np.exp(m1 - m)"}), "factors are swapped"),
    ("softmax/merge-states", "factors flipped"): (
        dict(lines={"a1": "np.exp(m - m1)", "a2": "np.exp(m - m2)"}), "point the wrong way"),
    ("softmax/merge-states", "first max kept"): (
        dict(lines={"m": "m1"}), "not m1"),
    ("softmax/merge-states", "no safe max: two empty states give NaN"): (
        dict(lines={"m_safe": "m"}), "Two empty states"),
    # exercise 5: the masked softmax kernel, written from scratch
    ("softmax/masked-softmax", "hidden columns loaded as 0 (other=0.0)"): (
        dict(replace=[('other=float("-inf")', "other=0.0", 2)]), "loaded as 0"),
    ("softmax/masked-softmax", "lengths ignored: the whole row visible"): (
        dict(replace=[("mask=cols < length,", "mask=cols < n_cols,", 2)]),
        "not the tensor's width"),
    ("softmax/masked-softmax", "a row with nothing visible written as 0, not NaN"): (
        dict(lines={"y": "tl.where(l > 0, tl.exp(s * scale - m) / l, 0.0)"}),
        "must be NaN throughout"),
    ("softmax/masked-softmax", "no safe max: a hidden first block gives NaN"): (
        dict(lines={"m_safe": "m_new"}), "Shift by a safe max"),
    ("softmax/masked-softmax", "scale ignored"): (
        dict(replace=[("s = s * scale", "s = s", 1),
                      ("tl.exp(s * scale - m)", "tl.exp(s - m)", 1)]),
        "not multiplied by scale"),
    ("softmax/masked-softmax", "sum not rescaled"): (
        dict(replace=[("l = l * tl.exp(m - m_safe) + ", "l = l + ", 1)]), "not rescaled"),
    ("softmax/masked-softmax", "store masked by the length: hidden columns never written"): (
        dict(replace=[("y, mask=cols < n_cols)", "y, mask=cols < length)", 1)]),
        "never written"),
    ("softmax/masked-softmax", "store without a mask"): (
        dict(replace=[("y, mask=cols < n_cols)", "y)", 1)]), "Mask the stores"),
    ("softmax/masked-softmax", "no max subtraction"): (
        dict(replace=[("tl.exp(m - m_safe)", "1.0", 1), ("tl.exp(s - m_safe)", "tl.exp(s)", 1),
                      ("tl.exp(s * scale - m)", "tl.exp(s * scale)", 1)]),
        "subtract the row max"),
}


@pytest.mark.parametrize("exercise_id, mistake", list(WRONG))
def test_known_wrong_answer_is_rejected_with_its_message(root, known_wrong,
                                                         exercise_id, mistake):
    edits, message = WRONG[exercise_id, mistake]
    wrong = answer(root, exercise_id, **edits)
    with known_wrong(exercise_id, mistake, match=re.escape(message)) as caught:
        check(exercise_id, wrong)
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(", text), text  # names the case
    assert "Traceback" not in text and "triton" not in text.split("\n")[0].lower()
    assert exercise_id not in registry.RESULTS


def test_failure_message_says_where_and_how_much(root, known_wrong):
    wrong = answer(root, "softmax/online-kernel",
                   replace=[("l = l * tl.exp(m - m_safe) + ", "l = l + ", 1)])
    with known_wrong("softmax/online-kernel", "sum not rescaled") as caught:
        check("softmax/online-kernel", wrong)
    text = str(caught.value)
    assert re.search(r"max abs error [0-9.e+-]+ .* at row \d+, column \d+", text), text
    assert "BLOCK=16" in text and "fp32" in text


def test_kernel_crash_names_the_case(root, known_wrong):
    wrong = answer(root, "softmax/row-kernel",
                   lines={"row_max": "tl.max(x, axis=1)"})
    with known_wrong("softmax/row-kernel", "max over an axis the row lacks (crash)",
                     match=r"case 1/\d+ .*launching your kernel raised"):
        check("softmax/row-kernel", wrong)


# ---------------------------------------------------------------- blanks and wrong types


@pytest.mark.parametrize("exercise_id, target", [
    ("softmax/stable-softmax", "e"), ("softmax/row-kernel", "mask"),
    ("softmax/row-kernel", "y_ptrs"), ("softmax/online-stats", "scale"),
    ("softmax/online-kernel", "m_new"), ("softmax/online-kernel", "y"),
    ("softmax/merge-states", "a2")])
def test_blank_says_fill_in_the_blank(root, refuses_blank, exercise_id, target):
    message = refuses_blank(exercise_id, answer(root, exercise_id, lines={target: "______"}),
                            target)
    assert re.search(rf"line \d+: {target} = ______", message), message


def test_passing_something_else_than_a_kernel(root, known_wrong):
    kernel = answer(root, "softmax/row-kernel")
    with known_wrong("softmax/row-kernel", "kernel.fn, not the kernel",
                     match="pass the @triton.jit kernel itself"):
        check("softmax/row-kernel", kernel.fn)
    with pytest.raises(BlankNotFilled):
        check("softmax/online-kernel", ______)


def test_modifying_inputs_is_rejected(known_wrong):
    def sneaky(x):
        x -= x.max(axis=-1, keepdims=True)
        return softmax.stable_candidate(x, "global_sum") * 0 + np.exp(x) / np.exp(x).sum(
            axis=-1, keepdims=True)

    with known_wrong("softmax/stable-softmax", "modifies x in place",
                     match="modified x in place"):
        check("softmax/stable-softmax", sneaky)


def test_stats_must_return_a_pair(known_wrong):
    with known_wrong("softmax/online-stats", "returns m alone, not (m, l)",
                     match=r"return the pair \(m, l\)"):
        check("softmax/online-stats", lambda x, block_size: x.max(axis=-1))


def test_untouched_masked_softmax_says_implement(root, known_wrong):
    cell_id, name = EXERCISES["softmax/masked-softmax"]
    source = cells.exercise_source(root / "lessons" / "05-softmax.qmd", cell_id)
    with known_wrong("softmax/masked-softmax", "body not written (the exercise as handed out)",
                     match="still raises NotImplementedError"):
        check("softmax/masked-softmax", getattr(cells.load(source), name))


def test_masked_softmax_is_replayed_by_the_grader(root, record_check, replay_agrees):
    """The grader's replay of a record gives the check's own verdict, right or wrong."""
    exercise_id = "softmax/masked-softmax"
    for folder, edits in (("right", {}),
                          ("wrong", dict(replace=[('other=float("-inf")', "other=0.0", 2)]))):
        raised, record = record_check(exercise_id, answer(root, exercise_id, **edits),
                                      folder=folder)
        assert (raised is None) == (folder == "right"), raised
        replay_agrees(exercise_id, raised, record, "11 cases match")


def test_masked_launcher_refuses_lengths_of_the_wrong_type(root):
    import torch

    kernel = answer(root, "softmax/masked-softmax")
    x = torch.randn(3, 50)
    with pytest.raises(runtime.CourseInputError, match="int32"):
        softmax.masked_softmax(kernel, x, torch.tensor([50, 10, 0]))  # int64


def test_launchers_match_the_lesson(root):
    import torch

    kernel = answer(root, "softmax/online-kernel")
    x = torch.randn(3, 50) * 4
    for block in (16, 64):
        y = softmax.online_softmax(kernel, x, block=block)
        assert torch.allclose(y, torch.softmax(x, dim=-1), atol=1e-6)
    row = answer(root, "softmax/row-kernel")
    assert torch.allclose(softmax.row_softmax(row, x), torch.softmax(x, dim=-1), atol=1e-6)
    masked = answer(root, "softmax/masked-softmax")
    lengths = torch.tensor([50, 7, 0], dtype=torch.int32)
    hidden = torch.arange(50)[None, :] >= lengths[:, None]
    with np.errstate(invalid="ignore"):  # the row with nothing visible: -inf - (-inf)
        y = softmax.masked_softmax(masked, x, lengths, scale=0.5, block=16)
    expected = torch.softmax((0.5 * x).masked_fill(hidden, float("-inf")), dim=-1)
    assert torch.allclose(y[:2], expected[:2], atol=1e-6) and y[2].isnan().all()


# ---------------------------------------------------------------- questions and misconceptions


def test_q3_accepts_a_rounded_number(known_wrong):
    right = registry.get("softmax/q3-merge").answers
    assert right["merged_l"] == pytest.approx(1 + 3 * math.exp(-3), rel=1e-15)
    check("softmax/q3-merge", dict(right, merged_l=1.149))
    with known_wrong("softmax/q3-merge", "merged_l = l1 + l2, not rescaled", match="merged_l"):
        check("softmax/q3-merge", dict(right, merged_l=4.0))  # l1 + l2, not rescaled


def test_lesson_is_out_of_ten_with_pass_line_eight():
    lesson = registry.LESSONS["softmax"]
    assert lesson.total_points == 10 and lesson.pass_line == 8


def test_every_graded_exercise_has_three_known_wrong_answers():
    # static, so it holds under pytest-xdist too; each entry is run by the parametrized test
    for exercise_id in EXERCISES:
        count = len([key for key in WRONG if key[0] == exercise_id])
        assert count >= (5 if exercise_id in FROM_SCRATCH else 3), (exercise_id, count)
    # one of the masked kernel's known-wrong answers is a masked-row bug of each kind
    masked = [mistake for exercise_id, mistake in WRONG if exercise_id in FROM_SCRATCH]
    assert "hidden columns loaded as 0 (other=0.0)" in masked
    assert "a row with nothing visible written as 0, not NaN" in masked
