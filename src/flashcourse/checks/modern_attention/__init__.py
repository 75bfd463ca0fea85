"""Checks of lesson 9, "Attention as people run it today".

Six code exercises: the block map of a mask (numpy) and the block-sparse kernel that walks only
the listed key blocks (`masks.py`), the head arithmetic of grouped-query attention
(`heads.py`), and decoding written from scratch (`decoding.py`): the split size that fills the
GPU, the kernel that decodes one split of a paged cache for a group of query heads and writes
its partial softmax state, and the kernel that merges the states; shared cases and helpers in
`common.py`. Every kernel is launched by the grader
(`kernels.modern_attention.launch_*`) with inputs inside NaN padding and outputs inside
canaries. Its self-check questions and veto misconceptions are data:
self_checks/09-modern-attention.toml.
"""

from __future__ import annotations

from ...i18n import N_
from .. import registry
from . import decoding, heads, masks

LESSON = registry.lesson("modern-attention", N_("Lesson 9: Attention as people run it today"),
                         pass_line=8)

# The exercises, in the scorecard's order.
registry.exercise("modern-attention/block-map", N_("the block map of a mask (numpy)"), 1)(
    masks.check_block_map)
registry.exercise("modern-attention/sparse-kernel",
                  N_("block-sparse attention kernel over the listed blocks"), 2, kernel=True)(
    masks.check_sparse)
registry.exercise("modern-attention/gqa-kernel", N_("grouped-query heads in the kernel"), 1,
                  kernel=True)(heads.check_gqa)
registry.exercise("modern-attention/split-size", N_("a split size that fills the GPU"), 1)(
    decoding.check_split_size)
registry.exercise("modern-attention/paged-split",
                  N_("paged split-KV decoding of a group: partial states"), 1, kernel=True)(
    decoding.check_paged_split)
registry.exercise("modern-attention/merge-states", N_("merge kernel for the split states"), 1,
                  kernel=True)(decoding.check_merge)
