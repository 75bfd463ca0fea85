"""What `grade` and `grade merge` write under --out, by --format: `reports` (report.py: the
scorecard, CSV files, junit.xml, progress.html with the class analytics, class.csv, each
submission's page, results.json) and `gradescope` (gradescope.py: one results.json per
submission in Gradescope's format). The executed notebooks are copied before either."""

from __future__ import annotations

from pathlib import Path

from .. import i18n
from . import gradescope, report
from .submission import Submission

FORMATS = ("reports", "gradescope")
DEFAULT_FORMATS = ("reports",)


def write(subs: list[Submission], out: Path, timeout: float, jobs: int,
          formats: tuple[str, ...] = DEFAULT_FORMATS) -> None:
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format(s) {', '.join(unknown)}; the formats are: "
                         + ", ".join(FORMATS))
    out.mkdir(parents=True, exist_ok=True)
    # the class's pages in English; each submission's own page and results in its language
    with i18n.language(i18n.SOURCE_LANGUAGE):
        if "reports" in formats:
            report.write_all(subs, out, timeout=timeout, jobs=jobs)
        if "gradescope" in formats:
            gradescope.write_all(subs, out)
