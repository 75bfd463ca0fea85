"""Published and measured numbers about the GPUs the course talks about, kept in one place.

Bandwidths are whole-chip figures; capacities of registers and shared memory are per SM.
Ranges are (low, high) because vendors and microbenchmarks disagree within them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryLevel:
    name: str  # level of the hierarchy
    capacity: str  # human-readable size and scope
    bandwidth_tbs: tuple[float, float]  # whole-chip bandwidth, TB/s
    latency_cycles: tuple[float, float]  # load-to-use latency, clock cycles
    shared_by: str  # who can see the data


# NVIDIA H200 SXM (Hopper), the chip the course measures on: the H100 SXM's die (SMs, tensor
# cores, caches) with 141 GB of HBM3e at 4.8 TB/s (datasheet).
# Shared memory / L1: 132 SMs x 128 B per clock x 1.8-1.98 GHz = about 30-33 TB/s.
# Registers: an estimate, not a published figure. Each SM's four schedulers can each read up
# to three 32-lane fp32 operands per clock (4 x 384 B); 132 SMs at about 1.8 GHz give several
# hundred TB/s.
H200_MEMORY = (
    MemoryLevel("Registers", "256 KB per SM", (300, 400), (0.5, 1), "one thread"),
    MemoryLevel("Shared memory / L1", "228 KB per SM", (30, 33), (20, 30),
                "one thread block"),
    MemoryLevel("L2 cache", "60 MiB per chip", (5, 8), (100, 200), "whole chip"),
    MemoryLevel("HBM3e", "141 GB per chip", (4.8, 4.8), (400, 800), "whole chip + host"),
)

H200_SMS = 132
H200_DENSE_BF16_TFLOPS = 989  # tensor cores, dense, datasheet
H200_HBM_TBS = 4.8  # datasheet
WARP_SIZE = 32
# What one thread block may use on Hopper (sm_90: H100 and H200), from NVIDIA's CUDA
# programming guide: shared memory (227 KB of the SM's 228 KB, opted in above the default
# 48 KB) and registers per thread (more spill to local memory).
HOPPER_SHARED_BYTES_PER_BLOCK = 227 * 1024
HOPPER_REGISTERS_PER_THREAD = 255
# What one SM holds at once on Hopper (same guide): 64K 32-bit registers, given out per warp in
# units of 256 (8 a thread); 228 KB of shared memory, of which the system keeps 1 KB per block;
# at most 64 warps.
HOPPER_SM_REGISTERS = 65536
HOPPER_REGISTER_UNIT = 8
HOPPER_SM_SHARED_BYTES = 228 * 1024
HOPPER_SHARED_RESERVED_PER_BLOCK = 1024
HOPPER_SM_WARPS = 64
# Hopper's tensor-core matmul (wgmma) is issued by a warpgroup of 4 warps on 64 rows of A (its
# M; PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"): a tile of fewer rows
# per warpgroup compiles to the older mma instructions.
WARPS_PER_WARPGROUP = 4
HOPPER_WGMMA_ROWS = 64
TMA_BOX_MAX = 256  # a TMA copy spans at most 256 elements along each axis (CUDA driver API)

# Measured on the course's NVIDIA H200 (torch 2.11, Triton 3.6): assets/results/02-ceilings.csv
# (gpu/measure_ceilings.py), a bf16 8192^3 cuBLAS GEMM and a 2 GiB device-to-device copy, each
# the median of 10 timings; tests/test_results_table.py fails when these drift from it.
H200_MEASURED_GEMM_BF16_TFLOPS = 682
H200_MEASURED_COPY_TBS = 4.3
# L2 of the course's H200 as the device reports it (torch.cuda.get_device_properties(0)
# .L2_cache_size = 62914560 bytes).
H200_L2_MIB = 60
# NVLink of one H200 SXM (datasheet): 900 GB/s per GPU, both directions together, so a ring's
# transfer to the next GPU gets half of it.
H200_NVLINK_GBS = 900


def ridge_point(peak_tflops: float, bandwidth_tbs: float) -> float:
    """FLOPs per byte an operator needs before compute, not memory, limits it."""
    return peak_tflops / bandwidth_tbs
