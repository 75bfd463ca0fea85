"""The checks: they run in the student's notebook (and again in the grader's replay).

`registry.py` holds the exercises and `check`/`scorecard`; `errors.py`, `cases.py`,
`compare.py`, `buffers.py` (poisoned inputs, canaried outputs), `guards.py` (guarded launches)
and `recording.py` (what crosses the grader's sandbox) are shared by every lesson. The other
modules hold one lesson's checks each, named after the lesson's file (lessons/NN-<name>.qmd);
`registry` imports them by name, listed in `LESSON_MODULES`, the first time it needs them.
"""

# Lesson check modules in lesson order: lessons/NN-<name>.qmd -> checks/<module>.py.
LESSON_MODULES = {
    "01-gpu-flash": "gpu_flash",
    "02-memory-roofline": "memory_roofline",
    "03-coalescing": "coalescing",
    "04-tiling-matmul": "tiling_matmul",
    "05-softmax": "softmax",
    "06-flash-forward": "flash_forward",
    "07-flash-backward": "flash_backward",
    "08-performance": "performance",
    "09-modern-attention": "modern_attention",
    "10-ring-attention": "ring_attention",
    "11-capstone": "capstone",
}

# The lesson id each module registers (registry.lesson), the prefix of its exercise ids: a
# notebook's checks import only their own lesson's module (tests/test_lesson_loading.py holds
# the two tables together), so that a numpy-only lesson does not import torch through the others.
LESSON_IDS = {
    "01-gpu-flash": "gpu-flash",
    "02-memory-roofline": "roofline",
    "03-coalescing": "coalescing",
    "04-tiling-matmul": "tiling",
    "05-softmax": "softmax",
    "06-flash-forward": "flash-triton",
    "07-flash-backward": "flash-backward",
    "08-performance": "performance",
    "09-modern-attention": "modern-attention",
    "10-ring-attention": "ring-attention",
    "11-capstone": "capstone",
}
