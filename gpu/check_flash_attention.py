"""Check the solution kernels of lessons 6 and 7 on a CUDA GPU against torch; exit non-zero on
a mismatch.

Run from the repository root:  python gpu/check_flash_attention.py
The kernels are taken from lessons/06-flash-forward.qmd and 07-flash-backward.qmd (the
solution cells), written to a temporary module (Triton reads kernel source with inspect) and
compiled for the GPU. The
from-scratch kernel (padded_flash_forward) is also run on left-padded batches with rows that see
no key, and graded by its check as a student's notebook on this GPU would be.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from flashcourse import runtime  # noqa: E402
from flashcourse.authoring import cells  # noqa: E402
from flashcourse.kernels import attention  # noqa: E402

TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 6e-2}  # max abs error, O(1) outputs


def load_kernels():
    source = cells.flash_kernels_source(ROOT / "lessons",
                                        {"06-flash-forward": ("exercise-scratch",)})
    return cells.load(source, prelude=cells.TRITON_PRELUDE)


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU: this script checks the compiled kernels only")
        return 2
    rt = runtime.setup()
    assert not rt.interpreter
    kernels = load_kernels()
    attn = attention.make_flash_attention(kernels.flash_forward_kernel,
                                          kernels.flash_delta_kernel,
                                          kernels.flash_dkdv_kernel, kernels.flash_dq_kernel)
    failures = 0
    cases = [(B, H, N, D, causal, dtype, layout)
             for B, H, N in ((2, 3, 1000), (1, 4, 4096), (3, 2, 77))
             for D in (64, 128) for causal in (False, True)
             for dtype in (torch.float16, torch.bfloat16) for layout in ("bhnd", "bnhd")]
    for B, H, N, D, causal, dtype, layout in cases:
        q, k, v = attention.make_inputs(B, H, N, D, dtype, device="cuda", seed=N + D)
        if layout == "bnhd":  # non-contiguous views, as models store them
            q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        out = attn(q, k, v, causal=causal)
        d_out = torch.randn_like(out)
        out.backward(d_out)
        q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
        ref = attention.standard_attention(q64, k64, v64, causal)
        ref.backward(d_out.double())
        _, lse = attention.flash_forward(kernels.flash_forward_kernel, q.detach(), k.detach(),
                                         v.detach(), causal)
        _, ref_lse = attention.standard_attention(q64.detach(), k64.detach(), v64.detach(),
                                                  causal, return_lse=True)
        errors = {
            "O": (out.double() - ref).abs().max().item(),
            "L": (lse.double() - ref_lse).abs().max().item(),
            "dQ": (q.grad.double() - q64.grad).abs().max().item(),
            "dK": (k.grad.double() - k64.grad).abs().max().item(),
            "dV": (v.grad.double() - v64.grad).abs().max().item(),
        }
        scale = {name: max(1.0, float(t.abs().max())) for name, t in
                 (("O", ref), ("L", torch.ones(1)), ("dQ", q64.grad), ("dK", k64.grad),
                  ("dV", v64.grad))}
        bad = [name for name, err in errors.items()
               if not err <= TOLERANCE[dtype] * scale[name] or err != err]
        failures += bool(bad)
        text = " ".join(f"{name}={err:.2e}" for name, err in errors.items())
        print(f"{'FAIL' if bad else 'ok  '} B={B} H={H} N={N} D={D} causal={causal} "
              f"{str(dtype)[6:]} {layout}: {text}")
    print(f"{len(cases) - failures} of {len(cases)} cases match torch")
    failures += check_padded_kernel(kernels.padded_flash_forward)
    return 1 if failures else 0


def check_padded_kernel(kernel) -> int:
    """The from-scratch kernel (left-padded batches, rows without keys) compiled on the GPU,
    against float64 attention; then its grader. Returns the number of failed cases."""
    from flashcourse import check
    from flashcourse.kernels.padded import padded_forward, padded_reference

    failures = 0
    cases = [(B, H, N, D, causal, dtype)
             for B, H, N in ((3, 2, 1000), (2, 3, 77)) for D in (64, 128)
             for causal in (False, True) for dtype in (torch.float16, torch.bfloat16)]
    for B, H, N, D, causal, dtype in cases:
        q, k, v = attention.make_inputs(B, H, N, D, dtype, device="cuda", seed=N + D + 1)
        starts = [0, N // 3 + 1, N][:B]  # no padding, some padding, padding only
        kv_start = torch.tensor(starts, dtype=torch.int32, device="cuda")
        out, lse = padded_forward(kernel, q, k, v, kv_start, causal)
        ref, ref_lse = padded_reference(q, k, v, kv_start, causal)
        out, lse = out.double().cpu(), lse.double().cpu()
        empty = ref_lse.isneginf()
        error_o = float((out - ref).abs().max())
        error_l = float((lse[~empty] - ref_lse[~empty]).abs().max())
        bad = (not error_o <= TOLERANCE[dtype] or not error_l <= TOLERANCE[dtype]
               or not bool(lse[empty].isneginf().all()))
        failures += bad
        print(f"{'FAIL' if bad else 'ok  '} padded B={B} H={H} N={N} D={D} causal={causal} "
              f"{str(dtype)[6:]} kv_start={starts}: O={error_o:.2e} L={error_l:.2e} "
              f"rows without keys={int(empty.sum())}")
    try:
        check("flash-triton/forward-from-scratch", kernel)
    except Exception as err:  # noqa: BLE001
        failures += 1
        print(f"FAIL the grader rejects the solution kernel on this GPU: {err}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
