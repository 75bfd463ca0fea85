"""bench/compile_counts.py: a launcher's launches recorded with CPU tensors and compiled for
sm_90a as Triton would compile them, with no GPU (gpu/kernel_resources.py --compile-only and
the other scripts that read registers and spills)."""

import json
import subprocess
import sys

import pytest

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
from flashcourse.kernels import decode
q = torch.empty(8, 32, 64, dtype=torch.float16)
pool = torch.empty(64, 64, 8, 64, dtype=torch.float16)
for loads in ("rows", "pages ahead"):
    with compile_counts.captured_launches() as launches:
        decode.DecodePlan(q, pool, pool, torch.zeros(8, 64, dtype=torch.int32),
                          torch.zeros(8, dtype=torch.int32), splits=1, config=(128, 4, 3),
                          kv_loads=loads).run()
    (kernel, args, kwargs), = launches
    out[loads] = compile_counts.resources(kernel, args, kwargs)
q = torch.empty(1, 32, 64, dtype=torch.float16)
for dependent in (False, True):
    with compile_counts.captured_launches() as launches:
        decode.DecodePlan(q, pool, pool, torch.zeros(1, 64, dtype=torch.int32),
                          torch.full((1,), 4096, dtype=torch.int32), splits=8,
                          config=(128, 4, 3), dependent_launch=dependent).run()
    out[f"dependent {dependent}"] = [[kernel.__name__, compile_counts.resources(kernel, a, kw)]
                                     for kernel, a, kw in launches]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled():
    """SCRIPT's counts: every launch compiled for sm_90a in one process of its own, since
    compile_only() must come before the kernels are imported."""
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            cwd=COURSE_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_launches_are_recorded_not_run_and_compiled_for_hopper(compiled):
    out = compiled
    assert out["kernels"] == ["attn_bwd_delta_kernel", "attn_bwd_dkdv_kernel",
                              "attn_bwd_dq_kernel"]
    assert out["descriptors"] == "TensorDescriptor"  # the host code saw a Hopper GPU
    plain, capped = out["None"], out["64"]
    assert 0 < capped["registers"] <= 64 < plain["registers"] <= 255, (plain, capped)
    assert plain["shared KiB"] > 0 and plain["blocks/SM"] >= 1
    assert capped["blocks/SM by registers"] > plain["blocks/SM by registers"]
    assert plain["ptxas notes"] == "" and plain["warpgroup syncs"] >= 0  # nothing serialized
    # the decoding kernel at 3 stages: K and V wait on the page numbers loaded in the same
    # iteration, so one block of them is in flight; loaded a block ahead, two
    assert out["rows"]["pipeline buffers"] == 1 and out["pages ahead"]["pipeline buffers"] == 2
    assert out["pages ahead"]["shared KiB"] > out["rows"]["shared KiB"]


def test_dependent_launch_lets_the_merge_start_early_and_wait_for_the_splits(compiled):
    """decode.DecodePlan(dependent_launch=True), compiled for sm_90a: the split kernel lets its
    dependants launch, and the merge is a programmatic dependent launch that waits first."""
    plans = {flag: compiled[f"dependent {flag}"] for flag in ("False", "True")}
    seen = {flag: [(name, counts["griddepcontrol"], counts["launch_pdl"])
                   for name, counts in launches] for flag, launches in plans.items()}
    assert seen["False"] == [("paged_decode_kernel", "", False), ("merge_kernel", "", False)]
    assert seen["True"] == [("paged_decode_kernel", "launch_dependents", False),
                            ("merge_kernel", "wait", True)]
    plain, dependent = (plans[flag][0][1]["registers"] for flag in ("False", "True"))
    assert dependent == plain


def test_pipeline_buffers_are_read_from_the_shared_allocations():
    from flashcourse.bench import compile_counts

    ttgir = "\n".join((
        "  tt.func public @k() {",
        "    %1 = ttg.local_alloc : () -> !ttg.memdesc<2x128x64xf16, #shared, #smem, mutable>",
        "    %2 = ttg.local_alloc : () -> !ttg.memdesc<128x64xf16, #shared, #smem, mutable>",
        "    %3 = ttg.local_alloc : () -> !ttg.memdesc<3x1x64x1x64xbf16, #shared, #smem, mutable>",
        "    %4 = ttg.local_alloc : () -> !ttg.memdesc<4xi64, #shared1, #smem, mutable>",
        "    %5 = ttg.memdesc_index %1 : !ttg.memdesc<8x64x64xf16, #shared, #smem>",
        "    %6 = scf.if %c -> (tensor<16x64xf32>) {",
        "      %7 = ttg.local_alloc : () -> !ttg.memdesc<1x64x1x64xf16, #shared, #smem, mutable>",
    ))
    # the loop with the fewest: 2; not the barriers, a view of 8, nor the copy in the branch
    assert compile_counts.pipeline_buffers(ttgir) == 2
    assert compile_counts.pipeline_buffers(ttgir.replace("2x128x64", "4x128x64")) == 3
    assert compile_counts.pipeline_buffers(ttgir.replace("<2x128x64", "<1x128x64")) == 1
    assert compile_counts.pipeline_buffers("\n".join(ttgir.splitlines()[:3])) == 2
    assert compile_counts.pipeline_buffers(ttgir.splitlines()[2]) == 0  # 2-D: no buffers
    assert compile_counts.pipeline_buffers("") == 0


def test_ptxas_performance_notes_are_read_from_its_log():
    from flashcourse.bench import compile_counts

    log = ("ptxas info    : Used 255 registers\n"
           "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
           "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
           "between start and end of the pipeline stage in the function 'k' in line 12\n")
    assert compile_counts.performance_notes(log) == (
        "C7515: wgmma.mma_async instructions are serialized due to non wgmma instructions "
        "defining accumulator registers of a wgmma between start and end of the pipeline stage")
    assert compile_counts.performance_notes(log + log) == compile_counts.performance_notes(log)
    assert compile_counts.performance_notes(
        "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are "
        "serialized due to insufficient register resources for the function 'k'\n") == (
        "C7512: wgmma.mma_async instructions are serialized due to insufficient register "
        "resources")
    assert compile_counts.performance_notes("ptxas info    : Used 40 registers\n") == ""


def test_blocks_per_sm_and_the_cap_that_fits_one_more():
    from flashcourse.bench import compile_counts

    # lesson 8's d = 128 dK/dV tile: registers and shared memory each allow two blocks
    table = compile_counts.blocks_per_sm(240, 98816, 4)
    assert table == {"blocks/SM by registers": 2, "blocks/SM by shared": 2, "blocks/SM": 2}
    assert compile_counts.cap_for_one_more_block(table, 4) is None  # no shared memory for it
    # 193 registers round up to 200 a thread: two blocks; three fit at 168 (170 rounded down)
    smaller = compile_counts.blocks_per_sm(193, 65792, 4)
    assert smaller["blocks/SM by registers"] == 2 and smaller["blocks/SM by shared"] == 3
    assert compile_counts.cap_for_one_more_block(smaller, 4) == 168
    assert compile_counts.blocks_per_sm(168, 65792, 4)["blocks/SM"] == 3
    assert compile_counts.blocks_per_sm(32, 0, 32)["blocks/SM"] == 2  # 64 warps at most
