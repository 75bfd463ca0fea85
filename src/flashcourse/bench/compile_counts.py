"""Registers, spills and shared memory of the course's kernels as compiled for Hopper.

Used by the scripts in gpu/ that read what the compiler made of a kernel without launching it
(gpu/sparse_spills.py, gpu/backward_registers.py): they call a launcher with CPU tensors inside
`captured_launches()`, compile each launch it makes for sm_90a exactly as Triton would at that
launch, and read the binary's resource use, the figures the CUDA driver reports for it on a GPU
(Triton's `n_regs`, and `n_spills`, which is that local memory in 4-byte words). They run on a
machine without a GPU, after `runtime.compile_only()`; the counts are those of the Triton that
runs them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

from .. import hardware, runtime

TARGET = ("cuda", 90, hardware.WARP_SIZE)  # sm_90a
HOPPER = (9, 0)
GPU_NOTE = "none: compiled for sm_90a, not launched"


def tool(triton, name: str) -> str:
    """A tool of Triton's NVIDIA backend (ptxas, cuobjdump), as shipped in its wheel."""
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if not path.exists():
        raise SystemExit(f"no {name} in {path.parent}: this Triton wheel has no NVIDIA backend.")
    return str(path)


@contextlib.contextmanager
def captured_launches():
    """Inside, every @triton.jit launch is recorded instead of run, and the course's host code
    sees a Hopper GPU (so it builds tensor descriptors), so that a launcher can be called with
    CPU tensors to get the exact arguments it would launch with. Yields the list of records
    (kernel, args, kwargs). Needs runtime.compile_only()."""
    from triton.runtime.jit import JITFunction

    from ..kernels import ladder

    launches = []

    def record(kernel, *args, grid, warmup, **kwargs):
        launches.append((kernel, args, kwargs))

    with mock.patch.object(JITFunction, "run", record), \
            mock.patch.object(ladder, "_capability", return_value=HOPPER):
        yield launches


def resources(kernel, args, kwargs) -> dict:
    """Compile one recorded launch for sm_90a as Triton would at that launch (the same
    specialisation of its arguments, the same options) and read the binary's resource use
    with cuobjdump: registers per thread, the local memory each thread spills into, shared
    memory per block, blocks per SM by each limit, what ptxas said of performance (such as
    wgmma instructions it had to serialize), how many warpgroup arrives and waits the code
    holds (two per wgmma where they are serialized), how many buffers the pipeliner gave a
    pipelined loop (pipeline_buffers), and the grid dependency instructions of a programmatic
    dependent launch (griddepcontrol: "launch_dependents", "wait") with the launch's flag."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound,
                                                              specialization, options)
    # a cache of its own, so that Triton runs ptxas (a cached binary has no log) and says
    # what ptxas reported
    with tempfile.TemporaryDirectory() as cache, triton.knobs.cache.scope(), \
            triton.knobs.nvidia.scope(), contextlib.redirect_stdout(io.StringIO()) as log:
        triton.knobs.cache.dir = cache
        triton.knobs.nvidia.dump_ptxas_log = True
        compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs),
                                  target=target, options=options.__dict__)
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage, sass = (subprocess.run([tool(triton, "cuobjdump"), flag, cubin.name],
                                      capture_output=True, text=True, check=True).stdout
                       for flag in ("--dump-resource-usage", "--dump-sass"))
    registers = int(re.search(r"REG:(\d+)", usage).group(1))
    local = int(re.search(r"STACK:(\d+)", usage).group(1)) + int(
        re.search(r"LOCAL:(\d+)", usage).group(1))
    shared = int(compiled.metadata.shared)
    return {"registers": registers, "spilled B": local, "shared KiB": round(shared / 1024, 1),
            **blocks_per_sm(registers, shared, options.num_warps),
            "pipeline buffers": pipeline_buffers(compiled.asm["ttgir"]),
            "ptxas notes": performance_notes(log.getvalue()),
            "warpgroup syncs": len(re.findall(r"\bWARPGROUP\.", sass)),
            "griddepcontrol": " ".join(sorted(set(re.findall(
                r"griddepcontrol\.(\w+)", compiled.asm["ptx"])))),
            "launch_pdl": bool(compiled.metadata.launch_pdl)}


def pipeline_buffers(ttgir: str) -> int:
    """How many copies of a loaded tile the software pipeliner keeps in shared memory, in the
    loop that keeps the fewest: the leading size of the buffers it allocates at the top of the
    function for its loops (`memdesc<2x128x64xf16, ..., mutable>` is two buffers of a 128 x 64
    tile, as many tiles in flight at once; a tile waiting on a load of its own iteration, such
    as a block index, gets one fewer). A copy made once, inside a branch, is not counted. 0
    when no loop's tiles have buffers (2-D allocations only)."""
    allocations = re.findall(r"^( *)%\S+ = ttg\.local_alloc .*$", ttgir, re.M)
    if not allocations:
        return 0
    top = min(len(indent) for indent in allocations)
    pattern = rf"^ {{{top}}}%\S+ = ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x\d+x\d+" \
        r"[x\d]*x[a-z]+\d+[^>]*mutable>"
    return min((int(first) for first in re.findall(pattern, ttgir, re.M)), default=0)


def performance_notes(ptxas_log: str) -> str:
    """ptxas's "Potential Performance Loss" lines of a compile, each as its code and reason
    (e.g. "C7515: wgmma.mma_async instructions are serialized due to ..."), joined by "; "."""
    found = re.findall(r"\((C\d+)\) Potential Performance Loss: (.*?)"
                       r"(?: (?:in|for) the function '[^']*'.*)?$", ptxas_log, re.M)
    return "; ".join(dict.fromkeys(f"{code}: {reason.strip()}" for code, reason in found))


def blocks_per_sm(registers: int, shared: int, num_warps: int) -> dict:
    """Blocks of num_warps warps that fit on one Hopper SM by registers, by shared memory and
    by warps, and the fewest of the three (what runs at once)."""
    unit = hardware.HOPPER_REGISTER_UNIT
    per_warp = -(-registers // unit) * unit * hardware.WARP_SIZE
    by_registers = hardware.HOPPER_SM_REGISTERS // (per_warp * num_warps)
    by_shared = hardware.HOPPER_SM_SHARED_BYTES // (
        shared + hardware.HOPPER_SHARED_RESERVED_PER_BLOCK)
    by_warps = hardware.HOPPER_SM_WARPS // num_warps
    return {"blocks/SM by registers": by_registers, "blocks/SM by shared": by_shared,
            "blocks/SM": min(by_registers, by_shared, by_warps)}


def cap_for_one_more_block(counts: dict, num_warps: int) -> int | None:
    """The most registers per thread at which one more block than `counts` (a `resources`
    result) fits on an SM by registers, when its shared memory and warps leave room for that
    block; None when they do not."""
    wanted = counts["blocks/SM by registers"] + 1
    if counts["blocks/SM by shared"] < wanted or wanted * num_warps > hardware.HOPPER_SM_WARPS:
        return None
    per_thread = hardware.HOPPER_SM_REGISTERS // (wanted * num_warps * hardware.WARP_SIZE)
    return per_thread // hardware.HOPPER_REGISTER_UNIT * hardware.HOPPER_REGISTER_UNIT


def script_main(doc: str, measure, argv=None) -> int:
    """main() of a gpu/ script that compiles without a GPU: reads --out, picks compile-only
    Triton (before `measure` imports any kernel module), prints each row `measure()` yields
    as it comes and writes them all as CSV to --out when given."""
    from . import write_csv

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="the CSV to write")
    args = parser.parse_args(argv)
    runtime.compile_only()  # the kernels' @triton.jit must compile, not interpret
    rows = []
    for row in measure():
        rows.append(row)
        print(", ".join(f"{key} {value}" for key, value in row.items() if key != "gpu"),
              flush=True)
    if args.out is not None:
        write_csv(args.out, rows)
        print(f"wrote {len(rows)} rows to {args.out}")
    return 0
