"""A student's path through a real browser: JupyterLab (headless, on a free local port) driven by
Debian's Chromium through Playwright. Open a copy of lesson 1's exercise notebook, run all
cells, see the grading cell ask for the blanks, fill the four blanks through the editor, and see
the check pass. Screenshots go to test-artifacts/.

Skipped when Chromium or Playwright is missing; CI installs both (`apt-get install -y chromium`,
`pip install playwright`; Playwright's own browser download does not work offline)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
SLUG = "01-gpu-flash"
CHECK = 'check("gpu-flash/flash-attention", flash_attention)'
TRY = "O_flash = flash_attention(Q, K, V, block_size=32)"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _settings(folder: Path) -> None:
    """No news pop-up, no update check, every cell in the page (no windowing)."""
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    }
    for name, value in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


@pytest.fixture
def sync_api():
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    return pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)")


@pytest.fixture
def lab(sync_api, tmp_path, root):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(root / "exercises" / f"{SLUG}.ipynb", work / f"{SLUG}.ipynb")
    _settings(tmp_path / "settings")
    port = _free_port()
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), MPLBACKEND="Agg")
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--allow-root",
         "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={work}",
         "--LabApp.news_url=", "--ServerApp.open_browser=False"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n"
                                + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url, work
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


def test_student_fills_the_blanks_in_jupyterlab(sync_api, lab, root):
    from flashcourse import lesson_cells

    url, work = lab
    shots = root / "test-artifacts"
    shots.mkdir(exist_ok=True)
    for old in shots.glob("browser-*.png"):  # keep only this run's screenshots
        old.unlink()
    solution = lesson_cells.solution_source(root / "lessons" / f"{SLUG}.qmd",
                                            "exercise-flash-attention")

    with sync_api.sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"{url}/lab/tree/{SLUG}.ipynb")
            _cell(page, CHECK).wait_for()
            _idle(page)  # the kernel is up and connected
            page.wait_for_timeout(2000)
            page.screenshot(path=str(shots / "browser-1-opened.png"))

            # Run > Run All Cells. JupyterLab sends each cell with stop_on_error (unless it is
            # tagged raises-exception), so the run stops at the first cell that calls the
            # unfilled flash_attention ("try-flash-attention", above the check) and the kernel
            # aborts the cells after it. Wait for that error, then run the grading cell the way
            # a student would: click into it and press Shift+Enter.
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.locator("li[data-command='runmenu:run-all']").click()
            tried = _cell(page, TRY)
            tried.locator(".jp-OutputArea-output").filter(has_text="Fill in the blank").wait_for()
            tried.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "browser-2-run-all.png"))
            _idle(page)
            check = _cell(page, CHECK)
            check.locator(".cm-content").click()
            page.keyboard.press("Shift+Enter")
            check.locator(".jp-OutputArea-output").filter(has_text="Fill in the blank").wait_for()
            check.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "browser-3-blanks.png"))
            _idle(page)

            # fill the four blanks through the editor, run the cell, then the check
            editor = _cell(page, "def flash_attention").locator(".cm-content")
            editor.click()
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(solution)
            assert "______" not in editor.inner_text()
            page.keyboard.press("Shift+Enter")
            check.locator(".cm-content").click()
            page.keyboard.press("Shift+Enter")
            passed = check.locator(".jp-OutputArea-output").filter(
                has_text="\u2713 gpu-flash/flash-attention")
            passed.wait_for()
            check.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "browser-4-passed.png"))
            assert "cases match standard attention" in passed.inner_text()
        except Exception:
            page.screenshot(path=str(shots / "browser-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    # the notebook the student edited is the copy; the exercise in the repository is untouched
    assert "______" in (root / "exercises" / f"{SLUG}.ipynb").read_text()
