"""bench/compile_counts.py: a launcher's launches recorded with CPU tensors and compiled for
sm_90a as Triton would compile them, with no GPU (gpu/kernel_resources.py --compile-only and
the other scripts that read registers and spills)."""

import json
import subprocess
import sys

from flashcourse.paths import COURSE_ROOT

SCRIPT = r"""
import json, sys, torch
from flashcourse import runtime
runtime.compile_only()
from flashcourse.bench import compile_counts
from flashcourse.kernels import backward, host

q, k, v, o, do = (torch.randn(1, 2, 64, 16, dtype=torch.float16) for _ in range(5))
lse = torch.zeros(1, 2, 64)
out = {}
for cap in (None, 64):
    with compile_counts.captured_launches() as launches:
        host.backward(q, k, v, o, lse, do, True, configs=((32, 32, 4, 1, cap), (32, 32, 4, 1)))
    out["kernels"] = [kernel.__name__ for kernel, _, _ in launches]
    (args, kwargs), = [(a, kw) for kernel, a, kw in launches
                       if kernel is backward.attn_bwd_dkdv_kernel]
    out[str(cap)] = compile_counts.resources(backward.attn_bwd_dkdv_kernel, args, kwargs)
    out["descriptors"] = type(args[0]).__name__
print(json.dumps(out))
"""


def test_launches_are_recorded_not_run_and_compiled_for_hopper():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            cwd=COURSE_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["kernels"] == ["attn_bwd_delta_kernel", "attn_bwd_dkdv_kernel",
                              "attn_bwd_dq_kernel"]
    assert out["descriptors"] == "TensorDescriptor"  # the host code saw a Hopper GPU
    plain, capped = out["None"], out["64"]
    assert 0 < capped["registers"] <= 64 < plain["registers"] <= 255, (plain, capped)
    assert plain["shared KiB"] > 0 and plain["blocks/SM"] >= 1
    assert capped["blocks/SM by registers"] > plain["blocks/SM by registers"]
