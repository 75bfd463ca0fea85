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

# Each figure's module, imported on first use: drawing needs matplotlib and some figures torch,
# which a notebook that draws nothing (or a grader's process) should not wait for.
_HOMES = {
    "access_patterns": "access",
    "attention_traffic": "overview", "memory_hierarchy": "overview",
    "backward_flow": "algorithm", "causal_tile_map": "algorithm", "flash_tiling": "algorithm",
    "matmul_tiling": "tiled_matmul",
    "online_softmax_blocks": "softmax_blocks",
    "paged_split_decode": "decoding",
    "ring_scaling": "ring", "ring_schedule_map": "ring", "ring_work_balance": "ring",
    "roofline": "roofline_plot",
}
_MODULES = ("access", "algorithm", "decoding", "interactive", "overview", "ring",
            "roofline_plot", "softmax_blocks", "tiled_matmul")
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *_MODULES])
