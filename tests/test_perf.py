"""Lesson 8: the reference FlashAttention kernel (every ladder step, forward and backward), the
ladder exercise's grader against known-wrong answers, the benchmark CLI on a CPU, and the CUDA
C++ source compiling with nvcc."""

import importlib.util
import re
import shutil
import sys
import types

import pytest
import torch

import flashcourse as fc
from flashcourse import BlankNotFilled, check
from flashcourse.authoring import cells
from flashcourse.blanks import ______
from flashcourse.checks import registry
from flashcourse.models.traffic import attention_flops

fc.setup(verbose=False)

from flashcourse.kernels import cuda_fwd, host, ladder, verify  # noqa: E402

LADDER = "performance/ladder-kernel"


def test_every_ladder_step_matches_attention():
    for step in ladder.ladder_steps():
        assert ladder.step_supported(step)[0], step
        # B=2, H>1, ragged N, causal and not, transposed, large logits with a custom sm_scale
        lines = verify.check_step(step)
        assert len(lines) == 5 and "large logits, sm_scale=0.5" in lines[-1]


def test_forward_check_rejects_a_wrong_forward():
    # check_forward (behind check_step and the harness's ladder check) must fail, not pass
    def no_mask(q, k, v, causal):
        return host.forward(q, k, v, False, step=5)

    with pytest.raises(AssertionError, match=r"causal .*max error"):
        verify.check_forward(no_mask, causal_values=(True,))


def test_the_large_logit_case_rejects_kernels_that_ignore_sm_scale():
    def default_scale(q, k, v, causal, sm_scale=None):  # drops a custom sm_scale
        return host.forward(q, k, v, causal, step=5)

    shapes = [(1, 2, 40, 16)]
    assert len(verify.check_forward(default_scale, shapes=shapes, causal_values=(True,))) == 1
    with pytest.raises(AssertionError, match=r"large logits, sm_scale=0.5: max error"):
        verify.check_forward(default_scale, shapes=shapes, causal_values=(True,),
                             custom_scale=True)

    def default_scale_attention(q, k, v, causal, sm_scale=None):
        return host.flash_attention(q, k, v, causal)

    with pytest.raises(AssertionError, match=r"large logits, sm_scale=0.5: d"):
        verify.check_backward(dtype=torch.float32, shapes=shapes, causal_values=(True,),
                              attention=default_scale_attention, custom_scale=True)


def test_gradient_check_rejects_a_wrong_gradient():
    ref = [torch.ones(2, 3) * scale for scale in (1.0, 4.0, 1.0)]
    assert verify.gradient_problems([r.clone() for r in ref], ref, 1e-2) == []
    wrong = [ref[0], ref[1] * 1.1, ref[2]]  # dk off by 0.4: tolerance 0.04 + 0.04 * 4
    assert verify.gradient_problems(wrong, ref, 1e-2) == ["dk max error 0.4 > 0.04"]


@pytest.mark.parametrize("causal", [False, True])
def test_reference_forward_backward_match_autograd(causal):
    gen = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(2, 2, 37, 16, generator=gen) for _ in range(4))
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    out = host.flash_attention(q, k, v, causal)
    grads = torch.autograd.grad(out, (q, k, v), do)
    q2, k2, v2 = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    scores = (q2 @ k2.transpose(-1, -2)) / 4.0
    if causal:
        scores = scores.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(scores, -1) @ v2
    ref_grads = torch.autograd.grad(ref, (q2, k2, v2), do)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


def test_backward_on_transposed_fp16_views():
    lines = verify.check_backward(dtype=torch.float16, shapes=[(2, 2, 50, 32)],
                                  custom_scale=True)
    assert len(lines) == 3 and "large logits" in lines[-1]


def test_backward_check_rejects_wrong_gradients_of_any_attention():
    from flashcourse.kernels import attention

    def wrong_scale(q, k, v, causal):  # differentiable, but softmax(0.5 q k^T) v
        return attention.standard_attention(q, k, v, causal, 0.5)

    with pytest.raises(AssertionError, match="max error"):
        verify.check_backward(dtype=torch.float32, shapes=[(1, 2, 20, 16)],
                              attention=wrong_scale)


def test_tma_steps_fall_back_to_pointers_for_unaligned_strides():
    # a row stride of 17 floats is no multiple of 16 bytes: no descriptor can describe it
    base = torch.randn(3, 2, 2, 45, 17, generator=torch.Generator().manual_seed(3))
    q, k, v = (base[i, ..., :16] for i in range(3))
    assert not host.tma_ok(q, k, v) and host.tma_ok(*(x.contiguous() for x in (q, k, v)))
    for causal, step in ((False, 5), (True, 5), (False, 7), (True, 7)):
        out, lse = host.forward(q, k, v, causal, step=step)
        ref, ref_lse = verify.reference_fp32(q, k, v, causal)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(lse, ref_lse, atol=1e-4, rtol=1e-4)


def test_tma_store_leaves_rows_past_n_alone():
    # the output is a view into a larger buffer: the descriptor must not write past row N
    q, k, v = verify.make_qkv(2, 2, 37, 16, torch.float32, "cpu", seed=4)
    buffer = torch.full((2, 2, 64, 16), 7.0)
    for step in (4, 7):
        out, _ = host.forward(q, k, v, True, step=step, out=buffer[:, :, :37])
        ref, _ = verify.reference_fp32(q, k, v, True)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        assert bool((buffer[:, :, 37:] == 7.0).all())


def test_bf16_is_refused_in_the_interpreter():
    q = torch.randn(1, 1, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(fc.CourseInputError, match="bfloat16"):
        host.flash_attention(q, q, q)


# ---------------------------------------------------------------- the ladder exercise


PRELUDE = cells.PRELUDE + "from flashcourse.kernels.forward import attn_fwd_inner\n"


def ladder_kernel(root, *replace):
    """The lesson's ladder kernel, each (old, new) replacing text that occurs exactly once."""
    return cells.load_name(root / "lessons" / "08-performance.qmd", "exercise-ladder",
                                  "ladder_kernel", replace, PRELUDE)


def test_solution_passes(root, capsys, monkeypatch):
    kernel = ladder_kernel(root)
    check(LADDER, kernel)
    out = capsys.readouterr().out
    assert out.startswith(f"\u2713 {LADDER}: 5 cases match")
    assert out.endswith("(graders also run hidden cases)\n")
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")  # the grader adds the hidden cases
    check(LADDER, kernel)
    out = capsys.readouterr().out
    assert out.startswith(f"\u2713 {LADDER}: 8 cases match") and "hidden" not in out


def test_blank_is_refused(root):
    kernel = ladder_kernel(root, ("qk_scale = sm_scale * 1.4426950408889634", "qk_scale = ______"))
    with pytest.raises(BlankNotFilled):
        check(LADDER, kernel)
    with pytest.raises(BlankNotFilled):
        check(LADDER, ______)


WRONG = [
    ("scale without log2(e)", "qk_scale = sm_scale * 1.4426950408889634",
     "qk_scale = sm_scale", r"multiplied by ln 2.*log2\(e\)"),
    ("log2(e) divided out", "qk_scale = sm_scale * 1.4426950408889634",
     "qk_scale = sm_scale / 1.4426950408889634", r"\(ln 2\)\^2"),
    ("masked loop starts at 0", "masked_lo = start_m * BLOCK_M", "masked_lo = 0",
     "counted twice"),
    ("unmasked loop covers the ragged tail", "free_hi = (N // BLOCK_N) * BLOCK_N",
     "free_hi = N", "NaN.*read past the last key"),
    ("unmasked loop includes the diagonal block", "free_hi = start_m * BLOCK_M",
     "free_hi = (start_m + 1) * BLOCK_M", "causal|NaN"),
]


@pytest.mark.parametrize("mistake, old, new, message", WRONG, ids=[w[0] for w in WRONG])
def test_known_wrong_ladder_answers_are_rejected(root, known_wrong, mistake, old, new, message):
    kernel = ladder_kernel(root, (old, new))
    with known_wrong(LADDER, mistake, match=message):
        check(LADDER, kernel)


def test_questions_and_vetoes(known_wrong):
    q2 = registry.get("performance/q2-ladder").answers
    truths = registry.get("performance/misconceptions").answers
    check("performance/q2-ladder", dict(q2))
    with known_wrong("performance/q2-ladder", "exp2 for accuracy",
                     match=r"exp2_reason = 'more_accurate' is not right\. Re-read section 3"):
        check("performance/q2-ladder", {**q2, "exp2_reason": "more_accurate"})
    with known_wrong("performance/misconceptions", "wrong interpreter_timings_predict_gpu",
                     exc=fc.VetoMisconception, match="interpreter"):
        check("performance/misconceptions", {**truths, "interpreter_timings_predict_gpu": True})


def test_q1_tflops_is_the_flop_models():
    # B=2, H=16, N=16384, d=128, causal, measured at 10 ms
    flops = attention_flops(16384, 128, 2, 16, causal=True)
    tflops = registry.get("performance/q1-measuring").answers["tflops_causal"]
    assert tflops == flops / 10e-3 / 1e12


# ---------------------------------------------------------------- tuning, deployment, profile


TUNING = "performance/tuning"
TUNING_SOLUTION = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}


def test_tuning_config_is_validated_and_timing_left_to_a_gpu(root, capsys):
    answer = cells.solution_source(root / "lessons" / "08-performance.qmd", "answer-tuning")
    namespace = {}
    exec(answer, namespace)  # noqa: S102  (the lesson's own answer cell)
    assert namespace["tuning_config"] == TUNING_SOLUTION
    check(TUNING, TUNING_SOLUTION)
    assert capsys.readouterr().out == (
        f"\u2713 {TUNING}: BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3 is a valid config "
        "for B=4, H=16, N=4096, d=64, fp16, not causal that the course's paper model predicts "
        "faster than the BASELINE (0.515 ms against 1.014 ms); speed measured when graded on a "
        "GPU (interpreter timings say nothing about one, and the 1.10x target is checked "
        "there)\n")
    # the scorecard's line says it too: on a CPU the point stands for a modelled speed-up only
    try:
        fc.scorecard("performance")
    except registry.WrongAnswer:  # below the pass line or a veto: other items are not run here
        pass
    assert ("\u2713 1/1 tiles, warps and stages that beat the baseline config (speed measured "
            "when graded on a GPU)\n") in capsys.readouterr().out


def test_the_tuning_title_names_the_machine():
    from flashcourse.checks.performance import tools

    assert tools.tuning_title(False) == "tiles, warps and stages that beat the baseline config"
    assert tools.tuning_title(True).endswith("(speed measured when graded on a GPU)")


def _tuning_dict(config: tuple) -> dict:
    from flashcourse.checks.performance import tools

    return dict(zip(tools.TUNING_KEYS, config, strict=True))


def test_the_baseline_itself_earns_no_tuning_point_on_a_cpu(known_wrong):
    from flashcourse.kernels import tiles

    with known_wrong(TUNING, "the BASELINE config answered",
                     match="is the BASELINE config itself .*not a tuning") as caught:
        check(TUNING, _tuning_dict(tiles.BASELINE))
    assert "section 4" in str(caught.value)
    assert "BLOCK_M=128" not in str(caught.value)  # teaches, does not answer


def test_a_config_the_model_predicts_faster_earns_the_point_on_a_cpu(capsys):
    from flashcourse.checks.performance import tools
    from flashcourse.kernels import tiles

    faster = (256, 64, 8, 2)  # larger query tiles: K and V read fewer times
    assert tools.modelled_ms(faster) < tools.modelled_ms(tiles.BASELINE)
    check(TUNING, _tuning_dict(faster))
    out = capsys.readouterr().out
    assert out.startswith(f"\u2713 {TUNING}: BLOCK_M=256") and "predicts faster" in out
    assert "speed measured when graded on a GPU" in out


@pytest.mark.parametrize("config, mistake", [
    ((32, 32, 4, 2), "smaller query tiles than the BASELINE"),
    ((64, 64, 8, 3), "the BASELINE's query tiles, other knobs"),
])
def test_a_config_the_model_predicts_no_faster_is_rejected_on_a_cpu(known_wrong, config,
                                                                    mistake):
    from flashcourse.checks.performance import tools
    from flashcourse.kernels import tiles

    assert tools.modelled_ms(config) >= tools.modelled_ms(tiles.BASELINE)
    with known_wrong(TUNING, mistake, match="paper model predicts it no faster") as caught:
        check(TUNING, _tuning_dict(config))
    assert "a GPU measures the speed itself" in str(caught.value)


WRONG_TUNING = {
    "BLOCK_M not a power of two": (dict(BLOCK_M=96), "BLOCK_M=96 is not a power of two"),
    "BLOCK_M not a multiple of BLOCK_N": (
        dict(BLOCK_M=32, BLOCK_N=64), "BLOCK_M=32 is not a multiple of BLOCK_N=64"),
    "tile too small for tl.dot": (dict(BLOCK_N=8), "BLOCK_N=8 is outside 16..256"),
    "three warps": (dict(num_warps=3), "num_warps=3 must be 1, 2, 4, 8 or 16"),
    "no stages": (dict(num_stages=0), "num_stages=0 must be a whole number from 1 to 6"),
    "shared memory overflow": (
        dict(BLOCK_M=256, BLOCK_N=256, num_warps=16, num_stages=4),
        "more than the 227 KiB a thread block gets"),
    "registers overflow": (
        dict(BLOCK_M=256, BLOCK_N=128, num_warps=4, num_stages=1),
        "fp32 registers per thread with 4 warps"),
    "a boolean for a tile": (dict(BLOCK_M=True), "BLOCK_M=True is not a power of two"),
    "missing key": ({"BLOCK_M": 64, "BLOCK_N": 64, "warps": 4},
                    "missing num_warps, num_stages; unknown warps"),
}


def test_blanks_in_the_config_and_the_profile_stub_say_what_to_do(root):
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        check(TUNING, dict(TUNING_SOLUTION, BLOCK_M=______))
    with pytest.raises(BlankNotFilled, match="Fill in the blank"):
        check("performance/profile-reading", ______)
    stub = cells.load(cells.exercise_source(root / "lessons" / "08-performance.qmd",
                                            "exercise-profile")).read_profile
    with pytest.raises(registry.WrongAnswer, match="still raises NotImplementedError"):
        check("performance/profile-reading", stub)


@pytest.mark.parametrize("mistake", list(WRONG_TUNING))
def test_invalid_tuning_configs_are_rejected(known_wrong, mistake):
    change, message = WRONG_TUNING[mistake]
    config = change if "warps" in change else dict(TUNING_SOLUTION, **change)
    with known_wrong(TUNING, mistake, match=re.escape(message)):
        check(TUNING, config)


def test_tuned_table_configs_are_valid_for_the_tuning_shape():
    from flashcourse.checks.performance import tools
    from flashcourse.kernels import tiles

    for config in (tiles.BASELINE, *tiles.TUNED.values()):
        assert tools.tuning_problems(dict(zip(tools.TUNING_KEYS, config, strict=True))) == []


DEPLOY = "performance/deployment"
DEPLOY_PRELUDE = cells.PRELUDE + "import math\n\n\ndef machine_backends():\n    return {}\n"
PICK_COURSE = ('if "course" in backends and q.dtype in COURSE_DTYPES and q.shape[-1] in '
               'COURSE_HEAD_DIMS:')
MATH_DTYPE = "compute = torch.promote_types(q.dtype, torch.float32)  # at least float32"


def deploy_function(root, *replace):
    return cells.load_name(root / "lessons" / "08-performance.qmd", "exercise-deploy",
                           "deployed_attention", replace, DEPLOY_PRELUDE)


def test_deployment_solution_passes(root, capsys, monkeypatch):
    check(DEPLOY, deploy_function(root))
    assert "8 cases pick the right backend" in capsys.readouterr().out
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check(DEPLOY, deploy_function(root))
    assert "12 cases pick the right backend" in capsys.readouterr().out


WRONG_DEPLOY = {
    "course kernel for every dtype": (
        [(PICK_COURSE, 'if "course" in backends and q.shape[-1] in COURSE_HEAD_DIMS:')],
        "the course kernel takes fp16 and bf16 only, not float32"),
    "head dim not checked": (
        [(PICK_COURSE, 'if "course" in backends and q.dtype in COURSE_DTYPES:')],
        "compiles head dims 16, 32, 64 and 128 natively, not 48"),
    "sdpa called without asking": (
        [('if "sdpa" in backends:', "if True:")], "KeyError"),
    "sdpa preferred to the course kernel": (
        [(PICK_COURSE, 'if "course" in backends and "sdpa" not in backends and '
                       'q.dtype in COURSE_DTYPES and q.shape[-1] in COURSE_HEAD_DIMS:')],
        "your function called sdpa, but the course kernel is offered"),
    "math path in the inputs' precision": (
        [(MATH_DTYPE, "compute = q.dtype")], "pass float16's largest value"),
    "math path returns float32": (
        [("@ v.to(compute)).to(q.dtype)", "@ v.to(compute))")],
        "the result is float32 for float16 inputs"),
    "math path without the causal mask": (
        [("    if causal:\n        n = q.shape[-2]", "    if False:\n        n = q.shape[-2]")],
        "leaves out the causal mask"),
    "float64 squeezed into float32": (
        [(MATH_DTYPE, "compute = torch.float32")], "float64 stays float64"),
    "causal flag not passed on": (
        [('return backends["course"](q, k, v, causal)',
          'return backends["course"](q, k, v, False)')],
        "computed with the causal flag you were given"),
}


@pytest.mark.parametrize("mistake", list(WRONG_DEPLOY))
def test_wrong_deployment_is_rejected_with_its_message(root, known_wrong, mistake):
    replace, message = WRONG_DEPLOY[mistake]
    with known_wrong(DEPLOY, mistake, match=re.escape(message)) as caught:
        check(DEPLOY, deploy_function(root, *replace))
    assert re.search(r"case \d+/\d+ \((float|bfloat)", str(caught.value)), str(caught.value)


PROFILE = "performance/profile-reading"
TOP = 'top = max(rows, key=lambda row: row["self_us"])'
ALL_SELF = 'all_self_us = sum(row["self_us"] for row in rows)'
SHARE = '"top_share": top["self_us"] / all_self_us'


def profile_function(root, *replace):
    return cells.load_name(root / "lessons" / "08-performance.qmd", "exercise-profile",
                           "read_profile", replace)


def test_profile_function_passes_on_the_checks_tables(root, capsys, monkeypatch):
    check(PROFILE, profile_function(root))
    assert capsys.readouterr().out == (
        f"\u2713 {PROFILE}: 4 tables read right: the operator with the most self time, its "
        "share and its calls (graders also run hidden cases)\n")
    monkeypatch.setenv(registry.GRADING_MODE_ENV, "1")
    check(PROFILE, profile_function(root))
    assert "7 tables read right" in capsys.readouterr().out


def test_profile_tables_hold_what_the_cases_name():
    from flashcourse.checks.performance import tools

    for what, seed, operators, tie in tools.PROFILE_CASES + tools.PROFILE_HIDDEN:
        table = tools.profile_table(seed, operators, tie)
        assert table == tools.profile_table(seed, operators, tie)  # seeded: the replay's too
        assert all(0 <= row["self_us"] <= row["total_us"] and
                   row["calls"] % tools.PROFILE_ITERATIONS == 0 for row in table), what
        assert len({row["name"] for row in table}) == len(table), what
        facts = tools.profile_facts(table)
        assert len(facts["top_ops"]) == (2 if tie else 1), what
        by_total = max(table, key=lambda row: row["total_us"])["name"]
        if "wrapper" in what:
            assert by_total not in facts["top_ops"], what
    assert len(tools.profile_table(63, 60, False)) > 60
    assert len(tools.profile_table(64, 1, False)) == 1


def test_the_lessons_profiler_rows_go_through_the_function(root):
    from torch.profiler import ProfilerActivity, profile

    q, k, v = (torch.randn(1, 2, 128, 32) for _ in range(3))
    above_diagonal = torch.ones(128, 128, dtype=torch.bool).triu(1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # naive causal attention
        scores = (q @ k.transpose(-1, -2) * 0.125).masked_fill(above_diagonal, float("-inf"))
        torch.softmax(scores, -1) @ v
    rows = [{"name": e.key, "calls": e.count, "self_us": float(e.self_cpu_time_total),
             "total_us": float(e.cpu_time_total)} for e in prof.key_averages()
            if e.cpu_time_total > 0]
    reading = profile_function(root)(rows)
    assert reading["top_op"] in {row["name"] for row in rows}
    assert 0 < reading["top_share"] <= 1


def test_a_function_that_ignores_its_rows_fails(known_wrong):
    def remembered(rows):  # the answers of one run, whatever the table
        return {"top_op": "aten::bmm", "top_share": 0.43, "top_calls": 6}

    with known_wrong(PROFILE, "answers of one table, hard-coded",
                     match=r"table 1/4 .*top_share = 0\.43, not"):
        check(PROFILE, remembered)


WRONG_PROFILE = {
    "largest total time instead of self time": (
        [(TOP, 'top = max(rows, key=lambda row: row["total_us"])')],
        "has the largest total time, which includes the operators it calls"),
    "the runner-up": (
        [(TOP, 'top = sorted(rows, key=lambda row: -row["self_us"])[1]')],
        "is in the table, but another one has a larger self time"),
    "a percentage": ([(SHARE, '"top_share": 100 * top["self_us"] / all_self_us')],
                     "is a percentage; return a fraction between 0 and 1"),
    "share of the summed total times": (
        [(ALL_SELF, 'all_self_us = sum(row["total_us"] for row in rows)')],
        "divides by the sum of total times"),
    "calls of one iteration": (
        [('"top_calls": top["calls"]}', '"top_calls": top["calls"] // 3}')],
        "count every call in the profile, all iterations together"),
    "a tuple instead of a dict": (
        [('return {"top_op": top["name"], "top_share": top["self_us"] / all_self_us,\n'
          '            "top_calls": top["calls"]}',
          'return top["name"], top["self_us"] / all_self_us, top["calls"]')],
        "return a dict with exactly the keys top_op, top_share, top_calls; got a tuple"),
    "the calls as a string": (
        [('"top_calls": top["calls"]}', '"top_calls": str(top["calls"])}')],
        "return that whole number"),
}


@pytest.mark.parametrize("mistake", list(WRONG_PROFILE))
def test_wrong_profile_functions_are_rejected(root, known_wrong, mistake):
    replace, message = WRONG_PROFILE[mistake]
    with known_wrong(PROFILE, mistake, match=re.escape(message)) as caught:
        check(PROFILE, profile_function(root, *replace))
    assert str(caught.value).startswith("table "), str(caught.value)


def test_the_profile_check_takes_a_function_not_answers(known_wrong):
    with known_wrong(PROFILE, "answers instead of the function",
                     match=re.escape(f'check("{PROFILE}", read_profile)')):
        check(PROFILE, {"top_op": "aten::bmm", "top_share": 0.4, "top_calls": 6})


def test_deployment_and_profile_checks_replay_in_the_grader(root, record_check, replay_agrees):
    right = ((DEPLOY, deploy_function(root), "12 cases pick the right backend"),
             (PROFILE, profile_function(root), "7 tables read right"),
             (TUNING, TUNING_SOLUTION, "is a valid config"))
    for exercise, answer, passed in right:
        raised, record = record_check(exercise, answer, folder=exercise.replace("/", "-"))
        assert raised is None, raised
        replay_agrees(exercise, raised, record, passed)
    sdpa_first = WRONG_DEPLOY["sdpa preferred to the course kernel"][0]
    wrong = ((DEPLOY, deploy_function(root, *sdpa_first), "called sdpa, but the course kernel"),
             (PROFILE, profile_function(root, *WRONG_PROFILE["the runner-up"][0]),
              "another one has a larger self time"))
    for exercise, answer, message in wrong:
        folder = "wrong-" + exercise.replace("/", "-")
        raised, record = record_check(exercise, answer, folder=folder)
        assert raised is not None and message in str(raised), raised
        replay_agrees(exercise, raised, record, "")


# ---------------------------------------------------------------- harness and CUDA source


def test_benchmark_cli_explains_and_exits_0_without_cuda(capsys, tmp_path):
    from flashcourse.bench import harness

    assert harness.main(["--quick", "--out", str(tmp_path / "out")]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["perf.py", "explore_fwd.py", "ncu_summary.py",
                                    "explore_bwd.py", "warm_tutorial.py tutorial.py",
                                    "tune_lesson6.py", "explore_lesson6.py",
                                    "kernel_resources.py", "measure_decode_layout.py",
                                    "measure_partial_cost.py", "measure_launch_cost.py",
                                    "measure_decode_gap.py", "measure_backward_gap.py",
                                    "profile_launch.py", "measure_decode_cap.py"])
def test_gpu_scripts_explain_and_exit_0_without_cuda(root, script, monkeypatch, capsys):
    # run as __main__ in this process: a fresh interpreter per script would import torch again
    import runpy

    name, *args = script.split()
    path = root / "gpu" / name
    monkeypatch.setattr(sys, "argv", [str(path), *args])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the scripts put src/ first
    monkeypatch.chdir(root)
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(path), run_name="__main__")
    assert exited.value.code in (0, None), capsys.readouterr().err[-2000:]
    assert "CUDA GPU" in capsys.readouterr().out


def test_ncu_profile_asks_for_the_backward_kernels_and_the_stall_metrics(monkeypatch):
    # no ncu here: the command it would run is checked, and its script compiles
    import shutil
    import subprocess

    from flashcourse.bench import report

    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="", stderr="no kernel profiled")

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(subprocess, "run", fake_run)
    assert "no kernel profiled" in report.ncu_profile("bwd", 128, stalls=True)
    command = calls[-1]
    assert command[command.index("--kernel-name") + 1] == "regex:attn_bwd_d(kdv|q)_kernel"
    assert command[command.index("--launch-count") + 1] == "2"
    metrics = command[command.index("--metrics") + 1].split(",")
    assert set(report.NCU_METRICS) | set(report.NCU_STALL_METRICS) == set(metrics)
    script = command[-1]
    compile(script, "ncu-script", "exec")
    assert "o.backward(" in script and "requires_grad=True" in script
    report.ncu_forward(64)
    assert "o.backward(" not in calls[-1][-1] and "regex:attn_fwd" in calls[-1]


def test_lesson6_provider_runs_the_solution_kernels_forward_and_backward():
    from flashcourse.bench import providers

    gen = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(1, 2, 20, 16, generator=gen) for _ in range(4))
    rq, rk, rv = (x.clone().requires_grad_(True) for x in (q, k, v))
    out = providers.lesson6_attention()(rq, rk, rv, True, 0.5)
    grads = torch.autograd.grad(out, (rq, rk, rv), do)
    fq, fk, fv = (x.clone().requires_grad_(True) for x in (q, k, v))
    ref, _ = verify.reference_fp32(fq, fk, fv, True, 0.5)
    ref_grads = torch.autograd.grad(ref, (fq, fk, fv), do)
    assert (out - ref).abs().max().item() < 1e-4
    assert verify.gradient_problems(grads, ref_grads, 1e-4) == []


def test_plots_name_the_mask_of_live_and_recorded_rows():
    from flashcourse.bench.report import mask_name

    assert [mask_name(x) for x in (True, False, "True", "False")] == [
        "causal", "full", "causal", "full"]


def test_spread_is_the_range_of_repeats_over_their_median():
    from flashcourse.bench.harness import spread_pct

    assert spread_pct([2.0]) == ""
    assert spread_pct([2.0, 2.0, 2.0]) == 0.0
    assert spread_pct([1.0, 1.1, 1.2]) == pytest.approx(18.2)


def _fake_tutorial(tmp_path, body):
    path = tmp_path / "06-fused-attention.py"
    path.write_text(body)
    return path


def test_tutorial_provider_refuses_bad_files_and_unsupported_cases(tmp_path, monkeypatch):
    from flashcourse.bench import providers
    from flashcourse.bench.cases import TUTORIAL, Case

    monkeypatch.setattr(providers, "_TUTORIAL", {})
    case = Case("fwd", "fp16", 64, 4096, False)
    assert "no --tutorial file" in providers.skip_reason(TUTORIAL, case)
    with pytest.raises(SystemExit, match="no such file"):
        providers.load_tutorial(tmp_path / "missing.py")
    with pytest.raises(SystemExit, match="has no attention"):
        providers.load_tutorial(_fake_tutorial(tmp_path, "x = 1\n"))
    providers.load_tutorial(_fake_tutorial(tmp_path, "def attention(q, k, v, c, s):\n"
                                           "    return q\n"))
    assert providers.skip_reason(TUTORIAL, case) == ""
    assert "fp16 only" in providers.skip_reason(TUTORIAL, Case("fwd", "bf16", 64, 4096, False))
    assert "multiple of 128" in providers.skip_reason(TUTORIAL,
                                                      Case("fwdbwd", "fp16", 64, 1000, True))


def test_tutorial_runs_a_batch_as_one_batch_of_all_heads(tmp_path, monkeypatch):
    # the tutorial's forward is wrong for batch > 1, so it gets (1, B * H, N, d) views
    from flashcourse.bench import providers
    from flashcourse.bench.cases import TUTORIAL

    monkeypatch.setattr(providers, "_TUTORIAL", {})
    providers.load_tutorial(_fake_tutorial(
        tmp_path, "SEEN = []\ndef attention(q, k, v, causal, scale):\n"
        "    SEEN.append((tuple(q.shape), causal, scale))\n    return q * 2\n"))
    q = torch.randn(2, 3, 8, 4)
    out = providers.make_call(TUTORIAL, True, 0.5)(q, q, q)
    assert providers._TUTORIAL["module"].SEEN == [((1, 6, 8, 4), True, 0.5)]
    assert out.shape == q.shape and torch.equal(out, q * 2)


def test_lesson6_provider_runs_the_lessons_kernels():
    # the teaching kernel, compiled from lesson 6's solution cells, beside the reference
    from flashcourse.bench import providers
    from flashcourse.bench.cases import LESSON6

    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 3, 37, 16, generator=gen) for _ in range(3))
    for causal in (False, True):
        out = providers.make_call(LESSON6, causal, 0.3)(q, k, v)
        ref, _ = verify.reference_fp32(q, k, v, causal, 0.3)
        assert verify.max_error(out, ref, 1e-4)[1], causal


def test_bench_case_times_round_robin_and_rechecks_after_timing(monkeypatch):
    from flashcourse.bench import harness
    from flashcourse.bench.cases import Case

    calls, checks = [], {"course": 0}
    monkeypatch.setattr(harness, "make_inputs", lambda case, requires_grad: (None,) * 4)
    monkeypatch.setattr(harness, "skip_reason", lambda provider, case: "")

    class Call:
        def __init__(self, provider, causal, scale):
            self.provider = provider

        def __call__(self, q, k, v):
            return None

    monkeypatch.setattr(harness, "make_call", Call)
    times = {"sdpa-cudnn": iter([1.0, 1.2, 1.1]), "course": iter([2.0, 2.0, 2.0])}

    def fake_median(run, warmup_ms, rep_ms, grad_to_none=None):
        provider = run.__defaults__[0].provider
        calls.append(provider)
        return next(times[provider])

    def fake_check(case, q, k, v, do, fn):
        checks[fn.provider] += 1
        # right before timing, wrong after it
        return "" if checks[fn.provider] == 1 else "output max error 1 > 0.02"

    monkeypatch.setattr(harness, "median_ms", fake_median)
    monkeypatch.setattr(harness, "check_against_fp32", fake_check)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    rows = harness.bench_case(Case("fwd", "fp16", 64, 1024, False), ["sdpa-cudnn", "course"],
                              rep_ms=1, warmup_ms=1, repeats=3)
    assert calls == ["sdpa-cudnn", "course"] * 3  # interleaved, not one provider then the other
    cudnn, course = rows
    assert cudnn["ms"] == 1.1 and cudnn["spread_pct"] == pytest.approx(18.2)
    assert cudnn["repeats"] == 3 and cudnn["status"] == "timed"
    assert course["status"].startswith("WRONG after timing") and course["ms"] == ""


def test_fused_dq_backward_matches_autograd():
    # host.backward(fused_dq=True), gpu/explore_bwd.py's one-kernel backward (dQ by atomics)
    gen = torch.Generator().manual_seed(6)
    for causal in (False, True):
        q, k, v, do = (torch.randn(2, 3, 37, 16, generator=gen) for _ in range(4))
        o, lse = host.forward(q, k, v, causal, 0.3)
        grads = host.backward(q, k, v, o, lse, do, causal, 0.3,
                              configs=((16, 16, 4, 1), None), fused_dq=True)
        rq, rk, rv = (x.clone().requires_grad_(True) for x in (q, k, v))
        ref, _ = verify.reference_fp32(rq, rk, rv, causal, 0.3)
        ref_grads = torch.autograd.grad(ref, (rq, rk, rv), do)
        assert verify.gradient_problems(grads, ref_grads, 1e-4) == [], causal


def test_backward_config_may_cap_registers_and_a_malformed_one_is_named():
    # a fifth entry caps registers per thread (maxnreg, compiled only): the same gradients
    q, k, v, do = (torch.randn(1, 2, 37, 16, generator=torch.Generator().manual_seed(9))
                   for _ in range(4))
    o, lse = host.forward(q, k, v, True)
    plain = host.backward(q, k, v, o, lse, do, True, configs=((16, 16, 4, 1), (16, 16, 4, 1)))
    capped = host.backward(q, k, v, o, lse, do, True,
                           configs=((16, 16, 4, 1, 128), (16, 16, 4, 1, None)))
    assert all(torch.equal(a, b) for a, b in zip(plain, capped, strict=True))
    with pytest.raises(fc.CourseInputError, match=r"a backward config must be \(BLOCK_M, "
                       r"BLOCK_N, num_warps, num_stages\) or \(\.\.\., maxnreg\); got \(16, 16\)"):
        host.backward(q, k, v, o, lse, do, True, configs=((16, 16), (16, 16, 4, 1)))


@pytest.mark.parametrize("tma, fused, warp_spec", [
    (False, False, False), (True, False, False), (True, True, False), (True, False, True)])
def test_backward_variants_match_autograd(tma, fused, warp_spec):
    # host.backward's switches: pointer loads or tensor descriptors, dQ by its own kernel or
    # fused into dK/dV, warp-specialised loops; ragged N, B and H > 1, a transposed view
    # (any strides: tma=None picks what they allow), a large-logit scale, both masks
    gen = torch.Generator().manual_seed(8)
    shapes = [((2, 3, 37, 16), 0.3, "bhnd"), ((1, 2, 50, 32), 2.0, "bnhd")]
    for (B, H, N, D), scale, layout in shapes:
        q, k, v, do = (torch.randn(B, N, H, D, generator=gen) * 2 for _ in range(4))
        if layout == "bhnd":
            q, k, v, do = (x.transpose(1, 2).contiguous() for x in (q, k, v, do))
        else:
            q, k, v, do = (x.transpose(1, 2) for x in (q, k, v, do))
        for causal in (False, True):
            o, lse = host.forward(q, k, v, causal, scale)
            grads = host.backward(q, k, v, o, lse, do, causal, scale, fused_dq=fused,
                                  tma=None if layout == "bnhd" else tma,
                                  warp_spec=warp_spec)
            rq, rk, rv = (x.clone().requires_grad_(True) for x in (q, k, v))
            ref, _ = verify.reference_fp32(rq, rk, rv, causal, scale)
            ref_grads = torch.autograd.grad(ref, (rq, rk, rv), do)
            assert verify.gradient_problems(grads, ref_grads, 1e-4) == [], (B, causal)


@pytest.mark.parametrize("fused", [False, True])
def test_backward_reads_row_statistics_through_descriptors(fused, monkeypatch):
    # stats_tma: dK/dV reads the logsumexp and delta as (B * H, N) descriptors; N a multiple
    # of 4 but ragged against every block, B and H > 1, a large-logit scale, both masks
    made = []
    real = host.TensorDescriptor.from_tensor

    def spy(tensor, block):
        made.append(tensor.dim())
        return real(tensor, block)

    monkeypatch.setattr(host.TensorDescriptor, "from_tensor", spy)
    gen = torch.Generator().manual_seed(9)
    for (B, H, N, D), scale in (((2, 3, 36, 16), 0.3), ((1, 2, 52, 32), 2.0)):
        q, k, v, do = (torch.randn(B, H, N, D, generator=gen) * 2 for _ in range(4))
        for causal in (False, True):
            o, lse = host.forward(q, k, v, causal, scale)
            made.clear()
            grads = host.backward(q, k, v, o, lse, do, causal, scale, fused_dq=fused, tma=True,
                                  stats_tma=True)
            assert made.count(2) == 2, made  # the logsumexp's and delta's descriptors
            rq, rk, rv = (x.clone().requires_grad_(True) for x in (q, k, v))
            ref, _ = verify.reference_fp32(rq, rk, rv, causal, scale)
            ref_grads = torch.autograd.grad(ref, (rq, rk, rv), do)
            assert verify.gradient_problems(grads, ref_grads, 1e-4) == [], (N, causal)
    q = torch.randn(1, 2, 37, 16, generator=gen)  # rows of 37 fp32: no descriptor, pointers
    o, lse = host.forward(q, q, q, False)
    made.clear()
    host.backward(q, q, q, o, lse, q, False, tma=True, stats_tma=True)
    assert made.count(2) == 0, made


def test_backward_refuses_descriptors_on_strides_they_cannot_take():
    q = torch.randn(1, 2, 5, 32)[..., ::2]  # every second column: a last stride of 2
    o, lse = host.forward(q, q, q, False)
    with pytest.raises(fc.CourseInputError, match="tensor descriptors need"):
        host.backward(q, q, q, o, lse, q, False, tma=True)


def test_time_ladder_times_steps_round_robin_and_keeps_going_past_a_failure(monkeypatch):
    from flashcourse.bench import harness
    from flashcourse.bench.cases import Case
    from flashcourse.kernels import ladder

    calls = []
    fake_ms = {"cudnn": 1.0, 0: 4.0, 1: 2.0, 2: None}  # step 2 fails when it is timed

    def fake_median(run, warmup_ms, rep_ms, grad_to_none=None):
        key = run()  # a step's run gives its number (fake forward below), cuDNN's None
        key = "cudnn" if key is None else key
        calls.append(key)
        if fake_ms[key] is None:
            raise RuntimeError("out of resources\nmore text")
        return fake_ms[key]

    monkeypatch.setattr(harness, "make_inputs", lambda case: (None,) * 4)
    monkeypatch.setattr(verify, "reference_fp32", lambda q, k, v, causal: (None, None))
    monkeypatch.setattr(harness, "make_call", lambda provider, causal, scale: lambda *x: None)
    monkeypatch.setattr(harness, "median_ms", fake_median)
    monkeypatch.setattr(harness, "_ladder_check", lambda *args, **kwargs: "")
    monkeypatch.setattr(ladder, "ladder_steps", lambda: ladder.STEPS[:3])
    monkeypatch.setattr(host, "forward", lambda *a, step, config: (step.number, None))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    rows = harness.time_ladder([Case("fwd", "fp16", 64, 256, False)], autotune=False,
                               repeats=2)
    assert calls == ["cudnn", 0, 1, 2, "cudnn", 0, 1]  # round-robin; step 2 dropped once failed
    step0, step1, step2 = rows
    assert step0["vs_step0"] == 1.0 and step1["vs_step0"] == 2.0
    assert step1["vs_cudnn"] == 0.5 and step1["spread_pct"] == 0.0 and step1["repeats"] == 2
    assert step2["status"] == "failed: out of resources" and step2["ms"] == ""


def _load_gpu_script(root, name):
    spec = importlib.util.spec_from_file_location(name, root / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lesson6_tuner_times_each_config_beside_the_reference(root, monkeypatch):
    # gpu/tune_lesson6.py's time_case in the interpreter (tiny shapes; a fake clock that reads
    # the config table): every config is checked, timed and set against the reference
    from flashcourse.bench import providers
    from flashcourse.kernels import tiles

    tune = _load_gpu_script(root, "tune_lesson6")
    monkeypatch.setattr(tune, "TOKENS", 40)
    monkeypatch.setattr(tune, "WIDTH", 32)
    monkeypatch.setattr(tune, "CANDIDATES", {16: [(16, 16, 4, 1), (32, 16, 4, 1),
                                                  (16, 16, 2, 1)]})
    monkeypatch.setitem(tiles.FORWARD_CONFIGS, (16, True), tiles.FORWARD_CONFIGS[(16, True)])

    def fake_ms(fn, rep_ms=None):
        fn()
        return 1.0 if tiles.FORWARD_CONFIGS[(16, True)] == (32, 16, 4, 1) else 2.0

    monkeypatch.setattr(tune.bench, "median_ms", fake_ms)
    monkeypatch.setattr(tune, "CHECK_BHN", ((2, 2, 19),))
    monkeypatch.setattr(tune, "CHECK_DTYPES", (torch.float32,))
    checked = []
    real_check = tune.verify.check_forward

    def check_forward(*args, **kwargs):  # the third config fails its checks
        config = tiles.FORWARD_CONFIGS[(16, True)]
        checked.append(config)
        if config == (16, 16, 2, 1):
            raise AssertionError("lesson 6 B=2 H=2 N=19: max error 1")
        return real_check(*args, **kwargs)

    monkeypatch.setattr(tune.verify, "check_forward", check_forward)
    monkeypatch.setattr(tune.attention, "make_inputs",
                        lambda B, H, N, D, dtype, device, seed: tuple(
                            torch.randn(B, H, N, D, generator=torch.Generator().manual_seed(seed))
                            for _ in range(3)))  # float32 on the CPU
    kernel = providers.lesson6_kernels().flash_forward_kernel
    rows = {r["config"]: r for r in tune.time_case(16, True, 20, kernel, repeats=2)}
    assert checked == [(16, 16, 4, 1), (32, 16, 4, 1), (16, 16, 2, 1)]  # each before timing
    assert rows["16x16x4x1"]["status"] == rows["32x16x4x1"]["status"] == "ok", rows
    assert [rows[name]["ms"] for name in ("16x16x4x1", "32x16x4x1")] == [2.0, 1.0]  # its table
    assert rows["16x16x2x1"]["status"].startswith("WRONG: lesson 6") and \
        rows["16x16x2x1"]["ms"] == "", rows


def test_lesson6_tuner_picks_the_fastest_checked_config_and_writes_it(root, monkeypatch,
                                                                       tmp_path):
    import types

    tune = _load_gpu_script(root, "tune_lesson6")
    monkeypatch.setattr(tune.providers, "lesson6_kernels",
                        lambda: types.SimpleNamespace(flash_forward_kernel=None))
    times = {"64x64x4x3": 1.0, "128x64x8x3": 0.5, "128x128x8x3": 2.0}

    def fake_case(d, causal, n, kernel, repeats):
        rows = [{"d": d, "causal": causal, "N": n, "config": name, "ms": ms, "spread_pct": 1.0,
                 "course_ms": 1.0, "lesson6/course": 1.0 / ms, "status": "ok"}
                for name, ms in times.items()]
        if causal:  # the fastest config is wrong in the causal cases: never chosen
            rows[1].update(ms="", status="WRONG: max error 1e+00")
        return rows

    monkeypatch.setattr(tune, "time_case", fake_case)
    best = tune.tune(tmp_path, repeats=1)
    assert best[(64, False)] == (128, 64, 8, 3) and best[(64, True)] == (64, 64, 4, 3)
    assert tune.read_best(tmp_path / "lesson6-best.json") == best
    assert (tmp_path / "tune-lesson6.csv").read_text().count("WRONG") == 4  # 2 dims x 2 N


def test_backward_explorer_warms_configs_and_reports_failures(root, monkeypatch):
    # gpu/explore_bwd.py's compile workers, in the interpreter: a good config warms silently
    # (the ragged checks included), a config the kernels cannot take is reported by its job
    spec = importlib.util.spec_from_file_location("explore_bwd", root / "gpu" / "explore_bwd.py")
    explore = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(explore)
    monkeypatch.setattr(explore, "RAGGED", ((2, 2, 37),))  # small: the interpreter is slow
    good = (16, True, 40, "fused+tma", (16, 16, 4, 1))
    bad = (16, False, 40, "dkdv", ((16, 12, 4, 1), (16, 16, 4, 1)))  # 12: no power of two
    failures = explore.warm([good, bad])
    assert list(failures) == [bad], failures
    pairs = explore.configs_for("pair", 128)
    assert pairs[0] == explore.tiles.LADDER_BACKWARD[False] and len(pairs) == 6  # table first
    assert len(set(pairs)) == len(pairs)  # the table's own pair is not timed twice
    assert explore.config_name("pair", pairs[1]) == "32x64x4x3+128x64x8x3"
    assert explore.config_name("dq", pairs[1]) == "128x64x8x3"
    blocks = explore.configs_for("blocks", 128)
    assert blocks[0] == explore.tiles.LADDER_BACKWARD[False] and len(set(blocks)) == 5
    assert explore.config_name("blocks", blocks[2]) == "32x64x4x2x168+128x64x8x3"  # capped
    capped = (16, False, 40, "blocks+tma", ((16, 16, 4, 1, 96), (16, 16, 4, 1)))
    assert explore.warm([capped]) == {}
    assert "power of 2" in failures[bad] or "arange" in failures[bad], failures[bad]
    assert explore.parse_kernel("pair+tma+ws") == ("pair", {"tma": True, "warp_spec": True})
    assert explore.parse_kernel("dq") == ("dq", {"tma": False})  # the pointer loads
    with pytest.raises(ValueError, match="unknown kernel list 'pair\\+tmaa'"):
        explore.parse_kernel("pair+tmaa")


def test_explored_forward_variants_match_attention(root):
    # gpu/explore_fwd.py's variants (the search behind tiles.TUNED) run in the interpreter
    spec = importlib.util.spec_from_file_location("explore_fwd", root / "gpu" / "explore_fwd.py")
    explore = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(explore)
    gen = torch.Generator().manual_seed(5)
    q, k, v = (2 * torch.randn(2, 3, 77, 16, generator=gen) for _ in range(3))
    tried = 0
    for variant in explore.VARIANTS:
        if variant in explore.COMPILED_ONLY:
            continue
        for causal in (False, True):
            cfg = (64, 16, 4, 1) if explore.VARIANTS[variant] is None else (32, 16, 4, 1)
            out, lse = explore.launch(variant, cfg, q, k, v, causal)
            ref, ref_lse = verify.reference_fp32(q, k, v, causal)
            tol = 1e-3 if variant in explore.APPROXIMATE_EXP else 1e-4
            torch.testing.assert_close(out, ref, atol=tol, rtol=tol, msg=variant)
            torch.testing.assert_close(lse, ref_lse, atol=tol, rtol=tol, msg=variant)
            tried += 1
    assert tried == 2 * (len(explore.VARIANTS) - len(explore.COMPILED_ONLY))


def test_lesson6_explorer_variants_match_attention_and_a_wrong_one_is_refused(root, monkeypatch):
    # gpu/explore_lesson6.py: lesson 6's kernel with each optimisation switched on, in the
    # interpreter, on ragged, batched and transposed inputs; a wrong launch is never timed
    spec = importlib.util.spec_from_file_location("explore_lesson6",
                                                  root / "gpu" / "explore_lesson6.py")
    explore = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(explore)
    monkeypatch.setattr(explore, "CHECK_DTYPES", (torch.float32,))  # fp16 dots: GPU only
    monkeypatch.setattr(explore, "CHECK_SHAPES", ((2, 3, 37), (1, 2, 29)))
    for variant in explore.VARIANTS:
        for causal in (False, True):
            assert explore.check((variant, (16, 16, 4, 1), 16), causal) == "", variant
    assert len(explore.specs([64])) == len(explore.VARIANTS) * len(explore.CONFIGS[64]) + 1

    def wrong_scale(variant, config, q, k, v, causal):  # scores scaled by 1/d, not 1/sqrt(d)
        return explore_launch(variant, config, q / q.shape[-1] ** 0.5, k, v, causal)

    explore_launch = explore.launch
    monkeypatch.setattr(explore, "launch", wrong_scale)
    assert explore.check(("all", (16, 16, 4, 1), 16), False).startswith("WRONG")


def test_benchmark_flop_count_and_cases():
    from flashcourse.bench import cases

    case = cases.Case("fwdbwd", "fp16", 128, 16384, True)
    assert (case.batch, case.heads) == (2, 16)
    assert case.flops() == pytest.approx(3.5 * 4 * 2 * 16 * 16384**2 * 128 / 2)
    full = cases.sweep_cases("fwd", quick=False, dtypes=["fp16", "bf16"])
    assert len(full) == 40 and {c.n for c in full} == {1024, 2048, 4096, 8192, 16384}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_source_compiles_with_nvcc(tmp_path):
    target = cuda_fwd.compile_object(tmp_path)
    assert target.exists() and target.stat().st_size > 0


def run_in_interpreter(root, script: str, out):
    """gpu/<script> --interpreter --out <out> in a fresh process (the script switches the
    runtime to the interpreter); fails the test on a non-zero exit."""
    import subprocess

    done = subprocess.run([sys.executable, str(root / "gpu" / script), "--interpreter",
                           "--out", str(out)], capture_output=True, text=True, cwd=root,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_decode_gap_script_checks_and_times_every_part_in_the_interpreter(root, tmp_path):
    import csv

    out = tmp_path / "gap.csv"
    run_in_interpreter(root, "measure_decode_gap.py", out)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2
    for row in rows:  # the step and the other layout checked before anything is timed
        for checked in ("step", "heads together", "dependent step", "fused step",
                        "fused step, heads together"):
            assert float(row[f"{checked} max err"]) < 1e-2, checked
        for column in ("step ms", "split kernel ms", "merge ms", "split kernel, heads together ms",
                       "split kernel, no softmax ms", "dependent step ms", "fused step ms",
                       "fused step, heads together ms", "read-only ms"):
            assert column in row


def test_decode_cap_script_checks_every_capped_step_in_the_interpreter(root, tmp_path):
    import csv

    out = tmp_path / "cap.csv"
    run_in_interpreter(root, "measure_decode_cap.py", out)
    (row,) = list(csv.DictReader(out.open()))
    assert row["maxnreg"] == "96" and int(row["splits"]) > 1  # a merge to launch early
    for step in ("step", "capped step", "capped step, 2 stages", "dependent step",
                 "capped dependent step", "capped dependent step, 2 stages"):  # checked first
        assert float(row[f"{step} max err"]) < 1e-2, step
        assert f"{step} ms" in row


def test_backward_gap_sorts_each_kernel_into_its_part_and_splits_the_extra_time(root):
    gap = _load_gpu_script(root, "measure_backward_gap")
    course = [("attn_fwd_halves_kernel", 300.0), ("attn_bwd_delta_kernel", 20.0),
              ("attn_bwd_dkdv_kernel", 500.0), ("attn_bwd_dq_kernel", 280.0),
              ("vectorized_elementwise_kernel", 10.0)]
    cudnn = [("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", 250.0),
             ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", 650.0),
             ("cudnn_sdpa_dot_do_o", 30.0), ("fill_kernel", 10.0)]
    parts = gap.step_parts(course, "course", steps=2)
    assert parts == {"forward": 0.15, "delta": 0.01, "dK/dV": 0.25, "dQ": 0.14, "backward": 0.0,
                     "other": 0.005}
    theirs = gap.step_parts(cudnn, "cudnn", steps=2)
    assert theirs["forward"] == 0.125 and theirs["backward"] == 0.34 and theirs["other"] == 0.005
    row = {"course ms": sum(parts.values()), "cudnn ms": sum(theirs.values())}
    row.update({f"course {k} ms": x for k, x in parts.items() if x})
    row.update({f"cudnn {k} ms": x for k, x in theirs.items() if x})
    gap.shares(row)
    assert row["forward course/cudnn"] == pytest.approx(0.125 / 0.15)
    assert row["backward course/cudnn"] == pytest.approx(0.34 / 0.40)
    # 0.085 ms more in all: 0.025 in the forward, 0.06 in the backward (other is level)
    assert row["extra time in forward %"] == pytest.approx(100 * 0.025 / 0.085)
    assert row["extra time in backward %"] == pytest.approx(100 * 0.06 / 0.085)
    assert row["dK/dV % of course backward"] == pytest.approx(62.5)
    # within SPLIT_FROM of cuDNN the split of the extra time is noise: left out, not printed
    level = {"course ms": 1.02, "cudnn ms": 1.0, "course forward ms": 0.3,
             "cudnn forward ms": 0.25, "course dQ ms": 0.72, "cudnn backward ms": 0.75}
    gap.shares(level)
    assert level["course/cudnn"] == pytest.approx(1 / 1.02)
    assert "extra time in forward %" not in level and "extra time in backward %" not in level


def test_launch_profile_script_checks_then_profiles_in_the_interpreter(root, tmp_path):
    out = tmp_path / "profile.txt"
    run_in_interpreter(root, "profile_launch.py", out)
    report = out.read_text()
    assert report.startswith("causal window 32, N = 128")
    assert "sparse_forward" in report and "Ordered by: cumulative time" in report
    assert str(root) not in report  # the project's own paths, not this machine's
    assert "\n{'date': " in report and "'triton': " in report  # what it ran on, as ncu_summary


def test_interleaved_timings_reverse_their_order_every_other_round(root, monkeypatch):
    # gpu/bench_modern_attention.interleaved: no candidate always runs right after the same one
    import triton.testing

    bma = _load_gpu_script(root, "bench_modern_attention")
    order, clock = [], iter(range(1, 100))

    def fake_do_bench(fn, warmup, rep, return_mode):
        order.append(fn())
        return float(next(clock))

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    bench_like = types.SimpleNamespace(mode="full")
    timings = bma.interleaved(bench_like, {name: (lambda n=name: n) for name in "abc"}, 4)
    assert order == list("abccbaabccba")
    # each candidate's median, fastest and slowest of its own 4 timings
    assert timings == {"a": (6.5, 1.0, 12.0), "b": (6.5, 2.0, 11.0), "c": (6.5, 3.0, 10.0)}


def test_launch_profile_names_files_without_the_folders_python_imports_from(root, monkeypatch):
    profile = _load_gpu_script(root, "profile_launch")
    monkeypatch.setattr(sys, "path", [*sys.path, "/opt/staged-triton"])
    line = ("200 0.005 0.024 /opt/staged-triton/triton/runtime/jit.py:733(run)\n"
            f"200 0.003 0.054 {root}/src/flashcourse/kernels/sparse_forward.py:641(x)\n"
            "800 0.001 0.006 /usr/lib/python3.12/site-packages/torch/cuda/__init__.py:1(y)\n")
    stripped = profile.strip_paths(line)
    assert "/opt/staged-triton" not in stripped and str(root) not in stripped
    assert " triton/runtime/jit.py:733" in stripped and " torch/cuda/__init__.py:1" in stripped
    assert " src/flashcourse/kernels/sparse_forward.py:641" in stripped


def test_launch_cost_script_checks_and_writes_every_mask_in_the_interpreter(root, tmp_path):
    import csv

    out = tmp_path / "launch.csv"
    run_in_interpreter(root, "measure_launch_cost.py", out)
    rows = list(csv.DictReader(out.open()))
    assert [row["mask"] for row in rows] == ["causal", "causal window 32", "causal documents",
                                             "random blocks 50%"]
    for row in rows:  # both sides checked against float32 attention before any timing
        assert float(row["reference max err"]) < 1e-2 and float(row["flex max err"]) < 1e-2
        assert float(row["reference pointers max err"]) < 1e-2
        assert float(row["reference planned max err"]) < 1e-2
        for column in ("reference launch ms", "flex launched ms", "reference graph ms",
                       "reference planned launch ms", "reference planned graph ms",
                       "flex graph ms", "reference python ms", "reference pointers launch ms",
                       "reference bare launch ms", "reference bare pointers launch ms"):
            assert column in row


def test_mask_cases_build_the_kinds_asked_for_in_their_order(root):
    import argparse

    from flashcourse.kernels import modern_attention as ma
    from flashcourse.kernels import sparse_forward as sf

    bma = _load_gpu_script(root, "bench_modern_attention")
    every = bma.mask_cases(ma, sf, 256, 32)
    assert [case.name for case in every] == ["causal", "causal window 32", "causal documents",
                                             "random blocks 50%"]
    assert [case.name for case in bma.mask_cases(ma, sf, 256, 32, ("random", "window"))] == \
        ["random blocks 50%", "causal window 32"]
    with pytest.raises(ValueError, match="unknown mask kinds \\['windows'\\]: choose from causal"):
        bma.mask_cases(ma, sf, 256, 32, ("windows",))
    # measure_launch_cost --mask takes those kinds and refuses others
    launch_cost = _load_gpu_script(root, "measure_launch_cost")
    parser = argparse.ArgumentParser()
    launch_cost.add_mask_argument(parser)
    assert parser.parse_args(["--mask", "window", "--mask", "causal"]).mask == \
        ["window", "causal"]
    assert parser.parse_args([]).mask is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--mask", "sliding"])


def test_gpu_scripts_checked_refuses_wrong_and_failing_calls_and_names_where(root):
    bma = _load_gpu_script(root, "bench_modern_attention")
    b = bma.Bench("interpreter")
    reference = torch.ones(4)
    row = {"dtype": "float16"}
    assert bma.checked(b, row, "right", lambda: torch.ones(4), reference, True, where="N = 4")
    assert not bma.checked(b, row, "wrong", lambda: torch.zeros(4), reference, True,
                           where="N = 4")
    assert row["wrong note"] == "wrong (max error 1), not timed"

    def fails():
        raise RuntimeError("no kernel")

    assert not bma.checked(b, row, "broken", fails, reference, False, where="N = 4")
    assert b.failures == ["wrong, N = 4: max error 1 against float32 attention"]
    mask_row = {"mask": "causal", "N": 8, "D": 16, "dtype": "float16"}
    assert not bma.checked(b, mask_row, "wrong", lambda: torch.zeros(4), reference, True)
    assert b.failures[-1].startswith("wrong, causal, N=8, D=16, float16: max error 1")
