"""Any head dim up to 256 in the reference kernels (lesson 8's forward and backward) and in
lesson 9's launchers: the head dim is zero-padded to the kernels' width inside the launcher,
with sm_scale from the real head dim. Checked in the interpreter against float64 torch, on
ragged N, B and H > 1, causal and not, transposed views and a custom sm_scale; bad inputs
are refused with a message that names the problem."""

import numpy as np
import pytest
import torch

import flashcourse as fc
from flashcourse.authoring import cells
from flashcourse.runtime import CourseInputError

fc.setup(verbose=False)  # before triton is imported or any kernel defined: the interpreter

from flashcourse.kernels import attention, host  # noqa: E402
from flashcourse.kernels import modern_attention as ma  # noqa: E402

LESSON_9 = "09-modern-attention.qmd"
LESSON_9_KERNELS = ("exercise-sparse-kernel", "exercise-split-size", "exercise-paged-split",
                    "exercise-merge-states", "exercise-gqa-kernel")
ATOL = 1e-4  # the interpreter computes in float32


def inputs(B, H, N, D, seed, transposed=False):
    """q, k, v, do in float32 from float64 draws; `transposed`: (B, N, H, D) tensors seen as
    (B, H, N, D) views, as most models store them."""
    gen = torch.Generator().manual_seed(seed)
    shape = (B, N, H, D) if transposed else (B, H, N, D)
    xs = [torch.randn(shape, generator=gen, dtype=torch.float64).float() for _ in range(4)]
    return [x.transpose(1, 2) for x in xs] if transposed else xs


def reference(q, k, v, causal, sm_scale):
    """(o, lse) of float64 attention, and a function giving (dq, dk, dv) for an upstream dO."""
    q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    o, lse = attention.standard_attention(q64, k64, v64, causal, sm_scale, return_lse=True)

    def grads(do):
        return torch.autograd.grad(o, (q64, k64, v64), do.double())

    return o, lse, grads


def assert_close(name, actual, expected):
    err = (actual.double() - expected).abs().max().item()
    assert err < ATOL * max(1.0, expected.abs().max().item()), f"{name}: max error {err:.3g}"


@pytest.mark.parametrize("d, causal", [(80, False), (80, True), (96, False), (160, True),
                                       (256, False), (256, True), (8, True)])
def test_forward_and_backward_match_float64(d, causal):
    # causal cases: a custom sm_scale on (B, N, H, D) views; the others: the default scale,
    # which must be 1 / sqrt(d) of the real d, not of the padded width
    sm_scale = 0.3 if causal else None
    B, H, N = (2, 3, 37) if causal else (3, 2, 50)
    q, k, v, do = inputs(B, H, N, d, seed=d, transposed=causal)
    o, lse = host.forward(q, k, v, causal, sm_scale)
    ref_o, ref_lse, ref_grads = reference(q, k, v, causal, sm_scale)
    assert o.shape == q.shape and lse.shape == (B, H, N)
    assert_close("o", o, ref_o)
    assert_close("lse", lse, ref_lse)
    grads = host.backward(q, k, v, o, lse, do, causal, sm_scale)
    for name, grad, ref in zip(("dq", "dk", "dv"), grads, ref_grads(do), strict=True):
        assert grad.shape == q.shape, name
        assert_close(name, grad, ref)


def test_autograd_runs_the_padded_kernels():
    q, k, v, do = inputs(1, 2, 20, 80, seed=1)
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    out = host.flash_attention(q, k, v, True)
    grads = torch.autograd.grad(out, (q, k, v), do)
    ref_o, _, ref_grads = reference(q, k, v, True, 80 ** -0.5)
    assert_close("o", out, ref_o)
    for name, grad, ref in zip(("dq", "dk", "dv"), grads, ref_grads(do), strict=True):
        assert_close(name, grad, ref)


def test_padded_forward_writes_only_the_given_buffers():
    q, k, v, _ = inputs(1, 2, 20, 80, seed=2)
    buffer = torch.full((1, 2, 24, 80), float("nan"))
    out, lse = host.forward(q, k, v, False, out=buffer[:, :, :20])
    assert out.data_ptr() == buffer.data_ptr()
    assert torch.isnan(buffer[:, :, 20:]).all() and not torch.isnan(buffer[:, :, :20]).any()
    assert_close("o", out, reference(q, k, v, False, None)[0])


# ---------------------------------------------------------------- lesson 9's launchers


@pytest.fixture(scope="module")
def lesson9(root):
    return cells.load_cells(root / "lessons" / LESSON_9, list(LESSON_9_KERNELS),
                            prelude=cells.PRELUDE)


@pytest.mark.parametrize("d", [80, 256])
def test_block_sparse_forward_at_any_head_dim(lesson9, d):
    N = 45
    docs = ma.packed_documents([20, 17], padding=8)
    mask = ma.dense_mask(N, N, left=11, right=0, docs=docs)  # causal window in documents
    q, k, v, _ = inputs(2, 2, N, d, seed=d, transposed=True)
    out = ma.sparse_attention(lesson9.sparse_attention_kernel, q, k, v, mask, docs, left=11,
                              right=0, sm_scale=0.2)
    assert out.shape == q.shape
    assert_close("sparse o", out, ma.masked_reference(q, k, v, mask, sm_scale=0.2))


def test_gqa_forward_at_head_dim_80(lesson9):
    q = inputs(1, 4, 24, 80, seed=3)[0]
    k, v = inputs(1, 2, 24, 80, seed=4)[:2]
    out = torch.empty_like(q)
    ma.launch_gqa(lesson9.gqa_attention_kernel, q, k, v, out)
    assert_close("gqa o", out, ma.gqa_reference(q, k, v))


@pytest.mark.parametrize("d", [80, 256])
def test_paged_split_decoding_at_any_head_dim(lesson9, d):
    lengths = [70, 0, 33]
    gen = torch.Generator().manual_seed(d)
    q = torch.randn(3, 4, d, generator=gen)
    k, v = (torch.randn(3, 2, 70, d, generator=gen) for _ in range(2))
    k_pages, v_pages, table, _ = ma.paged_cache(k, v, lengths, page_size=8, seed=1)
    out = ma.paged_split_decode(lesson9.paged_split_kernel, lesson9.merge_states_kernel, q,
                                k_pages, v_pages, table, torch.tensor(lengths, dtype=torch.int32),
                                split_size=32, block_n=16, max_len=70)
    assert out.shape == q.shape
    assert_close("decoded o", out, ma.decode_reference(q, k, v, lengths))


# ---------------------------------------------------------------- refused inputs


def test_kernel_head_dims():
    widths = {d: host.kernel_head_dim(d) for d in (1, 16, 17, 64, 80, 96, 128, 129, 160, 256)}
    assert widths == {1: 16, 16: 16, 17: 32, 64: 64, 80: 128, 96: 128, 128: 128, 129: 256,
                      160: 256, 256: 256}


@pytest.mark.parametrize("d", [0, 257, 512])
def test_head_dims_out_of_range_are_refused(d):
    q = torch.zeros(1, 1, 16, d)
    with pytest.raises(CourseInputError, match=rf"head dim {d} is not supported: the reference "
                                               r"kernels take head dims 1 to 256"):
        host.forward(q, q, q)
    with pytest.raises(CourseInputError, match=rf"head dim {d} is not supported"):
        host.backward(q, q, q, q, torch.zeros(1, 1, 16), q, False)


def test_mismatched_shapes_are_refused(lesson9):
    q = torch.zeros(1, 2, 16, 80)
    with pytest.raises(CourseInputError, match=r"q, k and v must all have shape \(B, H, N, D\)"):
        host.forward(q, torch.zeros(1, 2, 16, 96), q)
    with pytest.raises(CourseInputError, match=r"q, k and v must all have shape"):
        host.forward(q, q, torch.zeros(1, 2, 17, 80))
    lists = ma.block_list_tensors(np.full((1, 1), ma.FULL, np.int8), "cpu")
    with pytest.raises(CourseInputError, match=r"the last axis \(the head dim\) must be the same "
                                               r"for q \(80\), k \(96\), v \(80\), out \(80\)"):
        ma.launch_sparse(lesson9.sparse_attention_kernel, q, torch.zeros(1, 2, 16, 96), q,
                         torch.empty_like(q), torch.zeros(16, dtype=torch.int32), ma.UNLIMITED,
                         ma.UNLIMITED, lists, 16, 16)


def test_the_students_check_still_asks_for_a_power_of_two():
    q = torch.zeros(1, 1, 16, 80)
    with pytest.raises(CourseInputError, match="head dim 80 is not supported: use 16, 32"):
        attention.check_qkv(q, q, q)
