"""Lesson 8's decoding exercises: the split-KV kernel's partial states, the kernel that merges
them, and decoding through the page table of a paged cache. The references are float64
states and outputs (`kernels.modern_attention.split_states`, `decode_reference`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ... import runtime
from ...kernels import modern_attention as ma
from ...models.softmax_states import merge_all, normalised, safe_max
from .. import buffers, guards, registry
from .common import (
    SECTION_GQA,
    SECTION_MERGE,
    SECTION_PAGED,
    SECTION_SPLIT,
    DecodeCase,
    close,
    decode_inputs,
    device,
    fenced,
    launch,
    named,
    passed,
    tolerance,
)

SPLIT_CASES = [
    DecodeCase((64, 40), 2, 2, 64, seed=1),  # MHA, one split cut short
    DecodeCase((100, 37, 5), 4, 2, 100, seed=2),  # GQA, ragged lengths, empty splits
    DecodeCase((50,), 4, 1, 64, split_size=16, seed=3),  # MQA, batch 1
    DecodeCase((90, 0), 2, 1, 96, split_size=48, seed=4),  # a sequence with no key
    DecodeCase((77, 64), 6, 3, 80, D=32, dtype=torch.float16, seed=5, large=True),
]
SPLIT_HIDDEN = [
    DecodeCase((128, 1, 65), 8, 2, 128, split_size=64, seed=101),
    DecodeCase((33, 31), 2, 2, 40, split_size=16, dtype=torch.float16, seed=102),
]


def _split_mistakes(case: DecodeCase, q, k, v, lengths):
    """(candidate (m, l, o), hint) of the known mistakes of the split kernel."""
    group = case.H // case.H_KV
    m, l, o = ma.split_states(q, k, v, lengths, case.split_size)
    mistakes = [((m, l, normalised(l, o)),
                 "o is stored divided by l: a split's state is unnormalised (the merge "
                 f"rescales it and divides once, at the end) ({SECTION_SPLIT}).")]
    if group > 1 and case.H_KV > 1:
        wrong = ma.split_states(q, k, v, lengths, case.split_size,
                                head_of=lambda h: h % case.H_KV)
        mistakes.append((wrong, "the query heads of K/V head kv_h are kv_h * group + g, "
                                f"g = 0 .. group - 1 ({SECTION_GQA})."))
    if case.split_size != case.block_n:
        wrong = ma.split_states(q, k, v, lengths, case.split_size,
                                start_of=lambda s: s * case.block_n)
        mistakes.append((wrong, "split s starts at key s * SPLIT_SIZE, not s * BLOCK_N: the "
                                f"splits are SPLIT_SIZE keys apart ({SECTION_SPLIT})."))
    return mistakes


def check_split(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/split-kv")
    cases = registry.with_hidden(SPLIT_CASES, SPLIT_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases))
        q, k, v, lengths = decode_inputs(case)
        qp = buffers.poisoned(q.to(device()))
        kp, vp = (guards.place_heads(x, "bhnd", case.block_n) for x in (k, v))
        splits = ma.split_count(case.n_max, case.split_size)
        m = buffers.Canaried((case.B, case.H, splits), torch.float32, device())
        l = buffers.Canaried((case.B, case.H, splits), torch.float32, device())
        o = buffers.Canaried((case.B, case.H, splits, case.D), torch.float32, device())
        lengths_t = fenced(lengths, 0)
        runtime.check_tensors(qp, kp, vp, names=("q", "k", "v"), dot=True)
        launch(label, ma.launch_split_decode, kernel, qp, kp, vp, lengths_t, m.tensor,
                l.tensor, o.tensor, case.split_size, case.block_n)
        for buffer, name in ((m, "m"), (l, "l"), (o, "o")):
            buffer.verify(f"{label}, the states' {name}")
        expected = ma.split_states(q, k, v, lengths, case.split_size)
        got = tuple(x.tensor.detach().cpu().double().numpy() for x in (m, l, o))
        atol, rtol = tolerance(case.dtype)
        for name, mine, ref in zip(("m", "l", "o"), got, expected, strict=True):
            try:
                registry.compare(mine, ref, f"{label}, the states' {name}", atol=atol,
                                 rtol=rtol)
            except registry.WrongAnswer as err:
                raise registry.WrongAnswer(
                    f"{err}\n{_diagnose_split(got, expected, case, q, k, v, lengths)}"
                ) from None
    return passed(len(cases), "give every split's (m, l, o)")


def _diagnose_split(got, expected, case, q, k, v, lengths) -> str:
    m, l, o = got
    if m.shape[-1] > 1 and not np.isnan(m[..., 0]).any() and np.isnan(m[..., 1:]).all():
        return ("Likely mistake: the states of splits 1, 2, ... were never written (they still "
                "hold the grader's NaN): each split stores at its own index, b * smb + heads * "
                f"smh + split ({SECTION_SPLIT}).")
    if np.isnan(o).any() or np.isnan(l).any():
        return ("Likely mistake: the split holding a sequence's last key read past its length "
                "(the grader puts NaN in every slot past it): the split ends at the smaller of "
                "lo + SPLIT_SIZE and seq_len, and the last block masks keys at or past that "
                f"end ({SECTION_SPLIT}).")
    empty = np.isneginf(expected[0])
    if empty.any() and not np.isneginf(m[empty]).all():
        return ("Likely mistake: a split past a sequence's length must store the empty state "
                f"(m = -inf, l = 0, o = 0) ({SECTION_SPLIT}).")
    for candidate, hint in _split_mistakes(case, q, k, v, lengths):
        if all(close(a, np.asarray(b)) for a, b in zip(got, candidate, strict=True)):
            return "Likely mistake: " + hint
    cut = ma.split_states(q, k, v, lengths, case.split_size)
    if close(m, cut[0]) and not close(l, cut[1]):
        return ("Likely mistake: the running max is right but the sums are not: scores of keys "
                "past the split's end must be -inf before the softmax update, or the loaded 0s "
                f"count as keys ({SECTION_SPLIT}).")
    return ("Hint: split s covers keys [s * SPLIT_SIZE, min((s + 1) * SPLIT_SIZE, seq_len)) and "
            "stores its running max, running sum and unnormalised accumulator "
            f"({SECTION_SPLIT}).")


# ---------------------------------------------------------------- 5. merging the splits


MERGE_CASES = [
    DecodeCase((64, 40), 2, 2, 64, seed=11),
    DecodeCase((100, 37, 5), 4, 2, 100, seed=12),  # splits past the lengths: empty states
    DecodeCase((90, 0), 2, 1, 96, split_size=16, seed=13),  # a sequence with no key
    DecodeCase((77,), 4, 4, 80, split_size=16, seed=14, large=True),
]
MERGE_HIDDEN = [
    DecodeCase((200, 3), 2, 1, 200, split_size=16, seed=111, large=True),
    DecodeCase((0, 0), 2, 2, 16, split_size=16, seed=112),
]


def merge_candidate(m, l, o, mistake: str) -> np.ndarray:
    """The merged output with a known mistake, from states m, l (B, H, S), o (B, H, S, D),
    computed in float32 like the kernel (so that underflows happen where the kernel's do)."""
    m, l, o = (np.asarray(x, dtype=np.float32) for x in (m, l, o))
    with np.errstate(all="ignore"):
        top = m.max(axis=-1, keepdims=True)
        if mistake == "no_rescale":
            return normalised(l.sum(-1), o.sum(-2))
        if mistake == "no_guard":
            w = np.exp(m - top)
            return (w[..., None] * o).sum(-2) / (w * l).sum(-1)[..., None]
        if mistake == "pad_zero":
            top = np.maximum(top, 0.0)
            w = np.exp(m - top)
            return normalised((w * l).sum(-1), (w[..., None] * o).sum(-2))
        if mistake == "no_divide":
            return merge_all(m, l, o)[2]
        if mistake == "o_not_rescaled":
            w = np.exp(m - safe_max(top))
            return normalised((w * l).sum(-1), o.sum(-2))
        if mistake == "flipped":
            w = np.exp(safe_max(top) - m)
            w = np.where(np.isneginf(m), 0.0, w)
            return normalised((w * l).sum(-1), (w[..., None] * o).sum(-2))
    raise KeyError(mistake)


MERGE_MISTAKES = {
    "no_rescale": "the states are added without rescaling: each split's l and o were measured "
                  f"against its own max; bring them to the common max first ({SECTION_MERGE}).",
    "no_guard": "a sequence with no key at all (every split empty) comes out NaN: use a safe max "
                f"(0 when every m is -inf) and divide by 1 where l is 0 ({SECTION_MERGE}).",
    "pad_zero": "the lanes past the last split load m as 0, not -inf: 0 then wins the max, and "
                "the real states underflow when their scores are far below 0. Padding must load "
                f"as -inf (and l, o as 0) ({SECTION_MERGE}).",
    "no_divide": f"the merged o is stored without dividing by the merged l ({SECTION_MERGE}).",
    "o_not_rescaled": "l is rescaled but o is not: both need the same per-split weights "
                      f"({SECTION_MERGE}).",
    "flipped": "the weights point the wrong way: exp(m_s - m) brings split s down to the "
               f"common max (a factor of at most 1) ({SECTION_MERGE}).",
}


def _shifted_states(case: DecodeCase):
    """Split states of a case; with `large`, every score sits near -500, so that a merge whose
    max includes a spurious 0 underflows."""
    q, k, v, lengths = decode_inputs(dataclasses.replace(case, large=False))
    m, l, o = ma.split_states(q, k, v, lengths, case.split_size)
    if case.large:
        m = m - 500.0
    return m, l, o


def check_merge(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/merge-splits")
    cases = registry.with_hidden(MERGE_CASES, MERGE_HIDDEN)
    for number, case in enumerate(cases, 1):
        splits = ma.split_count(case.n_max, case.split_size)
        label = (f"case {number}/{len(cases)} ({case.B} sequences of lengths "
                 f"{list(case.lengths)}, H={case.H}, D={case.D}, {splits} splits of "
                 f"{case.split_size} keys{', scores near -500' if case.large else ''}, "
                 f"seed={case.seed})")
        m, l, o = _shifted_states(case)
        mp, lp, op = (buffers.poisoned(torch.from_numpy(x).float().to(device()))
                      for x in (m, l, o))
        out = buffers.Canaried((case.B, case.H, case.D), torch.float32, device())
        launch(label, ma.launch_merge, kernel, mp, lp, op, out.tensor)
        out.verify(label)
        m32, l32, o32 = (x.astype(np.float32).astype(np.float64) for x in (m, l, o))
        _, l_all, o_all = merge_all(m32, l32, o32)
        expected = normalised(l_all, o_all)
        got = out.tensor.detach().cpu().double().numpy()
        try:
            registry.compare(got, expected, label, atol=1e-5, rtol=1e-4)
        except registry.WrongAnswer as err:
            candidates = [(merge_candidate(m32, l32, o32, name), why)
                          for name, why in MERGE_MISTAKES.items()]
            hint = named(got, candidates, (
                "Hint: m = max of the splits' m; weight_s = exp(m_s - m) (m safe when every "
                "m_s is -inf); l = sum weight_s l_s; o = sum weight_s o_s / l "
                f"({SECTION_MERGE})."),
                tol=1e-4)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return passed(len(cases), "merge to attention over the whole cache")


# ---------------------------------------------------------------- 6. the paged cache


PAGED_CASES = [
    DecodeCase((64, 40, 9), 2, 2, 64, seed=21),  # pages out of order, MHA, a one-page sequence
    DecodeCase((37, 100, 5), 4, 2, 100, seed=22, page_size=16),  # lengths not whole pages
    DecodeCase((50,), 4, 1, 64, seed=23, page_size=8, block_n=16),  # a block spans two pages
    DecodeCase((90, 0), 2, 1, 96, seed=24, page_size=32, block_n=16),  # a sequence with no key
    DecodeCase((45, 61), 6, 3, 64, D=32, dtype=torch.float16, seed=25, page_size=16),
]
PAGED_HIDDEN = [
    DecodeCase((3, 129, 16), 8, 2, 129, seed=121, page_size=4, block_n=16),
    DecodeCase((70,), 2, 2, 70, dtype=torch.float16, seed=122, page_size=64, block_n=16,
               large=True),
]


def _zero_keys_counted(q, k, v, lengths, block_n: int) -> np.ndarray:
    """Decoding where the positions past each length, up to the end of the last block of
    BLOCK_N, count as keys whose key and value are 0 (masked loads, scores not masked)."""
    rounded = [ma.cdiv(int(n), block_n) * block_n for n in lengths]
    size = max(rounded + [1])
    kk = torch.zeros(*k.shape[:2], size, k.shape[3], dtype=torch.float64)
    vv = torch.zeros_like(kk)
    for b, n in enumerate(lengths):
        kk[b, :, :int(n)] = k[b, :, :int(n)].double()
        vv[b, :, :int(n)] = v[b, :, :int(n)].double()
    return ma.decode_reference(q, kk, vv, rounded).numpy()


def _paged_candidates(case, q, k, v, lengths, k_pages, v_pages, table):
    """(candidate output, hint) of the known mistakes of the paged kernel."""
    B = case.B
    page_size = case.page_size
    total = k_pages.shape[0]
    flat_k = k_pages.double().reshape(total * page_size, case.H_KV, case.D)
    flat_v = v_pages.double().reshape(total * page_size, case.H_KV, case.D)

    def through(address_of):
        """Attention over keys read from the flat page storage at address_of(b, pos)."""
        kk = torch.zeros_like(k.double())
        vv = torch.zeros_like(v.double())
        for b in range(B):
            for pos in range(int(lengths[b])):
                a = address_of(b, pos)
                inside = 0 <= a < total * page_size
                kk[b, :, pos] = flat_k[a] if inside else float("nan")
                vv[b, :, pos] = flat_v[a] if inside else float("nan")
        return ma.decode_reference(q, kk, vv, lengths, keep_nan=True).numpy()

    return [
        (_zero_keys_counted(q, k, v, lengths, case.block_n),
         "the scores of the positions past seq_len in the last block are not -inf: their keys "
         "load as 0, and a score of 0 counts as a key with weight exp(0 - m) "
         f"({SECTION_PAGED})."),
        (through(lambda b, p: p),
         "the page number is the position's page index itself: look it up in the page "
         "table, page = Pages[b, pos // PAGE_SIZE] (the pages of a sequence are scattered) "
         f"({SECTION_PAGED})."),
        (through(lambda b, p: int(table[b, p // page_size]) * page_size + p),
         "the slot inside the page is the position itself: it is pos % PAGE_SIZE "
         f"({SECTION_PAGED})."),
        (through(lambda b, p: int(table[0, p // page_size]) * page_size + p % page_size),
         "every sequence reads the page table of sequence 0: its row starts at Pages + b * "
         f"s_pages ({SECTION_PAGED})."),
        (through(lambda b, p: int(table[b, p // case.block_n]) * page_size + p % page_size),
         "the page index divides the position by BLOCK_N, not by PAGE_SIZE: a page holds "
         f"PAGE_SIZE keys whatever the block size ({SECTION_PAGED})."),
    ]


def check_paged(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/paged-decode")
    cases = registry.with_hidden(PAGED_CASES, PAGED_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = case.label(number, len(cases), paged=True)
        q, k, v, lengths = decode_inputs(case)
        k_pages, v_pages, table, nan_page = ma.paged_cache(k, v, case.lengths, case.page_size,
                                                    seed=registry.case_seed(case.seed))
        qp = buffers.poisoned(q.to(device()))
        kp = buffers.poisoned(k_pages.to(device()), pad_rows=case.block_n)
        vp = buffers.poisoned(v_pages.to(device()), pad_rows=case.block_n)
        table_t, lengths_t = fenced(table, nan_page), fenced(lengths, 0)
        out = buffers.Canaried((case.B, case.H, case.D), case.dtype, device())
        runtime.check_tensors(qp, kp, vp, names=("q", "k_pages", "v_pages"), dot=True)
        launch(label, ma.launch_paged_decode, kernel, qp, kp, vp, table_t, lengths_t,
                out.tensor, case.block_n)
        out.verify(label)
        expected = ma.decode_reference(q, k, v, lengths).numpy()
        got = out.tensor.detach().cpu().double().numpy()
        atol, rtol = tolerance(case.dtype)
        try:
            registry.compare(got, expected, label, atol=atol, rtol=rtol)
        except registry.WrongAnswer as err:
            candidates = _paged_candidates(case, q, k, v, lengths, k_pages, v_pages, table)
            where = ("Key position pos of sequence b lives in page Pages[b, pos // PAGE_SIZE], "
                     "slot pos % PAGE_SIZE; K and V each use their own page and slot strides "
                     f"({SECTION_PAGED}).")
            fallback = ("Likely mistake: a key or value was read from a page or slot it does "
                        "not live in (the grader fills unused pages and slots with NaN). "
                        + where if np.isnan(got).any() else "Hint: " + where)
            empty = np.asarray(case.lengths) == 0
            if empty.any() and np.isnan(got[empty]).all() and not np.isnan(got[~empty]).any():
                fallback = ("Likely mistake: a sequence with no key (length 0) comes out NaN "
                            "(0 / 0): its output must be 0, as in exercise 2: divide by a sum "
                            f"that is 1 where it is 0 ({SECTION_PAGED}).")
            hint = named(got, candidates, fallback)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return passed(len(cases), "match attention over each sequence's keys")
