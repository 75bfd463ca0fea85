"""The grader's reports on their own, without a sandbox: whatever text a submission brings
(control characters, lone surrogates, U+FFFE, formulas, newlines), results.csv, students.csv,
junit.xml, progress.html, scorecard.txt and results.json still parse; labels stay unique and
stable however submissions are named; every executed copy is kept or a note says why not."""

import csv
import json
import os
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from flashcourse.grader import collect, report
from flashcourse.grader.submission import ExerciseResult, Submission

# everything a cell id, a file name or a message could hold that breaks a report
NASTY = ("\x00\x07\x1b[32mPASS\n\rrow\x0b\x0c\x1f\x7f\x85\u2028\u2029\ud800\udfff\ufffe\uffff"
         "\ufdd0\t<img src=x>&amp;\"'")
FORMULA = '=HYPERLINK("evil")'
# what XML 1.0 forbids even as a character reference
XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _hostile_subs() -> list[Submission]:
    items = [
        ExerciseResult(f"gpu-flash/{NASTY}", f"title {NASTY}", "code", 4, 0, "wrong",
                       f"case 1: {NASTY}"),
        ExerciseResult(FORMULA, FORMULA, "veto", 0, 0, "veto", f"{FORMULA}\n=1+1"),
        ExerciseResult("gpu-flash/q1", "q1", "question", 2, 2, "pass"),
    ]
    hostile = Submission(
        label=f"{NASTY}/01-gpu-flash.ipynb", path="x", status="FAIL", lesson=f"01{NASTY}",
        lesson_title=NASTY, earned=2, exercises=items, vetoes=[f"veto {NASTY}"],
        tampering=[f"{FORMULA} {NASTY}"], problems=[f"-problem {NASTY}"],
        notes=[f"@note {NASTY}"], open_answers={f"open-{NASTY}": f"answer {NASTY}"})
    formula = Submission(label=f"{FORMULA}/01-gpu-flash.ipynb", path="y", status="PASS",
                         lesson="01-gpu-flash", earned=10, exercises=items[2:])
    at_top = Submission(label=f"+{NASTY}.ipynb", path="z", status="MALFORMED",
                        problems=["malformed notebook: not valid JSON"])
    return [hostile, formula, at_top]


def _check_csv(path: Path, rows_expected: int) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    rows = list(csv.reader(text.splitlines()))  # read naively: one line, one row
    assert rows == list(csv.reader(path.open(newline="", encoding="utf-8")))
    assert len(rows) == rows_expected, rows
    assert all(len(row) == len(rows[0]) for row in rows), rows
    for row in rows:
        for cell in row:
            assert not cell.startswith(report.FORMULA_START), cell
            assert cell.isprintable(), cell
    return rows


def test_every_report_parses_whatever_the_text(tmp_path):
    subs = _hostile_subs()
    report.write_all(subs, tmp_path, timeout=60, jobs=1)

    junit = (tmp_path / "junit.xml").read_text(encoding="utf-8")
    assert not XML_FORBIDDEN.search(junit)
    suites = ET.parse(tmp_path / "junit.xml").getroot().findall("testsuite")
    assert len(suites) == 3
    name = suites[0].get("name")
    assert name.startswith("\\x00\\x07\\x1b[32mPASS\n\\rrow")  # XML holds a newline
    assert r"\ud800\udfff\ufffe" in name
    failures = [f for f in suites[0].iter("failure")]
    assert any(r"case 1: \x00" in (f.text or "") for f in failures)
    assert suites[0].get("failures") == "4"  # integrity, the wrong answer, the veto, total

    results = _check_csv(tmp_path / "results.csv", 4)
    assert results[1][0].startswith(r"\x00\x07") and results[2][0].startswith("'=HYPERLINK")
    assert f"'{FORMULA}" in results[0]  # an exercise id in the header is quoted too
    assert results[3][0].startswith("'+")
    students = _check_csv(tmp_path / "students.csv", 4)
    assert [row[0] for row in students[1:]] == [
        report.csv_safe(NASTY), report.csv_safe(FORMULA), report.csv_safe(f"+{NASTY}.ipynb")]

    page = (tmp_path / "progress.html").read_text(encoding="utf-8")
    assert not XML_FORBIDDEN.search(page) and "\x85" not in page and "\r" not in page
    tags = _tags(page)
    rows = _tags(page.split('<div class="analytics"')[0]).count("tr")  # the class's tables follow
    assert "img" not in tags and rows == 4  # the header and one row each
    assert r"\x1b[32mPASS" in page and "&lt;img src=x&gt;&amp;amp;" in page

    scorecard = (tmp_path / "scorecard.txt").read_text(encoding="utf-8")
    assert not any(line.startswith("PASS") for line in scorecard.splitlines())
    assert len(scorecard.split("\n\n")) == 3
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    json.dumps(data, ensure_ascii=False).encode("utf-8")  # no lone surrogate read back
    assert [s["label"] for s in data["submissions"]] == [
        s.label.replace("\ud800\udfff", r"\ud800\udfff") for s in subs]
    assert data["submissions"][0]["open_answers"] == {
        report.json_safe(f"open-{NASTY}"): report.json_safe(f"answer {NASTY}")}


def _tags(page: str) -> list[str]:
    found = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append(tag)

    Tags().feed(page)
    return found


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x7f", "\ud800", "\udfff", "\ufffe",
                                  "\uffff", "\r", "\n", "\x85", "\u2028"])
def test_one_character_anywhere_keeps_junit_and_csv_whole(tmp_path, char):
    item = ExerciseResult(f"x/{char}", char, "code", 1, 0, "wrong", char)
    sub = Submission(label=f"a{char}/b{char}.ipynb", path="p", exercises=[item],
                     notes=[char], lesson=char)
    report.write_junit([sub], tmp_path / "junit.xml")
    case = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite/testcase[2]")
    assert case.get("name") == "x/" + report.markup_safe(char)
    report.write_csv([sub], tmp_path / "results.csv")
    report.write_students_csv([sub], tmp_path / "students.csv")
    _check_csv(tmp_path / "results.csv", 2)
    _check_csv(tmp_path / "students.csv", 2)
    report.write_html([sub], tmp_path / "progress.html")
    assert not XML_FORBIDDEN.search((tmp_path / "progress.html").read_text(encoding="utf-8"))


def test_markup_safe_escapes_only_what_markup_forbids():
    assert report.markup_safe("a\tb\nc é 漢 \U0001f600") == "a\tb\nc é 漢 \U0001f600"
    assert report.markup_safe("\x07\r\ud800\ufffe") == r"\x07\r\ud800\ufffe"


# ---------------------------------------------------------------- labels and students


def _notebooks(base: Path, *names: str) -> list[Path]:
    paths = []
    for name in names:
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        paths.append(path)
    return paths


def _labels(paths: list[Path]) -> list[str]:
    found, missing = collect.collect(paths)
    assert missing == []
    return [item.label for item in found]


def _subs(paths: list[Path]) -> list[Submission]:
    found, _ = collect.collect(paths)
    return [Submission(label=item.label, path=str(item.path), lesson="01-gpu-flash")
            for item in found]


def test_two_files_of_one_name_given_by_path_are_two_students(tmp_path):
    files = _notebooks(tmp_path / "subs", "alice/01-gpu-flash.ipynb", "bob/01-gpu-flash.ipynb")
    assert _labels(files) == ["alice/01-gpu-flash.ipynb", "bob/01-gpu-flash.ipynb"]
    assert _labels(files[::-1]) == _labels(files)  # the order given changes nothing
    report.write_students_csv(_subs(files), tmp_path / "students.csv")
    rows = list(csv.DictReader((tmp_path / "students.csv").open()))
    assert [r["student"] for r in rows] == ["alice", "bob"]
    assert _labels(files[:1]) == ["01-gpu-flash.ipynb"]  # one file: its own name


def test_a_notebook_at_the_top_is_nobodys(tmp_path):
    _notebooks(tmp_path / "subs", "alice.ipynb", "alice/01-gpu-flash.ipynb",
               "alice/02-coalescing.ipynb", "zed.ipynb")
    subs = _subs([tmp_path / "subs"])
    assert [s.label for s in subs] == ["alice.ipynb", "alice/01-gpu-flash.ipynb",
                                       "alice/02-coalescing.ipynb", "zed.ipynb"]
    assert [report.student_of(s) for s in subs] == [None, "alice", "alice", None]
    subs[2].lesson = "02-coalescing"
    report.write_all(subs, tmp_path / "out", timeout=60, jobs=1)
    rows = list(csv.DictReader((tmp_path / "out" / "students.csv").open()))
    assert [(r["student"], r["submissions"]) for r in rows] == [
        ("alice.ipynb", "1"), ("alice", "2"), ("zed.ipynb", "1")]
    page = (tmp_path / "out" / "progress.html").read_text()
    assert page.count('class="student"') == 3
    assert "from 1 students and 2 notebooks of no student" in page


def test_a_folder_named_like_a_notebook_is_not_merged_with_it():
    subs = [Submission(label=label, path="") for label in
            ["alice.ipynb", "alice.ipynb/01-gpu-flash.ipynb", "alice.ipynb"]]
    table, _ = report.by_student(subs)
    assert list(table) == [("file", "alice.ipynb"), ("student", "alice.ipynb")]


def test_same_path_under_two_folders_gets_two_numbered_labels(tmp_path):
    _notebooks(tmp_path, "2024/alice/01-gpu-flash.ipynb", "2025/alice/01-gpu-flash.ipynb")
    folders = [tmp_path / "2024", tmp_path / "2025"]
    found, _ = collect.collect(folders)
    assert [(f.label, f.path.parent.parent.name) for f in found] == [
        ("alice/01-gpu-flash.ipynb (duplicate label 1 of 2)", "2024"),
        ("alice/01-gpu-flash.ipynb (duplicate label 2 of 2)", "2025")]
    again, _ = collect.collect(folders[::-1])
    assert [(f.label, f.path) for f in again] == [(f.label, f.path) for f in found]
    assert {report.student_of(s) for s in _subs(folders)} == {"alice"}


def test_names_that_print_alike_get_distinct_labels(tmp_path):
    _notebooks(tmp_path / "subs", "a\n.ipynb", "a\\n.ipynb")
    # a link to a folder, refused, whose label reads like the first duplicate's
    os.symlink(tmp_path, tmp_path / "subs" / "a\\n.ipynb (duplicate label 1 of 2)")
    labels = _labels([tmp_path / "subs"])
    assert labels == ["a\\n.ipynb (duplicate label 1 of 2)",
                      "a\\n.ipynb (duplicate label 1 of 2) (2)",
                      "a\\n.ipynb (duplicate label 2 of 2)"], labels


def test_a_file_given_twice_or_inside_a_folder_given_is_graded_once(tmp_path):
    (file,) = _notebooks(tmp_path / "subs", "alice/01-gpu-flash.ipynb")
    assert _labels([file, file]) == ["01-gpu-flash.ipynb"]
    assert _labels([tmp_path / "subs", file]) == ["alice/01-gpu-flash.ipynb"]


def test_links_given_are_refused_with_a_label(tmp_path):
    (target,) = _notebooks(tmp_path / "elsewhere", "x.ipynb")
    os.symlink(target, tmp_path / "link.ipynb")
    found, _ = collect.collect([tmp_path / "link.ipynb"])
    assert [(f.label, "symbolic link" in f.refused) for f in found] == [("link.ipynb", True)]


def test_executed_copy_names_differ_for_every_label():
    labels = ["alice/01-gpu-flash.ipynb", "alice__01-gpu-flash.ipynb",
              "alice_/_01-gpu-flash.ipynb", "alice_5f01-gpu-flash.ipynb", "alice/01-gpu-flash",
              "alice/01-gpu-flash_.ipynb",
              "é.ipynb", "_e9.ipynb", "\ud800.ipynb", "\U0001f600.ipynb", ".ipynb", "",
              "x" * 300 + ".ipynb", "x" * 300 + "y.ipynb", "x" * 143 + ".ipynb",
              "x" * 144 + ".ipynb", f"{NASTY}/{FORMULA}.ipynb", "a b.ipynb", "a?b.ipynb",
              ".x.ipynb", "_2ex.ipynb", "-x.ipynb", "_2dx.ipynb", "_.ipynb", "_"]
    names = [report.executed_name(Submission(label=label, path="")) for label in labels]
    assert len(set(names)) == len(labels), names
    assert report.executed_name(Submission(label="alice/01-gpu-flash.ipynb", path="")) == \
        "alice__01-gpu-flash.ipynb"
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.ipynb", name), name
        assert len(name.encode()) < 200, name


# ---------------------------------------------------------------- executed copies


def _work(tmp_path: Path, name: str, content: bytes | None) -> Path:
    work = tmp_path / "work" / name
    (work / "out").mkdir(parents=True)
    if content is not None:
        (work / "out" / "executed.ipynb").write_bytes(content)
    return work


def test_every_executed_copy_is_kept_or_a_note_says_why(tmp_path):
    subs = [Submission(label=label, path=label, lesson="01-gpu-flash") for label in
            ["alice/01-gpu-flash.ipynb", "alice__01-gpu-flash.ipynb", "bob/01-gpu-flash.ipynb",
             "carol/01-gpu-flash.ipynb", "dave/01-gpu-flash.ipynb", "erin/01-gpu-flash.ipynb"]]
    executed = {0: _work(tmp_path, "s0", b'{"alice": 1}'), 1: _work(tmp_path, "s1", b"{}"),
                2: _work(tmp_path, "s2", b"x" * 3 * 2**20), 3: _work(tmp_path, "s3", None),
                4: _work(tmp_path, "s4", None), 5: _work(tmp_path, "s5", None)}
    os.symlink(executed[0] / "out" / "executed.ipynb", executed[4] / "out" / "executed.ipynb")
    (executed[5] / "out" / "executed.ipynb").mkdir()
    out = tmp_path / "out"
    (out / "executed").mkdir(parents=True)
    (out / "executed" / "stale.ipynb").write_text("{}")  # from an earlier run: removed
    report.copy_executed(subs, executed, out, limit=2**20)
    report.write_all(subs, out, timeout=60, jobs=1)

    kept = sorted(p.name for p in (out / "executed").iterdir())
    assert kept == sorted(report.executed_name(s) for s in subs[:2])
    assert (out / "executed" / report.executed_name(subs[0])).read_bytes() == b'{"alice": 1}'
    assert subs[0].notes == [] and subs[1].notes == []
    assert subs[2].notes == ["executed copy not kept: it is 3.0 MiB (limit 1 MiB)"]
    assert subs[3].notes == ["executed copy not kept: the run left no executed notebook"]
    assert subs[4].notes == ["executed copy not kept: it is a symbolic link"]
    assert subs[5].notes == ["executed copy not kept: it is not a regular file"]
    scorecard = (out / "scorecard.txt").read_text()
    assert "    note: executed copy not kept: it is 3.0 MiB (limit 1 MiB)" in scorecard
    page = (out / "progress.html").read_text()
    assert "executed copy not kept: the run left no executed notebook" in page
    data = json.loads((out / "results.json").read_text())
    assert data["submissions"][4]["notes"] == subs[4].notes


def test_a_copy_never_overwrites_another(tmp_path):
    subs = [Submission(label="a.ipynb", path=""), Submission(label="a.ipynb", path="")]
    executed = {0: _work(tmp_path, "s0", b"first"), 1: _work(tmp_path, "s1", b"second")}
    report.copy_executed(subs, executed, tmp_path / "out", limit=2**20)
    assert (tmp_path / "out" / "executed" / "a.ipynb").read_bytes() == b"first"
    assert subs[1].notes == ["executed copy not kept: another submission's copy has its name "
                             "(a.ipynb)"]


# ---------------------------------------------------------------- whose a submission is


def test_the_student_rule_per_mode():
    labels = ["alice/01-gpu-flash.ipynb", "subs/bob__01-gpu-flash.ipynb",
              "carol__02-coalescing.ipynb", "__01-gpu-flash.ipynb", "01-gpu-flash.ipynb"]
    expected = {"folder": ["alice", "subs", None, None, None],
                "file": [None, "bob", "carol", None, None],
                "metadata": ["dave", None, None, None, None]}
    for rule, students in expected.items():
        subs = [Submission(label=label, path="", student_from=rule) for label in labels]
        subs[0].metadata_student = "dave"
        assert [report.student_of(s) for s in subs] == students, rule
        assert [report.row_of(s) for s in subs] == [
            ("file", s.label) if who is None else ("student", who)
            for s, who in zip(subs, students, strict=True)]
    with pytest.raises(ValueError, match="folder, file, metadata"):
        report.student_of(Submission(label="a/b.ipynb", path="", student_from="name"))


def test_handed_in_files_group_by_the_name_before_the_double_underscore(tmp_path):
    subs = [Submission(label=label, path="", lesson=label.split("__")[1][:-6],
                       student_from="file")
            for label in ["alice__01-gpu-flash.ipynb", "alice__02-coalescing.ipynb",
                          "bob__01-gpu-flash.ipynb"]]
    report.write_students_csv(subs, tmp_path / "students.csv")
    rows = list(csv.DictReader((tmp_path / "students.csv").open()))
    assert [(r["student"], r["submissions"]) for r in rows] == [("alice", "2"), ("bob", "1")]


def _notebook_with_student(path: Path, student) -> Path:
    nb = {"cells": [], "metadata": {"flashcourse": {"student": student, "lesson": "01"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.parametrize(("student", "read"), [
    ("alice", "alice"), ("  alice\n", "alice"), ("a\x1b[2Jb", r"a\x1b[2Jb"),
    ("x" * 100, "x" * 61 + "..."), (42, ""), ({"name": "alice"}, ""), (None, "")])
def test_the_metadata_student_is_kept_as_short_escaped_text(tmp_path, student, read):
    path = _notebook_with_student(tmp_path / "x.ipynb", student)
    assert collect.metadata_student(collect.read_notebook(path)) == read
    sub, job = collect.prepare(collect.Found(path, "x.ipynb"), {})
    assert job is None and sub.metadata_student == read
    sub.student_from = "metadata"
    assert report.student_of(sub) == (read or None)


def test_grade_takes_a_student_rule():
    import argparse

    from flashcourse.grader import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert parser.parse_args(["subs"]).student_from == "folder"
    assert parser.parse_args(["subs", "--student-from", "file"]).student_from == "file"
    with pytest.raises(SystemExit):
        parser.parse_args(["subs", "--student-from", "name"])


def test_backups_of_a_reset_are_refused_never_graded(tmp_path):
    _notebooks(tmp_path / "subs", "alice/01-gpu-flash.ipynb",
               "alice/backups/01-gpu-flash.before-reset-2026-12-01-093005.ipynb",
               "alice/backups/01-gpu-flash.ipynb",
               "bob/01-gpu-flash.before-reset-2026-12-01-093005.ipynb")
    found, _ = collect.collect([tmp_path / "subs"])
    assert [(f.label, f.refused) for f in found] == [
        ("alice/01-gpu-flash.ipynb", ""),
        ("alice/backups/01-gpu-flash.before-reset-2026-12-01-093005.ipynb",
         collect.BACKUP_REFUSAL),
        ("alice/backups/01-gpu-flash.ipynb", collect.BACKUP_REFUSAL),
        ("bob/01-gpu-flash.before-reset-2026-12-01-093005.ipynb", collect.BACKUP_REFUSAL)]
    for item in found[1:]:
        sub, job = collect.prepare(item, {})
        assert job is None and sub.status == "REFUSED"
        assert sub.problems == ["refused: a backup copy, not a submission"]
    given, _ = collect.collect([found[3].path])  # given by name, too
    assert given[0].refused == collect.BACKUP_REFUSAL
    subs = [collect.prepare(item, {})[0] for item in found]
    subs[0].lesson = "01-gpu-flash"
    report.write_all(subs, tmp_path / "out", timeout=60, jobs=1)
    rows = list(csv.DictReader((tmp_path / "out" / "students.csv").open()))
    assert [(r["student"], r["submissions"]) for r in rows] == [("alice", "1")]
    scorecard = (tmp_path / "out" / "scorecard.txt").read_text()
    assert scorecard.count("PROBLEM: refused: a backup copy, not a submission") == 3


# ---------------------------------------------------------------- ids are claims


def _claimed(rule: str) -> list[Submission]:
    """alice's right notebook, a wrong one from mallory's folder that claims alice, and bob's
    wrong one, all of lesson 1, under `rule`."""
    def sub(label, status, student):
        return Submission(label=label, path=label, status=status, lesson="01-gpu-flash",
                          earned=10 if status == "PASS" else 4, student_from=rule,
                          metadata_student=student)

    return [sub("alice/alice__01-gpu-flash.ipynb", "PASS", "alice"),
            sub("mallory/alice__01-gpu-flash.ipynb", "FAIL", "alice"),
            sub("bob/bob__01-gpu-flash.ipynb", "FAIL", "bob")]


@pytest.mark.parametrize("rule", ["file", "metadata"])
def test_a_notebook_that_claims_a_classmate_cannot_take_a_lesson_away(tmp_path, rule):
    subs = _claimed(rule)
    report.write_all(subs, tmp_path, timeout=60, jobs=1)
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "students.csv").open())}
    assert set(rows) == {"alice", "bob"}
    assert rows["alice"]["lessons_passed"] == "1" and rows["alice"]["submissions"] == "2"
    assert rows["alice"]["01-gpu-flash"] == "PASS 10/10 + FAIL 4/10"
    assert "mallory/alice__01-gpu-flash.ipynb" in rows["alice"]["to_check"]
    assert "alice/alice__01-gpu-flash.ipynb" in rows["alice"]["to_check"]
    assert rows["bob"]["lessons_passed"] == "0" and rows["bob"]["to_check"] == ""  # his own
    scorecard = (tmp_path / "scorecard.txt").read_text()
    assert "TO CHECK" in scorecard and "2 submissions of 01-gpu-flash are alice's" in scorecard
    page = (tmp_path / "progress.html").read_text()
    assert 'class="to-check"' in page and "mallory/alice__01-gpu-flash.ipynb" in page
    assert '<td class="PASS">' in page


def test_one_submission_per_student_and_lesson_is_nothing_to_check(tmp_path):
    subs = [_claimed("file")[0], _claimed("file")[2]]
    report.write_all(subs, tmp_path, timeout=60, jobs=1)
    assert "TO CHECK" not in (tmp_path / "scorecard.txt").read_text()
    assert 'class="to-check"' not in (tmp_path / "progress.html").read_text()
    assert report.several_claims(subs) == {}


def test_the_runs_summary_counts_the_claims_to_check(tmp_path, monkeypatch, capsys):
    from flashcourse.grader import cli

    found = [collect.Found(path=tmp_path / sub.label, label=sub.label)
             for sub in _claimed("file")]
    monkeypatch.setattr(cli.collect, "collect", lambda paths: (found, []))
    monkeypatch.setattr(cli, "grade", lambda *args, **kwargs: _claimed("file"))
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "out"),
                     "--student-from", "file"]) == 1
    out = capsys.readouterr().out
    assert "1 time a student has several submissions of one lesson (the best counts)" in out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "a claim the student wrote" in " ".join(capsys.readouterr().out.split())
