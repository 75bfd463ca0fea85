"""The tables of results on the course GPU, computed from `assets/results/*.csv`.

`build` writes the whole table between the two marker lines of README.md, and each lesson's own
rows where its source holds the line `SUMMARY` (in the exercise, the solution and the book page);
`check-sync` fails when a copy differs, so a number the README or a lesson's summary quotes
cannot drift from its recorded table.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ..hardware import H200_HBM_TBS

BEGIN = "<!-- results table: made by `python -m flashcourse build` from assets/results/ -->"
END = "<!-- end of the results table -->"
SUMMARY = "<!-- summary table: made by `python -m flashcourse build` from assets/results/ -->"
HEADER = ["| measurement (same run, H200) | result | table |", "|---|---|---|"]


def read_table(results: Path, name: str) -> list[dict]:
    """The rows of assets/results/NAME.csv (the lessons' prose tests read them too)."""
    with (results / f"{name}.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _span(values: list[float], digits: int = 2) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}x" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else \
        f"{low:.{digits}f}x to {high:.{digits}f}x"


def _where(rows: list[dict], **equal) -> list[dict]:
    return [row for row in rows if all(row[key] == value for key, value in equal.items())]


def _versions(rows: list[dict]) -> str:
    """The Triton versions a table's rows were measured with: '3.6.0' or '3.6.0, 3.9.0'."""
    return ", ".join(sorted({row["triton"] for row in rows}))


def one_row(rows: list[dict], **equal) -> dict:
    found = _where(rows, **equal)
    if len(found) != 1:
        raise ValueError(f"results table: {len(found)} rows where {equal}, expected one")
    return found[0]


def rows(results: Path) -> list[tuple[int, str, str, str]]:
    """(lesson, measurement, result, table name) of every recorded result quoted, in order."""
    found: list[tuple[int, str, str, str]] = []

    def add(lesson, measurement, result, name):
        found.append((lesson, measurement, result, name))

    copies = read_table(results, "02-copy-bandwidth")
    best = max(_where(copies, kernel="copy_kernel"), key=lambda row: float(row["GB/s"]))
    torch_copy = one_row(copies, kernel="torch copy_")
    add(2, f"copy kernel (BLOCK {best['BLOCK']}) vs `torch` device-to-device copy, 1 GiB fp32",
        f"{float(best['GB/s']):.0f} vs {float(torch_copy['GB/s']):.0f} GB/s "
        f"({float(best['vs torch']):.3f}x)", "02-copy-bandwidth")

    coalescing = read_table(results, "03-coalescing")
    strided = one_row(coalescing, kernel="strided copy, stride 32")
    add(3, "strided copy, stride 32 vs 1", f"{float(strided['vs coalesced']):.3f}x the bandwidth",
        "03-coalescing")
    tiled = one_row(coalescing, kernel="transpose, tiled 64 x 64")
    naive = one_row(coalescing, kernel="transpose, naive")
    add(3, "tiled vs naive transpose, 8192^2 fp32",
        f"{float(naive['ms']) / float(tiled['ms']):.1f}x faster "
        f"({float(tiled['useful GB/s']):.0f} vs {float(naive['useful GB/s']):.0f} GB/s)",
        "03-coalescing")

    matmul = read_table(results, "04-matmul")
    best = max(_where(matmul, kernel="tiled Triton"), key=lambda row: float(row["tflops"]))
    cublas = one_row(matmul, kernel="torch.matmul")
    add(4, "tiled `tl.dot` matmul vs `torch.matmul` (cuBLAS), fp16 4096^3",
        f"{float(best['tflops']):.0f} vs {float(cublas['tflops']):.0f} TFLOP/s "
        f"({float(best['vs_torch']):.3f}x)", "04-matmul")

    softmax = read_table(results, "05-softmax")
    fused = one_row(softmax, kernel="fused Triton", n_cols="4096")
    torch_softmax = one_row(softmax, kernel="torch.softmax", n_cols="4096")
    add(5, "fused row softmax vs `torch.softmax`, fp16 rows of 4096",
        f"{float(fused['GB/s']):.0f} vs {float(torch_softmax['GB/s']):.0f} GB/s", "05-softmax")

    lesson6 = [row for row in read_table(results, "06-flash-attention-fwd")
               if int(row["N"]) >= 4096]
    triton6 = _versions(lesson6)
    add(6, f"lesson 6's forward vs SDPA flash backend, fp16/bf16, d 64/128, N >= 4096 "
        f"(Triton {triton6})", _span([float(row["fwd ratio"]) for row in lesson6]),
        "06-flash-attention-fwd")
    against = read_table(results, "06-vs-reference")
    for lesson, mode, what in ((6, "fwd", "lesson 6's forward"),
                               (7, "fwdbwd", "lessons 6-7's forward+backward")):
        cells = _where(against, mode=mode)
        versions = _versions(cells)
        add(lesson, f"{what} vs the course's reference (lesson 8), "
            f"{len(cells)} cells, N 1k-16k (Triton {versions})",
            _span([float(row["lesson6/course"]) for row in cells]), "06-vs-reference")
    add(7, "lesson 6's forward + lesson 7's backward vs SDPA flash backend, N >= 4096 "
        f"(Triton {triton6})", _span([float(row["fwd+bwd ratio"]) for row in lesson6]),
        "06-flash-attention-fwd")

    sweeps = (("forward", "08-attention-fwd"), ("forward+backward", "08-attention-fwdbwd"))
    for mode, name in sweeps:
        rows = read_table(results, name)
        versions = _versions(rows)
        shapes = "fp16/bf16, d 64/128, N 1k-16k"
        add(8, f"reference kernel {mode} vs SDPA cuDNN backend, {shapes} (Triton {versions})",
            _span([float(row["course/cudnn"]) for row in rows]), name)
        add(8, f"reference kernel {mode} vs SDPA flash backend, same cases",
            _span([float(row["course/flash"]) for row in rows]), name)

    ladder = _where(read_table(results, "08-ladder"), step="7", N="4096", dtype="fp16")
    versions = _versions(ladder)
    add(8, f"optimisation ladder, step 7 vs step 0, fp16 N = 4096 (Triton {versions})",
        _span([float(row["vs_step0"]) for row in ladder]), "08-ladder")
    masks = [row for row in read_table(results, "09-masks-flex") if row["reference vs flex"]]
    flex = [float(row["reference vs flex"]) for row in masks]
    held = {row["dtype"] for row in masks}
    dtypes = "/".join(short for full, short in (("float16", "fp16"), ("bfloat16", "bf16"))
                      if full in held)
    add(9, f"reference block-sparse forward vs FlexAttention compiled, one mask_mod per mask, "
        f"causal, window, documents, random blocks, N 8k-32k, {dtypes}, d 64/128 ({len(flex)} "
        f"cells, Triton {_versions(masks)}; {sum(x >= 1.15 for x in flex)} at 1.15x or more)",
        _span(flex), "09-masks-flex")
    decode = read_table(results, "09-decode")
    large = [row for row in decode if float(row["KV MiB"]) >= 256]
    shares = [float(row["ours split-KV GB/s"]) / (H200_HBM_TBS * 1000) * 100 for row in large]
    add(9, f"split-KV decoding, K and V read per second as a share of HBM's {H200_HBM_TBS:g} TB/s "
        f"(datasheet), caches >= 256 MiB ({len(large)} cells, Triton {_versions(large)})",
        f"{min(shares):.0f}% to {max(shares):.0f}%", "09-decode")
    graphed = [row for row in decode if row["reference vs cudnn graph"]]
    add(9, f"reference decoding (kernels/decode.py) vs SDPA cuDNN, both replayed in CUDA graphs, "
        f"fp16/bf16, d 64/128, MHA/GQA, batch 1-64 ({len(graphed)} cells, Triton "
        f"{_versions(graphed)})",
        _span([float(row["reference vs cudnn graph"]) for row in graphed]), "09-decode")
    shares = [float(row["reference % of read-only"]) for row in large]
    add(9, f"reference decoding as a share of the measured read-only kernel, caches >= 256 MiB "
        f"({len(large)} cells, Triton {_versions(large)})", f"{min(shares):.0f}% to "
        f"{max(shares):.0f}%", "09-decode")
    return found


def table(results: Path) -> str:
    """The README's markdown table, each line from its CSV."""
    lines = ["| lesson " + HEADER[0], "|---" + HEADER[1]]
    lines += [f"| {lesson} | {what} | {result} | `{name}.csv` |"
              for lesson, what, result, name in rows(results)]
    return "\n".join(lines)


def summary(results: Path, lesson: int) -> str:
    """One lesson's rows of the table, without the lesson column."""
    mine = [f"| {what} | {result} | `{name}.csv` |"
            for number, what, result, name in rows(results) if number == lesson]
    if not mine:
        raise ValueError(f"lesson {lesson} has a summary table line but no recorded results "
                         "in results_table.rows")
    return "\n".join(HEADER + mine)


def with_summary(text: str, results: Path, lesson: int) -> str:
    """A lesson's text with its SUMMARY line replaced by its table of results."""
    if SUMMARY not in text:
        return text
    return text.replace(SUMMARY, summary(results, lesson))


def readme_with_table(readme_text: str, results: Path) -> str:
    """README.md's text with the table between its markers made anew."""
    if BEGIN not in readme_text or END not in readme_text:
        raise ValueError(f"README.md lacks the results table's markers: {BEGIN!r} ... {END!r}")
    head, rest = readme_text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(results)}\n{END}{tail}"
