"""The solution kernels of lessons 6 and 7, and known-wrong variants made by editing their
source, for tests/test_flash_forward.py and tests/test_flash_backward.py."""

from pathlib import Path

from flashcourse.authoring import cells

ROOT = Path(__file__).resolve().parents[1]
FORWARD_LESSON = ROOT / "lessons" / "06-flash-forward.qmd"
BACKWARD_LESSON = ROOT / "lessons" / "07-flash-backward.qmd"
SOLUTION = cells.flash_kernels_source(ROOT / "lessons",
                                      {"06-flash-forward": ("exercise-skipped",)})


def student_module(*edits):
    """The lessons' kernels with textual edits applied (cells.edit: (old, new) matches
    once, (old, new, count) count times), imported from a real file (@triton.jit reads the
    source with inspect)."""
    return cells.load(SOLUTION, edits, prelude=cells.TRITON_PRELUDE)
