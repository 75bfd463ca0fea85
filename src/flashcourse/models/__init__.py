"""The lessons' models of the hardware, on paper: what a kernel costs before it runs.

- `traffic.py` (lesson 1): bytes each attention kernel moves through HBM, and FLOPs;
- `roofline.py` (lesson 2): arithmetic intensity and attainable throughput;
- `memory.py` (lesson 3): sectors and lines a warp's load touches, warp efficiency;
- `matmul.py` (lesson 4): HBM traffic of a tiled matmul, the grouped launch order.

Their machine facts come from `flashcourse.hardware`, the one table of them.
"""

from . import matmul, memory, roofline, traffic

__all__ = ["matmul", "memory", "roofline", "traffic"]
