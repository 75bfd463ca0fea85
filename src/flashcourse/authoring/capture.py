"""Capture the class edition's examples: every call a lesson's check makes of the reference
solution on its visible cases (`checks/examples.py` replays them against a student's answer).

`python -m flashcourse build --examples` runs each solution notebook in Triton's interpreter
with $FLASHCOURSE_CAPTURE_DIR set; `registry.check` then hands the check a capturing stand-in
for the answer: a function's calls keep their arguments and results, a kernel's launches
their grids, arguments and storages. Each lesson's examples go to
`src/flashcourse/checks/examples/NN-slug.json.gz`, and a fingerprint of what made them to
`fingerprints.json` beside them, so `check-sync` can say when they are out of date without
running anything.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..checks import examples, recording

CAPTURE_DIR_ENV = recording.CAPTURE_DIR_ENV
# What the examples of a lesson depend on, besides its source: the checks and what they use.
# figures too: their calls of answer functions are shipped calls (checks/shipped_calls.py)
FINGERPRINT_FOLDERS = ("checks", "kernels", "models", "distributed", "figures")
FINGERPRINT_FILES = ("blanks.py", "runtime.py", "launch.py", "reference.py", "hardware.py")


def capture_dir() -> Path | None:
    folder = os.environ.get(CAPTURE_DIR_ENV)
    return Path(folder) if folder else None


class Capture:
    """The examples of one check, while it runs on the solution."""

    def __init__(self, exercise_id: str):
        self.exercise_id = exercise_id
        self.steps: list[dict] = []
        self.why_not: str | None = None
        self.labels: list[str] = []

    def label(self) -> str:
        return self.labels[-1] if self.labels else self.exercise_id

    def wrap(self, answer):
        from triton.runtime.jit import KernelInterface

        if isinstance(answer, KernelInterface):
            return self._wrap_kernel(answer)
        if callable(answer):
            return self._wrap_function(answer)
        self.why_not = "the answer is data, graded on submission"
        return answer

    def _wrap_function(self, fn):
        @functools.wraps(fn)
        def capturing(*args, **kwargs):
            result = fn(*args, **kwargs)
            try:
                self.steps.append({"kind": "call", "label": self.label(),
                                   "args": recording.encode(list(args)),
                                   "kwargs": recording.encode(dict(kwargs)),
                                   "result": recording.encode(result)})
            except TypeError as err:
                self.why_not = f"a call's inputs or result are not plain data ({err})"
            return result

        return capturing

    def _wrap_kernel(self, kernel):
        original = kernel.run
        names = list(getattr(kernel, "arg_names", []))

        def run(*args, grid, warmup, **kwargs):
            if warmup:
                return original(*args, grid=grid, warmup=warmup, **kwargs)
            try:
                launch = examples.LaunchCapture(names, args, kwargs, grid)
            except TypeError as err:
                self.why_not = f"a launch's arguments are not plain data ({err})"
                return original(*args, grid=grid, warmup=warmup, **kwargs)
            result = original(*args, grid=grid, warmup=warmup, **kwargs)
            step = launch.finish(self.label())
            step["tf32_sensitive"] = _tf32_sensitive(original, step)
            self.steps.append(step)
            return result

        kernel.run = run
        self._restore = lambda: vars(kernel).pop("run", None)
        return kernel

    def finish(self) -> dict:
        restore = getattr(self, "_restore", None)
        if restore:
            restore()
        if self.why_not or not self.steps:
            return {"steps": [], "why_no_examples": self.why_not or
                    "the check calls the answer in other processes; graded on submission"}
        return {"steps": self.steps}


def _tf32_sensitive(run, step: dict) -> bool:
    """Whether rounding the launch's float32 inputs to TF32 (what `tl.dot` does on a GPU)
    changes its outputs beyond the GPU's float32 tolerance: scores of 1e3, say. The lessons'
    checks run such cases in float16 on a GPU; their examples cannot be judged there."""
    import torch

    float32 = [spec for spec in [*step["args"], *step["kwargs"].values()]
               if spec.get("tensor") == "float32" and step["after"][spec["storage"]] is None]
    if not float32 or not any(after is not None for after in step["after"]):
        return False
    storages, args, kwargs = examples.build_launch(step, "cpu")
    for spec in float32:
        words = storages[spec["storage"]].view(torch.int32)
        rounded = (words + 0x1000) & ~0x1FFF  # to 10 mantissa bits, nearest
        finite = (words & 0x7F800000) != 0x7F800000  # NaN poison and infinities stay
        words.copy_(torch.where(finite, rounded, words))
    run(*args, grid=tuple(step["grid"]), warmup=False, **kwargs)
    atol, rtol = examples.GPU_FLOAT32
    for number, after in enumerate(step["after"]):
        if after is None or step["storage_dtypes"][number] != "float32":
            continue
        want = examples.values_of(after, torch.float32)
        got = storages[number].view(torch.float32).to(torch.float64).numpy()
        if not np.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True).all():
            return True
    return False


@contextlib.contextmanager
def capturing(exercise_id: str, answer):
    """Around one `check(...)` of a solution: yields the answer to hand the check; writes the
    exercise's examples when the check passed."""
    folder = capture_dir()
    if folder is None:
        yield answer
        return
    capture = Capture(exercise_id)
    original_call = recording.student_call

    def labelled_call(label, run, *args, **kwargs):
        capture.labels.append(label)
        try:
            return original_call(label, run, *args, **kwargs)
        finally:
            capture.labels.pop()

    recording.student_call = labelled_call
    _checks_running.append(exercise_id)
    try:
        yield capture.wrap(answer)
    finally:
        _checks_running.pop()
        recording.student_call = original_call
        found = capture.finish()
    folder.mkdir(parents=True, exist_ok=True)
    name = recording.record_name(exercise_id)
    (folder / name).write_text(json.dumps({"exercise": exercise_id, **found}), encoding="utf-8")


# ---------------------------------------------------------------- the lessons' own calls

_checks_running: list[str] = []  # exercise ids of the checks running now (nested: rare)
_shipped_calls: dict[str, dict[str, object]] = {}  # qualified name -> {inputs digest: result}


def install_call_memos() -> None:
    """In a solution's kernel, before its cells: every function on shipping.ANSWER_FUNCTIONS,
    wherever the package holds it (a module's names, a function's defaults), keeps what it
    returns for each input, outside checks; `save_call_memos()` writes them out."""
    import importlib
    import pkgutil
    import types

    import flashcourse

    from . import shipping

    for info in pkgutil.walk_packages(flashcourse.__path__, "flashcourse."):
        if not info.name.startswith(("flashcourse.grader", "flashcourse.bench.harness")):
            importlib.import_module(info.name)
    wrapped = {}
    for module_name, names in shipping.ANSWER_FUNCTIONS.items():
        module = importlib.import_module(module_name)
        for name in names:
            original = getattr(module, name)
            wrapped[id(original)] = (original, _memoizing(f"{module_name}.{name}", original))
    for module in [m for n, m in sys.modules.items() if n.startswith("flashcourse")]:
        for attribute, value in list(vars(module).items()):
            if id(value) in wrapped and value is wrapped[id(value)][0]:
                setattr(module, attribute, wrapped[id(value)][1])
            if isinstance(value, types.FunctionType) and value.__defaults__:
                value.__defaults__ = tuple(
                    wrapped[id(d)][1] if id(d) in wrapped and d is wrapped[id(d)][0] else d
                    for d in value.__defaults__)


def _memoizing(name: str, fn):
    @functools.wraps(fn)
    def keeping(*args, **kwargs):
        result = fn(*args, **kwargs)
        if not _checks_running:
            try:
                calls = _shipped_calls.setdefault(name, {})
                calls[recording.digest((list(args), dict(kwargs)))] = recording.encode(result)
            except TypeError:
                pass  # a result that is no data: the class edition refuses that call
        return result

    return keeping


def save_call_memos() -> None:
    folder = capture_dir()
    if folder is not None:
        (folder / "shipped-calls.memo").write_text(json.dumps(_shipped_calls),
                                                   encoding="utf-8")


# ---------------------------------------------------------------- building the examples


def fingerprint(root: Path, stem: str) -> str:
    """A hash of the lesson's source and of the package code its checks run."""
    package = root / "src" / "flashcourse"
    files = [root / "lessons" / f"{stem}.qmd"]
    for folder in FINGERPRINT_FOLDERS:
        files += sorted(p for p in (package / folder).rglob("*") if p.suffix in (".py", ".toml")
                        and "examples" not in p.parts)
    files += [package / name for name in FINGERPRINT_FILES]
    sha = hashlib.sha256()
    for path in files:
        sha.update(str(path.relative_to(root)).encode() + b"\0")
        sha.update(path.read_bytes() + b"\0")
    return sha.hexdigest()


def stale_examples(root: Path) -> list[str]:
    """Lessons whose examples are missing or were made from other sources."""
    from . import build

    made_from = _fingerprints(root)
    return [path.stem for path in build.lesson_paths(root)
            if not examples.path_of(path.stem, _folder(root)).exists()
            or made_from.get(path.stem) != fingerprint(root, path.stem)]


def _folder(root: Path) -> Path:
    return root / "src/flashcourse/checks/examples"


# What each lesson's examples were made from, apart from them: examples that come out the same
# are the same bytes, and git keeps one copy.
FINGERPRINTS = "fingerprints.json"


def _fingerprints(root: Path) -> dict[str, str]:
    try:
        return json.loads((_folder(root) / FINGERPRINTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _metadata(stem: str) -> dict:
    """What the class edition's registry needs of a lesson's items, without any answer."""
    from ..checks import LESSON_MODULES, registry

    registry._load_checks()
    module = LESSON_MODULES[stem]
    lessons = [lesson for lesson in registry.LESSONS.values()
               if lesson.exercises and _module_of(lesson) == module]
    if len(lessons) != 1:
        raise RuntimeError(f"{stem}: found {len(lessons)} registered lessons")
    lesson = lessons[0]
    items = []
    for ex in lesson.exercises:
        item = {"id": ex.id, "title": ex.title, "points": ex.points, "kind": ex.kind,
                "kernel": ex.kernel, "sections": ex.sections}
        if ex.kind in ("question", "veto") and ex.answers:
            item["keys"] = {key: _kind_of(value) for key, value in ex.answers.items()}
        if getattr(ex, "numbers", None):  # the choices of each student's numbers: no answer
            item["numbers"] = ex.numbers
        items.append(item)
    return {"lesson": {"id": lesson.id, "title": lesson.title, "pass_line": lesson.pass_line},
            "items": items}


def _module_of(lesson) -> str:
    import inspect

    from ..checks import LESSON_MODULES

    first = next(ex for ex in lesson.exercises if ex.kind == "code")
    module = inspect.getmodule(first.run).__name__.split(".")
    return next(m for m in LESSON_MODULES.values() if m in module)


def _kind_of(value) -> str:
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else "string"


def capture_lesson(root: Path, stem: str, timeout: int = 900) -> dict:
    """Run the solution notebook of `stem` in the interpreter and collect its examples."""
    notebook = root / "solutions" / f"{stem}.ipynb"
    with tempfile.TemporaryDirectory(prefix="fccapture-") as folder:
        # TRITON_INTERPRET too: the memos import every module before the notebook's setup
        # cell, and a @triton.jit defined then must be the interpreter's as well
        env = dict(os.environ, **{CAPTURE_DIR_ENV: folder, "FLASHCOURSE_INTERPRET": "1",
                                  "TRITON_INTERPRET": "1",
                                  "MPLBACKEND": "Agg", "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
        for name in ("FLASHCOURSE_GRADING", "FLASHCOURSE_GRADING_SECRET",
                     recording.RECORD_DIR_ENV, recording.RECORD_CHANNEL_ENV):
            env.pop(name, None)
        code = ("import nbformat, sys\nfrom nbclient import NotebookClient\n"
                "nb = nbformat.read(sys.argv[1], as_version=4)\n"
                "first = nbformat.v4.new_code_cell('from flashcourse.authoring import capture"
                " as _c\\n_c.install_call_memos()')\n"
                "last = nbformat.v4.new_code_cell('_c.save_call_memos()')\n"
                "nb.cells = [first, *nb.cells, last]\n"
                "NotebookClient(nb, timeout=600, kernel_name='python3', allow_errors=False,"
                " resources={'metadata': {'path': sys.argv[2]}}).execute()\n")
        done = subprocess.run([sys.executable, "-c", code, str(notebook), str(root)], env=env,
                              capture_output=True, text=True, timeout=timeout, cwd=root)
        if done.returncode:
            raise RuntimeError(f"{notebook.name} failed while capturing its examples:\n"
                               f"{done.stderr[-3000:]}")
        found = {}
        for path in sorted(Path(folder).glob("*.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            found[data.pop("exercise")] = data
        memo = Path(folder) / "shipped-calls.memo"
        shipped = json.loads(memo.read_text(encoding="utf-8")) if memo.exists() else {}
    data = _metadata(stem)
    for item in data["items"]:
        if item["kind"] == "code":
            item.update(found.get(item["id"], {"steps": [], "why_no_examples":
                                               "its check did not run in the solution"}))
    data["shipped_calls"] = shipped
    return data


def build_examples(root: Path, stems: list[str] | None = None) -> list[Path]:
    """Capture the examples of the given lessons (default: those out of date)."""
    written = []
    made_from = _fingerprints(root)
    for stem in (stale_examples(root) if stems is None else stems):
        target = examples.path_of(stem, _folder(root))
        examples.write(target, capture_lesson(root, stem))
        made_from[stem] = fingerprint(root, stem)
        (_folder(root) / FINGERPRINTS).write_text(json.dumps(made_from, indent=1,
                                                             sort_keys=True) + "\n",
                                                  encoding="utf-8")
        written.append(target)
    return written
