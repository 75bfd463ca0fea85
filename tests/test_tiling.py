"""Lesson 4's grader: the solutions pass, known-wrong kernels and numpy answers are rejected with
the message that names their mistake, questions and misconceptions are checked.

Wrong answers are built from the lesson's own solution cells by textual substitution. A Triton
kernel needs real source, so a modified kernel is written to a temporary .py file and imported.
"""

import os

# Tests run kernels in the interpreter. TRITON_INTERPRET must be set before triton is first
# imported: Triton's own @jit helpers (tl.zeros, tl.cdiv, tl.sum) are made at import time, and
# made for the compiler they fail inside an interpreted kernel.
os.environ.setdefault("FLASHCOURSE_INTERPRET", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")

import re  # noqa: E402

import pytest  # noqa: E402

import flashcourse  # noqa: E402
from flashcourse import BlankNotFilled, check
from flashcourse.authoring import cells
from flashcourse.checks import registry
from flashcourse.checks import tiling_matmul as tiling  # noqa: E402
from flashcourse.models import matmul  # noqa: E402

flashcourse.setup(verbose=False)  # before any kernel is defined: the interpreter in tests

KERNEL_CELL = "exercise-matmul-kernel"
REJECTED = []  # (exercise id, mistake) pairs a test saw rejected, counted at the end


def student_source(root, cell_id, replacements=None):
    """A solution cell of the lesson with some text replaced (each must match once)."""
    source = cells.solution_source(root / "lessons" / "04-tiling-matmul.qmd", cell_id)
    return cells.edit(source, (replacements or {}).items())


def student_kernel(root, **replacements):
    """The lesson's kernel with some text replaced, imported from a real file."""
    return cells.load(student_source(root, KERNEL_CELL, replacements)).matmul_kernel


def student_function(root, cell_id, name, **replacements):
    return getattr(cells.load(student_source(root, cell_id, replacements)), name)


# ---------------------------------------------------------------- the Triton kernel


def test_solution_kernel_passes(root, capsys):
    check("tiling/matmul-kernel", student_kernel(root))
    out = capsys.readouterr().out
    assert out == ("\u2713 tiling/matmul-kernel: 6 cases match A @ B (ragged shapes, fp32 and "
                   "fp16) (1 bf16 case(s) run only on a GPU; graders also run hidden cases)\n")


def test_hidden_kernel_cases_run_in_grading_mode(root, capsys, monkeypatch):
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("tiling/matmul-kernel", student_kernel(root))
    assert "9 cases match" in capsys.readouterr().out


ACC32 = "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
WRONG_KERNELS = {
    "missing K-tail mask": (
        {"a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < k_left)":
         "a_mask = offs_m[:, None] < M",
         "b_mask = (offs_k[:, None] < k_left) & (offs_n[None, :] < N)":
         "b_mask = offs_n[None, :] < N"},
        "the last K step reads past column K-1"),
    "row stride K instead of stride_am": (
        {"a_ptr + offs_m[:, None] * stride_am": "a_ptr + offs_m[:, None] * K"},
        "right on contiguous tensors"),
    "output row stride N instead of stride_cm": (
        {"c_ptr + offs_m[:, None] * stride_cm": "c_ptr + offs_m[:, None] * N"},
        "right on contiguous tensors"),
    "fp16 accumulator": (
        {ACC32: ACC32.replace("float32", "float16"),
         "acc = tl.dot(a, b, acc)": "acc += tl.dot(a, b).to(tl.float16)"},
        "the accumulator is fp16"),
    "transposed index into B": (
        {"offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn":
         "offs_k[:, None] * stride_bn + offs_n[None, :] * stride_bk",
         "b_ptrs += BLOCK_K * stride_bk": "b_ptrs += BLOCK_K * stride_bn"},
        "computed A @ B.T, a transposed index"),
    "transposed index into C": (
        {"offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn":
         "offs_m[:, None] * stride_cn + offs_n[None, :] * stride_cm"},
        "computed (A @ B).T, a transposed index"),
    "missing store mask": (
        {"mask=c_mask)": ")"}, "wrote"),
    "last group not shortened": (
        {"group_rows = min(num_pid_m - first_pid_m, GROUP_M)": "group_rows = GROUP_M"},
        "no program wrote output tile"),
    "pointers never advance along K": (
        {"a_ptrs += BLOCK_K * stride_ak": "a_ptrs += 0"}, "Check the K loop"),
}


@pytest.mark.parametrize("mistake", list(WRONG_KERNELS))
def test_known_wrong_kernel_is_rejected_with_its_message(root, known_wrong, mistake):
    replacements, message = WRONG_KERNELS[mistake]
    kernel = student_kernel(root, **replacements)
    with known_wrong("tiling/matmul-kernel", mistake, match=re.escape(message)) as caught:
        check("tiling/matmul-kernel", kernel)
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(M=\d+, N=\d+, K=\d+", text), text  # names the case
    if "outside the output" not in text:  # a value mismatch says where, down to the tile
        assert re.search(r"row \d+, column \d+", text), text
        assert re.search(r"output tile \(pid_m=\d+, pid_n=\d+\)", text), text
    assert "tiling/matmul-kernel" not in registry.RESULTS
    REJECTED.append(("tiling/matmul-kernel", mistake))


def test_fp16_accumulator_fails_the_long_k_case(root, known_wrong, monkeypatch):
    """fp16 inputs with fp32 accumulation pass; the same kernel with an fp16 accumulator fails,
    and the long-K fp16 case alone is enough to catch it."""
    replacements, _ = WRONG_KERNELS["fp16 accumulator"]
    kernel = student_kernel(root, **replacements)
    long_k = [c for c in tiling.KERNEL_CASES if c[2] >= 1024]
    assert long_k and long_k[0][3] == "float16" and long_k[0][4] == "float32"
    monkeypatch.setattr(tiling.matmul_kernel, "KERNEL_CASES", long_k)
    with known_wrong("tiling/matmul-kernel", "fp16 accumulator",
                     match="the accumulator is fp16"):
        check("tiling/matmul-kernel", kernel)
    check("tiling/matmul-kernel", student_kernel(root))


def test_stub_kernel_says_implement(root, known_wrong):
    head, _, _ = student_source(root, KERNEL_CELL).partition("    # which output tile")
    kernel = cells.load(head + '    raise NotImplementedError("write this function")'
                               ).matmul_kernel
    with known_wrong("tiling/matmul-kernel", "stub still raises NotImplementedError",
                     match="NotImplementedError"):
        check("tiling/matmul-kernel", kernel)


def test_blank_kernel_says_fill_in_the_blank(root):
    kernel = student_kernel(root, **{"acc = tl.dot(a, b, acc)": "acc = ______"})
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        check("tiling/matmul-kernel", kernel)


def test_a_plain_function_is_refused(known_wrong):
    with known_wrong("tiling/matmul-kernel", "plain function, not a kernel",
                     match="pass the @triton.jit kernel itself"):
        check("tiling/matmul-kernel", lambda *args: None)


def test_bf16_is_refused_in_the_interpreter():
    import torch

    a = torch.zeros(16, 16, dtype=torch.bfloat16)
    with pytest.raises(flashcourse.CourseInputError, match="bfloat16"):
        flashcourse.runtime.check_tensors(a, a, names=("A", "B"), dot=True)
    assert any(case[3] == "bfloat16" for case in tiling.KERNEL_CASES)


def test_visible_cases_are_ragged_and_cover_both_dtypes():
    M, N, K, _, _, bm, bn, bk, *_ = tiling.KERNEL_CASES[1]
    assert M % bm and N % bn and K % bk
    assert {c[3] for c in tiling.KERNEL_CASES} >= {"float32", "float16", "bfloat16"}


# ---------------------------------------------------------------- the batched kernel, from scratch

BATCHED = "tiling/batched-matmul"
BATCHED_CELL = ("exercise-batched-matmul", "batched_matmul_kernel")


def batched_kernel(root, *replace):
    return cells.load_name(root / "lessons" / "04-tiling-matmul.qmd", *BATCHED_CELL, replace)


def test_batched_solution_passes(root, capsys, monkeypatch):
    check(BATCHED, batched_kernel(root))
    assert capsys.readouterr().out == (
        "\u2713 tiling/batched-matmul: 4 cases match A[z] @ B[z] (ragged shapes, fp32 and fp16) "
        "(1 bf16 case(s) run only on a GPU; graders also run hidden cases)\n")
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check(BATCHED, batched_kernel(root))
    assert "7 cases match" in capsys.readouterr().out


ACC_FP32 = "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
WRONG_BATCHED = {
    "fp16 accumulator": (
        [(ACC_FP32, ACC_FP32.replace("float32", "float16")),
         ("acc = tl.dot(a, b, acc)", "acc += tl.dot(a, b).to(tl.float16)")],
        "the accumulator is fp16"),
    "missing K-tail mask": (
        [("(offs_m[:, None] < M) & (offs_k[None, :] < k_left)", "offs_m[:, None] < M"),
         ("(offs_k[:, None] < k_left) & (offs_n[None, :] < N)", "offs_n[None, :] < N")],
        "the last K step reads past column K-1"),
    "batch index ignored": (
        [("z * stride_az + ", ""), ("z * stride_bz + ", ""), ("z * stride_cz + ", "")],
        "only matrix 0 of C was written"),
    "C's batch stride taken from A": ([("z * stride_cz", "z * stride_az")],
                                      "own batch stride stride_cz"),
    "row stride K instead of stride_am": (
        [("offs_m[:, None] * stride_am", "offs_m[:, None] * K")],
        "right on contiguous tensors only"),
    "missing store mask": ([("mask=c_mask)", ")")], "Mask the stores"),
    "pointers never advance along K": ([("a_ptrs += BLOCK_K * stride_ak", "a_ptrs += 0")],
                                       "Check the K loop"),
    "transposed index into B": (
        [("offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn",
          "offs_k[:, None] * stride_bn + offs_n[None, :] * stride_bk"),
         ("b_ptrs += BLOCK_K * stride_bk", "b_ptrs += BLOCK_K * stride_bn")],
        "computed A @ B.T"),
}


@pytest.mark.parametrize("mistake", list(WRONG_BATCHED))
def test_known_wrong_batched_kernel_is_rejected(root, known_wrong, mistake):
    replace, message = WRONG_BATCHED[mistake]
    with known_wrong(BATCHED, mistake, match=re.escape(message)) as caught:
        check(BATCHED, batched_kernel(root, *replace))
    assert re.search(r"case \d+/\d+ \(batch=\d+, M=\d+", str(caught.value)), caught.value
    assert BATCHED not in registry.RESULTS
    REJECTED.append((BATCHED, mistake))


def test_untouched_batched_exercise_says_implement(root, known_wrong):
    source = cells.exercise_source(root / "lessons" / "04-tiling-matmul.qmd", BATCHED_CELL[0])
    stub = getattr(cells.load(source), BATCHED_CELL[1])
    with known_wrong(BATCHED, "body not written (the exercise as handed out)",
                     match="still raises NotImplementedError"):
        check(BATCHED, stub)


def test_batched_matmul_is_replayed_by_the_grader(root, record_check, replay_agrees):
    """The grader's replay of a record gives the check's own verdict, right or wrong (the
    wrong kernel's diagnosis launches it again on other buffers, and the replay follows)."""
    wrong = (("offs_m[:, None] * stride_am", "offs_m[:, None] * K"),)
    for folder, replace in (("right", ()), ("wrong", wrong)):
        raised, record = record_check(BATCHED, batched_kernel(root, *replace), folder=folder)
        assert (raised is None) == (folder == "right"), raised
        replay_agrees(BATCHED, raised, record, "7 cases match")


# ---------------------------------------------------------------- numpy exercises


def test_blocked_matmul_solution_passes(root, capsys):
    check("tiling/blocked-bytes",
          student_function(root, "exercise-blocked-matmul", "blocked_matmul"))
    assert "5 cases: products and byte counts match" in capsys.readouterr().out


WRONG_BLOCKED = {
    "elements, not bytes": (
        {"bytes_read += a.nbytes + b.nbytes": "bytes_read += a.size + b.size"},
        "counted elements, not bytes"),
    "only A counted": (
        {"bytes_read += a.nbytes + b.nbytes": "bytes_read += a.nbytes"},
        "Only the A tiles are counted"),
    "every tile counted full-size": (
        {"bytes_read += a.nbytes + b.nbytes":
         "bytes_read += (BM * BK + BK * BN) * A.itemsize"},
        "edge tiles are smaller"),
    "C counted too": (
        {"return C, bytes_read": "return C, bytes_read + C.size * A.itemsize"},
        "Count only the reads of A and B"),
    "product not accumulated": (
        {"acc += a @ b": "acc = a @ b"}, "the product C: max abs error"),
}


@pytest.mark.parametrize("mistake", list(WRONG_BLOCKED))
def test_wrong_blocked_matmul_is_rejected(root, known_wrong, mistake):
    replacements, message = WRONG_BLOCKED[mistake]
    fn = student_function(root, "exercise-blocked-matmul", "blocked_matmul", **replacements)
    with known_wrong("tiling/blocked-bytes", mistake, match=re.escape(message)) as caught:
        check("tiling/blocked-bytes", fn)
    assert re.search(r"case \d+/\d+ \(M=\d+", str(caught.value))
    REJECTED.append(("tiling/blocked-bytes", mistake))


def test_hidden_blocked_cases_run_in_grading_mode(root, capsys, monkeypatch):
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("tiling/blocked-bytes",
          student_function(root, "exercise-blocked-matmul", "blocked_matmul"))
    assert "7 cases" in capsys.readouterr().out


def test_grouped_order_solution_passes(root):
    check("tiling/grouped-order",
          student_function(root, "exercise-grouped-order", "grouped_order"))


WRONG_ORDER = {
    "row-major": ({"pid_m = first_pid_m + (pid % pids_per_group) % group_rows":
                   "pid_m = pid // num_pid_n",
                   "pid_n = (pid % pids_per_group) // group_rows": "pid_n = pid % num_pid_n"},
                  "This is row-major order"),
    "last group not shortened": ({"group_rows = min(num_pid_m - first_pid_m, GROUP_M)":
                                  "group_rows = GROUP_M"}, "The last group may hold fewer"),
    "pid_n from the wrong quotient": ({"pid_n = (pid % pids_per_group) // group_rows":
                                       "pid_n = pid // group_rows"}, "is never computed"),
}


@pytest.mark.parametrize("mistake", list(WRONG_ORDER))
def test_wrong_grouped_order_is_rejected(root, known_wrong, mistake):
    replacements, message = WRONG_ORDER[mistake]
    fn = student_function(root, "exercise-grouped-order", "grouped_order", **replacements)
    with known_wrong("tiling/grouped-order", mistake, match=re.escape(message)):
        check("tiling/grouped-order", fn)
    REJECTED.append(("tiling/grouped-order", mistake))


# ---------------------------------------------------------------- questions and vetoes


def test_question_answers_match_the_lesson_numbers_and_the_models():
    q1, q2, q3 = (registry.EXERCISES[f"tiling/{name}"].answers for name in
                  ("q1-traffic", "q2-registers-smem", "q3-grouped-order"))
    assert q1["reads_tiled_128x128"] == 2**31 == matmul.tiled_read_bytes(4096, 4096, 4096, 128,
                                                                          128, 2)
    assert q1["reads_naive"] == 2**38 == matmul.naive_read_bytes(4096, 4096, 4096, 2)
    assert q1["intensity_128x256"] == pytest.approx(256 / 3, rel=1e-15)
    assert q1["intensity_128x256"] == (matmul.matmul_flops(4096, 4096, 4096)
                                       / matmul.tiled_read_bytes(4096, 4096, 4096, 128, 256, 2))
    assert q2 == {"acc_lives_in": "registers", "acc_registers_per_thread": 128 * 256 // (8 * 32),
                  "smem_bytes": 3 * (128 * 64 + 64 * 256) * 2}

    def stripes(group_m):  # 32 x 32 tiles, waves of 64 programs
        return sum(matmul.wave_stripes(matmul.launch_order(32, 32, group_m), 64))

    best = min((1, 2, 4, 8, 16, 32), key=stripes)
    assert q3 == {"stripes_row_major": stripes(1), "stripes_group_8": stripes(8),
                  "best_group_m": best}
    assert (stripes(1), stripes(8), best) == (34, 16, 8)


def test_rubric_is_ten_points():
    assert registry.LESSONS["tiling"].total_points == 10
    assert registry.LESSONS["tiling"].pass_line == 8


def test_zz_report_rejected_count():
    print(f"\nlesson 4: {len(REJECTED)} known-wrong answers rejected")
    assert len([r for r in REJECTED if r[0] == "tiling/matmul-kernel"]) >= 4
    assert len([r for r in REJECTED if r[0] == BATCHED]) >= 5  # written from scratch
    assert len([r for r in REJECTED if r[0] == "tiling/blocked-bytes"]) >= 3
