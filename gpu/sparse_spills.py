"""Registers and spills of the reference sparse forward's variants, compiled for Hopper.

    python gpu/sparse_spills.py [--out assets/results/09-sparse-spills.csv]

Compiles `sparse_forward_kernel` for sm_90a with the installed Triton and its ptxas, at the
reference's tiles (tiles.SPARSE_REFERENCE), with and without document ids, with every test,
with partial_tests and with row_ranges, and prints ptxas's registers and spilled bytes per
thread. Nothing is launched, so it runs on a machine without a GPU; the counts are those of the
Triton that runs it. Lesson 9 reads them beside the timings of --part steps: partial_tests pays
where the full mask's code spills.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

TARGET = ("cuda", 90, 32)  # sm_90a, 32 threads a warp
# (D, documents, halves, full_range): each head dim's default variant, with and without ids
VARIANTS = ((64, False, True, True), (64, True, True, True),
            (128, False, False, False), (128, True, False, False))


def ptxas_path(triton) -> str:
    """Triton's own ptxas (3.9 compiles every NVIDIA target with ptxas-blackwell)."""
    folder = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    for name in ("ptxas-blackwell", "ptxas"):
        if (folder / name).exists():
            return str(folder / name)
    raise SystemExit(f"no ptxas in {folder}: this Triton wheel has no NVIDIA backend.")


def compile_variant(triton, sf, tiles, d, has_docs, halves, full_range, tests,
                    ranges=False) -> dict:
    """ptxas's counts for one variant (tensor descriptors, fp16)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    block_m, block_n, warps, stages = tiles.SPARSE_REFERENCE[d]
    q_rows = block_m // 2 if halves else block_m
    q_desc, kv_desc = (f"tensordesc<fp16[1,1,{rows},{d}]>" for rows in (q_rows, block_n))
    kinds = {"Q": q_desc, "K": kv_desc, "V": kv_desc, "O": q_desc,
             "LSE": "*fp32", "qk_scale": "fp32", "Docs": "*i32", "Order": "*i32",
             "full_counts": "*i32", "full_index": "*i32", "part_counts": "*i32",
             "part_index": "*i32"}
    constants = {"HEAD_D": d, "BLOCK_M": block_m, "BLOCK_N": block_n,
                 "HAS_DOCS": has_docs and not ranges, "USE_TMA": True, "HALVES": halves,
                 "FULL_RANGE": full_range, "PARTIAL_TESTS": tests, "ROW_RANGES": ranges}
    names = sf.sparse_forward_kernel.arg_names
    signature = {a: "constexpr" if a in constants else kinds.get(a, "i32") for a in names}
    source = ASTSource(sf.sparse_forward_kernel, signature,
                       constexprs={(names.index(k),): v for k, v in constants.items()})
    kernel = triton.compile(source, target=GPUTarget(*TARGET),
                            options={"num_warps": warps, "num_stages": stages})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(kernel.asm["ptx"])
        ptx.flush()
        report = subprocess.run([ptxas_path(triton), "-v", "--gpu-name", "sm_90a", ptx.name,
                                 "-o", os.devnull], capture_output=True, text=True).stderr
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    return {"gpu": "none: compiled for sm_90a, not launched", "D": d, "documents": has_docs,
            "halves": halves, "full range": full_range, "partial tests": tests,
            "row ranges": ranges,
            "registers": int(re.search(r"Used (\d+) registers", report).group(1)),
            "spill stores B": int(spills.group(1)), "spill loads B": int(spills.group(2))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="the CSV to write")
    args = parser.parse_args(argv)
    from flashcourse import bench, runtime

    runtime.compile_only()  # before the kernels' import: their @triton.jit must compile
    import triton

    from flashcourse.kernels import sparse_forward as sf
    from flashcourse.kernels import tiles

    rows = []
    for d, has_docs, halves, full_range in VARIANTS:
        for tests, ranges in ((False, False), (True, False), (False, True)):
            row = compile_variant(triton, sf, tiles, d, has_docs, halves, full_range, tests,
                                  ranges)
            rows.append(row)
            print(", ".join(f"{key} {value}" for key, value in row.items()), flush=True)
    if args.out is not None:
        bench.write_csv(args.out, rows)
        print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
