"""Known-wrong answers to lesson 9's exercise 4 (paged split-KV decoding from scratch), as data.

TABLES maps each of the exercise's three checks to {mistake: (edits, message)}: the edits are
(old, new) pairs that `authoring.cells.load` applies to exercise 4's solution cells (CELLS,
loaded together), and the message is text the check's message must contain, or a regular
expression after "re:". EXERCISE_ID, WRONG and answer(edits) give the split kernel's table in
the form gpu/check_known_wrong.py reads; the interpreter tests (tests/test_modern_attention.py)
run all three tables.
"""

from pathlib import Path

LESSON = Path(__file__).resolve().parents[1] / "lessons" / "09-modern-attention.qmd"
CELLS = ("exercise-split-size", "exercise-paged-split", "exercise-merge-states")
FUNCTIONS = {"modern-attention/split-size": "choose_split_size",
             "modern-attention/paged-split": "paged_split_kernel",
             "modern-attention/merge-states": "merge_states_kernel"}

SPLIT_SIZE = "modern-attention/split-size"
SPLIT = "modern-attention/paged-split"
MERGE = "modern-attention/merge-states"
EXERCISE_ID = SPLIT

RETURN_SIZE = "return max(1, blocks // splits) * block_n"
STATE_O = "tl.store(O + b * sob + heads[:, None] * soh + split * sos + offs_d[None, :], acc,"
PAGE_LOOKUP = "page = tl.load(table_row + pos // PAGE_SIZE, mask=inside, other=0).to(tl.int64)"
SCORES = "s = tl.dot(q, tl.trans(k)) * sm_scale"
WEIGHT = "weight = tl.exp(m_s - m_safe)"

_FLAT = {
    # the split size
    "one split per sequence (SMs idle)": (
        SPLIT_SIZE, [(RETURN_SIZE, "return blocks * block_n")],
        r"re:(?s)case 1/\d+ .*8 programs for 132 SMs, fewer than the 264 .*SMs sit idle"),
    "one wave instead of two": (
        SPLIT_SIZE, [("-(-2 * num_sms // programs_per_split)",
                      "-(-num_sms // programs_per_split)")],
        "144 programs for 132 SMs, fewer than the 264 of two waves"),
    "the batch ignored (needless splits)": (
        SPLIT_SIZE, [("programs_per_split = batch * kv_heads", "programs_per_split = kv_heads")],
        r"re:(?s)case 2/\d+ .*four times as large would still give"),
    "not a whole number of blocks": (
        SPLIT_SIZE, [(RETURN_SIZE, "return -(-max_len // splits)")],
        r"re:not a whole number of blocks of BLOCK_N=64"),
    "a float returned": (
        SPLIT_SIZE, [(RETURN_SIZE, "return max(1, blocks / splits) * block_n")],
        r"re:a whole number of keys \(an int\), not float"),
    # the split kernel
    "o normalised in the split": (
        SPLIT, [(STATE_O, STATE_O.replace("acc,", "acc / l_i[:, None],"))],
        r"re:o is stored divided by l"),
    "m in base 2": (
        SPLIT, [(SCORES, SCORES + " * 1.4426950408889634"),
                ("alpha = tl.exp(m_i - m_new)", "alpha = tl.exp2(m_i - m_new)"),
                ("p = tl.exp(s - m_new[:, None])", "p = tl.exp2(s - m_new[:, None])")],
        r"re:m is in base-2 units"),
    "scores not scaled": (
        SPLIT, [(SCORES, "s = tl.dot(q, tl.trans(k))")], r"re:not multiplied by sm_scale"),
    "scores past the sequence's end kept": (
        SPLIT, [('        s = tl.where(inside[None, :], s, float("-inf"))  # loaded zeros are no '
                 'keys\n', "")],
        r"re:past the sequence's end count as keys"),
    "running max starts at 0": (
        SPLIT, [('m_i = tl.full([GROUP], float("-inf"), dtype=tl.float32)',
                 "m_i = tl.zeros([GROUP], dtype=tl.float32)")],
        r"re:running max starts at 0 instead of -inf"),
    "page table not consulted": (
        SPLIT, [(PAGE_LOOKUP, "page = (pos // PAGE_SIZE).to(tl.int64)")],
        r"re:the page number comes from the page table"),
    "slot is the position": (
        SPLIT, [("slot = pos % PAGE_SIZE", "slot = pos")], "the slot inside the page is wrong"),
    "table row of sequence 0 (row stride ignored)": (
        SPLIT, [("table_row = Pages + b * s_pages", "table_row = Pages")],
        r"re:reads the page table row of sequence 0"),
    "table entry found with BLOCK_N": (
        SPLIT, [(PAGE_LOOKUP, PAGE_LOOKUP.replace("pos // PAGE_SIZE", "pos // BLOCK_N"))],
        r"re:(?s)case 2/\d+ .*found with BLOCK_N"),
    "group heads interleaved": (
        SPLIT, [("heads = kv_h * group + g", "heads = kv_h + g * H_KV")],
        r"re:(?s)case 2/\d+ .*query heads of a group are not the ones"),
    "splits BLOCK_N apart": (
        SPLIT, [("lo = split * SPLIT_SIZE", "lo = split * BLOCK_N")],
        r"re:start BLOCK_N keys apart instead of SPLIT_SIZE"),
    "split not cut at the sequence's end": (
        SPLIT, [("hi = tl.minimum(lo + SPLIT_SIZE, seq_len)", "hi = lo + SPLIT_SIZE")],
        r"re:read keys past its sequence's length"),
    "loads not masked at the sequence's end": (
        SPLIT, [("inside = pos < hi", "inside = pos < lo + SPLIT_SIZE")],
        r"re:read keys past its sequence's length"),
    "empty split stores nothing": (
        SPLIT, [("tl.store(M + state, m_i, mask=head_ok)",
                 "tl.store(M + state, m_i, mask=head_ok & (l_i > 0.0))")],
        r"re:(?s)splits with no key .* never stored their state"),
    "every split stores at split 0": (
        SPLIT, [("state = b * smb + heads * smh + split * sms", "state = b * smb + heads * smh")],
        r"re:only split 0's states were written"),
    # the merge kernel
    "merge without rescaling": (
        MERGE, [(WEIGHT, "weight = tl.where(real, 1.0, 0.0)")], r"re:added without rescaling"),
    "merge without the safe max": (
        MERGE, [('m_safe = tl.where(m == float("-inf"), 0.0, m)', "m_safe = m")],
        r"re:(?s)case 3/\d+ .*no key at all \(every split empty\) comes out NaN"),
    "merge divides by a sum of 0": (
        MERGE, [("l_safe = tl.where(l == 0.0, 1.0, l)", "l_safe = l")],
        r"re:no key at all \(every split empty\) comes out NaN"),
    "padding lanes load m = 0": (
        MERGE, [('mask=real, other=float("-inf"))', "mask=real, other=0.0)")],
        r"re:lanes past the last split load m as 0"),
    "merged o not divided": (
        MERGE, [("(o / l_safe).to(", "o.to(")], r"re:stored without dividing"),
    "o not rescaled": (
        MERGE, [("o = tl.sum(weight[:, None] * o_s, 0)", "o = tl.sum(o_s, 0)")],
        r"re:l is rescaled but o is not"),
    "weights flipped": (
        MERGE, [(WEIGHT, "weight = tl.exp(m_safe - m_s)")], r"re:point the wrong way"),
    "merge divides per split": (
        MERGE, [(WEIGHT, "weight = tl.where(l_s > 0.0, 1.0 / tl.where(l_s > 0.0, l_s, 1.0), 0.0)"),
                ("l = tl.sum(weight * l_s, 0)", "l = tl.sum(tl.where(l_s > 0.0, 1.0, 0.0), 0)")],
        r"re:normalised on its own and the results averaged"),
}

TABLES = {exercise_id: {mistake: (edits, message)
                        for mistake, (eid, edits, message) in _FLAT.items() if eid == exercise_id}
          for exercise_id in FUNCTIONS}
WRONG = TABLES[EXERCISE_ID]


def answer(edits=(), exercise_id: str = EXERCISE_ID):
    """Exercise 4's solution cells with `edits` applied: the answer to `exercise_id`. Call it
    after `runtime.setup()` (the interpreter or the GPU is chosen before any kernel exists)."""
    from flashcourse.authoring import cells

    source = "\n\n".join(cells.solution_source(LESSON, cell_id) for cell_id in CELLS)
    module = cells.load(source, edits, prelude=cells.TRITON_PRELUDE)
    return getattr(module, FUNCTIONS[exercise_id])
