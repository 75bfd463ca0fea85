"""`./course release OUT`: the class edition, what ships to the students of a graded class.

It is built from this repository (the instructor's tree) into OUT, a git repository ready to
push: the exercise notebooks, the book without reference answers (in code or prose), the
README's two commands and a package in which no function, kernel or data answers an exercise:

- no `solutions/`, no `lessons/` (they hold the answers), no grader;
- no lesson check module (they compute the right outputs) and no self-check file (they hold the
  questions' answers): the notebooks' checks of code replay the visible cases as examples
  (`checks/examples/`, captured from the solutions by `build --examples`), and questions and
  veto statements are recorded and graded on submission (`checks/class_items.py`);
- no package function that computes what an exercise asks for (shipping.ANSWER_FUNCTIONS):
  each is replaced by a stub that answers only the calls the lessons' own cells make.

The instructor grades submissions made from it with `./course grade` in this tree, whose
checks have the references, the hidden cases and the questions' answers.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from . import build, capture, catalogs, shipping

PACKAGE = Path("src/flashcourse")
TEMPLATES = Path(__file__).with_name("student_edition")
TOP_FILES = ("constraints.txt", "index.qmd", "assets/course.css", "assets/offline.scss")
ENGLISH_PROFILE = "_quarto-en.yml"  # the English book's pages (Quarto's default profile)
COMMANDS_DROPPED = ("build", "grade", "release")  # no lessons, no grader in the edition


class ReleaseError(ValueError):
    """The release cannot be built; the message says why and what to do."""


def release(root: Path, out: Path, commit: bool = True) -> list[Path]:
    """Build the class edition of `root` into `out` (which must not exist or be empty)."""
    root, out = root.resolve(), out.resolve()
    if out.exists() and any(out.iterdir()):
        raise ReleaseError(f"{out} is not empty: give a new folder for the class edition")
    if out == root or root in out.parents:
        raise ReleaseError(f"{out} is inside the course's own tree: release it elsewhere")
    stale = build.stale_files(root)
    if stale:
        raise ReleaseError("generated files are out of date (run ./course build): "
                           + ", ".join(str(p.relative_to(root)) for p in stale[:5]))
    stale_examples = capture.stale_examples(root)
    if stale_examples:
        raise ReleaseError("the class edition's examples are out of date for "
                           f"{', '.join(stale_examples)}: run ./course build --examples")
    out.mkdir(parents=True, exist_ok=True)
    _copy_package(root, out)
    for name in TOP_FILES:
        _copy(root / name, out / name)
    lessons = [build.parse(path) for path in build.lesson_paths(root)]
    for lesson in lessons:
        _write(out / "exercises" / f"{lesson.slug}.ipynb", _exercise_notebook(root, lesson))
        _write(out / "book" / f"{lesson.slug}.qmd", build.to_book_page(lesson, answers=False))
    for path, text in build.interactive_data(out).items():  # what the book's diagrams load
        _write(path, text)
    _write(out / "_quarto.yml", _quarto_config(root))
    _write(out / ENGLISH_PROFILE, _english_profile(root))
    _write(out / "pyproject.toml", _pyproject(root))
    _write(out / "course", _course_script(root))
    (out / "course").chmod(0o755)
    for template in sorted(TEMPLATES.rglob("*")):
        if template.is_file():
            _copy(template, out / template.relative_to(TEMPLATES))
    _write(out / ".gitignore", (root / ".gitignore").read_text(encoding="utf-8"))
    if commit:
        _git(out, "init", "-q", "-b", "main")
        _git(out, "add", "-A")
        _git(out, "-c", "user.name=flashcourse release", "-c", "user.email=release@localhost",
             "commit", "-q", "-m", "Class edition of the course")
    return sorted(p for p in out.rglob("*") if p.is_file() and ".git" not in p.parts)


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def _write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def _copy_package(root: Path, out: Path) -> None:
    dropped = {PACKAGE / name for name in shipping.INSTRUCTOR_ONLY}
    for source in sorted((root / PACKAGE).rglob("*")):
        relative = source.relative_to(root)
        if not source.is_file() or "__pycache__" in relative.parts:
            continue
        if any(relative == d or d in relative.parents for d in dropped):
            continue
        _copy(source, out / relative)
    for module, names in shipping.ANSWER_FUNCTIONS.items():
        path = out / "src" / Path(*module.split(".")).with_suffix(".py")
        path.write_text(stubbed(path.read_text(encoding="utf-8"), module, names),
                        encoding="utf-8")
    for lang in catalogs.translated_languages():  # no lesson check's message ships
        shipped = out / catalogs.compiled_path(root, lang).relative_to(root)
        shipped.parent.mkdir(parents=True, exist_ok=True)
        shipped.write_bytes(catalogs.compiled(root, lang, (catalogs.CORE,)))
    edition = out / PACKAGE / "checks" / "edition.py"
    text = edition.read_text(encoding="utf-8")
    marked = re.sub(r"^EDITION = SELF_STUDY\b.*$", "EDITION = CLASS  # built by ./course release",
                    text, count=1, flags=re.M)
    if marked == text:
        raise ReleaseError("checks/edition.py has no `EDITION = SELF_STUDY` line to mark")
    edition.write_text(marked, encoding="utf-8")


STUB = '''\
def {name}(*args, **kwargs):
    """Not in the class edition: an exercise asks you to write it."""
    from flashcourse.checks import shipped_calls

    return shipped_calls.answered("{module}.{name}", args, kwargs)
'''


def stubbed(source: str, module: str, names: tuple[str, ...]) -> str:
    """`source` with each top-level function of `names` replaced by its stub."""
    import ast

    lines = source.splitlines(keepends=True)
    found = {node.name: node for node in ast.parse(source).body
             if isinstance(node, ast.FunctionDef) and node.name in names}
    missing = sorted(set(names) - set(found))
    if missing:
        raise ReleaseError(f"{module} has no top-level function {missing[0]} "
                           "(update authoring/shipping.py)")
    for node in sorted(found.values(), key=lambda n: n.lineno, reverse=True):
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        lines[first:node.end_lineno] = [STUB.format(name=node.name, module=module)]
    text = "".join(lines)
    ast.parse(text)
    return text


def _exercise_notebook(root: Path, lesson: build.Lesson) -> str:
    """The exercise notebook with the class edition's banner."""
    import nbformat

    notebook = build.to_notebook(lesson, "exercise")
    for cell in notebook.cells:  # it says what is left to do, raising: `./course test` and
        if cell.get("id") == "scorecard":  # Run All go on past it, as past the checks
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), build.RAISES_EXCEPTION]
    notebook.cells[0].source = (
        f"# {lesson.title}\n\n*Class edition.* Replace every `______` and every "
        "`raise NotImplementedError` in the answer cells, then run all cells. The check of a "
        "function or a "
        "kernel compares it with the expected outputs of the visible cases; the questions and "
        "true/false statements are recorded and graded when you hand the notebook in, with "
        "hidden cases run on inputs of your own. Leave the first code cell (its `______` is "
        "the blank itself) and the check cells as they are: the grader refuses a notebook "
        "whose setup or check cells were changed.")
    return nbformat.writes(notebook) + "\n"


def _quarto_config(root: Path) -> str:
    """The book's configuration: no pre-render (there are no lessons to build), and no code
    runs (the exercises are not filled in)."""
    text = (root / "_quarto.yml").read_text(encoding="utf-8")
    text = re.sub(r"^  # Regenerate the book pages.*\n  pre-render:.*\n", "", text, flags=re.M)
    text = text.replace("execute:\n", "execute:\n  enabled: false\n", 1)
    if "pre-render" in text or "enabled: false" not in text:
        raise ReleaseError("_quarto.yml changed shape: update authoring/release.py")
    return text


def _english_profile(root: Path) -> str:
    """The English book's pages and chapters, without the Chinese book's switch and the glossary
    (editions.py), which the class edition does not have."""
    text = (root / ENGLISH_PROFILE).read_text(encoding="utf-8")
    text, removed = re.subn(r"^  (?:appendices|sidebar):\n(?:    .*\n)+", "", text, flags=re.M)
    if removed != 2:
        raise ReleaseError(f"{ENGLISH_PROFILE} changed shape: update authoring/release.py")
    return text


def _pyproject(root: Path) -> str:
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    text = re.sub(r"\n# `pytest --nbval SUBMISSION.ipynb`.*\n\[project\.entry-points\.pytest11\]"
                  r"\nflashcourse = .*\n", "\n", text)
    text = re.sub(r'^testpaths = .*$', 'testpaths = ["tests", "exercises"]', text, flags=re.M)
    text = re.sub(r'^addopts = .*$', 'addopts = "-p no:cacheprovider --nbval-lax '
                  '--nbval-current-env --nbval-cell-timeout=300"', text, flags=re.M)
    if "pytest11" in text or "nbval-lax" not in text:
        raise ReleaseError("pyproject.toml changed shape: update authoring/release.py")
    return text


def _course_script(root: Path) -> str:
    """./course without the commands that need the lessons' sources or the grader."""
    text = (root / "course").read_text(encoding="utf-8")
    for command in COMMANDS_DROPPED:
        text = re.sub(rf"^#   \./course {command}\b.*\n(?:#      .*\n)*", "", text, flags=re.M)
        text = re.sub(rf"^  {command}\)\n(?:    .*\n)+?    ;;\n", "", text, flags=re.M)
        text = re.sub(rf"\|{command}(?: [A-Z.]+)?(?=[|\]])", "", text)
    if any(re.search(rf"^  {c}\)", text, re.M) for c in COMMANDS_DROPPED):
        raise ReleaseError("the course script changed shape: update authoring/release.py")
    return text


def _git(folder: Path, *args: str) -> None:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True)
    if done.returncode:
        raise ReleaseError(f"git {args[0]} failed in {folder}: {done.stderr.strip()}")


def main(argv: list[str]) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m flashcourse release",
                                     description="build the class edition into OUT")
    parser.add_argument("out", type=Path, help="a new folder for the class edition")
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument("--no-commit", action="store_true",
                        help="leave OUT without a git repository")
    args = parser.parse_args(argv)
    try:
        files = release(args.root, args.out, commit=not args.no_commit)
    except ReleaseError as err:
        print(f"release: {err}", file=sys.stderr)
        return 2
    print(f"Class edition written to {args.out} ({len(files)} files)"
          + ("" if args.no_commit else ", committed on branch main: push it where your "
             "students clone from."))
    return 0
