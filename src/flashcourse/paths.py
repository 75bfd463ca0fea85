"""Where the course's own folders are: the repository root and the recorded results.

The package is installed in development mode from `src/`, so the repository is two folders up.
"""

from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[2]
RECORDED_RESULTS = COURSE_ROOT / "assets" / "results"  # measured on the course GPU
