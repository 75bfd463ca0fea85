"""Lesson 8's tool exercises: a function that reads a torch.profiler table (called on
tables the check builds), tiles, warps and stages for the course kernel (validated everywhere,
timed against the baseline config on a GPU; in the interpreter the point needs a config other
than the baseline that the course's paper models predict faster, and the message and the
scorecard say the speed itself is measured on a GPU), and a dispatcher
that falls back when a backend or a dtype is missing (graded with stand-in backends that count
their calls)."""

from __future__ import annotations

import copy
import functools
import math
import numbers

import numpy as np
import torch

from ... import hardware, runtime
from ...i18n import N_, _
from ...kernels import attention
from ...models import roofline
from .. import guards, registry

# ---------------------------------------------------------------- reading a profile

PROFILE_ID = "performance/profile-reading"
PROFILE_SECTION = N_("section 2 (\"The tool spectrum, measured\"), \"Which kernels dominate?\"")
PROFILE_ANSWERS = ("top_op", "top_share", "top_calls")
PROFILE_SHARE_RTOL = 1e-6  # the share is computed, not read off: only rounding may differ
PROFILE_ITERATIONS = 3  # every table profiles this many runs: calls are multiples of it
# Operators of a profiled attention; a wrapper calls the operator under it, so its total time
# holds the other's and its own self time is small (aten::matmul calls aten::bmm).
PROFILE_OPS = ("aten::bmm", "aten::_softmax", "aten::masked_fill_", "aten::mul", "aten::copy_",
               "aten::triu", "aten::empty", "aten::div", "aten::exp", "aten::sum", "aten::add",
               "aten::clone", "aten::expand", "aten::contiguous", "aten::to", "aten::ones")
PROFILE_WRAPPERS = {"aten::bmm": "aten::matmul", "aten::_softmax": "aten::softmax",
                    "aten::copy_": "aten::_to_copy"}
# (what the table tests, seed, operators, tie): each table is built by the check, never by the
# student; the first holds a wrapper whose total time is the largest while its self time is not.
PROFILE_CASES = [
    (N_("the top operator sits under a wrapper with a larger total time"), 61, 6, False),
    (N_("two operators tie for the most self time"), 62, 5, True),
    (N_("many rows"), 63, 60, False),
    (N_("a single row"), 64, 1, False),
]
PROFILE_HIDDEN = [
    (N_("a wrapper with a larger total time, other times"), 161, 9, False),
    (N_("a tie in a long table"), 162, 40, True),
    (N_("two rows"), 163, 2, False),
]


def profile_table(seed: int, operators: int, tie: bool) -> list[dict]:
    """A profile as the lesson's profiler cell builds it (name, calls, self_us, total_us), in a
    shuffled order: `operators` leaf rows (the first is aten::bmm, the largest self time unless
    `tie` gives another leaf the same), plus a wrapper row over every wrapped leaf."""
    rng = np.random.default_rng(registry.case_seed(seed))
    extra = [f"void attention_kernel_{i}<float>(float const*, float*)"
             for i in range(max(0, operators - len(PROFILE_OPS)))]
    others = [str(name) for name in rng.permutation(PROFILE_OPS[1:])] + extra
    names = ["aten::bmm", *others[:operators - 1]]
    self_us = [round(float(t), 1) for t in rng.uniform(5.0, 900.0, operators)]
    self_us[0] = max(self_us) + round(float(rng.uniform(1.0, 50.0)), 1)
    if tie:
        self_us[1] = self_us[0]
    rows = []
    for name, own in zip(names, self_us, strict=True):
        calls = PROFILE_ITERATIONS * int(rng.integers(1, 5))
        rows.append({"name": name, "calls": calls, "self_us": own, "total_us": own})
        if name in PROFILE_WRAPPERS and operators > 1:
            wrapper = round(float(rng.uniform(1.0, 30.0)), 1)
            rows.append({"name": PROFILE_WRAPPERS[name], "calls": calls, "self_us": wrapper,
                         "total_us": round(wrapper + own, 1)})
    return [rows[i] for i in rng.permutation(len(rows))]


def profile_facts(table) -> dict:
    """The answers, computed from the table: the operators with the largest self time (with
    their calls: several when they tie) and that self time's share of all self time."""
    best = max(row["self_us"] for row in table)
    return {"top_ops": {row["name"]: row["calls"] for row in table if row["self_us"] == best},
            "top_share": best / sum(row["self_us"] for row in table)}


def _integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and \
        math.isfinite(value)


def _profile_verdict(given, table) -> str:
    """Why `given` is not the right reading of `table` ("" when it is)."""
    if not isinstance(given, dict) or set(given) != set(PROFILE_ANSWERS):
        got = (_("a dict with the keys {keys}").format(keys=", ".join(map(repr, given)))
               if isinstance(given, dict)
               else _("a {type_name}").format(type_name=type(given).__name__))
        return _("return a dict with exactly the keys {keys}; got {got}").format(
            keys=", ".join(PROFILE_ANSWERS), got=got)
    facts = profile_facts(table)
    top_op, top_share, top_calls = (given[key] for key in PROFILE_ANSWERS)
    if top_op not in facts["top_ops"]:
        shown = registry.printable_answer(top_op)
        by_total = max(table, key=lambda row: row["total_us"])["name"]
        if top_op == by_total:
            return (_("top_op = {shown} has the largest total time, which includes the operators "
                      "it calls; the question asks for the largest self time, spent in the "
                      "operator itself").format(shown=shown))
        if any(top_op == row["name"] for row in table):
            return _("top_op = {shown} is in the table, but another one has a larger "
                     "self time").format(shown=shown)
        return (_("top_op = {shown} is not an operator of this table: return the name exactly as "
                  "the row writes it").format(shown=shown))
    if not _real(top_share):
        return (_("top_share = {shown} is not a finite number: a fraction between 0 and "
                  "1").format(shown=registry.printable_answer(top_share)))
    right = facts["top_share"]
    if not math.isclose(top_share, right, rel_tol=PROFILE_SHARE_RTOL):
        if math.isclose(top_share, 100 * right, rel_tol=PROFILE_SHARE_RTOL):
            return (_("top_share = {top_share:g} is a percentage; return a fraction between 0 and "
                      "1").format(top_share=top_share))
        best = max(row["self_us"] for row in table)
        of_totals = best / sum(row["total_us"] for row in table)
        if math.isclose(top_share, of_totals, rel_tol=PROFILE_SHARE_RTOL):
            return (_("top_share = {top_share:.4g} divides by the sum of total times, which "
                      "counts nested operators twice; divide by the sum of self times").format(
                      top_share=top_share))
        return (_("top_share = {top_share:.4g}, not {right:.4g}: divide the operator's self time "
                  "by the sum of all self times").format(top_share=top_share, right=right))
    calls = facts["top_ops"][top_op]
    if not _integer(top_calls) or top_calls != calls:
        shown = registry.printable_answer(top_calls)
        if _integer(top_calls) and 0 < top_calls < calls and calls % top_calls == 0:
            return (_("top_calls = {shown}, but {top_op} ran {calls} times: count every call in "
                      "the profile, all iterations together, as the calls column does").format(
                      shown=shown, top_op=top_op, calls=calls))
        return (_("top_calls = {shown}, but the calls column of {top_op}'s row says {calls}: "
                  "return that whole number").format(shown=shown, top_op=top_op, calls=calls))
    return ""


@registry.exercise(PROFILE_ID, N_("read a torch.profiler table"), 1)
def _check_profile(read_profile) -> str:
    if not callable(read_profile):
        raise registry.WrongAnswer(
            _("Pass the function itself: check(\"{exercise_id}\", read_profile).").format(
                exercise_id=PROFILE_ID))
    cases = registry.with_hidden(PROFILE_CASES, PROFILE_HIDDEN)
    for number, (what, seed, operators, tie) in enumerate(cases, 1):
        table = profile_table(seed, operators, tie)
        label = _("table {number}/{total} ({what}, {rows} rows)").format(
            number=number, total=len(cases), what=_(what), rows=len(table))
        given = registry.run_student(read_profile, label, copy.deepcopy(table))
        problem = _profile_verdict(given, table)
        if problem:
            raise registry.WrongAnswer(_("{label}: {problem}. See {section}.").format(
                label=label, problem=problem, section=_(PROFILE_SECTION)))
    return (_("{total} tables read right: the operator with the most self time, its share and its "
              "calls{hidden}").format(total=len(cases), hidden=registry.hidden_note()))


# ---------------------------------------------------------------- tuning: tiles, warps and stages

TUNING_ID = "performance/tuning"
TUNING_SECTION = N_("section 4 (\"Exercise: two rungs of the ladder\"), \"Pick tiles, warps and "
                    "stages\"")
# The shape to tune for: fp16 forward, not causal, of the course kernel's step 2 (pointer loads,
# exp2, split causal loop), whose own config is the ladder's BASELINE.
TUNING_SHAPE = {"B": 4, "H": 16, "N": 4096, "D": 64, "causal": False}
TUNING_STEP = 2
TUNING_TARGET = 1.10  # at least this many times the BASELINE config's speed, same run
TUNING_ROUNDS = 3  # baseline and answer timed alternately, this many times each
TUNING_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
# Limits of one thread block on Hopper (sm_90), the course GPU's architecture.
MAX_SHARED_BYTES = hardware.HOPPER_SHARED_BYTES_PER_BLOCK
MAX_REGISTERS_PER_THREAD = hardware.HOPPER_REGISTERS_PER_THREAD
ELEMENT_BYTES = 2  # fp16


def _power_of_two(x) -> bool:
    return type(x) is int and x >= 1 and x & (x - 1) == 0


def tuning_problems(config, shape=TUNING_SHAPE) -> list[str]:
    """What is wrong with a config for the course kernel at this shape ([] when valid)."""
    if not isinstance(config, dict):
        return [_("answer a dict with the keys {keys}").format(keys=", ".join(TUNING_KEYS))]
    missing = [key for key in TUNING_KEYS if key not in config]
    extra = [key for key in config if key not in TUNING_KEYS]
    if missing or extra:
        return [_("the dict needs exactly the keys {keys}").format(keys=", ".join(TUNING_KEYS))
                + (_("; missing {keys}").format(keys=", ".join(missing)) if missing else "")
                + (_("; unknown {keys}").format(keys=", ".join(map(str, extra))) if extra
                   else "")]
    bm, bn, warps, stages = (config[key] for key in TUNING_KEYS)
    problems = []
    for name in ("BLOCK_M", "BLOCK_N"):
        value = config[name]
        if not _power_of_two(value):
            problems.append(_("{name}={value!r} is not a power of two (tl.arange needs "
                              "one)").format(name=name, value=value))
        elif not 16 <= value <= 256:
            problems.append(_("{name}={value} is outside 16..256 (tl.dot needs at least 16 rows, "
                              "and larger tiles leave too few programs)").format(name=name,
                              value=value))
    if not _power_of_two(warps) or warps > 16:
        problems.append(_("num_warps={warps!r} must be 1, 2, 4, 8 or 16").format(warps=warps))
    if type(stages) is not int or not 1 <= stages <= 6:
        problems.append(_("num_stages={stages!r} must be a whole number from 1 to 6").format(
                          stages=stages))
    if problems:
        return problems
    if bm % bn:
        problems.append(_("BLOCK_M={bm} is not a multiple of BLOCK_N={bn}: the causal split walks "
                          "the diagonal block in BLOCK_N steps").format(bm=bm, bn=bn))
    if bm > shape["N"] or bn > shape["N"]:
        problems.append(_("a tile is longer than the sequence (N={n})").format(n=shape["N"]))
    d = shape["D"]
    shared = (bm * d + 2 * stages * bn * d) * ELEMENT_BYTES
    if shared > MAX_SHARED_BYTES:
        problems.append(_("the Q tile and {stages} stages of K and V tiles need about {kib} KiB "
                          "of shared memory, more than the {limit} KiB a thread block gets: "
                          "fewer stages or a smaller BLOCK_N").format(
            stages=stages, kib=shared // 1024, limit=MAX_SHARED_BYTES // 1024))
    registers = math.ceil((bm * bn + bm * d) / (32 * warps))
    if registers > MAX_REGISTERS_PER_THREAD:
        problems.append(_("the scores and the accumulator alone need {registers} fp32 registers "
                          "per thread with {warps} warps, more than the "
                          "{limit} a thread has: the kernel would spill; use more warps or "
                          "smaller tiles").format(registers=registers, warps=warps,
                                                  limit=MAX_REGISTERS_PER_THREAD))
    return problems


def _tuning_inputs(shape, device):
    gen = torch.Generator().manual_seed(registry.case_seed(41))
    return tuple(torch.randn(shape["B"], shape["H"], shape["N"], shape["D"], generator=gen)
                 .to(device=device, dtype=torch.float16) for _ in range(3))


def time_configs(config: tuple, baseline: tuple, shape=TUNING_SHAPE,
                 rounds: int = TUNING_ROUNDS) -> tuple[float, float]:
    """Median ms of the course kernel with `config` and with `baseline`, timed alternately in
    one run (compiled only)."""
    from ...bench import median_ms
    from ...kernels import host

    q, k, v = _tuning_inputs(shape, "cuda")

    def run(cfg):
        return lambda: host.forward(q, k, v, shape["causal"], step=TUNING_STEP, config=cfg)

    ours, base = [], []
    for _round in range(rounds):
        base.append(median_ms(run(baseline)))
        ours.append(median_ms(run(config)))
    return float(np.median(ours)), float(np.median(base))


TUNING_TITLE = N_("tiles, warps and stages that beat the baseline config")
# The interpreter cannot time a GPU kernel: there the point needs a config that the paper models
# predict faster, and the scorecard's line and the check's message say that a GPU measures it.
TUNING_NOT_TIMED = N_("speed measured when graded on a GPU")
TUNING_TITLE_NOT_TIMED = N_(  # one message, for the catalog: TUNING_TITLE (TUNING_NOT_TIMED)
    "tiles, warps and stages that beat the baseline config (speed measured when graded on a "
    "GPU)")


def tuning_title(interpreter: bool) -> str:
    return TUNING_TITLE_NOT_TIMED if interpreter else TUNING_TITLE


def modelled_ms(config: tuple, shape=TUNING_SHAPE) -> float:
    """The least time the course's paper models allow the kernel with `config` at `shape`, ms:
    lesson 1's HBM traffic of a fused kernel (K and V read once per BLOCK_M query rows) on
    lesson 2's roofline. Only BLOCK_M moves it: the models know nothing of warps or stages."""
    fused = roofline.attention_points(shape["N"], shape["D"], "fp16", block_rows=config[0])[-1]
    return roofline.time_bound_us(fused) * shape["B"] * shape["H"] / 1000


def _modelled_verdict(chosen: tuple, text: str, shape_text: str) -> str:
    """The interpreter's verdict: its timings say nothing about a GPU, so the point needs a
    config other than the BASELINE that the paper models predict faster."""
    from ...kernels import tiles

    if chosen == tiles.BASELINE:
        raise registry.WrongAnswer(
            _("{exercise_id}: {text} is the BASELINE config itself (tiles.BASELINE): the "
              "starting point the exercise asks you to beat, not a tuning of it. Change the "
              "knobs the lesson says trade reuse against registers and shared memory. See "
              "{section}.").format(exercise_id=TUNING_ID, text=text,
                                   section=_(TUNING_SECTION)))
    ours, base = modelled_ms(chosen), modelled_ms(tiles.BASELINE)
    if ours >= base:
        raise registry.WrongAnswer(
            _("{exercise_id}: {text} can run, but the course's paper model predicts it no "
              "faster than the BASELINE config {baseline} at {shape} ({ours:.3f} ms against "
              "{base:.3f} ms). Without a GPU the point needs a config the model (lesson 1's HBM "
              "traffic on lesson 2's roofline) predicts faster; a GPU measures the speed itself. "
              "See {section} for what the model counts.").format(
                exercise_id=TUNING_ID, text=text, baseline=tiles.BASELINE, shape=shape_text,
                ours=ours, base=base, section=_(TUNING_SECTION)))
    return (_("{text} is a valid config for {shape} that the course's paper model predicts "
              "faster than the BASELINE ({ours:.3f} ms against {base:.3f} ms); {not_timed} "
              "(interpreter timings say nothing about one, and the {target:.2f}x target is "
              "checked there)").format(text=text, shape=shape_text, ours=ours, base=base,
                                       not_timed=_(TUNING_NOT_TIMED), target=TUNING_TARGET))


@registry.exercise(TUNING_ID, tuning_title(runtime.current().interpreter), 1)
def _check_tuning(config) -> str:
    shape_text = _("B={B}, H={H}, N={N}, d={D}, fp16, not causal").format(**TUNING_SHAPE)
    if not isinstance(config, dict) or all(key in config for key in TUNING_KEYS):
        registry.require_answers(config, TUNING_KEYS, TUNING_ID)  # blanks: fill them in
    problems = tuning_problems(config)
    if problems:
        raise registry.WrongAnswer(
            _("{exercise_id}: this config does not fit the course kernel at {shape}: "
              "{problems}. See {section}.").format(
                exercise_id=TUNING_ID, shape=shape_text, problems="; ".join(problems),
                section=_(TUNING_SECTION)))
    chosen = tuple(config[key] for key in TUNING_KEYS)
    text = ", ".join(f"{key}={config[key]}" for key in TUNING_KEYS)
    if runtime.current().interpreter:
        return _modelled_verdict(chosen, text, shape_text)
    from ...kernels import tiles

    _check_tuned_output(chosen)
    ours, base = time_configs(chosen, tiles.BASELINE)
    if base / ours < TUNING_TARGET:
        raise registry.WrongAnswer(
            _("{exercise_id}: {text} ran at {speedup:.2f}x the speed of the BASELINE config "
              "{baseline} in this run ({ours:.3f} ms against {base:.3f} ms); the target is "
              "{target:.2f}x. The baseline's tiles are small: each program reloads K and V for "
              "only BLOCK_M queries. Try larger tiles with enough warps for them, and measure "
              "each candidate with the timing cell. See {section}.").format(
                exercise_id=TUNING_ID, text=text, speedup=base / ours, baseline=tiles.BASELINE,
                ours=ours, base=base, target=TUNING_TARGET, section=_(TUNING_SECTION)))
    return _("{text} beats the BASELINE config by at least {target:.2f}x at {shape}").format(
        text=text, target=TUNING_TARGET, shape=shape_text)


def _check_tuned_output(config: tuple) -> None:
    """The config must give right answers too: a ragged fp16 case against fp32 attention."""
    from ...kernels import host, verify

    q, k, v = verify.make_qkv(2, 3, 1000, TUNING_SHAPE["D"], torch.float16, "cuda", seed=42)
    for causal in (False, True):
        out, _unused = host.forward(q, k, v, causal, step=TUNING_STEP, config=config)
        ref, _unused = verify.reference_fp32(q, k, v, causal)
        error, ok = verify.max_error(out, ref, verify.tolerance(torch.float16))
        if not ok:
            raise registry.WrongAnswer(
                _("{exercise_id}: with config {config} the kernel's output is off by "
                  "{error:.3g} (causal={causal}, N=1000): a config must keep the kernel "
                  "correct.").format(exercise_id=TUNING_ID, config=config, error=error,
                                     causal=causal))


# ---------------------------------------------------------------- deployment: pick a backend

DEPLOY_ID = "performance/deployment"
DEPLOY_SECTION = N_("section 5 (\"A CUDA C++ kernel\"), \"Deploying a kernel: fallbacks and "
                    "precision\"")
COURSE_DTYPES = (torch.float16, torch.bfloat16)
COURSE_HEAD_DIMS = (16, 32, 64, 128)
BACKEND_NAMES = ("course", "sdpa")
# (dtype, head dim, causal, backends offered, what must run, seed, large): large scores pass
# fp16's range (65504) inside q k^T, so only a float32 math path gets them right
DEPLOY_CASES = [
    (torch.float16, 64, True, ("course", "sdpa"), "course", 51, False),
    (torch.float32, 64, False, ("course", "sdpa"), "sdpa", 52, False),
    (torch.bfloat16, 32, True, ("sdpa",), "sdpa", 53, False),
    (torch.float16, 48, False, ("course", "sdpa"), "sdpa", 54, False),
    (torch.float16, 64, False, (), "math", 55, True),
    (torch.float32, 32, True, ("course",), "math", 56, False),
    (torch.float64, 16, True, (), "math", 57, False),
    (torch.bfloat16, 16, True, ("course",), "course", 58, False),
]
DEPLOY_HIDDEN = [
    (torch.float16, 32, True, (), "math", 151, True),
    (torch.float16, 128, False, ("course",), "course", 152, False),
    (torch.float32, 80, True, ("sdpa",), "sdpa", 153, False),
    (torch.bfloat16, 64, False, (), "math", 154, False),
]
DEPLOY_TOLERANCES = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2),
                     torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10)}
DEPLOY_CRASH_HINT = (
    N_("A KeyError means your function called a backend that available_backends does not offer: "
       "check that a name is in it before calling it."))


def _dtype_text(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _deploy_inputs(dtype, d: int, seed: int, large: bool):
    gen = torch.Generator().manual_seed(registry.case_seed(seed))
    q, k, v = (torch.randn(2, 2, 24, d, generator=gen, dtype=torch.float64) for _ in range(3))
    if large:  # q k^T reaches about 1e5: inf in float16
        q, k = q * 60.0, k * 60.0
    return tuple(x.to(dtype) for x in (q, k, v))


def _deploy_reference(q, k, v, causal: bool) -> torch.Tensor:
    return attention.standard_attention(*(x.to(torch.float64) for x in (q, k, v)), causal)


def _stub_backends(offered, calls: torch.Tensor) -> dict:
    """Stand-ins for the backends: each counts its calls in `calls` and returns attention
    computed in float64, in the inputs' dtype."""
    def make(index):
        def backend(q, k, v, causal=False):
            calls[index] += 1
            return _deploy_reference(q, k, v, bool(causal)).to(q.dtype)
        return backend

    return {name: make(BACKEND_NAMES.index(name)) for name in offered}


def _why_this_backend(dtype, d: int, offered, expected: str) -> str:
    name = _dtype_text(dtype)
    if expected == "course":
        return (_("the course kernel is offered and takes {name} inputs with head dim {d}, so it "
                  "must run: it is the fastest backend here").format(name=name, d=d))
    if "course" in offered and dtype not in COURSE_DTYPES:
        reason = _("the course kernel takes fp16 and bf16 only, not {name}").format(name=name)
    elif "course" in offered:
        reason = (_("the course kernel compiles head dims 16, 32, 64 and 128 natively, not {d} "
                    "(other head dims it pads, slower than sdpa)").format(d=d))
    else:
        reason = _("the course kernel is not offered on this machine")
    if expected == "sdpa":
        return _("{reason}, and sdpa is offered, so sdpa must run").format(reason=reason)
    return _("{reason}, and sdpa is not offered either, so your own math path must run").format(
             reason=reason)


def _diagnose_math(out, q, k, v, causal: bool, dtype) -> str:
    if not torch.isfinite(out).all():
        return (_("Likely mistake: the math path computed in the inputs' precision: these scores "
                  "pass float16's largest value (65504) and overflow. Compute q k^T, the softmax "
                  "and P V in float32, then cast the result back."))
    got = out.to(torch.float64)
    if causal and (got - _deploy_reference(q, k, v, False)).abs().max() < 1e-2:
        return (_("Likely mistake: the math path leaves out the causal mask (-inf above the "
                  "diagonal)."))
    if dtype == torch.float64:
        return (_("Likely mistake: float64 inputs were computed in float32: the math path must "
                  "compute in at least float32, so float64 stays float64."))
    return (_("The math path's result is not attention with the scale 1 / sqrt(d): check the "
              "scale, the mask and the softmax's dimension (the keys)."))


@registry.exercise(DEPLOY_ID, N_("attention that picks a backend and falls back"), 1)
def _check_deployment(attention_fn) -> str:
    if not callable(attention_fn):
        raise registry.WrongAnswer(_("Pass the function itself: check(\"{exercise_id}\", "
                                     "attention).").format(exercise_id=DEPLOY_ID))
    cases = registry.with_hidden(DEPLOY_CASES, DEPLOY_HIDDEN)
    for number, (dtype, d, causal, offered, expected, seed, large) in enumerate(cases, 1):
        label = _("case {number}/{total} ({dtype}, head dim {d}, {causal}, backends offered: "
                  "{offered}{large})").format(
            number=number, total=len(cases), dtype=_dtype_text(dtype), d=d,
            causal=_("causal") if causal else _("not causal"),
            offered=", ".join(offered) or _("none"),
            large=_(", scores beyond fp16") if large else "")
        q, k, v = _deploy_inputs(dtype, d, seed, large)
        calls = torch.zeros(len(BACKEND_NAMES), dtype=torch.int64)
        backends = _stub_backends(offered, calls)
        out = guards.guarded(label, functools.partial(attention_fn, q, k, v, causal, backends),
                             hint=_(DEPLOY_CRASH_HINT), tensors=[q, k, v, calls])
        ran = [name for name, count in zip(BACKEND_NAMES, calls.tolist(), strict=True)
               for _ in range(count)]
        if ran != ([] if expected == "math" else [expected]):
            did = (_("called {backends}").format(backends=_(" and ").join(ran)) if ran
                   else _("ran its own math path"))
            why = _why_this_backend(dtype, d, offered, expected)
            raise registry.WrongAnswer(
                _("{label}: your function {did}, but {why}. See {section}.").format(
                  label=label, did=did, why=why, section=_(DEPLOY_SECTION)))
        if not isinstance(out, torch.Tensor) or out.shape != q.shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise registry.WrongAnswer(
                _("{label}: return the attention output, a tensor of shape {shape}; got "
                  "{got}.").format(label=label, shape=tuple(q.shape), got=got))
        if out.dtype != dtype:
            raise registry.WrongAnswer(
                _("{label}: the result is {got} for {dtype} inputs: compute in float32 if you "
                  "must, then cast back to the inputs' dtype. See {section}.").format(
                    label=label, got=_dtype_text(out.dtype), dtype=_dtype_text(dtype),
                    section=_(DEPLOY_SECTION)))
        atol, rtol = DEPLOY_TOLERANCES[dtype]
        hint = (_("The backend's own result must come back unchanged, computed with the causal "
                  "flag you were given.") if expected != "math" else "")
        try:
            registry.compare(out.to(torch.float64), _deploy_reference(q, k, v, causal), label,
                             atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            if expected == "math":
                hint = _diagnose_math(out, q, k, v, causal, dtype)
            raise registry.WrongAnswer(f"{err}\n" + _("{hint} See {section}.").format(
                hint=hint, section=_(DEPLOY_SECTION))) from None
    return (_("{total} cases pick the right backend and return the inputs' dtype{hidden}").format(
              total=len(cases), hidden=registry.hidden_note()))
