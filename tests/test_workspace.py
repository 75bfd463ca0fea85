"""The student's workspace (work/): lessons are copied once, never overwritten; update brings new
lessons and leaves started ones; reset keeps the old copy in work/backups/; submit writes the one
file to hand in. Every test works in a temporary course, never in the repository's work/."""

import json
import os
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from flashcourse import workspace


def _lesson(text: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {text}"),
                nbformat.v4.new_code_cell("answer = ______")]
    for number, cell in enumerate(nb.cells):
        cell.id = f"cell-{number}"
    return nbformat.writes(nb)


@pytest.fixture
def course(tmp_path) -> Path:
    (tmp_path / "exercises").mkdir()
    for slug in ("01-first", "02-second"):
        (tmp_path / "exercises" / f"{slug}.ipynb").write_text(_lesson(slug))
    return tmp_path


def _edit(path: Path, source: str) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = source
    nbformat.write(nb, path)


def test_prepare_copies_every_lesson_once_and_never_overwrites(course):
    report = workspace.prepare(course)
    work = course / "work"
    assert report.copied == ["01-first.ipynb", "02-second.ipynb"]
    original = (course / "exercises" / "01-first.ipynb").read_text()
    assert (work / "01-first.ipynb").read_text() == original
    _edit(work / "01-first.ipynb", "answer = 42")
    (course / "exercises" / "01-first.ipynb").write_text(_lesson("01-first, new version"))
    assert workspace.prepare(course).copied == []
    assert "answer = 42" in (work / "01-first.ipynb").read_text()


def test_prepare_copies_a_lesson_the_student_deleted(course):
    workspace.prepare(course)
    (course / "work" / "02-second.ipynb").unlink()
    assert workspace.prepare(course).copied == ["02-second.ipynb"]


def test_update_brings_new_lessons_and_leaves_started_ones(course):
    workspace.prepare(course)
    work = course / "work"
    _edit(work / "01-first.ipynb", "answer = 42")
    for slug in ("01-first", "02-second"):
        (course / "exercises" / f"{slug}.ipynb").write_text(_lesson(f"{slug}, new version"))
    (course / "exercises" / "03-third.ipynb").write_text(_lesson("03-third"))

    report = workspace.update(course)
    assert report.copied == ["03-third.ipynb"]
    assert report.kept == ["01-first.ipynb"]  # started: the student's work stays
    assert report.refreshed == ["02-second.ipynb"]  # never touched: takes the new version
    assert "answer = 42" in (work / "01-first.ipynb").read_text()
    assert "new version" in (work / "02-second.ipynb").read_text()
    assert any("./course reset 01" in line for line in report.lines())
    assert workspace.update(course).lines() == ["kept your copy of work/01-first.ipynb; the "
                                                "course has a newer version: ./course reset 01 "
                                                "takes it (your copy is kept in work/backups/)"]


def test_opening_a_lesson_is_not_starting_it_but_running_it_is(course):
    workspace.prepare(course)
    path = course / "work" / "02-second.ipynb"
    nb = json.loads(path.read_text())
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)"}
    path.write_text(json.dumps(nb))  # what JupyterLab writes when it opens a notebook
    state = workspace._load_state(course / "work")
    assert not workspace.started(path, state["02-second.ipynb"])
    nb["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
    path.write_text(json.dumps(nb))
    assert workspace.started(path, state["02-second.ipynb"])


def test_update_without_a_record_treats_copies_as_started(course):
    workspace.prepare(course)
    (course / "work" / workspace.STATE_FILE).unlink()
    (course / "exercises" / "01-first.ipynb").write_text(_lesson("01-first, new version"))
    report = workspace.update(course)
    assert report.kept == ["01-first.ipynb"] and report.refreshed == []


def test_reset_keeps_the_old_copy_in_a_backups_folder(course):
    workspace.prepare(course)
    work = course / "work"
    _edit(work / "01-first.ipynb", "answer = 42")
    now = datetime(2026, 12, 1, 9, 30, 5)
    report = workspace.reset(course, "1", now=now)
    backup = work / "backups" / "01-first.before-reset-2026-12-01-093005.ipynb"
    assert report.backup == f"backups/{backup.name}" and report.restarted == "01-first.ipynb"
    assert f"your old copy is kept as work/backups/{backup.name}" in report.lines()
    assert "answer = 42" in backup.read_text()
    assert "answer = ______" in (work / "01-first.ipynb").read_text()
    assert sorted(p.name for p in work.glob("*.ipynb")) == ["01-first.ipynb", "02-second.ipynb"]
    # a second reset in the same second does not overwrite the first backup
    workspace.reset(course, "01-first", now=now)
    assert (work / "backups" / "01-first.before-reset-2026-12-01-093005-2.ipynb").exists()
    assert "answer = 42" in backup.read_text()
    # backups are not lessons: prepare and update leave them alone
    assert workspace.update(course).lines() == []


def test_reset_of_a_lesson_not_yet_copied_just_copies_it(course):
    report = workspace.reset(course, "02")
    assert report.backup is None
    assert (course / "work" / "02-second.ipynb").exists()


@pytest.mark.parametrize("name", ["7", "09-nothing", "first"])
def test_reset_names_the_lessons_when_the_name_is_unknown(course, name):
    with pytest.raises(workspace.WorkspaceError, match="01-first, 02-second"):
        workspace.reset(course, name)


def test_command_line(course, capsys):
    from flashcourse.__main__ import main

    assert main(["workspace", "--root", str(course), "update"]) == 0
    assert "new lesson: work/01-first.ipynb" in capsys.readouterr().out
    assert main(["workspace", "--root", str(course), "update"]) == 0
    assert capsys.readouterr().out == "work/ is up to date\n"
    assert main(["workspace", "--root", str(course), "reset", "01"]) == 0
    out = capsys.readouterr().out
    assert "fresh copy: work/01-first.ipynb" in out
    assert "kept as work/backups/01-first.before-reset-" in out
    assert main(["workspace", "--root", str(course), "reset", "5"]) == 2
    assert "no lesson '5'" in capsys.readouterr().err


def _outputs(path: Path) -> list:
    return [c.get("outputs") for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "code"]


def _run_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb.cells[1].execution_count = 1
    nbformat.write(nb, path)


def test_submit_writes_the_one_file_to_hand_in_without_outputs(course):
    workspace.prepare(course)
    copy = course / "work" / "01-first.ipynb"
    _edit(copy, "answer = 42")
    _run_cell(copy)
    before = copy.read_text()
    path = workspace.submit(course, "1", student="alice.smith")
    assert path == course / "submit" / "alice.smith__01-first.ipynb"
    nb = json.loads(path.read_text())
    assert nb["metadata"]["flashcourse"] == {"student": "alice.smith", "lesson": "01-first"}
    assert "".join(nb["cells"][1]["source"]) == "answer = 42"
    assert _outputs(path) == [[]] and nb["cells"][1]["execution_count"] is None
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
    assert copy.read_text() == before  # the student's copy is only read
    kept = workspace.submit(course, "01-first", student="alice.smith", keep_outputs=True)
    assert kept == path and "".join(_outputs(path)[0][0]["text"]) == "42\n"
    assert sorted(p.name for p in (course / "submit").iterdir()) == [path.name]
    assert workspace.submit(course, "01", student="a" * 64).name == f"{'a' * 64}__01-first.ipynb"


def test_submit_takes_the_student_from_the_environment(course, monkeypatch):
    workspace.prepare(course)
    monkeypatch.setenv(workspace.STUDENT_ENV, "bob-2")
    assert workspace.submit(course, "02").name == "bob-2__02-second.ipynb"
    monkeypatch.delenv(workspace.STUDENT_ENV)
    with pytest.raises(workspace.WorkspaceError, match="--student ID"):
        workspace.submit(course, "02")


@pytest.mark.parametrize("student", ["", "alice smith", "../alice", "a/b", ".alice", "-x",
                                     "a__b", "é", "a" * 65])
def test_submit_refuses_a_bad_student_id(course, student):
    workspace.prepare(course)
    with pytest.raises(workspace.WorkspaceError, match="student id"):
        workspace.submit(course, "01", student=student or None)
    assert not (course / "submit").exists()


def test_submit_refuses_an_unknown_or_unstarted_lesson(course):
    with pytest.raises(workspace.WorkspaceError, match="01-first, 02-second"):
        workspace.submit(course, "7", student="alice")
    with pytest.raises(workspace.WorkspaceError, match="not started.*./course lab"):
        workspace.submit(course, "01", student="alice")
    assert not (course / "submit").exists()


def test_submit_command_line(course, capsys, monkeypatch):
    from flashcourse.__main__ import main

    monkeypatch.delenv(workspace.STUDENT_ENV, raising=False)
    workspace.prepare(course)
    assert main(["workspace", "--root", str(course), "submit", "01", "--student", "alice"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("hand in this one file: submit/alice__01-first.ipynb")
    assert main(["workspace", "--root", str(course), "submit", "01"]) == 2
    assert "--student ID" in capsys.readouterr().err


def test_lab_overrides_turn_off_the_news_pop_up(tmp_path):
    path = workspace.write_lab_overrides(tmp_path)
    settings = json.loads(path.read_text())
    assert path == tmp_path / "settings" / "overrides.d" / "flashcourse.json"
    assert settings["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


def test_the_workspace_is_ignored_by_git_and_by_the_tests(root):
    ignored = (root / ".gitignore").read_text().splitlines()
    assert {"/work/", "/submit/", "/submissions/"} <= set(ignored)
    testpaths = [line for line in (root / "pyproject.toml").read_text().splitlines()
                 if line.startswith("testpaths")]
    assert testpaths and testpaths[0].startswith('testpaths = ["tests", "solutions/*.ipynb"]')


def test_reset_refuses_while_the_lesson_is_open_in_a_running_lab(course, tmp_path, monkeypatch):
    """Saving a tab still open on the old copy would put it back: reset waits until it is
    closed. A running server is found as `./course lab` leaves it (its runtime file), and asked
    which notebooks it has open."""
    import http.server
    import threading

    workspace.prepare(course)
    open_paths = ["01-first.ipynb"]

    class Sessions(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (the http.server name)
            body = json.dumps([{"path": p} for p in open_paths]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sessions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "jpserver-1.json").write_text(json.dumps({
        "pid": os.getpid(), "url": f"http://127.0.0.1:{server.server_address[1]}/",
        "token": "t", "root_dir": str(course / "work")}))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    try:
        with pytest.raises(workspace.WorkspaceError, match="open in JupyterLab"):
            workspace.reset(course, "01")
        assert not (course / "work" / "backups").exists()  # nothing moved
        open_paths.clear()  # the tab was closed
        assert workspace.reset(course, "01").restarted == "01-first.ipynb"
    finally:
        server.shutdown()
        server.server_close()


def _notebook(cells: dict[str, str]) -> str:
    nb = nbformat.v4.new_notebook()
    for cell_id, source in cells.items():
        cell = nbformat.v4.new_code_cell(source)
        cell.id = cell_id
        nb.cells.append(cell)
    return nbformat.writes(nb)


@pytest.fixture
def renumbered(tmp_path) -> Path:
    """A course whose lesson 6 was split and lesson 7 renumbered 8, with a work/ of the old."""
    exercises = tmp_path / "exercises"
    exercises.mkdir()
    (exercises / "06-flash-forward.ipynb").write_text(_notebook(
        {"exercise-forward": "kernel = ______", "answer-q2": "speed = ______",
         "try-forward": "new try cell"}))
    (exercises / "07-flash-backward.ipynb").write_text(_notebook(
        {"exercise-dq": "dq = ______", "answer-q1": "saved = ______"}))
    (exercises / "08-performance.ipynb").write_text(_notebook({"exercise-ladder": "x = ______"}))
    work = tmp_path / "work"
    work.mkdir()
    (work / "06-flash-attention.ipynb").write_text(_notebook(
        {"exercise-forward": "kernel = 'mine'", "answer-q3": "speed = 'mine'",
         "answer-q2": "saved = 'mine'", "exercise-dq": "dq = 'mine'",
         "try-forward": "old try cell"}))
    (work / "07-performance.ipynb").write_text(_notebook({"exercise-ladder": "x = 'mine'"}))
    return tmp_path


def _sources(path: Path) -> dict[str, str]:
    return {c.id: c.source for c in nbformat.read(path, as_version=4).cells}


def test_a_split_lesson_carries_the_students_answers_and_keeps_the_old_copy(renumbered):
    report = workspace.prepare(renumbered, now=datetime(2026, 12, 2, 9, 0, 0))
    work = renumbered / "work"
    forward = _sources(work / "06-flash-forward.ipynb")
    assert forward == {"exercise-forward": "kernel = 'mine'", "answer-q2": "speed = 'mine'",
                       "try-forward": "new try cell"}  # only answer cells come across
    assert _sources(work / "07-flash-backward.ipynb") == {"exercise-dq": "dq = 'mine'",
                                                          "answer-q1": "saved = 'mine'"}
    assert not (work / "06-flash-attention.ipynb").exists()
    backups = list((work / "backups").glob("06-flash-attention.before-split-*.ipynb"))
    assert len(backups) == 1 and "kernel = 'mine'" in backups[0].read_text()
    # the renumbered lesson keeps the student's file under its new name
    assert _sources(work / "08-performance.ipynb") == {"exercise-ladder": "x = 'mine'"}
    assert not (work / "07-performance.ipynb").exists()
    text = "\n".join(report.lines())
    assert "split 06-flash-attention into 06-flash-forward and 07-flash-backward" in text
    assert "work/07-performance.ipynb is now work/08-performance.ipynb" in text
    # the carried-over copies count as started: update leaves them alone
    (renumbered / "exercises" / "06-flash-forward.ipynb").write_text(_notebook(
        {"exercise-forward": "kernel = ______ # v2"}))
    again = workspace.update(renumbered)
    assert "06-flash-forward.ipynb" in again.kept
    assert "kernel = 'mine'" in (work / "06-flash-forward.ipynb").read_text()


def test_an_untouched_copy_of_a_moved_lesson_is_replaced_by_the_new_lessons(renumbered):
    work = renumbered / "work"
    (work / "07-performance.ipynb").unlink()
    (work / "06-flash-attention.ipynb").unlink()
    old = _notebook({"exercise-ladder": "x = ______"})
    (work / "07-performance.ipynb").write_text(old)
    copied = {"07-performance.ipynb": workspace.fingerprint(work / "07-performance.ipynb")}
    (work / workspace.STATE_FILE).write_text(json.dumps({"copied": copied}))
    report = workspace.prepare(renumbered)
    assert not (work / "07-performance.ipynb").exists() and report.moved == []
    assert sorted(report.copied) == ["06-flash-forward.ipynb", "07-flash-backward.ipynb",
                                     "08-performance.ipynb"]
    assert not (work / "backups").exists()


def test_course_help_changes_nothing(tmp_path):
    """`./course --help` and `./course lab --help` say what each command does, exit 0, and
    neither install nor copy a lesson (the script works in its own folder: a copy of it here)."""
    script = tmp_path / "course"
    shutil.copy2(Path(__file__).resolve().parents[1] / "course", script)
    for args in (["--help"], ["lab", "--help"], ["help"]):
        done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0 and "./course submit NN" in done.stdout, (args, done)
    unknown = subprocess.run(["bash", str(script), "lesson"], capture_output=True, text=True,
                             timeout=60)
    assert unknown.returncode == 2 and "./course --help" in unknown.stderr, unknown
    assert sorted(p.name for p in tmp_path.iterdir()) == ["course"]  # no .venv, no work/


# ---------------------------------------------------------------- each student's own numbers

Q1 = "gpu-flash/q1-memory"  # lesson 1's question with numbers of each student's own


@pytest.fixture
def lesson_one(tmp_path, root) -> Path:
    """A course with the real lesson 1, its copy in work/ answered and saved."""
    (tmp_path / "exercises").mkdir()
    shutil.copy(root / "exercises" / "01-gpu-flash.ipynb", tmp_path / "exercises")
    workspace.prepare(tmp_path)
    return tmp_path


def _numbers_printed(course: Path, text: str | None) -> None:
    """Save work/01-gpu-flash.ipynb as if its numbers cell had printed `text` (None: not run)."""
    path = course / "work" / "01-gpu-flash.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == "numbers-q1")
    cell.outputs = [] if text is None else [
        nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
    cell.execution_count = None if text is None else 3
    nbformat.write(nb, path)


def _line(student: str | None) -> str:
    from flashcourse.checks import numbers, registry

    item = registry.get(Q1)
    return numbers.numbers_line(item.id, item.title, item.numbers, student)


def _values(student: str | None) -> str:
    from flashcourse.checks import numbers, registry

    item = registry.get(Q1)
    return numbers.values_text(item.id, item.numbers, student)


def test_submit_refuses_answers_worked_out_with_the_lessons_own_numbers(lesson_one):
    assert _values("dana") != _values(None)
    _numbers_printed(lesson_one, _line(None))
    with pytest.raises(workspace.WorkspaceError) as refused:
        workspace.submit(lesson_one, "01", student="dana")
    message = str(refused.value)
    assert "Q1 was worked out with the lesson's own numbers, as no student id was set" in message
    assert f"numbers of student dana: {_values('dana')}" in message
    assert _values(None) in message  # what the cell printed
    assert "FLASHCOURSE_STUDENT=dana ./course lab" in message
    assert 'fc.setup(student="dana")' in message and "Run All" in message
    assert not (lesson_one / "submit").exists()


def test_submit_refuses_answers_worked_out_with_another_ids_numbers(lesson_one, capsys):
    from flashcourse.__main__ import main

    other = next(f"s{n}" for n in range(100) if _values(f"s{n}") not in (_values("dana"),
                                                                        _values(None)))
    _numbers_printed(lesson_one, _line(other))
    with pytest.raises(workspace.WorkspaceError, match="with other numbers than yours"):
        workspace.submit(lesson_one, "01", student="dana")
    assert main(["workspace", "--root", str(lesson_one), "submit", "01", "--student",
                 "dana"]) == 2
    assert f"student {other}" in capsys.readouterr().err  # the line it printed, quoted
    assert not (lesson_one / "submit").exists()


def test_submit_takes_answers_worked_out_with_the_students_numbers(lesson_one):
    notes = []
    _numbers_printed(lesson_one, _line("dana"))
    path = workspace.submit(lesson_one, "01", student="dana", on_note=notes.append)
    assert path.name == "dana__01-gpu-flash.ipynb" and notes == []
    # an id whose numbers are the lesson's own: the lesson's line is right for it
    same = next(f"s{n}" for n in range(200) if _values(f"s{n}") == _values(None))
    _numbers_printed(lesson_one, _line(None))
    assert workspace.submit(lesson_one, "01", student=same, on_note=notes.append).is_file()
    assert notes == []


def test_submit_of_an_unrun_numbers_cell_names_the_students_numbers(lesson_one, capsys):
    _numbers_printed(lesson_one, None)
    notes = []
    assert workspace.submit(lesson_one, "01", student="dana", on_note=notes.append).is_file()
    assert len(notes) == 1 and "no saved output" in notes[0]
    assert f"numbers of student dana: {_values('dana')}" in notes[0]
    workspace.submit(lesson_one, "01", student="dana")  # by default: on standard error
    assert "no saved output" in capsys.readouterr().err


def test_the_workspace_commands_work_without_workspace_and_lab_says_what_to_run(
        course, capsys, monkeypatch):
    from flashcourse.__main__ import main

    monkeypatch.chdir(course)
    assert main(["prepare"]) == 0 and (course / "work" / "01-first.ipynb").is_file()
    assert main(["submit", "01", "--student", "alice"]) == 0
    assert (course / "submit" / "alice__01-first.ipynb").is_file()
    assert main(["reset", "02"]) == 0 and main(["update"]) == 0
    capsys.readouterr()
    assert main(["lab"]) == 2
    assert "./course lab" in capsys.readouterr().err
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert "python -m flashcourse submit 06 --student ID" in readme
