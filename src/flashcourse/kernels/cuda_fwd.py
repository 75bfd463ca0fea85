"""Build the CUDA C++ forward kernel (flash_fwd.cu) into a torch extension, and check it.

    from flashcourse.kernels import cuda_fwd
    ext = cuda_fwd.build()                 # torch.utils.cpp_extension.load_inline: about a minute
    out = cuda_fwd.attention(q, k, v, causal=True)   # (B, H, N, D) fp16 on a CUDA GPU

The .cu file has no torch headers (so `nvcc -c` compiles it anywhere); the few lines below bind
it to torch tensors and the current CUDA stream.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("flash_fwd.cu")

CPP_DECL = ("torch::Tensor flash_fwd(torch::Tensor q, torch::Tensor k, torch::Tensor v, "
            "bool causal, double sm_scale);")

BINDING = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

torch::Tensor flash_fwd(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool causal,
                        double sm_scale) {
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), "q, k, v must be CUDA tensors");
  TORCH_CHECK(q.scalar_type() == at::kHalf && k.scalar_type() == at::kHalf &&
              v.scalar_type() == at::kHalf, "q, k, v must be float16");
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "q, k, v must all be (B, H, N, D)");
  auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  auto out = torch::empty_like(qc);
  const int batch_heads = q.size(0) * q.size(1), n = q.size(2), d = q.size(3);
  auto err = flashcourse_flash_fwd(
      reinterpret_cast<const __half*>(qc.data_ptr<at::Half>()),
      reinterpret_cast<const __half*>(kc.data_ptr<at::Half>()),
      reinterpret_cast<const __half*>(vc.data_ptr<at::Half>()),
      reinterpret_cast<__half*>(out.data_ptr<at::Half>()), batch_heads, n, d,
      static_cast<float>(sm_scale), causal, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "flash_fwd launch failed: ", cudaGetErrorString(err),
              " (d must be 16, 32, 64 or 128)");
  return out;
}
"""

_EXT = None


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def compile_object(out_dir: Path, arch: str = "sm_90", ptx: bool = False) -> Path:
    """`nvcc -c` (or `-ptx`) of flash_fwd.cu alone: no GPU and no torch needed."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    target = out_dir / ("flash_fwd.ptx" if ptx else "flash_fwd.o")
    cmd = [nvcc, "-ptx" if ptx else "-c", f"-arch={arch}", "-O3", str(SOURCE), "-o",
           str(target)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr}")
    return target


def build(verbose: bool = False):
    """Compile flash_fwd.cu and its binding with torch.utils.cpp_extension.load_inline (needs
    CUDA, nvcc and ninja; cached in torch's extensions folder after the first build)."""
    global _EXT
    if _EXT is None:
        from torch.utils.cpp_extension import load_inline

        source = SOURCE.read_text()
        _EXT = load_inline(name="flashcourse_flash_fwd", cpp_sources=CPP_DECL,
                           cuda_sources=[source + BINDING], functions=["flash_fwd"],
                           extra_cuda_cflags=["-O3"], verbose=verbose)
    return _EXT


def attention(q, k, v, causal: bool = False, sm_scale: float | None = None):
    """The CUDA kernel's attention for (B, H, N, D) fp16 CUDA tensors."""
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    return build().flash_fwd(q, k, v, causal, float(sm_scale))


def check(shapes=((2, 3, 333, 64), (2, 2, 1000, 128), (1, 2, 77, 32)), atol: float = 2e-2,
          seed: int = 0) -> list[str]:
    """Compare the CUDA kernel with float32 standard attention (ragged N, B > 1, H > 1)."""
    import torch

    from .verify import max_error, reference_fp32

    lines = []
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for B, H, N, D in shapes:
        for causal in (False, True):
            q, k, v = (torch.randn(B, H, N, D, generator=gen).to("cuda", torch.float16)
                       for _ in range(3))
            out = attention(q, k, v, causal)
            ref, _ = reference_fp32(q, k, v, causal)
            err, ok = max_error(out, ref, atol)
            label = f"CUDA kernel B={B} H={H} N={N} D={D} {'causal' if causal else 'full'}"
            if not ok:
                raise AssertionError(f"{label}: max error {err:.3g} > {atol:g}")
            lines.append(f"{label}: ok (max error {err:.1e})")
    return lines
