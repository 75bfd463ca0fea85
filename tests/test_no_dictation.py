"""No sentence, note or message beside an exercise gives the line its answer needs.

For every exercise cell of every lesson, the answer of each `# BLANK` line and each line of a
`# BEGIN SOLUTION` body (comments and whitespace removed; at least MIN_CHARS left) must not
appear, whitespace removed, in what a student reads: the lesson's prose in the exercise
notebook, the comments and docstrings of its code cells, the levels `fc.hint` shows, the
self-check file's questions and hints, and every message the checks can print (each string
literal under `checks/` that is not a docstring), and the same in each translated edition (its
exercise notebooks, its hint levels, its catalogs' messages). A hit is dictation: the text hands
over the line instead of teaching it.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

import nbformat
import pytest

from flashcourse.authoring import build, catalogs
from flashcourse.i18n import TRANSLATED

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "src" / "flashcourse" / "checks"
SELF_CHECKS = CHECKS / "self_checks"
MIN_CHARS = 8  # shorter answers (`m_new`, `0.0`) are words, not lines
LESSONS = build.lesson_paths(ROOT)
# The questions' answer cells: their numbers are worked out in the self-check's explanations,
# shown once an answer is wrong (per-student numbers keep them from being copied).
QUESTION_CELLS = ("answer-",)


def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _code_part(line: str) -> str:
    """The line without its comment (a `#` outside string quotes)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return line.split("#", 1)[0]
    for token in tokens:
        if token.type == tokenize.COMMENT:
            return line.strip()[: token.start[1]]
    return line.strip()


def answers(cell: build.Cell) -> list[str]:
    """The answer texts of one exercise cell, whitespace removed."""
    found, in_body, in_docstring = [], False, False
    for line in cell.source.splitlines():
        stripped = line.strip()
        if stripped in (build.BEGIN, build.END):
            in_body = stripped == build.BEGIN
            continue
        if in_body:
            if stripped.startswith(('"""', "'''")):  # a docstring in the body: prose, not code
                in_docstring = not (in_docstring or stripped.count('"""') == 2)
                continue
            if in_docstring:
                continue
            found.append(squeezed(_code_part(line)).rstrip(","))
            continue
        mark = build.BLANK_MARK.search(line)
        if mark:
            code = line[: mark.start()]
            entry = build.DICT_ENTRY.match(code) or build.ASSIGNMENT.match(code)
            found.append(squeezed(entry.group("answer")).rstrip(","))
    return [text for text in found if len(text) >= MIN_CHARS and not _a_choice(text)]


def _a_choice(answer: str) -> bool:
    """A quoted word: one of the options a question lists for the student to pick from."""
    return re.fullmatch(r"(\"[^\"]*\"|'[^']*')", answer) is not None


def _comments_and_docstrings(source: str) -> list[str]:
    texts = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [source]
    for token in tokens:
        if token.type == tokenize.COMMENT:
            texts.append(token.string)
        elif token.type == tokenize.STRING and token.string.lstrip("rbuf").startswith(
                ('"""', "'''")):
            texts.append(token.string)
    return texts


def student_texts(lesson_path: Path) -> list[tuple[str, str]]:
    """(where, text) of what the exercise notebook shows beside the code itself."""
    lesson = build.parse(lesson_path)
    notebook = build.to_notebook(lesson, "exercise")
    texts = []
    for index, cell in enumerate(notebook.cells):
        where = f"exercises/{lesson.slug}.ipynb cell {cell.get('id', index)}"
        if cell.cell_type == "markdown":
            texts.append((where, cell.source))
        else:
            texts += [(where, text) for text in _comments_and_docstrings(cell.source)]
    texts += [(f"hint {number} of {block.exercise}", text) for block in lesson.hints
              for number, text in enumerate(block.levels, start=1)]  # what fc.hint shows
    toml = SELF_CHECKS / f"{lesson.slug}.toml"
    if toml.exists():
        texts.append((str(toml.relative_to(ROOT)), toml.read_text(encoding="utf-8")))
    if lesson_path.parent == ROOT / build.LESSONS_DIR:  # a course lesson: its editions too
        texts += translated_texts(lesson.slug)
    return texts


def translated_texts(slug: str) -> list[tuple[str, str]]:
    """What each translated edition shows beside the code: its exercise notebook's prose and
    comments and its hint levels (as generated and committed)."""
    texts = []
    for lang in TRANSLATED:
        path = ROOT / "exercises" / lang / f"{slug}.ipynb"
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            where = f"{path.relative_to(ROOT)} cell {cell.get('id', index)}"
            if cell.cell_type == "markdown":
                texts.append((where, cell.source))
            else:
                texts += [(where, text) for text in _comments_and_docstrings(cell.source)]
        hints = ROOT / "src" / "flashcourse" / "hints" / lang / f"{slug}.json"
        if hints.exists():
            for exercise, levels in json.loads(hints.read_text(encoding="utf-8"))[
                    "exercises"].items():
                texts += [(f"{lang} hint {n} of {exercise}", text)
                          for n, text in enumerate(levels, start=1)]
    return texts


def catalog_messages() -> list[tuple[str, str]]:
    """(catalog, text) of every translated message a check can print."""
    found = []
    for lang in TRANSLATED:
        for path in sorted((ROOT / "src" / "flashcourse" / "locale" / lang).glob("*.po")):
            entries = catalogs.parse_po(path.read_text(encoding="utf-8"), path.name)
            found += [(str(path.relative_to(ROOT)), e.msgstr) for e in entries if e.msgstr]
    return found


def _docstring_nodes(tree: ast.AST) -> set[int]:
    nodes = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                nodes.add(id(body[0].value))
    return nodes


def check_messages() -> list[tuple[str, str]]:
    """(file:line, text) of every string a check can print: literals that are not docstrings,
    an f-string's fixed parts joined around `{}`."""
    messages = []
    for path in sorted(CHECKS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstring_nodes(tree)
        inside_fstrings = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                parts = []
                for value in node.values:
                    inside_fstrings.add(id(value))
                    parts.append(value.value if isinstance(value, ast.Constant) else "{}")
                messages.append((f"{path.relative_to(ROOT)}:{node.lineno}", "".join(parts)))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and id(node) not in inside_fstrings):
                messages.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.value))
    return messages


def _exercise_answers(lesson_path: Path) -> list[tuple[str, str]]:
    lesson = build.parse(lesson_path)
    return [(cell.options.get("id", "?"), answer) for cell in lesson.cells
            if cell.has_solution and not cell.options.get("id", "").startswith(QUESTION_CELLS)
            for answer in answers(cell)]


def dictated(lesson_path: Path, messages: list[tuple[str, str]]) -> list[str]:
    texts = [(where, squeezed(text)) for where, text in student_texts(lesson_path)]
    texts += [(where, squeezed(text)) for where, text in messages]
    return [f"{cell_id}: `{answer}` is given in {where}"
            for cell_id, answer in _exercise_answers(lesson_path)
            for where, text in texts if answer in text]


@pytest.fixture(scope="module")
def messages():
    return check_messages() + catalog_messages()


@pytest.mark.parametrize("lesson_path", LESSONS, ids=[path.stem for path in LESSONS])
def test_no_text_beside_an_exercise_gives_its_answer(lesson_path, messages):
    hits = dictated(lesson_path, messages)
    assert not hits, "dictation:\n" + "\n".join(hits)


def test_the_scan_finds_an_answer_in_prose_a_note_and_a_message(tmp_path):
    """A lesson that states its answers in prose, a note and a message is caught each time."""
    lesson = tmp_path / "01-demo.qmd"
    lesson.write_text(
        '---\ntitle: "Demo"\n---\n\nThe head is `kv_h * group + g` here.\n\n'
        "```{python}\n#| id: exercise-demo\n"
        "heads = kv_h * group + g  # BLANK: kv_h * group + g\n"
        "def body():\n    # BEGIN SOLUTION\n    total = tl.sum(p * v, 0)\n"
        "    # END SOLUTION\n```\n", encoding="utf-8")
    hits = dictated(lesson, [("checks/demo.py:1", "write total = tl.sum(p * v, 0) there")])
    assert sorted(hits) == sorted([
        "exercise-demo: `kv_h*group+g` is given in exercises/01-demo.ipynb cell cell-000",
        "exercise-demo: `kv_h*group+g` is given in exercises/01-demo.ipynb cell exercise-demo",
        "exercise-demo: `total=tl.sum(p*v,0)` is given in checks/demo.py:1"]), hits
    clean = tmp_path / "02-clean.qmd"
    clean.write_text(lesson.read_text().replace("`kv_h * group + g` here", "the group's head")
                     .replace("# BLANK: kv_h * group + g", "# BLANK: the query heads"))
    assert dictated(clean, [("checks/demo.py:1", "a sum over the key block")]) == []


def test_answers_are_read_from_blanks_and_bodies():
    cell = build.Cell("code", 'x = compute(a, b)  # BLANK: note\ny = 1  # BLANK\n'
                              'def f():\n    # BEGIN SOLUTION\n    """Doc."""\n'
                              '    total = a + b  # why\n    # END SOLUTION\n')
    assert answers(cell) == ["compute(a,b)", "total=a+b"]
