"""The reference block-sparse forward (kernels/sparse_forward.py) in Triton's interpreter: every
mask kind of lesson 9 against the float64 masked_reference (output and logsumexp), with ragged
lengths, several batches and heads, transposed inputs, large logits, rows that see no key,
padded head dims, pointer loads beside tensor descriptors; and its clear errors on bad input."""

import dataclasses
from unittest import mock

import numpy as np
import pytest
import torch

from flashcourse import runtime

runtime.setup(verbose=False)  # before triton is imported or any kernel defined: the interpreter

from flashcourse.kernels import modern_attention as ma  # noqa: E402
from flashcourse.kernels import sparse_forward as sf  # noqa: E402
from flashcourse.runtime import CourseInputError  # noqa: E402

TILE = sf.sparse_reference_config(64)[0]  # the interpreter's tiles: 16 x 16
TOL = {torch.float32: 1e-4, torch.float16: 2e-3}
UNLIMITED = ma.UNLIMITED


def inputs(B, H, n, d, dtype=torch.float32, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(B, H, n, d, generator=gen) * scale).to(dtype) for _ in range(3)]


HALVES_TILES = (32, 16, 4, 1)  # two halves of 16 query rows, tl.dot's smallest on a GPU


def assert_matches(q, k, v, mask, plan, sm_scale=None, use_tma=True, halves=False,
                   full_range=False):
    o, lse = sf.sparse_forward(q, k, v, plan, sm_scale=sm_scale, use_tma=use_tma,
                               halves=halves, full_range=full_range)
    expected = ma.masked_reference(q, k, v, mask, sm_scale)
    error = (o.double() - expected).abs().max().item()
    assert error < TOL[q.dtype], f"max error {error:.3g}"
    expected_lse = ma.masked_lse(q, k, mask, sm_scale)
    hidden = torch.isinf(expected_lse)
    assert torch.equal(torch.isinf(lse), hidden), "LSE is -inf exactly where no key is seen"
    lse_error = (lse.double() - expected_lse)[~hidden].abs().max().item()
    assert lse_error < 1e-3 * max(1.0, expected_lse[~hidden].abs().max().item())
    assert (o[hidden.expand_as(o[..., 0])] == 0).all(), "a row that sees no key gives 0"
    return o, lse


RULE_MASKS = {  # name: (n, left, right, documents or None)
    "causal, ragged": (45, UNLIMITED, 0, None),
    "causal window of 8 keys": (64, 7, 0, None),
    "two-sided window, ragged": (50, 5, 9, None),
    "each token sees the 6 before it (row 0 sees nothing)": (40, 6, -1, None),
    "causal documents with padding": (57, UNLIMITED, 0, ma.packed_documents([13, 5, 30], 9)),
    "documents, not causal": (48, UNLIMITED, UNLIMITED, ma.packed_documents([20, 28])),
}


@pytest.mark.parametrize("halves", [False, True], ids=["one tile", "two halves"])
@pytest.mark.parametrize("name", list(RULE_MASKS))
def test_rule_masks_match_the_float64_reference(name, halves):
    n, left, right, docs = RULE_MASKS[name]
    q, k, v = inputs(2, 3, n, 16, seed=n)
    plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs,
                          config=HALVES_TILES if halves else None)
    assert_matches(q, k, v, ma.dense_mask(n, n, left, right, docs), plan, halves=halves)


@pytest.mark.parametrize("n, block, halves", [(64, 16, False), (70, 32, False),
                                             (70, 32, True), (96, 32, True)])
def test_random_block_mask_matches_the_float64_reference(n, block, halves):
    block_m, block_n = HALVES_TILES[:2] if halves else (TILE, TILE)
    table = sf.random_block_table(n, block, 0.5, seed=n)
    table[1] = False  # a query block that sees nothing
    mask = sf.block_table_mask(table, block, n)
    kinds = sf.block_table_kinds(table, block, n, block_m, block_n)
    assert np.array_equal(kinds, ma.classify_blocks(mask, block_m, block_n))
    q, k, v = inputs(1, 2, n, 16, seed=block)
    plan = sf.sparse_plan(n, 16, "cpu", kinds=kinds, config=HALVES_TILES if halves else None)
    _, lse = assert_matches(q, k, v, mask, plan, halves=halves)
    assert torch.isinf(lse[..., block:2 * block]).all()


def test_transposed_views_large_logits_and_pointer_loads():
    """(B, N, H, D) storage seen as (B, H, N, D), scores of about 1e3 with a custom scale,
    through descriptors and through plain pointer loads."""
    n, d = 52, 32
    q, k, v = (x.transpose(1, 2) for x in inputs(2, n, 2, d, seed=3))
    q = q * 30.0
    assert not q.is_contiguous()
    docs = ma.packed_documents([17, 35])
    plan = sf.sparse_plan(n, d, "cpu", left=20, right=0, docs=docs)
    mask = ma.dense_mask(n, n, 20, 0, docs)
    for use_tma in (True, False):
        assert_matches(q, k, v, mask, plan, sm_scale=0.7, use_tma=use_tma)
    halves_plan = sf.sparse_plan(n, d, "cpu", left=20, right=0, docs=docs, config=HALVES_TILES)
    for use_tma in (True, False):
        assert_matches(q, k, v, mask, halves_plan, sm_scale=0.7, use_tma=use_tma, halves=True)


def test_unaligned_tensors_fall_back_to_pointer_loads():
    n, d = 40, 16
    base = inputs(1, 1, n * d + 1, 1, seed=4)
    q, k, v = (x.flatten()[1:].view(1, 1, n, d) for x in base)  # 4 bytes off alignment
    plan = sf.sparse_plan(n, d, "cpu", left=UNLIMITED, right=0)
    assert_matches(q, k, v, ma.dense_mask(n, n, UNLIMITED, 0), plan)


def test_fp16_and_a_padded_head_dim():
    n = 48
    q, k, v = inputs(1, 2, n, 24, dtype=torch.float16, seed=5)  # runs padded to 32
    plan = sf.sparse_plan(n, 24, "cpu", left=15, right=0)
    assert_matches(q, k, v, ma.dense_mask(n, n, 15, 0), plan)


@pytest.mark.parametrize("d", [16, 24], ids=["kernel width", "padded"])
def test_a_planned_call_gives_the_call_output_step_after_step(d):
    """SparseForward checks and builds once; run() launches the kernel alone on its bound
    tensors: sparse_forward's output bit for bit, and after new values are written into q, k
    and v in place, the output for those; bad input is refused at the plan's making."""
    n = 48
    q, k, v = inputs(1, 2, n, d, seed=9)
    docs = ma.packed_documents([20, 28])
    plan = sf.sparse_plan(n, d, "cpu", left=15, right=0, docs=docs)
    planned = sf.SparseForward(q, k, v, plan)
    for seed in (9, 10):
        for bound, new in zip((q, k, v), inputs(1, 2, n, d, seed=seed), strict=True):
            bound.copy_(new)
        o, lse = planned.run()
        expected_o, expected_lse = sf.sparse_forward(q, k, v, plan)
        assert torch.equal(o, expected_o) and torch.equal(lse, expected_lse)
    assert planned.run()[0] is planned.o  # the same tensors at every call
    with mock.patch.object(sf, "_checked_launch", side_effect=AssertionError("checked again")):
        assert torch.equal(planned.run()[0], expected_o)  # run() is the launch alone
    with pytest.raises(CourseInputError, match="built for n=48"):
        sf.SparseForward(*inputs(1, 2, 40, d), plan)


def test_longest_lists_run_first():
    kinds = ma.classify_rule(64, TILE, TILE, UNLIMITED, 0)
    assert sf.program_order(kinds).tolist() == [3, 2, 1, 0]
    assert sf.program_order(kinds, longest_first=False).tolist() == [0, 1, 2, 3]
    table = np.array([[1, 0, 0], [1, 1, 1], [0, 1, 0]], bool)
    kinds = sf.block_table_kinds(table, TILE, 48, TILE, TILE)
    assert sf.program_order(kinds).tolist() == [1, 0, 2]  # ties keep their order


def test_natural_order_gives_the_same_output():
    n = 64
    q, k, v = inputs(1, 1, n, 16, seed=6)
    first = sf.sparse_forward(q, k, v, sf.sparse_plan(n, 16, "cpu", right=0))[0]
    natural = sf.sparse_forward(q, k, v, sf.sparse_plan(n, 16, "cpu", right=0,
                                                        longest_first=False))[0]
    assert torch.equal(first, natural)


@pytest.mark.parametrize("halves", [False, True], ids=["one tile", "two halves"])
@pytest.mark.parametrize("name", ["causal, ragged", "causal window of 8 keys",
                                  "causal documents with padding"])
def test_full_lists_walked_as_runs_give_the_same_output(name, halves):
    n, left, right, docs = RULE_MASKS[name]
    q, k, v = inputs(2, 2, n, 16, seed=n + 1)
    plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs,
                          config=HALVES_TILES if halves else None)
    assert plan.full_ranges
    listed = sf.sparse_forward(q, k, v, plan, halves=halves, full_range=False)
    runs = assert_matches(q, k, v, ma.dense_mask(n, n, left, right, docs), plan,
                          halves=halves, full_range=True)
    assert all(torch.equal(a, b) for a, b in zip(listed, runs, strict=True))


def test_the_default_variant_follows_the_head_dim_the_tiles_and_the_lists():
    causal = sf.sparse_plan(64, 16, "cpu", right=0, config=HALVES_TILES)
    table = np.array([[1, 0, 1], [1, 1, 1], [0, 1, 0]], bool)  # row 0 skips a block
    gaps = sf.sparse_plan(48, 16, "cpu", kinds=sf.block_table_kinds(table, TILE, 48, TILE, TILE))
    docs = sf.sparse_plan(64, 16, "cpu", right=0, docs=np.repeat([0, 1], 32))
    assert sf.reference_variant(causal, 64) == (True, True, False, False)
    assert sf.reference_variant(causal, 80) == (False, False, False, False)  # at width 128
    assert sf.reference_variant(gaps, 16) == (False, False, False, False)  # lists with a gap
    assert sf.reference_variant(sf.sparse_plan(64, 16, "cpu", right=0), 16) == (
        False, True, False, False)
    assert sf.reference_variant(docs, 64) == (False, True, False, False)  # narrow: neither
    assert sf.reference_variant(docs, 128) == (False, False, False, True)  # row ranges
    split = dataclasses.replace(docs, row_ranges=None)  # an id in two runs: the tests
    assert sf.reference_variant(split, 128) == (False, False, True, False)
    assert sf.reference_variant(dataclasses.replace(split, part_tests=None), 128) == (
        False, False, False, False)
    # on a GPU a half must fill a warpgroup's wgmma (64 rows for each 4 warps)
    with mock.patch.object(sf.runtime, "current",
                           return_value=mock.Mock(interpreter=False)):
        assert sf.halves_fill_the_tensor_cores((128, 64, 4, 3))
        assert not sf.halves_fill_the_tensor_cores((64, 64, 4, 3))  # halves of 32 rows
        assert not sf.halves_fill_the_tensor_cores((128, 64, 8, 3))  # 64 rows, 2 warpgroups
        assert sf.halves_fill_the_tensor_cores((256, 64, 8, 2))
    assert sf.halves_fill_the_tensor_cores(HALVES_TILES)  # the interpreter: tl.dot's 16 rows
    q, k, v = inputs(1, 2, 64, 16, seed=9)
    chosen = sf.sparse_forward(q, k, v, causal)
    spelled = sf.sparse_forward(q, k, v, causal, halves=True, full_range=True)
    assert all(torch.equal(a, b) for a, b in zip(chosen, spelled, strict=True))
    with pytest.raises(CourseInputError, match="True, False or None"):
        sf.sparse_forward(q, k, v, causal, halves=1)
    q, k, v = inputs(1, 2, 64, 80, seed=10)  # runs at width 128: row ranges by default
    chosen = sf.sparse_forward(q, k, v, docs)
    spelled = sf.sparse_forward(q, k, v, docs, halves=False, full_range=False,
                                row_ranges=True)
    assert all(torch.equal(a, b) for a, b in zip(chosen, spelled, strict=True))
    # without the ranges, the tests that the plan has room for
    with mock.patch.object(sf, "_launch", wraps=sf._launch) as launch:
        sf.sparse_forward(q, k, v, docs, row_ranges=False)
        sf.sparse_forward(q, k, v, docs, partial_tests=False)
        sf.sparse_forward(q, k, v, split)
    picked = [(c.kwargs["partial_tests"], c.kwargs["row_ranges"]) for c in launch.call_args_list]
    assert picked == [(True, False), (False, False), (True, False)]


def test_the_default_tiles_follow_the_head_dim_and_the_mask():
    with mock.patch.object(sf.runtime, "current",
                           return_value=mock.Mock(interpreter=False)):
        small, wide = sf.tiles.SPARSE_SMALL_BLOCKS, sf.tiles.SPARSE_REFERENCE
        assert sf.sparse_reference_config(64, left=1023) == small  # a window at d = 64
        assert sf.sparse_reference_config(48, left=1023) == small  # runs at width 64
        assert sf.sparse_reference_config(64) == wide[64]  # causal
        assert sf.sparse_reference_config(64, left=1023, docs=np.zeros(8, int)) == wide[64]
        assert sf.sparse_reference_config(128, left=1023) == wide[128]
        plan = sf.sparse_plan(256, 64, "cpu", left=63, right=0)
        assert plan.config == small
    assert sf.sparse_reference_config(64, left=1023) == sf.tiles.INTERPRETER


def test_full_lists_that_are_not_runs_are_refused():
    table = np.array([[1, 0, 1], [1, 1, 1], [0, 1, 0]], bool)  # row 0 skips a block
    kinds = sf.block_table_kinds(table, TILE, 48, TILE, TILE)
    plan = sf.sparse_plan(48, 16, "cpu", kinds=kinds)
    assert not plan.full_ranges
    assert sf.consecutive_lists(np.array([2, 0]), np.array([[3, 4, 0], [7, 0, 0]]))
    assert not sf.consecutive_lists(np.array([2]), np.array([[3, 5, 0]]))
    with pytest.raises(CourseInputError, match="not runs"):
        sf.sparse_forward(*inputs(1, 1, 48, 16), plan, full_range=True)


@pytest.mark.parametrize("build, message", [
    (lambda: sf.sparse_plan(40, 16, "cpu", kinds=np.full((2, 2), 2)), r"needs \(3, 3\)"),
    (lambda: sf.sparse_plan(40, 16, "cpu", kinds=np.full((3, 3), 2)), "never FULL"),
    (lambda: sf.sparse_plan(48, 16, "cpu", kinds=np.full((3, 3), 5)), r"EMPTY \(0\)"),
    (lambda: sf.sparse_plan(40, 16, "cpu", docs=np.zeros(39, int)), "40 integer document"),
    (lambda: sf.sparse_plan(40, 16, "cpu", left=1.5), "left=1.5"),
    (lambda: sf.sparse_plan(40, 16, "cpu", config=(24, 16, 4, 1)), "BLOCK_M=24"),
    (lambda: sf.block_table_kinds(np.ones((2, 2), bool), 24, 48, 16, 16), "multiples"),
])
def test_bad_plans_get_clear_errors(build, message):
    with pytest.raises(CourseInputError, match=message):
        build()


def test_bad_inputs_get_clear_errors():
    plan = sf.sparse_plan(32, 16, "cpu", right=0)
    q, k, v = inputs(1, 1, 32, 16)
    with pytest.raises(CourseInputError, match="built for n=32"):
        sf.sparse_forward(*inputs(1, 1, 40, 16), plan)
    with pytest.raises(CourseInputError, match="must all have shape"):
        sf.sparse_forward(q, k[:, :, :16], v, plan)
    with pytest.raises(CourseInputError, match="one dtype"):
        sf.sparse_forward(q, k.half(), v, plan)
    with pytest.raises(CourseInputError, match="sm_scale"):
        sf.sparse_forward(q, k, v, plan, sm_scale=-1.0)
    with pytest.raises(CourseInputError, match="head dim 300"):
        sf.sparse_forward(*inputs(1, 1, 32, 300), plan)
    with pytest.raises(CourseInputError, match="bfloat16"):
        sf.sparse_forward(q.bfloat16(), k.bfloat16(), v.bfloat16(), plan)


# ---------------------------------------------------------------- PARTIAL tiles, only their tests

R, L, D, B = sf.TEST_RIGHT, sf.TEST_LEFT, sf.TEST_DOCS, sf.TEST_BOUND


@pytest.mark.parametrize("n, left, right, docs, expected", [
    (40, UNLIMITED, 0, None, [[R, 0, 0], [R, 0, 0], [R | B, 0, 0]]),  # causal, cut off at 40
    (48, 3, 5, None, [[R | L, R, 0], [L, R | L, R], [L, R | L, 0]]),  # a two-sided window
    # documents 0-9 and 10-31, padding 32-39 (its query block sees nothing: no PARTIAL tile)
    (40, 20, 0, ma.packed_documents([10, 22], 8), [[R | D, 0], [L | D, R], [0, 0]]),
], ids=["causal", "two-sided window", "window and documents"])
def test_partial_tile_tests_by_hand(n, left, right, docs, expected):
    plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs)
    part_counts, part_index = plan.lists[2:]
    kinds = ma.classify_rule(n, TILE, TILE, left, right, docs)
    tests = sf.partial_tile_tests(kinds, n, TILE, TILE, left, right, docs)
    assert tests[:, :len(expected[0])].tolist() == expected
    assert not tests[:, len(expected[0]):].any()
    packed = plan.part_tests
    assert torch.equal(packed & ((1 << sf.TESTS_SHIFT) - 1), part_index)
    assert torch.equal(packed >> sf.TESTS_SHIFT, torch.from_numpy(tests))
    assert part_counts.tolist() == (tests != 0).sum(axis=1).tolist()


def test_partial_tile_tests_of_a_custom_block_map():
    """A random block mask's PARTIAL tiles are its cut-off last key block: the bound alone."""
    table = np.array([[1, 0], [1, 1]], bool)
    kinds = sf.block_table_kinds(table, 32, 40, TILE, TILE)  # key block 2 cut off at 40
    tests = sf.partial_tile_tests(kinds, 40, TILE, TILE)
    assert tests[:, 0].tolist() == [0, 0, B] and not tests[:, 1:].any()


@pytest.mark.parametrize("selects", [False, True], ids=["branches", "selects"])
@pytest.mark.parametrize("halves", [False, True], ids=["one tile", "two halves"])
@pytest.mark.parametrize("name", list(RULE_MASKS))
def test_partial_tests_give_the_same_output_bit_for_bit(name, halves, selects):
    """Bit for bit, not within a tolerance: the flagged tests hide the same pairs of every real
    row as the whole rule, and the tiles go through the same softmax in the same order; so do
    the tests applied as selects (tests_as_selects)."""
    n, left, right, docs = RULE_MASKS[name]
    q, k, v = inputs(2, 2, n, 16, seed=n + 2)
    plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs,
                          config=HALVES_TILES if halves else None)
    whole_rule = sf.sparse_forward(q, k, v, plan, halves=halves)
    tested = sf.sparse_forward(q, k, v, plan, halves=halves, partial_tests=True,
                               tests_as_selects=selects)
    assert all(torch.equal(a, b) for a, b in zip(whole_rule, tested, strict=True))


@pytest.mark.parametrize("halves", [False, True], ids=["one tile", "two halves"])
def test_partial_tests_on_a_random_block_mask(halves):
    n, block = 70, 32
    block_m, block_n = HALVES_TILES[:2] if halves else (TILE, TILE)
    table = sf.random_block_table(n, block, 0.5, seed=n)
    table[1] = False  # a query block that sees nothing
    kinds = sf.block_table_kinds(table, block, n, block_m, block_n)
    plan = sf.sparse_plan(n, 16, "cpu", kinds=kinds, config=HALVES_TILES if halves else None)
    q, k, v = inputs(1, 2, n, 16, seed=7)
    whole_rule = sf.sparse_forward(q, k, v, plan, halves=halves)
    tested = sf.sparse_forward(q, k, v, plan, halves=halves, partial_tests=True)
    assert all(torch.equal(a, b) for a, b in zip(whole_rule, tested, strict=True))
    assert torch.isinf(tested[1][..., block:2 * block]).all()


@pytest.mark.parametrize("halves", [False, True], ids=["one tile", "two halves"])
@pytest.mark.parametrize("mask", ["random blocks", "causal documents with padding"])
def test_entries_loaded_a_step_ahead_give_the_same_output(mask, halves):
    """entries_ahead: each list entry loaded one step before its tile, bit for bit the output
    of entries loaded at their own step, on a random block mask (lists with gaps, a query
    block that sees nothing) and on documents with the partial tests packed in the entries."""
    if mask == "random blocks":
        n, block = 70, 32
        block_m, block_n = HALVES_TILES[:2] if halves else (TILE, TILE)
        table = sf.random_block_table(n, block, 0.5, seed=n + 1)
        table[1] = False
        kinds = sf.block_table_kinds(table, block, n, block_m, block_n)
        plan = sf.sparse_plan(n, 16, "cpu", kinds=kinds,
                              config=HALVES_TILES if halves else None)
        expected = None
    else:
        n, left, right, docs = RULE_MASKS[mask]
        plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs,
                              config=HALVES_TILES if halves else None)
        expected = ma.dense_mask(n, n, left, right, docs)
    q, k, v = inputs(1, 2, n, 16, seed=11)
    for tests in (False, True):
        at_their_step = sf.sparse_forward(q, k, v, plan, halves=halves, full_range=False,
                                          partial_tests=tests)
        ahead = sf.sparse_forward(q, k, v, plan, halves=halves, full_range=False,
                                  partial_tests=tests, entries_ahead=True)
        assert all(torch.equal(a, b) for a, b in zip(at_their_step, ahead, strict=True))
    if expected is not None:
        assert_matches(q, k, v, expected, plan, halves=halves)
    with pytest.raises(CourseInputError, match="entries_ahead=1 must be True or False"):
        sf.sparse_forward(q, k, v, plan, entries_ahead=1)


def without_test(plan, row, test):
    """The plan with `test` taken off the first PARTIAL tile of query block `row` that has it."""
    packed = plan.part_tests.clone()
    slot = ((packed[row] >> sf.TESTS_SHIFT) & test).nonzero()[0].item()
    packed[row, slot] &= ~(test << sf.TESTS_SHIFT)
    return dataclasses.replace(plan, part_tests=packed)


@pytest.mark.parametrize("selects", [False, True], ids=["branches", "selects"])
@pytest.mark.parametrize("name, row, test", [
    ("causal documents with padding", 0, R), ("causal documents with padding", 0, D),
    ("causal window of 8 keys", 1, L), ("two-sided window, ragged", 3, B),
], ids=["the diagonal", "a document boundary", "a window's far edge", "the bound"])
def test_a_tile_without_one_of_its_tests_gives_a_wrong_output(name, row, test, selects):
    """The flags matter: take one test off one tile, and its rows see keys they must not."""
    n, left, right, docs = RULE_MASKS[name]
    q, k, v = inputs(1, 1, n, 16, seed=8)
    plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs)
    expected = ma.masked_reference(q, k, v, ma.dense_mask(n, n, left, right, docs))
    tested = sf.sparse_forward(q, k, v, plan, partial_tests=True, tests_as_selects=selects)[0]
    assert (tested.double() - expected).abs().max() < TOL[q.dtype]
    wrong = sf.sparse_forward(q, k, v, without_test(plan, row, test), partial_tests=True,
                              tests_as_selects=selects)[0]
    assert (wrong.double() - expected).abs().max() > 0.01


def test_partial_tests_refused_where_they_cannot_apply():
    assert sf.tests_fit(32768, 128, 64)
    assert not sf.tests_fit(2**28, 16, 1)  # key block indices past 2**27: no room for flags
    assert not sf.tests_fit(2**30 + 1, 128, 64)  # rows + a window side would pass int32
    plan = sf.sparse_plan(32, 16, "cpu", right=0)
    q, k, v = inputs(1, 1, 32, 16)
    with pytest.raises(CourseInputError, match="True, False or None"):
        sf.sparse_forward(q, k, v, plan, partial_tests=1)
    with pytest.raises(CourseInputError, match="leaves no room"):
        sf.sparse_forward(q, k, v, dataclasses.replace(plan, part_tests=None),
                          partial_tests=True)
    with pytest.raises(CourseInputError, match="pass partial_tests=True with it"):
        sf.sparse_forward(q, k, v, plan, partial_tests=False, tests_as_selects=True)
    with pytest.raises(CourseInputError, match="tests_as_selects=1 must be True or False"):
        sf.sparse_forward(q, k, v, plan, partial_tests=True, tests_as_selects=1)


@pytest.mark.parametrize("name", list(RULE_MASKS))
def test_key_ranges_are_the_rule_row_by_row(name):
    n, left, right, docs = RULE_MASKS[name]
    first, last = sf.key_ranges(n, left, right, docs)
    keys = np.arange(n)
    in_range = (keys[None, :] >= first[:, None]) & (keys[None, :] <= last[:, None])
    assert np.array_equal(in_range, ma.dense_mask(n, n, left, right, docs))


def test_key_ranges_by_hand_and_refused_for_a_split_document():
    docs = np.array([0, 0, 0, 1, 1, -1])  # documents 0-2 and 3-4, a padding row
    assert sf.key_ranges(6, UNLIMITED, 0, docs).tolist() == [[0, 0, 0, 3, 3, 0],
                                                            [0, 1, 2, 3, 4, -1]]
    assert sf.key_ranges(6, 1, 1).tolist() == [[0, 0, 1, 2, 3, 4], [1, 2, 3, 4, 5, 5]]
    split = np.array([0, 0, 1, 1, 0, 0])  # document 0 in two runs: not one range per row
    assert sf.key_ranges(6, docs=split) is None
    plan = sf.sparse_plan(6, 16, "cpu", docs=split)
    assert plan.row_ranges is None
    q, k, v = inputs(1, 1, 6, 16)
    with pytest.raises(CourseInputError, match="two separate runs"):
        sf.sparse_forward(q, k, v, plan, row_ranges=True)
    with pytest.raises(CourseInputError, match="leave partial_tests unset"):
        sf.sparse_forward(q, k, v, sf.sparse_plan(6, 16, "cpu", right=0), row_ranges=True,
                          partial_tests=True)
    with pytest.raises(CourseInputError, match="True, False or None"):
        sf.sparse_forward(q, k, v, sf.sparse_plan(6, 16, "cpu", right=0), row_ranges=1)


@pytest.mark.parametrize("name, halves", [
    *((name, False) for name in RULE_MASKS),
    ("causal documents with padding", True), ("two-sided window, ragged", True),
])
def test_row_ranges_give_the_same_output_bit_for_bit(name, halves):
    """The ranges hide the same pairs of every real row as the rule, tile by tile."""
    n, left, right, docs = RULE_MASKS[name]
    q, k, v = inputs(2, 2, n, 16, seed=n + 3)
    plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs,
                          config=HALVES_TILES if halves else None)
    whole_rule = sf.sparse_forward(q, k, v, plan, halves=halves, partial_tests=False)
    ranged = sf.sparse_forward(q, k, v, plan, halves=halves, row_ranges=True)
    assert all(torch.equal(a, b) for a, b in zip(whole_rule, ranged, strict=True))


def test_a_row_range_one_key_too_wide_gives_a_wrong_output():
    """The ranges matter: widen one row's range by one key and that row sees a hidden key."""
    n, left, right, docs = RULE_MASKS["causal documents with padding"]
    q, k, v = inputs(1, 1, n, 16, seed=11)
    plan = sf.sparse_plan(n, 16, "cpu", left=left, right=right, docs=docs)
    expected = ma.masked_reference(q, k, v, ma.dense_mask(n, n, left, right, docs))
    ranged = sf.sparse_forward(q, k, v, plan, row_ranges=True)[0]
    assert (ranged.double() - expected).abs().max() < TOL[q.dtype]
    wide = plan.row_ranges.clone()
    wide[n + 13] += 1  # row 13, last of the first document, now sees key 14 of the next one
    wrong = sf.sparse_forward(q, k, v, dataclasses.replace(plan, row_ranges=wide),
                              row_ranges=True)[0]
    assert (wrong[0, 0, 13].double() - expected[0, 0, 13]).abs().max() > 0.01


def test_gpu_check_script_checks_the_planned_call_in_the_interpreter():
    # gpu/check_modern_attention.py --planned-only: what it runs compiled on the GPU, here small
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "gpu/check_modern_attention.py", "--interpreter",
                           "--planned-only"], capture_output=True, text=True, cwd=root,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    planned = [line for line in lines if "planned, second call with new q, k, v" in line]
    assert planned and all(line.startswith("ok ") for line in planned)
    assert not [line for line in lines if line.startswith("FAIL")]
    counted = lines[-1].split()  # "<n> of <n> cases match float64"
    assert counted[0] == counted[2] and counted[3:] == ["cases", "match", "float64"]
