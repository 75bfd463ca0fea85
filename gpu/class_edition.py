"""The class edition on a GPU: build it, run each released notebook filled with the solutions
in the edition's own package (kernels compiled), and say how each check cell ended. The
examples were captured in the interpreter on a CPU; here the students' kernels run compiled,
float32 `tl.dot` as TF32, so this is where the examples' tolerances are put to the test.

    python gpu/class_edition.py [--out assets/results/class-edition-gpu.csv]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from flashcourse.authoring import build, release  # noqa: E402
from flashcourse.grader import samples  # noqa: E402


def outcome(cell) -> str:
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if errors:
        return f"{errors[0].ename}: {errors[0].evalue.splitlines()[0][:200]}"
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    if "visible case(s) match" in text:
        return "examples match"
    return "recorded" if "recorded" in text else text.strip()[:200]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "assets/results/class-edition-gpu.csv")
    args = parser.parse_args()
    import torch
    import triton

    edition = Path(tempfile.mkdtemp(prefix="class-edition-")) / "edition"
    release.release(ROOT, edition, commit=False)
    os.environ["PYTHONPATH"] = str(edition / "src")
    rows = []
    for path in build.lesson_paths(ROOT):
        notebook = nbformat.reads(json.dumps(samples.filled_notebook(
            ROOT, path.stem, exercises=edition / "exercises")), as_version=4)
        start = time.perf_counter()
        NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(edition / "exercises")}}).execute()
        seconds = time.perf_counter() - start
        setup = next(c for c in notebook.cells if c.cell_type == "code")
        runtime_line = "".join(o.get("text", "") for o in setup.outputs).strip()
        for cell in notebook.cells:
            if cell.cell_type == "code" and cell.id.startswith("check-"):
                rows.append({"lesson": path.stem, "cell": cell.id, "outcome": outcome(cell),
                             "runtime": runtime_line, "notebook_s": f"{seconds:.1f}"})
        print(path.stem, f"{seconds:.1f} s",
              sum(r["outcome"] in ("examples match", "recorded") for r in rows
                  if r["lesson"] == path.stem), "of",
              sum(r["lesson"] == path.stem for r in rows), "check cells passed", flush=True)
    bad = [r for r in rows if r["outcome"] not in ("examples match", "recorded")]
    for row in bad:
        print("NOT PASSED", row["lesson"], row["cell"], row["outcome"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*rows[0], "torch", "triton", "device"])
        writer.writeheader()
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        for row in rows:
            writer.writerow({**row, "torch": torch.__version__, "triton": triton.__version__,
                             "device": device})
    print(f"{len(rows) - len(bad)} of {len(rows)} check cells passed; wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
