"""Kernels of the course and their host side, split by role.

Importable before a runtime is chosen (no @triton.jit inside):

* `tiles`: the one table of tile sizes, warps and stages, with where each was measured.
* `attention`: the host side of lesson 6's kernels (the student's): inputs, the torch reference
  `standard_attention`, launchers, the one autograd Function, causal tile counts, memory.

Import after `fc.setup()` (they define @triton.jit functions; each picks the runtime itself if
nobody did):

* `common`: @triton.jit helpers shared by the reference kernels (row loads, the online-softmax
  update, stores).
* `forward`, `backward`: the reference FlashAttention-2 kernels.
* `ladder`: the forward's optimisation ladder (`Step`, `STEPS`) and what this machine supports.
* `host`: launches the reference kernels; `flash_attention(q, k, v, causal, sm_scale, step)`.
* `verify`: correctness checks of the reference kernels against torch (used by tests, the
  benchmark harness and the GPU scripts; the graders of the student's kernels are in `checks/`).
* `cuda_fwd` (+ `flash_fwd.cu`): a tiled CUDA C++ forward kernel, built with
  torch.utils.cpp_extension.load_inline on a CUDA machine.
"""

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): log(x) == log2(x) * LN2
