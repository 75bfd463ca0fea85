"""The student's workspace: a git-ignored folder `work/` holding their own copy of each lesson.

`exercises/` is generated and tracked, so the lab never opens it: the first time a lesson is
needed it is copied into `work/`, and a copy there is never overwritten. `./course build`,
`./course test` and `git pull` do not touch `work/`.

* `prepare` (run by `./course lab`): copy the lessons that are not in `work/` yet.
* `update`: the same, and also replace lessons the student has not started (sources unchanged
  since the copy, no outputs) when the course changed them; started lessons are left alone and
  listed, with the command that takes the new version.
* `reset NN`: move the student's copy aside under a timestamped name and copy the lesson afresh.

`work/.course.json` remembers a fingerprint of each lesson as copied, so `update` can tell a
started lesson from an untouched one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

WORK_DIR = "work"
EXERCISES_DIR = "exercises"
STATE_FILE = ".course.json"


class WorkspaceError(ValueError):
    """A request the workspace cannot carry out; the message says what to do instead."""


@dataclass
class Report:
    copied: list[str] = field(default_factory=list)  # new in work/
    refreshed: list[str] = field(default_factory=list)  # untouched copies replaced by new ones
    kept: list[str] = field(default_factory=list)  # started copies of lessons that changed
    restarted: str | None = None  # the lesson reset copied afresh
    backup: str | None = None  # where reset moved the old copy

    def lines(self) -> list[str]:
        out = [f"new lesson: {WORK_DIR}/{name}" for name in self.copied]
        out += [f"updated (not started yet): {WORK_DIR}/{name}" for name in self.refreshed]
        out += [f"kept your copy of {WORK_DIR}/{name}; the course has a newer version: "
                f"./course reset {name[:2]} takes it (your copy is kept beside it)"
                for name in self.kept]
        if self.restarted:
            out.append(f"fresh copy: {WORK_DIR}/{self.restarted}")
        if self.backup:
            out.append(f"your old copy is kept as {WORK_DIR}/{self.backup}")
        return out


def work_dir(root: Path) -> Path:
    return Path(root) / WORK_DIR


def lessons(root: Path) -> list[Path]:
    """The exercise notebooks of the course, in order."""
    return sorted((Path(root) / EXERCISES_DIR).glob("[0-9][0-9]-*.ipynb"))


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


def _load_state(work: Path) -> dict[str, str]:
    path = work / STATE_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return {k: v for k, v in data.get("copied", {}).items() if isinstance(v, str)}


def _save_state(work: Path, state: dict[str, str]) -> None:
    text = json.dumps({"copied": dict(sorted(state.items()))}, indent=1) + "\n"
    (work / STATE_FILE).write_text(text, encoding="utf-8")


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


def prepare(root: Path) -> Report:
    """Copy into work/ every lesson that is not there yet; never overwrite a copy."""
    work = work_dir(root)
    work.mkdir(exist_ok=True)
    state = _load_state(work)
    report = Report()
    for source in lessons(root):
        target = work / source.name
        if not target.exists():
            _copy(source, target, state)
            report.copied.append(source.name)
    _save_state(work, state)
    return report


def update(root: Path) -> Report:
    """Bring new lessons in, and new versions of lessons not started; leave started ones."""
    work = work_dir(root)
    report = prepare(root)
    state = _load_state(work)
    for source in lessons(root):
        target = work / source.name
        if source.name in report.copied or _same(source, target):
            continue
        if started(target, state.get(source.name)):
            report.kept.append(source.name)
        else:
            _copy(source, target, state)
            report.refreshed.append(source.name)
    _save_state(work, state)
    return report


def find_lesson(root: Path, name: str) -> Path:
    """The exercise notebook named by `name`: its number (`6`, `06`), slug or file name."""
    wanted = Path(name).name.removesuffix(".ipynb")
    matches = [p for p in lessons(root) if p.stem == wanted
               or (wanted.isdigit() and p.stem[:2] == f"{int(wanted):02d}")]
    if len(matches) != 1:
        known = ", ".join(p.stem for p in lessons(root))
        raise WorkspaceError(f"no lesson {name!r}; the lessons are: {known}")
    return matches[0]


def backup_name(target: Path, now: datetime | None = None) -> Path:
    """`NN-slug.ipynb` -> `NN-slug.before-reset-YYYY-MM-DD-HHMMSS.ipynb` beside it, unused."""
    stamp = (now or datetime.now()).strftime("%Y-%m-%d-%H%M%S")
    candidate = target.with_name(f"{target.stem}.before-reset-{stamp}.ipynb")
    number = 2
    while candidate.exists():
        candidate = target.with_name(f"{target.stem}.before-reset-{stamp}-{number}.ipynb")
        number += 1
    return candidate


def reset(root: Path, name: str, now: datetime | None = None) -> Report:
    """Start lesson `name` afresh in work/, keeping the old copy beside it."""
    source = find_lesson(root, name)
    work = work_dir(root)
    work.mkdir(exist_ok=True)
    state = _load_state(work)
    target = work / source.name
    report = Report()
    if target.exists():
        backup = backup_name(target, now)
        target.rename(backup)
        report.backup = backup.name
    _copy(source, target, state)
    report.restarted = source.name
    _save_state(work, state)
    return report


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
    sub.add_parser("prepare", help="copy the lessons not yet in work/ (never overwrites) and "
                   "install the course's JupyterLab defaults (no news pop-up)")
    sub.add_parser("update", help="bring in new lessons; leave started ones alone")
    reset_parser = sub.add_parser("reset", help="start a lesson afresh, keeping the old copy")
    reset_parser.add_argument("lesson", help="lesson number (06) or name (06-flash-attention)")
    args = parser.parse_args(argv)
    try:
        if args.action == "prepare":
            report = prepare(args.root)
            write_lab_overrides()
        elif args.action == "update":
            report = update(args.root)
            if not (report.copied or report.refreshed or report.kept):
                print(f"{WORK_DIR}/ is up to date")
        else:
            report = reset(args.root, args.lesson)
    except WorkspaceError as err:
        print(err, file=sys.stderr)
        return 2
    for line in report.lines():
        print(line)
    return 0
