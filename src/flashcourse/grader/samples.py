"""Submissions made from the exercise notebook, for the grader's tests and throughput script:
every blank filled with the solution's answer, then chosen answers made wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .scan import cell_source

# Known-wrong answers of lesson 1: cell id -> (pattern, replacement) applied to the solution.
LESSON1_MISTAKES = {
    "no-rescale": ("exercise-flash-attention", r"^(\s*)scale = .*$",
                   r"\1scale = np.ones_like(m_new)"),
    "no-final-divide": ("exercise-flash-attention", r"^(\s*)return O / .*$", r"\1return O"),
    "q1-wrong": ("answer-q1", r'"nxn_hbm_passes": \d+', '"nxn_hbm_passes": 2'),
    "q2-wrong": ("answer-q2", r'"sectors_contiguous": \d+', '"sectors_contiguous": 8'),
    "veto": ("answer-misconceptions", r'"flash_reduces_flops": \w+',
             '"flash_reduces_flops": True'),
}


def filled_notebook(root: Path, slug: str = "01-gpu-flash", mistakes: tuple[str, ...] = (),
                    unfilled: tuple[str, ...] = ()) -> dict:
    """The exercise notebook with its blanks and stubs replaced by the solution's cells, except
    the cells named in `unfilled`; then each named mistake applied."""
    exercise = json.loads((root / "exercises" / f"{slug}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((root / "solutions" / f"{slug}.ipynb").read_text(encoding="utf-8"))
    answers = {c["id"]: cell_source(c) for c in solution["cells"]}
    for cell in exercise["cells"]:
        text = cell_source(cell)
        if cell["cell_type"] == "code" and cell["id"] not in unfilled and (
                "______" in text or "NotImplementedError" in text) and cell["id"] != "setup":
            cell["source"] = answers[cell["id"]]
    by_id = {c["id"]: c for c in exercise["cells"]}
    for name in mistakes:
        cell_id, pattern, replacement = LESSON1_MISTAKES[name]
        new, count = re.subn(pattern, replacement, cell_source(by_id[cell_id]), flags=re.M)
        if count != 1:
            raise ValueError(f"mistake {name!r} matched {count} lines of {cell_id}")
        by_id[cell_id]["source"] = new
    return exercise


def write(nb: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return path
