"""The book: every file _quarto.yml names exists, every lesson is listed, and where Quarto is
installed the book renders."""

import re
import shutil
import subprocess

import pytest

from flashcourse import notebooks


def _chapters(root):
    text = (root / "_quarto.yml").read_text()
    assert re.search(r"^\s*type:\s*book\s*$", text, re.M), "_quarto.yml must be a book project"
    return re.findall(r"^\s*-\s+(\S+\.(?:qmd|ipynb|md))\s*$", text, re.M)


def test_every_named_file_exists(root):
    chapters = _chapters(root)
    assert chapters, "no chapters found in _quarto.yml"
    missing = [c for c in chapters if "*" not in c and not (root / c).exists()]
    assert not missing, f"_quarto.yml names files that do not exist: {missing}"
    css = re.findall(r"css:\s*(\S+)", (root / "_quarto.yml").read_text())
    assert all((root / c).exists() for c in css)


def test_every_lesson_is_a_chapter(root):
    chapters = set(_chapters(root))
    lessons = {f"book/{p.stem}.qmd" for p in notebooks.lesson_paths(root)}
    assert lessons, "no lessons found"
    assert lessons <= chapters, f"lessons missing from _quarto.yml: {sorted(lessons - chapters)}"
    assert _chapters(root)[0] == "index.qmd"


def test_book_pages_show_answers_collapsed(root):
    for path in notebooks.lesson_paths(root):
        page = (root / "book" / f"{path.stem}.qmd").read_text()
        assert '::: {.callout-tip collapse="true"}' in page
        assert "## Reference answer" in page


def test_no_pasted_images_in_notebooks(root):
    for folder in ("exercises", "solutions"):
        for nb in (root / folder).glob("*.ipynb"):
            text = nb.read_text()
            assert "image/png" not in text and "data:image" not in text, nb


@pytest.mark.skipif(shutil.which("quarto") is None, reason="quarto is not installed here")
def test_quarto_renders_the_book(root, tmp_path):
    result = subprocess.run(["quarto", "render", "--output-dir", str(tmp_path / "_book")],
                            cwd=root, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
