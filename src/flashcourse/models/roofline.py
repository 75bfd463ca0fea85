"""The roofline model: arithmetic intensity, attainable throughput, and where the kernels of
attention sit (lesson 2). FLOPs are counted here; bytes come from `traffic.py` beside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import hardware
from . import traffic

# max, subtract, exp, sum and divide: five FLOPs per score for a row softmax (exp counted as one)
SOFTMAX_FLOPS_PER_SCORE = 5
# FA2-style kernels on Hopper process 128 query rows per program
FUSED_BLOCK_ROWS = 128

H200_PEAK_TFLOPS = hardware.H200_MEASURED_GEMM_BF16_TFLOPS
H200_BANDWIDTH_TBS = hardware.H200_MEASURED_COPY_TBS


def gemm_intensity(m: int, n: int, k: int, element_bytes: int) -> float:
    """FLOPs per HBM byte of C = A @ B, A (m, k) and B (k, n): A, B read once, C written once."""
    flops = 2.0 * m * n * k  # one multiply and one add per (i, j, l)
    moved = (m * k + k * n + m * n) * element_bytes
    return flops / moved


def attainable_tflops(intensity, peak_tflops: float, bandwidth_tbs: float):
    """The roofline: min(peak, intensity * bandwidth); FLOP/B x TB/s = TFLOP/s."""
    return np.minimum(peak_tflops, np.asarray(intensity, dtype=np.float64) * bandwidth_tbs)


@dataclass(frozen=True)
class KernelPoint:
    kernel: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def attention_points(n: int, d: int, dtype: str = "bf16",
                     block_rows: int = FUSED_BLOCK_ROWS) -> list[KernelPoint]:
    """The three kernels of standard attention and one fused kernel, one head.

    The fused kernel's bytes assume K and V are re-read from HBM for every block of
    `block_rows` query rows (the pessimistic count of `traffic.flash_attention_traffic`).
    """
    standard = traffic.standard_attention_traffic(n, d, dtype)
    flops = [2.0 * n * n * d, SOFTMAX_FLOPS_PER_SCORE * float(n) * n, 2.0 * n * n * d]
    points = [KernelPoint(k.kernel, f, k.total) for k, f in zip(standard, flops, strict=True)]
    fused = traffic.flash_attention_traffic(n, d, dtype, block_rows=block_rows)
    fused_flops = 4.0 * n * n * d + SOFTMAX_FLOPS_PER_SCORE * float(n) * n
    points.append(KernelPoint(fused.kernel, fused_flops, fused.total))
    return points


def attention_intensities(n: int, d: int, dtype: str = "bf16",
                          block_rows: int = FUSED_BLOCK_ROWS) -> np.ndarray:
    """[QK^T, softmax, PV, fused] arithmetic intensities, FLOPs per byte."""
    return np.array([p.intensity for p in attention_points(n, d, dtype, block_rows)])


def time_bound_us(point: KernelPoint, peak_tflops: float = H200_PEAK_TFLOPS,
                  bandwidth_tbs: float = H200_BANDWIDTH_TBS) -> float:
    """The least time the roofline allows a kernel, microseconds: max(compute, memory)."""
    return max(point.flops / (peak_tflops * 1e12), point.bytes / (bandwidth_tbs * 1e12)) * 1e6


def fused_read_once_point(n: int, d: int, dtype: str = "bf16") -> KernelPoint:
    """The fused kernel when K and V come from L2 after their first read: HBM sees Q, K, V
    once and O once (one head's K and V, 2 MiB at N = 4096 and 16 MiB at N = 32k with
    d = 128 in bf16, fit in the H200's 60 MiB L2)."""
    once = traffic.flash_attention_traffic(n, d, dtype, block_rows=n)
    flops = 4.0 * n * n * d + SOFTMAX_FLOPS_PER_SCORE * float(n) * n
    return KernelPoint("fused, K and V read once", flops, once.total)
