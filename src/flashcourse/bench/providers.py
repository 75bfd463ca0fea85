"""The providers the harness times: naive torch attention, torch.compile of it, SDPA with each
backend pinned, and the course's Triton FlashAttention. `make_call(provider, ...)` gives each
as a function (q, k, v) -> o."""

from __future__ import annotations

from .cases import COMPILE_NS, DENSE_MAX_N, LESSON6, TUTORIAL, Case


def naive_attention(q, k, v, causal: bool, sm_scale: float):
    """Standard attention as most people first write it: three kernels and an (N, N) matrix."""
    import torch

    scores = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


_COMPILED: dict = {}
_TUTORIAL: dict = {}
_LESSON6: dict = {}


def lesson6_kernels():
    """The teaching kernels of lessons 6 and 7 (flash_forward_kernel, flash_delta_kernel,
    flash_dkdv_kernel, flash_dq_kernel), compiled from the lessons' solution cells."""
    if "kernels" not in _LESSON6:
        from ..authoring import cells
        from ..paths import COURSE_ROOT

        _LESSON6["kernels"] = cells.load(cells.flash_kernels_source(COURSE_ROOT / "lessons"),
                                         prelude=cells.TRITON_PRELUDE)
    return _LESSON6["kernels"]


def lesson6_attention():
    """attention(q, k, v, causal, sm_scale) running the teaching kernels of lessons 6 and 7,
    timed beside the reference."""
    if "fn" not in _LESSON6:
        from ..kernels import attention

        kernels = lesson6_kernels()
        _LESSON6["fn"] = attention.make_flash_attention(
            kernels.flash_forward_kernel, kernels.flash_delta_kernel,
            kernels.flash_dkdv_kernel, kernels.flash_dq_kernel)
    return _LESSON6["fn"]


def load_tutorial(path) -> None:
    """Import Triton's fused-attention tutorial from a file, as the provider TUTORIAL.

    The file is python/tutorials/06-fused-attention.py of a Triton checkout; it is not part of
    the course, and it autotunes its forward on first use of each (N, d)."""
    import importlib.util
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"--tutorial {path}: no such file. Give the path of "
                         "python/tutorials/06-fused-attention.py in a Triton checkout.")
    spec = importlib.util.spec_from_file_location("triton_fused_attention_tutorial", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "attention", None)):
        raise SystemExit(f"--tutorial {path}: the file has no attention(q, k, v, causal, "
                         "sm_scale) function; is it Triton's fused-attention tutorial?")
    _TUTORIAL.update(module=module, path=str(path))


def tutorial_loaded() -> bool:
    return "module" in _TUTORIAL


def tutorial_module():
    """The module load_tutorial imported (it must have run)."""
    return _TUTORIAL["module"]


def compiled_attention():
    """torch.compile of naive_attention (one compiled object; Dynamo recompiles per shape)."""
    import torch

    if "fn" not in _COMPILED:
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        _COMPILED["fn"] = torch.compile(naive_attention, dynamic=False)
    return _COMPILED["fn"]


def fuse_attention_count() -> int:
    """How many times Inductor rewrote an attention pattern into SDPA in this process."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"]["fuse_attention"])
    except Exception:  # noqa: BLE001  (older torch: no counter)
        return -1


def sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {"sdpa-math": SDPBackend.MATH, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
            "sdpa-flash": SDPBackend.FLASH_ATTENTION,
            "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[name]


def make_call(provider: str, causal: bool, sm_scale: float):
    """A function (q, k, v) -> o for one provider."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    if provider == "naive":
        return lambda q, k, v: naive_attention(q, k, v, causal, sm_scale)
    if provider == "compile":
        fn = compiled_attention()
        return lambda q, k, v: fn(q, k, v, causal, sm_scale)
    if provider == "course":
        from ..kernels import host

        return lambda q, k, v: host.flash_attention(q, k, v, causal, sm_scale)
    if provider == LESSON6:
        lesson6 = lesson6_attention()
        return lambda q, k, v: lesson6(q, k, v, causal, sm_scale)
    if provider == TUTORIAL:
        attention = tutorial_module().attention

        def tutorial(q, k, v):
            # Its Hopper forward offsets a head by off_z + off_h * N rows, which is right only
            # for batch 1: run (B, H, N, d) as (1, B * H, N, d), the same work and grid.
            B, H, N, D = q.shape
            o = attention(*(x.reshape(1, B * H, N, D) for x in (q, k, v)), causal, sm_scale)
            return o.reshape(B, H, N, D)

        return tutorial
    backend = sdpa_backend(provider)

    def call(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)

    return call


def skip_reason(provider: str, case: Case) -> str:
    if provider == TUTORIAL:
        if not tutorial_loaded():
            return "skipped: no --tutorial file given"
        if case.dtype != "fp16":
            return "skipped: the tutorial's Hopper forward writes fp16 only"
        if case.n % 128:
            return "skipped: the tutorial's backward needs N to be a multiple of 128"
    if provider in ("naive", "sdpa-math") and case.n > DENSE_MAX_N[case.mode]:
        return f"skipped: N > {DENSE_MAX_N[case.mode]} materialises too large an (N, N) matrix"
    if provider == "compile" and (case.dtype != "fp16" or case.n not in COMPILE_NS):
        return "skipped: torch.compile is measured for fp16 at N in " + str(COMPILE_NS)
    return ""
