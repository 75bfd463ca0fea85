"""Lesson 9's grader: the solutions pass (and with the hidden cases), known-wrong answers built
by editing the lesson's own solution cells are rejected with the message that names the
mistake (exercise 4's, written from scratch, are data in wrong_kernels_09.py), blanks say
"Fill in the blank" and untouched stubs "not implemented", the launchers refuse bad inputs and
agree with PyTorch, and the questions' answers agree with the package's models."""

import re

import numpy as np
import pytest
import torch

from flashcourse import check, runtime
from flashcourse.authoring import cells
from flashcourse.checks import registry

runtime.setup(verbose=False)  # before triton is imported or any kernel defined: the interpreter

import wrong_kernels_09  # noqa: E402

from flashcourse.checks.modern_attention import decoding, masks  # noqa: E402
from flashcourse.kernels import modern_attention as ma  # noqa: E402

CELLS, FUNCTIONS = wrong_kernels_09.CELLS, wrong_kernels_09.FUNCTIONS
WRONG_SCRATCH = {(exercise_id, mistake): (edits, message)
                 for exercise_id, table in wrong_kernels_09.TABLES.items()
                 for mistake, (edits, message) in table.items()}

LESSON = "09-modern-attention.qmd"
PRELUDE = cells.PRELUDE + "from flashcourse.kernels.modern_attention import EMPTY, FULL, PARTIAL\n"

EXERCISES = {  # exercise id: (solution cell id, function name)
    "modern-attention/block-map": ("exercise-block-map", "block_map"),
    "modern-attention/sparse-kernel": ("exercise-sparse-kernel", "sparse_attention_kernel"),
    "modern-attention/gqa-kernel": ("exercise-gqa-kernel", "gqa_attention_kernel"),
    "modern-attention/split-size": ("exercise-split-size", "choose_split_size"),
    "modern-attention/paged-split": ("exercise-paged-split", "paged_split_kernel"),
    "modern-attention/merge-states": ("exercise-merge-states", "merge_states_kernel"),
}

WRONG = {
    # exercise 1: the block map
    ("modern-attention/block-map", "cut-off key block judged on its real keys"): (
        dict(lines={"tile": "mask[i * block_m:(i + 1) * block_m, "
                            "j * block_n:(j + 1) * block_n]"}),
        "judged on its real keys only"),
    ("modern-attention/block-map", "rows past the end counted as hidden"): (
        dict(replace=[("padded = np.zeros((n_q,", "padded = np.zeros((query_blocks * block_m,", 1),
                      ("padded[:, :n_k] = mask", "padded[:n_q, :n_k] = mask", 1)]),
        "rows past the last query were counted"),
    ("modern-attention/block-map", "block sizes swapped"): (
        dict(lines={"tile": "padded[i * block_n:(i + 1) * block_n, "
                            "j * block_m:(j + 1) * block_m]"}),
        "block_m and block_n are swapped"),
    ("modern-attention/block-map", "some visible counted as FULL"): (
        dict(lines={"kinds[i, j]": "FULL if tile.any() else EMPTY"}), "is marked FULL"),
    ("modern-attention/block-map", "FULL and EMPTY swapped"): (
        dict(lines={"kinds[i, j]": "EMPTY if tile.all() else PARTIAL if tile.any() else FULL"}),
        "FULL and EMPTY are swapped"),
    ("modern-attention/block-map", "block counts rounded down"): (
        dict(lines={"query_blocks": "n_q // block_m"}), "round the block counts up"),
    ("modern-attention/block-map", "key blocks rounded down (crash)"): (
        dict(lines={"key_blocks": "n_k // block_n"}), "round the block counts up"),
    # exercise 2: the sparse kernel
    ("modern-attention/sparse-kernel", "no safe max"): (
        dict(lines={"m_safe": "m_new"}), "first listed blocks hide all its keys"),
    ("modern-attention/sparse-kernel", "empty rows divided by 0"): (
        dict(lines={"l_safe": "l_i"}), "no visible key at all comes out NaN"),
    ("modern-attention/sparse-kernel", "PARTIAL blocks not masked"): (
        dict(replace=[("part_row, N, left, right,\n                                  qk_scale, "
                       "D, BLOCK_N, True)", "part_row, N, left, right,\n"
                       "                                  qk_scale, D, BLOCK_N, False)", 1)]),
        "the mask is not applied in the PARTIAL blocks"),
    ("modern-attention/sparse-kernel", "every query block walks block 0's lists"): (
        dict(lines={"full_row": "full_index", "part_row": "part_index"}),
        "walks the key blocks of query block 0"),
    ("modern-attention/sparse-kernel", "block number used as a key position"): (
        dict(lines={"start_n": "tl.load(index + i)"}), "not key positions"),
    ("modern-attention/sparse-kernel", "window sides swapped"): (
        dict(lines={"in_window": "(offset <= left) & (-offset <= right)"}),
        "the window's sides are swapped"),
    ("modern-attention/sparse-kernel", "documents ignored"): (
        dict(lines={"same_doc": "docs_q[:, None] >= 0"}),
        "ids of query and key are not compared"),
    ("modern-attention/sparse-kernel", "document ids past N loaded as 0"): (
        dict(replace=[("docs_k = tl.load(Docs + cols, mask=cols < N, other=-1)",
                       "docs_k = tl.load(Docs + cols, mask=cols < N, other=0)", 1)]),
        "keys past N get document 0"),
    ("modern-attention/sparse-kernel", "only the FULL list walked"): (
        dict(lines={"count": "tl.load(counts) * (1 - MASKED)"}), "only the FULL blocks"),
    # exercise 3: grouped-query heads
    ("modern-attention/gqa-kernel", "heads dealt in turn"): (
        dict(lines={"kv_h": "h % H_KV"}), "dealt to the K/V heads in turn"),
    ("modern-attention/gqa-kernel", "divided by H_KV"): (
        dict(lines={"kv_h": "h // H_KV"}), "not by the group size"),
    ("modern-attention/gqa-kernel", "query head used for K/V"): (
        dict(lines={"kv_h": "h"}), "K/V rows that do not exist"),
    ("modern-attention/gqa-kernel", "always K/V head 0"): (
        dict(lines={"kv_h": "0"}), "that is MQA"),
    ("modern-attention/gqa-kernel", "V read from another head"): (
        dict(lines={"V_head": "V + b * svb + (h % H_KV) * svh"}), "K and V are read from"),
    ("modern-attention/gqa-kernel", "K offset with Q's strides"): (
        dict(lines={"K_head": "K + b * sqb + kv_h * sqh"}), "own batch and head strides"),
}


def answer(root, exercise_id, lines=None, replace=()):
    """The solution of an exercise with lines rewritten (lines: {target: value}) and text
    replaced (replace: (old, new, expected count)), imported from a real file."""
    cell_id, name = EXERCISES[exercise_id]
    runtime.setup(verbose=False)  # the interpreter must be chosen before @triton.jit runs
    source = cells.edit(cells.solution_source(root / "lessons" / LESSON, cell_id), replace, lines)
    return getattr(cells.load(source, prelude=PRELUDE), name)


def scratch_answer(exercise_id, edits=()):
    """Exercise 4's solution cells (loaded together) with the (old, new) edits of
    wrong_kernels_09: the answer to `exercise_id`."""
    runtime.setup(verbose=False)
    return wrong_kernels_09.answer(edits, exercise_id)


def pattern_of(message: str) -> str:
    """wrong_kernels_09's messages: text to find, or a regular expression after "re:"."""
    return message[3:] if message.startswith("re:") else re.escape(message)


# ---------------------------------------------------------------- right answers


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_solution_passes(root, passes_with_points, exercise_id):
    passes_with_points(exercise_id, answer(root, exercise_id))


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_hidden_cases_run_in_grading_mode(root, graded_case_count, exercise_id):
    assert graded_case_count(exercise_id, answer(root, exercise_id)) >= 6


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_grader_replay_gives_the_same_verdict(root, record_check, exercise_id):
    """Recorded in the notebook's way, replayed in the grader's: the right answer passes with
    its hidden cases, and the exercise's first known-wrong answer fails with its message."""
    _, right = record_check(exercise_id, answer(root, exercise_id), folder="right")
    assert "cases" in registry.replay(exercise_id, right)
    if exercise_id in FUNCTIONS:
        (edits, message), = list(wrong_kernels_09.TABLES[exercise_id].values())[:1]
        wrong_answer, pattern = scratch_answer(exercise_id, edits), pattern_of(message)
    else:
        (edits, message), = [value for key, value in WRONG.items() if key[0] == exercise_id][:1]
        wrong_answer, pattern = answer(root, exercise_id, **edits), re.escape(message)
    _, wrong = record_check(exercise_id, wrong_answer, folder="wrong")
    with pytest.raises(registry.WrongAnswer, match=pattern):
        registry.replay(exercise_id, wrong)


# ---------------------------------------------------------------- known-wrong answers


@pytest.mark.parametrize("exercise_id, mistake", list(WRONG))
def test_known_wrong_answer_is_rejected_with_its_message(root, known_wrong, exercise_id,
                                                         mistake):
    edits, message = WRONG[exercise_id, mistake]
    wrong = answer(root, exercise_id, **edits)
    with known_wrong(exercise_id, mistake, match=re.escape(message)) as caught:
        check(exercise_id, wrong)
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(", text), text  # names the case
    assert "Traceback" not in text
    assert exercise_id not in registry.RESULTS


@pytest.mark.parametrize("exercise_id, mistake", list(WRONG_SCRATCH))
def test_wrong_scratch_answer_is_rejected_with_its_message(known_wrong, exercise_id, mistake):
    edits, message = WRONG_SCRATCH[exercise_id, mistake]
    wrong = scratch_answer(exercise_id, edits)
    with known_wrong(exercise_id, mistake, match=pattern_of(message)) as caught:
        check(exercise_id, wrong)
    text = str(caught.value)
    assert re.search(r"case \d+/\d+ \(", text), text  # names the case
    assert "Traceback" not in text
    assert exercise_id not in registry.RESULTS


def test_every_exercise_has_five_known_wrong_answers():
    for exercise_id in EXERCISES:
        count = len([key for key in {**WRONG, **WRONG_SCRATCH} if key[0] == exercise_id])
        assert count >= 5, (exercise_id, count)
    kernels = [key for key in WRONG_SCRATCH if key[0] != "modern-attention/split-size"]
    assert len(kernels) >= 10


def test_hidden_cases_hold_the_edge_cases():
    """Empty rows, pages out of order and a length that is not a multiple of the page size
    are among the hidden cases too, not only the visible ones."""
    assert any(c.mask.kind == "causal-documents" and sum(c.mask.docs) < c.mask.n
               for c in masks.SPARSE_HIDDEN)  # padding rows see no key
    assert any(0 < n % c.page_size for c in decoding.SPLIT_HIDDEN for n in c.lengths)
    assert any(0 in c.lengths for c in decoding.SPLIT_HIDDEN)  # a sequence with no key
    assert any(0 in c.lengths for c in decoding.MERGE_HIDDEN)  # every split empty


def test_failure_message_says_where_and_how_much(root, known_wrong):
    wrong = answer(root, "modern-attention/sparse-kernel",
                   lines={"in_window": "(offset <= left) & (-offset <= right)"})
    with known_wrong("modern-attention/sparse-kernel", "window sides swapped (message)") as err:
        check("modern-attention/sparse-kernel", wrong)
    text = str(err.value)
    assert re.search(r"max abs error [0-9.e+-]+ .* at index \(\d+, \d+\), row \d+", text), text
    assert "BLOCK_M=16" in text and "fp32" in text


def test_kernel_crash_names_the_case(root, known_wrong):
    wrong = scratch_answer("modern-attention/merge-states",
                           [("m = tl.max(m_s, 0)", "m = tl.max(m_s, 1)")])
    with known_wrong("modern-attention/merge-states", "max over an axis it lacks (crash)",
                     match=r"case 1/\d+ .*launching your kernel raised"):
        check("modern-attention/merge-states", wrong)


# ---------------------------------------------------------------- blanks and wrong types


@pytest.mark.parametrize("exercise_id, target", [
    ("modern-attention/block-map", "tile"), ("modern-attention/sparse-kernel", "start_n"),
    ("modern-attention/sparse-kernel", "l_safe"), ("modern-attention/gqa-kernel", "kv_h")])
def test_blank_says_fill_in_the_blank(root, refuses_blank, exercise_id, target):
    refuses_blank(exercise_id, answer(root, exercise_id, lines={target: "______"}), target)


@pytest.mark.parametrize("exercise_id", list(FUNCTIONS))
def test_untouched_scratch_exercise_is_not_implemented(root, exercise_id):
    from flashcourse.checks.errors import NotStarted

    runtime.setup(verbose=False)
    cell_id, name = EXERCISES[exercise_id]
    source = cells.exercise_source(root / "lessons" / LESSON, cell_id)
    untouched = getattr(cells.load(source, prelude=PRELUDE), name)
    with pytest.raises(NotStarted, match="still raises NotImplementedError"):
        check(exercise_id, untouched)


def test_passing_something_else_than_a_kernel(root, known_wrong):
    kernel = answer(root, "modern-attention/paged-split")
    with known_wrong("modern-attention/paged-split", "kernel.fn, not the kernel",
                     match="pass the @triton.jit kernel itself"):
        check("modern-attention/paged-split", kernel.fn)


def test_block_map_must_not_modify_the_mask(known_wrong):
    def sneaky(mask, block_m, block_n):
        kinds = ma.classify_blocks(mask, block_m, block_n)
        mask[:] = False
        return kinds

    with known_wrong("modern-attention/block-map", "modifies the mask in place",
                     match="modified the mask in place"):
        check("modern-attention/block-map", sneaky)


def test_block_map_must_be_integers(known_wrong):
    with known_wrong("modern-attention/block-map", "returns floats",
                     match="return an integer array"):
        check("modern-attention/block-map",
              lambda mask, bm, bn: ma.classify_blocks(mask, bm, bn).astype(float))


# ---------------------------------------------------------------- the package's helpers


def test_masks_match_their_definitions():
    causal = ma.dense_mask(6, 6, right=0)
    assert np.array_equal(causal, np.tril(np.ones((6, 6), bool)))
    window = ma.dense_mask(8, 8, left=2, right=0)
    assert window[5].tolist() == [False, False, False, True, True, True, False, False]
    docs = ma.packed_documents([2, 3], padding=1)
    assert docs.tolist() == [0, 0, 1, 1, 1, -1]
    mask = ma.dense_mask(6, 6, docs=docs)
    assert not mask[5].any() and not mask[:, 5].any() and mask[2, 4] and not mask[1, 2]


def test_classify_rule_is_the_dense_block_map():
    docs = ma.packed_documents([30, 41], padding=9)
    for left, right in ((ma.UNLIMITED, 0), (20, 0), (7, 7), (5, -1)):
        for block_m, block_n in ((16, 16), (32, 8)):
            dense = ma.dense_mask(80, 80, left, right, docs)
            assert np.array_equal(ma.classify_rule(80, block_m, block_n, left, right, docs),
                                  ma.classify_blocks(dense, block_m, block_n))


def test_block_lists_hold_the_map():
    kinds = ma.classify_blocks(ma.dense_mask(64, 64, left=20, right=0), 16, 16)
    full_counts, full_index, part_counts, part_index = ma.block_lists(kinds)
    for i in range(kinds.shape[0]):
        assert sorted(full_index[i, :full_counts[i]]) == list(np.flatnonzero(kinds[i] == ma.FULL))
        assert sorted(part_index[i, :part_counts[i]]) == list(
            np.flatnonzero(kinds[i] == ma.PARTIAL))


def test_masked_reference_matches_sdpa_and_gives_zero_rows():
    q, k, v = (torch.randn(1, 2, 12, 8, dtype=torch.float64) for _ in range(3))
    mask = ma.dense_mask(12, 12, left=3, right=-1)  # row 0 sees nothing
    ours = ma.masked_reference(q, k, v, mask)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                            attn_mask=torch.from_numpy(mask))
    assert torch.allclose(ours[:, :, 1:], sdpa[:, :, 1:]) and (ours[:, :, 0] == 0).all()


def test_split_states_merge_to_decode_reference():
    from flashcourse.models.softmax_states import merge_all, normalised

    q = torch.randn(2, 4, 8, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 50, 8, dtype=torch.float64) for _ in range(2))
    lengths = [50, 0]
    m, l, o = ma.split_states(q, k, v, lengths, 16)
    _, l_all, o_all = merge_all(m, l, o)
    expected = ma.decode_reference(q, k, v, lengths).numpy()
    assert np.allclose(normalised(l_all, o_all), expected) and (expected[1] == 0).all()


def test_paged_cache_scatters_every_key():
    k, v = (torch.randn(2, 2, 40, 8) for _ in range(2))
    k_pages, v_pages, table, nan_page = ma.paged_cache(k, v, [40, 13], 16, seed=3)
    for b, n in enumerate((40, 13)):
        for pos in range(n):
            page = int(table[b, pos // 16])
            assert torch.equal(k_pages[page, pos % 16], k[b, :, pos])
            assert torch.equal(v_pages[page, pos % 16], v[b, :, pos])
    assert torch.isnan(k_pages[nan_page]).all()
    assert table[1, 1:].eq(nan_page).all()  # unused entries name the NaN page


def test_split_sizes_of_the_reference_and_the_solution_have_the_properties(root):
    """Over a sweep of shapes, the check's reference and the lesson's solution both give a
    split size the check accepts; the reference is the largest one."""
    solution = answer(root, "modern-attention/split-size")
    for batch in (1, 3, 8, 64):
        for kv_heads in (1, 2, 8, 32):
            for max_len in (1, 16, 100, 777, 4096, 131072):
                for num_sms, block_n in ((132, 64), (108, 32), (16, 16)):
                    shape = (batch, kv_heads, max_len, num_sms, block_n)
                    best = decoding.split_size_reference(*shape)
                    assert decoding._split_size_problem(best, *shape) is None, shape
                    assert decoding._split_size_problem(solution(*shape), *shape) is None, shape
                    assert best + block_n > max(block_n, -(-max_len // block_n) * block_n) or (
                        decoding._split_size_problem(best + block_n, *shape)), shape
    assert decoding.split_size_reference(64, 8, 4096, 132, 64) == 4096  # the batch fills it


def test_paged_split_decode_matches_the_reference(root):
    kernels = cells.load_cells(root / "lessons" / LESSON, list(CELLS), prelude=PRELUDE)
    q = torch.randn(2, 4, 16)
    k, v = (torch.randn(2, 2, 70, 16) for _ in range(2))
    lengths = [70, 33]
    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths, page_size=8, seed=1)
    out = ma.paged_split_decode(kernels.paged_split_kernel, kernels.merge_states_kernel, q,
                                k_pages, v_pages, table, torch.tensor(lengths, dtype=torch.int32),
                                split_size=32, block_n=16, max_len=70)
    assert torch.allclose(out.double(), ma.decode_reference(q, k, v, lengths), atol=1e-5)


@pytest.mark.parametrize("change, message", [
    (dict(lengths=torch.tensor([70, 33])), r"lengths must be a \(B,\) = \(2,\) int32"),
    (dict(table_dtype=torch.int64), r"page_table must be a \(B, max_pages\) = \(2, ...\) int32"),
    (dict(split_size=40), r"split_size=40 must be a positive multiple of BLOCK_N=16"),
    (dict(heads=3), r"H=3 query heads must be a multiple of the H_KV=2"),
])
def test_paged_split_launcher_refuses_bad_inputs(root, change, message):
    kernel = answer(root, "modern-attention/paged-split")
    q = torch.randn(2, change.get("heads", 4), 16)
    k = torch.randn(2, 2, 70, 16)
    k_pages, v_pages, table, _ = ma.paged_cache(k, k, [70, 33], page_size=8)
    lengths = change.get("lengths", torch.tensor([70, 33], dtype=torch.int32))
    m, l = (torch.empty(2, q.shape[1], 3) for _ in range(2))
    o = torch.empty(2, q.shape[1], 3, 16)
    with pytest.raises(runtime.CourseInputError, match=message):
        ma.launch_paged_split(kernel, q, k_pages, v_pages,
                              table.to(change.get("table_dtype", torch.int32)), lengths, m, l, o,
                              change.get("split_size", 32), 16)


# ---------------------------------------------------------------- questions and misconceptions


def self_checks():
    from flashcourse.checks import self_check_files

    return self_check_files.read(self_check_files.path_of(LESSON.removesuffix(".qmd")))


def answers_of(question_id):
    return next(q.answers for q in self_checks().questions if q.id == question_id)


def test_q1_matches_the_block_map():
    q1 = answers_of("modern-attention/q1-block-map")
    kinds = ma.classify_blocks(ma.dense_mask(4096, 4096, left=255, right=0), 64, 64)
    for i in (4, 30, 63):
        assert (kinds[i] == ma.FULL).sum() == q1["full_blocks"]
        assert (kinds[i] == ma.PARTIAL).sum() == q1["partial_blocks"]
    q, k, v = (torch.randn(1, 1, 8, 4, dtype=torch.float64) for _ in range(3))
    empty = ma.masked_reference(q, k, v, ma.dense_mask(8, 8, left=2, right=-1))[0, 0, 0]
    assert q1["empty_row_output"] == "zeros" and (empty == 0).all()


def test_q2_matches_the_model():
    q2 = answers_of("modern-attention/q2-gqa")
    H, H_KV, D, fp16 = 32, 8, 128, 2
    assert q2["kv_bytes_per_token"] == 2 * H_KV * D * fp16
    assert q2["kv_head_of_query_13"] == 13 // (H // H_KV)
    assert q2["mha_over_gqa"] == H // H_KV


def test_q3_matches_the_machine():
    from flashcourse import hardware

    q3 = answers_of("modern-attention/q3-decode")
    programs, splits = q3["programs_without_split"], q3["splits_to_fill_sms"]
    assert programs * splits >= hardware.H200_SMS > programs * (splits - 1)
    assert q3["kv_gib_per_step"] == 2 * 32 * 131072 * 128 * 2 / 2**30


def test_lesson_is_out_of_ten_with_pass_line_eight():
    registry.get("modern-attention/q1-block-map")  # loads the self-check file
    lesson = registry.LESSONS["modern-attention"]
    assert lesson.total_points == 10 and lesson.pass_line == 8


def test_a_wrong_misconception_is_a_veto(known_wrong):
    from flashcourse import VetoMisconception

    answers = {key: truth for key, (truth, _) in self_checks().statements.items()}
    check("modern-attention/misconceptions", answers)
    with known_wrong("modern-attention/misconceptions", "GQA copies K/V",
                     exc=VetoMisconception, match="gqa_copies_kv"):
        check("modern-attention/misconceptions", dict(answers, gqa_copies_kv=True))


def test_block_map_equals_flex_attention_block_mask():
    """FlexAttention's BlockMask, built from the same rule, counts the same FULL and PARTIAL
    key blocks for every query block (its default tile, 128 x 128). A cut-off last query
    block differs: FlexAttention counts its missing rows as hidden, so none of its tiles is
    FULL there; this lesson judges a tile on its real rows (section 1)."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    for n in (1024, 1000):
        docs = ma.packed_documents([300, 450], padding=n - 750)
        for left, right, ids in ((ma.UNLIMITED, 0, None), (299, 0, None), (200, 200, None),
                                 (ma.UNLIMITED, 0, docs)):
            doc_ids = torch.from_numpy(ids if ids is not None else np.zeros(n, np.int32))

            def mask_mod(b, h, q_idx, kv_idx, left=left, right=right, doc_ids=doc_ids):
                return ((kv_idx - q_idx <= right) & (q_idx - kv_idx <= left)
                        & (doc_ids[q_idx] == doc_ids[kv_idx]) & (doc_ids[q_idx] >= 0))

            block_mask = flex.create_block_mask(mask_mod, None, None, n, n, device="cpu",
                                                BLOCK_SIZE=128)
            full, _, partial, _ = ma.block_lists(ma.classify_rule(n, 128, 128, left, right, ids))
            flex_full = block_mask.full_kv_num_blocks.flatten().numpy()
            flex_partial = block_mask.kv_num_blocks.flatten().numpy()
            whole = n // 128  # query blocks with all their rows
            assert flex_full[:whole].tolist() == full[:whole].tolist()
            assert flex_partial[:whole].tolist() == partial[:whole].tolist()
            if whole < len(full):
                assert flex_full[-1] == 0
                assert flex_partial[-1] == full[-1] + partial[-1]


# ---------------------------------------------------------------- the reference decoding step


def test_decode_splits_fill_the_sms_without_needless_splits():
    from flashcourse.kernels import decode, tiles

    target = tiles.DECODE_PROGRAMS_PER_SM * 132
    assert decode.decode_splits(64, 8, 4096, 132, 64) == 1  # 512 programs: no split, no merge
    for batch, kv_heads, max_len in ((1, 8, 131072), (8, 8, 4096), (1, 32, 4096), (3, 2, 777)):
        splits = decode.decode_splits(batch, kv_heads, max_len, 132, 64)
        programs = batch * kv_heads * splits
        blocks = -(-max_len // 64)
        assert programs <= target and splits <= blocks, (batch, kv_heads, max_len)
        assert splits == blocks or programs + batch * kv_heads > target  # one more: too many
    assert decode.decode_splits(1, 1, 0, 132, 64) == 1  # an empty cache still has one split


@pytest.mark.parametrize("args, message", [
    ((0, 8, 4096, 132, 64), r"batch must be a positive int; got 0"),
    ((1, 8, -1, 132, 64), r"max_len must be an int >= 0"),
    ((1, 8, 4096, 132, 0), r"block_n must be a positive int"),
])
def test_decode_splits_refuses_bad_inputs(args, message):
    from flashcourse.kernels import decode

    with pytest.raises(runtime.CourseInputError, match=message):
        decode.decode_splits(*args)


@pytest.mark.parametrize("heads, kv_heads, d, splits", [(4, 2, 16, None), (4, 2, 16, 1),
                                                        (2, 2, 24, 3), (8, 1, 16, 5)])
def test_reference_decode_matches_float64(heads, kv_heads, d, splits):
    """Ragged lengths (one empty), NaN in every unused page, slot and table entry, pages
    smaller than a block, one pass and several splits, a head dim that is not a power of two."""
    from flashcourse.kernels import decode

    lengths = [70, 33, 0]
    q = torch.randn(3, heads, d)
    k, v = (torch.randn(3, kv_heads, 70, d) for _ in range(2))
    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths, page_size=8, seed=2)
    plan = decode.DecodePlan(q, k_pages, v_pages, table, torch.tensor(lengths, dtype=torch.int32),
                             max_len=70, num_sms=4, splits=splits)
    assert plan.splits == (splits or decode.decode_splits(3, kv_heads, 70, 4, plan.block_n))
    out = plan.run()
    assert torch.allclose(out.double(), ma.decode_reference(q, k, v, lengths), atol=1e-5)
    assert (out[2] == 0).all()  # no key: 0, not NaN


@pytest.mark.parametrize("kv_loads", ["rows", "tma"])
def test_reference_decode_reads_a_pool_with_each_heads_rows_together(kv_loads):
    """The pool as (num_pages, H_KV, PAGE_SIZE, D), seen through a transposed view: the
    kernel (its pointers, or its tensor descriptors) follows the strides, so the output is
    the side-by-side pool's, bit for bit."""
    from flashcourse.kernels import decode

    lengths = torch.tensor([70, 33], dtype=torch.int32)
    q = torch.randn(2, 4, 16)
    k, v = (torch.randn(2, 2, 70, 16) for _ in range(2))
    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths.tolist(), page_size=8, seed=3)
    k_heads, v_heads = decode.heads_together(k_pages), decode.heads_together(v_pages)
    assert k_heads.stride(2) == 8 * 16 and k_heads.stride(1) == 16
    outs = [decode.DecodePlan(q, kp, vp, table, lengths, max_len=70, num_sms=4, splits=3,
                              kv_loads=kv_loads).run()
            for kp, vp in ((k_pages, v_pages), (k_heads, v_heads))]
    assert torch.equal(outs[0], outs[1])
    assert torch.allclose(outs[1].double(), ma.decode_reference(q, k, v, [70, 33]), atol=1e-5)


def _ragged_cache(heads, kv_heads, d, lengths, page_size, seed):
    """q (B, H, D), K and V (B, H_KV, 70, D), their paged copy with lengths[b] keys each (the
    slots past them NaN: ma.paged_cache) and the lengths as an int32 tensor."""
    batch = len(lengths)
    q = torch.randn(batch, heads, d)
    k, v = (torch.randn(batch, kv_heads, 70, d) for _ in range(2))
    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths, page_size=page_size, seed=seed)
    return q, k, v, k_pages, v_pages, table, torch.tensor(lengths, dtype=torch.int32)


@pytest.mark.parametrize("heads, kv_heads, d, splits", [(4, 2, 16, None), (4, 2, 16, 1),
                                                        (2, 2, 24, 3), (8, 1, 16, 5)])
@pytest.mark.parametrize("kv_loads", ["pages ahead", "tma"])
def test_each_way_of_reading_k_and_v_gives_the_rows_output(kv_loads, heads, kv_heads, d,
                                                          splits):
    """The page numbers a block ahead, and a page per block through tensor descriptors: the
    output of the default kernel, bit for bit, on the ragged NaN-padded cache above (the TMA
    kernel masks the last page's unwritten slots, NaN here, out of V as well as of the
    scores); a head dim that is not a power of two reads columns past d as 0."""
    from flashcourse.kernels import decode

    lengths = [70, 33, 0]
    q, k, v, k_pages, v_pages, table, lens = _ragged_cache(heads, kv_heads, d, lengths,
                                                           page_size=16, seed=4)
    rows, other = (decode.DecodePlan(q, k_pages, v_pages, table, lens, max_len=70, num_sms=4,
                                     config=(16, 4, 1), splits=splits, kv_loads=loads)
                   for loads in ("rows", kv_loads))
    assert rows.splits == other.splits
    out = other.run()
    assert torch.equal(out, rows.run())
    assert torch.allclose(out.double(), ma.decode_reference(q, k, v, lengths), atol=1e-5)


@pytest.mark.parametrize("d, page_size, config, kv_loads, message", [
    (16, 8, None, "columns", r"kv_loads='columns' is not one of \('rows', 'pages ahead', "
     r"'tma'\)"),
    (16, 8, (16, 4, 1), "tma", r"BLOCK_N must be the page size 8; got 16"),
    (16, 512, None, "tma", r"in one copy of at most 256 rows; pages of 512 keys need "
     r'kv_loads="rows"'),
    (15, 8, None, "tma", r"start and strides are multiples of 16 bytes \(strides "
     r"\(240, 30, 15, 1\) of 4-byte values\); copy them with .contiguous\(\)"),
])
def test_the_decoding_kernels_refuse_what_they_cannot_read(d, page_size, config, kv_loads,
                                                           message):
    from flashcourse.kernels import decode

    q = torch.randn(2, 4, d)
    k = torch.randn(2, 2, 70, d)
    k_pages, v_pages, table, _ = ma.paged_cache(k, k, [70, 33], page_size=page_size)
    with pytest.raises(runtime.CourseInputError, match=message):
        decode.DecodePlan(q, k_pages, v_pages, table, torch.tensor([70, 33], dtype=torch.int32),
                          max_len=70, num_sms=4, config=config, kv_loads=kv_loads)


@pytest.mark.parametrize("change, message", [
    (dict(lengths=torch.tensor([70, 33])), r"lengths must be a \(B,\) = \(2,\) int32"),
    (dict(table_dtype=torch.int64), r"page_table must be a \(B, max_pages\) = \(2, ...\) int32"),
    (dict(heads=3), r"H=3 query heads must be a multiple of the H_KV=2"),
    (dict(max_len=30), r"lengths must lie in 0..max_len=30; the longest is 70"),
    (dict(max_len=10**6), r"max_len=1000000 must be an int from 0 to the"),
    (dict(dtype=torch.float64), r"q, k_pages and v_pages must share one dtype"),
])
def test_reference_decode_refuses_bad_inputs(change, message):
    from flashcourse.kernels import decode

    q = torch.randn(2, change.get("heads", 4), 16, dtype=change.get("dtype", torch.float32))
    k = torch.randn(2, 2, 70, 16)
    k_pages, v_pages, table, _ = ma.paged_cache(k, k, [70, 33], page_size=8)
    lengths = change.get("lengths", torch.tensor([70, 33], dtype=torch.int32))
    with pytest.raises(runtime.CourseInputError, match=message):
        decode.DecodePlan(q, k_pages, v_pages, table.to(change.get("table_dtype", torch.int32)),
                          lengths, max_len=change.get("max_len", 70), num_sms=4)


def test_decode_plan_launches_its_two_kernels_apart_and_no_softmax_is_only_a_bound():
    """run() is launch_splits() then launch_merge(), output bit for bit; the no-softmax bound
    (timed by gpu/measure_decode_gap.py) gives a wrong output; a one-split plan has nothing to
    merge, and the TMA kernel has no such bound: both say so."""
    from flashcourse.kernels import decode

    lengths = torch.tensor([70, 33], dtype=torch.int32)
    q = torch.randn(2, 4, 16)
    k, v = (torch.randn(2, 2, 70, 16) for _ in range(2))
    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths.tolist(), page_size=8, seed=5)
    plan = decode.DecodePlan(q, k_pages, v_pages, table, lengths, max_len=70, num_sms=4,
                             splits=3)
    whole = plan.run().clone()
    plan.out.zero_()
    plan.launch_splits()
    plan.launch_merge()
    assert torch.equal(plan.out, whole)
    bound = decode.DecodePlan(q, k_pages, v_pages, table, lengths, max_len=70, num_sms=4,
                              splits=3, no_softmax=True)
    assert not torch.allclose(bound.run(), whole, atol=1e-2)
    one = decode.DecodePlan(q, k_pages, v_pages, table, lengths, max_len=70, num_sms=4,
                            splits=1)
    with pytest.raises(runtime.CourseInputError, match="one split"):
        one.launch_merge()
    with pytest.raises(runtime.CourseInputError, match="no_softmax"):
        decode.DecodePlan(q, k_pages, v_pages, table, lengths, max_len=70, num_sms=4,
                          config=(8, 4, 1), kv_loads="tma", no_softmax=True)


@pytest.mark.parametrize("heads, kv_heads, d, splits", [(4, 2, 16, 3), (8, 1, 24, 5),
                                                        (2, 2, 16, 1)])
@pytest.mark.parametrize("kv_loads", ["rows", "tma"])
def test_fused_merge_gives_the_two_launch_output_and_is_ready_for_the_next_step(
        kv_loads, heads, kv_heads, d, splits):
    """The last split of each K/V head merges (one launch): the two launches' output, bit for
    bit, on the ragged NaN-padded cache (one sequence empty), step after step with the counts
    back at 0 after each; its plan refuses a separate merge."""
    from flashcourse.kernels import decode

    lengths = [70, 33, 0]
    q, k, v, k_pages, v_pages, table, lens = _ragged_cache(heads, kv_heads, d, lengths,
                                                           page_size=16, seed=6)
    two, fused = (decode.DecodePlan(q, k_pages, v_pages, table, lens, max_len=70, num_sms=4,
                                    config=(16, 4, 1), splits=splits, kv_loads=kv_loads,
                                    fused_merge=fuse) for fuse in (False, True))
    expected = two.run()
    for _ in range(2):
        fused.out.fill_(float("nan"))
        assert torch.equal(fused.run(), expected)
        assert (fused.arrivals == 0).all()
    assert torch.allclose(expected.double(), ma.decode_reference(q, k, v, lengths), atol=1e-5)
    if fused.splits > 1:
        with pytest.raises(runtime.CourseInputError, match="fuses the merge"):
            fused.launch_merge()


@pytest.mark.parametrize("splits", [1, 3])
def test_dependent_launch_gives_the_plain_output(splits):
    """DecodePlan(dependent_launch=True) changes how the merge is launched, not what it
    computes; with one split (no merge) or a fused merge it is dropped."""
    from flashcourse.kernels import decode

    lengths = [70, 0]
    q, k, v, k_pages, v_pages, table, lens = _ragged_cache(4, 2, 16, lengths,
                                                           page_size=16, seed=7)
    plain, dependent = (decode.DecodePlan(q, k_pages, v_pages, table, lens, max_len=70,
                                          num_sms=4, config=(16, 4, 1), splits=splits,
                                          dependent_launch=flag) for flag in (False, True))
    assert dependent.dependent_launch == (splits > 1)
    assert torch.equal(dependent.run(), plain.run())
    fused = decode.DecodePlan(q, k_pages, v_pages, table, lens, max_len=70, num_sms=4,
                              config=(16, 4, 1), splits=splits, fused_merge=True,
                              dependent_launch=True)
    assert not fused.dependent_launch


def test_capped_registers_give_the_plain_output_and_a_bad_config_is_refused():
    """config's fourth entry caps the split kernel's registers (maxnreg, compiled only): the
    interpreter ignores it, so the output is the plain plan's; a config of another length is
    refused by name."""
    from flashcourse.kernels import decode

    lengths = [70, 0]
    q, k, v, k_pages, v_pages, table, lens = _ragged_cache(4, 2, 16, lengths,
                                                           page_size=16, seed=8)
    plain, capped = (decode.DecodePlan(q, k_pages, v_pages, table, lens, max_len=70, num_sms=4,
                                       config=config, splits=3)
                     for config in ((16, 4, 1), (16, 4, 1, 96)))
    assert capped.split_options == dict(num_warps=4, num_stages=1, maxnreg=96)
    assert plain.split_options == dict(num_warps=4, num_stages=1)
    assert torch.equal(capped.run(), plain.run())
    with pytest.raises(runtime.CourseInputError, match="maxnreg"):
        decode.DecodePlan(q, k_pages, v_pages, table, lens, max_len=70, config=(16, 4))


def test_read_only_kernel_reads_every_word():
    from flashcourse.kernels import decode

    words = torch.randint(-1000, 1000, (3 * 64 + 5,), dtype=torch.int32)
    partial = decode.read_only(words, programs=3, block=16, num_warps=4)
    assert int(partial.sum()) == int(words.sum())


@pytest.mark.parametrize("heads_together", [False, True])
def test_paged_read_kernel_reads_each_heads_rows_in_page_order(heads_together):
    from flashcourse.kernels import decode

    pages, page_size, heads, d = 6, 8, 3, 16
    shape = (pages, heads, page_size, d) if heads_together else (pages, page_size, heads, d)
    pool = torch.randint(-1000, 1000, shape, dtype=torch.int32).view(torch.float16)
    order = torch.tensor([4, 1, 5, 0], dtype=torch.int32)  # pages 2 and 3 are never read
    partial = decode.paged_read(pool, order, programs=2, heads_together=heads_together)
    words = pool.view(torch.int32)[order.long()]
    by_head = (words.sum(dim=(0, 2, 3)) if heads_together else words.sum(dim=(0, 1, 3)))
    assert partial.shape == (2, heads)
    assert partial.sum(0).tolist() == by_head.to(torch.int32).tolist()
