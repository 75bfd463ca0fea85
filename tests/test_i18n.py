"""The messages' languages (`i18n.py`) and their catalogs (`authoring/catalogs.py`): the API and
where the language comes from, the .po and .mo formats, the extraction, that a message without
Chinese fails the generated-files check, and that a Chinese run of the checks speaks Chinese."""

import gettext
import json
import re
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from flashcourse import i18n
from flashcourse.authoring import catalogs
from flashcourse.checks import registry
from flashcourse.i18n import _

CJK = re.compile(r"[\u4e00-\u9fff]")
# four English words in a row, outside `code`: a sentence the translation left out
ENGLISH_RUN = re.compile(r"\b[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z]{2,}){3,}\b")


@pytest.fixture(autouse=True)
def _language_detected(monkeypatch):
    """Every test starts with nothing chosen and no language in the environment."""
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    monkeypatch.delenv(i18n.NOTEBOOK_ENV, raising=False)
    i18n.set_language(None)
    yield
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)  # a test's bad value, before detecting
    i18n.set_language(None)


# ---------------------------------------------------------------- the API and detection


def test_languages_and_messages():
    assert i18n.LANGUAGES == ("en", "zh")
    assert i18n.current() == "en"
    assert _("Scorecard: {title}") == "Scorecard: {title}"
    i18n.set_language("zh")
    assert i18n.current() == "zh"
    assert _("Scorecard: {title}").format(title="T") == "成绩单：T"
    assert _("a message no catalog holds") == "a message no catalog holds"
    assert _("") == ""  # not the catalog's header
    assert i18n.N_("Scorecard: {title}") == "Scorecard: {title}"  # marks, never translates


def test_an_unknown_language_is_refused_naming_the_choices(monkeypatch):
    with pytest.raises(i18n.UnknownLanguage, match=r"'fr' is not a language .*en, zh"):
        i18n.set_language("fr")
    monkeypatch.setenv(i18n.LANG_ENV, "klingon")
    with pytest.raises(i18n.UnknownLanguage, match=r"FLASHCOURSE_LANG= 'klingon'.*en, zh"):
        i18n.current()


def _notebook(path: Path, lang: str | None) -> Path:
    metadata = {"flashcourse": {"lang": lang}} if lang else {}
    path.write_text(json.dumps({"cells": [], "metadata": metadata, "nbformat": 4,
                                "nbformat_minor": 5}), encoding="utf-8")
    return path


def test_detection_order(tmp_path, monkeypatch):
    """set_language, then FLASHCOURSE_LANG, then the running notebook's metadata, then en."""
    chinese = _notebook(tmp_path / "05-softmax.ipynb", "zh")
    monkeypatch.setenv(i18n.NOTEBOOK_ENV, str(chinese))
    assert i18n.current() == "zh"  # jupyter-server named the notebook: its metadata
    monkeypatch.setenv(i18n.LANG_ENV, "en")
    assert i18n.current() == "en"  # the environment wins over the notebook
    i18n.set_language("zh")
    assert i18n.current() == "zh"  # an explicit choice wins over both
    with i18n.language("en"):
        assert i18n.current() == "en"
    assert i18n.current() == "zh"
    i18n.set_language(None)
    monkeypatch.delenv(i18n.LANG_ENV)
    _notebook(chinese, None)  # saved again without a language: read again
    assert i18n.current() == "en"
    monkeypatch.chdir(tmp_path)  # a path relative to the server's root, the kernel in its folder
    _notebook(tmp_path / "06-flash-forward.ipynb", "zh")
    monkeypatch.setenv(i18n.NOTEBOOK_ENV, "lessons/06-flash-forward.ipynb")
    assert i18n.current() == "zh"
    monkeypatch.setenv(i18n.NOTEBOOK_ENV, str(tmp_path / "gone.ipynb"))
    assert i18n.current() == "en"


def test_setup_detects_the_language(monkeypatch, capsys):
    from flashcourse import runtime

    monkeypatch.setenv(i18n.LANG_ENV, "zh")
    runtime.setup()
    assert capsys.readouterr().out.startswith("运行环境：CPU 上的 Triton 解释器（")
    monkeypatch.setenv(i18n.LANG_ENV, "de")
    with pytest.raises(i18n.UnknownLanguage, match="FLASHCOURSE_LANG"):
        runtime.setup(verbose=False)


# ---------------------------------------------------------------- .po and .mo


def test_po_round_trip_keeps_translations_comments_and_flags():
    entries = [
        catalogs.Entry("Scorecard: {title}", "成绩单：{title}", ["checked by Wei"],
                       ["src/flashcourse/checks/registry.py:12"]),
        catalogs.Entry('A "quoted"\\ message\twith a tab and\na second line, long enough to be '
                       "wrapped over several lines of the catalog file", "",
                       [], ["a.py:1", "b.py:2"], fuzzy=True),
    ]
    text = catalogs.format_po(entries, "test")
    assert all(len(line) <= catalogs.WRAP + 4 for line in text.splitlines())
    parsed = catalogs.parse_po(text)
    assert parsed[0].msgid == ""  # the header
    assert parsed[1:] == entries
    assert catalogs.format_po(parsed[1:], "test") == text


def test_mo_round_trips_through_gnutranslations(tmp_path):
    table = {"Scorecard: {title}": "成绩单：{title}", "ok": "正确",
             "line one\nline two": "第一行\n第二行"}
    path = tmp_path / "flashcourse.mo"
    path.write_bytes(catalogs.mo_bytes(table))
    with path.open("rb") as handle:
        read = gettext.GNUTranslations(handle)
    assert {message: read.gettext(message) for message in table} == table
    assert read.gettext("not in it") == "not in it"
    assert read.charset() == "UTF-8"


def test_updating_keeps_translations_adds_new_and_drops_obsolete():
    old = [catalogs.Entry("kept", "保留", ["a note"], ["old.py:1"]),
           catalogs.Entry("gone", "删除", [], ["old.py:2"])]
    new = catalogs.updated_entries(old, {"kept": ["new.py:5"], "added": ["new.py:9"]})
    assert new == [catalogs.Entry("kept", "保留", ["a note"], ["new.py:5"]),
                   catalogs.Entry("added", "", [], ["new.py:9"])]


# ---------------------------------------------------------------- extraction


def test_extraction_reads_literal_messages_only():
    source = '\n'.join([
        "from ..i18n import N_, _",
        'TABLE = {"a": N_("first")}',
        "def f(name, title):",
        '    x = _("second {name}").format(name=name)',
        '    y = _("implicit " "concatenation")',
        "    z = _(title)  # a value marked elsewhere: not a message here",
        '    for _unused, item in []: pass',
        "    return x, y, z",
    ])
    assert catalogs.python_messages(source, "m.py") == [
        ("first", 2), ("second {name}", 4), ("implicit concatenation", 5)]
    with pytest.raises(catalogs.CatalogError, match=r"m\.py:1: .*f-string.*format"):
        catalogs.python_messages('_(f"{x} is wrong")', "m.py")


def test_extraction_of_the_package_and_the_self_check_files(root):
    found = catalogs.extract(root)
    core, checks = found[catalogs.CORE], found[catalogs.CHECKS]
    assert any(ref.startswith("src/flashcourse/checks/registry.py:")
               for ref in core["Scorecard: {title}"])
    assert core["Q1: where exp overflows"] == [
        "src/flashcourse/checks/self_checks/05-softmax.toml:8"]
    assert 'section 4 ("The online softmax")' in core
    assert not set(core) & set(checks)  # a message has one home
    lesson_files = {ref.split(":")[0] for refs in checks.values() for ref in refs}
    assert lesson_files and all(
        path.startswith(("src/flashcourse/checks/softmax/", "src/flashcourse/checks/"))
        and "registry.py" not in path for path in lesson_files)
    # the answers and their reasoning are never shown, so never extracted
    assert not any("e^88" in message for message in core)


# ---------------------------------------------------------------- the generated-files check


def _tree(tmp_path: Path, message: str) -> Path:
    """A package tree with one module holding `message`, and its catalogs built."""
    package = tmp_path / catalogs.PACKAGE_DIR
    (package / "checks" / "self_checks").mkdir(parents=True)
    (package / "i18n.py").write_text("", encoding="utf-8")
    (package / "shown.py").write_text(f"from .i18n import _\n\n\nMESSAGE = _({message!r})\n",
                                      encoding="utf-8")
    catalogs.write(tmp_path)
    return tmp_path


def test_a_message_without_chinese_fails_the_check_naming_it(tmp_path):
    tree = _tree(tmp_path, "Hello {name}")
    assert catalogs.stale(tree) == []
    problems = catalogs.missing_translations(tree)
    assert problems == ["src/flashcourse/locale/zh/core.po: 'Hello {name}' (used at "
                        "src/flashcourse/shown.py:4) has no translation"]
    po = catalogs.source_path(tree, "zh", "core")
    po.write_text(po.read_text(encoding="utf-8").replace(
        'msgid "Hello {name}"\nmsgstr ""', 'msgid "Hello {name}"\nmsgstr "你好 {person}"'),
        encoding="utf-8")
    assert catalogs.stale(tree) == [catalogs.compiled_path(tree, "zh")]  # .mo out of date
    assert "keep the same {names}" in catalogs.missing_translations(tree)[0]
    po.write_text(po.read_text(encoding="utf-8").replace("{person}", "{name}"),
                  encoding="utf-8")
    assert catalogs.missing_translations(tree) == []
    catalogs.write(tree)
    assert catalogs.stale(tree) == []
    with catalogs.compiled_path(tree, "zh").open("rb") as handle:
        assert gettext.GNUTranslations(handle).gettext("Hello {name}") == "你好 {name}"
    fuzzy = po.read_text(encoding="utf-8").replace("#: src", "#, fuzzy\n#: src")
    po.write_text(fuzzy, encoding="utf-8")
    assert catalogs.missing_translations(tree)[0].endswith("is marked fuzzy")


def test_check_sync_names_an_untranslated_message(tmp_path, capsys):
    from flashcourse.__main__ import main

    tree = _tree(tmp_path, "Only in English")
    assert main(["check-sync", "--root", str(tree)]) == 1
    assert ("untranslated: src/flashcourse/locale/zh/core.po: 'Only in English' (used at "
            "src/flashcourse/shown.py:4) has no translation") in capsys.readouterr().out


# ---------------------------------------------------------------- a Chinese run of the checks


@cache  # the catalogs are read from every source file: once per run, not once per message
def _english_pieces() -> dict[str, str]:
    """The English words of every message with a translation: piece -> its message (pieces
    the translation keeps, such as code, do not count)."""
    translations = i18n.translations("zh")
    pieces = {}
    for found in catalogs.extract(Path(__file__).resolve().parents[1]).values():
        for message in found:
            shown = translations.gettext(message)
            for piece in re.split(r"\{[^{}]*\}|`[^`]*`", message):
                piece = piece.strip(" .,:;()")
                if len(piece) >= 12 and " " in piece and piece not in shown:
                    pieces[piece] = message
    return pieces


def assert_chinese(text: str) -> None:
    """`text` is a Chinese message: CJK, no English sentence of the catalogs, no run of English
    words outside `code`."""
    assert CJK.search(text), text
    leaked = [piece for piece in _english_pieces() if piece in text]
    assert not leaked, f"English left in {text!r}: {leaked[:3]}"
    prose = re.sub(r"`[^`]*`|\([^()]*=[^()]*\)", "", text)
    assert not ENGLISH_RUN.search(prose), f"English words in {text!r}"


def _wrong(exercise_id: str, answer) -> str:
    with pytest.raises(registry.WrongAnswer) as caught:
        registry.check(exercise_id, answer)
    return str(caught.value)


def test_a_wrong_softmax_in_chinese(monkeypatch):
    def no_max_subtracted(x):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)

    english = _wrong("softmax/stable-softmax", no_max_subtracted)
    monkeypatch.setenv(i18n.LANG_ENV, "zh")
    chinese = _wrong("softmax/stable-softmax", no_max_subtracted)
    assert chinese != english
    assert_chinese(chinese)


def test_the_untouched_blank_and_the_scorecard_in_chinese(monkeypatch, capsys):
    from flashcourse import ______, check

    monkeypatch.setenv(i18n.LANG_ENV, "zh")
    with pytest.raises(Exception) as caught:
        check("softmax/stable-softmax", ______)
    assert str(caught.value) == "请填空：softmax/stable-softmax 的答案仍是 ______。"
    with pytest.raises(Exception) as caught:
        ______ + 1
    assert_chinese(str(caught.value))
    with pytest.raises(registry.WrongAnswer):
        registry.scorecard("softmax")
    card = capsys.readouterr().out
    for line in card.splitlines():
        assert_chinese(line)
    assert "成绩单：" in card and "接下来要做：" in card


def test_a_question_and_a_veto_in_chinese(monkeypatch):
    monkeypatch.setenv(i18n.LANG_ENV, "zh")
    right = registry.get("softmax/q3-merge").answers
    text = _wrong("softmax/q3-merge", dict(right, merged_l=4.0))
    assert_chinese(text)
    assert "请重读第 6 节（“" in text
    statements = registry.get("softmax/misconceptions").answers
    flipped = {key: not truth for key, truth in statements.items()}
    assert_chinese(_wrong("softmax/misconceptions", flipped))


def test_hints_in_chinese_fall_back_to_english_with_a_note(monkeypatch, tmp_path):
    from flashcourse import hints

    hints.forget()
    exercise = next(iter(hints.table()))
    english = hints.table()[exercise]
    monkeypatch.setattr(hints, "HINTS_DIR", tmp_path)  # no Chinese levels there
    (tmp_path / "x.json").write_text(json.dumps({"exercises": {exercise: list(english)}}))
    hints.table.cache_clear()
    try:
        monkeypatch.setenv(i18n.LANG_ENV, "zh")
        shown = hints.reveal(exercise)
        assert shown.startswith(f"**提示 1/{len(english)}**（`{exercise}`）：（此提示尚未翻译")
        assert english[0] in shown
        (tmp_path / "zh").mkdir()
        (tmp_path / "zh" / "x.json").write_text(json.dumps(
            {"exercises": {exercise: [f"第 {n} 级" for n in range(1, len(english) + 1)]}}))
        hints.table.cache_clear()
        assert "第 2 级\n" in hints.reveal(exercise)
    finally:
        hints.table.cache_clear()
        hints.forget()


# ---------------------------------------------------------------- the grader, in both languages


def test_a_chinese_submission_grades_exactly_like_the_english_one(tmp_path, root):
    """The same filled answers (right ones, and a wrong part and a veto), handed in once in
    English and once in Chinese: the same status and points for every item; the Chinese one's
    own page and messages are Chinese, the class's pages English."""
    from flashcourse.__main__ import main
    from flashcourse.grader import samples

    results = {}
    for lang in ("en", "zh"):
        folder = tmp_path / lang
        edition = root / "exercises" / ("" if lang == "en" else lang)
        for student, mistakes in (("alice", ()), ("bob", ("no-rescale", "veto"))):
            nb = samples.filled_notebook(root, mistakes=mistakes, student=student,
                                         exercises=edition)
            nb["metadata"]["flashcourse"] = {"lang": lang}
            samples.write(nb, folder / "in" / student / "01-gpu-flash.ipynb")
        assert main(["grade", str(folder / "in"), "--out", str(folder / "out"),
                     "--no-sandbox", "--jobs", "2", "--secret", "same inputs",
                     "--root", str(root)]) == 1  # bob fails
        results[lang] = {s["label"]: s for s in json.loads(
            (folder / "out" / "results.json").read_text())["submissions"]}
    assert results["en"].keys() == results["zh"].keys()
    for label, english in results["en"].items():
        chinese = results["zh"][label]
        assert (chinese["status"], chinese["earned"]) == (english["status"], english["earned"])
        assert [(i["id"], i["status"], i["earned"], i["message"]) for i in chinese["exercises"]] \
            == [(i["id"], i["status"], i["earned"], i["message"]) for i in english["exercises"]]
        assert chinese["lang"] == "zh" and english["lang"] == "en"
    bob = results["zh"]["bob/01-gpu-flash.ipynb"]
    wrong = [i for i in bob["exercises"] if i["status"] != "pass"]
    assert wrong and all(CJK.search(i["message_shown"]) for i in wrong if i["message"])
    page = next((tmp_path / "zh" / "out" / "submissions").glob("bob*.html")).read_text()
    assert '<html lang="zh">' in page and "评分进度" in page and "运行后的笔记本" in page
    progress = (tmp_path / "zh" / "out" / "progress.html").read_text()
    assert "评分进度" not in progress and "Grading progress" in progress


# ---------------------------------------------------------------- the student's workspace


def _course(tmp_path: Path, root: Path) -> Path:
    course = tmp_path / "course"
    for lang_dir in ("exercises", "exercises/zh"):
        (course / lang_dir).mkdir(parents=True)
        for name in ("01-gpu-flash.ipynb", "05-softmax.ipynb"):
            shutil.copy(root / lang_dir / name, course / lang_dir / name)
    return course


def _lang_of(path: Path) -> str | None:
    return json.loads(path.read_text())["metadata"].get("flashcourse", {}).get("lang")


def test_lab_in_chinese_is_remembered_by_reset_update_and_submit(tmp_path, root, capsys):
    from flashcourse import workspace

    course = _course(tmp_path, root)
    assert workspace.main(["--root", str(course), "prepare", "--lang", "zh"]) == 0
    work = course / "work"
    assert _lang_of(work / "05-softmax.ipynb") == "zh"
    assert json.loads((work / workspace.STATE_FILE).read_text())["lang"] == "zh"
    capsys.readouterr()
    assert workspace.main(["--root", str(course), "lang"]) == 0
    assert capsys.readouterr().out == "zh\n"
    (work / "05-softmax.ipynb").unlink()
    workspace.update(course)  # the lesson comes back in Chinese
    assert _lang_of(work / "05-softmax.ipynb") == "zh"
    workspace.reset(course, "01")
    assert _lang_of(work / "01-gpu-flash.ipynb") == "zh"
    handed_in = workspace.submit(course, "05", student="alice")
    assert json.loads(handed_in.read_text())["metadata"]["flashcourse"] == {
        "student": "alice", "lesson": "05-softmax", "lang": "zh"}
    # back to English: the copies not started follow, a started one is kept and listed
    started = work / "01-gpu-flash.ipynb"
    nb = json.loads(started.read_text())
    nb["cells"][-1]["source"] = "my own work"
    started.write_text(json.dumps(nb))
    report = workspace.prepare(course, lang="en")
    assert _lang_of(work / "05-softmax.ipynb") in (None, "en")
    assert report.kept == ["01-gpu-flash.ipynb"]
    assert "my own work" in started.read_text()
    assert workspace.language(course) == "en"


def test_lab_with_an_unknown_language_says_the_choices(tmp_path, root, capsys):
    from flashcourse import workspace

    course = _course(tmp_path, root)
    assert workspace.main(["--root", str(course), "prepare", "--lang", "fr"]) == 2
    assert "--lang 'fr' is not a language of the course; choose one of en, zh" in \
        capsys.readouterr().err
    shutil.rmtree(course / "exercises" / "zh")
    assert workspace.main(["--root", str(course), "prepare", "--lang", "zh"]) == 2
    assert "zh edition is not built" in capsys.readouterr().err
    assert not (course / "work" / "05-softmax.ipynb").exists()
