"""Bytes that attention moves through HBM, counted kernel by kernel (used by several lessons)."""

from __future__ import annotations

from dataclasses import dataclass

from .matmul import cdiv

DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2}


def format_bytes(count: float) -> str:
    """Binary units, as the memory of a GPU is sized: 33554432 -> '32 MiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            text = f"{count:.1f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def score_matrix_bytes(n: int, dtype: str = "bf16") -> int:
    """One (n, n) score matrix S (or P) of one head."""
    return n * n * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class KernelTraffic:
    kernel: str  # what the kernel computes
    read_bytes: int
    written_bytes: int

    @property
    def total(self) -> int:
        return self.read_bytes + self.written_bytes


def standard_attention_traffic(n: int, d: int, dtype: str = "bf16") -> list[KernelTraffic]:
    """Three kernels of eager attention for one head: S = QK^T, P = softmax(S), O = PV."""
    size = DTYPE_BYTES[dtype]
    vec, mat = n * d * size, n * n * size  # one (n, d) operand, one (n, n) matrix
    return [
        KernelTraffic("S = Q K^T", read_bytes=2 * vec, written_bytes=mat),
        KernelTraffic("P = softmax(S)", read_bytes=mat, written_bytes=mat),
        KernelTraffic("O = P V", read_bytes=mat + vec, written_bytes=vec),
    ]


def flash_attention_traffic(n: int, d: int, dtype: str = "bf16", block_rows: int = 128,
                            kv_reads_hit_l2: bool = False) -> KernelTraffic:
    """One fused kernel: Q read once, O written once, and K and V read once per query block,
    or only once in all when `kv_reads_hit_l2` (query blocks of one head run side by side and
    share K and V through the L2 cache)."""
    size = DTYPE_BYTES[dtype]
    query_blocks = 1 if kv_reads_hit_l2 else cdiv(n, block_rows)
    return KernelTraffic(
        "fused FlashAttention",
        read_bytes=n * d * size + query_blocks * 2 * n * d * size,
        written_bytes=n * d * size,
    )


def attention_flops(n: int, d: int, batch: int = 1, heads: int = 1, causal: bool = False,
                    backward: bool = False) -> float:
    """4*B*H*N*N*d for QK^T and PV, halved when causal; backward counts 2.5x the forward."""
    flops = 4.0 * batch * heads * n * n * d
    if causal:
        flops /= 2
    if backward:
        flops *= 2.5
    return flops
