"""Lesson 9's decoding exercise, written from scratch: the split size that fills the GPU, the
kernel that decodes one split of a paged cache for a whole group of query heads and writes its
softmax state, and the kernel that merges the states. The references are float64 states and
outputs (`kernels.modern_attention.split_states`, `decode_reference`); known mistakes are
named by float64 states computed with the mistake made (`_split_mistakes`)."""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
import torch

from ... import runtime
from ...i18n import N_, _
from ...kernels import LOG2E
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
    require_callable,
    shown,
    tolerance,
)

# ---------------------------------------------------------------- the split size

# (batch, kv_heads, max_len, num_sms, block_n)
SPLIT_SIZE_CASES = [
    (1, 8, 131072, 132, 64),  # one sequence, 8 K/V heads: many splits
    (64, 8, 4096, 132, 64),  # the batch alone gives two waves: one split
    (8, 32, 32768, 132, 64),  # 256 programs unsplit: a few splits
    (1, 1, 100, 132, 16),  # too short for two waves: splits of one block
    (2, 4, 5000, 108, 32),  # a cache that is no whole number of blocks
    (3, 2, 777, 16, 16),
]
SPLIT_SIZE_HIDDEN = [
    (1, 32, 131072, 132, 128),
    (4, 8, 65536, 132, 64),
    (16, 1, 1000, 78, 16),
    (1, 4, 16, 132, 16),  # a cache of one block
]


def programs_of(batch: int, kv_heads: int, max_len: int, split_size: int) -> int:
    """Programs of the split kernel: one per (split, sequence, K/V head)."""
    return batch * kv_heads * ma.split_count(max_len, split_size)


def split_size_reference(batch: int, kv_heads: int, max_len: int, num_sms: int,
                         block_n: int) -> int:
    """The largest whole number of blocks per split that still gives two waves of programs
    (or one block per split when the cache is too short for two waves)."""
    blocks = max(1, ma.cdiv(max_len, block_n))
    target = min(2 * num_sms, batch * kv_heads * blocks)
    size = blocks * block_n
    while programs_of(batch, kv_heads, max_len, size) < target:
        size -= block_n
    return size


def _split_size_problem(size, batch, kv_heads, max_len, num_sms, block_n) -> str | None:
    """What is wrong with a split size for this shape, or None."""
    blocks = max(1, ma.cdiv(max_len, block_n))
    if size < block_n or size % block_n:
        return (_("{size} keys is not a whole number of blocks of BLOCK_N={block_n}: the kernel "
                  "walks a split one block at a time, and the launcher refuses it "
                  "({section_split}).").format(size=size, block_n=block_n,
                  section_split=_(SECTION_SPLIT)))
    if size > blocks * block_n:
        return (_("{size} keys is more than the whole cache ({max_len} keys, {blocks} blocks): "
                  "one split of the cache's blocks already holds every key "
                  "({section_split}).").format(size=size, max_len=max_len, blocks=blocks,
                  section_split=_(SECTION_SPLIT)))
    programs = programs_of(batch, kv_heads, max_len, size)
    target = min(2 * num_sms, batch * kv_heads * blocks)
    if programs < target:
        wave = (_("two waves on {num_sms} SMs").format(
                  num_sms=num_sms) if target == 2 * num_sms else
                _("one block per split, the most this cache allows"))
        return (_("splits of {size} keys give {programs} programs for {num_sms} SMs, fewer than "
                  "the {target} of {wave}: SMs sit idle and the step cannot reach the memory's "
                  "bandwidth. Smaller splits give more programs ({section_split}).").format(
                  size=size, programs=programs, num_sms=num_sms, target=target, wave=wave,
                  section_split=_(SECTION_SPLIT)))
    larger = programs_of(batch, kv_heads, max_len, 4 * size)
    if ma.split_count(max_len, size) > 1 and larger >= target:
        return (_("splits of {size} keys give {programs} programs, and splits four times as large "
                  "would still give {larger}, at least {target}: the extra splits only add states "
                  "for the merge to read and write ({section_merge}). The batch and the heads "
                  "count towards the programs too ({section_split}).").format(size=size,
                  programs=programs, larger=larger, target=target, section_merge=_(SECTION_MERGE),
                  section_split=_(SECTION_SPLIT)))
    return None


def check_split_size(choose_split_size) -> str:
    require_callable(choose_split_size, "modern-attention/split-size", "choose_split_size")
    cases = registry.with_hidden(SPLIT_SIZE_CASES, SPLIT_SIZE_HIDDEN)
    for number, (batch, kv_heads, max_len, num_sms, block_n) in enumerate(cases, 1):
        label = (_("case {number}/{total} (batch={batch}, kv_heads={kv_heads}, max_len={max_len}, "
                   "num_sms={num_sms}, block_n={block_n})").format(number=number, total=len(cases),
                   batch=batch, kv_heads=kv_heads, max_len=max_len, num_sms=num_sms,
                   block_n=block_n))
        size = registry.run_student(choose_split_size, label, batch, kv_heads, max_len,
                                    num_sms, block_n)
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            raise registry.WrongAnswer(_("{label}: return the split size as a whole number of "
                                         "keys (an int), not {type_name}.").format(label=label,
                                         type_name=type(size).__name__))
        problem = _split_size_problem(int(size), batch, kv_heads, max_len, num_sms, block_n)
        if problem:
            raise registry.WrongAnswer(f"{label}: {problem}")
    return passed(len(cases), _("give whole blocks, two waves and no needless splits"))


# ---------------------------------------------------------------- the split kernel


SPLIT_CASES = [
    # MHA, pages as large as BLOCK_N, a one-page sequence
    DecodeCase((64, 40, 9), 2, 2, 64, seed=1, page_size=16),
    # GQA, ragged lengths, splits with no key, pages smaller than BLOCK_N (a block spans two)
    DecodeCase((100, 37, 5), 4, 2, 100, seed=2, page_size=8),
    # MQA, batch 1, pages larger than BLOCK_N (a page boundary inside a split)
    DecodeCase((50,), 4, 1, 64, split_size=16, seed=3, page_size=32),
    # a sequence with no key at all, pages of 4
    DecodeCase((90, 0), 2, 1, 96, split_size=48, seed=4, page_size=4),
    # groups of 2 over 3 K/V heads, fp16, scores of about 1e3
    DecodeCase((77, 64), 6, 3, 80, D=32, dtype=torch.float16, seed=5, large=True),
]
SPLIT_HIDDEN = [
    DecodeCase((128, 1, 65), 8, 2, 128, split_size=64, seed=101, page_size=4),
    DecodeCase((33, 31), 2, 2, 40, split_size=16, dtype=torch.float16, seed=102,
               page_size=64),
    DecodeCase((0, 45), 9, 3, 48, split_size=16, seed=103, page_size=8),
]


def paged_label(case: DecodeCase, number: int, total: int) -> str:
    return _("case {number}/{total} (lengths {lengths} in pages of {page_size} keys out of "
             "order, H={H}, H_KV={H_KV}, D={D}, {dtype}, split size {split_size}, "
             "BLOCK_N={block_n}{large}, seed={seed})").format(
        number=number, total=total, lengths=list(case.lengths), page_size=case.page_size,
        H=case.H, H_KV=case.H_KV, D=case.D, dtype=guards.dtype_name(case.dtype),
        split_size=case.split_size, block_n=case.block_n,
        large=_(", scores ~1e3") if case.large else "", seed=case.seed)


def _read_through(case, k, lengths, k_pages, table, address_of):
    """The cache as a kernel sees it that reads position pos of sequence b from row
    address_of(b, pos) of the flat pool (NaN outside the pool)."""
    total = k_pages.shape[0] * case.page_size
    flat = k_pages.double().reshape(total, case.H_KV, case.D)
    seen = torch.full(k.shape, float("nan"), dtype=torch.float64)
    for b in range(case.B):
        for pos in range(int(lengths[b])):
            row = address_of(b, pos)
            if 0 <= row < total:
                seen[b, :, pos] = flat[row]
    return seen


def _zero_keys_counted(case, m, l, o, lengths):
    """States where the positions of a split's last block past its end count as keys of
    score 0 and value 0 (masked loads, scores left unmasked)."""
    m, l, o = m.copy(), l.copy(), o.copy()
    with np.errstate(all="ignore"):
        for b, n in enumerate(lengths):
            for s in range(m.shape[-1]):
                lo, hi = s * case.split_size, min((s + 1) * case.split_size, int(n))
                if lo >= hi:
                    continue
                extra = ma.cdiv(hi - lo, case.block_n) * case.block_n - (hi - lo)
                if not extra:
                    continue
                top = np.maximum(m[b, :, s], 0.0)
                scale = np.exp(m[b, :, s] - top)
                l[b, :, s] = l[b, :, s] * scale + extra * np.exp(-top)
                o[b, :, s] = o[b, :, s] * scale[:, None]
                m[b, :, s] = top
    return m, l, o


def _max_from_zero(m, l, o):
    """States of a running max that starts at 0 instead of -inf."""
    with np.errstate(all="ignore"):
        top = np.maximum(m, 0.0)
        scale = np.exp(m - top)
        return top, l * scale, o * scale[..., None]


def _split_mistakes(case, q, k, v, lengths, k_pages, v_pages, table):
    """(candidate (m, l, o), hint) of the known mistakes of the paged split kernel."""
    group, size, page = case.H // case.H_KV, case.split_size, case.page_size

    def states(**kwargs):
        return ma.split_states(q, k, v, lengths, size, **kwargs)

    def through(address_of):
        kk = _read_through(case, k, lengths, k_pages, table, address_of)
        vv = _read_through(case, v, lengths, v_pages, table, address_of)
        return ma.split_states(q, kk, vv, lengths, size)

    m, l, o = states()
    divided = (_("o is stored divided by l: a split's state is unnormalised; the merge rescales "
                 "it and divides once, at the end ({section_split}).").format(
                 section_split=_(SECTION_SPLIT)))
    with np.errstate(all="ignore"):
        mistakes = [((m, l, normalised(l, o)), divided), ((m, l, o / l[..., None]), divided)]
    mistakes += [
        ((m * LOG2E, l, o),
         _("m is in base-2 units (the max of the scores times log2(e)); the state is lesson 5's, "
           "in natural units, so that any merge of states can combine it "
           "({section_split}).").format(section_split=_(SECTION_SPLIT))),
        (states(sm_scale=1.0),
         _("the scores are not multiplied by sm_scale, the scale the launcher passes "
           "({section_split}).").format(section_split=_(SECTION_SPLIT))),
        (_zero_keys_counted(case, m, l, o, lengths),
         _("positions of a split's last block past the sequence's end count as keys: their loads "
           "give 0, and a score of 0 still gets a weight in the softmax unless it is -inf "
           "({section_split}).").format(section_split=_(SECTION_SPLIT))),
        (_max_from_zero(m, l, o),
         _("the running max starts at 0 instead of -inf: a split with no key must store the empty "
           "state (-inf, 0, 0), which the merge ignores, and a split whose scores are all "
           "negative is measured against the wrong max ({section_split}).").format(
           section_split=_(SECTION_SPLIT))),
        (through(lambda b, p: p),
         _("each position is read as if the pages of a sequence lay one after another from page "
           "0: the page number comes from the page table, which scatters a sequence's pages over "
           "the pool ({section_paged}).").format(section_paged=_(SECTION_PAGED))),
        (through(lambda b, p: int(table[b, p // page]) * page + p),
         _("the slot inside the page is wrong: a page holds PAGE_SIZE positions, and each "
           "position has its place inside its own page ({section_paged}).").format(
           section_paged=_(SECTION_PAGED))),
        (through(lambda b, p: int(table[0, p // page]) * page + p % page),
         _("every sequence reads the page table row of sequence 0: each sequence has its own row, "
           "found with the table's row stride ({section_paged}).").format(
           section_paged=_(SECTION_PAGED))),
        (through(lambda b, p: int(table[b, p // case.block_n]) * page + p % page),
         _("the table entry of a position is found with BLOCK_N: a page holds PAGE_SIZE keys "
           "whatever the block size ({section_paged}).").format(section_paged=_(SECTION_PAGED))),
    ]
    if group > 1 and case.H_KV > 1:
        mistakes.append((states(head_of=lambda h: h % case.H_KV),
                         _("the query heads of a group are not the ones that read this K/V head: "
                           "a group is made of consecutive query heads ({section_gqa}).").format(
                           section_gqa=_(SECTION_GQA))))
    if size != case.block_n:
        mistakes.append((states(start_of=lambda s: s * case.block_n),
                         _("the splits start BLOCK_N keys apart instead of SPLIT_SIZE keys: they "
                           "overlap and miss the end of the cache ({section_split}).").format(
                           section_split=_(SECTION_SPLIT))))
    return mistakes


def _split_of_the_end(case, lengths, splits) -> np.ndarray:
    """(B, S) True for the splits a sequence's end cuts short or leaves empty."""
    starts = np.arange(splits) * case.split_size
    ends = np.asarray([int(n) for n in lengths])[:, None]
    return starts[None, :] + case.split_size > ends


def _spoiled(m, l, o) -> np.ndarray:
    """(B, H, S) True where a state holds a NaN anywhere."""
    return np.isnan(m) | np.isnan(l) | np.isnan(o).any(axis=-1)


def _same_states(got, candidate, tol: float) -> bool:
    """The states agree: NaN in the same states (where a NaN lands inside a state depends on
    how the max treats it) and close values everywhere else."""
    got_bad, cand_bad = _spoiled(*got), _spoiled(*candidate)
    if got_bad.shape != cand_bad.shape or not np.array_equal(got_bad, cand_bad):
        return False
    keep = ~got_bad
    return all(close(np.asarray(a)[keep], np.asarray(b)[keep], tol)
               for a, b in zip(got, candidate, strict=True))


def _diagnose_split(got, expected, case, q, k, v, lengths, k_pages, v_pages, table) -> str:
    tol = guards.mistake_tolerance(case.dtype)
    for candidate, hint in _split_mistakes(case, q, k, v, lengths, k_pages, v_pages, table):
        if _same_states(got, candidate, tol):
            return _("Likely mistake: ") + hint
    m, l, o = got
    if m.shape[-1] > 1 and not np.isnan(m[..., 0]).any() and np.isnan(m[..., 1:]).all():
        return (_("Likely mistake: only split 0's states were written: each split stores at its "
                  "own index along the states' split axis ({section_split}).").format(
                  section_split=_(SECTION_SPLIT)))
    empty = np.isneginf(expected[0])
    if empty.any() and np.isnan(m[empty]).all() and not np.isnan(m[~empty]).any():
        return (_("Likely mistake: the splits with no key (past a sequence's end) never stored "
                  "their state (it still holds the grader's NaN): every program stores one, and "
                  "an empty split's is the empty state (-inf, 0, 0) ({section_split}).").format(
                  section_split=_(SECTION_SPLIT)))
    if empty.any() and not np.isneginf(m[empty]).all():
        return (_("Likely mistake: a split with no key must store the empty state (m = -inf, l = "
                  "0, o = 0), which the merge ignores ({section_split}).").format(
                  section_split=_(SECTION_SPLIT)))
    bad = _spoiled(m, l, o).any(axis=1)  # (B, S)
    if bad.any():
        if (bad <= _split_of_the_end(case, lengths, m.shape[-1])).all():
            return (_("Likely mistake: a split read keys past its sequence's length (the grader "
                      "fills every slot and page a sequence does not own with NaN): a split ends "
                      "where the sequence ends, and the last block masks its loads there "
                      "({section_split}).").format(section_split=_(SECTION_SPLIT)))
        return (_("Likely mistake: keys were read from a page or a slot they do not live in (the "
                  "grader fills every unused page, slot and table entry with NaN): find each "
                  "position's page through its sequence's row of the table, then its slot, with "
                  "the pool's own strides ({section_paged}).").format(
                  section_paged=_(SECTION_PAGED)))
    if close(m, expected[0], tol) and not close(l, expected[1], tol):
        return (_("Likely mistake: the running max is right but the sums are not: check the "
                  "rescaling of l and o when the max grows ({section_split}).").format(
                  section_split=_(SECTION_SPLIT)))
    return (_("Hint: split s covers the keys from s * SPLIT_SIZE up to the end of the split or of "
              "the sequence, whichever comes first, read through the page table; it stores the "
              "running max, the running sum and the unnormalised output ({section_split}, "
              "{section_paged}).").format(section_split=_(SECTION_SPLIT),
              section_paged=_(SECTION_PAGED)))


def paged_inputs(case: DecodeCase):
    """q, the contiguous cache k, v (NaN past each length), lengths, and the same cache in
    shuffled pages with its table and the NaN page."""
    q, k, v, lengths = decode_inputs(case)
    k_pages, v_pages, table, nan_page = ma.paged_cache(k, v, case.lengths, case.page_size,
                                                      seed=registry.case_seed(case.seed))
    return q, k, v, lengths, k_pages, v_pages, table, nan_page


def check_paged_split(kernel) -> str:
    guards.require_jit_kernel(kernel, "modern-attention/paged-split")
    cases = registry.with_hidden(SPLIT_CASES, SPLIT_HIDDEN)
    for number, case in enumerate(cases, 1):
        label = paged_label(case, number, len(cases))
        q, k, v, lengths, k_pages, v_pages, table, nan_page = paged_inputs(case)
        qp = buffers.poisoned(q.to(device()))
        kp = buffers.poisoned(k_pages.to(device()), pad_rows=case.block_n)
        vp = buffers.poisoned(v_pages.to(device()), pad_rows=case.block_n)
        table_t, lengths_t = fenced(table, nan_page), fenced(lengths, 0)
        splits = ma.split_count(case.n_max, case.split_size)
        m = buffers.Canaried((case.B, case.H, splits), torch.float32, device())
        l = buffers.Canaried((case.B, case.H, splits), torch.float32, device())
        o = buffers.Canaried((case.B, case.H, splits, case.D), torch.float32, device())
        runtime.check_tensors(qp, kp, vp, names=("q", "k_pages", "v_pages"), dot=True)
        launch(label, ma.launch_paged_split, kernel, qp, kp, vp, table_t, lengths_t, m.tensor,
               l.tensor, o.tensor, case.split_size, case.block_n)
        for buffer, name in ((m, "m"), (l, "l"), (o, "o")):
            buffer.verify(_("{label}, the states' {name}").format(label=label, name=name))
        expected = ma.split_states(q, k, v, lengths, case.split_size)
        got = tuple(x.tensor.detach().cpu().double().numpy() for x in (m, l, o))
        atol, rtol = tolerance(case.dtype)
        for name, mine, ref in zip(("m", "l", "o"), got, expected, strict=True):
            try:
                registry.compare(mine, ref, _("{label}, the states' {name}").format(label=label,
                                              name=name), atol=atol,
                                 rtol=rtol)
            except registry.WrongAnswer as err:
                hint = _diagnose_split(got, expected, case, q, k, v, lengths, k_pages,
                                       v_pages, table)
                raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return passed(len(cases), _("give every split's (m, l, o) through the page table"))


# ---------------------------------------------------------------- merging the splits


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
        if mistake == "mean_of_splits":
            has_key = l > 0
            each = np.where(has_key[..., None], o / np.where(has_key, l, 1.0)[..., None], 0.0)
            count = np.maximum(has_key.sum(-1), 1)[..., None]
            return each.sum(-2) / count
    raise KeyError(mistake)


MERGE_MISTAKES = {
    "no_rescale": N_("the states are added without rescaling: each split's l and o were measured "
                     "against its own max; bring them to the common max first ({section_merge})."),
    "no_guard": N_("a sequence with no key at all (every split empty) comes out NaN: its max is "
                   "-inf, and the weights and the final division need lesson 5's guards "
                   "({section_merge})."),
    "pad_zero": N_("the lanes past the last split load m as 0, not -inf: 0 then wins the max, and "
                   "the real states underflow when their scores are far below 0. Padding lanes "
                   "must load the empty state ({section_merge})."),
    "no_divide": N_("the merged o is stored without dividing by the merged l ({section_merge})."),
    "o_not_rescaled": N_("l is rescaled but o is not: both need the same per-split weights "
                         "({section_merge})."),
    "flipped": N_("the weights point the wrong way: bringing a split to the common max is a "
                  "factor of at most 1 ({section_merge})."),
    "mean_of_splits": N_("each split is normalised on its own and the results averaged: splits "
                         "weigh by their share of the softmax's sum, so the division comes once, "
                         "after the merged sum ({section_merge})."),
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
    guards.require_jit_kernel(kernel, "modern-attention/merge-states")
    cases = registry.with_hidden(MERGE_CASES, MERGE_HIDDEN)
    for number, case in enumerate(cases, 1):
        splits = ma.split_count(case.n_max, case.split_size)
        sequences = (_("{count} sequences") if case.B > 1 else _("{count} sequence")).format(
            count=case.B)
        label = _("case {number}/{total} ({sequences} of lengths {lengths}, H={H}, D={D}, "
                  "{splits} splits of {split_size} keys{large}, seed={seed})").format(
            number=number, total=len(cases), sequences=sequences, lengths=list(case.lengths),
            H=case.H, D=case.D, splits=splits, split_size=case.split_size,
            large=_(", scores near -500") if case.large else "", seed=case.seed)
        m, l, o = _shifted_states(case)
        mp, lp, op = (buffers.poisoned(torch.from_numpy(x).float().to(device()))
                      for x in (m, l, o))
        out = buffers.Canaried((case.B, case.H, case.D), torch.float32, device())
        launch(label, ma.launch_merge, kernel, mp, lp, op, out.tensor)
        out.verify(label)
        m32, l32, o32 = (x.astype(np.float32).astype(np.float64) for x in (m, l, o))
        _unused, l_all, o_all = merge_all(m32, l32, o32)
        expected = normalised(l_all, o_all)
        got = out.tensor.detach().cpu().double().numpy()
        try:
            registry.compare(got, expected, label, atol=1e-5, rtol=1e-4)
        except registry.WrongAnswer as err:
            candidates = [(merge_candidate(m32, l32, o32, name), shown(why))
                          for name, why in MERGE_MISTAKES.items()]
            hint = named(got, candidates, (
                _("Hint: the merge is lesson 5's, over S states at once: a common max (safe when "
                  "every split is empty), every split brought to it, the sums added, one division "
                  "at the end ({section_merge}).").format(section_merge=_(SECTION_MERGE))),
                tol=1e-4)
            raise registry.WrongAnswer(f"{err}\n{hint}") from None
    return passed(len(cases), _("merge to attention over the whole cache"))
