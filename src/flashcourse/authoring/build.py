"""Generate the student notebook, the solution notebook and the book page of every lesson from
its one source, `lessons/NN-slug.qmd`.

Solution regions in code cells are marked in the source:

* a line ending in `# BLANK` (or `# BLANK: comment`) becomes `target = ______` in the exercise
  (for an assignment) or `"key": ______,` (for a dict entry);
* lines between `# BEGIN SOLUTION` and `# END SOLUTION` become `raise NotImplementedError(...)`.

Cell options `#| id: name` (stable cell id, used for grading cells) and `#| tags: [a, b]`
(notebook cell tags, e.g. nbval markers) belong to the generator; other `#|` options are Quarto's
and are kept for the book page only.

Text meant only for the notebooks ("Run the next cell first.") is marked in markdown as a span,
`[text]{.notebook-only}`, or as a block between `::: {.notebook-only}` and `:::`. The notebooks
keep the text without the marks; the book page leaves it out. The book page also drops `______`
from `from flashcourse import ...` lines: only the exercises use it.

An exercise's hints are a block `::: {.hints exercise="lesson/exercise"}` after its code cell,
a numbered list of 2-3 levels. The book page shows them as nested collapsed callouts before the
reference answer; the notebooks get only a line naming `fc.hint(...)`, which reads the levels
at run time from `src/flashcourse/hints/NN-slug.json`, generated here.

Every edition is built here, the English and each translation (`editions.py`): the build's own
words go through `_()` with the edition's language forced.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .. import i18n
from ..i18n import _
from ..paths import FRONT_MATTER, TITLE_LINE
from . import catalogs, editions, learning_path, results_table, translation

LESSONS_DIR = "lessons"
OUTPUT_DIRS = {"exercise": "exercises", "solution": "solutions", "book": "book"}
PRIVATE_OPTIONS = {"id", "tags"}

BLANK_MARK = re.compile(r"\s*# BLANK(?::\s*(?P<comment>.*))?$")
ASSIGNMENT = re.compile(r"^(?P<head>\s*[\w\[\], .]+?\s*(?:[-+*/]?=)\s*)(?P<answer>.+)$")
DICT_ENTRY = re.compile(r"^(?P<head>\s*(?:\"[^\"]*\"|'[^']*')\s*:\s*)(?P<answer>.+?)(?P<tail>,?)$")
BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
# Reference answers: a Quarto callout with the extra class `.answers`, collapsed on the book page,
# kept in the solution notebook, left out of the exercise notebook.
ANSWERS_BLOCK = re.compile(r"^:::+\s*\{[^}]*\.answers\b[^}]*\}\s*$")
# Lab notes: measured detail behind a lesson's summary table, a collapsed callout with the class
# `.lab-notes` and a `## title` line; a notebook shows it as an HTML <details> block.
LAB_NOTES_BLOCK = re.compile(r"^:::+\s*\{[^}]*\.lab-notes\b[^}]*\}\s*$")
# Cells that run or check the student's code raise while a blank is unfilled: in the exercise
# notebook they carry the tag `raises-exception`, so JupyterLab's Run All goes on to the end.
# The solution notebook has no such tag, so strict nbval still fails on any error there.
RUNS_ON_TO_END_PREFIXES = ("try-", "check-")
RAISES_EXCEPTION = "raises-exception"
NOTEBOOK_ONLY_SPAN = re.compile(r"\[(?P<text>[^\[\]]*)\]\{\.notebook-only\}")
NOTEBOOK_ONLY_BLOCK = re.compile(r"^:::+\s*\{\.notebook-only\}\s*$")
# Book-only: an interactive diagram placed with a line of its own, `<!-- interactive: NAME -->`
# (figures/interactive.py; the page gets its OJS cell), and any ```{ojs} cell of the lesson. OJS
# runs in the reader's browser; the notebooks have no use for it and leave it out.
INTERACTIVE_MARK = re.compile(r"^<!--\s*interactive:\s*(?P<name>[a-z0-9-]+)\s*-->$")
OJS_FENCE = "```{ojs}"
INTERACTIVE_DATA = "data"  # book/data/NAME.json: the tables the diagrams load
BLANK_IMPORT = re.compile(
    r"^(?P<head>\s*from flashcourse import )(?P<names>[^#]*?)\s*(?P<comment>#.*)?$")


# `::: {#open-q1 .open-answer}` ... `:::`: the markdown cell `open-q1`, where the student answers
# an explanation question in words (the grader collects cells whose ids start with `open-`).
OPEN_ANSWER_DIV = re.compile(r"^:::+\s*\{#(open-[A-Za-z0-9_-]+)(?:\s[^}]*)?\}$")
# Its points are an attribute, `::: {#open-q1 .open-answer points="2"}`, and its rubric the
# paragraph `**Rubric (2 points):** 1 point: ...` inside the `.answers` callout right after it:
# the grader lists both in open-answers.csv for the instructor who scores the answers.
OPEN_POINTS = re.compile(r'(?:^|\s)points=(?:"(?P<quoted>[^"]*)"|(?P<bare>[^\s}]*))')
POINTS_NUMBER = re.compile(r"\d+(?:\.\d+)?")
RUBRIC_START = re.compile(r"^\*\*(?:Rubric \((?P<points>[^)]*?) points?\):|"
                          r"评分标准（(?P<points_zh>[^）]*?)\s*分）：)\*\*\s*(?P<text>.*)$")
QUESTION_START = re.compile(r"^\*\*(?P<label>Q\d+)\.\*\*\s*(?P<text>.*)$")
TITLE_CHARS = 100  # of a question's title: its first sentence, cut

# `::: {.hints exercise="roofline/copy-kernel"}`, then `1. ...`, `2. ...`, then `:::`: the hint
# levels of the exercise whose code cell comes before it (the concept, the relation, the shape
# of the code). Never text of the notebooks: `fc.hint` reads them from HINTS_DIR's JSON.
HINTS_DIV = re.compile(r'^:::+\s*\{\.hints\s+exercise="(?P<exercise>[^"]+)"\s*\}$')
HINT_LEVEL = re.compile(r"^(?P<number>\d+)\.\s+(?P<text>.*)$")
HINT_LEVELS = (2, 3)  # fewest and most levels of one exercise
HINTS_DIR = Path("src") / "flashcourse" / "hints"
GRADING_CALL = re.compile(r"""^\s*check\(\s*["'](?P<exercise>[^"']+)["']""", re.M)


class LessonSourceError(ValueError):
    """The lesson source breaks a rule of the generator; the message names file and line."""


@dataclass
class Cell:
    kind: str  # "markdown" or "code"
    source: str  # text without generator options
    options: dict[str, str] = field(default_factory=dict)  # every `#|` option, raw text
    option_lines: list[str] = field(default_factory=list)  # Quarto's own `#|` lines
    book_source: str | None = None  # markdown for the book page, where it differs from source

    @property
    def has_solution(self) -> bool:
        return self.kind == "code" and (BEGIN in self.source or "# BLANK" in self.source)


@dataclass(frozen=True)
class HintBlock:
    """The hint levels of one exercise, attached to its code cell."""
    exercise: str  # the id its grading cell checks, e.g. "roofline/copy-kernel"
    levels: tuple[str, ...]  # markdown, level 1 first
    cell_index: int  # of the exercise's code cell in Lesson.cells
    line: int  # of the block's first line in the source


@dataclass
class Lesson:
    path: Path
    title: str
    cells: list[Cell]
    # the front matter's `needs`, `skills` and `time`: what to know first, and how long it takes
    needs: list[int] = field(default_factory=list)  # lesson numbers
    skills: str = ""  # knowledge beyond the lessons, in words
    time: str = ""  # e.g. "about 3 h"
    hints: list[HintBlock] = field(default_factory=list)  # in the lesson's order

    @property
    def slug(self) -> str:
        return self.path.stem


def parse(path: Path, text: str | None = None) -> Lesson:
    """Split a lesson .qmd into markdown and ```{python} cells. `text`: the source in another
    language (translation.translated_source), parsed as if it were the file at `path`."""
    text = path.read_text(encoding="utf-8") if text is None else text
    if path.stem[:2].isdigit():  # the lesson's table of recorded results, from its CSVs
        text = results_table.with_summary(text, path.parent.parent / "assets" / "results",
                                          int(path.stem[:2]))
    match = FRONT_MATTER.match(text)
    if not match:
        raise LessonSourceError(f"{path}: starts without a --- front matter block with a title")
    title_match = TITLE_LINE.search(match.group(1))
    if not title_match:
        raise LessonSourceError(f"{path}: the front matter has no title")
    body = text[match.end():]
    cells: list[Cell] = []
    markdown: list[str] = []
    lines = body.splitlines()
    index = 0
    hints: list[HintBlock] = []
    first_body_line = text[:match.end()].count("\n") + 1
    while index < len(lines):
        line = lines[index]
        hinted = HINTS_DIV.match(line.strip())
        if hinted:
            _flush_markdown(markdown, cells, path)
            index = _hint_block(lines, index, hinted.group("exercise"), cells, hints, path,
                                first_body_line)
            continue
        if line.strip() == "```{python}":
            _flush_markdown(markdown, cells, path)
            end = index + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                raise LessonSourceError(f"{path}:{index + 1}: code cell is never closed")
            cells.append(_code_cell(lines[index + 1:end], path, index + 2))
            index = end + 1
            continue
        opened = OPEN_ANSWER_DIV.match(line.strip())
        if opened:  # a cell of its own, with a stable id, where the student writes an answer
            _flush_markdown(markdown, cells, path)
            end = index + 1
            while end < len(lines) and lines[end].strip() != ":::":
                end += 1
            if end == len(lines):
                raise LessonSourceError(f"{path}:{index + 1}: open-answer block is never closed")
            inner = "\n".join(lines[index + 1:end]).strip("\n")
            cells.append(Cell("markdown", inner, options={"id": opened.group(1)},
                              book_source="\n".join(lines[index:end + 1])))
            index = end + 1
            continue
        markdown.append(line)
        index += 1
    _flush_markdown(markdown, cells, path)
    _check_hint_targets(hints, cells, path)
    return Lesson(path, title_match.group(1), cells, **learning_path.front_matter(
        match.group(1), path), hints=hints)


def hint_call_text(exercise: str, levels: int) -> str:
    """The notebooks' line in place of a hints block."""
    return _('Stuck? `fc.hint("{exercise}")` in a cell of your own shows a hint, one level at '
             "a time ({levels} levels: the idea, then how the quantities relate, then the shape "
             "of the code).").format(exercise=exercise, levels=levels)


def _hint_block(lines: list[str], start: int, exercise: str, cells: list[Cell],
                hints: list[HintBlock], path: Path, first_body_line: int) -> int:
    """Read the hints block opened at lines[start]; attach it to the exercise's code cell (the
    last cell with a solution before it) and leave the notebooks their `fc.hint` line. Returns
    the index of the line after the block."""
    where = f"{path}:{first_body_line + start}"
    end = start + 1
    while end < len(lines) and not re.match(r"^:::+\s*$", lines[end].strip()):
        if lines[end].strip().startswith(":::"):
            raise LessonSourceError(f"{where}: a hints block holds no other block")
        end += 1
    if end == len(lines):
        raise LessonSourceError(f"{where}: the hints block of {exercise} is never closed (`:::`)")
    levels: list[list[str]] = []
    for line in lines[start + 1:end]:
        level = HINT_LEVEL.match(line.strip())
        if level and int(level.group("number")) == len(levels) + 1:
            levels.append([level.group("text")])
        elif level or (line.strip() and not levels):
            raise LessonSourceError(
                f"{where}: the hints of {exercise} must be a numbered list 1., 2., 3. (one "
                f"level per item), not {line.strip()[:60]!r}")
        elif line.strip():
            levels[-1].append(line.strip())
    texts = tuple(" ".join(" ".join(level).split()) for level in levels)
    fewest, most = HINT_LEVELS
    if not fewest <= len(texts) <= most or not all(texts):
        raise LessonSourceError(f"{where}: {exercise} has {len(texts)} hint levels; give "
                                f"{fewest} to {most}, none empty")
    owner = next((number for number in range(len(cells) - 1, -1, -1)
                  if cells[number].has_solution), None)
    owner_id = "" if owner is None else cells[owner].options.get("id", "")
    if not owner_id.startswith("exercise-"):
        raise LessonSourceError(f"{where}: the hints of {exercise} must come after its exercise "
                                "cell (`#| id: exercise-...`), the last cell with a solution "
                                "before them")
    if any(block.cell_index == owner or block.exercise == exercise for block in hints):
        raise LessonSourceError(f"{where}: a second hints block for {exercise} or {owner_id}")
    hints.append(HintBlock(exercise, texts, owner, first_body_line + start))
    call = hint_call_text(exercise, len(texts))
    cell_id = "hints-" + owner_id.removeprefix("exercise-")  # a stable id, like its exercise's
    cells.append(Cell("markdown", call, options={"id": cell_id, "hints": exercise},
                      book_source=""))
    return end + 1


def _check_hint_targets(hints: list[HintBlock], cells: list[Cell], path: Path) -> None:
    """Each hints block names an exercise that a grading cell of the lesson checks."""
    checked = {match.group("exercise") for cell in cells if cell.kind == "code"
               for match in GRADING_CALL.finditer(cell.source)}
    for block in hints:
        if block.exercise not in checked:
            raise LessonSourceError(
                f"{path}:{block.line}: the hints name {block.exercise!r}, which no grading "
                "cell of this lesson checks; use the id of its `check(...)` call")


def _flush_markdown(markdown: list[str], cells: list[Cell], path: Path) -> None:
    text = "\n".join(markdown).strip("\n")
    markdown.clear()
    if text.strip():
        notebook, book = _split_notebook_only(text, path)
        cells.append(Cell("markdown", notebook, book_source=book if book != notebook else None))


def _split_notebook_only(text: str, path: Path) -> tuple[str, str]:
    """The notebooks' text (notebook-only marks removed) and the book's (marked text removed)."""
    notebook: list[str] = []
    book: list[str] = []
    in_block = in_ojs = book_only = False
    for line in text.splitlines():
        if in_ojs or line.strip() == OJS_FENCE or INTERACTIVE_MARK.match(line.strip()):
            if in_block:
                raise LessonSourceError(f"{path}: an OJS cell or interactive diagram sits in a "
                                        "notebook-only block, where the book never shows it")
            book_only = True
            mark = INTERACTIVE_MARK.match(line.strip())
            book.append(_interactive_cell(mark.group("name"), path) if mark else line)
            in_ojs = (in_ojs or line.strip() == OJS_FENCE) and not (in_ojs and
                                                                     line.strip() == "```")
            continue
        if NOTEBOOK_ONLY_BLOCK.match(line.strip()):
            if in_block:
                raise LessonSourceError(f"{path}: a notebook-only block opens inside another")
            in_block = True
            continue
        if in_block and line.strip().startswith(":::"):
            in_block = False
            continue
        notebook.append(NOTEBOOK_ONLY_SPAN.sub(r"\g<text>", line))
        shown = NOTEBOOK_ONLY_SPAN.sub("", line)
        if shown != line:  # a span left out: tidy the spaces around it, drop an emptied line
            indent = line[: len(line) - len(line.lstrip())]
            shown = indent + " ".join(shown.split()) if shown.strip() else None
        if not in_block and shown is not None:
            book.append(shown)
    if in_block:
        raise LessonSourceError(f"{path}: a notebook-only block is never closed (`:::`)")
    if in_ojs:
        raise LessonSourceError(f"{path}: an OJS cell is never closed (```)")
    for lines in (notebook, book):
        joined = "\n".join(lines)
        if "notebook-only" in joined:
            near = joined[max(0, joined.index("notebook-only") - 40):][:80]
            raise LessonSourceError(f"{path}: a notebook-only mark is malformed near: {near!r}")
    book_text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", "\n".join(book))
    notebook_text = "\n".join(notebook)
    if book_only:  # the blank lines around what was left out
        notebook_text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", notebook_text)
    return notebook_text.strip("\n"), book_text.strip("\n")


def _interactive_cell(name: str, path: Path) -> str:
    """The OJS cell of the interactive diagram `name`, for the book page."""
    from ..figures import interactive

    try:
        return interactive.ojs_cell(name)
    except KeyError:
        raise LessonSourceError(
            f"{path}: no interactive diagram is called {name!r}; the diagrams are "
            f"{', '.join(interactive.names())} (src/flashcourse/figures/ojs/)") from None


def _code_cell(lines: list[str], path: Path, first_line: int) -> Cell:
    options: dict[str, str] = {}
    quarto_lines: list[str] = []
    body_start = 0
    for body_start, line in enumerate(lines):  # noqa: B007  (the index is used after the loop)
        if not line.startswith("#|"):
            break
        key, _, value = line[2:].partition(":")
        options[key.strip()] = value.strip()
        if key.strip() not in PRIVATE_OPTIONS:
            quarto_lines.append(line)
    else:
        body_start = len(lines)
    source = "\n".join(lines[body_start:]).strip("\n")
    cell = Cell("code", source, options, quarto_lines)
    _exercise_source(cell, path, first_line)  # validate markers early
    return cell


def _exercise_source(cell: Cell, path: Path, first_line: int = 0) -> str:
    """The student's version of a code cell: answers replaced by blanks or stubs."""
    out: list[str] = []
    in_solution = False
    for offset, line in enumerate(cell.source.splitlines()):
        where = f"{path}:{first_line + offset}"
        stripped = line.strip()
        if stripped == BEGIN:
            if in_solution:
                raise LessonSourceError(f"{where}: nested {BEGIN}")
            in_solution = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# {_('Your code here: replace the next line.')}")
            out.append(f'{indent}raise NotImplementedError("write this function")')
            continue
        if stripped == END:
            if not in_solution:
                raise LessonSourceError(f"{where}: {END} without {BEGIN}")
            in_solution = False
            continue
        if in_solution:
            continue
        mark = BLANK_MARK.search(line)
        if mark:
            out.append(_blank_line(line[: mark.start()], mark.group("comment"), where))
            continue
        out.append(line)
    if in_solution:
        raise LessonSourceError(f"{path}: {BEGIN} is never closed")
    return "\n".join(out)


def _blank_line(code: str, comment: str | None, where: str) -> str:
    entry = DICT_ENTRY.match(code)
    if entry:
        line = f"{entry.group('head')}______{entry.group('tail')}"
    else:
        assignment = ASSIGNMENT.match(code)
        if not assignment:
            raise LessonSourceError(f"{where}: # BLANK needs `target = answer` or `'key': answer`")
        line = f"{assignment.group('head')}______"
    return f"{line}  # {comment}" if comment else line


def _solution_source(cell: Cell) -> str:
    """The full version: markers removed, answers kept."""
    out = []
    for line in cell.source.splitlines():
        if line.strip() in (BEGIN, END):
            continue
        mark = BLANK_MARK.search(line)
        if mark:
            comment = mark.group("comment")
            line = line[: mark.start()] + (f"  # {comment}" if comment else "")
        out.append(line)
    return "\n".join(out)


def _tags(cell: Cell) -> list[str]:
    raw = cell.options.get("tags", "").strip().strip("[]")
    return [t.strip() for t in raw.split(",") if t.strip()]


def _banner(lesson: Lesson, variant: str, lang: str) -> str:
    source = f"`{LESSONS_DIR}/{lesson.path.name}`"
    if lang != i18n.SOURCE_LANGUAGE:  # and its translation
        source += f", `{LESSONS_DIR}/{lang}/{lesson.path.stem}.toml`"
    if variant == "exercise":
        return _(
            "*Exercise notebook, generated from {source} by `python -m flashcourse build`.* "
            "Replace every `______` and every `raise NotImplementedError` in the answer cells, "
            "then run all cells: each check cell tells you what is wrong. Leave the first code "
            "cell (its `______` is the blank itself) and the check cells as they are: the "
            "grader refuses a notebook whose setup or check cells were changed."
        ).format(source=source)
    return _(
        "*Solution notebook, generated from {source} by `python -m flashcourse build`: "
        "do not edit it; edit the lesson source and rebuild.*"
    ).format(source=source)


def _notebook_markdown(text: str, variant: str, path: Path) -> str:
    """A markdown cell for a notebook: blocks `::: {.callout-... .answers}` ... `:::` (reference
    answers, collapsed on the book page) are left out of the exercise notebook; the solution
    notebook keeps their text without the fence lines. Lab notes become <details> blocks."""
    text = _lab_notes_as_details(text, path)
    if not any(ANSWERS_BLOCK.match(line.strip()) for line in text.splitlines()):
        return text
    out: list[str] = []
    depth = 0  # fenced divs open inside an answers block
    for line in text.splitlines():
        stripped = line.strip()
        if depth == 0 and ANSWERS_BLOCK.match(stripped):
            depth = 1
            continue
        if depth:
            if re.match(r"^:::+\s*\{", stripped):
                depth += 1
            elif re.match(r"^:::+\s*$", stripped):
                depth -= 1
                if depth == 0:
                    continue
            if variant == "exercise":
                continue
        out.append(line)
    if depth:
        raise LessonSourceError(f"{path}: an answers block is never closed (`:::`)")
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", "\n".join(out)).strip("\n")


def _lab_notes_as_details(text: str, path: Path) -> str:
    """`::: {.callout-note .lab-notes}`, `## title`, body, `:::` -> <details> with a summary
    (JupyterLab renders it collapsed; it shows fenced divs as plain text)."""
    lines = text.splitlines()
    if not any(LAB_NOTES_BLOCK.match(line.strip()) for line in lines):
        return text
    out: list[str] = []
    index = 0
    while index < len(lines):
        if not LAB_NOTES_BLOCK.match(lines[index].strip()):
            out.append(lines[index])
            index += 1
            continue
        end = _block_end(lines, index, path)
        body = lines[index + 1:end]
        while body and not body[0].strip():
            body = body[1:]
        if not body or not body[0].startswith("## "):
            raise LessonSourceError(f"{path}: lab notes start with a `## title` line")
        out += ["<details>", f"<summary><b>{body[0][3:].strip()}</b></summary>", "",
                *body[1:], "", "</details>"]
        index = end + 1
    return "\n".join(out)


def to_notebook(lesson: Lesson, variant: str,
                lang: str = i18n.SOURCE_LANGUAGE) -> nbformat.NotebookNode:
    """The exercise or solution notebook of a lesson parsed in `lang` (its edition's language,
    kept in the metadata, where the course's messages read it)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "flashcourse": {"lang": lang},
    }
    start = learning_path.before_you_start(lesson, book=False)
    title = nbformat.v4.new_markdown_cell(f"# {lesson.title}\n\n{_banner(lesson, variant, lang)}"
                                          + (f"\n\n{start}" if start else ""))
    title.id = "title"
    nb.cells.append(title)
    used_ids = {"title"}
    for number, cell in enumerate(lesson.cells):
        cell_id = cell.options.get("id") or f"cell-{number:03d}"
        if cell_id in used_ids:
            raise LessonSourceError(f"{lesson.path}: cell id {cell_id!r} is used twice")
        used_ids.add(cell_id)
        if cell.kind == "markdown":
            text = _notebook_markdown(cell.source, variant, lesson.path)
            if not text.strip():
                continue
            new = nbformat.v4.new_markdown_cell(text)
        else:
            text = _exercise_source(cell, lesson.path) if variant == "exercise" \
                else _solution_source(cell)
            new = nbformat.v4.new_code_cell(text)
            tags = _tags(cell)
            if variant == "exercise" and cell_id.startswith(RUNS_ON_TO_END_PREFIXES):
                tags = [*tags, RAISES_EXCEPTION]
            if tags:
                new.metadata["tags"] = tags
        new.id = cell_id
        nb.cells.append(new)
    nbformat.validate(nb)
    return nb


SCORECARD_CALL = re.compile(r"^\s*fc\.scorecard\(", re.M)


def to_book_page(lesson: Lesson, answers: bool = True, language_switch: str = "") -> str:
    """A Quarto page: each exercise as the student sees it, then the reference answer in a
    collapsed callout. `answers=False` (the class edition's book): no reference answers, in
    code or in prose, and no code cell that runs. `language_switch`: the page's first line, a
    link to the same page in the other language (editions.switch_line)."""
    parts = [
        "---",
        f"title: {json.dumps(lesson.title)}",
        "---",
        "",
        f"<!-- Generated from {LESSONS_DIR}/{lesson.path.name} by `python -m flashcourse build`;"
        " do not edit. -->",
        "",
    ]
    parts += [language_switch, ""] if language_switch else []
    start = learning_path.before_you_start(lesson, book=True)
    parts += [start, ""] if start else []
    hints = {block.cell_index: block for block in lesson.hints}
    for number, cell in enumerate(lesson.cells):
        if cell.kind == "markdown":
            text = cell.source if cell.book_source is None else cell.book_source
            if not answers:
                text = _notebook_markdown(text, "exercise", lesson.path)
            parts += [text, ""] if text.strip() else []
            continue
        options = list(cell.option_lines)
        if not answers:  # shown as the exercise notebook holds it, not run
            source = _exercise_source(cell, lesson.path) if cell.has_solution else cell.source
            parts += ["```{python}", "#| eval: false", *options, source, "```", ""]
            parts += hint_callouts(hints[number]) if number in hints else []
            continue
        if cell.has_solution:
            parts += ["```{python}", "#| eval: false", *options,
                      _exercise_source(cell, lesson.path), "```", ""]
            parts += hint_callouts(hints[number]) if number in hints else []
            parts += ['::: {.callout-tip collapse="true"}', f"## {_('Reference answer')}", "",
                      "```{python}", *options, _without_blank_import(_solution_source(cell)),
                      "```", "", ":::", ""]
        else:
            if SCORECARD_CALL.search(cell.source):  # its next-lesson link is for notebooks;
                options.append("#| output: false")  # the book has its own navigation
            parts += ["```{python}", *options, _without_blank_import(cell.source), "```", ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def hint_callouts(block: HintBlock) -> list[str]:
    """The book's lines of one exercise's hints: "Hint 1" collapsed, holding its text and a
    collapsed "Hint 2", and so on; the outer fences are longer, so each closes its own."""
    count = len(block.levels)
    opening, closing = [], []
    for level, text in enumerate(block.levels, start=1):
        fence = ":" * (3 + count - level)
        opening += [f'{fence} {{.callout-note .hint collapse="true"}}',
                    "## " + _("Hint {level} of {count}").format(level=level, count=count), "",
                    text, ""]
        closing = [fence, "", *closing]
    return opening + closing


def _without_blank_import(source: str) -> str:
    """`from flashcourse import ______, check` becomes `from flashcourse import check`: the
    blank is for the exercises, and the book page runs the answers."""
    out = []
    for line in source.splitlines():
        match = BLANK_IMPORT.match(line)
        names = match.group("names").split(",") if match else []
        if match and "______" in [n.strip() for n in names]:
            kept = [n.strip() for n in names if n.strip() not in ("______", "")]
            if not kept:
                continue
            comment = match.group("comment") or ""
            tail = f"  {comment}" if comment and "______" not in comment else ""
            line = f"{match.group('head')}{', '.join(kept)}{tail}"
        out.append(line)
    return "\n".join(out)


@dataclass(frozen=True)
class OpenQuestion:
    """The written part of a question: what it is worth and how the instructor scores it."""
    points: float
    rubric: str  # the rubric paragraph, without its `**Rubric (N points):**` head
    title: str  # "Q1. " and the first sentence of the nearest question paragraph above it


def open_questions(lesson: Lesson) -> dict[str, OpenQuestion]:
    """{cell id: OpenQuestion} of every open-answer block of the lesson, in order. Raises
    LessonSourceError naming file and line when a block has no points or points that are not a
    number, or when the `.answers` callout right after it is missing or has no rubric."""
    path = lesson.path
    lines = path.read_text(encoding="utf-8").splitlines()
    found: dict[str, OpenQuestion] = {}
    title = ""
    index = 0
    while index < len(lines):
        stripped = lines[index].strip()
        if stripped == "```{python}":  # nothing in code is a question
            while index + 1 < len(lines) and lines[index + 1].strip() != "```":
                index += 1
            index += 2
            continue
        if ANSWERS_BLOCK.match(stripped):  # a reference answer's **Q1.** is no question
            index = _block_end(lines, index, path) + 1
            continue
        question = QUESTION_START.match(stripped)
        if question:
            title = _question_title(lines, index, question)
        opened = OPEN_ANSWER_DIV.match(stripped)
        if not opened:
            index += 1
            continue
        cell_id = opened.group(1)
        points = _open_points(stripped, cell_id, f"{path}:{index + 1}")
        end = _block_end(lines, index, path)
        callout = end + 1
        while callout < len(lines) and not lines[callout].strip():
            callout += 1
        if callout == len(lines) or not ANSWERS_BLOCK.match(lines[callout].strip()):
            raise LessonSourceError(
                f"{path}:{index + 1}: open-answer block {cell_id} is not followed by its "
                "`.answers` callout, which holds the reference answer and its rubric")
        callout_end = _block_end(lines, callout, path)
        rubric = _rubric(lines, callout, callout_end, points, cell_id, path)
        found[cell_id] = OpenQuestion(points, rubric, title or cell_id)
        index = callout_end + 1
    return found


def _block_end(lines: list[str], start: int, path: Path) -> int:
    """The index of the `:::` line that closes the fenced div opened at `start`."""
    depth = 0
    for index in range(start, len(lines)):
        stripped = lines[index].strip()
        if re.match(r"^:::+\s*\{", stripped):
            depth += 1
        elif re.match(r"^:::+\s*$", stripped):
            depth -= 1
            if depth == 0:
                return index
    raise LessonSourceError(f"{path}:{start + 1}: this block is never closed (`:::`)")


def _open_points(line: str, cell_id: str, where: str) -> float:
    attribute = OPEN_POINTS.search(line[line.index("{"):])
    if attribute is None:
        raise LessonSourceError(
            f"{where}: open-answer block {cell_id} has no points: write "
            f'`::: {{#{cell_id} .open-answer points="2"}}`')
    raw = attribute.group("quoted") if attribute.group("quoted") is not None \
        else attribute.group("bare")
    if not POINTS_NUMBER.fullmatch(raw.strip()) or float(raw) <= 0:
        raise LessonSourceError(
            f"{where}: the points of open-answer block {cell_id} must be a number above 0, "
            f"not {raw!r}")
    return float(raw)


def _rubric(lines: list[str], start: int, end: int, points: float, cell_id: str,
            path: Path) -> str:
    """The text of the `**Rubric (N points):**` paragraph between lines start and end."""
    for index in range(start + 1, end):
        head = RUBRIC_START.match(lines[index].strip())
        if not head:
            continue
        said = (head.group("points") or head.group("points_zh")).strip()
        if not POINTS_NUMBER.fullmatch(said) or float(said) != points:
            raise LessonSourceError(
                f"{path}:{index + 1}: the rubric of {cell_id} says {said!r} points, its "
                f"open-answer block {points:g}")
        paragraph = [head.group("text")]
        for line in lines[index + 1:end]:
            if not line.strip():
                break
            paragraph.append(line.strip())
        text = " ".join(" ".join(paragraph).split())
        if not text:
            raise LessonSourceError(f"{path}:{index + 1}: the rubric of {cell_id} is empty")
        return text
    raise LessonSourceError(
        f"{path}:{start + 1}: the answers callout of {cell_id} has no rubric paragraph: add "
        f"`**Rubric ({points:g} points):** 1 point: ...; 1 point: ...` to it")


def _question_title(lines: list[str], index: int, question: re.Match) -> str:
    """`Q1. ` and the first sentence of the question paragraph starting at `index`, cut."""
    words = [question.group("text")]
    for line in lines[index + 1:]:
        if not line.strip():
            break
        words.append(line.strip())
    text = " ".join(" ".join(words).split())
    sentence = re.match(r"^.*?[?.](?=\s|$)", text)
    title = f"{question.group('label')}. {sentence.group() if sentence else text}"
    return title if len(title) <= TITLE_CHARS else title[:TITLE_CHARS - 3] + "..."


def lesson_paths(root: Path) -> list[Path]:
    return sorted((root / LESSONS_DIR).glob("[0-9][0-9]-*.qmd"))


def rendered(root: Path) -> dict[Path, str]:
    """Every generated file with the text it must hold, in every edition."""
    files: dict[Path, str] = {}
    english: list[Lesson] = []
    for lang in editions.LANGUAGES:
        with i18n.language(lang):  # the build's own words in the edition's language
            files.update(_edition(root, lang, english))
    files.update(interactive_data(root))
    readme = root / "README.md"
    readme_text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    if results_table.BEGIN in readme_text:
        files[readme] = results_table.readme_with_table(readme_text, root / "assets" / "results")
    return files


def _edition(root: Path, lang: str, english: list[Lesson]) -> dict[Path, str]:
    """The notebooks, book pages, hint levels, home page and glossary of the edition in `lang`;
    `english`: the English lessons, filled by the English edition, which is built first."""
    files: dict[Path, str] = {}
    book_lessons = []
    for number, path in enumerate(lesson_paths(root)):
        lesson = parse(path, editions.source_text(path, lang, book=False))
        book_lesson = parse(path, editions.source_text(path, lang, book=True)) \
            if lang != i18n.SOURCE_LANGUAGE else lesson
        if lang == i18n.SOURCE_LANGUAGE:
            open_questions(lesson)  # every open answer has its points and rubric, or it stops
            english.append(lesson)
        book_lessons.append(book_lesson)
        for variant in ("exercise", "solution"):
            target = root / editions.folder(OUTPUT_DIRS[variant], lang) / f"{lesson.slug}.ipynb"
            files[target] = nbformat.writes(to_notebook(lesson, variant, lang)) + "\n"
        page = editions.folder(OUTPUT_DIRS["book"], lang) / f"{lesson.slug}.qmd"
        files[root / page] = editions.rebased_page(
            to_book_page(book_lesson, language_switch=editions.switch_line(page, lang)), lang)
        levels = hints_json(lesson, english[number] if lang != i18n.SOURCE_LANGUAGE else None)
        if levels:
            files[root / editions.folder(str(HINTS_DIR), lang) / f"{lesson.slug}.json"] = levels
    files.update(_home_page(root, lang, book_lessons))
    if (root / translation.GLOSSARY).exists():
        glossary = editions.folder(OUTPUT_DIRS["book"], lang) / f"{editions.GLOSSARY_PAGE}.qmd"
        files[root / glossary] = editions.glossary_page(root, lang)
    return files


def _home_page(root: Path, lang: str, lessons: list[Lesson]) -> dict[Path, str]:
    """The book's home page: the English index.qmd with its map of the path; a translation's
    from the index's translation, with its own map and its switch to the English."""
    index = root / editions.BOOK_INDEX
    text = index.read_text(encoding="utf-8") if index.exists() else ""
    if learning_path.BEGIN not in text:
        return {}
    folder = editions.folder(OUTPUT_DIRS["book"], lang).as_posix()
    if lang == i18n.SOURCE_LANGUAGE:
        return {index: learning_path.index_with_map(text, lessons, folder)}
    text = editions.source_text(index, lang, book=True)
    text = text.replace(f"]({OUTPUT_DIRS['book']}/", f"]({folder}/")  # its links to the pages
    text = learning_path.index_with_map(text, lessons, folder)
    head, body = text.split("\n---\n", 1)
    generated = (f"<!-- Generated from {editions.BOOK_INDEX} and "
                 f"{LESSONS_DIR}/{lang}/{index.stem}.toml by `python -m flashcourse build`; do "
                 "not edit. -->")
    return {root / editions.book_index(lang):
            f"{head}\n---\n\n{generated}\n\n{editions.index_switch_line(lang)}\n{body}"}


def hints_json(lesson: Lesson, english: Lesson | None = None) -> str:
    """The hints file `fc.hint` reads: every exercise's levels, in the lesson's order. For a
    translation (`english`: the same lesson in English), only the exercises whose levels are
    translated ("" when none are): `fc.hint` shows the others in English, saying so."""
    original = {block.exercise: block.levels for block in english.hints} if english else {}
    exercises = {block.exercise: list(block.levels) for block in lesson.hints
                 if block.levels != original.get(block.exercise)}
    if not exercises:
        return ""
    data = {"source": f"{LESSONS_DIR}/{lesson.path.name}", "exercises": exercises}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def interactive_data(root: Path) -> dict[Path, str]:
    """The tables the book's interactive diagrams load, exported from the package's models."""
    from ..figures import interactive

    return interactive.data_files(root / OUTPUT_DIRS["book"] / INTERACTIVE_DATA)


def build(root: Path) -> list[Path]:
    written = catalogs.write(root)  # the message catalogs: .po updated, .mo compiled,
    i18n.reload()  # then read again: the editions' own words come from them
    for path, text in rendered(root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def stale_files(root: Path) -> list[Path]:
    """Generated files that are missing or differ from what their source gives."""
    expected = rendered(root)
    stale = [p for p, text in expected.items()
             if not p.exists() or p.read_text(encoding="utf-8") != text]
    for lang in editions.LANGUAGES:  # generated files whose lesson was deleted
        for variant_dir in OUTPUT_DIRS.values():
            for suffix in ("*.ipynb", "*.qmd"):
                stale += [p for p in (root / editions.folder(variant_dir, lang)).glob(suffix)
                          if p not in expected]
        stale += [p for p in (root / editions.folder(str(HINTS_DIR), lang)).glob("*.json")
                  if p not in expected]
    stale += [p for p in (root / OUTPUT_DIRS["book"] / INTERACTIVE_DATA).glob("*.json")
              if p not in expected]  # a table no diagram exports any more
    stale += catalogs.stale(root)
    return sorted(stale)
