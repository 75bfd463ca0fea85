"""Numbers the lessons' prose quotes from `assets/results/`: each is computed here from its CSV
and must appear in the lesson as written, so a rerun that changes a CSV fails this test until
the prose says what the new table says. (The README's table and each lesson's summary table
are generated from the same CSVs by the build, so they cannot drift; this covers the prose.)"""

import csv
from pathlib import Path

import pytest

from flashcourse.authoring import results_table
from flashcourse.hardware import H200_HBM_TBS

RESULTS = Path(__file__).resolve().parents[1] / "assets" / "results"
# lesson 9's prose describes its Triton 3.6 runs; the 3.9 rows are summed up in cells
PROSE_TRITON = "3.6.0"


def _rows(name: str, results: Path = RESULTS) -> list[dict]:
    return results_table.read_table(results, name)


def _one(name: str, **equal) -> dict:
    return results_table.one_row(_rows(name), **equal)


def _span(values, sep: str = "-", suffix: str = "x") -> str:
    """'1.22-1.44x' (the lessons' style), or with `sep` ' to ' and no suffix: '0.94 to 1.01'."""
    if sep == "-":
        return f"{min(values):.2f}-{max(values):.2f}{suffix}"
    return f"{min(values):.2f}{sep}{max(values):.2f}"


def _ceiling_gemm() -> str:
    row = _one("02-ceilings", ceiling="GEMM bf16 (torch.matmul, cuBLAS)", shape="8192^3")
    return f"about {float(row['rate']):.0f} TFLOP/s"


def _cublas(results: Path = RESULTS) -> str:
    row = results_table.one_row(_rows("04-matmul", results), kernel="torch.matmul")
    return f"at {float(row['tflops']):.0f} TFLOP/s"


def _lesson6_vs_reference() -> str:
    rows = [r for r in _rows("06-vs-reference") if r["mode"] == "fwd"]
    by_d = {d: [float(r["lesson6/course"]) for r in rows if r["d"] == d] for d in ("64", "128")}
    return (f"{min(by_d['64']):.2f}-{max(by_d['64']):.2f}x at d = 64 and "
            f"{min(by_d['128']):.2f}-{max(by_d['128']):.2f}x at d = 128")


def _lesson8_fwdbwd() -> str:
    rows = _rows("08-attention-fwdbwd")
    return (f"{_span([float(r['course/flash']) for r in rows])} the flash backend and "
            f"{_span([float(r['course/cudnn']) for r in rows])} cuDNN")


def _lesson9_flex() -> str:
    flex = [float(r["ours vs flex"]) for r in _rows("09-masks")
            if r["ours vs flex"] and r["triton"] == PROSE_TRITON]
    return f"(ours / flex speed {_span(flex, ' to ')};"


def _lesson9_hbm_share() -> str:
    large = [r for r in _rows("09-decode")
             if float(r["KV MiB"]) >= 256 and r["triton"] == PROSE_TRITON]
    rates = [float(r["ours split-KV GB/s"]) for r in large]
    low, high = (100 * x / (H200_HBM_TBS * 1000) for x in (min(rates), max(rates)))
    return (f"K and V at {low:.0f}% to {high:.0f}% of the {H200_HBM_TBS:g} TB/s of HBM, up to "
            f"{max(rates) / 1000:.2f} TB/s")


QUOTES = {
    "02-memory-roofline": _ceiling_gemm,
    "04-tiling-matmul": _cublas,
    "06-flash-forward": _lesson6_vs_reference,
    "08-performance": _lesson8_fwdbwd,
    "09-modern-attention": _lesson9_flex,
    "09-modern-attention ": _lesson9_hbm_share,  # a second quote of the same lesson
}


@pytest.mark.parametrize("lesson", list(QUOTES))
def test_the_lesson_quotes_its_recorded_table(lesson):
    text = " ".join((RESULTS.parents[1] / "lessons" / f"{lesson.strip()}.qmd")
                    .read_text(encoding="utf-8").split())
    quote = QUOTES[lesson]()
    assert quote in text, f"lessons/{lesson.strip()}.qmd should say {quote!r} (from its CSV)"


def test_a_changed_table_is_caught(tmp_path):
    # the same check on a copy of 04-matmul.csv with cuBLAS 1% faster: the quote no longer fits
    rows = _rows("04-matmul")
    for row in rows:
        if row["kernel"] == "torch.matmul":
            row["tflops"] = str(float(row["tflops"]) * 1.01)
    with (tmp_path / "04-matmul.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = " ".join((RESULTS.parents[1] / "lessons" / "04-tiling-matmul.qmd").read_text().split())
    assert _cublas() in text and _cublas(tmp_path) not in text
