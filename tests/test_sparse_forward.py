"""The reference block-sparse forward (kernels/sparse_forward.py) in Triton's interpreter: every
mask kind of lesson 9 against the float64 masked_reference (output and logsumexp), with ragged
lengths, several batches and heads, transposed inputs, large logits, rows that see no key,
padded head dims, pointer loads beside tensor descriptors; and its clear errors on bad input."""

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


def reference_lse(q, k, mask, sm_scale=None):
    """float64 natural-log logsumexp of the visible scaled scores; -inf where none is."""
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    return s.masked_fill(~torch.as_tensor(mask), float("-inf")).logsumexp(-1)


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
    expected_lse = reference_lse(q, k, mask, sm_scale)
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
    assert sf.reference_variant(causal, 64) == (True, True)
    assert sf.reference_variant(causal, 80) == (False, False)  # runs at width 128
    assert sf.reference_variant(gaps, 16) == (False, False)  # 16 rows, lists with a gap
    assert sf.reference_variant(sf.sparse_plan(64, 16, "cpu", right=0), 16) == (False, True)
    q, k, v = inputs(1, 2, 64, 16, seed=9)
    chosen = sf.sparse_forward(q, k, v, causal)
    spelled = sf.sparse_forward(q, k, v, causal, halves=True, full_range=True)
    assert all(torch.equal(a, b) for a, b in zip(chosen, spelled, strict=True))
    with pytest.raises(CourseInputError, match="True, False or None"):
        sf.sparse_forward(q, k, v, causal, halves=1)


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
