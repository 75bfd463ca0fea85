"""A notebook's checks import their own lesson's check module only: lesson 1 (numpy) never
imports torch or Triton, and the tables that let it hold with the modules themselves."""

import os
import re
import subprocess
import sys

from flashcourse.checks import LESSON_IDS, LESSON_MODULES, registry
from flashcourse.checks.cases import GRADING_MODE_ENV


def test_each_module_registers_the_lesson_id_the_table_names():
    import importlib

    assert list(LESSON_IDS) == list(LESSON_MODULES)
    for stem, module in LESSON_MODULES.items():
        lesson = importlib.import_module(f"flashcourse.checks.{module}").LESSON
        assert lesson.id == LESSON_IDS[stem], (stem, lesson.id)


def test_each_lesson_page_has_its_registered_title(root):
    registry._load_checks()
    by_id = {lesson.id: lesson.title for lesson in registry.LESSONS.values()}
    for stem, lesson_id in LESSON_IDS.items():
        assert registry.lesson_title(f"{stem}.ipynb", root) == by_id[lesson_id], stem


# Lesson 1's solution, every code cell in order, in a fresh process (matplotlib off screen).
RUN_SOLUTION = """
import json, os, sys
import matplotlib
matplotlib.use("Agg")
notebook = json.load(open(sys.argv[1], encoding="utf-8"))
os.chdir(os.path.dirname(sys.argv[1]))
scope = {"__name__": "__main__"}
for cell in notebook["cells"]:
    if cell["cell_type"] == "code":
        exec(compile("".join(cell["source"]), cell.get("id", "cell"), "exec"), scope)
print(sorted(name for name in ("torch", "triton") if name in sys.modules))
"""


def test_lesson_1_imports_neither_torch_nor_triton(root):
    solution = root / "solutions" / "01-gpu-flash.ipynb"
    done = subprocess.run([sys.executable, "-c", RUN_SOLUTION, str(solution)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Next: Lesson 2: Memory and the roofline" in done.stdout  # it passed, and linked on
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]


def test_the_next_lesson_link_names_a_lesson_whose_checks_are_not_loaded(root, monkeypatch):
    monkeypatch.setattr(registry, "LESSONS", {key: value for key, value in
                                              registry.LESSONS.items() if key == "gpu-flash"})
    monkeypatch.setattr(registry, "_load_lesson", lambda lesson_id: None)
    assert registry.next_lesson("gpu-flash", root) == (
        "Lesson 2: Memory and the roofline", "02-memory-roofline.ipynb")


FIGURE_IN_A_FRESH_PROCESS = """
import sys
import flashcourse as fc
loaded = "matplotlib" in sys.modules
drawn = fc.figures.memory_hierarchy()
fc.figures.show()
print(loaded, drawn is None, "matplotlib" in sys.modules)
"""


def test_figures_load_matplotlib_on_first_use_and_are_not_drawn_while_grading():
    def run(grading: str) -> str:
        env = {**os.environ, GRADING_MODE_ENV: grading}
        done = subprocess.run([sys.executable, "-c", FIGURE_IN_A_FRESH_PROCESS], env=env,
                              capture_output=True, text=True, timeout=300, check=True)
        return done.stdout.split()

    assert run("0") == ["False", "False", "True"]  # drawn, once asked for
    assert run("1") == ["False", "True", "False"]  # a graded notebook's figure: not drawn


def test_lessons_show_figures_without_importing_pyplot(root):
    """A lesson's figure cell draws with fc.figures and shows with fc.figures.show(): graded,
    it then never imports matplotlib (most of a second in every sandbox)."""
    for path in sorted((root / "lessons").glob("*.qmd")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(import matplotlib|from matplotlib)", text, re.M), path.name
        assert "plt." not in text, path.name
