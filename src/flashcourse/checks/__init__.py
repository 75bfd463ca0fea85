"""The checks of each lesson, one module named after the lesson's file (lessons/NN-<name>.qmd):
importing this package registers every exercise with `flashcourse.grading`."""

from ..runtime import current

# Choose the runtime before any check module defines a Triton kernel: Triton reads
# TRITON_INTERPRET when a kernel is decorated, not when it runs.
current()

from . import (  # noqa: E402,F401
    coalescing,  # 03-coalescing
    flash_attention,  # 06-flash-attention
    gpu_flash,  # 01-gpu-flash
    memory_roofline,  # 02-memory-roofline
    performance,  # 07-performance
    softmax,  # 05-softmax
    tiling_matmul,  # 04-tiling-matmul
)
