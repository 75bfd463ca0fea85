"""Offer every public function, kernel and data value of a released package as the answer to
every exercise of one lesson, graded as the instructor's grader grades (grading mode: hidden
cases, seeds from a secret); print, as JSON, the candidates each exercise accepted.

    python tests/release_candidates.py RELEASE_DIR LESSON_STEM... [--only NAME,...]

(one JSON line per lesson; --only offers just the names given, as module.name)

A submission made from the class edition that imports a name runs, in the grader's sandbox,
against the instructor's package: so each name the release holds is taken from the
instructor's package here. A name on the tripwires' list is rejected in the grader by its
tripwire (the submission is flagged); it is counted apart, not run. Run in a process of its
own (tests/test_release.py): candidates run for real, each bounded by an alarm.

Lesson 10's checks start gloo ranks for every call; here the ranks run one after the other in
this process (`sequential_ranks`), seconds faster per candidate. A candidate that needs the
ranks to talk fails here; the package's only functions that do are its reference rings, which
are on the tripwires' list.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import io
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

CANDIDATE_SECONDS = 10  # a whole solution notebook grades in about 8 s here, hidden cases too
# They start processes that run the function they are handed: no answer to any exercise, and a
# minute of process starts for each exercise they are offered to.
PROCESS_STARTERS = {"flashcourse.distributed.ranks.run_ranks", "flashcourse.distributed.run_ranks",
                    # serves the book until stopped: it returns nothing, ever
                    "flashcourse.authoring.book.serve"}


class Overtime(BaseException):
    pass


def public_names(package: Path) -> list[tuple[str, str]]:
    """(module, name) of every public top-level function, class-free value and kernel."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            found += [(module, name) for name in names if not name.startswith("_")]
    return found


def answer_arity(root: Path, stem: str) -> dict[str, int]:
    """Exercise id -> how many parameters the solution's answer function takes (its grading
    cell names it: check("id", name)); a candidate that cannot take them all is refused by the
    check's first call, so it need not run."""
    solution = json.loads((root / "solutions" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in solution["cells"] if c["cell_type"] == "code"]
    defs = {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                defs[node.name] = len(node.args.args)
    arity = {}
    for source in sources:
        call = source.strip()
        if call.startswith("check(") and call.count('"') >= 2:
            exercise, name = call.split('"')[1], call.rsplit(",", 1)[-1].strip(" )")
            if name in defs:
                arity[exercise] = defs[name]
    return arity


def _takes(value, count: int) -> bool:
    try:
        inspect.signature(value).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # no signature to read: try it
        return True
    return True


def sequential_ranks(job, world_size: int, cases: list, label: str, **_options) -> list:
    """run_ranks without processes: each rank's job in turn, results as run_ranks gives them."""
    import torch

    from flashcourse.distributed import rings

    results = []
    for case in cases:
        per_rank = []
        for rank in range(world_size):
            events = rings.watch_events()
            found = job(rank, world_size, case)
            found = {k: v.detach().cpu().numpy() if torch.is_tensor(v) else v
                     for k, v in found.items()}
            found["events"] = rings.encode_events(events)
            per_rank.append(found)
        results.append(per_rank)
    return results


class Drawing(Exception):
    pass


def refuse_drawing() -> None:
    """A candidate that draws a figure (the package's figures do) fails at once: no check
    draws, and a figure is no answer, but drawing one at a check's sizes runs to the alarm
    (about a minute of the whole search)."""
    from matplotlib.figure import Figure

    def refuse(*args, **kwargs):
        raise Drawing("no figure is drawn while candidates are offered")

    Figure.__init__ = refuse


def _alarm(signum, frame):
    raise Overtime()


def passes_in_time(check, exercise_id: str, value) -> bool:
    """Whether check(exercise_id, value) returns within CANDIDATE_SECONDS; any way of failing
    is a rejection. The verdict is taken before the alarm is cancelled, so an alarm that goes
    off just as a check ends (a loaded machine) can neither escape nor turn a pass into a
    rejection."""
    passed = False
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CANDIDATE_SECONDS)
    try:
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                check(exercise_id, value)
            passed = True
        finally:
            signal.alarm(0)
    except BaseException:  # noqa: BLE001  (the check's failure, or Overtime, late or not)
        pass
    return passed


def main(release: Path, stem: str, only: set[str] | None = None) -> dict:
    os.environ["FLASHCOURSE_GRADING"] = "1"
    os.environ["FLASHCOURSE_GRADING_SECRET"] = "release-candidates"
    os.environ["FLASHCOURSE_INTERPRET"] = "1"
    from triton.runtime.jit import KernelInterface

    from flashcourse.checks import LESSON_MODULES, registry, tripwires

    registry._load_checks()
    import flashcourse.distributed as ring

    ring.run_ranks = sequential_ranks
    refuse_drawing()
    module_name = LESSON_MODULES[stem]
    lesson_ids = {ex.lesson for ex in registry.EXERCISES.values()
                  if ex.run.__module__.split(".")[2] == module_name}
    exercises = [ex for ex in registry.EXERCISES.values() if ex.lesson in lesson_ids]
    references = {(m, a) for m, a in tripwires.REFERENCES if m.startswith("flashcourse")}
    arity = answer_arity(Path(registry.__file__).resolve().parents[3], stem)
    candidates = []
    for module, name in public_names(release / "src" / "flashcourse"):
        try:
            value = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue  # not in the grader's package: a submission naming it fails there
        if f"{module}.{name}" not in PROCESS_STARTERS and (only is None or
                                                             f"{module}.{name}" in only):
            candidates.append((f"{module}.{name}", (module, name) in references, value))
    accepted: dict[str, list[str]] = {}
    tripped: dict[str, list[str]] = {}
    tried = 0
    if not Path.cwd().name.startswith("candidates-"):
        os.chdir(tempfile.mkdtemp(prefix="candidates-"))
    for ex in exercises:
        for label, referenced, value in candidates:
            kernel = isinstance(value, KernelInterface)
            if ex.kernel != kernel:
                continue
            function = callable(value) and not isinstance(value, type)
            data = isinstance(value, (dict, list, tuple, int, float, str)) and \
                not isinstance(value, bool)
            if not kernel and ex.kind == "code" and not (function or data):
                continue
            if ex.kind != "code" and not isinstance(value, dict):
                continue
            if function and not kernel and ex.id in arity and not _takes(value, arity[ex.id]):
                continue
            if referenced:  # the grader's tripwire flags it, whatever the check says
                tripped.setdefault(ex.id, []).append(label)
                continue
            tried += 1
            if passes_in_time(registry.check, ex.id, value):
                accepted.setdefault(ex.id, []).append(label)
    return {"lesson": stem, "exercises": len(exercises), "candidates": len(candidates),
            "tried": tried, "accepted": accepted, "tripwired": tripped}


if __name__ == "__main__":
    arguments = sys.argv[1:]
    chosen = None
    if "--only" in arguments:
        at = arguments.index("--only")
        chosen = set(arguments[at + 1].split(","))
        del arguments[at:at + 2]
    for lesson in arguments[1:]:
        print(json.dumps(main(Path(arguments[0]), lesson, chosen)), flush=True)
