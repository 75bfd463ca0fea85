"""`./course release`: the class edition ships no answer, and the instructor's grader grades
what students make from it.

- the released tree holds no solutions, lesson sources, grader, lesson checks or self-check
  answers, and no solution cell's text in its book or notebooks;
- every public function, kernel and data value of the released package, offered as every
  exercise's answer, is rejected by the instructor's grader (test_release_answers.py);
- the released notebooks filled with the solutions score 10/10 with the instructor's grader,
  untouched ones 0, and flipped veto answers earn nothing;
- in the class edition's own notebook, questions and statements are recorded without a verdict,
  and code is checked against the visible cases' expected outputs.
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from notebook_runs import run_notebook

from flashcourse.__main__ import main
from flashcourse.authoring import build, release, shipping

LESSONS = [p.stem for p in build.lesson_paths(Path(__file__).resolve().parents[1])]
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def edition(tmp_path_factory, root):
    out = tmp_path_factory.mktemp("class") / "edition"
    release.release(root, out)
    return out


def _text_files(folder: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in folder.rglob("*")
            if p.is_file() and ".git" not in p.parts and p.suffix in (".ipynb", ".qmd", ".py",
                                                                     ".md", ".toml", ".yml")}


def test_the_edition_is_a_committed_repository_without_answers(edition):
    log = subprocess.run(["git", "log", "--oneline"], cwd=edition, capture_output=True,
                         text=True, check=True).stdout
    assert "Class edition" in log
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=edition, capture_output=True,
                              text=True, check=True).stdout
    for gone in ("solutions", "lessons", "src/flashcourse/grader",
                 "src/flashcourse/checks/self_checks", "src/flashcourse/checks/tripwires.py",
                 "src/flashcourse/checks/softmax", "src/flashcourse/checks/gpu_flash.py",
                 "src/flashcourse/authoring/capture.py"):
        assert not (edition / gone).exists(), gone
    assert sorted(p.stem for p in (edition / "exercises").glob("*.ipynb")) == LESSONS
    readme = (edition / "README.md").read_text()
    assert "./course lab" in readme and "./course test" in readme
    script = (edition / "course").read_text()
    assert "lab)" in script and not any(f"{c})" in script for c in ("grade", "build", "release"))
    assert 'EDITION = CLASS' in (edition / "src/flashcourse/checks/edition.py").read_text()


def test_the_edition_ships_no_lesson_checks_message_in_any_language(edition, root):
    """The lesson checks' messages name their mistakes and hidden cases: neither their catalog
    nor their translations ship; the messages the class edition shows do."""
    import gettext

    from flashcourse.authoring import catalogs

    messages = catalogs.extract(root)
    for lang in catalogs.translated_languages():
        assert not (edition / catalogs.source_path(root, lang, catalogs.CHECKS)
                    .relative_to(root)).exists()
        shipped = edition / catalogs.compiled_path(root, lang).relative_to(root)
        with shipped.open("rb") as handle:
            table = gettext.GNUTranslations(handle)._catalog
        only_checks = set(messages[catalogs.CHECKS]) - set(messages[catalogs.CORE])
        assert only_checks and not only_checks & set(table), sorted(only_checks & set(table))[:3]
        assert any(msgid in table for msgid in messages[catalogs.CORE])


def test_answer_functions_are_stubs_in_the_edition(edition, root):
    for module, names in shipping.ANSWER_FUNCTIONS.items():
        relative = Path("src", *module.split(".")).with_suffix(".py")
        text = (edition / relative).read_text()
        original = (root / relative).read_text()
        for name in names:
            assert f'shipped_calls.answered("{module}.{name}"' in text, (module, name)
        assert len(text) < len(original)


def _solution_lines(lesson: build.Lesson) -> set[str]:
    """Lines of the solution cells that the exercise cells do not hold (answers, bodies)."""
    found = set()
    for cell in lesson.cells:
        if not cell.has_solution:
            continue
        student = {line.strip() for line in build._exercise_source(cell, lesson.path)
                   .splitlines()}
        for line in build._solution_source(cell).splitlines():
            line = line.strip()
            if len(line) >= 16 and not line.startswith("#") and line not in student:
                found.add(line)
    return found


def test_no_solution_text_in_the_released_book_or_notebooks(edition, root):
    texts = {p: t for p, t in _text_files(edition).items()
             if p.suffix in (".ipynb", ".qmd")}
    for path in build.lesson_paths(root):
        lesson = build.parse(path)
        # solution lines the exercise notebook shows anyway (given code) are no leak
        exercise = (root / "exercises" / f"{lesson.slug}.ipynb").read_text(encoding="utf-8")
        lines = {line for line in _solution_lines(lesson)
                 if line not in exercise and json.dumps(line)[1:-1] not in exercise}
        assert lines, path.name
        for file, text in texts.items():
            if file.stem != lesson.slug:
                continue
            leaked = [line for line in lines if line in text or json.dumps(line)[1:-1] in text]
            assert not leaked, (file.name, leaked[:3])
    for file, text in texts.items():
        assert "Reference answer" not in text and "**Rubric" not in text, file.name


# ---------------------------------------------------------------- graded by the instructor


def _filled(edition: Path, root: Path, stem: str, student: str = "ada") -> dict:
    from flashcourse.grader import samples

    notebook = samples.filled_notebook(root, stem, student=student,
                                       exercises=edition / "exercises")
    for cell in notebook["cells"]:
        if cell["id"].startswith("open-"):
            cell["source"] = "My answer, in my own words."
    return notebook


def _write(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb), encoding="utf-8")


@pytest.fixture(scope="module")
def graded(edition, root, tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    from flashcourse.grader import samples

    folder = tmp_path_factory.mktemp("class-submissions")
    for stem in LESSONS:
        _write(_filled(edition, root, stem), folder / "ada" / f"{stem}.ipynb")
        (folder / "bo").mkdir(exist_ok=True)
        shutil.copy(edition / "exercises" / f"{stem}.ipynb", folder / "bo" / f"{stem}.ipynb")
    flipped = samples.flip_vetoes(_filled(edition, root, LESSONS[1], student="cy"))
    _write(flipped, folder / "cy" / f"{LESSONS[1]}.ipynb")
    out = tmp_path_factory.mktemp("class-grading")
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["grade", str(folder), "--out", str(out), "--jobs", "2", "--root",
                       str(root), "--memory", "4"])
    report = json.loads((out / "results.json").read_text())
    return status, {s["label"]: s for s in report["submissions"]}


def _points(sub: dict) -> float:
    return sub["earned"]


@pytest.mark.parametrize("stem", LESSONS)
def test_filled_edition_scores_full_marks_and_untouched_nothing(graded, stem, record_rejection):
    _, subs = graded
    filled, untouched = subs[f"ada/{stem}.ipynb"], subs[f"bo/{stem}.ipynb"]
    assert filled["status"] == "PASS" and _points(filled) == 10, (stem, filled)
    assert _points(untouched) == 0, (stem, untouched["exercises"])
    record_rejection("release/graded", f"{stem}: an untouched class edition notebook")


def test_flipped_vetoes_earn_nothing(graded, record_rejection):
    _, subs = graded
    flipped = subs[f"cy/{LESSONS[1]}.ipynb"]
    veto = next(i for i in flipped["exercises"] if i["id"].endswith("/misconceptions"))
    assert veto["status"] != "pass" and not flipped["passed"], flipped
    record_rejection("release/graded", "veto statements flipped in a class edition notebook")


# ---------------------------------------------------------------- in the student's notebook


def _run_in_edition(edition: Path, notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(edition / "src")
    try:
        run_notebook(notebook, edition / "exercises")
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = env_before
    return notebook


def _outputs(notebook, cell_id: str) -> str:
    cell = next(c for c in notebook.cells if c.id == cell_id)
    return "\n".join(o.get("text", "") or o.get("evalue", "") for o in cell.outputs)


def _errors(notebook) -> dict[str, str]:
    return {c.id: o.ename for c in notebook.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"}


def test_the_class_notebook_records_questions_and_checks_code_by_examples(edition, root):
    stem = LESSONS[1]  # the roofline: numpy functions, kernels, questions, vetoes
    from flashcourse.grader import samples

    notebook = nbformat.reads(json.dumps(samples.flip_vetoes(_filled(edition, root, stem))), 4)
    q1 = next(c for c in notebook.cells if c.id == "answer-q1")
    q1.source = q1.source.replace('"memory"', '"compute"')  # a wrong answer: no verdict here
    done = _run_in_edition(edition, notebook)
    assert _errors(done) == {}, _errors(done)
    for cell_id in ("check-q1", "check-misconceptions"):
        text = _outputs(done, cell_id)
        assert "recorded" in text and "wrong" not in text and "right" not in text.split(
            "whether it is right")[0], text
    assert "visible case(s) match the expected outputs" in _outputs(done, "check-copy-kernel")
    assert "Points (10" in _outputs(done, "scorecard")


def test_the_class_notebook_names_the_case_a_wrong_kernel_fails(edition, root):
    stem = LESSONS[1]
    notebook = nbformat.reads(json.dumps(_filled(edition, root, stem)), 4)
    cell = next(c for c in notebook.cells if "def copy_kernel" in c.source)
    cell.source = cell.source.replace("mask=mask", "mask=offsets < n_elements - 1")
    done = _run_in_edition(edition, notebook)
    text = _outputs(done, "check-copy-kernel")
    assert _errors(done).get("check-copy-kernel") == "WrongAnswer", _errors(done)
    assert "differs from the expected output" in text and "first in `" in text, text


def test_release_refuses_a_folder_that_is_not_empty(tmp_path, root):
    (tmp_path / "kept.txt").write_text("mine")
    with pytest.raises(release.ReleaseError, match="not empty"):
        release.release(root, tmp_path)
    assert (tmp_path / "kept.txt").read_text() == "mine"


def test_a_stub_answers_the_lessons_calls_and_refuses_others(edition):
    code = ("from flashcourse.figures import access\n"
            "from flashcourse.models import memory\n"
            "access.access_patterns({name: memory.warp_addresses(name) for name in\n"
            "    ('contiguous', 'offset', 'strided', 'column', 'random')})\n"  # lesson 3's
            "try:\n"
            "    memory.sectors_and_lines(list(range(0, 128, 4)), 4)\n"
            "except Exception as err:\n"
            "    print(type(err).__name__, err)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(edition / "src"),
                                   MPLBACKEND="Agg"), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NotInThisEdition" in done.stdout and "an exercise asks you to write it" in \
        done.stdout, done.stdout


def test_the_committed_examples_are_up_to_date(root):
    from flashcourse.authoring import capture

    assert capture.stale_examples(root) == [], "run: python -m flashcourse build --examples"


def test_the_class_book_renders_without_answers(edition, tmp_path):
    quarto = shutil.which("quarto")
    if quarto is None:
        pytest.skip("Quarto is not installed (README: Rendering the book)")
    book = tmp_path / "edition"
    shutil.copytree(edition, book, ignore=shutil.ignore_patterns(".git"))
    done = subprocess.run([quarto, "render"], cwd=book, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    pages = sorted((book / "_book" / "book").glob("*.html"))
    assert [p.stem for p in pages] == LESSONS
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "Reference answer" not in text and "Rubric (" not in text, page.name
