"""Hints before answers: every exercise of every lesson has 2-3 hint levels in its lesson source;
the book nests them, collapsed, before the reference answer; the notebooks hold only the call
`fc.hint(...)`, which shows the levels in order; the grader's reports say which levels a run
opened, and that never changes a point. (That no level gives a solution line is
tests/test_no_dictation.py's scan, which reads the levels too.)"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import test_no_dictation

from flashcourse import hints
from flashcourse.authoring import build
from flashcourse.checks import recording
from flashcourse.checks.errors import CourseInputError
from flashcourse.grader import channel, collect, inside, report, samples, score

ROOT = Path(__file__).resolve().parents[1]
HINTED = build.lesson_paths(ROOT)
LESSONS = {path.stem: build.parse(path) for path in HINTED}


def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.fixture(autouse=True)
def _fresh_hints():
    hints.forget()
    yield
    hints.forget()


@pytest.mark.parametrize("slug", list(LESSONS))
def test_every_exercise_has_two_or_three_levels(slug):
    """Each exercise cell is covered by the hints of the check that grades it (the next check
    cell): one block per graded id, so cells graded together (lesson 11's four) share one."""
    lesson = LESSONS[slug]
    hinted = {block.exercise for block in lesson.hints}
    missing = []
    for number, cell in enumerate(lesson.cells):
        if not cell.options.get("id", "").startswith("exercise-"):
            continue
        checker = next(later for later in lesson.cells[number + 1:]
                       if later.options.get("id", "").startswith("check-"))
        graded = re.search(r'check\("([^"]+)"', checker.source).group(1)
        if graded not in hinted:
            missing.append(f"{cell.options['id']} (graded by {graded})")
    assert not missing, f"{slug}: exercises without hints: {missing}"
    for block in lesson.hints:
        assert 2 <= len(block.levels) <= 3, block
        assert len(set(block.levels)) == len(block.levels), block


def test_the_hints_files_hold_the_sources_levels():
    table = hints.table()
    for slug, lesson in LESSONS.items():
        data = json.loads((ROOT / build.HINTS_DIR / f"{slug}.json").read_text())
        assert data["source"] == f"lessons/{slug}.qmd"
        assert list(data["exercises"]) == [block.exercise for block in lesson.hints]
        for block in lesson.hints:
            assert table[block.exercise] == block.levels


def _fences(page: str) -> list[tuple[int, str]]:
    """(depth, title) of every hint callout of a book page, from its fences."""
    found, stack = [], []
    for line in page.splitlines():
        opened = re.match(r"^(:{3,}) \{\.callout-note \.hint", line)
        if opened:
            stack.append(len(opened.group(1)))
            continue
        if stack and re.fullmatch(r":{3,}", line):
            assert len(line) == stack.pop(), "a hint callout closed by another's fence"
            continue
        title = re.match(r"^## (Hint \d+ of \d+)$", line)
        if title:
            found.append((len(stack), title.group(1)))
    return found


@pytest.mark.parametrize("slug", list(LESSONS))
def test_the_book_nests_the_levels_before_the_reference_answer(root, slug):
    page = (root / "book" / f"{slug}.qmd").read_text(encoding="utf-8")
    for block in LESSONS[slug].hints:
        callouts = "\n".join(build.hint_callouts(block))
        at = page.index(callouts)
        after = page[at + len(callouts):].lstrip("\n")
        assert after.startswith('::: {.callout-tip collapse="true"}\n## Reference answer'), \
            f"{block.exercise}: its hints are not right before its reference answer"
        before = page[:at].rstrip("\n")
        assert before.endswith("```"), f"{block.exercise}: its hints do not follow its code"
    count = sum(len(block.levels) for block in LESSONS[slug].hints)
    nesting = _fences(page)
    assert len(nesting) == count
    # Hint k sits inside Hint k-1: its depth is k
    assert all(depth == int(title.split()[1]) for depth, title in nesting), nesting


def test_the_callouts_nest_three_deep():
    block = build.HintBlock("demo/x", ("first idea", "the relation", "the shape"), 0, 1)
    lines = build.hint_callouts(block)
    assert lines[0] == '::::: {.callout-note .hint collapse="true"}'
    assert lines[1] == "## Hint 1 of 3" and "first idea" in lines
    assert _fences("\n".join(lines)) == [(1, "Hint 1 of 3"), (2, "Hint 2 of 3"),
                                         (3, "Hint 3 of 3")]
    assert [line for line in lines if re.fullmatch(r":+", line)] == [":::", "::::", ":::::"]


@pytest.mark.parametrize("slug", list(LESSONS))
def test_the_notebooks_hold_the_call_not_the_levels(root, slug):
    for variant in ("exercises", "solutions"):
        notebook = json.loads((root / variant / f"{slug}.ipynb").read_text(encoding="utf-8"))
        text = squeezed("\n".join("".join(cell["source"]) for cell in notebook["cells"]))
        for block in LESSONS[slug].hints:
            for level in block.levels:
                assert squeezed(level) not in text, f"{variant}/{slug}: a hint of " \
                    f"{block.exercise} is in the notebook"
            call = f'fc.hint("{block.exercise}")'
            assert text.count(squeezed(call)) == 1, f"{variant}/{slug}: no line naming {call}"


def test_fc_hint_shows_the_levels_in_order():
    exercise = "roofline/copy-kernel"
    levels = hints.table()[exercise]
    shown = [hints.reveal(exercise) for _ in levels]
    for number, (text, level) in enumerate(zip(shown, levels, strict=True), start=1):
        assert text.startswith(f"**Hint {number} of {len(levels)}**") and level in text
        for later in levels[number:]:
            assert later not in text  # one level at a time
    assert f"{len(levels) - 1} more" in shown[0] and "last level" in shown[-1]
    assert hints.opened(exercise) == list(range(1, len(levels) + 1))
    done = hints.reveal(exercise)
    assert "are shown" in done and not any(level in done for level in levels)
    again = hints.reveal(exercise, 2)
    assert levels[1] in again and levels[0] not in again


def test_a_level_asked_for_is_shown_and_the_next_call_fills_the_gaps(capsys):
    exercise = "softmax/merge-states"
    levels = hints.table()[exercise]
    hints.hint(exercise, 3)  # printed: no IPython here
    assert levels[2] in capsys.readouterr().out
    assert levels[0] in hints.reveal(exercise)
    assert levels[1] in hints.reveal(exercise)
    assert hints.opened(exercise) == [1, 2, 3]


@pytest.mark.parametrize("exercise, level, says", [
    ("roofline/copy-kernal", None, "roofline/copy-kernel"),  # a typo: the lesson's ids listed
    ("roofline/q1-intensity", None, "roofline/gemm-intensity"),  # a question has no hints
    ("copy-kernel", None, "lesson/exercise"),  # no lesson: the lessons listed
    (None, None, "roofline"),
    ("roofline/copy-kernel", 0, "from 1 to 3"),
    ("roofline/copy-kernel", 4, "from 1 to 3"),
    ("roofline/copy-kernel", "2", "from 1 to 3"),
    ("roofline/copy-kernel", True, "from 1 to 3"),
])
def test_unknown_exercises_and_levels_are_refused(exercise, level, says):
    with pytest.raises(CourseInputError, match=re.escape(says)):
        hints.reveal(exercise, level)
    assert hints.opened("roofline/copy-kernel") == []


def test_an_item_without_hints_gets_a_short_note_not_an_error(capsys):
    hints.hint("gpu-flash/q1-memory")  # a question of a lesson whose exercise has hints
    out = capsys.readouterr().out
    assert out.startswith("`gpu-flash/q1-memory` has no hints. In lesson 'gpu-flash', the "
                          "exercises with hints are gpu-flash/"), out
    assert "[" not in out and hints.opened("gpu-flash/q1-memory") == []


def test_fc_exports_hint():
    import flashcourse as fc

    assert fc.hint is hints.hint


def _lesson(tmp_path: Path, block: str, *, exercise_cell: bool = True) -> Path:
    code = ("```{python}\n#| id: exercise-demo\nx = 1  # BLANK\n```\n\n" if exercise_cell
            else "```{python}\nprint(1)\n```\n\n")
    path = tmp_path / "99-demo.qmd"
    path.write_text('---\ntitle: "Demo"\n---\n\nProse.\n\n' + code + block + "\n\n"
                    '```{python}\n#| id: check-demo\ncheck("demo/x", x)\n```\n',
                    encoding="utf-8")
    return path


GOOD = '::: {.hints exercise="demo/x"}\n1. The idea,\n   on two lines.\n2. The relation.\n:::'


def test_a_hints_block_is_read_and_leaves_the_notebooks_its_call(tmp_path):
    lesson = build.parse(_lesson(tmp_path, GOOD))
    (block,) = lesson.hints
    assert block.levels == ("The idea, on two lines.", "The relation.")
    assert lesson.cells[block.cell_index].options["id"] == "exercise-demo"
    for variant in ("exercise", "solution"):
        cells = build.to_notebook(lesson, variant).cells
        text = "\n".join(cell.source for cell in cells)
        assert 'fc.hint("demo/x")' in text and "The relation" not in text
        assert "hints-demo" in [cell.id for cell in cells]
    page = build.to_book_page(lesson)
    assert "The relation" in page and 'fc.hint("demo/x")' not in page
    assert page.index("## Hint 2 of 2") < page.index("## Reference answer")
    assert json.loads(build.hints_json(lesson))["exercises"] == {"demo/x": list(block.levels)}


@pytest.mark.parametrize("block, message", [
    ('::: {.hints exercise="demo/x"}\n1. Only one level.\n:::', "has 1 hint levels"),
    ('::: {.hints exercise="demo/x"}\n1. a\n2. b\n3. c\n4. d\n:::', "has 4 hint levels"),
    ('::: {.hints exercise="demo/x"}\n1. a\n3. b\n:::', "numbered list"),
    ('::: {.hints exercise="demo/x"}\nSome prose.\n1. a\n2. b\n:::', "numbered list"),
    ('::: {.hints exercise="demo/y"}\n1. a\n2. b\n:::', "no grading cell"),
    ('::: {.hints exercise="demo/x"}\n1. a\n2. b\n', "never closed"),
    (GOOD + "\n\n" + GOOD, "a second hints block"),
])
def test_a_malformed_hints_block_stops_the_build(tmp_path, block, message):
    with pytest.raises(build.LessonSourceError, match=re.escape(message)) as raised:
        build.parse(_lesson(tmp_path, block))
    assert "99-demo.qmd:" in str(raised.value)


def test_hints_before_any_exercise_cell_stop_the_build(tmp_path):
    with pytest.raises(build.LessonSourceError, match="must come after its exercise cell"):
        build.parse(_lesson(tmp_path, GOOD, exercise_cell=False))


def test_the_dictation_scan_reads_the_hints(tmp_path):
    """A level that hands over the blank's line is caught by test_no_dictation's scan."""
    path = tmp_path / "99-demo.qmd"
    path.write_text(
        '---\ntitle: "Demo"\n---\n\n```{python}\n#| id: exercise-demo\n'
        "offsets = pid * BLOCK + tl.arange(0, BLOCK)  # BLANK\n```\n\n"
        '::: {.hints exercise="demo/x"}\n1. Each program owns a block.\n'
        "2. Write `offsets = pid * BLOCK + tl.arange(0, BLOCK)`.\n:::\n\n"
        '```{python}\n#| id: check-demo\ncheck("demo/x", offsets)\n```\n', encoding="utf-8")
    assert test_no_dictation.dictated(path, []) == [
        "exercise-demo: `pid*BLOCK+tl.arange(0,BLOCK)` is given in hint 2 of demo/x"]


# ---------------------------------------------------------------- the grader's side


def test_a_hint_shown_in_the_sandbox_goes_out_as_a_note(monkeypatch):
    published = []
    monkeypatch.setattr(recording, "publish", lambda mime, data: published.append((mime, data)))
    hints.reveal("roofline/copy-kernel")
    hints.reveal("roofline/copy-kernel", 3)
    assert published == [(recording.HINT_MIME, {"exercise": "roofline/copy-kernel", "level": 1}),
                         (recording.HINT_MIME, {"exercise": "roofline/copy-kernel", "level": 3})]


def test_the_runner_takes_hint_notes_out_of_a_cells_outputs():
    note = {"exercise": "gpu-flash/flash-attention", "level": 2}
    outputs = [{"output_type": "display_data", "data": {recording.HINT_MIME: note}},
               {"output_type": "display_data", "data": {"text/markdown": "**Hint 2 of 3**"}}]
    rest, records, hits, notes = inside._take_channel_outputs(outputs)
    assert notes == [note] and records == [] and hits == []
    assert rest == outputs[1:]


@pytest.fixture(scope="module")
def lesson_one(tmp_path_factory):
    """Lesson 1's filled submission, collected as the grader does."""
    from flashcourse.checks import registry

    registry._load_checks()
    folder = tmp_path_factory.mktemp("hints")
    path = samples.write(samples.filled_notebook(ROOT), folder / "ada" / "01-gpu-flash.ipynb")
    found, _ = collect.collect([path])
    return collect.prepare(found[0], collect.load_exercises(ROOT))


def _graded(lesson_one, notes: list) -> tuple:
    sub, job = copy.deepcopy(lesson_one[0]), lesson_one[1]
    cells = {cell: exercise for exercise, (cell, _) in job.checks.items()}
    talk = channel.Conversation(notebook=job.notebook, grading_cells=cells,
                                keys={exercise: "key" for exercise in job.checks})
    for cell in ["cell-000", *cells]:
        talk._handle({"type": "cell", "id": cell, "index": 0})
        talk._handle({"type": "ran", "entry": {"id": cell, "status": "ok"}})
    for note in notes:
        talk._handle({"type": "hint", "cell": "cell-000", "hint": note})
    talk._handle({"type": "done"})
    score.score(sub, job, talk, timeout=60, wall_killed=False)
    return sub, talk


def test_the_reports_say_which_levels_were_opened_and_points_stay(lesson_one, monkeypatch,
                                                                  tmp_path):
    monkeypatch.setattr(score, "_judge_record", lambda ex, job, talk, sub: ("pass", ""))
    exercise = "gpu-flash/flash-attention"
    forged = [{"exercise": exercise, "level": 0}, {"exercise": exercise, "level": "3"},
              {"exercise": exercise, "level": True}, {"exercise": "gpu-flash/q9", "level": 1},
              {"exercise": exercise, "level": 7}, "not a note", {"record": {}}]
    plain, _ = _graded(lesson_one, [])
    hinted, talk = _graded(lesson_one, [{"exercise": exercise, "level": 1},
                                        {"exercise": exercise, "level": 2},
                                        {"exercise": exercise, "level": 1}, *forged])
    assert talk.records == {} and talk.flags == []  # a note is no record and no tampering
    assert talk.hints == {exercise: {1, 2, 7}}  # 7: within the channel's bound, not the lesson's
    assert (hinted.earned, hinted.status) == (plain.earned, plain.status) == (10, "PASS")
    assert [(i.status, i.earned) for i in hinted.exercises] == \
        [(i.status, i.earned) for i in plain.exercises]
    item = next(i for i in hinted.exercises if i.id == exercise)
    assert (item.hints_opened, item.hints_total) == ([1, 2], 3)
    assert all(i.hints_opened == [] for i in plain.exercises)
    assert "[hints opened: 2 of 3]" in report.submission_text(hinted)
    assert "hints opened" not in report.submission_text(plain)
    report.write_all([hinted], tmp_path, timeout=60, jobs=1)
    results = json.loads((tmp_path / "results.json").read_text())
    shown = {i["id"]: (i["hints_opened"], i["hints_total"])
             for i in results["submissions"][0]["exercises"]}
    assert shown[exercise] == ([1, 2], 3) and shown["gpu-flash/q1-memory"] == ([], 0)
    assert "hints opened: 2 of 3" in (tmp_path / "progress.html").read_text()


def test_levels_opened_out_of_order_are_named():
    from flashcourse.grader.submission import ExerciseResult

    item = ExerciseResult("x/y", "Y", "code", 4, hints_opened=[3], hints_total=3)
    assert report.hints_text(item) == "hints opened: 1 of 3 (level 3)"
    item.hints_opened = [1, 3]
    assert report.hints_text(item) == "hints opened: 2 of 3 (levels 1, 3)"
    item.hints_opened = []
    assert report.hints_text(item) == ""
