"""The attention benchmark's cases: shapes, dtypes and inputs (B * N = 32k tokens, H * d = 2048).

Used by the harness (`bench/harness.py`), the GPU scripts and lesson 8's cells.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKENS = 32 * 1024  # B * N of every case
FULL_NS = (1024, 2048, 4096, 8192, 16384)
QUICK_NS = (1024, 4096)
# Providers that materialise the (N, N) scores: skipped above these N (memory and time).
DENSE_MAX_N = {"fwd": 8192, "fwdbwd": 4096}
COMPILE_NS = (1024, 4096)  # torch.compile recompiles per shape: a few lengths, fp16 only
PROVIDERS = ("naive", "compile", "sdpa-math", "sdpa-efficient", "sdpa-flash", "sdpa-cudnn",
             "course")
# Triton's own fused-attention tutorial (python/tutorials/06-fused-attention.py of a Triton
# checkout, not shipped with the course), timed beside the others when the harness is given
# --tutorial FILE: the kernel a student would otherwise copy.
TUTORIAL = "triton-tutorial"
# Lesson 6's kernels (the teaching FlashAttention), compiled from the lesson's solution cells.
LESSON6 = "lesson6"
COLUMNS = PROVIDERS + (LESSON6, TUTORIAL)  # every provider a results table may have a column for
CHECKED = ("course", LESSON6, TUTORIAL)  # checked against fp32 before and after timing
LADDER_N = 4096  # the sequence length of the ladder's cases


@dataclass(frozen=True)
class Case:
    mode: str  # "fwd" or "fwdbwd"
    dtype: str  # "fp16" or "bf16"
    d: int
    n: int
    causal: bool


    @property
    def heads(self) -> int:
        return 32 if self.d == 64 else 16


    @property
    def batch(self) -> int:
        return max(1, TOKENS // self.n)


    def flops(self) -> float:
        from ..models.traffic import attention_flops


        fwd = attention_flops(self.n, self.d, self.batch, self.heads, self.causal)
        if self.mode == "fwd":
            return fwd
        return fwd + attention_flops(self.n, self.d, self.batch, self.heads, self.causal,
                                     backward=True)


    def label(self) -> str:
        return (f"{self.mode} {self.dtype} d={self.d} N={self.n} "
                f"{'causal' if self.causal else 'full'}")


def torch_dtype(name: str):
    import torch


    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def make_inputs(case: Case, requires_grad: bool = False, seed: int = 0):
    import torch


    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (case.batch, case.heads, case.n, case.d)
    xs = [torch.randn(shape, device="cuda", dtype=torch_dtype(case.dtype), generator=gen)
          for _ in range(4)]
    q, k, v, do = xs
    if requires_grad:
        q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    return q, k, v, do


def sweep_cases(mode: str, quick: bool, dtypes: list[str]) -> list[Case]:
    ns = QUICK_NS if quick else FULL_NS
    return [Case(mode, dt, d, n, causal) for dt in dtypes for d in (64, 128)
            for causal in (False, True) for n in ns]


def ladder_cases(quick: bool) -> list[Case]:
    cases = [Case("fwd", "fp16", 64, LADDER_N, False), Case("fwd", "fp16", 64, LADDER_N, True),
             Case("fwd", "fp16", 128, LADDER_N, False), Case("fwd", "fp16", 128, LADDER_N, True)]
    return cases[1:3] if quick else cases
