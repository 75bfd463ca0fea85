"""Lesson 6's grader: the lesson's forward kernels pass; known-wrong kernels, built by editing
the solution's source, are rejected with the message that names their mistake."""

import dataclasses
import re

import pytest
import torch

from flashcourse import BlankNotFilled, CourseInputError, ______, check, runtime
from flashcourse.authoring import cells
from flashcourse.checks import registry
from flashcourse.kernels import attention
from flashcourse.models.matmul import cdiv

runtime.setup(verbose=False)  # before any kernel is defined: the interpreter on CPU

from flash_solutions import FORWARD_LESSON, student_module  # noqa: E402

REJECTED = []


@pytest.fixture(scope="module")
def solution():
    return student_module()


def test_solution_forward_passes(solution, capsys):
    check("flash-triton/forward", solution.flash_forward_kernel)
    out = capsys.readouterr().out
    assert out == ("\u2713 flash-triton/forward: 6 cases match standard attention, O and L "
                   "(graders also run hidden cases)\n")


def test_hidden_cases_run_in_grading_mode(solution, capsys, monkeypatch):
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("flash-triton/forward", solution.flash_forward_kernel)
    out = capsys.readouterr().out
    assert "9 cases match standard attention" in out


ALPHA = "alpha = tl.exp2(m_i - m_new)"


ACC = "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)"


WEIGHTS = "p = tl.exp2(s * qk_scale - m_new[:, None])"


WRONG_FORWARD = {
    "missing rescale of the accumulator": (
        [(ALPHA, "alpha = tl.exp2(m_new - m_new)")], "not rescaled"),
    "causal mask off by one": (
        [("(offs_m[:, None] >= cols[None, :])", "(offs_m[:, None] > cols[None, :])")],
        "off by one"),
    "unmasked loop runs over the ragged tail": (
        [("split = (N // BLOCK_N) * BLOCK_N", "split = N")], "Keys past N"),
    "descriptor rows a head dim apart, not a row stride": (
        [("strides=[skn, 1]", "strides=[D, 1]")], "not D: give each tensor descriptor"),
    "running max of the unscaled scores": (
        [("tl.max(s, 1) * qk_scale)", "tl.max(s, 1))")], "max of the *scaled* scores"),
    "padded keys not masked to -inf": (
        [("keep = cols[None, :] < N ", "keep = cols[None, :] >= 0 ")], "Keys past N"),
    "batch offset ignores the batch stride": (
        [(r"re:b \* s([qkv])b \+ h \* s\1h", r"bh * s\1h", 9)], "batch 0 is right"),
    "batch offset of L ignores its strides": (
        [("L + b * slb + h * slh", "L + bh * slh", 3)], "batch and head offsets"),
    "normalising every block instead of at the end": (
        [(ACC, "acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)) / l_i[:, None]"),
         ("acc = acc / l_i[:, None]", "acc = acc")], "defers the normalisation"),
    "logsumexp stored in log2 units": (
        [("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.log2(l_i)")],
        "log2 units"),
    "no mask on the output store": (
        [("acc.to(O.dtype.element_ty), mask=rows_ok)", "acc.to(O.dtype.element_ty))")],
        "outside the output"),
    "running sum rescaled, accumulator not": (
        [(ACC, "acc = acc + tl.dot(p.to(v.dtype), v)")], "but the accumulator acc is not"),
    "accumulator rescaled, running sum not": (
        [("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i + tl.sum(p, 1)")],
        "but the running sum l_i is not"),
    "exp instead of exp2": (
        [(ALPHA, "alpha = tl.exp(m_i - m_new)"), (WEIGHTS, WEIGHTS.replace("exp2", "exp"))],
        "the kernel uses the natural exponential"),
    "exp instead of exp2 for the weights only": (
        [(WEIGHTS, WEIGHTS.replace("exp2", "exp"))],
        "the weights p uses the natural exponential"),
    "no .to(dtype) before tl.dot": (
        [(ACC, "acc = acc * alpha[:, None] + tl.dot(p, v)")],
        "the operands of a tl.dot have different dtypes"),
}


ANSWER_CODE = ["tl.maximum(m_i", "exp2(m_i - m_new)", "l_i * alpha", "acc * alpha",
               "acc / l_i", "tl.where(rows"]


@pytest.mark.parametrize("mistake", list(WRONG_FORWARD))
def test_wrong_forward_kernel_is_rejected_with_its_message(known_wrong, mistake):
    edits, message = WRONG_FORWARD[mistake]
    module = student_module(*edits)
    with known_wrong("flash-triton/forward", mistake, match=re.escape(message)) as caught:
        check("flash-triton/forward", module.flash_forward_kernel)
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(B=\d+, H=\d+, N=\d+", text)
    assert not [code for code in ANSWER_CODE if code in text], text
    assert "signature" not in text, text
    assert "flash-triton/forward" not in registry.RESULTS
    REJECTED.append(("forward", mistake))


def test_blank_in_a_helper_says_fill_in_the_blank():
    module = student_module((ALPHA, "alpha = ______"))
    with pytest.raises(BlankNotFilled, match=r"Fill in the blank in attend_blocks"):
        check("flash-triton/forward", module.flash_forward_kernel)
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        attention.flash_forward(module.flash_forward_kernel,
                                *attention.make_inputs(1, 1, 16, 16))


def test_a_python_function_is_not_a_kernel(known_wrong):
    with known_wrong("flash-triton/forward", "plain function, not a kernel",
                     match="pass the @triton.jit kernel itself"):
        check("flash-triton/forward", lambda *args: None)
    with pytest.raises(BlankNotFilled):
        check("flash-triton/forward", ______)


def test_a_kernel_with_the_wrong_signature_names_the_case(known_wrong):
    module = student_module(("sqb, sqh, sqn, skb,", "sqb, sqh, skb,", 3))
    with known_wrong("flash-triton/forward", "wrong kernel signature",
                     match=r"(?s)case 1/6 .*launching your kernel raised.*signature"):
        check("flash-triton/forward", module.flash_forward_kernel)


def test_k_and_v_are_copied_only_when_a_descriptor_cannot_read_them(solution):
    # TMA needs 16-byte aligned heads and rows: a misaligned view is copied (and the answer is
    # still right); the grader's NaN-padded views are aligned and reach the kernel as they are,
    # so a kernel that ignores their strides still reads the padding
    from flashcourse.checks import buffers

    q, k, v = attention.make_inputs(2, 2, 40, 16, seed=3)
    storage = torch.empty(k.numel() + 1)
    shifted = storage[1:].view(k.shape)  # first element 4 bytes past a 16-byte boundary
    shifted.copy_(k)
    assert attention.descriptor_ready(shifted) is not shifted
    padded = buffers.poisoned_heads(k, "bnhd", 16)
    assert attention.descriptor_ready(padded) is padded
    out, lse = attention.flash_forward(solution.flash_forward_kernel, q, shifted, v, causal=True)
    ref, ref_lse = attention.standard_attention(q.double(), k.double(), v.double(), causal=True,
                                                return_lse=True)
    assert (out.double() - ref).abs().max() < 1e-4
    assert (lse.double() - ref_lse).abs().max() < 1e-4


def test_inputs_the_interpreter_cannot_handle_are_refused(solution):
    q, k, v = attention.make_inputs(1, 1, 16, 16, torch.bfloat16)
    with pytest.raises(CourseInputError, match="bfloat16"):
        attention.flash_forward(solution.flash_forward_kernel, q, k, v)
    q, k, v = attention.make_inputs(1, 1, 16, 24)
    with pytest.raises(CourseInputError, match="head dim 24"):
        attention.flash_forward(solution.flash_forward_kernel, q, k, v)


def test_skipped_tiles(solution, capsys, known_wrong):
    check("flash-triton/skipped-blocks", solution.causal_skipped_tiles)
    assert "8 sizes counted right" in capsys.readouterr().out
    assert attention.causal_tiles(4096, 64, 64) == (2080, 2016)

    def visited(n, block_m, block_n):
        return attention.causal_tiles(n, block_m, block_n)[0]

    with known_wrong("flash-triton/skipped-blocks", "tiles visited, not skipped",
                     match="tiles visited, not skipped"):
        check("flash-triton/skipped-blocks", visited)
    with known_wrong("flash-triton/skipped-blocks", "floor instead of ceil",
                     match="round up, not down"):
        check("flash-triton/skipped-blocks",
              lambda n, bm, bn: (n // bm) * (n // bn) - (n // bm) * (n // bm + 1) // 2)
    with known_wrong("flash-triton/skipped-blocks", "block_m used for the key blocks too",
                     match=r"n=100, block_m=32, block_n=16: you returned 6, which is not the "
                           r"number of tiles skipped here: there are 28 tiles in all"):
        check("flash-triton/skipped-blocks",
              lambda n, bm, bn: attention.causal_tiles(n, bm, bm)[1])
    REJECTED.append(("skipped", "visited"))


SCRATCH = cells.solution_source(FORWARD_LESSON, "exercise-scratch")


SCRATCH_ID = "flash-triton/forward-from-scratch"


SKIP_LOOP = "range(kv_start // BLOCK_N * BLOCK_N, hi, BLOCK_N)"


SAFE_SHIFT = 'm_shift = tl.where(m_new == float("-inf"), 0.0, m_new)'


SAFE_DIVISION = "acc = acc / tl.where(has_key, l_i, 1.0)[:, None]"


def scratch_kernel(*edits):
    """The lesson's from-scratch kernel with textual edits (see student_module)."""
    return cells.load(SCRATCH, edits, prelude=cells.TRITON_PRELUDE).padded_flash_forward


def test_scratch_kernel_passes_with_and_without_skipping_padding(capsys, monkeypatch):
    check(SCRATCH_ID, scratch_kernel())
    assert capsys.readouterr().out == (
        f"\u2713 {SCRATCH_ID}: 5 cases match attention, O and L, rows without keys included "
        "(graders also run hidden cases)\n")
    # walking every key block from key 0 is slower but right: it must pass too
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check(SCRATCH_ID, scratch_kernel((SKIP_LOOP, "range(0, hi, BLOCK_N)")))
    assert "8 cases match attention" in capsys.readouterr().out


WRONG_SCRATCH = {
    "no safe max (padding blocks skipped)": (
        [(SAFE_SHIFT, "m_shift = m_new")], "-inf - (-inf) = NaN unless the shift is 0"),
    "no safe max, loop from key 0": (
        [(SAFE_SHIFT, "m_shift = m_new"), (SKIP_LOOP, "range(0, hi, BLOCK_N)")],
        "each of them starts with a key block where it sees none"),
    "m initialised to 0 instead of -inf": (
        [('m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)',
          "m_i = tl.zeros([BLOCK_M], dtype=tl.float32)")],
        "starts at 0 instead of -inf"),
    "no guard on the final division": (
        [(SAFE_DIVISION, "acc = acc / l_i[:, None]")], "acc / l is 0 / 0"),
    "missing rescale": (
        [("alpha = tl.exp2(m_i - m_shift)", "alpha = tl.exp2(m_shift - m_shift)")],
        "are not rescaled when the running max grows"),
    "causal diagonal excluded": (
        [("keep = keep & (offs_m[:, None] >= cols[None, :])",
          "keep = keep & (offs_m[:, None] > cols[None, :])")], "causal mask is off by one"),
    "L without the running max": (
        [("(m_i + tl.log2(tl.where(has_key, l_i, 1.0)))", "tl.log2(tl.where(has_key, l_i, 1.0))")],
        "L leaves out the running max"),
    "scale without log2(e)": (
        [("qk_scale = sm_scale * 1.4426950408889634", "qk_scale = sm_scale")],
        "log2(e) belongs in the scale"),
    "scale 1 / sqrt(D) instead of sm_scale": (
        [("qk_scale = sm_scale * 1.4426950408889634",
          "qk_scale = 1.4426950408889634 * tl.rsqrt(D * 1.0)")],
        "instead of the sm_scale it is given"),
    "padding keys not masked": (
        [("keep = (cols[None, :] < N) & (cols[None, :] >= kv_start)", "keep = cols[None, :] < N")],
        "Padding keys take part in the softmax"),
    "L of a row without keys stored as 0": (
        [('float("-inf"))\n    tl.store(O', "0.0)\n    tl.store(O")], "must store L = -inf"),
}


@pytest.mark.parametrize("mistake", list(WRONG_SCRATCH))
def test_wrong_scratch_kernel_is_rejected_with_its_message(known_wrong, mistake):
    edits, message = WRONG_SCRATCH[mistake]
    with known_wrong(SCRATCH_ID, mistake, match=re.escape(message)) as caught:
        check(SCRATCH_ID, scratch_kernel(*edits))
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(B=\d+, H=\d+, N=\d+.*kv_start=\[", text), text
    assert not [code for code in ("tl.where(m_new", "l_i * alpha", "acc * alpha") if code in text]
    REJECTED.append(("scratch", mistake))


def test_the_untouched_scratch_kernel_says_not_started_in_one_line():
    """The try cell of the kernel as handed out: a short NotStarted, no interpreter traceback."""
    from flashcourse.checks.errors import NotStarted
    from flashcourse.kernels.padded import padded_forward
    from flashcourse.messages import short_message

    source = cells.exercise_source(FORWARD_LESSON, "exercise-scratch")
    stub = cells.load(source).padded_flash_forward
    device = runtime.current().device
    q, k, v = attention.make_inputs(1, 1, 8, 16, torch.float32, device=device, seed=0)
    kv_start = torch.zeros(1, dtype=torch.int32, device=device)
    with pytest.raises(NotStarted, match="padded_flash_forward still raises NotImplementedError"):
        padded_forward(stub, q, k, v, kv_start)
    with pytest.raises(NotStarted) as raised:  # a second launch of the same stub says it again
        padded_forward(stub, q, k, v, kv_start)
    assert len(short_message(raised.value)) == 1


def test_scratch_kernel_inputs_are_checked(solution):
    from flashcourse.kernels.padded import padded_forward

    q, k, v = attention.make_inputs(2, 1, 16, 16)
    with pytest.raises(CourseInputError, match=r"kv_start must be a \(B,\) = \(2,\) int32"):
        padded_forward(scratch_kernel(), q, k, v, torch.zeros(2, dtype=torch.int64))


def test_scratch_kernel_check_replays_in_the_grader(record_check, replay_agrees):
    raised, record = record_check(SCRATCH_ID, scratch_kernel())
    assert raised is None, raised
    replay_agrees(SCRATCH_ID, raised, record, "8 cases match attention")


def test_memory_model_and_figure():
    import matplotlib

    matplotlib.use("Agg")
    peak = attention.peak_memory_bytes(1, 8, 32768, 64)
    assert peak["standard"] - peak["flash"] == 2 * 8 * 32768**2 * 2 - 8 * 32768 * 4
    fig = attention.memory_figure([1024, 2048], [1e9, 4e9], [1e6, 2e6], "test", False)
    assert "computed, not measured" in fig.axes[0].get_title()


def test_zz_report_rejected_count():
    print(f"\nlesson 6: {len(REJECTED)} known-wrong answers rejected")
    assert len([r for r in REJECTED if r[0] == "forward"]) >= 5
    assert len([r for r in REJECTED if r[0] == "scratch"]) >= 5


def test_fa3_overlap_is_pingpong(known_wrong):
    q2 = registry.get("flash-triton/q2-speed").answers
    with known_wrong("flash-triton/q2-speed", "warp specialisation for the softmax overlap",
                     match="fa3_feature"):
        check("flash-triton/q2-speed", dict(q2, fa3_feature="warp_specialization"))


def test_question_numbers_are_the_models():
    # B = 4, H = 16, N = 4096, BLOCK_M = BLOCK_N = 64
    q1 = registry.get("flash-triton/q1-grid").answers
    visited, skipped = attention.causal_tiles(4096, 64, 64)
    assert q1["programs"] == cdiv(4096, 64) * 4 * 16
    assert q1["skipped_fraction"] == skipped / (visited + skipped)


def test_where_wrong_names_an_offset_mistake_only_when_slice_0_0_is_right():
    import numpy as np

    from flashcourse.checks.flash_cases import where_wrong

    expected = np.zeros((2, 3, 4, 4))
    others = expected.copy()
    others[1:] = 1.0  # batch 0 right, batch 1 wrong
    assert "batch 0 is right" in where_wrong(others, expected, 1e-3, 1e-3)
    heads = expected.copy()
    heads[:, 1:] = 1.0  # slice (0, 0) right, other heads wrong
    assert "slice (0, 0) is right" in where_wrong(heads, expected, 1e-3, 1e-3)
    first = expected.copy()
    first[0, 0] = first[1, 2] = 1.0  # wrong AT slice (0, 0): no offset diagnosis
    assert where_wrong(first, expected, 1e-3, 1e-3) == ""


def test_a_gpu_run_names_the_same_scratch_mistake(known_wrong, monkeypatch):
    """On a GPU the large-logit float32 case runs in float16 (TF32 would move its scores), and
    a kernel whose running max starts at 0 must get the diagnosis it gets in the interpreter."""
    from flashcourse.checks.flash_forward import padded

    def as_on_a_gpu(case):
        if case.dtype == torch.float32 and case.large:
            return dataclasses.replace(case, dtype=torch.float16)
        return case

    monkeypatch.setattr(padded, "case_for_device", as_on_a_gpu)
    edits, message = WRONG_SCRATCH["m initialised to 0 instead of -inf"]
    with known_wrong(SCRATCH_ID, "m initialised to 0 (the GPU's fp16 case)",
                     match=re.escape(message)) as caught:
        check(SCRATCH_ID, scratch_kernel(*edits))
    assert "float16" in str(caught.value).split("\n")[0]
