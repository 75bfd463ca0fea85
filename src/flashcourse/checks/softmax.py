"""Checks of lesson 5, "Softmax, online softmax and merging softmax states".

Five code exercises (a stable numpy softmax, a fused row-softmax Triton kernel, the online
softmax statistics in numpy, an online-softmax Triton kernel over a long row, and the merge of two
partial softmax states). Its self-check questions and veto misconceptions are data:
self_checks/05-softmax.toml.

The Triton checks launch the student's kernel themselves (`launch_row_softmax`,
`launch_online_softmax`), with inputs inside NaN padding and outputs inside canaries, so a
missing mask or an ignored stride shows up on the GPU and in the interpreter alike.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import runtime
from ..reference import softmax as reference_softmax
from . import buffers, guards, registry

LESSON = registry.lesson(
    "softmax", "Lesson 5: Softmax, online softmax and merging softmax states", pass_line=8)


NEG_INF = float("-inf")


# ---------------------------------------------------------------- inputs


def logits(rows: int, n: int, seed: int, scale: float = 1.0, kind: str = "normal",
           block: int = 1):
    """Test logits, float64, shape (rows, n).

    kind "normal": Gaussian; "neg_inf": about a fifth of the entries are -inf (as a mask would
    make them; column 0 always stays finite); "ramp": every row increases along the columns,
    so the running max grows in every block; "offset": rows are shifted far apart (row i by
    -i * 1000), so one max for the whole array is wrong for all rows but one; "masked": row 0
    is -inf entirely (a row with no key), row r >= 1 has its first r blocks of `block` columns
    at -inf (at least its last column stays finite), as padding or a sliding window makes them.
    """
    rng = np.random.default_rng(registry.case_seed(seed))
    x = rng.standard_normal((rows, n)) * scale
    if kind == "neg_inf" and n > 1:
        hole = rng.random((rows, n)) < 0.2
        hole[:, 0] = False
        x[hole] = -np.inf
    elif kind == "ramp":
        x = np.sort(x, axis=-1) + np.linspace(0.0, 4.0 * scale, n)
    elif kind == "offset":
        x = x - 1000.0 * np.arange(rows)[:, None]
    elif kind == "masked":
        for r in range(rows):
            x[r, :n if r == 0 else min(n - 1, r * block)] = -np.inf
    return x


def safe_max(m: np.ndarray) -> np.ndarray:
    """The running max with -inf (a row that saw no finite value yet) replaced by 0."""
    return np.where(m == -np.inf, 0.0, m)


def _describe(rows: int, n: int, scale: float, kind: str, dtype: str | None = None,
              block: int | None = None, seed: int | None = None) -> str:
    parts = [f"{rows} row{'s' if rows != 1 else ''} of length {n}"]
    if block is not None:
        parts.append(f"BLOCK={block}")
    if dtype:
        parts.append(dtype)
    if scale > 10:
        parts.append(f"logits ~{scale:g}")
    if kind == "neg_inf":
        parts.append("some -inf entries")
    elif kind == "ramp":
        parts.append("rows increase, so the max grows in every block")
    elif kind == "offset":
        parts.append("rows 1000 apart")
    elif kind == "masked":
        parts.append("row 0 masked entirely, row r >= 1 with its first r blocks masked")
    if seed is not None:
        parts.append(f"seed={seed}")
    return ", ".join(parts)


def _require_callable(answer, exercise_id: str, name: str) -> None:
    if not callable(answer):
        raise registry.WrongAnswer(f"{exercise_id}: pass the function itself: "
                                  f"check(\"{exercise_id}\", {name}).")


# ---------------------------------------------------------------- 1. stable softmax (numpy)

# (rows, n, seed, scale, kind, dtype); rows == 0 means a 1-D vector
STABLE_CASES = [
    (0, 5, 0, 1.0, "normal", np.float64),  # one vector
    (3, 7, 1, 1.0, "normal", np.float64),  # several rows
    (4, 4, 2, 1.0, "normal", np.float64),  # square: a reduction over the wrong axis shows
    (3, 6, 3, 1e3, "normal", np.float64),  # e^1000 overflows float64
    (2, 9, 4, 100.0, "normal", np.float32),  # e^100 overflows float32
    (3, 8, 5, 1.0, "offset", np.float64),  # rows 1000 apart: the max must be per row
    (4, 10, 6, 1.0, "neg_inf", np.float64),  # masked entries
]
STABLE_HIDDEN = [
    (5, 33, 101, 50.0, "neg_inf", np.float32),
    (0, 1, 102, 1.0, "normal", np.float64),
    (6, 3, 103, 1e3, "offset", np.float64),
]

STABLE_MISTAKES = [
    ("no_max",
     "Without subtracting the max, np.exp overflows for large logits (e^89 is inf in float32, "
     "e^710 in float64) and inf/inf gives NaN: shift each row by its own max before "
     "exponentiating (section 1 explains why that changes nothing)."),
    ("global_max",
     "The max is taken over the whole array, not per row: a row far below the global max "
     "underflows to 0/0. Take the max of each row."),
    ("global_sum",
     "The sum runs over the whole array, not per row, so each row sums to less than 1. "
     "Sum each row on its own."),
    ("axis0",
     "The reductions run over axis 0 (down the columns); softmax normalises along each "
     "row, the last axis."),
]


def stable_candidate(x: np.ndarray, mistake: str) -> np.ndarray:
    """What a stable softmax with a known `mistake` returns (in the input's dtype)."""
    with np.errstate(all="ignore"):
        if mistake == "no_max":
            e = np.exp(x)
            return e / e.sum(axis=-1, keepdims=True)
        if mistake == "global_max":
            e = np.exp(x - x.max())
            return e / e.sum(axis=-1, keepdims=True)
        if mistake == "global_sum":
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum()
        if mistake == "axis0":
            e = np.exp(x - x.max(axis=0, keepdims=True))
            return e / e.sum(axis=0, keepdims=True)
    raise KeyError(mistake)


def _crash_hint(err: registry.WrongAnswer) -> str:
    text = str(err)
    if "broadcast" in text:
        return ("\nHint: a reduction without keepdims=True returns shape (rows,), which does "
                "not broadcast against (rows, n). Use x.max(axis=-1, keepdims=True).")
    return ""


@registry.exercise("softmax/stable-softmax", "numpy softmax that never overflows", 1)
def _check_stable_softmax(stable_softmax) -> str:
    _require_callable(stable_softmax, "softmax/stable-softmax", "stable_softmax")
    cases = registry.with_hidden(STABLE_CASES, STABLE_HIDDEN)
    for number, (rows, n, seed, scale, kind, dtype) in enumerate(cases, 1):
        x = logits(max(rows, 1), n, seed, scale, kind).astype(dtype)
        if rows == 0:
            x = x[0]
        shape = f"a vector of length {n}" if rows == 0 else _describe(rows, n, scale, kind)
        label = (f"case {number}/{len(cases)} ({shape}, {np.dtype(dtype).name}"
                 f"{f', logits ~{scale:g}' if rows == 0 and scale > 10 else ''})")
        original = x.copy()
        try:
            with np.errstate(all="ignore"):
                output = registry.run_student(stable_softmax, label, x)
        except registry.WrongAnswer as err:
            raise registry.WrongAnswer(f"{err}{_crash_hint(err)}") from err
        if not np.array_equal(x, original, equal_nan=True):
            raise registry.WrongAnswer(f"{label}: your function modified x in place.")
        expected = reference_softmax(x.astype(np.float64))
        atol, rtol = (1e-6, 1e-5) if dtype == np.float32 else (1e-12, 1e-9)
        try:
            registry.compare(output, expected, label, atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            for mistake, hint in STABLE_MISTAKES:
                if registry.same_result(output, stable_candidate(x, mistake), atol):
                    raise registry.WrongAnswer(f"{err}\nLikely mistake: {hint}") from None
            raise registry.WrongAnswer(
                f"{err}\nHint: softmax(x) = exp(x - max) / sum(exp(x - max)), max and sum per "
                "row (axis=-1, keepdims=True).") from None
    return _passed(len(cases), "match the float64 reference")


def _passed(count: int, what: str) -> str:
    hidden = registry.hidden_note()
    return f"{count} cases {what}{hidden}"


# ---------------------------------------------------------------- kernels: launchers


def num_warps_for(block: int) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


def launch_row_softmax(kernel, x: torch.Tensor, y: torch.Tensor) -> None:
    """How the grader launches your fused row-softmax kernel: one program per row, one block
    holding the whole row (BLOCK is the next power of two >= n_cols), strides passed in."""
    import triton

    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block,
                      num_warps=num_warps_for(block))


def launch_online_softmax(kernel, x: torch.Tensor, y: torch.Tensor, block: int) -> None:
    """How the grader launches your online-softmax kernel: one program per row, which walks
    over the row in blocks of BLOCK columns (any row length, BLOCK a power of two)."""
    runtime.check_block_size("BLOCK", block)
    n_rows, n_cols = x.shape
    kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block,
                      num_warps=num_warps_for(block))


def row_softmax(kernel, x: torch.Tensor) -> torch.Tensor:
    """Run a fused row-softmax kernel on a (rows, n_cols) tensor; returns a new tensor."""
    guards.require_kernel(kernel, "softmax/row-kernel", "softmax_row_kernel")
    runtime.check_tensors(x, names=("x",))
    y = torch.empty_like(x)
    launch_row_softmax(kernel, x, y)
    return y


def online_softmax(kernel, x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Run an online-softmax kernel on a (rows, n_cols) tensor; returns a new tensor."""
    guards.require_kernel(kernel, "softmax/online-kernel", "online_softmax_kernel")
    runtime.check_tensors(x, names=("x",))
    y = torch.empty_like(x)
    launch_online_softmax(kernel, x, y, block)
    return y


# ---------------------------------------------------------------- kernels: known mistakes


def blocked_stats(x: np.ndarray, block: int, *, rescale=True, include_old_max=True,
                  flip_scale=False, pad_zero=False, subtract_max=True, guard=True,
                  dtype=np.float64):
    """Running max and running sum over column blocks, with switches that reproduce the
    classic mistakes. pad_zero: the last block is padded with zeros (a masked load with
    other=0.0) instead of -inf; guard=False: no safe max, so a block masked entirely while the
    running max is still -inf gives exp(-inf - (-inf)) = NaN."""
    x = x.astype(dtype)
    rows, n = x.shape
    m = np.full(rows, -np.inf, dtype=dtype)
    total = np.zeros(rows, dtype=dtype)
    with np.errstate(all="ignore"):
        for start in range(0, n, block):
            xb = x[:, start:start + block]
            if pad_zero and xb.shape[1] < block:
                xb = np.concatenate([xb, np.zeros((rows, block - xb.shape[1]), dtype)], 1)
            block_max = xb.max(axis=-1)
            m_new = np.maximum(m, block_max) if include_old_max else block_max
            if not subtract_max:
                m_new = np.zeros_like(m_new)
            shift = safe_max(m_new) if guard else m_new
            scale = np.exp(shift - m) if flip_scale else np.exp(m - shift)
            if not rescale:
                scale = np.ones_like(scale)
            total = total * scale + np.exp(xb - shift[:, None]).sum(axis=-1)
            m = m_new
    return m, total


def _normalised(x, m, total, dtype=np.float64, divide=True):
    with np.errstate(all="ignore"):
        e = np.exp(x.astype(dtype) - m[:, None])
        return e / total[:, None] if divide else e


PAD_ZERO_HINT = (
    "The masked load fills the padding lanes with 0 (other=0.0, or no other= at all), so the "
    "padding adds exp(0 - max) to the sum. Padding must load as a value whose exponential "
    "is 0 and that never wins the max.")
NO_MAX_HINT = (
    "exp overflows for large logits (e^89 is inf in float32) and inf/inf is NaN: subtract the "
    "row max before tl.exp.")
NO_LOAD_MASK_HINT = (
    "Every output of the row is NaN: the load read past the end of the row, and the grader "
    "puts NaN there (on a GPU it would be another row's data or a fault). Load with "
    "mask=cols < n_cols and other=float(\"-inf\").")
NO_GUARD_HINT = (
    "A row whose first block is masked entirely (all -inf) turns NaN: its running max is still "
    "-inf, and exp(-inf - (-inf)) is NaN, which then stays in the running sum. Shift by a safe "
    "max, 0 while the running max is -inf (section 4, \"The online softmax\").")
NO_DIVIDE_HINT = "The outputs are exp(x - max) but never divided by the sum of the row."
ROW_STRIDE_HINT = (
    "Row r starts at x_ptr + r * x_row_stride, not r * n_cols: the grader's rows are not "
    "contiguous (each row is followed by padding). Use the strides the launcher passes.")


def _row_mistakes(x, block):
    """(candidate output, hint) for the known mistakes of a one-block row kernel."""
    return [
        (_normalised(x, *blocked_stats(x, block, subtract_max=False, dtype=np.float32),
                     np.float32), NO_MAX_HINT),
        (_normalised(x, *blocked_stats(x, block, pad_zero=True)), PAD_ZERO_HINT),
        (_normalised(x, *blocked_stats(x, block), divide=False), NO_DIVIDE_HINT),
    ]


def _online_mistakes(x, block):
    """(candidate output, hint) for the known mistakes of an online-softmax kernel, computed
    in float32 like the kernel (so overflows happen where the kernel's do)."""
    def output(divide=True, **switches):
        m, total = blocked_stats(x, block, dtype=np.float32, **switches)
        return _normalised(x, m, total, np.float32, divide)

    return [
        (output(guard=False), NO_GUARD_HINT),
        (output(rescale=False),
         "The running sum is not rescaled when the max grows: it was measured against the "
         "old max, and must be brought to the new one before the new block's sum is added "
         "(section 4)."),
        (output(flip_scale=True),
         "The rescale factor points the wrong way: it must shrink the old sum (a factor of at "
         "most 1, and 0 on the first block), not grow it (section 4)."),
        (output(include_old_max=False),
         "m_new must be the max over everything seen so far, the running max included, not "
         "this block's max alone: otherwise a larger value in an earlier block makes the "
         "rescale factor > 1, which overflows for large logits."),
        (output(pad_zero=True), PAD_ZERO_HINT),
        (output(subtract_max=False), NO_MAX_HINT),
        (output(divide=False),
         "The second pass stores exp(x - m) without dividing by the running sum l."),
    ]


def _diagnose_kernel(output, x, candidates, atol, stored_nothing) -> str:
    for candidate, hint in candidates:
        if registry.same_result(output, candidate, atol):
            return "Likely mistake: " + hint
    out = np.asarray(output, dtype=np.float64)
    if np.isnan(out).all():
        if stored_nothing():
            return ("Likely mistake: nothing was stored: the kernel must write each row's "
                    "result to the output, masked like the load.")
        if x.shape[1] > 1:
            return "Likely mistake: " + NO_LOAD_MASK_HINT
    if out.shape[0] > 1 and np.isfinite(out[0]).all() and np.isnan(out[1:]).all():
        return "Likely mistake: " + ROW_STRIDE_HINT
    return ("Hint: y = exp(x - max) / sum(exp(x - max)) per row, computed in float32, loaded "
            "with mask=cols < n_cols and other=float(\"-inf\").")


def _strided_like_contiguous(canaried: buffers.Canaried, rows: int, n: int) -> bool:
    """True when every changed canary lies where a contiguous (rows, n) output would lie: the
    kernel stepped from row to row by n_cols instead of the row stride."""
    changed = canaried.changed_canaries()
    where = torch.nonzero(changed.cpu()).flatten()
    return rows > 1 and len(where) > 0 and bool(
        ((where >= buffers.GUARD) & (where < buffers.GUARD + rows * n)).all())


# (rows, n_cols, dtype, scale, kind, seed): row kernel; BLOCK = next_pow2(n_cols)
ROW_CASES = [
    (3, 7, "fp32", 1.0, "normal", 0),  # not a power of two
    (4, 1, "fp32", 1.0, "normal", 1),  # a single column
    (2, 100, "fp16", 1.0, "normal", 2),
    (3, 64, "fp16", 1.0, "normal", 3),  # exactly a power of two
    (2, 1000, "fp32", 1.0, "neg_inf", 4),
    (3, 37, "fp32", 1e3, "normal", 5),  # e^1000 overflows
    (2, 300, "fp16", 1e3, "neg_inf", 6),
]
ROW_HIDDEN = [
    (5, 513, "fp32", 30.0, "normal", 101),
    (1, 129, "fp16", 1.0, "neg_inf", 102),
    (6, 3, "fp16", 1e3, "normal", 103),
]
# (rows, n_cols, BLOCK, dtype, scale, kind, seed): online kernel
ONLINE_CASES = [
    (3, 7, 16, "fp32", 1.0, "normal", 0),  # shorter than one block
    (2, 100, 16, "fp32", 1.0, "ramp", 1),  # the max grows in every block
    (4, 1, 16, "fp32", 1.0, "normal", 2),
    (2, 64, 16, "fp16", 1.0, "normal", 3),  # a whole number of blocks
    (2, 1000, 128, "fp32", 1.0, "neg_inf", 4),
    (3, 200, 32, "fp16", 1.0, "ramp", 5),
    (2, 150, 32, "fp32", 1e3, "normal", 6),  # e^1000 overflows
    (4, 100, 16, "fp32", 30.0, "masked", 7),  # first blocks masked; row 0 masked entirely
]
ONLINE_HIDDEN = [
    (3, 333, 64, "fp16", 30.0, "neg_inf", 101),
    (1, 1000, 256, "fp32", 1e3, "ramp", 102),
    (5, 17, 16, "fp16", 1.0, "ramp", 103),
    (3, 300, 64, "fp16", 1.0, "masked", 104),
]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
KERNEL_TOLERANCE = {"fp32": (2e-6, 2e-5), "fp16": (1e-5, 2e-3)}  # (atol, rtol)


def _run_kernel_case(launch, kernel, label, rows, n, dtype_name, scale, kind, seed,
                     candidates_for, block=1):
    dtype = DTYPES[dtype_name]
    device = runtime.current().device
    x_values = torch.from_numpy(logits(rows, n, seed, scale, kind, block)).to(dtype)
    x = buffers.poisoned(x_values.to(device))
    y = buffers.Canaried((rows, n), dtype, device)
    with np.errstate(all="ignore"):  # the interpreter computes with numpy: no warning noise
        guards.guarded(label, lambda: launch(kernel, x, y.tensor),
                               tensors=[x, y.tensor])
    try:
        y.verify(label)
    except registry.WrongAnswer:
        if _strided_like_contiguous(y, rows, n):
            raise registry.WrongAnswer(
                f"{label}: your kernel wrote outside the output, where a contiguous output "
                f"would lie. {ROW_STRIDE_HINT}") from None
        raise
    x64 = x_values.to(torch.float64).numpy()
    with np.errstate(invalid="ignore"):  # a row masked entirely: NaN, as torch.softmax gives
        expected = reference_softmax(x64)
    atol, rtol = KERNEL_TOLERANCE[dtype_name]
    output = y.tensor.detach().cpu().to(torch.float64).numpy()

    def stored_nothing() -> bool:  # run again into an output that starts as zeros
        again = buffers.Canaried((rows, n), dtype, device)
        again.tensor.fill_(0.0)
        with np.errstate(all="ignore"):
            guards.guarded(label, lambda: launch(kernel, x, again.tensor),
                                   tensors=[x, again.tensor])
        return bool((again.tensor == 0).all())

    try:
        registry.compare(output, expected, label, atol=atol, rtol=rtol)
    except registry.WrongAnswer as err:
        hint = _diagnose_kernel(output, x64, candidates_for(x64), max(1e-3, 10 * atol),
                                stored_nothing)
        raise registry.WrongAnswer(f"{err}\n{hint}") from None


@registry.exercise("softmax/row-kernel", "fused row-softmax Triton kernel", 2, kernel=True)
def _check_row_kernel(kernel) -> str:
    guards.require_kernel(kernel, "softmax/row-kernel", "softmax_row_kernel")
    cases = registry.with_hidden(ROW_CASES, ROW_HIDDEN)
    for number, (rows, n, dtype_name, scale, kind, seed) in enumerate(cases, 1):
        block = 1 << max(0, (n - 1).bit_length())
        label = (f"case {number}/{len(cases)} "
                 f"({_describe(rows, n, scale, kind, dtype_name, block, seed)})")
        _run_kernel_case(launch_row_softmax, kernel, label, rows, n, dtype_name, scale, kind,
                         seed, lambda x, b=block: _row_mistakes(x, b))
    return _passed(len(cases), "match the float64 reference, no write outside the output")


# ---------------------------------------------------------------- 3. online statistics (numpy)

# (rows, n, block_size, seed, scale, kind)
STATS_CASES = [
    (3, 10, 4, 0, 1.0, "normal"),
    (2, 1, 4, 1, 1.0, "normal"),  # shorter than one block
    (4, 33, 8, 2, 1.0, "ramp"),  # the max grows in every block
    (3, 64, 16, 3, 1.0, "normal"),  # a whole number of blocks
    (2, 50, 7, 4, 1.0, "neg_inf"),
    (3, 100, 16, 5, 1e3, "normal"),  # e^1000 overflows float64
    (2, 20, 1, 6, 1.0, "ramp"),  # one element at a time
    (4, 30, 4, 7, 30.0, "masked"),  # first blocks masked; row 0 masked entirely
]
STATS_HIDDEN = [
    (5, 77, 10, 101, 1e3, "ramp"),
    (1, 300, 64, 102, 5.0, "neg_inf"),
    (6, 9, 9, 103, 1.0, "normal"),
    (5, 40, 3, 104, 1e3, "masked"),
]

STATS_MISTAKES = [
    (dict(guard=False),
     "A row whose first block is masked entirely (all -inf) turns NaN: m_new is still -inf, "
     "and exp(-inf - (-inf)) is NaN. Shift by a safe max, 0 while the running max is -inf "
     "(section 4)."),
    (dict(rescale=False),
     "The running sum is not rescaled when the max grows: it was measured against the old "
     "max, and must be brought to the new one before this block's sum is added (section 4)."),
    (dict(flip_scale=True),
     "The rescale factor points the wrong way: it must shrink the old sum (a factor of at "
     "most 1), not grow it (section 4)."),
    (dict(include_old_max=False),
     "m_new must be the max over everything seen so far: with the block max alone, m ends as "
     "the max of the last block, not of the row (and the rescale factor can exceed 1 and "
     "overflow)."),
    (dict(subtract_max=False),
     "Without subtracting the running max, exp overflows for large logits (e^710 is inf in "
     "float64): exponentiate block - m_new."),
]


@registry.exercise("softmax/online-stats", "online softmax in numpy: running max and sum", 1)
def _check_online_stats(online_softmax_stats) -> str:
    _require_callable(online_softmax_stats, "softmax/online-stats", "online_softmax_stats")
    cases = registry.with_hidden(STATS_CASES, STATS_HIDDEN)
    for number, (rows, n, block, seed, scale, kind) in enumerate(cases, 1):
        x = logits(rows, n, seed, scale, kind, block)
        label = (f"case {number}/{len(cases)} "
                 f"({_describe(rows, n, scale, kind, block=block, seed=seed)})"
                 .replace("BLOCK=", "block_size="))
        original = x.copy()
        with np.errstate(all="ignore"):
            result = registry.run_student(online_softmax_stats, label, x, block)
        if not np.array_equal(x, original):
            raise registry.WrongAnswer(f"{label}: your function modified x in place.")
        if not (isinstance(result, tuple) and len(result) == 2):
            raise registry.WrongAnswer(f"{label}: return the pair (m, l), got "
                                      f"{type(result).__name__}.")
        m, total = result
        m_ref = x.max(axis=-1)  # -inf for a row masked entirely, whose sum is 0
        total_ref = np.exp(x - safe_max(m_ref)[:, None]).sum(axis=-1)
        for name, got, ref in (("the running max m", m, m_ref), ("the running sum l", total,
                                                                    total_ref)):
            try:
                registry.compare(got, ref, f"{label}, {name}", atol=1e-12, rtol=1e-9)
            except registry.WrongAnswer as err:
                hint = ("Check the two updates of section 4: the new running max, then the "
                        "running sum brought to it before this block's terms are added.")
                for switches, mistake in STATS_MISTAKES:  # recognised by their sums
                    if registry.same_result(total, blocked_stats(x, block, **switches)[1], 1e-9):
                        hint = "Likely mistake: " + mistake
                        break
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return _passed(len(cases), "give the exact row max and sum of exp(x - max)")


@registry.exercise("softmax/online-kernel", "online-softmax Triton kernel over a long row", 2,
                  kernel=True)
def _check_online_kernel(kernel) -> str:
    guards.require_kernel(kernel, "softmax/online-kernel", "online_softmax_kernel")
    cases = registry.with_hidden(ONLINE_CASES, ONLINE_HIDDEN)
    for number, (rows, n, block, dtype_name, scale, kind, seed) in enumerate(cases, 1):
        label = (f"case {number}/{len(cases)} "
                 f"({_describe(rows, n, scale, kind, dtype_name, block, seed)})")

        def launch(kernel, x, y, block=block):
            launch_online_softmax(kernel, x, y, block)

        _run_kernel_case(launch, kernel, label, rows, n, dtype_name, scale, kind, seed,
                         lambda x, b=block: _online_mistakes(x, b), block)
    return _passed(len(cases), "match the float64 reference, no write outside the output")


# ---------------------------------------------------------------- 5. merging states (numpy)


def softmax_state(scores: np.ndarray, values: np.ndarray):
    """The partial softmax state of one chunk of keys: (m, l, o) with m the row max, l the sum
    of exp(scores - m) and o the unnormalised output exp(scores - m) @ values."""
    m = scores.max(axis=-1)
    p = np.exp(scores - safe_max(m)[:, None])  # a chunk masked entirely: (-inf, 0, 0)
    return m, p.sum(axis=-1), p @ values


# (rows, n, d, split points, seed, scale, masked): with masked, row 0 is masked entirely and
# row r >= 1 has its first r chunks masked (all -inf), so their states are empty
MERGE_CASES = [
    (3, 10, 4, (5,), 0, 1.0, False),
    (4, 9, 3, (2,), 1, 1.0, False),  # unequal chunks
    (5, 40, 8, (13,), 2, 1e3, False),  # e^1000 overflows: merge with maxima, not raw sums
    (6, 12, 2, (11,), 3, 30.0, False),  # a one-key chunk
    (4, 64, 5, (16, 32, 48), 4, 10.0, False),  # four chunks merged one after the other (a ring)
    (4, 30, 3, (8, 16), 5, 30.0, True),  # empty states: masked first chunks, a masked row
]
MERGE_HIDDEN = [
    (7, 50, 6, (7, 20), 101, 1e3, False),
    (2, 30, 16, (29,), 102, 1.0, False),
    (3, 100, 4, (10, 30, 60, 90), 103, 50.0, False),
    (5, 60, 4, (10, 25, 40), 104, 1e3, True),
]


def merge_candidate(state1, state2, mistake: str):
    """What a merge with a known `mistake` returns."""
    (m1, l1, o1), (m2, l2, o2) = state1, state2
    with np.errstate(all="ignore"):
        m = np.maximum(m1, m2)
        a1, a2 = np.exp(m1 - safe_max(m)), np.exp(m2 - safe_max(m))
        if mistake == "no_guard":
            a1, a2 = np.exp(m1 - m), np.exp(m2 - m)
            return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2
        if mistake == "no_rescale":
            return m, l1 + l2, o1 + o2
        if mistake == "o_not_rescaled":
            return m, a1 * l1 + a2 * l2, o1 + o2
        if mistake == "swapped":
            return m, a2 * l1 + a1 * l2, a2[:, None] * o1 + a1[:, None] * o2
        if mistake == "flipped":
            b1, b2 = np.exp(m - m1), np.exp(m - m2)
            return m, b1 * l1 + b2 * l2, b1[:, None] * o1 + b2[:, None] * o2
        if mistake == "first_max":
            b1, b2 = np.exp(m1 - m1), np.exp(m2 - m1)
            return m1, b1 * l1 + b2 * l2, b1[:, None] * o1 + b2[:, None] * o2
        if mistake == "no_max":
            e1, e2 = np.exp(m1), np.exp(m2)
            return np.zeros_like(m), e1 * l1 + e2 * l2, e1[:, None] * o1 + e2[:, None] * o2
    raise KeyError(mistake)


MERGE_MISTAKES = {
    "no_guard": "Two empty states (chunks masked entirely: m = -inf, l = 0) merge into NaN: "
                "exp(-inf - (-inf)) is NaN. Rescale against a safe max, 0 when the merged max "
                "is -inf, so that they merge into the empty state (section 6).",
    "no_rescale": "l1 + l2 and o1 + o2 add terms measured against different maxima. Rescale "
                  "each state to the common max first (section 6).",
    "o_not_rescaled": "l is rescaled but o is not: o holds terms measured against the same "
                      "maxima and needs the same per-row factors (section 6).",
    "swapped": "The factors are swapped: each state must be rescaled from its own max to the "
               "common one (section 6).",
    "flipped": "The rescale factors point the wrong way: they must shrink each state (at most "
               "1), not grow it (section 6).",
    "first_max": "The merged max must be the larger of the two maxima, not m1: otherwise a "
                 "larger m2 overflows its rescale factor.",
    "no_max": "Rescaling each state by the exponential of its own max overflows for large "
              "scores: rescale to the common max (section 6).",
}


@registry.exercise("softmax/merge-states", "merge two partial softmax states", 1)
def _check_merge_states(merge_states) -> str:
    _require_callable(merge_states, "softmax/merge-states", "merge_states")
    cases = registry.with_hidden(MERGE_CASES, MERGE_HIDDEN)
    for number, (rows, n, d, splits, seed, scale, masked) in enumerate(cases, 1):
        rng = np.random.default_rng(registry.case_seed(seed))
        scores = rng.standard_normal((rows, n)) * scale
        values = rng.standard_normal((n, d))
        chunks = np.split(np.arange(n), list(splits))
        if masked:
            for r in range(rows):
                scores[r, :n if r == 0 else splits[min(r, len(splits)) - 1]] = -np.inf
        label = (f"case {number}/{len(cases)} ({rows} rows, {n} keys in {len(chunks)} chunks "
                 f"of {', '.join(str(len(c)) for c in chunks)}, d={d}"
                 f"{f', scores ~{scale:g}' if scale > 10 else ''}"
                 f"{', row 0 masked entirely, row r >= 1 its first r chunks' if masked else ''}"
                 f", seed={seed})")
        states = [softmax_state(scores[:, c], values[c]) for c in chunks]
        merged = states[0]
        for step, state in enumerate(states[1:], 1):
            step_label = label if len(states) == 2 else f"{label}, merge {step}"
            copies = [np.copy(a) for a in (*merged, *state)]
            with np.errstate(all="ignore"):
                result = registry.run_student(merge_states, step_label, *merged, *state)
            if any(not np.array_equal(a, b) for a, b in zip((*merged, *state), copies,
                                                              strict=True)):
                raise registry.WrongAnswer(f"{step_label}: your function modified its inputs "
                                          "in place.")
            if not (isinstance(result, tuple) and len(result) == 3):
                raise registry.WrongAnswer(f"{step_label}: return the triple (m, l, o).")
            expected = softmax_state(scores[:, np.concatenate(chunks[:step + 1])],
                                     values[np.concatenate(chunks[:step + 1])])
            for name, got, ref in zip(("m", "l", "o"), result, expected, strict=True):
                try:
                    registry.compare(got, ref, f"{step_label}, merged {name}", atol=1e-12,
                                    rtol=1e-9)
                except registry.WrongAnswer as err:
                    hint = ("Hint: m = max(m1, m2); a1 = exp(m1 - m); a2 = exp(m2 - m); "
                            "l = a1*l1 + a2*l2; o = a1*o1 + a2*o2.")
                    for mistake, why in MERGE_MISTAKES.items():
                        candidate = merge_candidate(merged, state, mistake)
                        if all(registry.same_result(g, c, 1e-9)
                               for g, c in zip(result, candidate, strict=True)):
                            hint = "Likely mistake: " + why
                            break
                    raise registry.WrongAnswer(f"{err}\n{hint}") from None
            merged = tuple(np.asarray(a) for a in result)
        with np.errstate(all="ignore"):
            attention = merged[2] / np.where(merged[1] == 0, 1.0, merged[1])[:, None]
            expected = reference_softmax(scores) @ values
        expected[np.isneginf(scores).all(axis=-1)] = 0.0  # no key at all: the output is 0
        registry.compare(attention, expected,
                        f"{label}, o / l after the last merge", atol=1e-12, rtol=1e-9)
    return _passed(len(cases), "merge to the state of the whole row")
