"""The student's workspace: a git-ignored folder `work/` holding their own copy of each lesson.

`exercises/` is generated and tracked, so the lab never opens it: the first time a lesson is
needed it is copied into `work/`, and a copy there is never overwritten. `./course build`,
`./course test` and `git pull` do not touch `work/`.

* `prepare` (run by `./course lab`): copy the lessons that are not in `work/` yet.
* `update`: the same, and also replace lessons the student has not started (sources unchanged
  since the copy, no outputs) when the course changed them; started lessons are left alone and
  listed, with the command that takes the new version.
* `reset NN`: move the student's copy to `work/backups/` under a timestamped name and copy the
  lesson afresh. Backups are in a folder of their own so that they never look like a lesson, in
  the file browser or to the grader.
* `submit NN`: write the one file to hand in, `submit/<student-id>__NN-slug.ipynb`, from the
  student's copy (outputs cleared unless asked to keep them), the student named in its metadata.

`work/.course.json` remembers a fingerprint of each lesson as copied, so `update` can tell a
started lesson from an untouched one, and the language of the copies: `./course lab --lang zh`
copies the Chinese edition (`exercises/zh/`) and remembers it for `reset`, `update` and the next
`lab`; switching the language replaces the lessons not started yet, and keeps started ones.

Lessons the course renamed or split (`MOVED`) are carried over by `prepare`: a started copy of a
renamed lesson takes the new name; a started copy of a split lesson gives each new lesson the
student's answer cells (`CARRIED`, by cell id) and goes to `work/backups/`; an untouched copy
is simply replaced by the new lessons.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import i18n
from .student import STUDENT_ENV, id_rule, is_valid  # the id rule's one home

WORK_DIR = "work"
EXERCISES_DIR = "exercises"
STATE_FILE = ".course.json"
BACKUP_DIR = "backups"  # under work/: reset's old copies
SUBMIT_DIR = "submit"  # at the course root: the files to hand in


# Lessons renamed or split since a work/ folder may have been made: old stem -> new stems.
MOVED = {
    "06-flash-attention": ("06-flash-forward", "07-flash-backward"),
    "07-performance": ("08-performance",),
    "08-modern-attention": ("09-modern-attention",),
    "09-ring-attention": ("10-ring-attention",),
    "10-capstone": ("11-capstone",),
}
# For a split lesson, the student's cells each new lesson takes: new cell id -> old cell id.
CARRIED = {
    "06-flash-forward": {
        "answer-fa1": "answer-fa1", "exercise-forward": "exercise-forward",
        "exercise-scratch": "exercise-scratch", "exercise-skipped": "exercise-skipped",
        "answer-q1": "answer-q1", "open-q1": "open-q1", "answer-q2": "answer-q3",
        "open-q2": "open-q3", "answer-misconceptions": "answer-misconceptions"},
    "07-flash-backward": {
        "exercise-backward-numpy": "exercise-backward-numpy", "exercise-dkdv": "exercise-dkdv",
        "exercise-dq": "exercise-dq", "answer-q1": "answer-q2", "open-q1": "open-q2"},
}


class WorkspaceError(ValueError):
    """A request the workspace cannot carry out; the message says what to do instead."""


@dataclass
class Report:
    copied: list[str] = field(default_factory=list)  # new in work/
    refreshed: list[str] = field(default_factory=list)  # untouched copies replaced by new ones
    kept: list[str] = field(default_factory=list)  # started copies of lessons that changed
    restarted: str | None = None  # the lesson reset copied afresh
    backup: str | None = None  # where reset moved the old copy
    moved: list[str] = field(default_factory=list)  # lines about renamed or split lessons

    def lines(self) -> list[str]:
        out = list(self.moved)
        out += [f"new lesson: {WORK_DIR}/{name}" for name in self.copied]
        out += [f"updated (not started yet): {WORK_DIR}/{name}" for name in self.refreshed]
        out += [f"kept your copy of {WORK_DIR}/{name}; the course has a newer version: "
                f"./course reset {name[:2]} takes it "
                f"(your copy is kept in {WORK_DIR}/{BACKUP_DIR}/)"
                for name in self.kept]
        if self.restarted:
            out.append(f"fresh copy: {WORK_DIR}/{self.restarted}")
        if self.backup:
            out.append(f"your old copy is kept as {WORK_DIR}/{self.backup}")
        return out


def work_dir(root: Path) -> Path:
    return Path(root) / WORK_DIR


def edition_dir(root: Path, lang: str = i18n.SOURCE_LANGUAGE) -> Path:
    """Where the exercise notebooks of a language are: exercises/, or exercises/<lang>/."""
    folder = Path(root) / EXERCISES_DIR
    return folder if lang == i18n.SOURCE_LANGUAGE else folder / lang


def lessons(root: Path, lang: str = i18n.SOURCE_LANGUAGE) -> list[Path]:
    """The exercise notebooks of the course in `lang`, in order."""
    return sorted(edition_dir(root, lang).glob("[0-9][0-9]-*.ipynb"))


def checked_language(root: Path, lang: str) -> str:
    """`lang` when the course has an edition in it that is built; else a WorkspaceError."""
    try:
        lang = i18n.validate(lang, "--lang")
    except i18n.UnknownLanguage as err:
        raise WorkspaceError(str(err)) from None
    if not lessons(root, lang):
        raise WorkspaceError(f"the {lang} edition is not built ({edition_dir(root, lang)} holds "
                             "no lesson): run ./course build first")
    return lang


def language(root: Path) -> str:
    """The language work/ was prepared in (`./course lab --lang`), English by default."""
    lang = _load_state_file(work_dir(root)).get("lang")
    return lang if lang in i18n.LANGUAGES else i18n.SOURCE_LANGUAGE


def fingerprint(path: Path) -> str:
    """A hash of a notebook's cell types and sources: opening a notebook in JupyterLab rewrites
    its metadata, which must not count as starting the lesson."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [[c.get("cell_type"), _text(c.get("source", ""))] for c in nb.get("cells", [])]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def _has_outputs(path: Path) -> bool:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return any(c.get("outputs") or c.get("execution_count") for c in nb.get("cells", []))


def _same(source: Path, target: Path) -> bool:
    try:
        return fingerprint(source) == fingerprint(target)
    except (OSError, ValueError):  # an unreadable copy is the student's: leave it alone
        return False


def _load_state_file(work: Path) -> dict:
    path = work / STATE_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _load_state(work: Path) -> dict[str, str]:
    copied = _load_state_file(work).get("copied", {})
    return {k: v for k, v in copied.items() if isinstance(v, str)} \
        if isinstance(copied, dict) else {}


def _save_state(work: Path, state: dict[str, str], lang: str | None = None) -> None:
    """Write the fingerprints, and the language (None: keep the one remembered)."""
    lang = lang or _load_state_file(work).get("lang")
    data: dict = {"copied": dict(sorted(state.items()))}
    if lang and lang != i18n.SOURCE_LANGUAGE:
        data["lang"] = lang
    (work / STATE_FILE).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _copy(source: Path, target: Path, state: dict[str, str]) -> None:
    shutil.copyfile(source, target)
    state[target.name] = fingerprint(source)


def started(path: Path, copied_as: str | None) -> bool:
    """True when the student may have work in `path`: its sources differ from the lesson as it
    was copied, it holds outputs, or nobody recorded how it was copied."""
    if copied_as is None:
        return True
    try:
        return fingerprint(path) != copied_as or _has_outputs(path)
    except (OSError, ValueError):
        return True


def _cells_by_id(path: Path) -> dict[str, dict]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return {c["id"]: c for c in nb.get("cells", []) if isinstance(c, dict) and "id" in c}


def _carry_over(root: Path, old: Path, stems: tuple[str, ...], state: dict[str, str],
                report: Report, now: datetime | None,
                lang: str = i18n.SOURCE_LANGUAGE) -> None:
    """Move the student's copy `old` of a renamed or split lesson to its new lessons."""
    work = old.parent
    if not started(old, state.get(old.name)):
        old.unlink()  # untouched: the new lessons are copied as usual
        state.pop(old.name, None)
        return
    if len(stems) == 1 and not (work / f"{stems[0]}.ipynb").exists():
        target = work / f"{stems[0]}.ipynb"
        old.rename(target)
        if old.name in state:
            state[target.name] = state.pop(old.name)
        report.moved.append(f"the course renumbered its lessons: your {WORK_DIR}/{old.name} "
                            f"is now {WORK_DIR}/{target.name}, with your work in it")
        return
    try:
        theirs = _cells_by_id(old)
    except (OSError, ValueError, KeyError, TypeError):
        theirs = {}
    made = []
    for stem in stems:
        target = work / f"{stem}.ipynb"
        source = edition_dir(root, lang) / f"{stem}.ipynb"
        if target.exists() or not source.exists():
            continue
        nb = json.loads(source.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            mine = theirs.get(CARRIED.get(stem, {}).get(cell.get("id"), ""))
            if mine is not None and mine.get("cell_type") == cell["cell_type"]:
                cell["source"] = mine.get("source", cell["source"])
        target.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        state[target.name] = fingerprint(source)  # differs from the copy: counts as started
        made.append(target.name)
    reset_name = backup_name(old, now)
    backup = reset_name.with_name(reset_name.name.replace(".before-reset-", ".before-split-"))
    backup.parent.mkdir(exist_ok=True)
    old.rename(backup)
    state.pop(old.name, None)
    report.moved.append(f"the course split {old.stem} into {' and '.join(stems)}: your answers "
                        f"are in {', '.join(f'{WORK_DIR}/{n}' for n in made) or 'them'}; your "
                        f"old copy is kept as {WORK_DIR}/{BACKUP_DIR}/{backup.name}")


def prepare(root: Path, now: datetime | None = None, lang: str | None = None) -> Report:
    """Copy into work/ every lesson that is not there yet; never overwrite a copy. Copies of
    lessons the course renamed or split are carried over first (`MOVED`). `lang`: the edition
    to copy from now on (None: the one remembered); a new language also replaces the copies
    not started yet, as `update` does."""
    before = language(root)
    lang = checked_language(root, lang) if lang is not None else before
    work = work_dir(root)
    work.mkdir(exist_ok=True)
    state = _load_state(work)
    report = Report()
    for old_stem, stems in MOVED.items():
        old = work / f"{old_stem}.ipynb"
        if old.is_file():
            _carry_over(root, old, stems, state, report, now, lang)
    for source in lessons(root, lang):
        target = work / source.name
        if not target.exists():
            _copy(source, target, state)
            report.copied.append(source.name)
    _save_state(work, state, lang)
    if lang != before:
        _refresh(root, lang, report)
    return report


def update(root: Path) -> Report:
    """Bring new lessons in, and new versions of lessons not started; leave started ones."""
    report = prepare(root)
    _refresh(root, language(root), report)
    return report


def _refresh(root: Path, lang: str, report: Report) -> None:
    """Replace the copies not started by the course's version in `lang`; list started ones."""
    work = work_dir(root)
    state = _load_state(work)
    for source in lessons(root, lang):
        target = work / source.name
        if source.name in report.copied or _same(source, target):
            continue
        if started(target, state.get(source.name)):
            if source.name not in report.kept:
                report.kept.append(source.name)
        elif source.name not in report.refreshed:
            _copy(source, target, state)
            report.refreshed.append(source.name)
    _save_state(work, state)


def find_lesson(root: Path, name: str, lang: str = i18n.SOURCE_LANGUAGE) -> Path:
    """The exercise notebook named by `name`: its number (`6`, `06`), slug or file name, in the
    edition of `lang`."""
    wanted = Path(name).name.removesuffix(".ipynb")
    matches = [p for p in lessons(root, lang) if p.stem == wanted
               or (wanted.isdigit() and p.stem[:2] == f"{int(wanted):02d}")]
    if len(matches) != 1:
        known = ", ".join(p.stem for p in lessons(root, lang))
        raise WorkspaceError(f"no lesson {name!r}; the lessons are: {known}")
    return matches[0]


def backup_name(target: Path, now: datetime | None = None) -> Path:
    """`work/NN-slug.ipynb` -> `work/backups/NN-slug.before-reset-YYYY-MM-DD-HHMMSS.ipynb`,
    a name not used yet."""
    stamp = (now or datetime.now()).strftime("%Y-%m-%d-%H%M%S")
    folder = target.parent / BACKUP_DIR
    candidate = folder / f"{target.stem}.before-reset-{stamp}.ipynb"
    number = 2
    while candidate.exists():
        candidate = folder / f"{target.stem}.before-reset-{stamp}-{number}.ipynb"
        number += 1
    return candidate


def reset(root: Path, name: str, now: datetime | None = None) -> Report:
    """Start lesson `name` afresh in work/ (in the language work/ was prepared in), keeping the
    old copy in work/backups/."""
    source = find_lesson(root, name, language(root))
    work = work_dir(root)
    work.mkdir(exist_ok=True)
    state = _load_state(work)
    target = work / source.name
    lab = open_in_lab(target)
    if lab:  # saving the open tab afterwards would put the old notebook back
        raise WorkspaceError(f"{WORK_DIR}/{source.name} is open in JupyterLab ({lab}): close "
                             "its tab there (File > Close and Shut Down Notebook), then run "
                             f"./course reset {name} again")
    report = Report()
    if target.exists():
        backup = backup_name(target, now)
        backup.parent.mkdir(exist_ok=True)
        target.rename(backup)
        report.backup = f"{BACKUP_DIR}/{backup.name}"
    _copy(source, target, state)
    report.restarted = source.name
    _save_state(work, state)
    return report


def open_in_lab(notebook: Path, timeout: float = 3.0) -> str | None:
    """The address of a running Jupyter server on this machine that has `notebook` open (a
    kernel session for it), or None. Servers that do not answer count as not having it."""
    import urllib.request

    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    target = notebook.resolve()
    for server in list_running_servers():
        root_dir = Path(server.get("root_dir") or server.get("notebook_dir") or "/")
        url = str(server.get("url", "")).rstrip("/") + "/"
        request = urllib.request.Request(url + "api/sessions", headers={
            "Authorization": f"token {server.get('token', '')}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                sessions = json.loads(response.read(2**20))
        except (OSError, ValueError):
            continue
        for session in sessions if isinstance(sessions, list) else []:
            path = str(session.get("path", "")) if isinstance(session, dict) else ""
            if path and (root_dir / path).resolve() == target:
                return url
    return None


def student_id(given: str | None) -> str:
    """The student handing in: `given` (--student), else $FLASHCOURSE_STUDENT, checked."""
    student = given if given is not None else os.environ.get(STUDENT_ENV, "")
    if not student:
        raise WorkspaceError("who is handing in? Give your student id: ./course submit NN "
                             f"--student ID (or set {STUDENT_ENV}=ID once in your shell)")
    if not is_valid(student):
        raise WorkspaceError(f"the student id {student!r} is not valid: use {id_rule()} "
                             "(e.g. --student alice.smith)")
    return student


# The cell of a lesson that prints a question's numbers: `fc.numbers("lesson/qN-...")`.
NUMBERS_CALL = re.compile(r"""fc\.numbers\(\s*["']([^"']+)["']\s*\)""")
SHOWN_CHARS = 200  # of a saved output quoted in a message


def numbers_cells(pristine: Path) -> dict[str, str]:
    """cell id -> the question whose numbers that cell of the handed-out lesson prints."""
    nb = json.loads(pristine.read_text(encoding="utf-8"))
    found = {}
    for cell in nb.get("cells", []):
        match = NUMBERS_CALL.search(_text(cell.get("source", "")))
        if match and cell.get("cell_type") == "code" and isinstance(cell.get("id"), str):
            found[cell["id"]] = match.group(1)
    return found


def printed(cell: dict) -> str | None:
    """What a code cell printed (its saved stdout), or None when it saved none."""
    outputs = cell.get("outputs")
    texts = [_text(out.get("text", "")) for out in outputs if isinstance(out, dict)
             and out.get("output_type") == "stream" and out.get("name") == "stdout"] \
        if isinstance(outputs, list) else []
    texts = [text for text in texts if isinstance(text, str)]
    return "".join(texts) if texts else None


def shows_values(text: str, values: str) -> bool:
    """True when `text` holds the numbers `values` (`n = 16,384, value_bytes = 2`) whole: not
    as the start of longer numbers."""
    return re.search(r"(?<![\w.])" + re.escape(values) + r"(?![\d.]|,\d)", text) is not None


def check_numbers(root: Path, source: Path, cells: list, student: str,
                  on_note: Callable[[str], None]) -> None:
    """Before a hand-in: refuse (WorkspaceError) a lesson whose saved output of a numbers cell
    (`fc.numbers(...)`) shows numbers other than `student`'s, the ones the grader checks that
    question with: answers worked out with the lesson's own numbers (no id set) or another
    id's would lose their points. A numbers cell with no saved output gets a note naming the
    student's numbers."""
    questions = numbers_cells(source)
    if not questions:
        return
    from .checks import numbers, registry

    theirs = {cell.get("id"): cell for cell in cells if isinstance(cell, dict)}
    where = f"{WORK_DIR}/{source.name}"
    for cell_id, question_id in questions.items():
        item = registry.get(question_id)
        if not item.numbers:
            continue
        label = numbers.short_label(item.title)
        mine = numbers.values_text(item.id, item.numbers, student)
        text = printed(theirs.get(cell_id, {}))
        if text is None:
            on_note(f"note: the cell that prints {label}'s numbers (`{cell_id}`) has no saved "
                    f"output in {where}, so submit cannot tell which numbers your answers "
                    f"used. The grader checks {label} with the numbers of student {student}: "
                    f"{mine}")
            continue
        if shows_values(text, mine):
            continue
        lessons_own = numbers.values_text(item.id, item.numbers, None)
        used = ("the lesson's own numbers, as no student id was set" if shows_values(
            text, lessons_own) else "other numbers than yours")
        shown = " ".join(text.split())[:SHOWN_CHARS]
        raise WorkspaceError(
            f"not handed in: in {where}, {label} was worked out with {used} (cell `{cell_id}` "
            f"printed: {shown!r}), but the grader checks {label} with the numbers of student "
            f"{student}: {mine}. Set your id, run the lesson again and save it: start the lab "
            f"with {STUDENT_ENV}={student} ./course lab (or put fc.setup(student=\"{student}\") "
            f"in the first cell), Run All, answer {label} with the numbers its cell prints "
            "now, save, then submit again")


def submit(root: Path, name: str, student: str | None = None,
           keep_outputs: bool = False, on_note: Callable[[str], None] | None = None) -> Path:
    """Write `submit/<student>__NN-slug.ipynb` from the student's copy of lesson `name`, the
    student and the lesson in its metadata (`metadata.flashcourse`), outputs cleared unless
    `keep_outputs`. The copy in work/ is only read. Refuses a copy whose questions were worked
    out with numbers other than the student's (`check_numbers`); `on_note` (default: standard
    error) gets what the student should know. Returns the file written."""
    student = student_id(student)
    source = find_lesson(root, name)
    copy = work_dir(root) / source.name
    if not copy.is_file():
        raise WorkspaceError(f"lesson {source.stem} is not started: there is no "
                             f"{WORK_DIR}/{source.name}. Open it with ./course lab (which "
                             "copies it into work/), do the exercises, then submit")
    try:
        nb = json.loads(copy.read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise WorkspaceError(f"{WORK_DIR}/{source.name} cannot be read as a notebook ({err}); "
                             "open it in JupyterLab and save it, then submit again") from None
    if not isinstance(cells, list):
        raise WorkspaceError(f"{WORK_DIR}/{source.name} cannot be read as a notebook (its cells "
                             "are not a list); open it in JupyterLab and save it, then submit "
                             "again")
    check_numbers(root, source, cells, student,  # on the saved outputs, before they are cleared
                  on_note or (lambda line: print(line, file=sys.stderr)))
    if not keep_outputs:  # the grader runs the notebook again: outputs only add size
        for cell in cells:
            if isinstance(cell, dict) and cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
    metadata = nb.setdefault("metadata", {})
    before = metadata.get("flashcourse") if isinstance(metadata.get("flashcourse"), dict) else {}
    metadata["flashcourse"] = {"student": student, "lesson": source.stem}
    if isinstance(before.get("lang"), str):  # the language the grader reports it in
        metadata["flashcourse"]["lang"] = before["lang"]
    folder = Path(root) / SUBMIT_DIR
    folder.mkdir(exist_ok=True)
    target = folder / f"{student}__{source.name}"
    partial = target.with_name(target.name + ".partial")  # never a half-written hand-in
    partial.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(target)
    return target


LAB_OVERRIDES = {  # JupyterLab defaults for the course: no news pop-up, no update check
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                    "checkForUpdates": False},
}


def write_lab_overrides(app_dir: Path | None = None) -> Path | None:
    """Install the course's JupyterLab defaults in the environment's application directory
    (`settings/overrides.d/`, which JupyterLab reads as default settings; a student's own
    settings still win). Returns the file written, or None without JupyterLab."""
    if app_dir is None:
        try:
            from jupyterlab.commands import get_app_dir
        except ImportError:
            return None
        app_dir = Path(get_app_dir())
    path = Path(app_dir) / "settings" / "overrides.d" / "flashcourse.json"
    text = json.dumps(LAB_OVERRIDES, indent=1) + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashcourse workspace")
    parser.add_argument("--root", type=Path, default=Path.cwd())
    sub = parser.add_subparsers(dest="action", required=True)
    prepare_parser = sub.add_parser(
        "prepare", help="copy the lessons not yet in work/ (never overwrites) and install the "
        "course's JupyterLab defaults (no news pop-up)")
    prepare_parser.add_argument("--lang", default=None,
                                help="the edition to copy from now on: "
                                     f"{', '.join(i18n.LANGUAGES)} (default: the one chosen "
                                     "last time, else en); remembered in work/")
    sub.add_parser("lang", help="print the language work/ was prepared in")
    sub.add_parser("update", help="bring in new lessons; leave started ones alone")
    reset_parser = sub.add_parser("reset", help="start a lesson afresh, keeping the old copy")
    reset_parser.add_argument("lesson", help="lesson number (06) or name (06-flash-forward)")
    submit_parser = sub.add_parser("submit", help=f"write the file to hand in, "
                                   f"{SUBMIT_DIR}/<student-id>__NN-slug.ipynb")
    submit_parser.add_argument("lesson", help="lesson number (06) or name (06-flash-forward)")
    submit_parser.add_argument("--student", default=None,
                               help=f"your student id (default: ${STUDENT_ENV})")
    submit_parser.add_argument("--keep-outputs", action="store_true",
                               help="keep the cells' outputs (cleared by default)")
    args = parser.parse_args(argv)
    try:
        if args.action == "prepare":
            report = prepare(args.root, lang=args.lang)
            write_lab_overrides()
        elif args.action == "lang":
            print(language(args.root))
            return 0
        elif args.action == "update":
            report = update(args.root)
            if not (report.copied or report.refreshed or report.kept or report.moved):
                print(f"{WORK_DIR}/ is up to date")
        elif args.action == "submit":
            path = submit(args.root, args.lesson, args.student, args.keep_outputs)
            shown = path.relative_to(Path(args.root)).as_posix()
            outputs = "outputs kept" if args.keep_outputs else "outputs cleared"
            print(f"hand in this one file: {shown} ({outputs})")
            print(f"it holds your last save of {WORK_DIR}/{path.name.partition('__')[2]}: after "
                  "any change, save it, then submit again")
            return 0
        else:
            report = reset(args.root, args.lesson)
    except WorkspaceError as err:
        print(err, file=sys.stderr)
        return 2
    for line in report.lines():
        print(line)
    return 0
