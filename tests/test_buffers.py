"""Poisoned inputs and canaried outputs catch missing masks in the interpreter."""

import pytest
import torch

import flashcourse as fc
from flashcourse.checks import registry
from flashcourse.checks.buffers import CANARY, Canaried, poisoned

DEVICE = fc.setup(verbose=False).device  # "cpu" in the interpreter, "cuda" on a GPU
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _row_sum(x_ptr, y_ptr, n_cols, stride_x, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    if MASKED:
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0)
    else:
        x = tl.load(x_ptr + row * stride_x + cols)
    tl.store(y_ptr + row, tl.sum(x, axis=0))


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASK_STORE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    if MASK_STORE:
        tl.store(y_ptr + offsets, x, mask=offsets < n)
    else:
        tl.store(y_ptr + offsets, x)


def test_poisoned_view_holds_the_data_inside_nan():
    x = torch.randn(3, 5, device=DEVICE)
    view = poisoned(x)
    assert torch.equal(view, x) and not view.is_contiguous()
    assert torch.isnan(view.as_strided((1,), (1,), view.storage_offset() + 5)).all()


@pytest.mark.parametrize("masked", [True, False])
def test_missing_load_mask_reads_poison(masked):
    x = torch.randn(4, 13, device=DEVICE)
    out = Canaried((4,), device=DEVICE)
    xp = poisoned(x)
    _row_sum[(4,)](xp, out.tensor, 13, xp.stride(0), BLOCK=16, MASKED=masked)
    out.verify("case")
    if masked:
        registry.compare(out.tensor, x.sum(1), "case", atol=1e-5)
    else:
        with pytest.raises(registry.WrongAnswer, match="NaN or inf"):
            registry.compare(out.tensor, x.sum(1), "case", atol=1e-5)


def test_missing_store_mask_hits_a_canary():
    x = torch.randn(37, device=DEVICE)
    out = Canaried((37,), device=DEVICE)
    _copy[(3,)](poisoned(x), out.tensor, 37, BLOCK=16, MASK_STORE=False)
    with pytest.raises(registry.WrongAnswer, match=r"11 value.* at index 37, past the last "
                                                r"index 36.*Mask the stores"):
        out.verify("case 1")


def test_unwritten_outputs_stay_nan_and_canaries_stay_put():
    out = Canaried((2, 3), dtype=torch.float16, device=DEVICE)
    assert out.unwritten().all()
    out.tensor.zero_()
    out.verify("case")
    assert not out.unwritten().any()
    assert CANARY == float(torch.tensor(CANARY, dtype=torch.bfloat16))
