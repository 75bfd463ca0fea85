"""Checks of lesson 7, "The FlashAttention backward in Triton".

The backward of one head in numpy against float64 formulas, and the student's dK/dV and dQ
kernels, launched by the grader (`attention.launch_dkdv`, `attention.launch_dq`) on inputs
inside NaN padding with outputs inside canaries, against the same formulas with each known
mistake switched on to name it (`backward.py`). Cases and launch helpers are lesson 6's, in
`checks/flash_cases.py`; questions and misconceptions: self_checks/07-flash-backward.toml.
"""

from __future__ import annotations

from ...i18n import N_
from .. import registry

LESSON = registry.lesson("flash-backward", N_("Lesson 7: The FlashAttention backward in Triton"),
                        pass_line=8)

from . import backward  # noqa: E402, F401, I001
