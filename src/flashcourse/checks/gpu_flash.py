"""Checks of lesson 1, "GPU kernels and FlashAttention": the numpy FlashAttention exercise.
Its self-check questions and veto misconceptions are data: self_checks/01-gpu-flash.toml."""

from __future__ import annotations

import tracemalloc

import numpy as np

from ..i18n import N_, _
from ..reference import standard_attention
from . import registry

LESSON = registry.lesson("gpu-flash", N_("Lesson 1: GPU kernels and FlashAttention"),
                         pass_line=8)


# (n, d, block_size or None for the default, seed, logit scale, kind); kind "extreme": rows of
# scores near -1000 (exp underflows to 0 unless shifted by the row's own max), rows near +1000
# (exp overflows unless shifted) and rows of equal scores (q = 0), as trained models produce
VISIBLE_CASES = [
    (256, 32, 32, 0, 0.5, "normal"),  # the lesson's own example
    (64, 16, 64, 1, 0.5, "normal"),  # a single block
    (100, 16, 32, 2, 0.5, "normal"),  # n not a multiple of the block size
    (257, 64, 64, 3, 0.5, "normal"),  # one row in the last block
    (130, 8, 16, 4, 1.0, "extreme"),  # many small blocks; scores near -1000, +1000, equal
    (200, 32, None, 5, 0.5, "normal"),  # the default block_size=64
    (96, 16, 32, 6, 8.0, "normal"),  # scores of magnitude ~1e3: exp must not overflow
    (2048, 4, 64, 7, 0.5, "memory"),  # its peak memory: the n x n scores are never formed
]
# The most memory a call of the "memory" case may hold at once, as a share of the n x n scores
# in float64: blocks of 64 keys (or queries) hold n x 64 at most, 1/32 of them at n = 2048.
MEMORY_SHARE = 0.25
HIDDEN_CASES = [
    (77, 24, 16, 101, 1.0, "extreme"),
    (321, 16, 128, 102, 0.3, "normal"),
    (150, 40, 64, 103, 9.0, "normal"),
]


EXTREME_NOTE = N_(", rows of scores near -1000, near +1000 and all equal")
MEMORY_NOTE = N_(", the memory it holds measured")


def _inputs(n: int, d: int, seed: int, logit_scale: float, kind: str = "normal"):
    rng = np.random.default_rng(registry.case_seed(seed))
    Q = rng.standard_normal((n, d)) * logit_scale
    K = rng.standard_normal((n, d)) * logit_scale
    V = rng.standard_normal((n, d))
    if logit_scale > 1:  # push scores towards +-1e3 and give each row one clear winner
        K[rng.integers(0, n, size=4)] *= 3
    if kind == "extreme":  # every key shares a direction u, so q = t u / 10 scores near t
        u = np.ones(d) / np.sqrt(d)
        K = 0.5 * K + 10.0 * u
        target = np.array([-1000.0, 1000.0, 0.0, 0.0])[np.arange(n) % 4]
        Q = 0.05 * Q + (target / 10.0)[:, None] * u
        Q[np.arange(n) % 4 == 2] = 0.0  # rows of equal scores (all exactly 0)
    return Q, K, V


def blocked_attention(Q, K, V, block_size, *, rescale=True, running_max=True, final_divide=True,
                      flip_scale=False, per_block_softmax=False, average_blocks=False,
                      include_old_max=True, rescale_sum=True, rescale_out=True,
                      initial_max=-np.inf):
    """Blocked attention with switches that reproduce the classic mistakes (for diagnosis)."""
    n, d = Q.shape
    out = np.zeros((n, d))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for i in range(0, n, block_size):
            q = Q[i:i + block_size]
            acc, row_sum = np.zeros((len(q), d)), np.zeros(len(q))
            row_max = np.full(len(q), initial_max)
            blocks = 0
            for j in range(0, n, block_size):
                blocks += 1
                s = q @ K[j:j + block_size].T
                if per_block_softmax:  # softmax each block on its own, then add them up
                    p = np.exp(s - s.max(axis=-1, keepdims=True))
                    acc += (p / p.sum(axis=-1, keepdims=True)) @ V[j:j + block_size]
                    continue
                block_max = s.max(axis=-1)
                new_max = np.maximum(row_max, block_max) if include_old_max else block_max
                if not running_max:
                    new_max = np.zeros_like(new_max)
                scale = np.exp(new_max - row_max) if flip_scale else np.exp(row_max - new_max)
                if not rescale:
                    scale = np.ones_like(scale)
                p = np.exp(s - new_max[:, None])
                row_sum = row_sum * (scale if rescale_sum else 1.0) + p.sum(axis=-1)
                acc = acc * (scale[:, None] if rescale_out else 1.0) + p @ V[j:j + block_size]
                row_max = new_max
            if per_block_softmax:
                out[i:i + block_size] = acc / blocks if average_blocks else acc
            else:
                out[i:i + block_size] = acc / row_sum[:, None] if final_divide else acc
    return out


SECTION = N_('section 6 ("FlashAttention: tiles and an online softmax")')
PER_BLOCK_HINT = N_(
    "This is 'softmax each block separately, then combine': each block is normalised by its "
    "own sum, so the weights of a row no longer sum to 1. The blocks must share one running "
    "max and one running sum per row; {section} explains why.")
MISTAKES = [
    (dict(per_block_softmax=True), PER_BLOCK_HINT),
    (dict(per_block_softmax=True, average_blocks=True), PER_BLOCK_HINT),
    (dict(rescale=False),
     N_("The old sum l and the old output O were not rescaled when the running max grew: both "
        "were computed against the old max. Re-read the rescaling step in {section}.")),
    (dict(rescale_out=False),
     N_("The running sum l is rescaled when the running max grows, but the output O is not: O "
        "holds weights computed against the old max too, so it needs the same rescaling as l. "
        "See {section}.")),
    (dict(rescale_sum=False),
     N_("The output O is rescaled when the running max grows, but the running sum l is not: l "
        "holds weights computed against the old max too, so it needs the same rescaling as O. "
        "See {section}.")),
    (dict(final_divide=False),
     N_("The output is never divided by the running sum: the normalisation is deferred to the "
        "end of the loop ({section}).")),
    (dict(flip_scale=True),
     N_("The rescale factor points the wrong way: the running max only grows, so the factor that "
        "corrects old values must be at most 1. See {section}.")),
    (dict(running_max=False),
     N_("Without a running max, exp(score) overflows for large scores (e^89 is inf in float32, "
        "e^710 in float64): the scores must be shifted by the running max ({section}).")),
    (dict(initial_max=0.0),
     N_("The running max never goes below 0 (it starts at 0, or the max is taken with 0): a row "
        "whose scores are all below about -745 then has exp(score - 0) = 0 for every key, and its "
        "output is 0/0 = NaN. The running max must start below every score ({section}).")),
    (dict(include_old_max=False),
     N_("The new running max ignores the old one: using only this block's max overflows or "
        "misweights rows whose largest score came in an earlier block. See {section}.")),
]

GENERIC_HINT = N_(
    "None of the mistakes the grader knows matches this output. Compare each of your four "
    "updates (running max, rescale factor, running sum, output) with the recurrences of "
    "{section}, one block at a time: the row block named above is where it first goes wrong."
)


def _diagnose(output, Q, K, V, block_size) -> str:
    for switches, hint in MISTAKES:
        if registry.same_result(output, blocked_attention(Q, K, V, block_size, **switches), 1e-6):
            return _("Likely mistake: {hint}").format(hint=_(hint).format(section=_(SECTION)))
    return _(GENERIC_HINT).format(section=_(SECTION))


def _peak_memory(flash_attention, *args, **kwargs):
    """(flash_attention's output, the most bytes it held at once while it ran): numpy's arrays
    are traced by tracemalloc, so a whole (n, n) score matrix shows."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    try:
        output = flash_attention(*args, **kwargs)
        if not tracemalloc.is_tracing():  # stopped by the call: nothing it held was seen
            return output, None
        return output, tracemalloc.get_traced_memory()[1] - start
    finally:
        if not tracing:
            tracemalloc.stop()


def _require_blocks(peak, n: int, label: str) -> None:
    scores = n * n * 8
    if not isinstance(peak, int):
        raise registry.WrongAnswer(_("{label}: the memory your function holds could not be "
                                     "measured: it stopped Python's memory tracing.").format(
                                         label=label))
    if peak > MEMORY_SHARE * scores:
        held = peak / 2**20
        raise registry.WrongAnswer(_(
            "{label}: your function held {held:.0f} MiB at once, where the whole n x n score "
            "matrix takes {scores:.0f} MiB: the output is right, but FlashAttention never forms "
            "that matrix. It walks the keys block by block and keeps only a block of scores and "
            "each row's running statistics ({section}).").format(
            label=label, held=held, scores=scores / 2**20, section=_(SECTION)))


@registry.exercise("gpu-flash/flash-attention", N_("numpy FlashAttention (online softmax)"), 4)
def _check_flash_attention(flash_attention) -> str:
    if not callable(flash_attention):
        raise registry.WrongAnswer(_("Pass the function itself: check(..., flash_attention)."))
    cases = registry.with_hidden(VISIBLE_CASES, HIDDEN_CASES)
    for number, (n, d, block, seed, logit_scale, kind) in enumerate(cases, 1):
        Q, K, V = _inputs(n, d, seed, logit_scale, kind)
        copies = [x.copy() for x in (Q, K, V)]
        notes = ((_(", scores ~1e3") if logit_scale > 1 else "")
                 + (_(EXTREME_NOTE) if kind == "extreme" else "")
                 + (_(MEMORY_NOTE) if kind == "memory" else ""))
        label = _("case {number}/{total} (n={n}, d={d}, block_size={block}, seed={seed}"
                  "{notes})").format(number=number, total=len(cases), n=n, d=d,
                                     block=block if block else _("default 64"), seed=seed,
                                     notes=notes)
        kwargs = {} if block is None else {"block_size": block}
        with np.errstate(all="ignore"):
            if kind == "memory":
                output, peak = registry.run_student(_peak_memory, label, flash_attention, Q,
                                                    K, V, **kwargs)
                _require_blocks(peak, n, label)
            else:
                output = registry.run_student(flash_attention, label, Q, K, V, **kwargs)
        if any(not np.array_equal(a, b) for a, b in zip((Q, K, V), copies, strict=True)):
            raise registry.WrongAnswer(_("{label}: your function modified Q, K or V in "
                                         "place.").format(label=label))
        expected = standard_attention(Q, K, V)
        try:
            registry.compare(output, expected, label, atol=1e-6, rtol=1e-6,
                            tile_rows=block or 64)
        except registry.WrongAnswer as err:
            hint = _diagnose(output, Q, K, V, block or 64)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    hidden = registry.hidden_note()
    return _("{total} cases match standard attention{hidden}").format(total=len(cases),
             hidden=hidden)
