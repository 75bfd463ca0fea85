"""Lesson 7's tool exercises: reading a torch.profiler table (answers computed from the
student's own table), tiles, warps and stages for the course kernel (validated everywhere,
timed against the baseline config on a GPU), and a dispatcher that falls back when a backend
or a dtype is missing (graded with stand-in backends that count their calls)."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from ... import runtime
from ...kernels import attention
from .. import guards, registry

# ---------------------------------------------------------------- reading a profile

PROFILE_ID = "performance/profile-reading"
PROFILE_SECTION = 'section 2 ("The tool spectrum, measured"), "Which kernels dominate?"'
PROFILE_KEYS = ("name", "calls", "self_us", "total_us")
PROFILE_ANSWERS = ("top_op", "top_share", "top_calls")
PROFILE_SHARE_ATOL = 0.02  # a share read off the table to two digits


def _profile_problem(table) -> str:
    """Why `table` is not a profile of the cell's naive attention ("" when it is one)."""
    if not isinstance(table, list) or len(table) < 3:
        return "the table must be the list of rows the profiler cell built (profile_rows)"
    for row in table:
        if not isinstance(row, dict) or set(row) != set(PROFILE_KEYS):
            return f"every row must be a dict with the keys {', '.join(PROFILE_KEYS)}"
        if not isinstance(row["name"], str) or type(row["calls"]) is not int or \
                row["calls"] < 1:
            return "every row needs an operator name and a whole number of calls"
        times = (row["self_us"], row["total_us"])
        if not all(type(t) in (int, float) and math.isfinite(t) and t >= 0 for t in times) \
                or row["self_us"] > row["total_us"] * (1 + 1e-9) + 1e-6:
            return "times must be non-negative numbers, each self time within its total"
    names = " ".join(row["name"].lower() for row in table)
    if "softmax" not in names or not any(op in names for op in ("bmm", "mm", "matmul", "gemm")):
        return ("it holds no softmax and no matrix product: it is not the profile of the "
                "naive attention the profiler cell records")
    if sum(row["self_us"] for row in table) <= 0:
        return "its self times add up to zero"
    return ""


def profile_facts(table) -> dict:
    """The answers, computed from the table: the operator with the largest self time, its
    share of all self time, and how many times it ran."""
    top = max(table, key=lambda row: row["self_us"])
    return {"top_op": top["name"],
            "top_share": top["self_us"] / sum(row["self_us"] for row in table),
            "top_calls": top["calls"]}


def _profile_hint(key: str, given, table) -> str:
    facts = profile_facts(table)
    by_total = max(table, key=lambda row: row["total_us"])
    if key == "top_op":
        if given == by_total["name"] and given != facts["top_op"]:
            return (f"{given} has the largest total time, which includes the operators it calls; "
                    "the question asks for the largest self time, spent in the operator itself")
        ranked = sorted(table, key=lambda row: -row["self_us"])
        if any(given == row["name"] for row in ranked[1:]):
            return "that operator is in the table, but another one has a larger self time"
        return "give the operator's name exactly as the table writes it"
    if key == "top_share":
        if isinstance(given, (int, float)) and 1 < given <= 100 and \
                abs(given / 100 - facts["top_share"]) <= PROFILE_SHARE_ATOL:
            return "a share is a fraction between 0 and 1 here, not a percentage"
        total = sum(row["total_us"] for row in table)
        top = max(table, key=lambda row: row["self_us"])
        if isinstance(given, (int, float)) and \
                abs(given - top["self_us"] / total) <= PROFILE_SHARE_ATOL:
            return ("that divides by the sum of total times, which counts nested operators "
                    "twice; divide by the sum of self times")
        return "divide the operator's self time by the sum of all self times"
    return ("read the calls column of that operator's row: it counts every call in the "
            "profile, all iterations together")


@registry.exercise(PROFILE_ID, "read a torch.profiler table", 1)
def _check_profile(answers) -> str:
    registry.require_answers(answers, ("table", *PROFILE_ANSWERS), PROFILE_ID)
    table = answers["table"]
    problem = _profile_problem(table)
    if problem:
        raise registry.WrongAnswer(
            f"{PROFILE_ID}: \"table\" is not the profile this exercise asks about: {problem}. "
            "Run the profiler cell again and keep table=profile_rows.")
    facts = profile_facts(table)
    for key in PROFILE_ANSWERS:
        given, right = answers[key], facts[key]
        if key == "top_share":
            ok = type(given) in (int, float) and abs(given - right) <= PROFILE_SHARE_ATOL
        else:
            ok = given == right and type(given) is type(right)
        if not ok:
            raise registry.WrongAnswer(
                f"{PROFILE_ID}: {key} = {registry.printable_answer(given)} does not match the "
                f"table: {_profile_hint(key, given, table)}. See {PROFILE_SECTION}.")
    return ("your answers match the table: the operator with the most self time, its share "
            "and its calls")


# ---------------------------------------------------------------- tuning: tiles, warps and stages

TUNING_ID = "performance/tuning"
TUNING_SECTION = 'section 4 ("Exercise: two rungs of the ladder"), "Pick tiles, warps and stages"'
# The shape to tune for: fp16 forward, not causal, of the course kernel's step 2 (pointer loads,
# exp2, split causal loop), whose own config is the ladder's BASELINE.
TUNING_SHAPE = {"B": 4, "H": 16, "N": 4096, "D": 64, "causal": False}
TUNING_STEP = 2
TUNING_TARGET = 1.10  # at least this many times the BASELINE config's speed, same run
TUNING_ROUNDS = 3  # baseline and answer timed alternately, this many times each
TUNING_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
# Limits of one thread block on Hopper (sm_90): shared memory and registers per thread.
MAX_SHARED_BYTES = 227 * 1024
MAX_REGISTERS_PER_THREAD = 255
ELEMENT_BYTES = 2  # fp16


def _power_of_two(x) -> bool:
    return type(x) is int and x >= 1 and x & (x - 1) == 0


def tuning_problems(config, shape=TUNING_SHAPE) -> list[str]:
    """What is wrong with a config for the course kernel at this shape ([] when valid)."""
    if not isinstance(config, dict):
        return ["answer a dict with the keys " + ", ".join(TUNING_KEYS)]
    missing = [key for key in TUNING_KEYS if key not in config]
    extra = [key for key in config if key not in TUNING_KEYS]
    if missing or extra:
        return [f"the dict needs exactly the keys {', '.join(TUNING_KEYS)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(map(str, extra))}" if extra else "")]
    bm, bn, warps, stages = (config[key] for key in TUNING_KEYS)
    problems = []
    for name in ("BLOCK_M", "BLOCK_N"):
        value = config[name]
        if not _power_of_two(value):
            problems.append(f"{name}={value!r} is not a power of two (tl.arange needs one)")
        elif not 16 <= value <= 256:
            problems.append(f"{name}={value} is outside 16..256 (tl.dot needs at least 16 "
                            "rows, and larger tiles leave too few programs)")
    if not _power_of_two(warps) or warps > 16:
        problems.append(f"num_warps={warps!r} must be 1, 2, 4, 8 or 16")
    if type(stages) is not int or not 1 <= stages <= 6:
        problems.append(f"num_stages={stages!r} must be a whole number from 1 to 6")
    if problems:
        return problems
    if bm % bn:
        problems.append(f"BLOCK_M={bm} is not a multiple of BLOCK_N={bn}: the causal split walks "
                        "the diagonal block in BLOCK_N steps")
    if bm > shape["N"] or bn > shape["N"]:
        problems.append(f"a tile is longer than the sequence (N={shape['N']})")
    d = shape["D"]
    shared = (bm * d + 2 * stages * bn * d) * ELEMENT_BYTES
    if shared > MAX_SHARED_BYTES:
        problems.append(f"the Q tile and {stages} stages of K and V tiles need about "
                        f"{shared // 1024} KiB of shared memory, more than the "
                        f"{MAX_SHARED_BYTES // 1024} KiB a thread block gets: fewer stages or "
                        "a smaller BLOCK_N")
    registers = math.ceil((bm * bn + bm * d) / (32 * warps))
    if registers > MAX_REGISTERS_PER_THREAD:
        problems.append(f"the scores and the accumulator alone need {registers} fp32 registers "
                        f"per thread with {warps} warps, more than the "
                        f"{MAX_REGISTERS_PER_THREAD} a thread has: the kernel would spill; use "
                        "more warps or smaller tiles")
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
    for _ in range(rounds):
        base.append(median_ms(run(baseline)))
        ours.append(median_ms(run(config)))
    return float(np.median(ours)), float(np.median(base))


@registry.exercise(TUNING_ID, "tiles, warps and stages that beat the baseline config", 1)
def _check_tuning(config) -> str:
    shape_text = ("B={B}, H={H}, N={N}, d={D}, fp16, not causal").format(**TUNING_SHAPE)
    if not isinstance(config, dict) or all(key in config for key in TUNING_KEYS):
        registry.require_answers(config, TUNING_KEYS, TUNING_ID)  # blanks: fill them in
    problems = tuning_problems(config)
    if problems:
        raise registry.WrongAnswer(
            f"{TUNING_ID}: this config does not fit the course kernel at {shape_text}: "
            + "; ".join(problems) + f". See {TUNING_SECTION}.")
    chosen = tuple(config[key] for key in TUNING_KEYS)
    text = ", ".join(f"{key}={config[key]}" for key in TUNING_KEYS)
    if runtime.current().interpreter:
        return (f"{text} is a valid config for {shape_text}; its speed is graded on a GPU "
                "(timings in the interpreter say nothing about one)")
    from ...kernels import tiles

    _check_tuned_output(chosen)
    ours, base = time_configs(chosen, tiles.BASELINE)
    if base / ours < TUNING_TARGET:
        raise registry.WrongAnswer(
            f"{TUNING_ID}: {text} ran at {base / ours:.2f}x the speed of the BASELINE config "
            f"{tiles.BASELINE} in this run ({ours:.3f} ms against {base:.3f} ms); the target is "
            f"{TUNING_TARGET:.2f}x. The baseline's tiles are small: each program reloads K and V "
            "for only BLOCK_M queries. Try larger tiles with enough warps for them, and "
            f"measure each candidate with the timing cell. See {TUNING_SECTION}.")
    return f"{text} beats the BASELINE config by at least {TUNING_TARGET:.2f}x at {shape_text}"


def _check_tuned_output(config: tuple) -> None:
    """The config must give right answers too: a ragged fp16 case against fp32 attention."""
    from ...kernels import host, verify

    q, k, v = verify.make_qkv(2, 3, 1000, TUNING_SHAPE["D"], torch.float16, "cuda", seed=42)
    for causal in (False, True):
        out, _ = host.forward(q, k, v, causal, step=TUNING_STEP, config=config)
        ref, _ = verify.reference_fp32(q, k, v, causal)
        error, ok = verify.max_error(out, ref, verify.tolerance(torch.float16))
        if not ok:
            raise registry.WrongAnswer(
                f"{TUNING_ID}: with config {config} the kernel's output is off by {error:.3g} "
                f"(causal={causal}, N=1000): a config must keep the kernel correct.")


# ---------------------------------------------------------------- deployment: pick a backend

DEPLOY_ID = "performance/deployment"
DEPLOY_SECTION = 'section 5 ("A CUDA C++ kernel"), "Deploying a kernel: fallbacks and precision"'
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
    "A KeyError means your function called a backend that available_backends does not offer: "
    "check that a name is in it before calling it.")


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
        return (f"the course kernel is offered and takes {name} inputs with head dim {d}, so it "
                "must run: it is the fastest backend here")
    if "course" in offered and dtype not in COURSE_DTYPES:
        reason = f"the course kernel takes fp16 and bf16 only, not {name}"
    elif "course" in offered:
        reason = f"the course kernel compiles head dims 16, 32, 64 and 128 only, not {d}"
    else:
        reason = "the course kernel is not offered on this machine"
    if expected == "sdpa":
        return f"{reason}, and sdpa is offered, so sdpa must run"
    return f"{reason}, and sdpa is not offered either, so your own math path must run"


def _diagnose_math(out, q, k, v, causal: bool, dtype) -> str:
    if not torch.isfinite(out).all():
        return ("Likely mistake: the math path computed in the inputs' precision: these scores "
                "pass float16's largest value (65504) and overflow. Compute q k^T, the softmax "
                "and P V in float32, then cast the result back.")
    got = out.to(torch.float64)
    if causal and (got - _deploy_reference(q, k, v, False)).abs().max() < 1e-2:
        return ("Likely mistake: the math path leaves out the causal mask (-inf above the "
                "diagonal).")
    if dtype == torch.float64:
        return ("Likely mistake: float64 inputs were computed in float32: the math path must "
                "compute in at least float32, so float64 stays float64.")
    return ("The math path's result is not attention with the scale 1 / sqrt(d): check the "
            "scale, the mask and the softmax's dimension (the keys).")


@registry.exercise(DEPLOY_ID, "attention that picks a backend and falls back", 1)
def _check_deployment(attention_fn) -> str:
    if not callable(attention_fn):
        raise registry.WrongAnswer(f"Pass the function itself: check(\"{DEPLOY_ID}\", attention).")
    cases = registry.with_hidden(DEPLOY_CASES, DEPLOY_HIDDEN)
    for number, (dtype, d, causal, offered, expected, seed, large) in enumerate(cases, 1):
        label = (f"case {number}/{len(cases)} ({_dtype_text(dtype)}, head dim {d}, "
                 f"{'causal' if causal else 'not causal'}, backends offered: "
                 f"{', '.join(offered) or 'none'}{', scores beyond fp16' if large else ''})")
        q, k, v = _deploy_inputs(dtype, d, seed, large)
        calls = torch.zeros(len(BACKEND_NAMES), dtype=torch.int64)
        backends = _stub_backends(offered, calls)
        out = guards.guarded(label, functools.partial(attention_fn, q, k, v, causal, backends),
                             hint=DEPLOY_CRASH_HINT, tensors=[q, k, v, calls])
        ran = [name for name, count in zip(BACKEND_NAMES, calls.tolist(), strict=True)
               for _ in range(count)]
        if ran != ([] if expected == "math" else [expected]):
            did = ("called " + " and ".join(ran)) if ran else "ran its own math path"
            why = _why_this_backend(dtype, d, offered, expected)
            raise registry.WrongAnswer(
                f"{label}: your function {did}, but {why}. See {DEPLOY_SECTION}.")
        if not isinstance(out, torch.Tensor) or out.shape != q.shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise registry.WrongAnswer(
                f"{label}: return the attention output, a tensor of shape {tuple(q.shape)}; got "
                f"{got}.")
        if out.dtype != dtype:
            raise registry.WrongAnswer(
                f"{label}: the result is {_dtype_text(out.dtype)} for "
                f"{_dtype_text(dtype)} inputs: compute in float32 if you must, then cast "
                f"back to the inputs' dtype. See {DEPLOY_SECTION}.")
        atol, rtol = DEPLOY_TOLERANCES[dtype]
        hint = ("The backend's own result must come back unchanged, computed with the causal "
                "flag you were given." if expected != "math" else "")
        try:
            registry.compare(out.to(torch.float64), _deploy_reference(q, k, v, causal), label,
                             atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            if expected == "math":
                hint = _diagnose_math(out, q, k, v, causal, dtype)
            raise registry.WrongAnswer(f"{err}\n{hint} See {DEPLOY_SECTION}.") from None
    return (f"{len(cases)} cases pick the right backend and return the inputs' dtype"
            f"{registry.hidden_note()}")
