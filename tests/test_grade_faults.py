"""Faults of the grading machine are not results of the student: a grader's cell that failed in
the notebook's kernel before any cell of the notebook ran (the kernel could not import the
course) makes the submission CRASHED with one line that says to grade it again, never FAIL with
a veto; the same failure after the notebook's cells began (which the notebook may have caused)
is one note per error; and a sandbox that left no account keeps the end of its error output."""

from pathlib import Path

import pytest

from flashcourse.checks import registry
from flashcourse.grader import channel, cli, collect, samples, score

IMPORT_ERROR = "ModuleNotFoundError: No module named 'flashcourse'"


@pytest.fixture
def prepared(root, tmp_path):
    """A right lesson 1 notebook, read and scanned: (its submission, its job)."""
    registry._load_checks()
    path = samples.write(samples.filled_notebook(root), tmp_path / "ada" / "01-gpu-flash.ipynb")
    found, _ = collect.collect([path])
    return collect.prepare(found[0], collect.load_exercises(root))


def _told(job, setup_before: bool) -> channel.Conversation:
    """What a runner tells when every grader's cell in the kernel fails with IMPORT_ERROR (the
    first before any cell when `setup_before`), and every cell raises it."""
    talk = channel.Conversation(notebook=job.notebook, keys={ex: "k" for ex in job.checks},
                                grading_cells={cell: ex for ex, (cell, _) in job.checks.items()})
    talk._handle({"type": "kernel", "ok": True})
    if setup_before:
        talk._handle({"type": "setup", "ok": False, "error": IMPORT_ERROR})
    for cell in job.notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        answer = talk._handle({"type": "cell", "id": cell["id"], "index": 0})
        if answer and answer.get("key"):
            talk._handle({"type": "setup", "ok": False, "error": IMPORT_ERROR})
        talk._handle({"type": "ran", "entry": {
            "id": cell["id"], "status": "error", "ename": "ModuleNotFoundError",
            "evalue": "No module named 'flashcourse'", "seconds": 0.1, "dropped": 0}})
    talk._handle({"type": "done"})
    return talk


def test_a_setup_that_failed_before_any_cell_is_a_crash_of_the_machine(prepared):
    sub, job = prepared
    score.score(sub, job, _told(job, setup_before=True), timeout=60, wall_killed=False)
    assert sub.status == "CRASHED" and sub.earned == 0, sub
    assert sub.vetoes == [], sub.vetoes  # nothing of the student's was judged
    assert len(sub.problems) == 1, sub.problems
    assert "failed before any cell ran" in sub.problems[0]
    assert IMPORT_ERROR in sub.problems[0] and "grade it again" in sub.problems[0]
    assert not any("setup" in note for note in sub.notes), sub.notes  # one line, not six


def test_a_setup_that_failed_after_the_notebooks_cells_began_is_no_machine_fault(prepared):
    """The wrong case: the notebook's own cells ran first and may have broken the kernel, so
    it is graded as it is (FAIL here), with one note per distinct error."""
    sub, job = prepared
    score.score(sub, job, _told(job, setup_before=False), timeout=60, wall_killed=False)
    assert sub.status == "FAIL", sub
    setup_notes = [note for note in sub.notes if "grader's setup" in note]
    assert setup_notes == [f"the grader's setup in the kernel failed: {IMPORT_ERROR}"]


def _grade_unsandboxed(root: Path, tmp_path: Path, monkeypatch):
    path = samples.write(samples.filled_notebook(root), tmp_path / "in" / "ada" /
                         "01-gpu-flash.ipynb")
    found, missing = collect.collect([path.parents[1]])
    monkeypatch.setenv("FLASHCOURSE_KEEP_GRADING_WORK", "")
    return cli.grade(found, missing, out=tmp_path / "out", jobs=1, timeout=60, root=root,
                     sandboxed=False)[0]


def test_a_kernel_that_cannot_import_the_course_makes_a_crash(root, tmp_path, monkeypatch):
    """For real: the notebook's kernel finds a `flashcourse` that does not import."""
    shadow = tmp_path / "shadow" / "flashcourse"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named "
                                        "'flashcourse'\")\n")
    sandbox_env = cli._sandbox_env

    def shadowed(*args, **kwargs):
        return dict(sandbox_env(*args, **kwargs), PYTHONPATH=str(shadow.parent))

    monkeypatch.setattr(cli, "_sandbox_env", shadowed)
    sub = _grade_unsandboxed(root, tmp_path, monkeypatch)
    assert sub.status == "CRASHED" and sub.vetoes == [], sub
    assert [p for p in sub.problems if "before any cell ran" in p], sub.problems
    assert "No module named" in sub.problems[0] and "grade it again" in sub.problems[0]


def test_a_missing_runner_keeps_the_end_of_the_sandboxs_error_output(root, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(cli, "__file__", str(tmp_path / "gone" / "cli.py"))  # no inside.py
    sub = _grade_unsandboxed(root, tmp_path, monkeypatch)
    assert sub.status == "CRASHED", sub
    assert any("left no account" in p for p in sub.problems), sub.problems
    exited = [note for note in sub.notes if note.startswith("the sandbox exited with status")]
    assert len(exited) == 1 and "inside.py" in exited[0], sub.notes
    assert "No such file" in exited[0], exited


# ---------------------------------------------------------------- a notebook that cannot be read


def test_an_unreadable_notebook_keeps_the_lesson_its_name_gives_and_no_dead_link(
        root, tmp_path, monkeypatch):
    import csv
    import re

    folder = tmp_path / "in"
    samples.write(samples.filled_notebook(root), folder / "alice" / "01-gpu-flash.ipynb")
    truncated = (folder / "alice" / "01-gpu-flash.ipynb").read_text()[:5000]
    (folder / "carol").mkdir()
    (folder / "carol" / "01-gpu-flash.ipynb").write_text(truncated)
    (folder / "dave").mkdir()
    (folder / "dave" / "notes.ipynb").write_text(truncated)  # its name gives no lesson
    found, missing = collect.collect([folder])
    out = tmp_path / "out"
    subs = {sub.label.split("/")[0]: sub for sub in cli.grade(
        found, missing, out=out, jobs=1, timeout=60, root=root, sandboxed=False)}
    carol, dave = subs["carol"], subs["dave"]
    assert carol.status == dave.status == "MALFORMED"
    assert carol.lesson == "01-gpu-flash" and dave.lesson == ""
    assert (carol.total, carol.written_total) == (subs["alice"].total,
                                                  subs["alice"].written_total)
    students = {row["student"]: row for row in csv.DictReader((out / "students.csv").open())}
    assert students["carol"]["01-gpu-flash"].startswith("MALFORMED 0/16")
    assert students["alice"]["01-gpu-flash"].startswith("PASS")
    assert students["dave"]["?"].startswith("MALFORMED")  # no lesson to put it under
    results = {row["submission"]: row for row in csv.DictReader((out / "results.csv").open())}
    row = results["carol/01-gpu-flash.ipynb"]
    assert row["lesson"] == "01-gpu-flash" and row["written_max"] == "6", row
    pages = [out / "progress.html", *(out / "submissions").glob("*.html")]
    for page in pages:
        for target in re.findall(r'href="([^"#]+)', page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)
    alice_page = (out / "submissions" / "alice__01-gpu-flash.html").read_text()
    assert 'href="../executed/alice__01-gpu-flash.ipynb"' in alice_page
    carol_page = (out / "submissions" / "carol__01-gpu-flash.html").read_text()
    assert "no executed notebook" in carol_page and "executed/" not in carol_page
