"""The book: every file its profiles name exists, every lesson is listed, book pages leave out
what only a notebook needs, and where Quarto is installed the book renders for real: both
editions without execution (the English, then the Chinese into _book/zh/), then lesson 1
executed, with no render error, no missing page, no broken local link or anchor (the language
switches included), headings numbered once and math as MathML."""

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from flashcourse.authoring import build, editions

QUARTO = shutil.which("quarto")
NO_QUARTO = ("quarto is not on PATH, so the book is not rendered here: install it (README, "
             "'Rendering the book'); CI installs it with ../shared/tools/quarto/install.sh")
# What a render needs: the project file, the pages, their stylesheet and the lesson sources
# (the pre-render step rebuilds book/ from lessons/). Rendered in a copy, never in the checkout.
BOOK_INPUTS = ("_quarto.yml", "_quarto-en.yml", "_quarto-zh.yml", "_environment-zh", "index.qmd",
               "index.zh.qmd", "assets", "book", "lessons")
EXECUTED_LESSON = "01-gpu-flash"  # short, numpy only, draws figures
HANG_GUARD_S = 1800  # only against a hung render; a slow machine must not fail the test


def _chapters(root, lang="en"):
    """The pages the book in `lang` names: its profile's (_quarto-LANG.yml)."""
    text = (root / "_quarto.yml").read_text()
    assert re.search(r"^\s*type:\s*book\s*$", text, re.M), "_quarto.yml must be a book project"
    assert not re.findall(r"^\s*-\s+(\S+\.qmd)\s*$", text, re.M), (
        "_quarto.yml lists pages: Quarto would add them to every profile's own")
    profile = (root / f"_quarto-{lang}.yml").read_text(encoding="utf-8")
    return re.findall(r"^\s*-\s+(\S+\.(?:qmd|ipynb|md))\s*$", profile, re.M)


@pytest.mark.parametrize("lang", editions.LANGUAGES)
def test_every_named_file_exists(root, lang):
    chapters = _chapters(root, lang)
    assert chapters, f"no chapters found in _quarto-{lang}.yml"
    missing = [c for c in chapters if "*" not in c and not (root / c).exists()]
    assert not missing, f"_quarto-{lang}.yml names files that do not exist: {missing}"
    css = re.findall(r"css:\s*(\S+)", (root / "_quarto.yml").read_text())
    assert all((root / c).exists() for c in css)


@pytest.mark.parametrize("lang", editions.LANGUAGES)
def test_every_lesson_is_a_chapter(root, lang):
    chapters = _chapters(root, lang)
    folder = editions.folder("book", lang).as_posix()
    lessons = {f"{folder}/{p.stem}.qmd" for p in build.lesson_paths(root)}
    assert lessons, "no lessons found"
    assert lessons <= set(chapters), f"lessons missing: {sorted(lessons - set(chapters))}"
    assert chapters[0] == editions.book_index(lang).as_posix()
    assert f"{folder}/{editions.GLOSSARY_PAGE}.qmd" in chapters
    profile = (root / f"_quarto-{lang}.yml").read_text(encoding="utf-8")
    output = re.search(r"^\s*output-dir:\s*(\S+)\s*$", profile, re.M).group(1)
    assert output == editions.BOOK_OUTPUT[lang].as_posix()


def test_book_pages_show_answers_collapsed(root):
    for path in build.lesson_paths(root):
        page = (root / "book" / f"{path.stem}.qmd").read_text()
        assert '::: {.callout-tip collapse="true"}' in page
        assert "## Reference answer" in page


def test_no_pasted_images_in_notebooks(root):
    for folder in ("exercises", "solutions"):
        for nb in (root / folder).glob("*.ipynb"):
            text = nb.read_text()
            assert "image/png" not in text and "data:image" not in text, nb


# ---------------------------------------------------------------- book pages, as generated


def test_book_pages_leave_out_notebook_only_text(root):
    for path in build.lesson_paths(root):
        page = (root / "book" / f"{path.stem}.qmd").read_text()
        assert "notebook-only" not in page, path.stem
        assert "Run the next cell" not in page, path.stem
        imports = re.findall(r"^\s*from flashcourse import .*$", page, re.M)
        assert not [line for line in imports if "______" in line], (path.stem, imports)
        for variant in ("exercises", "solutions"):
            notebook = (root / variant / f"{path.stem}.ipynb").read_text()
            assert "notebook-only" not in notebook, (variant, path.stem)


def test_notebook_only_marks(tmp_path):
    lesson = tmp_path / "01-demo.qmd"
    lesson.write_text("""---
title: "Demo"
---

[Run the next cell first.]{.notebook-only} It prints one line.

::: {.notebook-only}
Leave the check cells as they are.
:::

```{python}
#| id: setup
from flashcourse import ______, check  # noqa: F401  (______ is used by the exercise version)
```
""")
    parsed = build.parse(lesson)
    notebook = _cell_text(build.to_notebook(parsed, "exercise"))
    assert "Run the next cell first. It prints one line." in notebook
    assert "Leave the check cells as they are." in notebook
    assert "notebook-only" not in notebook and ":::" not in notebook
    assert "from flashcourse import ______, check" in notebook
    page = build.to_book_page(parsed)
    assert "It prints one line." in page
    assert "Run the next cell" not in page and "Leave the check" not in page
    assert "notebook-only" not in page
    assert "from flashcourse import check\n" in page

    lesson.write_text(lesson.read_text().replace("Leave the check cells as they are.\n:::\n",
                                                 "Leave the check cells as they are.\n"))
    with pytest.raises(build.LessonSourceError, match="never closed"):
        build.parse(lesson)


def _cell_text(nb) -> str:
    return "\n".join(cell.source for cell in nb.cells)


# ---------------------------------------------------------------- the book rendered by Quarto


def _render(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # The pre-render step and the page kernels use this environment's Python.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["QUARTO_PYTHON"] = sys.executable
    result = subprocess.run([QUARTO, "render", *args], cwd=site, env=env, capture_output=True,
                            text=True, timeout=HANG_GUARD_S)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"quarto render {' '.join(args)} failed:\n{log[-6000:]}"
    # Quarto's own warnings (an unresolved link target, say) start a line with WARN.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
    warnings = [line for line in plain.splitlines() if re.match(r"\s*WARN", line)]
    assert not warnings, f"quarto render {' '.join(args)} warned:\n" + "\n".join(warnings)
    return result


@pytest.fixture(scope="module")
def book(root, tmp_path_factory):
    """The whole book rendered without execution, in a copy of the project."""
    if QUARTO is None:
        pytest.skip(NO_QUARTO)
    site = tmp_path_factory.mktemp("book")
    for name in BOOK_INPUTS:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, site / name, ignore=shutil.ignore_patterns("*_files"))
        else:
            shutil.copy2(source, site / name)
    _render(site, "--no-execute")  # the English first: a full render empties _book/
    # The pre-render step has rebuilt book/ from lessons/ once: the later renders of this copy
    # need not again (about 7 s each, on an idle machine).
    config = site / "_quarto.yml"
    without = re.sub(r"^  pre-render:.*\n", "", config.read_text(encoding="utf-8"), flags=re.M)
    assert without != config.read_text(encoding="utf-8"), "_quarto.yml has no pre-render step"
    config.write_text(without, encoding="utf-8")
    _render(site, "--profile", "zh", "--no-execute")
    return site / "_book"


@pytest.fixture(scope="module")
def executed_lesson(book):
    """Lesson 1 rendered again, executed, into the same site."""
    _render(book.parent, f"book/{EXECUTED_LESSON}.qmd")
    return book / "book" / f"{EXECUTED_LESSON}.html"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("href", "src") and value:
                self.links.append(value)

    def handle_data(self, data):
        self.text.append(data)


def _read(page: Path) -> _Page:
    parsed = _Page()
    parsed.feed(page.read_text(encoding="utf-8"))
    return parsed


def _broken_links(site: Path) -> list[str]:
    pages = {page: _read(page) for page in sorted(site.rglob("*.html"))}
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external (http, mailto, data): not checked offline
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site)}: {link}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _read(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no such anchor)")
    return broken


def _lesson_pages(root, site):
    return {p.stem: site / "book" / f"{p.stem}.html" for p in build.lesson_paths(root)}


def test_book_renders_every_page(root, book):
    missing = [p for p in [book / "index.html", *_lesson_pages(root, book).values()]
               if not p.exists()]
    assert not missing, f"pages missing from the rendered book: {missing}"


def test_rendered_book_has_no_broken_local_link(book):
    broken = _broken_links(book)
    assert not broken, "broken local links:\n" + "\n".join(broken)


def test_rendered_pages_read_as_a_book(root, book):
    for stem, page in _lesson_pages(root, book).items():
        source = page.read_text(encoding="utf-8")
        text = html.unescape(" ".join(_read(page).text))
        assert "chapter-number" not in source and "header-section-number" not in source, (
            f"{stem}: Quarto numbers chapters or sections on top of the lessons' own numbers")
        assert re.search(r"<h1[^>]*>.*Lesson \d+:", source), f"{stem}: no 'Lesson N:' title"
        assert "Run the next cell" not in text, f"{stem}: a notebook-only sentence is shown"
        assert not re.search(r"from flashcourse import\s+______", text), (
            f"{stem}: the exercise's blank import is shown")
        lesson_has_math = "$" in (root / "lessons" / f"{stem}.qmd").read_text()
        assert not lesson_has_math or "<math" in source, f"{stem}: math is not MathML"
        assert not re.search(r"mathjax|katex", source, re.I), (
            f"{stem}: loads a math script, which a reader offline does not get")


def test_one_lesson_renders_executed(executed_lesson, book):
    parsed = _read(executed_lesson)
    text = " ".join(parsed.text)
    # the page ran (its figures are there) but keeps the runtime line for notebooks
    assert "Runtime:" not in text, "the published page prints the machine's runtime line"
    figures = [link for link in parsed.links if "figure-html" in link]
    assert figures, "the executed page shows no figure"
    broken = [b for b in _broken_links(book) if b.startswith(f"book/{EXECUTED_LESSON}.html")]
    assert not broken, "broken local links after execution:\n" + "\n".join(broken)


# ---------------------------------------------------------------- the rendered pages in Chromium

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
BROWSED = (EXECUTED_LESSON, "06-flash-forward")  # lesson 1 executed, lesson 6 not


@pytest.fixture(scope="module")
def browser_page(book):
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.set_default_timeout(120_000)  # generous: the machine may be busy
            yield page
        finally:
            browser.close()


def test_pages_in_a_browser(root, executed_lesson, book, browser_page):
    """Chromium opens lesson 1 (executed) and lesson 6: the navigation lists every lesson,
    headings carry one number, a collapsed reference answer opens, figures load and math is laid
    out. Screenshots go to test-artifacts/."""
    page = browser_page
    shots = root / "test-artifacts"
    shots.mkdir(exist_ok=True)
    titles = [build.parse(path).title for path in build.lesson_paths(root)]
    for stem in BROWSED:
        page.goto((book / "book" / f"{stem}.html").as_uri())
        page.wait_for_load_state("load")
        nav = page.locator("#quarto-sidebar .sidebar-item-text").all_inner_texts()
        missing = [t for t in titles if not any(t in item for item in nav)]
        assert not missing, f"{stem}: the navigation lacks {missing} (it lists {nav})"

        assert page.locator(".chapter-number, .header-section-number").count() == 0, stem
        headings = page.locator("main h2.anchored").all_inner_texts()
        numbered = [h for h in headings if re.match(r"\d+\.\s", h)]
        assert numbered, f"{stem}: no numbered section among {headings}"
        assert not [h for h in headings if re.match(r"\d+(\.\d+)+\s", h)], headings

        answer = page.locator(".callout").filter(has_text="Reference answer").first
        body = answer.locator(".callout-collapse")
        assert not body.is_visible(), f"{stem}: the reference answer is not collapsed"
        answer.locator(".callout-header").click()
        body.wait_for(state="visible")
        assert "def " in body.inner_text() or "=" in body.inner_text(), stem

        images = page.locator("main img")
        sizes = [images.nth(i).evaluate("img => img.complete ? img.naturalWidth : -1")
                 for i in range(images.count())]
        assert all(size > 0 for size in sizes), f"{stem}: a figure did not load ({sizes})"
        if stem == EXECUTED_LESSON:
            assert sizes, f"{stem}: the executed page shows no figure"

        maths = page.locator("main math")
        assert maths.count() > 0, f"{stem}: no MathML on the page"
        box = maths.first.bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0, f"{stem}: math is not laid out"
        page.screenshot(path=str(shots / f"book-{stem}.png"))


@contextlib.contextmanager
def _served_offline(book: Path, page):
    """The rendered book served on localhost as `./course book` serves it, with every request
    that would leave the machine blocked: yields (base URL, blocked URLs, failed URLs)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # the test's output, not a request log
            pass

    handler = functools.partial(Quiet, directory=str(book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    left, failed = [], []

    def only_here(route):
        if route.request.url.startswith(base):
            route.continue_()
        else:
            left.append(route.request.url)
            route.abort()

    def record_failure(request):
        failed.append(request.url)

    page.route("**/*", only_here)
    page.on("requestfailed", record_failure)
    try:
        yield base, left, failed
    finally:
        page.remove_listener("requestfailed", record_failure)
        page.unroute("**/*")
        server.shutdown()
        server.server_close()


def test_the_book_served_here_needs_no_network(root, executed_lesson, book, browser_page):
    """Served on localhost as `./course book` serves it, with every request that would leave the
    machine blocked: every page loads with no blocked and no failed request, the executed page
    prints no runtime line meant for a notebook, and the table of contents follows the reader
    down the page."""
    page = browser_page
    with _served_offline(book, page) as (base, left, failed):
        pages = sorted(p.relative_to(book).as_posix() for p in book.rglob("*.html")
                       if 'http-equiv="refresh"' not in p.read_text(encoding="utf-8"))
        for name in pages:  # (Quarto's redirect stubs left out: their targets are listed)
            page.goto(base + name)
            page.wait_for_load_state("load")
            if page.locator("script[type='ojs-module-contents']").count():
                page.wait_for_load_state("networkidle")  # the diagrams' data, fetched after load
        assert not left, f"pages asked the network for {sorted(set(left))[:10]}"
        assert not failed, f"requests failed: {sorted(set(failed))[:10]}"

        page.goto(base + f"book/{EXECUTED_LESSON}.html")
        page.wait_for_load_state("load")
        text = page.locator("main").inner_text()
        assert "Runtime:" not in text and "Measurement skipped" not in text
        first = page.locator("#TOC a.active").first.inner_text()
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.wait_for_function(
            "first => { const a = document.querySelector('#TOC a.active');"
            " return a && a.innerText !== first; }", arg=first)


def test_course_book_serves_the_rendered_book_on_localhost(book, tmp_path):
    """`python -m flashcourse book --no-render` serves _book/ on 127.0.0.1 and says where; with
    nothing rendered it says what to run instead."""
    import urllib.request

    empty = subprocess.run([sys.executable, "-m", "flashcourse", "book", "--no-render",
                            "--root", str(tmp_path)], capture_output=True, text=True,
                           timeout=60)
    assert empty.returncode == 2 and "run without --no-render" in empty.stderr
    server = subprocess.Popen([sys.executable, "-m", "flashcourse", "book", "--no-render",
                               "--port", "0", "--root", str(book.parent)],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        with urllib.request.urlopen(url + "index.html", timeout=30) as response:
            assert response.status == 200 and b"<html" in response.read(2000).lower()
    finally:
        server.terminate()
        server.wait(timeout=30)


# ---------------------------------------------------------------- the interactive diagrams

DIAGRAM_LESSON = """---
title: "Demo"
---

Before the diagram.

<!-- interactive: tile-map -->

```{ojs}
demo = 1 + 1
```

After it.
"""


def test_interactive_diagrams_reach_only_the_book_page(tmp_path):
    from flashcourse.figures import interactive

    lesson = tmp_path / "01-demo.qmd"
    lesson.write_text(DIAGRAM_LESSON)
    parsed = build.parse(lesson)
    page = build.to_book_page(parsed)
    assert interactive.ojs_cell("tile-map") in page
    assert "```{ojs}\ndemo = 1 + 1\n```" in page and "<!-- interactive" not in page
    for variant in ("exercise", "solution"):
        notebook = build.to_notebook(parsed, variant)
        text = "\n".join(cell.source for cell in notebook.cells[1:])  # after the title
        assert text == "Before the diagram.\n\nAfter it.", variant
        assert "ojs" not in text and "interactive" not in text and "demo" not in text, variant
    assert "FileAttachment" in build.to_book_page(parsed, answers=False)


@pytest.mark.parametrize("source, message", [
    (DIAGRAM_LESSON.replace("tile-map", "no-such-map"),
     "no interactive diagram is called 'no-such-map'; the diagrams are"),
    (DIAGRAM_LESSON.replace("demo = 1 + 1\n```", "demo = 1 + 1"), "an OJS cell is never closed"),
    (DIAGRAM_LESSON.replace("<!-- interactive: tile-map -->",
                            "::: {.notebook-only}\n<!-- interactive: tile-map -->\n:::"),
     "sits in a notebook-only block"),
], ids=["unknown-diagram", "ojs-never-closed", "diagram-in-notebook-only-block"])
def test_a_misplaced_diagram_stops_the_build(tmp_path, source, message):
    lesson = tmp_path / "01-demo.qmd"
    lesson.write_text(source)
    with pytest.raises(build.LessonSourceError, match=re.escape(message)):
        build.parse(lesson)


def test_the_exported_tables_are_generated_files(root):
    from flashcourse.figures import interactive

    data = root / "book" / build.INTERACTIVE_DATA
    files = interactive.data_files(data)
    assert set(files) == {data / f"{name}.json" for name in interactive.TABLES}
    for path, text in files.items():
        assert path.exists() and path.read_text() == text, (
            f"{path.name} is stale: run python -m flashcourse build")
    assert {"tile-traffic", "online-softmax", "tile-map"} <= _placed_diagrams(root)


def _placed_diagrams(root) -> set[str]:
    """The diagrams the lessons place, by name."""
    marks = (build.INTERACTIVE_MARK.match(line.strip()) for path in build.lesson_paths(root)
             for line in path.read_text().splitlines())
    return {mark.group("name") for mark in marks if mark}


DIAGRAM_WAIT_MS = 30_000  # a diagram redraws in well under a second; a broken one fails soon


def _move(page, label: str, value) -> None:
    """Set the control labelled `label` as a reader would, and tell the page it moved."""
    field = page.locator("label.fc-control", has_text=label).locator("input, select")
    field.evaluate("(field, value) => { field.value = value;"
                   " field.dispatchEvent(new Event('input', {bubbles: true})); }", str(value))


def _changed(page, selector: str, before: str) -> str:
    page.wait_for_function("([selector, before]) => { const e = document.querySelector(selector);"
                           " return e && e.innerHTML !== before; }", arg=[selector, before],
                           timeout=DIAGRAM_WAIT_MS)
    return page.locator(selector).inner_html()


def _tile_traffic(page, picture):
    from flashcourse.models import matmul, traffic

    _move(page, "BLOCK_M", 4)  # the fifth tile side: 256
    _move(page, "BLOCK_N", 4)
    page.wait_for_function("() => document.querySelector('#tile-traffic-picture .fc-readout')"
                           ".innerText.includes('BLOCK_M = 256, BLOCK_N = 256')",
                           timeout=DIAGRAM_WAIT_MS)
    read = matmul.tiled_read_bytes(4096, 4096, 4096, 256, 256, 2)
    intensity = matmul.matmul_flops(4096, 4096, 4096) / (read + 4096 * 4096 * 2)
    assert picture.locator(".reads").inner_text() == traffic.format_bytes(read)
    assert picture.locator(".intensity").inner_text() == f"{intensity:.1f}"


def _tile_map(page, picture):
    from flashcourse.kernels import modern_attention

    _move(page, "BLOCK_M", 0)  # 16 x 16 tiles
    _move(page, "BLOCK_N", 0)
    page.wait_for_function("() => document.querySelector('#tile-map-picture .fc-readout')"
                           ".innerText.includes('63 x 63 tiles')", timeout=DIAGRAM_WAIT_MS)
    assert picture.locator(".skipped").inner_text() == str(_causal_skipped(1000, 16))
    before = picture.locator(".fc-readout").inner_html()
    _move(page, "mask", 1)  # a sliding window of 128 keys
    _changed(page, "#tile-map-picture .fc-readout", before)
    window = modern_attention.classify_rule(1000, 16, 16, left=127, right=0)
    assert picture.locator(".skipped").inner_text() == str(
        modern_attention.tile_counts(window)["empty"])


def _causal_skipped(n: int, block: int) -> int:
    from flashcourse.kernels import attention

    return attention.causal_tiles(n, block, block)[1]


def _ring_schedule(page, picture):
    from flashcourse import distributed

    _move(page, "ranks P", 6)  # P = 8
    _move(page, "split", 1)  # zigzag
    page.wait_for_function("() => document.querySelector('#ring-schedule-picture .fc-readout')"
                           ".innerText.includes('P = 8, zigzag split')", timeout=DIAGRAM_WAIT_MS)
    assert picture.locator(".busiest").inner_text() == str(
        max(distributed.plan_work(4096, 8, True)))
    assert picture.locator("rect.cell").count() == 8 * 8 * 4


ROW_TYPED = ("1000, 999, -inf, 998, -5, 2", "1, 2, 3, 4, 5, 6", 2)


def _online_softmax(page, picture):
    from flashcourse.figures import softmax_blocks

    scores, values, block = ROW_TYPED
    _move(page, "scores of the row", scores)
    _move(page, "values (one per key)", values)
    _move(page, "keys per block", block - 1)
    page.wait_for_function("() => document.querySelector('#online-softmax-picture table')"
                           "?.dataset.steps.includes('\"end\":2,')", timeout=DIAGRAM_WAIT_MS)
    shown = json.loads(picture.locator("table").get_attribute("data-steps"))
    expected = softmax_blocks.running_states(
        [float(x) for x in scores.split(",")], [float(x) for x in values.split(",")], block)
    _assert_same_states(shown, expected)
    assert picture.locator(".output").inner_text() == f"{expected[-1]['out']:.6f}"


def _assert_same_states(shown: list[dict], expected: list[dict]) -> None:
    assert len(shown) == len(expected)
    for got, want in zip(shown, expected, strict=True):
        got = {key: float("-inf") if value is None else value for key, value in got.items()}
        assert (got["start"], got["end"], got["m"]) == (want["start"], want["end"], want["m"])
        for key in ("l", "o", "out"):
            assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-300), (key, got, want)


DIAGRAM_CHECKS = {"tile-traffic": _tile_traffic, "online-softmax": _online_softmax,
                  "tile-map": _tile_map, "ring-schedule": _ring_schedule}


def test_interactive_diagrams_answer_their_controls(root, book, browser_page):
    """On the book served offline, every diagram a lesson places draws; moving its controls as a
    reader would redraws the picture, and the numbers it prints are the package's."""
    page = browser_page
    placed = {}
    for path in build.lesson_paths(root):
        for line in path.read_text().splitlines():
            mark = build.INTERACTIVE_MARK.match(line.strip())
            if mark:
                placed[mark.group("name")] = path.stem
    assert set(placed) <= set(DIAGRAM_CHECKS), "a diagram without a browser check"
    with _served_offline(book, page) as (base, left, failed):
        for name, stem in sorted(placed.items()):
            page.goto(base + f"book/{stem}.html")
            picture = page.locator(f"#{name}-picture")
            picture.wait_for(timeout=DIAGRAM_WAIT_MS)
            drawn = picture.locator("svg").inner_html()
            DIAGRAM_CHECKS[name](page, picture)
            assert picture.locator("svg").inner_html() != drawn, f"{name}: the picture stayed"
        assert not left, f"the diagrams asked the network for {sorted(set(left))[:10]}"
        assert not failed, f"requests failed: {sorted(set(failed))[:10]}"


def test_online_softmax_port_agrees_with_the_package(root, book, browser_page):
    """The browser's online softmax (figures/ojs/online_softmax.js, run in Chromium) returns the
    states of `running_states` on rows with masked blocks and large logits."""
    from flashcourse.figures import interactive, softmax_blocks

    inf = float("-inf")
    rows = [([1.0, 3.0, 2.0, 8.0, 5.0, 0.0, 9.0, inf, 4.0], [1, 0, 2, -1, 3, 0, 1, 5, 2], b)
            for b in (1, 2, 4, 9, 20)]
    rows += [([inf, inf, 2.0, 1.0], [5.0, 5.0, 1.0, 3.0], 2), ([inf, inf, inf], [1, 2, 3], 2),
             ([1000.0, 999.0, -5.0, 998.0, 0.5], [0.25, -1.0, 3.0, 2.0, 7.0], 3)]
    page = browser_page
    page.goto((book / "index.html").as_uri())
    shown = page.evaluate(
        "([source, rows]) => { const port = new Function(source + '\\nreturn onlineSoftmax;')();"
        " return rows.map(([s, v, b]) => port(s, v, b)); }", [interactive.online_softmax_js(),
                                                              [list(r) for r in rows]])
    for (scores, values, block), states in zip(rows, shown, strict=True):
        _assert_same_states(states, softmax_blocks.running_states(scores, values, block))


# ---------------------------------------------------------------- the two editions

SWITCH = re.compile(r'<a href="(?P<href>[^"]+)" class="language-switch" hreflang="(?P<lang>\w+)"')


def _edition_pages(root, site: Path, lang: str) -> dict[str, Path]:
    """{name: rendered page} of the lessons and the glossary of the book in `lang`."""
    top = site / editions.BOOK_OUTPUT[lang].relative_to(editions.BOOK_OUTPUT["en"])
    names = [path.stem for path in build.lesson_paths(root)] + [editions.GLOSSARY_PAGE]
    return {name: top / editions.folder("book", lang) / f"{name}.html" for name in names}


def test_the_chinese_book_renders_every_page(root, book):
    pages = [book / "zh" / "index.zh.html", *_edition_pages(root, book, "zh").values()]
    missing = [page for page in pages if not page.exists()]
    assert not missing, f"pages missing from the Chinese book: {missing}"
    assert "index.zh.html" in (book / "zh" / "index.html").read_text()  # Quarto's redirect
    for page in pages:
        source = page.read_text(encoding="utf-8")
        assert re.search(r'<html[^>]* lang="zh', source), f"{page.name}: not marked Chinese"
        assert "chapter-number" not in source, page.name
    lesson = _edition_pages(root, book, "zh")["05-softmax"].read_text(encoding="utf-8")
    assert "<math" in lesson and "Lesson 5:" not in lesson


def test_every_page_switches_to_the_same_page_in_the_other_language(root, book):
    """Each lesson and the glossary link to themselves in the other book; the Chinese home page
    to the English one, which has its switch in the sidebar. The links are relative: they work
    from the rendered files and on the served book alike."""
    english, chinese = (_edition_pages(root, book, lang) for lang in ("en", "zh"))
    pairs = [*((english[name], "en", chinese[name]) for name in english),
             *((chinese[name], "zh", english[name]) for name in chinese),
             (book / "zh" / "index.zh.html", "zh", book / "index.html")]
    for page, lang, other in pairs:
        switches = SWITCH.findall(page.read_text(encoding="utf-8"))
        assert len(switches) == 1, f"{page.relative_to(book)}: {len(switches)} switches"
        href, to = switches[0]
        assert to == editions.other_language(lang)
        assert (page.parent / href).resolve() == other.resolve(), (page, href)
    home = (book / "index.html").read_text(encoding="utf-8")
    tool = re.search(r'href="(?P<href>[^"]+)"[^>]*aria-label="中文"', home)
    assert tool and (book / tool["href"]).resolve() == (book / "zh" / "index.zh.html").resolve()


def test_the_language_switch_in_a_browser(root, book, browser_page):
    """A reader on a Chinese lesson switches to the English and back, on the served book and
    from the rendered files; the English home page switches through the sidebar."""
    page = browser_page
    with _served_offline(book, page) as (base, left, failed):
        page.goto(base + "zh/book/zh/05-softmax.html")
        assert page.locator("html").get_attribute("lang").startswith("zh")
        chinese_title = page.locator("h1").first.inner_text()
        page.locator("a.language-switch").click()
        page.wait_for_url(base + "book/05-softmax.html")
        assert page.locator("html").get_attribute("lang") == "en"
        assert page.locator("h1").first.inner_text().startswith("Lesson 5:")
        assert chinese_title != page.locator("h1").first.inner_text()
        page.locator("a.language-switch").click()
        page.wait_for_url(base + "zh/book/zh/05-softmax.html")
        page.goto(base + "index.html")
        page.locator('a.quarto-navigation-tool[aria-label="中文"]').click()
        page.wait_for_url(base + "zh/index.zh.html")
        assert page.locator("a.language-switch").get_attribute("hreflang") == "en"
        assert not left and not failed, (left, failed)
    page.goto((book / "book" / f"{EXECUTED_LESSON}.html").as_uri())
    page.locator("a.language-switch").click()
    page.wait_for_url((book / "zh" / "book" / "zh" / f"{EXECUTED_LESSON}.html").as_uri())
    shots = root / "test-artifacts"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / f"book-zh-{EXECUTED_LESSON}.png"))
