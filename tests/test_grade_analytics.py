"""What the class got wrong (grader/analytics.py, written by report.py): a class of 36 result
records built in-process with planted mistakes (samples.synthetic_class, no sandbox), counted
in progress.html and class.csv with the planted numbers; every finding links to the pages of
the submissions that made it. In Chromium (skipped when it or Playwright is missing), the page
opens from file:// with every other request blocked, shows the same counts and its links open
the submission's page. Screenshots go to test-artifacts/."""

import csv
import shutil

import pytest

from flashcourse.checks import LESSON_MODULES
from flashcourse.grader import analytics, report, samples

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # as conftest's sync_api


@pytest.fixture(scope="module")
def lessons() -> tuple[str, str]:
    names = list(LESSON_MODULES)
    return names[0], names[4]  # lessons 1 and 5: the registry's, never a list of our own


@pytest.fixture(scope="module")
def written_class(tmp_path_factory, lessons):
    out = tmp_path_factory.mktemp("class")
    subs = samples.synthetic_class(*lessons)
    report.write_all(subs, out, timeout=60, jobs=2)
    return subs, out


def _ident(lesson: str) -> str:
    return lesson.split("-", 1)[1]


def test_the_planted_mistakes_are_counted(lessons):
    first, second = (analytics.class_stats(samples.synthetic_class(*lessons)))
    assert (first.lesson, first.count, first.passed) == (lessons[0], 24, 5)
    assert first.histogram == [0, 0, 0, 0, 3, 0, 13, 0, 2, 0, 6]
    kernel = first.items[f"{_ident(lessons[0])}/kernel"]
    assert {k: len(v) for k, v in kernel.outcomes.items()} == {
        "pass": 8, "wrong": 12, "blank": 2, "not run": 1, "other": 1}
    mistakes = {what: labels for what, labels in analytics.by_count(kernel.mistakes)}
    assert [len(labels) for labels in mistakes.values()] == [7, 3]  # most common first
    assert list(mistakes)[0] == samples.NO_RESCALE
    assert mistakes[samples.NO_RESCALE][0] == f"s00/{lessons[0]}.ipynb"
    assert len(kernel.undiagnosed) == 2
    q1 = first.items[f"{_ident(lessons[0])}/q1"]
    assert {k: len(v) for k, v in q1.parts.items()} == {"s_bytes": 5, "nxn_hbm_passes": 1}
    veto = first.items[f"{_ident(lessons[0])}/misconceptions"]
    assert {k: len(v) for k, v in veto.parts.items()} == {"flash_reduces_flops": 4,
                                                          "tiles_fit_in_sram": 1}
    assert len(veto.outcomes["wrong"]) == 4 and len(veto.outcomes["not run"]) == 1
    assert (second.lesson, second.count, second.passed) == (lessons[1], 12, 7)
    assert {k: len(v) for k, v in second.items[f"{_ident(lessons[1])}/kernel"]
            .mistakes.items()} == {samples.STRIDE: 3}


@pytest.mark.parametrize("message, expected", [
    ("case 1: off. Likely mistake: The sum is not rescaled: see. Re-read section 6.",
     "The sum is not rescaled: see"),
    ("case 1: off. Likely mistake: a load reads outside A (section 3).", "a load reads outside A"),
    ("case 1: off. Hint: load x and y with the same mask.", ""),  # a hint names no mistake
    ("", ""),
])
def test_a_diagnosis_is_the_first_sentence_after_the_mark(message, expected):
    assert analytics.diagnosis(message) == expected


def test_unmatched_and_backup_submissions_are_not_counted(lessons):
    from flashcourse.grader.collect import BACKUP_REFUSAL
    from flashcourse.grader.submission import Submission

    subs = samples.synthetic_class(*lessons)[:2] + [
        Submission(label="x.ipynb", path="x", status="UNMATCHED"),
        Submission(label="b/backups/y.ipynb", path="y", status="REFUSED", lesson=lessons[0],
                   problems=[f"refused: {BACKUP_REFUSAL}"])]
    (stats,) = analytics.class_stats(subs)
    assert stats.count == 2


def test_class_csv_has_the_same_counts(written_class, lessons):
    subs, out = written_class
    with (out / "class.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(report.CLASS_COLUMNS)
    found = {(r["lesson"], r["section"], r["item"], r["what"]): r for r in rows}
    kernel = f"{_ident(lessons[0])}/kernel"
    rescale = found[(lessons[0], "mistake", kernel, samples.NO_RESCALE)]
    assert (rescale["value"], rescale["of"]) == ("7", "24")
    assert rescale["submissions"].split(" | ")[:2] == [f"s00/{lessons[0]}.ipynb",
                                                       f"s01/{lessons[0]}.ipynb"]
    assert found[(lessons[0], "mistake", kernel, report.UNDIAGNOSED)]["value"] == "2"
    assert found[(lessons[0], "passed", "", "submissions passed")]["value"] == "5"
    statement = found[(lessons[0], "veto statement", f"{_ident(lessons[0])}/misconceptions",
                       "flash_reduces_flops")]
    assert statement["value"] == "4"
    assert found[(lessons[1], "item", f"{_ident(lessons[1])}/kernel", "blank")]["value"] == "1"


def test_every_link_of_the_page_has_its_submission_page(written_class):
    subs, out = written_class
    page = (out / "progress.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page  # escaped
    assert "http://" not in page and "https://" not in page  # nothing to fetch
    for sub in subs:
        own = out / report.submission_page(sub)
        assert own.is_file(), own
        text = own.read_text(encoding="utf-8")
        assert report.html_text(sub.label) in text
        # records built in-process: no executed notebook to link to, and no dead link
        assert "../executed/" not in text and "no executed notebook" in text
        assert "<script>" not in text


def test_the_page_shows_the_counts_offline_in_chromium(sync_api, written_class, lessons, root):
    subs, out = written_class
    shots = root / "test-artifacts"
    shots.mkdir(exist_ok=True)
    blocked = []
    with sync_api.sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})

        def only_files(route):
            if route.request.url.startswith("file://"):
                return route.continue_()
            blocked.append(route.request.url)
            return route.abort()

        page.route("**/*", only_files)
        page.goto((out / "progress.html").as_uri())
        section = page.locator(f'section[data-lesson="{lessons[0]}"]')
        assert section.locator(".pass-rate").get_attribute("data-passed") == "5"
        bars = section.locator("svg.histogram rect.bin")
        assert bars.count() == analytics.POINT_BINS
        assert bars.nth(6).get_attribute("data-count") == "13"
        assert bars.nth(6).bounding_box()["height"] > bars.nth(4).bounding_box()["height"] > 0
        rescale = section.locator("li.finding", has_text=samples.NO_RESCALE[:40])
        assert rescale.get_attribute("data-count") == "7"
        assert rescale.locator(".count").inner_text() == "7 of 24"
        statement = section.locator('li.finding[data-kind="veto statement"]',
                                    has_text="flash_reduces_flops")
        assert statement.locator(".count").inner_text() == "4 of 24"
        section.screenshot(path=str(shots / "class-analytics.png"))
        rescale.locator("summary").click()
        link = rescale.locator("a.submission-link").first
        assert link.inner_text() == f"s00/{lessons[0]}.ipynb"
        link.click()
        page.wait_for_load_state()
        assert page.url.endswith(report.submission_page(subs[0]))
        assert page.locator("h1.label").inner_text() == subs[0].label
        assert "Likely mistake" in page.locator(".submission").inner_text()
        browser.close()
    assert not blocked, blocked
