"""Lesson 5's host side: how the lesson's cells and its checks launch the student's softmax
kernels (one program per row; the row in one block, or walked over in blocks of BLOCK)."""

from __future__ import annotations

import torch

from .. import runtime
from ..checks import guards


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
    guards.require_jit_kernel(kernel, "softmax/row-kernel", "softmax_row_kernel")
    runtime.check_tensors(x, names=("x",))
    y = torch.empty_like(x)
    launch_row_softmax(kernel, x, y)
    return y


def online_softmax(kernel, x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Run an online-softmax kernel on a (rows, n_cols) tensor; returns a new tensor."""
    guards.require_jit_kernel(kernel, "softmax/online-kernel", "online_softmax_kernel")
    runtime.check_tensors(x, names=("x",))
    y = torch.empty_like(x)
    launch_online_softmax(kernel, x, y, block)
    return y


def launch_masked_softmax(kernel, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor,
                          scale: float, block: int) -> None:
    """How the grader launches your masked-softmax kernel: one program per row, which walks
    over the row in blocks of BLOCK columns; lengths holds one int32 per row."""
    runtime.check_block_size("BLOCK", block)
    n_rows, n_cols = x.shape
    kernel[(n_rows,)](x, y, lengths, n_cols, x.stride(0), y.stride(0), scale, BLOCK=block,
                      num_warps=num_warps_for(block))


def masked_softmax(kernel, x: torch.Tensor, lengths: torch.Tensor, scale: float = 1.0,
                   block: int = 128) -> torch.Tensor:
    """Run a masked-softmax kernel on a (rows, n_cols) tensor; returns a new tensor."""
    guards.require_jit_kernel(kernel, "softmax/masked-softmax", "masked_softmax_kernel")
    runtime.check_tensors(x, lengths, names=("x", "lengths"))
    if lengths.dtype != torch.int32 or lengths.shape != (x.shape[0],):
        raise runtime.CourseInputError(
            f"lengths must be an int32 tensor with one entry per row of x, shape "
            f"({x.shape[0]},); got {lengths.dtype} of shape {tuple(lengths.shape)}. Build it "
            "with torch.tensor([...], dtype=torch.int32, device=x.device).")
    y = torch.empty_like(x)
    launch_masked_softmax(kernel, x, y, lengths, scale, block)
    return y
