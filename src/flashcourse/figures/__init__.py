"""Figures drawn by code (never pasted images), shared by the lessons: `fc.figures.<name>(...)`.

- `overview.py` (lesson 1): the memory hierarchy and attention's HBM traffic;
- `roofline_plot.py` (lesson 2): a machine's two ceilings and kernels placed under them;
- `access.py` (lesson 3): which sectors and lines a warp's load touches;
- `tiled_matmul.py` (lesson 4): one program's tile of C and the tiles of A and B it loads;
- `softmax_blocks.py` (lesson 5): the online softmax's running max, sum and output per block;
- `algorithm.py` (lessons 1, 6 and 7): the FlashAttention tiling, the causal tile map and the
  backward's data flow;
- `decoding.py` (lesson 9): paged split-KV decoding, positions to splits, page table and pool;
- `ring.py` (lesson 10): the ring schedule, the causal work per rank under each split and the
  two-GPU measurements;
- `interactive.py` (lessons 4, 5, 6 and 10): the book's interactive diagrams (Observable JS in
  `ojs/`) and the tables of the package's models they load.
"""

import importlib
import sys

# Each figure's module imports matplotlib (most of a second): it loads on the figure's first
# use, so that importing the package (every notebook, check and grading process does) never
# pays for it.
_HOMES = {
    "access_patterns": "access",
    **dict.fromkeys(("backward_flow", "causal_tile_map", "flash_tiling"), "algorithm"),
    "paged_split_decode": "decoding",
    **dict.fromkeys(("attention_traffic", "memory_hierarchy"), "overview"),
    **dict.fromkeys(("ring_scaling", "ring_schedule_map", "ring_work_balance"), "ring"),
    "roofline": "roofline_plot",
    "online_softmax_blocks": "softmax_blocks",
    "matmul_tiling": "tiled_matmul",
}
_MODULES = {*_HOMES.values(), "interactive"}


def __getattr__(name: str):
    from ..checks.cases import grading_mode

    if name in _MODULES:  # figures.softmax_blocks and the like, as submodules
        return importlib.import_module(f"{__name__}.{name}")
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if grading_mode():  # nobody looks at a graded notebook's course figures: not drawn
        return _not_drawn
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def _not_drawn(*args, **kwargs) -> None:
    return None


def show() -> None:
    """Show the figures drawn so far, as `plt.show()` does. The lessons call this instead of
    importing pyplot themselves: a graded notebook draws no figure, and so never pays the
    import (most of a second per notebook, in every sandbox of a class's grading)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:  # no figure was drawn otherwise
        pyplot.show()


__all__ = sorted([*_HOMES, "show"])
