"""A student's path through a real browser: JupyterLab (headless, on a free local port) driven by
Debian's Chromium through Playwright, set up as `./course lab` sets it up: lessons copied into a
workspace (`work/`) and the lab opened there, with the course's JupyterLab defaults (no news
pop-up). Open lesson 1 in the workspace, Run All to the scorecard at the end (the grading cells
ask for the blanks without stopping the run), fill the four blanks through the editor, see the
check pass, save, then reset the lesson and find the filled copy kept in work/backups/ and a
fresh one in its place.
Screenshots go to test-artifacts/.

Skipped when Chromium or Playwright is missing; CI installs both (`apt-get install -y chromium`,
`pip install playwright`; Playwright's own browser download does not work offline)."""

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # as conftest's sync_api
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
SLUG = "01-gpu-flash"
CHECK = 'check("gpu-flash/flash-attention", flash_attention)'
TRY = "O_flash = flash_attention(Q, K, V, block_size=32)"
SCORECARD = 'fc.scorecard("gpu-flash")'
NEWS = "Would you like to get notified about official Jupyter news?"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _settings(folder: Path) -> None:
    """The test's own user settings: every cell in the page (no windowing). The news pop-up is
    turned off by the course's defaults (workspace.write_lab_overrides), as in `./course lab`."""
    files = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    }
    for name, value in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


@pytest.fixture
def lab(sync_api, tmp_path, root):
    """JupyterLab on the workspace of a copy of the course (never the repository's work/)."""
    with running_lab(tmp_path, root) as started:
        yield started


@contextlib.contextmanager
def running_lab(tmp_path, root, lang=None):
    """JupyterLab started as `./course lab [--lang LANG]` starts it, on a copy of the course:
    yields (its URL, the copy)."""
    from flashcourse import workspace

    course = tmp_path / "course"
    shutil.copytree(root / "exercises", course / "exercises")
    workspace.prepare(course, lang=lang)
    work = workspace.work_dir(course)
    app_settings = workspace.write_lab_overrides(tmp_path / "app").parents[1]
    _settings(tmp_path / "settings")
    port = _free_port()
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), MPLBACKEND="Agg",
               FLASHCOURSE_LANG=workspace.language(course))
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--allow-root",
         "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={work}",
         f"--LabApp.app_settings_dir={app_settings}", "--ServerApp.open_browser=False",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # a busy machine starts JupyterLab slowly
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n"
                                + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url, course
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _cell(page, text):
    return page.locator(".jp-Notebook .jp-CodeCell").filter(has_text=text).first


def _idle(page):
    """Wait until the kernel has finished what it was given (status bar: "... | Idle")."""
    page.locator("#jp-main-statusbar", has_text="(ipykernel) | Idle").wait_for()


def _output(cell, text):
    return cell.locator(".jp-OutputArea-output").filter(has_text=text)


def test_student_works_in_the_workspace_and_resets_a_lesson(sync_api, lab, root):
    from flashcourse.authoring import cells

    url, course = lab
    work = course / "work"
    shots = root / "test-artifacts"
    shots.mkdir(exist_ok=True)
    for old in shots.glob("browser-*.png"):  # keep only this run's screenshots
        old.unlink()
    solution = cells.solution_source(root / "lessons" / f"{SLUG}.qmd",
                                            "exercise-flash-attention")

    with sync_api.sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)  # generous: the machine may be busy
            page.goto(f"{url}/lab/tree/{SLUG}.ipynb")
            _cell(page, CHECK).wait_for()
            _idle(page)  # the kernel is up and connected
            # the lab shows the workspace: the lessons, not the repository's solutions/
            listing = page.locator(".jp-DirListing-content")
            listing.get_by_text(f"{SLUG}.ipynb", exact=True).first.wait_for()
            assert listing.get_by_text("solutions", exact=True).count() == 0
            page.screenshot(path=str(shots / "browser-1-opened.png"))

            # Run > Run All Cells. The cells that try or check unfinished code are tagged
            # raises-exception, so the run goes past their "fill in the blank" errors to the
            # scorecard in the last cell.
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.locator("li[data-command='runmenu:run-all']").click()
            scorecard = _cell(page, SCORECARD)
            _output(scorecard, "Total: 0/10").first.wait_for()
            _idle(page)
            tried, check = _cell(page, TRY), _cell(page, CHECK)
            _output(tried, "Fill in the blank").wait_for()
            _output(check, "Fill in the blank").wait_for()
            # messages first: the course's errors show their message, no traceback into the
            # package; the scorecard says first why the lesson is not passed, then what to do
            # next, and links the next lesson only once this one passes
            for cell in (check, scorecard):
                shown = cell.locator(".jp-OutputArea").inner_text()
                assert "Traceback" not in shown and "registry.py" not in shown, shown
            shown = scorecard.inner_text()
            assert "Not passed yet: " in shown and "What to do next" in shown, shown
            assert scorecard.locator("a", has_text="Open Lesson 2").count() == 0
            check.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "browser-2-run-all.png"))
            assert page.get_by_text(NEWS).count() == 0  # the news pop-up is off

            # first a wrong answer (the running max grows but l and O are not rescaled): the
            # check names the mistake, without a traceback and without the right code
            editor = _cell(page, "def flash_attention").locator(".cm-content")
            wrong, count = re.subn(r"^(\s*)scale = .*$", r"\1scale = np.ones_like(m_new)",
                                   solution, flags=re.M)
            assert count == 1
            for answer in (wrong, solution):
                editor.click()
                page.keyboard.press("Control+a")
                page.keyboard.insert_text(answer)
                assert "______" not in editor.inner_text()
                page.keyboard.press("Shift+Enter")
                _idle(page)
                check.locator(".cm-content").click()
                page.keyboard.press("Shift+Enter")
                if answer is wrong:
                    named = _output(check, "were not rescaled")
                    named.wait_for()
                    shown = check.locator(".jp-OutputArea").inner_text()
                    assert "Traceback" not in shown and "exp(m_old - m_new)" not in shown, shown
                    page.screenshot(path=str(shots / "browser-3-wrong.png"))
                    _idle(page)
            passed = _output(check, "\u2713 gpu-flash/flash-attention")
            passed.wait_for()
            check.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "browser-4-passed.png"))
            assert "cases match standard attention" in passed.inner_text()

            # save (File > Save), wait until the file on disk holds the answer
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 60
            while "______" in _saved_flash_attention_cell(work / f"{SLUG}.ipynb"):
                assert time.monotonic() < deadline, "the notebook was not saved"
                time.sleep(0.5)
        except Exception:
            page.screenshot(path=str(shots / "browser-failure.png"), full_page=True)
            raise
        finally:
            browser.close()

    # ./course reset 01 while the lab still has the notebook open: refused, nothing moved
    reset = [sys.executable, "-m", "flashcourse", "workspace", "--root", str(course), "reset",
             "01"]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(course.parent / "runtime"))
    refused = subprocess.run(reset, capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "open in JupyterLab" in refused.stderr, refused.stderr
    assert not (work / "backups").exists()
    with urllib.request.urlopen(f"{url}/api/sessions", timeout=30) as response:
        for session in json.loads(response.read()):  # File > Close and Shut Down Notebook
            urllib.request.urlopen(urllib.request.Request(
                f"{url}/api/sessions/{session['id']}", method="DELETE"), timeout=30)
    # then: a fresh copy, and the student's copy kept in work/backups/
    out = subprocess.run(reset, capture_output=True, text=True, env=env, check=True).stdout
    backups = sorted((work / "backups").glob(f"{SLUG}.before-reset-*.ipynb"))
    assert len(backups) == 1 and backups[0].name in out
    assert "______" not in _flash_attention_cell(backups[0])
    assert "______" in _flash_attention_cell(work / f"{SLUG}.ipynb")
    # the exercise in the repository is untouched
    assert "______" in _flash_attention_cell(root / "exercises" / f"{SLUG}.ipynb")


def _flash_attention_cell(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return next("".join(c["source"]) for c in cells if c.get("id") == "exercise-flash-attention")


def _saved_flash_attention_cell(path: Path) -> str:
    """_flash_attention_cell of a file JupyterLab may be writing right now: a file caught half
    written reads as not saved yet ("______"), and the caller looks again."""
    try:
        return _flash_attention_cell(path)
    except json.JSONDecodeError:
        return "______"


# ---------------------------------------------------------------- the instructor's page

HOSTILE = '<img src=x onerror="document.title=\'pwned\'">'


def _graded_class():
    """Submissions as the grader reports them: two students, two lessons, a hostile name."""
    from flashcourse.grader.submission import ExerciseResult, Submission

    def sub(label, lesson, status, earned, message="", opens=None):
        items = [ExerciseResult("gpu-flash/flash-attention", "numpy FlashAttention", "code", 4,
                                4 if status == "PASS" else 0,
                                "pass" if status == "PASS" else "wrong", message)]
        return Submission(label=label, path=label, status=status, lesson=lesson,
                          earned=earned, exercises=items, open_answers=opens or {})

    return [
        sub("alice/01-gpu-flash.ipynb", "01-gpu-flash", "PASS", 10,
            opens={"open-q1": "S is N by N, <b>four</b> passes", "open-q2": "**Your answer to "
                   "Q2**, in your own words (your instructor reads this cell):\nwrite it here."}),
        sub("alice/06-flash-forward.ipynb", "06-flash-forward", "FAIL", 4,
            "case 2/6: max abs error 0.5\nLikely mistake: the accumulator acc is not rescaled"),
        sub(f"{HOSTILE}/01-gpu-flash.ipynb", "01-gpu-flash", "FAIL", 0, f"raised {HOSTILE}"),
    ]


def test_instructor_page_one_row_per_student_with_click_through(sync_api, tmp_path):
    import csv

    from flashcourse.grader import report

    subs = _graded_class()
    out = tmp_path / "out"
    (out / "executed").mkdir(parents=True)  # the copies a grading run keeps, linked to
    for sub in subs:
        (out / "executed" / report.executed_name(sub)).write_text("{}")
    report.write_all(subs, out, timeout=60, jobs=1)
    rows = list(csv.DictReader((out / "students.csv").open()))
    assert [r["student"] for r in rows] == ["alice", HOSTILE]
    assert rows[0]["01-gpu-flash"] == "PASS 10/10" and rows[0]["06-flash-forward"] == \
        "FAIL 4/10" and rows[1]["06-flash-forward"] == ""
    with sync_api.sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto((out / "progress.html").as_uri())
            page.wait_for_selector("#progress tbody tr")
            assert page.locator("#progress tbody tr").count() == 2  # one row per student
            assert page.locator("#progress thead th").all_inner_texts() == [
                "student", "01-gpu-flash", "06-flash-forward"]
            assert page.locator("img").count() == 0 and page.title() == "Grading progress"
            hostile_row = page.locator("#progress tbody tr").nth(1)
            assert hostile_row.locator("th").inner_text() == HOSTILE  # shown as text
            alice = page.locator("#progress tbody tr").nth(0)
            reason = alice.locator("pre.reason")
            assert not reason.is_visible()
            alice.locator("td").nth(1).locator("summary").click()
            reason.wait_for(state="visible")
            assert "accumulator acc is not rescaled" in reason.inner_text()
            alice.locator("td").nth(0).locator("summary").click()
            answer = alice.locator("pre.open-answer")
            answer.wait_for(state="visible")
            assert answer.inner_text() == "S is N by N, <b>four</b> passes"
            assert "not answered" in alice.locator("td").nth(0).inner_text()  # open-q2
            link = alice.locator("td").nth(0).locator("a.executed")
            target = (out / "progress.html").parent / link.get_attribute("href")
            assert target.is_file() and target.name == report.executed_name(subs[0])
            page.screenshot(path=str(_artifacts() / "progress.png"), full_page=True)
        finally:
            browser.close()


def _artifacts() -> Path:
    folder = Path(__file__).resolve().parents[1] / "test-artifacts"
    folder.mkdir(exist_ok=True)
    return folder
