"""The class edition works on this machine: the package imports, it holds no grader and no
lesson checks, every lesson has its examples, and every exercise notebook runs to its end
(`pytest` also runs each notebook in exercises/ under nbval-lax: cells that check unfinished
work may raise, every other cell must run)."""

import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_is_the_class_edition():
    from flashcourse.checks import edition

    assert edition.class_edition()
    for name in ("flashcourse.grader", "flashcourse.checks.softmax",
                 "flashcourse.checks.self_checks"):
        with pytest.raises(ImportError):
            importlib.import_module(name)


def test_every_lesson_has_its_exercises_registered():
    from flashcourse.checks import registry

    ids = registry.list_ids()
    notebooks = sorted((ROOT / "exercises").glob("*.ipynb"))
    assert notebooks
    for notebook in notebooks:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        checked = ["".join(c["source"]).split('"')[1] for c in cells
                   if c["cell_type"] == "code" and c.get("id", "").startswith("check-")]
        assert checked, notebook.name
        assert all(exercise in ids for exercise in checked), notebook.name
