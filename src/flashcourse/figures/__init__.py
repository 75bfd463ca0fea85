"""Figures drawn by code (never pasted images), shared by the lessons: `fc.figures.<name>(...)`.

- `overview.py` (lesson 1): the memory hierarchy and attention's HBM traffic;
- `roofline_plot.py` (lesson 2): a machine's two ceilings and kernels placed under them;
- `access.py` (lesson 3): which sectors and lines a warp's load touches.
"""

from .access import access_patterns
from .overview import attention_traffic, memory_hierarchy
from .roofline_plot import roofline

__all__ = ["access_patterns", "attention_traffic", "memory_hierarchy", "roofline"]
