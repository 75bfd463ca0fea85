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

from .access import access_patterns
from .algorithm import backward_flow, causal_tile_map, flash_tiling
from .decoding import paged_split_decode
from .overview import attention_traffic, memory_hierarchy
from .ring import ring_scaling, ring_schedule_map, ring_work_balance
from .roofline_plot import roofline
from .softmax_blocks import online_softmax_blocks
from .tiled_matmul import matmul_tiling

__all__ = ["access_patterns", "attention_traffic", "backward_flow", "causal_tile_map",
           "flash_tiling", "matmul_tiling", "memory_hierarchy", "online_softmax_blocks",
           "paged_split_decode",
           "ring_scaling", "ring_schedule_map", "ring_work_balance", "roofline"]
