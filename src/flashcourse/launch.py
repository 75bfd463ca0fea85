"""Launching a Triton kernel from a notebook cell: `fc.run_kernel(kernel, grid, *args)`.

Student-facing: it is `kernel[grid](*args, **kwargs)`, except that an unfilled blank or a stub
inside the kernel raises its own short error instead of a Triton interpreter stack trace.
"""

from __future__ import annotations

from .blanks import BlankNotFilled


def run_kernel(kernel, grid, *args, **kwargs):
    """`kernel[grid](*args, **kwargs)` for notebook cells: an unfilled blank or a stub inside
    the kernel raises its own short error instead of a Triton interpreter stack trace."""
    from .kernels.attention import refuse_unfinished_kernel  # torch: only once a kernel runs

    refuse_unfinished_kernel(kernel, getattr(getattr(kernel, "fn", kernel), "__name__",
                                             "the kernel"))
    try:
        return kernel[grid](*args, **kwargs)
    except (BlankNotFilled, NotImplementedError):
        raise
    except Exception as err:
        raise_blank_or_stub(err)
        raise


def raise_blank_or_stub(err: Exception) -> None:
    """Triton wraps errors raised while it runs a kernel: re-raise a blank or a stub found
    inside as itself."""
    cause = err.__cause__ or err.__context__
    if isinstance(cause, (BlankNotFilled, NotImplementedError)):
        raise cause from None
