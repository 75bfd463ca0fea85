"""Lesson 7's grader: the backward (numpy and kernels) passes; known-wrong answers, built by
editing the solution's source, are rejected with the message that names their mistake."""

import re

import pytest
import torch

from flashcourse import CourseInputError, check, runtime
from flashcourse.authoring import cells
from flashcourse.checks import registry
from flashcourse.kernels import attention
from flashcourse.models.traffic import score_matrix_bytes

runtime.setup(verbose=False)  # before any kernel is defined: the interpreter on CPU

from flash_solutions import BACKWARD_LESSON, student_module  # noqa: E402

REJECTED = []


@pytest.fixture(scope="module")
def solution():
    return student_module()


def test_solution_backward_passes(solution, capsys):
    check("flash-backward/dkdv", solution.flash_dkdv_kernel)
    check("flash-backward/dq", solution.flash_dq_kernel)
    out = capsys.readouterr().out
    assert "4 cases match torch autograd, dK and dV" in out
    assert "4 cases match torch autograd, dQ" in out


def test_hidden_cases_run_in_grading_mode(solution, capsys, monkeypatch):
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("flash-backward/dq", solution.flash_dq_kernel)
    assert "6 cases match torch autograd" in capsys.readouterr().out


WRONG_BACKWARD = {
    "dK without sm_scale": (
        "dkdv", "flash_dkdv_kernel", [("dk = dk * sm_scale", "dk = dk")],
        "lacks the factor sm_scale"),
    "dK/dV without the causal mask": (
        "dkdv", "flash_dkdv_kernel",
        [("keep = keep & (rows[None, :] >= cols[:, None])", "keep = keep")],
        "not causally masked"),
    "dK/dV without delta": (
        "dkdv", "flash_dkdv_kernel",
        [("ds_t = p_t * (dp_t - delta[None, :])", "ds_t = p_t * dp_t")], "delta is missing"),
    "dK/dV kernel ignores the batch stride": (
        "dkdv", "flash_dkdv_kernel",
        [("k = tl.load(K + b * skb + h * skh", "k = tl.load(K + bh * skh", 2),
         ("v = tl.load(V + b * svb + h * svh", "v = tl.load(V + bh * svh", 2)],
        "batch 0 is right"),
    "no mask on the dV store": (
        "dkdv", "flash_dkdv_kernel",
        [("dv.to(dV.dtype.element_ty), mask=cols_ok)", "dv.to(dV.dtype.element_ty))")],
        "outside the output"),
    "dQ without delta": (
        "dq", "flash_dq_kernel", [("ds = p * (dp - delta[:, None])", "ds = p * dp")],
        "delta is missing"),
    "dQ kernel ignores the batch stride": (
        "dq", "flash_dq_kernel",
        [("q = tl.load(Q + b * sqb + h * sqh + rows", "q = tl.load(Q + bh * sqh + rows", 2)],
        "batch 0 is right"),
    "dQ without sm_scale": (
        "dq", "flash_dq_kernel", [("dq = dq * sm_scale", "dq = dq")],
        "lacks the factor sm_scale"),
    "dQ without the causal mask": (
        "dq", "flash_dq_kernel",
        [("keep = keep & (rows[:, None] >= cols[None, :])", "keep = keep")],
        "not causally masked"),
    "dQ with delta's sign flipped": (
        "dq", "flash_dq_kernel",
        [("ds = p * (dp - delta[:, None])", "ds = p * (dp + delta[:, None])")], "wrong sign"),
    "dK/dV with delta's sign flipped": (
        "dkdv", "flash_dkdv_kernel",
        [("ds_t = p_t * (dp_t - delta[None, :])", "ds_t = p_t * (dp_t + delta[None, :])")],
        "wrong sign"),
}


@pytest.mark.parametrize("mistake", list(WRONG_BACKWARD))
def test_wrong_backward_kernel_is_rejected_with_its_message(known_wrong, mistake):
    exercise, name, edits, message = WRONG_BACKWARD[mistake]
    module = student_module(*edits)
    with known_wrong(f"flash-backward/{exercise}", mistake, match=re.escape(message)) as caught:
        check(f"flash-backward/{exercise}", getattr(module, name))
    assert "section" in str(caught.value)
    REJECTED.append(("backward", mistake))


NUMPY_BACKWARD = cells.solution_source(BACKWARD_LESSON, "exercise-backward-numpy")


DS_LINE = "ds = p * (dp - d_row[:, None])"


WRONG_NUMPY_BACKWARD = {
    "D forgotten": ([(DS_LINE, "ds = p * dp")], "D is missing from dS"),
    "D as the unweighted row sum of dP": (
        [(DS_LINE, "ds = p * (dp - dp.sum(axis=1)[:, None])")], "plain row sum of dP"),
    "D added instead of subtracted": (
        [(DS_LINE, "ds = p * (dp + d_row[:, None])")], "wrong sign"),
    "sm_scale missing on dQ and dK": (
        [("dq = ds @ k * sm_scale", "dq = ds @ k"), ("dk = ds.T @ q * sm_scale", "dk = ds.T @ q")],
        "lack the factor sm_scale"),
    "sm_scale on dV": (
        [("dv = p.T @ d_out", "dv = p.T @ d_out * sm_scale")], "dV carries sm_scale"),
    "dK from dS, not its transpose": (
        [("dk = ds.T @ q", "dk = ds @ q")], "dK is built from dS where"),
    "dV from P, not its transpose": (
        [("dv = p.T @ d_out", "dv = p @ d_out")], "dV is built from P where"),
    "softmax without the row max": (
        [("np.exp(s - s.max(axis=1, keepdims=True))", "np.exp(s)")],
        "unless each row's maximum is subtracted"),
}


def test_numpy_backward_solution_passes(capsys, monkeypatch):
    module = cells.load(NUMPY_BACKWARD, [])
    check("flash-backward/numpy", module.attention_backward)
    assert "5 cases match torch autograd, dQ, dK and dV" in capsys.readouterr().out
    # D as the P-weighted row sum of dP is the same number: it must pass too
    weighted = cells.load(
        NUMPY_BACKWARD, [(DS_LINE, "ds = p * (dp - (p * dp).sum(axis=1)[:, None])")])
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check("flash-backward/numpy", weighted.attention_backward)
    assert "10 cases match torch autograd" in capsys.readouterr().out


@pytest.mark.parametrize("mistake", list(WRONG_NUMPY_BACKWARD))
def test_wrong_numpy_backward_is_rejected_with_its_message(known_wrong, mistake):
    edits, message = WRONG_NUMPY_BACKWARD[mistake]
    module = cells.load(NUMPY_BACKWARD, edits)
    with known_wrong("flash-backward/numpy", mistake, match=re.escape(message)) as caught:
        check("flash-backward/numpy", module.attention_backward)
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(n=\d+", text), text
    assert not [code for code in ("ds.T @", "p.T @", "d_out * o") if code in text], text
    REJECTED.append(("backward-numpy", mistake))


CAUSAL_MASK = ("        s = np.where(np.tri(len(q), dtype=bool), s, -np.inf)"
               "  # key j > query i: -inf")


WRONG_NUMPY_CAUSAL = {
    "causal flag ignored": ([(CAUSAL_MASK, "        pass")], "causal mask is missing"),
    "P zeroed after the softmax": (
        [(CAUSAL_MASK, "        pass"),
         ("    o = p @ v ", "    p = p * np.tri(len(q)) if causal else p\n    o = p @ v ")],
        "zeroed above the diagonal after the softmax"),
    "mask on dS but not on P": (
        [(CAUSAL_MASK, "        pass"),
         (DS_LINE, DS_LINE + "\n    ds = ds * np.tri(len(q)) if causal else ds")],
        "The mask reaches dS but not P"),
    "mask transposed": (
        [(CAUSAL_MASK, "        s = np.where(np.tri(len(q), dtype=bool).T, s, -np.inf)")],
        "hides the wrong triangle"),
    "diagonal hidden too": (
        [(CAUSAL_MASK, "        s = np.where(np.tri(len(q), k=-1, dtype=bool), s, -np.inf)")],
        "the first query row comes out NaN"),
    "future scores set to 0": (
        [(CAUSAL_MASK, "        s = np.where(np.tri(len(q), dtype=bool), s, 0.0)")],
        "set to 0 instead of -inf"),
}


@pytest.mark.parametrize("mistake", list(WRONG_NUMPY_CAUSAL))
def test_wrong_causal_numpy_backward_is_rejected_with_its_message(known_wrong, mistake):
    edits, message = WRONG_NUMPY_CAUSAL[mistake]
    module = cells.load(NUMPY_BACKWARD, edits)
    with known_wrong("flash-backward/numpy", mistake, match=re.escape(message)) as caught:
        check("flash-backward/numpy", module.attention_backward)
    assert re.search(r"case \d+/\d+ \(n=\d+.*, causal\)", str(caught.value)), str(caught.value)
    REJECTED.append(("backward-numpy-causal", mistake))


def test_numpy_backward_needs_the_function_and_three_gradients(known_wrong):
    with known_wrong("flash-backward/numpy", "arrays instead of the function",
                     match="Pass the function itself"):
        check("flash-backward/numpy", (1, 2, 3))
    with known_wrong("flash-backward/numpy", "returns dq only",
                     match=r"return the tuple \(dq, dk, dv\)"):
        check("flash-backward/numpy", lambda q, k, v, d_out, sm_scale, causal: q)


def test_autograd_function_matches_torch(solution):
    attn = attention.make_flash_attention(solution.flash_forward_kernel,
                                          solution.flash_delta_kernel,
                                          solution.flash_dkdv_kernel, solution.flash_dq_kernel)
    for causal in (False, True):
        base = attention.make_inputs(2, 2, 33, 16, seed=5)
        # non-contiguous inputs: transposed views of (B, N, H, D) tensors
        q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
                   for x in base)
        out = attn(q, k, v, causal=causal, sm_scale=0.4)
        d_out = torch.randn_like(out)
        out.backward(d_out)
        q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
        ref = attention.standard_attention(q64, k64, v64, causal, 0.4)
        ref.backward(d_out.double())
        assert (out.double() - ref).abs().max() < 1e-5
        for a, b in ((q, q64), (k, k64), (v, v64)):
            assert (a.grad.double() - b.grad).abs().max() < 1e-4


def test_the_lessons_autograd_function_runs_the_courses_forward(solution):
    # lesson 7's try cell: the course's forward (host.forward) behind the student's backward
    from flashcourse.kernels import host

    attn = attention.make_flash_attention(
        delta_kernel=solution.flash_delta_kernel, dkdv_kernel=solution.flash_dkdv_kernel,
        dq_kernel=solution.flash_dq_kernel, run_forward=host.forward)
    q, k, v = (x.requires_grad_() for x in attention.make_inputs(2, 2, 40, 16, seed=7))
    out = attn(q, k, v, causal=True, sm_scale=0.3)
    d_out = torch.randn_like(out)
    out.backward(d_out)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    attention.standard_attention(q64, k64, v64, True, 0.3).backward(d_out.double())
    for mine, theirs in ((q, q64), (k, k64), (v, v64)):
        assert (mine.grad.double() - theirs.grad).abs().max() < 1e-3
    with pytest.raises(CourseInputError, match="one of the two"):
        attention.make_flash_attention(solution.flash_forward_kernel, run_forward=host.forward)


def test_backward_factor_is_this_lessons(known_wrong):
    q2 = registry.get("flash-backward/q2-kernels").answers
    with known_wrong("flash-backward/q2-kernels", "the conventional 2.5x for this backward",
                     match="backward_flop_factor"):
        check("flash-backward/q2-kernels", dict(q2, backward_flop_factor=2.5))
    with known_wrong("flash-backward/q2-kernels", "atomics for the two-kernel split",
                     match="needs_atomics"):
        check("flash-backward/q2-kernels", dict(q2, needs_atomics=True))


def test_question_numbers_are_the_models():
    q1 = registry.get("flash-backward/q1-saved").answers
    assert q1["p_bytes_n16k_fp16"] == score_matrix_bytes(16384, "fp16")


def test_zz_report_rejected_count():
    print(f"\nlesson 7: {len(REJECTED)} known-wrong answers rejected")
    assert len([r for r in REJECTED if r[0] == "backward"]) >= 5
    assert len([r for r in REJECTED if r[0] == "backward-numpy"]) >= 5
    assert len([r for r in REJECTED if r[0] == "backward-numpy-causal"]) >= 5
