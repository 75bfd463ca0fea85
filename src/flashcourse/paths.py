"""Where the course's own folders are: the repository root and the recorded results.

The package is installed in development mode from `src/`, so the repository is two folders up.
"""

import re
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[2]
RECORDED_RESULTS = COURSE_ROOT / "assets" / "results"  # measured on the course GPU
# A lesson page's front matter and its title line: the build reads every lesson with them, the
# checks the next lesson's title (registry.lesson_title).
FRONT_MATTER = re.compile(r"^---\n(.*?)\n---\n", re.S)
TITLE_LINE = re.compile(r'^title:\s*"?(.*?)"?\s*$', re.M)
