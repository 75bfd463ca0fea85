"""Lesson 3's grader: the solutions pass; known-wrong answers, built by editing the lesson's own
solution cells, are rejected with the message meant for them."""

import re

import numpy as np
import pytest

import flashcourse as fc
from flashcourse import BlankNotFilled, check
from flashcourse.authoring import cells
from flashcourse.checks import registry
from flashcourse.models import memory as memory_model

REJECTED = []
PRELUDE = cells.PRELUDE + "from flashcourse import run_kernel\n"


@pytest.fixture(scope="module")
def lesson(root):
    fc.setup(verbose=False)  # before any @triton.jit: the interpreter in tests
    return root / "lessons" / "03-coalescing.qmd"


def answer(lesson, cell_id, name, *replace):
    return cells.load_name(lesson, cell_id, name, replace, PRELUDE)


CELLS = {
    "coalescing/sectors": ("exercise-sectors", "sectors_and_lines"),
    "coalescing/warp-efficiency": ("exercise-warp-efficiency", "warp_efficiency"),
    "coalescing/strided-copy": ("exercise-strided-copy", "strided_copy_kernel"),
    "coalescing/transpose-naive": ("exercise-transpose-naive", "transpose_naive_kernel"),
    "coalescing/transpose-tiled": ("exercise-transpose-tiled", "transpose_tiled_kernel"),
    "coalescing/batched-transpose": ("exercise-batched-transpose", "batched_transpose_kernel"),
}
FROM_SCRATCH = ["coalescing/batched-transpose"]  # whole bodies, not blanks: five known-wrong


@pytest.mark.parametrize("exercise_id", list(CELLS))
def test_solution_passes(lesson, exercise_id, capsys):
    check(exercise_id, answer(lesson, *CELLS[exercise_id]))
    assert capsys.readouterr().out.startswith(f"\u2713 {exercise_id}: ")


def test_hidden_cases_run_in_grading_mode(lesson, capsys, monkeypatch):
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("coalescing/transpose-tiled", answer(lesson, *CELLS["coalescing/transpose-tiled"]))
    check("coalescing/sectors", answer(lesson, *CELLS["coalescing/sectors"]))
    check("coalescing/batched-transpose",
          answer(lesson, *CELLS["coalescing/batched-transpose"]))
    out = capsys.readouterr().out
    assert "16 cases transposed exactly" in out
    assert "14 cases transposed exactly" in out and "12 access patterns right" in out


WRONG = {
    "coalescing/sectors": {
        "one per thread": (
            [("return len(sectors), len(lines)", "return len(first), len(first)")],
            "count DISTINCT sectors"),
        "off by one": ([("last = first + access_bytes - 1", "last = first + access_bytes")],
                       "Off by one"),
        "first byte only": ([("last = first + access_bytes - 1", "last = first")],
                            "Only the first byte"),
        "swapped": ([("return len(sectors), len(lines)", "return len(lines), len(sectors)")],
                    "swapped"),
    },
    "coalescing/warp-efficiency": {
        "always two paths": ([("paths = (taken > 0).astype(int) + (taken < 32)",
                               "paths = np.full(len(warps), 2)")], "Not every warp runs both"),
        "fraction taken": ([("efficiency = warps.size / (32 * paths.sum())",
                             "efficiency = warps.mean()")], "fraction of threads taking"),
        "slots ignore paths": ([("efficiency = warps.size / (32 * paths.sum())",
                                 "efficiency = warps.size / (32 * len(warps))")],
                               "issues 2 x 32 slots"),
        "else path forgotten": ([("paths = (taken > 0).astype(int) + (taken < 32)",
                                  "paths = (taken > 0).astype(int)")], "Count the else path"),
    },
    "coalescing/strided-copy": {
        "stride ignored": ([("x_ptr + offsets * stride", "x_ptr + offsets")],
                           "you copied x[i], not x[i * stride]"),
        "stride on the store": (
            [("x_ptr + offsets * stride", "x_ptr + offsets"),
             ("tl.store(y_ptr + offsets,", "tl.store(y_ptr + offsets * stride,")],
            "the stride belongs to the load only"),
        "no store mask": ([("tl.store(y_ptr + offsets, values, mask=mask)",
                            "tl.store(y_ptr + offsets, values)")], "Mask the stores"),
        "mask on the strided index": (
            [("mask = offsets < n_elements", "mask = offsets * stride < n_elements")],
            "never stored"),
    },
    "coalescing/transpose-naive": {
        "no mask": ([("tl.store(y_ptrs, tl.load(x_ptrs, mask=mask), mask=mask)",
                      "tl.store(y_ptrs, tl.load(x_ptrs))")], "Mask the stores"),
        "N as the row stride of x": ([("m * stride_xm + cols", "m * N + cols")],
                                     "row stride N"),
        "M as the row stride of y": ([("cols * stride_yn + m", "cols * M + m")],
                                     "not a missing mask"),
        "transposed index": ([("cols * stride_yn + m", "m * stride_yn + cols")],
                             "not a missing mask"),
    },
    "coalescing/transpose-tiled": {
        "no store mask": ([("tl.store(y_ptrs, tl.trans(tile), mask=in_y)",
                            "tl.store(y_ptrs, tl.trans(tile))")], "Mask the stores"),
        "N as the row stride of x": ([("rows[:, None] * stride_xm", "rows[:, None] * N")],
                                     "row stride N"),
        "M as the row stride of y": ([("cols[:, None] * stride_yn", "cols[:, None] * M")],
                                     "not a missing mask"),
        "tile not transposed": (
            [("y_ptrs = y_ptr + cols[:, None] * stride_yn + rows[None, :]",
              "y_ptrs = y_ptr + rows[:, None] * stride_yn + cols[None, :]"),
             ("in_y = (cols[:, None] < N) & (rows[None, :] < M)", "in_y = in_x"),
             ("tl.trans(tile)", "tile")], "not a missing mask"),
        "tl.trans forgotten": ([("tl.trans(tile)", "tile")], "y[j, i] must be x[i, j]"),
        "mask of x reused for y": ([("mask=in_y)", "mask=in_x)")], "launching your kernel"),
    },
    "coalescing/batched-transpose": {
        "batch index ignored": (
            [("batch * stride_xb + ", ""), ("batch * stride_yb + ", "")], "only matrix 0 of y"),
        "no batch offset on y": ([("batch * stride_yb + ", "")], "only matrix 0 of y"),
        "y's batch stride taken from x": ([("batch * stride_yb", "batch * stride_xb")],
                                          "own batch stride stride_yb"),
        "y's row stride taken from x": (
            [("cols[:, None] * stride_yn", "cols[:, None] * stride_xm")],
            "own row stride stride_yn"),
        "store without a mask": ([("tl.trans(tile), mask=in_y)", "tl.trans(tile))")],
                                 "Mask the stores"),
        "tile not transposed": ([("tl.trans(tile)", "tile")], "not transposed"),
        "x's rows assumed contiguous": ([("rows[:, None] * stride_xm", "rows[:, None] * N")],
                                        "right on contiguous tensors only"),
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
    assert exercise_id not in registry.RESULTS
    REJECTED.append((exercise_id, mistake))


@pytest.mark.parametrize("exercise_id", [e for e in CELLS if e not in FROM_SCRATCH])
def test_untouched_exercise_says_fill_in_the_blank(lesson, exercise_id):
    cell_id, name = CELLS[exercise_id]
    module = cells.load(cells.exercise_source(lesson, cell_id), prelude=PRELUDE)
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        check(exercise_id, getattr(module, name))


@pytest.mark.parametrize("exercise_id", FROM_SCRATCH)
def test_untouched_from_scratch_exercise_says_implement(lesson, known_wrong, exercise_id):
    cell_id, name = CELLS[exercise_id]
    stub = getattr(cells.load(cells.exercise_source(lesson, cell_id), prelude=PRELUDE), name)
    with known_wrong(exercise_id, "body not written (the exercise as handed out)",
                     match="still raises NotImplementedError"):
        check(exercise_id, stub)


def test_batched_transpose_is_replayed_by_the_grader(lesson, record_check, replay_agrees):
    """The grader's replay of a record gives the check's own verdict, right or wrong (the
    wrong kernel's diagnosis launches it again, and the replay follows)."""
    exercise_id = "coalescing/batched-transpose"
    for folder, replace in (("right", ()),
                            ("wrong", (("rows[:, None] * stride_xm", "rows[:, None] * N"),))):
        raised, record = record_check(
            exercise_id, answer(lesson, *CELLS[exercise_id], *replace), folder=folder)
        assert (raised is None) == (folder == "right"), raised
        replay_agrees(exercise_id, raised, record, "16 cases transposed exactly")


def test_wrappers_turn_a_blank_into_a_short_error(lesson):
    import torch

    for cell_id, call in (("exercise-strided-copy", lambda m: m.strided_copy(torch.zeros(9), 3)),
                          ("exercise-transpose-tiled", lambda m: m.transpose(torch.zeros(3, 5)))):
        module = cells.load(cells.exercise_source(lesson, cell_id),
                                   prelude=PRELUDE)
        with pytest.raises(BlankNotFilled, match="Fill in the blank"):
            call(module)


def test_reference_model_numbers():
    wa = memory_model.warp_addresses
    assert memory_model.sectors_and_lines(wa("contiguous")) == (4, 1)
    assert memory_model.sectors_and_lines(wa("offset")) == (5, 2)
    assert memory_model.sectors_and_lines(wa("strided", stride=2)) == (8, 2)
    assert memory_model.sectors_and_lines(wa("column")) == (32, 32)
    t = np.arange(128)
    assert memory_model.warp_efficiency(t < 40) == pytest.approx(0.8)
    assert memory_model.warp_efficiency(t % 4 == 0) == pytest.approx(0.5)


def test_zz_at_least_three_wrong_answers_per_exercise():
    for exercise_id in CELLS:  # questions: tests/test_self_checks.py
        least = 5 if exercise_id in FROM_SCRATCH else 3
        assert len([r for r in REJECTED if r[0] == exercise_id]) >= least, exercise_id
