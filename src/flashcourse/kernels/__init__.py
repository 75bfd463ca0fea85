"""Reference kernels of the course.

* `flash_ref`: the course's FlashAttention-2 in Triton (forward with an optimisation ladder,
  backward with recomputation), wrapped as a torch.autograd.Function.
* `cuda_fwd`: a tiled CUDA C++ forward kernel (source in `flash_fwd.cu`), built with
  torch.utils.cpp_extension.load_inline on a CUDA machine.

Import the submodules after `fc.setup()`: Triton picks the interpreter when a kernel is defined.
"""
