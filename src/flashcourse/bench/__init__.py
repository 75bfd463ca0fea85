"""Timing on the GPU, shared by every lesson's measurement cells and benchmark scripts.

Timings only mean something on a GPU; on CPU these helpers say so and return None, so a
notebook cell can call them unconditionally and nbval sees a fixed line.
"""

from __future__ import annotations

import datetime
import os
import platform

from .. import runtime
from ..paths import RECORDED_RESULTS

CPU_MESSAGE = ("Measurement skipped: no CUDA GPU (the Triton interpreter's timings say nothing "
               "about GPU speed). The results table below, where one has been recorded, was "
               "measured on an NVIDIA H200.")


BOOK_MESSAGE = "Measured on an NVIDIA H200 (the course's recorded results):"


def gpu_available() -> bool:
    return not runtime.current().interpreter


SKIP_ENV = "FLASHCOURSE_SKIP_BENCH"


def skip_message() -> str | None:
    """None on a GPU; otherwise the fixed line a measurement cell prints instead.
    FLASHCOURSE_SKIP_BENCH=1 skips measurements on a GPU too (grading runs need no timings)."""
    if runtime.truthy(os.environ.get(SKIP_ENV)):
        return (f"Measurement skipped ({SKIP_ENV}=1). The results table below, where one has "
                "been recorded, was measured on an NVIDIA H200.")
    if gpu_available():
        return None
    return BOOK_MESSAGE if runtime.book_page() else CPU_MESSAGE


def script_args(argv, doc: str, script: str, what: str, smoke: str, add_arguments=None):
    """A gpu/ script's `--out FILE` and `--interpreter` (a smoke test on a CPU: `smoke` says
    what it runs), and those add_arguments(parser) adds, with the runtime set up for one or the
    other; None without a CUDA GPU and without --interpreter (cuda_script_ready has said so)."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="the CSV to write")
    parser.add_argument("--interpreter", action="store_true", help=smoke)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    if args.interpreter:
        os.environ["FLASHCOURSE_INTERPRET"] = "1"
        runtime.setup(verbose=False)
    elif not cuda_script_ready(script, what):
        return None
    return args


def cuda_script_ready(script: str, what: str) -> bool:
    """For a gpu/ script: without a CUDA GPU, print "<script> <what> on a CUDA GPU; there is
    none here." and return False; with one, set up compiled Triton and return True."""
    import torch

    if not torch.cuda.is_available():
        print(f"{script} {what} on a CUDA GPU; there is none here.")
        return False
    runtime.setup()
    return True


def median_ms(fn, warmup_ms: int = 25, rep_ms: int = 100, grad_to_none=None) -> float:
    """Median time of `fn()` in milliseconds, with the L2 cache flushed between runs
    (grad_to_none: tensors whose .grad is reset before each run, for backward passes)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms,
                                         grad_to_none=grad_to_none, return_mode="median"))


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def gbps(num_bytes: float, ms: float) -> float:
    return num_bytes / (ms * 1e-3) / 1e9


def environment() -> dict[str, str]:
    """Date, GPU and versions, recorded beside every results table."""
    import torch
    import triton

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    return {
        "date": datetime.date.today().isoformat(),
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": str(torch.version.cuda),
        "python": platform.python_version(),
    }


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A results table as GitHub/Quarto markdown; floats get 3 significant digits."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])

    def fmt(value) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


RESULTS_DIR_ENV = "FLASHCOURSE_RESULTS_DIR"


def write_csv(path, rows: list[dict]) -> None:
    """Write measured rows as CSV at `path`, with the date, GPU and versions in every row; one
    header holds every column any row has, in the order they first appear (missing cells
    empty)."""
    import csv

    if not rows:
        return
    env = environment()
    rows = [{**env, **row} for row in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, restval="",
                                fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
        writer.writeheader()
        writer.writerows(rows)


def save_results(name: str, rows: list[dict]) -> None:
    """Write a measured table as CSV to $FLASHCOURSE_RESULTS_DIR (when set), so a GPU run
    can bring its numbers home into assets/results/."""
    from pathlib import Path

    target = os.environ.get(RESULTS_DIR_ENV)
    if target:
        write_csv(Path(target) / f"{name}.csv", rows)


_ENVIRONMENT_KEYS = ("date", "gpu", "torch", "triton", "cuda", "python")  # kept as text


def _parse_field(text: str):
    """A CSV field as int, float or (when it is not a number) the text itself, so that
    markdown_table formats recorded floats like freshly measured ones."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def recorded(name: str) -> list[dict]:
    """The table recorded on the course GPU (assets/results/<name>.csv), [] if none yet.
    Numeric fields come back as int or float; the environment (date, versions) and everything
    else as text."""
    import csv

    path = RECORDED_RESULTS / f"{name}.csv"
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return [{key: value if key in _ENVIRONMENT_KEYS else _parse_field(value)
                 for key, value in row.items()} for row in csv.DictReader(handle)]


def show_recorded(name: str, columns: list[str], hbm_share_of: str | None = None,
                  where: dict | None = None) -> None:
    """Print a recorded results table with the date, GPU and versions it was measured with.
    `hbm_share_of`: a GB/s column, shown again as a share of the H200's HBM bandwidth (its
    datasheet figure), the yardstick for kernels that only read. `where`: only the rows whose
    columns equal these values (as text), e.g. {"triton": "3.6.0"}. A table from several
    runs names each version it holds and shows the columns that tell its rows apart."""
    every = recorded(name)
    rows = [row for row in every
            if all(str(row.get(key)) == str(value) for key, value in (where or {}).items())]
    if not rows:
        print(f"No recorded results for {name} where {where}." if every else
              f"No recorded results for {name} yet.")
        return
    if hbm_share_of:
        share = f"{hbm_share_of} as % of HBM"
        rows = [dict(row, **{share: hbm_share(row[hbm_share_of])}) for row in rows]
        columns = [*columns, share]
    described = []
    for key, label in (("gpu", "on"), ("torch", "torch"), ("triton", "Triton")):
        values = sorted({row[key] for row in rows})
        described.append(f"{label} {' and '.join(values)}")
        if len(values) > 1 and key not in columns:
            columns = [key, *columns]
    dates = sorted({row["date"] for row in rows})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    header = f"Measured {when} {described[0]}, {', '.join(described[1:])}:"
    table = markdown_table(rows, columns)
    try:  # in a notebook (and on the book's pages) the table renders as a table
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Markdown(f"{header}\n\n{table}"))
        return
    print(header)
    print(table)


def show_ratio_summary(name: str, ratio: str, by: tuple[str, ...], at_least: float) -> None:
    """Print, per group of recorded rows (grouped by the columns `by`), how many cells the
    column `ratio` has, its lowest, median and highest value, and how many are >= at_least."""
    import statistics

    groups: dict[tuple, list[float]] = {}
    rows = recorded(name)
    widths = [max(7, *(len(str(row[key])) for row in rows)) for key in by] if rows else []
    for row in rows:
        if row[ratio] != "":
            groups.setdefault(tuple(row[key] for key in by), []).append(row[ratio])
    if not groups:
        print(f"No recorded results for {name} yet.")
        return
    print("  ".join(f"{key:>{width}s}" for key, width in zip(by, widths, strict=True)) +
          f"  cells  lowest  median  highest  at or above {at_least}")
    for key, values in sorted(groups.items()):
        print("  ".join(f"{value!s:>{width}s}" for value, width in zip(key, widths, strict=True)) +
              f"  {len(values):5d}  {min(values):6.2f}  {statistics.median(values):6.2f}"
              f"  {max(values):7.2f}  {sum(v >= at_least for v in values):5d}")


def hbm_share(gb_per_s) -> float | str:
    """GB/s as a percentage of the H200's HBM bandwidth (hardware.H200_HBM_TBS); "" if empty."""
    from ..hardware import H200_HBM_TBS

    if gb_per_s in ("", None):
        return ""
    return round(float(gb_per_s) / (H200_HBM_TBS * 1000) * 100, 1)
