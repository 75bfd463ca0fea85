"""Lesson 11's grader: the capstone's solution passes, forward and backward; known-wrong
versions of it (tests/wrong_kernels_11.py) are each rejected with the message naming their
mistake; the references, the block map and the input checks hold."""

import math
import re

import numpy as np
import pytest
import torch
from wrong_kernels_11 import BACKWARD, WRONG, solution_module

from flashcourse import CourseInputError, WrongAnswer, check, runtime
from flashcourse.checks import registry
from flashcourse.checks.capstone import grading
from flashcourse.checks.capstone import reference as ref
from flashcourse.kernels import capstone as cap

runtime.setup(verbose=False)

# Code of the solution that no message may print (feedback names mistakes, not lines).
CODE = ("tl.where(", "1.0 - t", "alpha[:, None]", "m_i - m_shift", "* sm_scale", "slope2")


@pytest.fixture(scope="module")
def solution():
    return solution_module()


def test_solution_passes_forward_and_backward(solution, capsys):
    check(grading.FORWARD_ID, solution.capstone_attention)
    check(grading.BACKWARD_ID, solution.capstone_attention)
    out = capsys.readouterr().out
    assert "\u2713 capstone/forward: 6 cases match the specification's attention (graders also" \
        in out
    assert "\u2713 capstone/backward: 3 cases match the specification's gradients" in out
    check("capstone/q1-window-tiles", {"full_tiles": 7, "partial_tiles": 2,
                                       "mflop_per_query_block": 9 * 4 * 128**3 / 1e6})
    check("capstone/q2-softcap-gradient", {"capped_score": 50 * math.tanh(0.5),
                                            "gradient_factor": 1 - math.tanh(0.5) ** 2})
    check("capstone/q3-intensity", {"gflop_per_head": 4 * 16384 * 1024 * 128 / 1e9,
                                    "intensity": 512})
    check("capstone/misconceptions", {"alibi_on_key_position_differs": False,
                                      "window_full_means_full": False,
                                      "softcap_changes_argmax": False,
                                      "backward_needs_tanh": True})
    assert registry.scorecard("capstone") == 10


def test_hidden_backward_cases_run_in_grading_mode(solution, graded_case_count):
    # the forward's hidden cases run in test_check_replays_in_the_grader
    assert graded_case_count(grading.BACKWARD_ID, solution.capstone_attention) == 5


@pytest.mark.parametrize("mistake", list(WRONG))
def test_wrong_kernel_is_rejected_with_its_message(known_wrong, mistake):
    edits, message = WRONG[mistake]
    exercise = grading.BACKWARD_ID if mistake in BACKWARD else grading.FORWARD_ID
    with known_wrong(exercise, mistake, match=message) as caught:
        check(exercise, solution_module(edits).capstone_attention)
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(B=\d+, H=\d+, N=\d+", text), text
    assert re.search(r"section \d", text), text
    assert not [code for code in CODE if code in text], text


def test_answers_that_are_not_a_function_or_lose_autograd(known_wrong, solution):
    with known_wrong(grading.FORWARD_ID, "a tensor instead of the function",
                     match="takes your function"):
        check(grading.FORWARD_ID, torch.zeros(3))

    def detached(q, k, v, spec):
        return solution.capstone_attention(q, k, v, spec).detach()

    with known_wrong(grading.BACKWARD_ID, "output cut off from autograd",
                     match="does not take part in autograd"):
        check(grading.BACKWARD_ID, detached)


def test_inputs_are_validated(solution):
    q, k, v = cap.make_inputs(2, 2, 32, 16)
    attend = solution.capstone_attention
    bad = [
        ((q, k[:, :1], v, cap.AttentionSpec()), r"one shape \(B, H, N, D\)"),
        ((q.half(), k, v, cap.AttentionSpec()), "share one dtype"),
        ((q, k, v, cap.AttentionSpec(window=0)), r"window=0 must be None or an int >= 1"),
        ((q, k, v, cap.AttentionSpec(docs=torch.zeros(2, 32, dtype=torch.int64))),
         r"docs must be a \(B, N\) = \(2, 32\) int32"),
        ((q, k, v, cap.AttentionSpec(alibi=torch.ones(3))), r"alibi must be an \(H,\) = \(2,\)"),
        ((q, k, v, cap.AttentionSpec(softcap=-1.0)), "softcap=-1.0 must be 0"),
        ((q.bfloat16(), k.bfloat16(), v.bfloat16(), cap.AttentionSpec()), "bfloat16"),
        ((q[..., :12], k[..., :12], v[..., :12], cap.AttentionSpec()), "power of two"),
    ]
    for args, message in bad:
        with pytest.raises(CourseInputError, match=message):
            attend(*args)


def test_reference_backward_is_autograd_of_the_reference():
    case = grading.Case(2, 2, 40, 16, window=9, docs=((13, 20), (30,)), softcap=5.0,
                        alibi=True, logit_scale=3.0)
    spec = grading.reference_spec(grading.build_inputs(case).spec)
    q, k, v = (x.double().requires_grad_() for x in cap.make_inputs(2, 2, 40, 16, seed=3))
    do = torch.randn(2, 2, 40, 16, dtype=torch.float64)
    o, _ = ref.forward(q, k, v, spec)
    o_autograd = cap.spec_attention(q, k, v, spec)
    assert torch.allclose(o, o_autograd.detach(), atol=1e-12)
    expected = torch.autograd.grad(o_autograd, (q, k, v), do)
    for mine, want in zip(ref.backward(q, k, v, do, spec), expected, strict=True):
        assert torch.allclose(mine, want, atol=1e-10)


def test_block_map_matches_the_reference_classifier(solution):
    case = grading.Case(2, 1, 150, 16, window=21, docs=((40, 45), (100,)))
    spec = grading.reference_spec(grading.build_inputs(case).spec)
    for block_q, block_k in ((32, 16), (16, 32), (64, 64)):
        kinds = ref.classify(spec, 2, 150, block_q, block_k)
        for by_key, table in ((False, kinds), (True, kinds.transpose(0, 2, 1))):
            full_counts, full_index, part_counts, part_index = solution.build_block_map(
                spec, 2, 150, block_q, block_k, "cpu", by_key)
            for kind, counts, index in ((ref.FULL, full_counts, full_index),
                                        (ref.PARTIAL, part_counts, part_index)):
                for b in range(2):
                    for row in range(table.shape[1]):
                        listed = index[b, row, :counts[b, row]].tolist()
                        assert listed == np.flatnonzero(table[b, row] == kind).tolist()


def test_nan_padding_sits_in_whole_empty_blocks():
    case = grading.FORWARD_CASES[2]  # batch 0: padding from 87, batch 1: padding up to 128
    assert grading.nan_ranges(case) == [(0, 128, 200), (1, 0, 128)]
    inputs = grading.build_inputs(case)
    nan = inputs.k.isnan().all(-1)[:, 0]  # (B, N)
    assert nan[0, 128:].all() and not nan[0, :128].any()
    assert nan[1, :128].all() and not nan[1, 128:].any()
    assert bool((inputs.spec.docs[nan] == -1).all())


def test_check_replays_in_the_grader(solution, record_check, replay_agrees):
    raised, record = record_check(grading.FORWARD_ID, solution.capstone_attention)
    assert raised is None, raised
    replay_agrees(grading.FORWARD_ID, raised, record, "10 cases match")
    edits, _ = WRONG["window off by one"]
    raised, record = record_check(grading.FORWARD_ID,
                                  solution_module(edits).capstone_attention, folder="wrong")
    assert isinstance(raised, WrongAnswer)
    replay_agrees(grading.FORWARD_ID, raised, record, "")
