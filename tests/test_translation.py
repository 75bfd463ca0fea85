"""The Chinese edition (authoring/translation.py, authoring/editions.py): the units of a source
and their keys; a translation that repeats the English gives the English back exactly; an edited
English paragraph is reported stale, a new one missing, a deleted one dropped; the glossary
check; the Chinese notebooks share the English code cells, cell ids and grading cells; a Chinese
solution passes strict nbval and an untouched Chinese exercise fails in Chinese; and, apart,
whether every unit is translated yet."""

import io
import json
import re
import shutil
import subprocess
import sys
import tokenize
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest
from notebook_runs import run_notebook

from flashcourse import i18n
from flashcourse.authoring import build, editions, translation

DEMO = '''---
title: "Lesson 1: A demo"
skills: "numpy basics"
time: "1 h"
---

## 1. The first section

A paragraph of prose that
spans two lines.

- an item of a list
- another item

| what | value |
|---|---|
| rows | 3 |

```{python}
#| id: exercise-demo
# Compute the total of the row.
total = 1 + 2  # BLANK: the sum of the row
x = 3  # a trailing comment in words
```

```{python}
#| id: check-demo
check("demo/total", total)  # grading cells are shared word for word
```

$$
a = b
$$

The last paragraph.
'''


def _demo_root(tmp_path, text=DEMO):
    (tmp_path / "lessons").mkdir(exist_ok=True)
    source = tmp_path / "lessons" / "01-demo.qmd"
    source.write_text(text, encoding="utf-8")
    return source


def _marked(entry) -> str:
    """A stand-in translation: the English, each line marked after its markdown marker."""
    return "\n".join(re.sub(r"^(#+ |- |)", r"\1中文：", line) for line in entry.en.split("\n"))


def _line(text: str, line: str) -> int:
    return text.split("\n").index(line) + 1


def _fill(root, source, zh_of=_marked):
    """Translate every unit of `source`'s translation file."""
    path = translation.translation_path(root, source, "zh")
    entries = translation.read_entries(path)
    for entry in entries:
        entry.zh = zh_of(entry)
    translation.write_entries(path, source.name, "zh", entries)
    return entries


# ---------------------------------------------------------------- units and keys


def test_units_and_keys():
    found = translation.units(DEMO)
    kinds = [(unit.kind, unit.text) for unit in found]
    assert kinds == [
        ("title", "Lesson 1: A demo"), ("skills", "numpy basics"), ("time", "1 h"),
        ("heading", "## 1. The first section"),
        ("paragraph", "A paragraph of prose that\nspans two lines."),
        ("item", "- an item of a list"), ("item", "- another item"),
        ("table", "| what | value |\n|---|---|\n| rows | 3 |"),
        ("comment", "Compute the total of the row."),
        ("blank-note", "the sum of the row"),  # the exercise keeps it as its comment
        ("trailing", "a trailing comment in words"),
        ("paragraph", "The last paragraph."),
    ], kinds
    lines = DEMO.split("\n")
    paragraph = next(unit for unit in found if unit.kind == "paragraph")
    assert lines[paragraph.start] == "A paragraph of prose that"
    # nothing of the grading cell, the math block or the generator's marks is a unit
    texts = " ".join(unit.text for unit in found)
    assert "grading cells" not in texts and "a = b" not in texts and "id:" not in texts
    # a key is the English's hash, blind to how its lines wrap
    assert paragraph.key == translation.unit_key("A paragraph of prose that spans two lines.")
    assert paragraph.key != translation.unit_key("A paragraph of prose that spans 2 lines.")
    assert len({unit.key for unit in found}) == len(found)


def test_translate_writes_one_unit_per_piece_in_order(tmp_path):
    source = _demo_root(tmp_path)
    written = translation.update(tmp_path, "zh")
    assert written == [tmp_path / "lessons" / "zh" / "01-demo.toml"]
    entries = translation.read_entries(written[0])
    assert [e.en for e in entries] == [u.text for u in translation.units(DEMO)]
    assert all(e.key == translation.unit_key(e.en) and e.zh == "" for e in entries)
    missing = translation.problems(tmp_path, "zh")
    assert len(missing) == len(entries) and "lessons/01-demo.qmd:1" not in missing[0]
    assert missing[0].startswith("lessons/01-demo.qmd:2: title 'Lesson 1: A demo' has no zh")
    assert translation.update(tmp_path, "zh") == []  # nothing changed: nothing written
    assert source.read_text(encoding="utf-8") == DEMO  # the English is never touched


# ---------------------------------------------------------------- the translated source


def test_an_identity_translation_reproduces_every_english_source(root, tmp_path):
    """zh = en for every unit of every lesson and of the index: the translated source is the
    English source, byte for byte (units cover exactly what they replace)."""
    (tmp_path / "lessons").mkdir()
    for source in translation.sources(root):
        copy = tmp_path / source.relative_to(root)
        shutil.copy(source, copy)
        entries = [translation.Entry(u.key, u.text, u.text)
                   for u in translation._distinct(translation.units(source.read_text()))]
        translation.write_entries(translation.translation_path(tmp_path, copy, "zh"),
                                  copy.name, "zh", entries)
        assert translation.translated_source(copy, "zh", root=tmp_path) == \
            source.read_text(encoding="utf-8"), source.name


def test_the_translated_source_replaces_prose_and_comments_only(tmp_path):
    source = _demo_root(tmp_path)
    translation.update(tmp_path, "zh")
    _fill(tmp_path, source)
    text = translation.translated_source(source, "zh", root=tmp_path)
    assert 'title: "中文：Lesson 1: A demo"' in text
    assert "# 中文：Compute the total of the row." in text
    assert "x = 3  # 中文：a trailing comment in words" in text
    assert "total = 1 + 2  # BLANK: 中文：the sum of the row" in text  # the mark stays
    assert 'check("demo/total", total)  # grading cells are shared word for word' in text
    assert "$$\na = b\n$$" in text
    book = translation.translated_source(source, "zh", root=tmp_path, anchors=True)
    assert "## 中文：1. The first section {#the-first-section}" in book
    assert "## 中文：1. The first section\n" in text  # the notebooks need no anchor


# ---------------------------------------------------------------- after the English changed


def test_an_edited_paragraph_is_stale_and_keeps_its_translation(tmp_path):
    source = _demo_root(tmp_path)
    translation.update(tmp_path, "zh")
    _fill(tmp_path, source)
    assert translation.problems(tmp_path, "zh") == []
    source.write_text(DEMO.replace("spans two lines.", "spans two short lines."), "utf-8")
    reported = translation.problems(tmp_path, "zh")
    where = _line(DEMO, "A paragraph of prose that")
    assert reported == [
        f"lessons/01-demo.qmd:{where}: paragraph "
        "'A paragraph of prose that spans two short lines.' changed since it was translated "
        "(lessons/zh/01-demo.toml: stale); update its zh, "
        "then delete its `stale` and `was` lines"]
    # the translated lesson shows the new English there, not the old translation
    text = translation.translated_source(source, "zh", root=tmp_path)
    assert "spans two short lines." in text and "中文：A paragraph" not in text

    translation.update(tmp_path, "zh")
    entries = translation.read_entries(tmp_path / "lessons" / "zh" / "01-demo.toml")
    stale = [entry for entry in entries if entry.stale]
    assert len(stale) == 1
    assert stale[0].en == "A paragraph of prose that\nspans two short lines."
    assert stale[0].was == "A paragraph of prose that\nspans two lines."
    assert stale[0].zh == "中文：A paragraph of prose that\n中文：spans two lines."  # kept
    file_text = (tmp_path / "lessons" / "zh" / "01-demo.toml").read_text(encoding="utf-8")
    assert "stale = true" in file_text
    # the translator updates zh and deletes `stale` and `was`: translated again
    stale[0].zh, stale[0].stale, stale[0].was = "新的译文", False, ""
    translation.write_entries(tmp_path / "lessons" / "zh" / "01-demo.toml", source.name, "zh",
                              entries)
    assert translation.problems(tmp_path, "zh") == []


def test_a_new_paragraph_is_missing_and_a_deleted_one_dropped(tmp_path):
    source = _demo_root(tmp_path)
    translation.update(tmp_path, "zh")
    _fill(tmp_path, source)
    edited = DEMO.replace("The last paragraph.\n",
                          "The last paragraph.\n\nA paragraph added later.\n")
    source.write_text(edited.replace("- another item\n", ""), "utf-8")
    reported = translation.problems(tmp_path, "zh")
    assert len(reported) == 1, reported
    where = _line(edited, "A paragraph added later.") - 1  # one item less above it
    assert reported[0].startswith(f"lessons/01-demo.qmd:{where}: paragraph "
                                  "'A paragraph added later.' "
                                  "has no zh translation in lessons/zh/01-demo.toml; run "
                                  "`python -m flashcourse translate zh`")
    translation.update(tmp_path, "zh")
    entries = translation.read_entries(tmp_path / "lessons" / "zh" / "01-demo.toml")
    texts = [entry.en for entry in entries]
    assert "- another item" not in texts  # obsolete: dropped
    assert texts[-1] == "A paragraph added later." and entries[-1].zh == ""
    assert all(entry.zh for entry in entries[:-1])  # the others keep their translation


def test_translate_command_marks_stale_and_lists_whats_left(tmp_path):
    source = _demo_root(tmp_path)
    command = [sys.executable, "-m", "flashcourse", "translate", "zh", "--root", str(tmp_path)]
    first = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and "wrote lessons/zh/01-demo.toml" in first.stdout
    assert "12 unit(s) left to translate into zh" in first.stdout
    _fill(tmp_path, source)
    source.write_text(DEMO.replace("The last paragraph.", "The final paragraph."), "utf-8")
    check = subprocess.run([*command, "--check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 1 and "changed since it was translated" in check.stdout
    assert "stale = true" not in (tmp_path / "lessons/zh/01-demo.toml").read_text("utf-8")
    subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert "stale = true" in (tmp_path / "lessons/zh/01-demo.toml").read_text("utf-8")


# ---------------------------------------------------------------- the glossary


def test_the_glossary_check_finds_a_unit_that_avoids_the_term(root, tmp_path):
    text = DEMO.replace("The last paragraph.", "Keep the tile in shared memory.")
    source = _demo_root(tmp_path, text)
    (tmp_path / translation.GLOSSARY).write_bytes((root / translation.GLOSSARY).read_bytes())
    translation.update(tmp_path, "zh")
    _fill(tmp_path, source, lambda entry: "把这个块放在片上存储里。"
          if "shared memory" in entry.en else "译文")
    misses = translation.glossary_misses(tmp_path)
    last = "Keep the tile in shared memory."
    assert misses == [f"lessons/zh/01-demo.toml (key {translation.unit_key(last)}, "
                      f"lessons/01-demo.qmd:{_line(text, last)}): the English says "
                      "'shared memory'; the "
                      "glossary's word is '共享内存'"]
    _fill(tmp_path, source, lambda entry: "把这个块放在共享内存里。"
          if "shared memory" in entry.en else "译文")
    assert translation.glossary_misses(tmp_path) == []


def test_the_glossary_pages_list_every_term(root):
    terms = translation.glossary(root)
    for lang in editions.LANGUAGES:
        page = (root / editions.folder("book", lang) / "glossary.qmd").read_text("utf-8")
        assert page == editions.glossary_page(root, lang)
        for term in terms:
            assert f"| **{term.en if lang == 'en' else term.zh}** |" in page, (lang, term.en)
        assert 'class="language-switch"' not in page and ".language-switch" in page


# ---------------------------------------------------------------- the Chinese notebooks


def _code_without_comments(source: str) -> str:
    """A code cell's tokens but its comments: what the two editions must share."""
    tokens = tokenize.generate_tokens(io.StringIO(source + "\n").readline)
    kept = [(token.type, token.string) for token in tokens
            if token.type not in (tokenize.COMMENT, tokenize.NL)]
    return repr(kept)


@pytest.mark.parametrize("variant", ["exercises", "solutions"])
def test_chinese_notebooks_share_the_english_code(root, variant):
    """Same cells in the same order with the same ids, types and tags; code cells equal but
    for their comments; grading cells identical character for character."""
    for path in build.lesson_paths(root):
        english = nbformat.read(root / variant / f"{path.stem}.ipynb", as_version=4)
        chinese = nbformat.read(root / variant / "zh" / f"{path.stem}.ipynb", as_version=4)
        assert english.metadata["flashcourse"] == {"lang": "en"}
        assert chinese.metadata["flashcourse"] == {"lang": "zh"}
        assert [(c.id, c.cell_type) for c in chinese.cells] == \
            [(c.id, c.cell_type) for c in english.cells], path.stem
        for mine, theirs in zip(chinese.cells, english.cells, strict=True):
            assert mine.metadata == theirs.metadata, (path.stem, mine.id)
            if mine.cell_type != "code":
                continue
            if mine.id.startswith("check-"):
                assert mine.source == theirs.source, (path.stem, mine.id)
            assert _code_without_comments(mine.source) == \
                _code_without_comments(theirs.source), (path.stem, mine.id)


def test_chinese_editions_speak_chinese_where_the_build_writes(root):
    """The build's own words (the banner, the fc.hint line, the stub's comment, the book's
    callout titles) come from the catalog in the Chinese edition."""
    with i18n.language("zh"):
        answer, hint = i18n._("Reference answer"), i18n._("Hint {level} of {count}")
    assert answer != "Reference answer" and hint != "Hint {level} of {count}"
    exercise = nbformat.read(root / "exercises" / "zh" / "05-softmax.ipynb", as_version=4)
    title = exercise.cells[0].source
    assert "练习" in title and "Exercise notebook" not in title
    hints = [c.source for c in exercise.cells if c.id.startswith("hints-")]
    assert hints and all("fc.hint(" in s and "Stuck?" not in s for s in hints)
    page = (root / "book" / "zh" / "05-softmax.qmd").read_text(encoding="utf-8")
    assert f"## {answer}" in page and "## Reference answer" not in page
    assert "## " + hint.format(level=1, count=3) in page or \
        "## " + hint.format(level=1, count=2) in page
    assert page.count(".language-switch") == 1


def test_the_chinese_hint_levels_are_the_translated_ones(root):
    """hints/zh/NN-slug.json holds an exercise's levels only once they are translated; fc.hint
    shows the English ones (saying so) for the others."""
    for path in build.lesson_paths(root):
        english = json.loads((root / build.HINTS_DIR / f"{path.stem}.json").read_text("utf-8"))
        chinese_file = root / build.HINTS_DIR / "zh" / f"{path.stem}.json"
        if not chinese_file.exists():
            continue
        chinese = json.loads(chinese_file.read_text("utf-8"))
        for exercise, levels in chinese["exercises"].items():
            assert len(levels) == len(english["exercises"][exercise]), exercise
            assert levels != english["exercises"][exercise], exercise


SHORT_LESSON = "01-gpu-flash"  # numpy only: its solution runs in seconds


def test_a_chinese_solution_passes_strict_nbval(root, tmp_path):
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "--nbval", "--nbval-current-env", f"--junitxml={report}",
         str(root / "solutions" / "zh" / f"{SHORT_LESSON}.ipynb")],
        cwd=root, capture_output=True, text=True, timeout=600)
    cases = list(ET.parse(report).iter("testcase"))
    failed = [case.get("name") for case in cases
              if case.find("failure") is not None or case.find("error") is not None]
    assert cases and not failed and result.returncode == 0, result.stdout[-3000:]


def test_an_untouched_chinese_exercise_fails_in_chinese(root, monkeypatch):
    """Run as JupyterLab runs it (jupyter-server names the notebook in JPY_SESSION_NAME): the
    first grading cell fails with the fill-in message of the Chinese catalog."""

    from flashcourse.blanks import BlankNotFilled

    path = root / "exercises" / "zh" / f"{SHORT_LESSON}.ipynb"
    monkeypatch.setenv(i18n.NOTEBOOK_ENV, str(path))
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    notebook = nbformat.read(path, as_version=4)
    run_notebook(notebook, path.parent)
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              and cell.id.startswith("check-") for output in cell.outputs
              if output.output_type == "error"]
    assert errors, "no grading cell failed on the untouched Chinese exercise"
    with i18n.language("zh"):
        english = "Fill in the blank{place}: a `{blank}` placeholder is still there. " \
                  "Replace it with your expression, run the cell, then run the check again."
        expected = i18n._(english)
    assert expected != english, "the catalog has no Chinese fill-in message"
    head = expected.split("{place}")[0]  # "请填空", before where the blank is
    messages = [error.evalue for error in errors if error.ename == BlankNotFilled.__name__]
    assert messages, [error.ename for error in errors]
    assert messages[0].startswith(head), messages[0]  # the exercise's own blanks
    assert all(re.search(r"[\u4e00-\u9fff]", message) for message in messages), messages
    assert not [message for message in messages if "Fill in the blank" in message], messages


# ---------------------------------------------------------------- is the translation done?


def test_every_unit_is_translated(root):
    """Every unit of every lesson and of the index has a Chinese translation that is not
    stale. Kept apart from the generated-files check while the translation is under way."""
    left = translation.problems(root, "zh")
    assert not left, f"{len(left)} unit(s) are not translated (python -m flashcourse " \
        "translate zh lists them):\n" + "\n".join(left[:30])


def test_translations_use_the_glossary(root):
    misses = translation.glossary_misses(root)
    assert not misses, "translations that avoid the glossary's word:\n" + "\n".join(misses[:30])


# ---------------------------------------------------------------- in JupyterLab, in Chinese

RESCALING = "The old sum l and the old output O were not rescaled"  # lesson 1's named mistake


def _chinese(fragment: str) -> str:
    """The Chinese of the catalog message that starts with `fragment` (empty: not translated)."""
    from flashcourse.authoring import catalogs

    path = catalogs.source_path(Path(__file__).resolve().parents[1], "zh", catalogs.CHECKS)
    entries = catalogs.parse_po(path.read_text(encoding="utf-8"), str(path))
    return next(entry.msgstr for entry in entries if entry.msgid.startswith(fragment))


def test_a_chinese_lesson_in_jupyterlab(sync_api, tmp_path, root):
    """`./course lab --lang zh`: a Chinese lesson opens, a wrong answer run in it gets the
    check's diagnosis in Chinese."""
    import test_browser as lab

    from flashcourse.authoring import cells

    diagnosis = _chinese(RESCALING)
    assert diagnosis, f"checks.po has no Chinese for {RESCALING!r}"
    solution = cells.solution_source(root / "lessons" / f"{lab.SLUG}.qmd",
                                     "exercise-flash-attention")
    wrong, count = re.subn(r"^(\s*)scale = .*$", r"\1scale = np.ones_like(m_new)", solution,
                           flags=re.M)
    assert count == 1
    shots = root / "test-artifacts"
    shots.mkdir(exist_ok=True)
    with lab.running_lab(tmp_path, root, lang="zh") as (url, course):
        copy = json.loads((course / "work" / f"{lab.SLUG}.ipynb").read_text("utf-8"))
        assert copy["metadata"]["flashcourse"]["lang"] == "zh"
        with sync_api.sync_playwright() as play:
            browser = play.chromium.launch(executable_path=lab.CHROMIUM, args=lab.ARGS,
                                           headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(120_000)
                page.goto(f"{url}/lab/tree/{lab.SLUG}.ipynb")
                check = lab._cell(page, lab.CHECK)
                check.wait_for()
                lab._idle(page)
                title = page.locator(".jp-MarkdownCell h1").first.inner_text()
                assert title.startswith("第 1 课"), title
                setup = lab._cell(page, "fc.setup()")
                setup.locator(".cm-content").click()
                page.keyboard.press("Shift+Enter")
                lab._idle(page)
                editor = lab._cell(page, "def flash_attention").locator(".cm-content")
                editor.click()
                page.keyboard.press("Control+a")
                page.keyboard.insert_text(wrong)
                page.keyboard.press("Shift+Enter")
                lab._idle(page)
                check.locator(".cm-content").click()
                page.keyboard.press("Shift+Enter")
                lab._output(check, diagnosis.split("{")[0][:12]).wait_for()
                shown = check.locator(".jp-OutputArea").inner_text()
                assert RESCALING not in shown and "Traceback" not in shown, shown
                check.scroll_into_view_if_needed()
                page.screenshot(path=str(shots / "browser-zh-wrong.png"))
            except Exception:
                page.screenshot(path=str(shots / "browser-zh-failure.png"), full_page=True)
                raise
            finally:
                browser.close()
