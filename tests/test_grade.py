"""`python -m flashcourse grade`: right, wrong, tampered, malformed, crashing and looping
submissions of lesson 1, and the attack suite of tests/attacks.py, graded in one run, each in
its own bubblewrap sandbox; then the static scan, the collection and the reports on their own.

Timeouts are generous (TIMEOUT per cell): a right submission must pass on a busy machine. Only
the looping submission is graded with a short per-cell limit, and nothing else in that run is
asserted about timing.
"""

import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import attacks
import pytest

from flashcourse.__main__ import main
from flashcourse.grader import collect, samples, scan

TIMEOUT = 600  # seconds per cell: generous, so a loaded machine cannot fail a right answer
MEMORY_GIB = 4  # per sandbox in the graded class: the fork hog holds 6 GiB in three processes
LOOP_TIMEOUT = 10  # per cell in the looping submission's own run (its other cells are instant)

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed")


def _cell(nb, cell_id):
    return next(c for c in nb["cells"] if c.get("id") == cell_id)


def _course_digest(root: Path) -> dict:
    import sysconfig

    site_packages = Path(sysconfig.get_paths()["purelib"])
    files = [*(root / "src").rglob("*.py"), *(root / "exercises").glob("*"),
             root / "README.md", *site_packages.glob("*.pth")]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def _grade(folder: Path, out: Path, root: Path, timeout: float,
           *extra: str) -> tuple[int, str, dict]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(["grade", str(folder), "--out", str(out), "--jobs", "2",
                       "--timeout", str(timeout), "--root", str(root), *extra])
    report = json.loads((out / "results.json").read_text())
    subs = {s["label"].split("/")[0]: s for s in report["submissions"]}
    return status, stdout.getvalue(), subs


@pytest.fixture(scope="module")
def graded(tmp_path_factory, root):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grading-output")
    right = samples.filled_notebook(root, student="alice")  # the grader names her by her folder
    samples.write(right, folder / "alice" / "01-gpu-flash.ipynb")

    # wrong answer + a veto misconception + a cell that prints 3 MB + one that raises 2 MB
    wrong = samples.filled_notebook(root, mistakes=("no-rescale", "veto"), student="bob")
    _cell(wrong, "try-flash-attention")["source"] += "\nfor _ in range(30000): print('x' * 99)"
    at = wrong["cells"].index(_cell(wrong, "try-flash-attention")) + 1
    wrong["cells"].insert(at, {"cell_type": "code", "id": "bob-raises", "metadata": {},
                               "outputs": [], "execution_count": None,
                               "source": "raise ValueError('y' * 2_000_000)"})
    samples.write(wrong, folder / "bob" / "01-gpu-flash.ipynb")

    # edits a check cell (to a fake success line) and patches numpy in a student cell
    tampered = samples.filled_notebook(root, mistakes=("q1-wrong",), student="carol")
    _cell(tampered, "check-q1")["source"] = (
        'print("\u2713 gpu-flash/q1-memory: all 3 answers right")')
    _cell(tampered, "answer-q2")["source"] += "\nnp.allclose = lambda *a, **k: True"
    samples.write(tampered, folder / "carol" / "01-gpu-flash.ipynb")

    (folder / "dave").mkdir()
    (folder / "dave" / "01-gpu-flash.ipynb").write_text('{"cells": [{"cell_type": "code", ')

    # the kernel process exits half-way
    crash = samples.filled_notebook(root, student="frank")
    _cell(crash, "answer-q2")["source"] = "import os\nos._exit(3)"
    samples.write(crash, folder / "frank" / "01-gpu-flash.ipynb")

    attacks.build(root, folder)
    attacks.build_round_two(root, folder)
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.ipynb")
              if not p.is_symlink()}
    course_before = _course_digest(root)
    status, stdout, subs = _grade(folder, out, root, TIMEOUT, "--memory", str(MEMORY_GIB))
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.ipynb")
             if not p.is_symlink()}
    daemons = [p.parent.name for p in Path("/proc").glob("[0-9]*/cmdline")
               if b"ATTACK-DAEMON" in _read_or_empty(p)]
    keys = Path("/proc/keys").read_text() if Path("/proc/keys").exists() else ""
    return {"status": status, "stdout": stdout, "out": out, "subs": subs,
            "keys_left": "ATTACK-KEY" in keys, "unchanged": before == after,
            "course_unchanged": course_before == _course_digest(root), "daemons": daemons}


def _read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended meanwhile
        return b""


def _items(sub):
    return {item["id"]: item for item in sub["exercises"]}


def _executed_text(out: Path, name: str) -> str:
    found = [p for p in (out / "executed").iterdir() if p.name.startswith(name)]
    return found[0].read_text() if found else ""


def _executed_outputs(out: Path, name: str) -> str:
    """Everything the cells of a submission's executed copy printed."""
    nb = json.loads(_executed_text(out, name))
    return "\n".join(json.dumps(c.get("outputs", [])) for c in nb["cells"])


def test_right_submission_passes_with_hidden_cases(graded):
    alice = graded["subs"]["alice"]
    assert alice["status"] == "PASS", alice
    assert alice["earned"] == 10 and alice["total"] == 10 and alice["pass_line"] == 8
    assert not alice["tampering"] and not alice["problems"] and alice["sandbox"] == "bwrap"
    flash = _items(alice)["gpu-flash/flash-attention"]
    assert flash["earned"] == 4 and "11 cases match" in flash["message"]  # hidden cases ran


def test_wrong_submission_gets_points_per_item_and_the_veto(graded, record_rejection):
    bob = graded["subs"]["bob"]
    items = _items(bob)
    assert bob["status"] == "FAIL" and bob["earned"] == 6
    assert items["gpu-flash/flash-attention"]["status"] == "wrong"
    assert "were not rescaled" in items["gpu-flash/flash-attention"]["message"]
    assert items["gpu-flash/q1-memory"]["earned"] == 2
    assert items["gpu-flash/misconceptions"]["status"] == "veto"
    assert any("flash_reduces_flops" in v for v in bob["vetoes"])
    assert any("output of `try-flash-attention` was cut" in n for n in bob["notes"])
    assert len(_executed_text(graded["out"], "bob")) < 3_000_000
    record_rejection("grade/lesson-notebook", "wrong answer and veto misconception")


def test_tampered_submission_fails_and_says_what_changed(graded, record_rejection):
    carol = graded["subs"]["carol"]
    text = "\n".join(carol["tampering"])
    assert carol["status"] == "TAMPERED"
    assert "grading cell `check-q1` was edited" in text
    assert "answer-q2, line" in text and "np.allclose" in text
    # the pristine check ran in place of the edited one: the wrong Q1 earned nothing
    assert _items(carol)["gpu-flash/q1-memory"]["status"] == "wrong"
    record_rejection("grade/tamper", "edited check cell and patched np.allclose")


def test_malformed_notebook_gets_a_line(graded):
    dave = graded["subs"]["dave"]
    assert dave["status"] == "MALFORMED"
    assert "not valid JSON" in dave["problems"][0]


def test_kernel_crash_gets_a_line(graded):
    frank = graded["subs"]["frank"]
    assert frank["status"] == "CRASHED"
    assert any("kernel died" in p and "answer-q2" in p for p in frank["problems"])
    items = _items(frank)
    assert items["gpu-flash/q1-memory"]["status"] == "pass"
    assert items["gpu-flash/q2-coalescing"]["status"] == "not run"


# what each attack must end as: not PASS, and where the grader says why
REPORT_ATTACKS = {"newline-ansi-name", "csv-formula-name"}
FLAGGED = {"frame-reader", "calls-standard-attention", "calls-sdpa", "calls-package-attention",
           "duplicate-grading-id", "forge-record"}


@pytest.mark.parametrize("name", attacks.NAMES)
def test_attack_gets_no_unearned_points(graded, name, record_rejection):
    if name == "symlink":
        sub = graded["subs"]["symlink"]
        assert sub["status"] == "REFUSED" and "symbolic link" in sub["problems"][0]
        record_rejection("grade/attack", name)
        return
    sub = graded["subs"][attacks.FOLDERS.get(name, name)]
    if name in REPORT_ATTACKS:  # 8/10 on purpose: what matters is the line it prints
        assert "\n" not in sub["label"] and "\x1b" not in sub["label"], sub["label"]
        assert sub["status"] == "PASS" and sub["earned"] == 8
        return
    assert sub["status"] != "PASS", (name, sub)
    if name in attacks.PATCHES or name == "duplicate-grading-id":
        assert sub["earned"] == 0, (name, sub)  # every blank is still there
    if name in FLAGGED:
        assert sub["status"] == "TAMPERED" or sub["tampering"], (name, sub)
    if name.startswith("calls-"):
        assert any("uses the reference" in t for t in sub["tampering"]), sub
    if name == "fake-kernel":
        item = _items(sub)["softmax/row-kernel"]
        assert item["status"] == "refused" and item["earned"] == 0, item
        assert any("not defined as a @triton.jit" in t for t in sub["tampering"])
        assert any("torch.softmax" in t for t in sub["tampering"])
    if name.startswith("veto-"):
        assert sub["vetoes"] and "misconception" in sub["vetoes"][0], sub
        assert sub["earned"] >= 8  # everything else right: the veto alone fails it
    record_rejection("grade/attack", name)


# ---------------------------------------------------------------- the second round


@pytest.mark.parametrize("name", [*attacks.FORGERS, "forged-records-answered"])
def test_records_the_notebook_made_itself_earn_nothing(graded, name, record_rejection):
    """Forged records: sent by a replaced check, by a thread whatever cell runs, after the last
    cell, or left as files. Only a grading cell's own record counts, made on the inputs the
    grader issued for it in this run: none of these earns a point."""
    sub = graded["subs"][name]
    assert sub["status"] != "PASS", (name, sub)
    if name == "forged-records-answered":
        # its cells hold right answers (the self-checks' answers are data, as in the cells);
        # the code exercise's forged record was made on the public inputs
        item = _items(sub)["gpu-flash/flash-attention"]
        assert item["earned"] == 0 and sub["status"] == "TAMPERED", item
        assert any("not the ones the grader builds" in t for t in sub["tampering"]), sub
    else:  # nothing answered
        assert sub["earned"] == 0, (name, sub)
    if name == "background-publisher":
        assert any("record" in t for t in sub["tampering"]), sub
    record_rejection("grade/attack", name)


def test_forged_records_on_public_inputs_are_refused_by_the_replay(root, record_rejection,
                                                                   record_check):
    """The replay with this run's key refuses a record made with the public seeds."""
    from flashcourse.authoring import cells
    from flashcourse.checks import recording, registry
    from flashcourse.grader import channel

    _, record = record_check("gpu-flash/flash-attention", cells.load_name(
        root / "lessons" / "01-gpu-flash.qmd", "exercise-flash-attention", "flash_attention"))
    key = channel.exercise_key(b"run secret", "alice/01-gpu-flash.ipynb",
                               "gpu-flash/flash-attention")
    with pytest.raises(recording.RecordMismatch, match="inputs"):
        registry.replay("gpu-flash/flash-attention", record, key=key)
    assert "11 cases match" in registry.replay("gpu-flash/flash-attention", record)
    record_rejection("grade/replay", "a record made on the public inputs, replayed with a key")


@pytest.mark.parametrize("name", list(attacks.DISGUISED))
def test_a_disguised_reference_is_caught(graded, name, record_rejection):
    sub = graded["subs"][name]
    item = _items(sub)["gpu-flash/flash-attention"]
    assert sub["status"] == "TAMPERED" and item["earned"] == 0, (name, item)
    # the tripwire in the sandbox saw the call, whatever the static scan made of it
    assert any("called the reference" in t for t in sub["tampering"]), sub["tampering"]
    record_rejection("grade/attack", name)


@pytest.mark.parametrize("name", list(attacks.UNHOOKED))
def test_a_reference_imported_past_the_tripwires_is_caught(graded, name, record_rejection):
    sub = graded["subs"][name]
    item = _items(sub)["gpu-flash/flash-attention"]
    assert sub["status"] == "TAMPERED" and item["earned"] == 0, (name, item)
    # the records name the references loaded without their tripwire (torch's among them)
    assert any("tripwires were taken away" in t and "torch." in t for t in sub["tampering"]), (
        sub["tampering"])
    record_rejection("grade/attack", name)


@pytest.mark.parametrize("name", list(attacks.RESOURCES))
def test_an_attack_on_shared_resources_is_isolated(graded, name):
    """Each is a right submission besides its attack: its points stand, the attack found or
    kept nothing."""
    sub = graded["subs"][name]
    assert sub["earned"] == 10, (name, sub)
    printed = _executed_outputs(graded["out"], name)
    assert attacks.MARKER not in printed, (name, printed[:2000])
    if name == "disk-filler":
        assert "stopped at" in printed
    if name in ("mount-names", "answer-files"):
        assert "nothing found" in printed
    if name == "keyring-plant":
        assert not graded["keys_left"], "a key the sandbox stored outlived it"


def test_the_whole_sandbox_has_one_memory_bound(graded, record_rejection):
    sub = graded["subs"]["memory-fork-hog"]
    assert sub["status"] != "PASS" and sub["earned"] == 0
    assert any(f"more than {MEMORY_GIB:g} GiB" in p for p in sub["problems"]), sub
    record_rejection("grade/attack", "memory-fork-hog")


@pytest.mark.parametrize("name", [n for n in attacks.MALFORMED
                                  if n not in ("deep-expression", "control-char-id")])
def test_a_malformed_notebook_gets_its_own_line(graded, name, record_rejection):
    sub = graded["subs"][name]
    assert sub["status"] == "MALFORMED" and sub["problems"], sub
    record_rejection("grade/attack", name)


def test_a_control_character_in_a_cell_id_keeps_the_reports_whole(graded):
    assert graded["subs"]["control-char-id"]["earned"] == 10
    suites = ET.parse(graded["out"] / "junit.xml").getroot().findall("testsuite")
    assert len(suites) == len(graded["subs"])  # well-formed, one suite each


def test_attacks_reach_nothing_outside_their_sandbox(graded):
    assert graded["unchanged"], "grading modified a submitted file"
    assert graded["course_unchanged"], "a submission changed the course or the venv"
    assert graded["daemons"] == [], "a background process outlived its sandbox"
    out = graded["out"]
    for name in ("read-classmates", "write-course", "network", "memory-hog"):
        printed = _executed_outputs(out, name)
        assert "nothing found" in printed or "refused" in printed or "no network" in printed
        assert attacks.MARKER not in printed, (name, printed[:2000])
    subs = graded["subs"]
    assert subs["alice"]["status"] == "PASS"  # killers and forgers did not touch a classmate
    flood = _executed_outputs(out, "process-flood")
    started = int(flood.split("process limit reached after ")[1].split()[0])
    assert started < 600, flood[:500]  # the sandbox user's process limit (512) held
    for name in ("kill-group", "kill-parents"):
        assert subs[name]["status"] in ("CRASHED", "FAIL", "TAMPERED"), subs[name]


def test_reports_escape_names_and_formulas(graded):
    text = graded["stdout"]
    assert "\x1b" not in text
    assert not any(line.startswith("\x1b") or line.startswith("[32mPASS")
                   for line in text.splitlines())
    rows = list(csv.reader((graded["out"] / "results.csv").open()))
    labels = [r[0] for r in rows[1:]]
    assert any(label.startswith("'=HYPERLINK") for label in labels), labels
    assert not any(label.startswith("=") for label in labels)


def test_reports_exit_status_and_untouched_submissions(graded):
    assert graded["status"] == 1  # not every submission passed
    out = graded["out"]
    text = graded["stdout"]
    assert "alice/01-gpu-flash.ipynb: PASS" in text
    # her open answers are left as the exercise gave them: 0 of 6 written points, scored
    assert "Total: 10/16 (pass line 8 of the 10 automatic points)" in text
    assert "TAMPERED: grading cell `check-q1` was edited" in text
    rows = {r["submission"].split("/")[0]: r
            for r in csv.DictReader((out / "results.csv").open())}
    assert rows["alice"]["points"] == "10" and rows["alice"]["gpu-flash/q2-coalescing"] == "2"
    assert rows["bob"]["gpu-flash/misconceptions"] == "veto"
    suites = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    assert len(suites) == len(graded["subs"])
    alice = next(s for s in suites if s.get("name").startswith("alice"))
    assert alice.get("failures") == "0"
    page = (out / "progress.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "1 of " in page
    assert (out / "scorecard.txt").exists() and (out / "executed").is_dir()


@needs_bwrap
def test_infinite_loop_is_interrupted_and_grading_goes_on(tmp_path, root):
    looping = samples.filled_notebook(root, student="erin")
    body = _cell(looping, "exercise-flash-attention")["source"]
    _cell(looping, "exercise-flash-attention")["source"] = body.replace(
        "    n, d = Q.shape\n", "    n, d = Q.shape\n    while True:\n        pass\n", 1)
    _cell(looping, "try-flash-attention")["source"] = "print('skipped')"
    looping["cells"] = [c for c in looping["cells"] if c.get("id") != "answer-q3"]
    samples.write(looping, tmp_path / "in" / "erin" / "01-gpu-flash.ipynb")
    attacks.build_round_two(root, tmp_path / "in", names=attacks.SLOW)
    status, _, subs = _grade(tmp_path / "in", tmp_path / "out", root, LOOP_TIMEOUT)
    # a compile error the kernel never answers (ipykernel's handler raises before its reply):
    # its kernel is stopped after the limit and at most a grace, and only its run ends there
    deep = subs["deep-expression"]
    assert deep["status"] in ("TAMPERED", "CRASHED") and deep["earned"] < 8, deep
    assert any("stopped answering" in p or "kernel died" in p for p in deep["problems"]), deep
    erin = subs["erin"]
    items = _items(erin)
    assert items["gpu-flash/flash-attention"]["status"] in ("not run", "error")
    assert items["gpu-flash/q1-memory"]["status"] == "pass"  # later cells still ran
    assert items["gpu-flash/q3-tools"]["status"] == "not run"
    assert "NameError" in items["gpu-flash/q3-tools"]["message"]
    assert any("answer cell `answer-q3` is missing" in p for p in erin["problems"])
    assert erin["status"] == "FAIL" and status == 1


def test_nothing_to_grade_exits_2(tmp_path):
    assert main(["grade", str(tmp_path), "--out", str(tmp_path / "o")]) == 2


# ---------------------------------------------------------------- without a kernel

TAMPERING = {
    "check = lambda *a: None": "assigns to `check`",
    "import numpy\nnumpy.allclose = lambda *a, **k: True": "numpy.allclose",
    "np.allclose = lambda *a, **k: True": "np.allclose",
    "import flashcourse\nflashcourse.checks.registry.compare = lambda *a, **k: None":
        "flashcourse.checks.registry.compare",
    "fc.checks.registry.RESULTS['gpu-flash/flash-attention'] = 4": "RESULTS",
    "from flashcourse.checks.registry import RESULTS\nRESULTS.update({'x': 4})":
        "mutates `RESULTS`",
    "import flashcourse.reference as r\nr.standard_attention = lambda Q, K, V: Q": "r.standard",
    "def standard_attention(Q, K, V):\n    return Q": "defines a function named",
    "import builtins\nbuiltins.print = None": "imports `builtins`",
    "setattr(np, 'allclose', max)": "calls `setattr()`",
    "np.__dict__['allclose'] = max": "np.__dict__",
    "import sys\nsys.modules['numpy'] = None": "sys.modules",
    "from mymodule import check": "binds `check`",
    "exec('x = 1')": "calls `exec()`",
    "torch.allclose = max": "torch.allclose",
    "!pip install cheat": "shell command",
    "%run cheat.py": "magic `%run`",
    "%time np.allclose = max": "np.allclose",
    "import inspect\nf = inspect.currentframe().f_back.f_locals": "reads running frames",
    "import sys\nsys._getframe(1)": "reads running frames",
    # names resolved at run time: the original behind a tripwire, or any code at all
    "import pydoc\nf = pydoc.locate('flashcourse.reference.' + 'standard_attention')":
        "imports `pydoc`",
    "from unittest import mock\nf = mock.patch('flashcourse.reference.x').get_original()":
        "imports `unittest`",
    "from typing import get_type_hints": "resolves a name or runs source text",
    "import typing\nf = typing.get_type_hints(box)['x']": "typing.get_type_hints",
    "def box(x: \"__import__('flashcourse.reference').reference\"):\n    pass":
        "string annotation",
    "box.__closure__": "reaches into",
    "f = wrapper_closure[0].cell_contents": "reads a function's closure",
    # code the notebook brings in at run time: a module it wrote, a pickle
    "import solfa\nflash_attention = solfa.flash_attention": "not installed here",
    "from solfa import flash_attention": "not installed here",
    "import numpy as np\nf = np.load('answers.npy', allow_pickle=True)": "unpickles data",
    "import torch\nf = torch.load('answers.pt', weights_only=False)": "unpickles data",
    # a module's attribute written through a name bound to it (or to that name) in a cell
    "rec = fc.checks.recording\nrec.in_student_code = lambda: False": "patches module `rec`",
    "wires = fc.checks.tripwires\nw = wires\nw._called_by_student = max": "patches module `w`",
    # text run, or a dotted path looked up, by other modules
    "import timeit\ntimeit.timeit('f()', globals=g)": "imports `timeit`",
    "from multiprocessing.reduction import ForkingPickler": "imports `multiprocessing",
    "import string\nf = string.Formatter().get_field('0.reference', (fc,), {})":
        "resolves a name",
    # the shell, which publishes every output (a filter dropped the tripwires' ones)
    "import IPython\nshell = IPython.get_ipython()": "reaches the notebook's shell",
    "from IPython.core.getipython import get_ipython as g": "imports `IPython.core",
    # a kernel whose body calls Python: in the interpreter it runs, on the CPU
    "def helper(b):\n    return b\n@triton.jit\ndef k(x_ptr):\n    helper(x_ptr)":
        "uses `helper`",
    "@triton.jit\ndef k(x_ptr):\n    x = tl.load(x_ptr)\n    x.handle.data[:] = 0": "x.handle",
    "@triton.jit\ndef k(x_ptr):\n    host = triton.runtime.interpreter.np": "triton.runtime",
    # a refused module another module holds
    "f = triton.runtime.interpreter.inspect.getattr_static(a, 'b')": "module `inspect`",
    # sys reached through torch, which holds it (and os, threading) as an attribute
    "import torch\nmods = torch.sys.modules": "uses `sys.modules` (`torch.sys.modules`)",
    "import torch\nf = torch.sys._getframe(1).f_locals": "reads running frames",
    "import sys as s\nmods = s.modules": "uses `sys.modules`",
    "from sys import modules": "uses `sys.modules`",
    "import torch\nmods = getattr(torch.sys, 'modules')": "uses `sys.modules`",
    "import torch\nrun = torch.os.system": "reaches the module `os` through `torch.os`",
    "from torch import threading": "reaches the module `threading`",
    # hooks that run on every call, the checks' and the course launchers' included
    "import torch\ntorch.sys.setprofile(fill_outputs)": "hook that runs on every call",
    "import sys\nsys.settrace(hook)": "hook that runs on every call",
    "from sys import setprofile": "hook that runs on every call",
    "import threading\nthreading.setprofile_all_threads(hook)": "hook that runs on every call",
    "import threading\nthreading.settrace_all_threads(hook)": "hook that runs on every call",
    "import sys\nsys.monitoring.use_tool_id(3, 'mine')": "hook that runs on every call (`sys.mon",
    # torch's modes see every torch call; torch's own resolver of dotted names
    "from torch.overrides import TorchFunctionMode": "hook that runs on every call",
    "import torch\nmode = torch.overrides.TorchDispatchMode": "hook that runs on every call",
    "import torch\nref = torch._utils._import_dotted_name(name)": "resolves a name",
    # the course's grading code, and private attributes of what a cell did not make
    "from flashcourse.checks import guards": "imports `flashcourse.checks.guards`",
    "import flashcourse.checks.recording as rec": "the course's grading code",
    "run = fc.checks": "reaches the course's grading code or internals (`fc.checks`)",
    "from flashcourse.kernels import softmax as ks\nrun = ks.guards": "`ks.guards`",
    "from flashcourse.kernels import host\nrun = host._launch": "`host._launch`",
    "from flashcourse.kernels.host import _launch": "course's grading code or internals",
    "import torch\nmods = torch.sys.modules\nrec = mods['flashcourse.checks.recording']\n"
    "rec.in_student_code = max": "patches module `rec`",
    "rec = held_elsewhere()\nrec._student_depth = -1000": "`_student_depth` is private",
    "def off(module):\n    module._student_depth -= 1000": "`_student_depth` is private",
    "def off(box):\n    box._record_in_progress['events'] = []": "`_record_in_progress` is",
    "def off(self):\n    self._student_depth = -1000": "`_student_depth` is private",
    # object.__setattr__ is a write like any other, and only a plain literal name is one
    "def off(m):\n    object.__setattr__(m, '_student_depth', -1)": "`_student_depth` is private",
    "object.__setattr__(np, 'allclose', max)": "patches module `np`",
    "def f(self, name):\n    object.__setattr__(self, name, 1)": "reaches into `object.__setattr",
    "def f(self):\n    object.__setattr__(self, '__class__', int)": "reaches into `object.__s",
    # a %%time cell: its whole body is scanned, not only the magic's line
    "%%time\nimport flashcourse.checks.recording as rec\nrec._student_depth = -10**9":
        "the course's grading code",
    "%%time\nimport numpy as np\nnp.allclose = max": "patches module `np`",
    # Triton's hooks around a launch: a kernel's pre-run hooks, the knobs' launch hooks
    "softmax_row_kernel.add_pre_run_hook(fill)": "hook that runs on every call",
    "softmax_row_kernel.pre_run_hooks.append(fill)": "hook that runs on every call",
    "import triton\ntriton.knobs.runtime.launch_enter_hook.add(fill)": "hook that runs",
    "import triton\nconfigs = [triton.Config({}, pre_hook=fill)]": "hands Triton a hook",
    # another process runs what no check or tripwire sees
    "import subprocess\nsubprocess.run(['python', '-c', HELPER])": "imports `subprocess`",
    "import os\nrun = os.posix_spawn": "starts another process",
    "import os\npid = os.fork()": "starts another process",
    "from os import popen": "starts another process",
    "import asyncio\nrun = asyncio.create_subprocess_exec": "starts another process",
    "import torch\nrun = torch.multiprocessing": "module `multiprocessing`",
    # cells IPython runs although they are no plain Python: read as IPython reads them
    "    import flashcourse.checks.recording as rec\n    rec._student_depth = -1":
        "the course's grading code",
    ">>> import flashcourse.checks.recording as rec\n>>> rec._student_depth = -1":
        "the course's grading code",
    "%timeit -n1 -r1 import flashcourse.checks.recording as rec": "the course's grading code",
    "%%timeit -n1 -r1 import flashcourse.checks.recording as rec\npass":
        "the course's grading code",
    "%time %run -i /tmp/mine.py": "magic `%run`",
    "def f():\n    %time !python child.py\n    return 1": "shell command",
    "%timeit -n1 )(": "cannot read as Python",
    "import asyncio": "imports `asyncio`",
    "def f(loop):\n    return loop.subprocess_exec(1)": "starts another process",
    "import mmap": "imports `mmap`",
    "def f(k, fill):\n    k.rewritten_fn[k.fn] = fill": "launch machinery",
    # lesson 1 measures the memory an answer holds with it
    "import tracemalloc\ntracemalloc.stop()": "imports `tracemalloc`",
    # a name the grading cells call, rebound from inside a function
    "def f():\n    global check\n    check = max": "declares global `check`",
    # beside torch's precision switches, torch itself stays unwritable
    "import torch\ntorch.backends.cuda.matmul.allclose = max": "patches module `torch`",
    "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True": "patches module `torch`",
}


@pytest.mark.parametrize("source", list(TAMPERING))
def test_scan_flags_tampering(source, record_rejection):
    cells = [{"cell_type": "code", "id": "answer-x", "source": source}]
    findings = [str(f) for f in scan.scan_student_cells(cells)]
    assert any(TAMPERING[source] in f for f in findings), findings
    assert all(f.startswith("answer-x") for f in findings)
    record_rejection("grade/tamper", source.splitlines()[-1])


# Honest code beside the rules above: a class's own private state, reading (not setting) the
# trace hook, showing outputs, torch's own `modules` and a figure cleared by matplotlib.
HONEST = [
    "class Cache:\n    def __init__(self):\n        self._rows = {}\n\n"
    "    @classmethod\n    def reset(cls):\n        cls._count = 0\n",
    "import sys\nprint(sys.version, sys.gettrace(), sys.getprofile())",
    "from IPython.display import HTML, display\ndisplay(HTML('<b>tiles</b>'), clear=False)",
    "import matplotlib.pyplot as plt\nfig = plt.figure(clear=True)",
    "import torch\nlayer = torch.nn.modules.Linear(2, 2)",
    "import os\nworkers = os.cpu_count()",
    # outputs a cell clears are its own: the runner takes the package's notes aside
    "from IPython.display import clear_output\nclear_output(wait=True)\nprint(step)",
    "from IPython.display import display\ndisplay(result, clear=True)",
    # private state of the student's own objects, written from outside them
    "def reset(watch):\n    watch._total = 0.0\n",
    "class Feed:\n    def __init__(self):\n        self._channel = []\n        self._loaded = 0\n",
    "class Stopwatch:\n    def merge(self, other):\n        other._total += self._total\n",
    # a frozen dataclass normalising a field
    "@dataclass(frozen=True)\nclass Tile:\n    rows: int\n\n    def __post_init__(self):\n"
    "        object.__setattr__(self, 'rows', int(self.rows))\n",
    # a method's or a nested function's names are its own; names no grading cell reads
    "class Helper:\n    def check(self, x):\n        return x\n\n    def json(self):\n"
    "        return {}\n",
    "def helper():\n    check = 3\n    return check\n",
    "checks = [1, 2]\nfor item in checks:\n    print(item)\n",
    "import functools\nprint = functools.partial(print, flush=True)\n",
    # a student's own private attributes under everyday names
    "class Timer:\n    def __init__(self):\n        self._recording = []\n"
    "        self._owner = None\n        self._installed = False\n        self._replay = 0\n",
    "%%time\ntotal = sum(range(10))\n",
    # no shell: a method named like one; an allowed magic's code that parses
    "import platform\nprint(platform.system())\n",
    "%timeit -n 3 sum(range(10))\n",
    "t = %timeit -o -n1 sum(range(3))\n",
    # a student's own numerics: torch's precision switches
    "import torch\ntorch.backends.cuda.matmul.allow_tf32 = False\n"
    "torch.backends.cudnn.allow_tf32 = False\n",
]


@pytest.mark.parametrize("source", HONEST)
def test_scan_accepts_honest_code_beside_refused_forms(source):
    assert scan.scan_student_cells([{"cell_type": "code", "id": "a", "source": source}]) == []


def test_scan_accepts_every_solution_cell(root):
    nb = json.loads((root / "solutions" / "01-gpu-flash.ipynb").read_text())
    assert scan.scan_student_cells(nb["cells"]) == []


def test_an_honest_notebook_of_any_lesson_has_no_finding(root):
    """Every solution, and every exercise as handed out (a blank bound to a name, `x =
    ______`, once made that name look like the package's, and the lesson's own cell writing
    into `x` a patch of it), in both languages."""
    for folder in ("solutions", "exercises", "solutions/zh", "exercises/zh"):
        for path in sorted((root / folder).glob("*.ipynb")):
            cells = json.loads(path.read_text())["cells"]
            assert scan.scan_student_cells(cells) == [], (path, scan.scan_student_cells(cells))


def test_grading_cells_compared_with_the_exercise(root):
    pristine = json.loads((root / "exercises" / "01-gpu-flash.ipynb").read_text())["cells"]
    submitted = [dict(c) for c in pristine if c.get("id") != "check-q2"]
    _cell({"cells": submitted}, "scorecard")["source"] = "print('Total: 10/10')"
    problems = scan.compare_grading_cells(pristine, submitted)
    assert any("`check-q2` was deleted" in p for p in problems)
    assert any("`scorecard` was edited" in p for p in problems)


def test_run_notebook_uses_pristine_grading_cells_in_place(root):
    pristine = json.loads((root / "exercises" / "01-gpu-flash.ipynb").read_text())
    submitted = samples.filled_notebook(root)
    submitted["cells"] = [c for c in submitted["cells"] if c.get("id") != "check-q2"]
    _cell(submitted, "check-q1")["source"] = "pass"
    run = collect.build_run_notebook(submitted, pristine)
    ids = [c["id"] for c in run["cells"]]
    assert ids[0] == "setup" and ids[-1] == "scorecard"
    assert ids.index("check-q2") == ids.index("answer-q2") + 1
    assert _cell(run, "check-q1")["source"] == 'check("gpu-flash/q1-memory", q1_answers)'


def test_reference_calls_are_flagged_only_in_answer_cells(root):
    pristine = json.loads((root / "exercises" / "01-gpu-flash.ipynb").read_text())
    answers = collect.answer_ids(pristine)
    assert "exercise-flash-attention" in answers and "show-reference" not in answers
    solution = json.loads((root / "solutions" / "01-gpu-flash.ipynb").read_text())
    assert scan.reference_calls(solution["cells"], answers) == []
    cell = {"cell_type": "code", "id": "exercise-flash-attention",
            "source": "import torch\nout = torch.softmax(x, -1)"}
    assert "torch.softmax" in str(scan.reference_calls([cell], answers)[0])



def test_ready_made_softmax_and_derivatives_are_references_in_answers():
    """Private spellings of softmax and attention, and torch's autograd, do in an answer what
    the exercise asks the student to write."""
    sources = {
        "torch._safe_softmax": "def f(x):\n    return torch._safe_softmax(x, -1)\n",
        "torch._native_multi_head_attention":
            "def f(q):\n    return torch._native_multi_head_attention(q, q, q)\n",
        "y.backward": "def f(t):\n    y = (t * t).sum()\n    y.backward()\n    return t\n",
        "t.grad": "def f(t):\n    return t.grad\n",
    }
    for reached, source in sources.items():
        cells = [{"cell_type": "code", "id": "exercise-x", "source": source}]
        found = [str(f) for f in scan.reference_calls(cells, {"exercise-x"}, cells)]
        assert any(f"`{reached}`" in f for f in found), (reached, found)


def test_every_solution_is_free_of_reference_calls(root):
    for solution_path in sorted((root / "solutions").glob("*.ipynb")):
        pristine = json.loads((root / "exercises" / solution_path.name).read_text())
        solution = json.loads(solution_path.read_text())
        found = scan.reference_calls(solution["cells"], collect.answer_ids(pristine),
                                     pristine["cells"])
        assert found == [], (solution_path.name, [str(f) for f in found])


def test_a_module_the_setup_cell_imports_is_a_reference_in_answers(root):
    solution = json.loads((root / "solutions" / "09-modern-attention.ipynb").read_text())
    answers = collect.answer_ids(json.loads(
        (root / "exercises" / "09-modern-attention.ipynb").read_text()))
    cells = [dict(c) for c in solution["cells"]]
    answer = next(c for c in cells if c.get("id") == "exercise-block-map")
    answer["source"] = "def block_map(*args, **kwargs):\n    return ma.classify_blocks(*args)\n"
    found = [str(f) for f in scan.reference_calls(cells, answers)]
    assert any("ma.classify_blocks" in f for f in found), found

def test_kernel_answers_must_be_jit_functions():
    jit = "@triton.jit\ndef k(x_ptr):\n    pass\n"
    cells = [{"cell_type": "code", "id": "a", "source": jit}]
    assert scan.kernel_problems(cells, {"x/k": "k"}) == []
    fake = [{"cell_type": "code", "id": "a", "source": "class K:\n    fn = None\nk = K()"}]
    assert "not defined as a @triton.jit" in scan.kernel_problems(fake, {"x/k": "k"})[0]
    rebound = cells + [{"cell_type": "code", "id": "b", "source": "k = softmax_wrapper"}]
    assert "bound again" in scan.kernel_problems(rebound, {"x/k": "k"})[0]
    tuned = "@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x_ptr):\n    pass\n"
    assert scan.kernel_problems([dict(cells[0], source=tuned)], {"x/k": "k"}) == []
    # a decorator of the student's own named jit returns whatever kernel it likes
    for source in ("def jit(fn):\n    return other_kernel\n@jit\ndef k(x_ptr):\n    pass\n",
                   "@my.jit\ndef k(x_ptr):\n    pass\n",
                   "@swap\n@triton.jit\ndef k(x_ptr):\n    pass\n"):
        problems = scan.kernel_problems([dict(cells[0], source=source)], {"x/k": "k"})
        assert problems and "not defined as a @triton.jit" in problems[0], (source, problems)


def test_a_kernel_may_name_constants_made_of_numbers_and_math():
    source = ("import math\nLOG2E = tl.constexpr(1.0 / math.log(2.0))\nBLOCK = 64\n"
              "HALF: tl.constexpr = BLOCK // 2\n@triton.jit\ndef k(x_ptr):\n"
              "    x = tl.load(x_ptr + tl.arange(0, HALF))\n"
              "    tl.store(x_ptr, tl.exp2(x * LOG2E))\n")
    assert scan.scan_student_cells([{"cell_type": "code", "id": "a", "source": source}]) == []
    moved = source.replace("BLOCK = 64", "BLOCK = np.int64(64)")  # not a number's literal
    found = [str(f) for f in scan.scan_student_cells([{"cell_type": "code", "id": "a",
                                                        "source": moved}])]
    assert found and "uses `HALF`" in found[0], found


def test_a_kernel_may_name_triton_dtypes_and_unpacked_constants():
    source = ("ACC = tl.constexpr(tl.float32)\nLOW: tl.constexpr = triton.language.bfloat16\n"
              "LOG2E, NEG_INF = 1.4426950408889634, float('-inf')\nWIDE = ACC\n"
              "@triton.jit\ndef k(x_ptr):\n"
              "    x = tl.load(x_ptr, other=NEG_INF).to(ACC)\n"
              "    tl.store(x_ptr, tl.exp2(x * LOG2E).to(LOW).to(WIDE))\n")
    assert scan.scan_student_cells([{"cell_type": "code", "id": "a", "source": source}]) == []
    for bound, name in [("ACC = triton.runtime.interpreter.np", "ACC"),
                        ("NEG_INF, LOG2E = pair", "LOG2E"), ("NEG_INF, ACC = 1.0, np.exp", "ACC")]:
        found = [str(f) for f in scan.scan_student_cells(
            [{"cell_type": "code", "id": "a", "source": f"{bound}\n{source}"}])]
        assert any(f"uses `{name}`" in f for f in found), (bound, found)


def test_plain_string_annotations_are_not_findings():
    source = ("def f(x: 'np.ndarray', y: \"list[int] | None\") -> 'torch.Tensor':\n"
              "    z: 'float' = 1.0\n    return x\n")
    assert scan.scan_student_cells([{"cell_type": "code", "id": "a", "source": source}]) == []


def test_report_names_cannot_spoof_lines_or_formulas():
    from flashcourse.grader import report
    from flashcourse.grader.submission import Submission

    label = collect.printable("evil\n\x1b[32mPASS 10/10.ipynb")
    assert "\n" not in label and "\x1b" not in label
    sub = Submission(label=label, path=label)
    assert "\n" not in report.submission_text(sub).splitlines()[0][len(label):]
    assert report.csv_safe("=HYPERLINK(x)") == "'=HYPERLINK(x)"
    assert report.csv_safe("@SUM(1)").startswith("'")


def test_grader_refuses_without_bubblewrap(tmp_path, monkeypatch, capsys):
    from flashcourse.grader import sandbox

    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    (tmp_path / "01-gpu-flash.ipynb").write_text("{}")
    assert main(["grade", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "bubblewrap" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_without_the_sandbox_every_line_says_so(tmp_path, root):
    samples.write(samples.filled_notebook(root, student="alice"),
                  tmp_path / "in" / "alice" / "01-gpu-flash.ipynb")
    status, stdout, _ = _grade(tmp_path / "in", tmp_path / "out", root, TIMEOUT, "--no-sandbox")
    assert status == 0
    assert "alice/01-gpu-flash.ipynb: PASS  (UNSANDBOXED)" in stdout
    rows = list(csv.DictReader((tmp_path / "out" / "results.csv").open()))
    assert rows[0]["sandbox"] == "none"


def test_grading_leaves_the_environment_as_it_was(tmp_path, root, monkeypatch):
    from flashcourse.checks import registry

    monkeypatch.delenv(registry.GRADING_MODE_ENV, raising=False)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "01-gpu-flash.ipynb").write_text("not json")
    main(["grade", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--root", str(root),
          "--no-sandbox", "--secret", "s"])
    assert registry.GRADING_MODE_ENV not in os.environ
    assert registry.SECRET_ENV not in os.environ


@needs_bwrap
def test_a_course_under_tmp_is_bound_over_the_private_tmp(tmp_path):
    # bwrap mounts in order: a course (and its .venv) cloned under /tmp must come after the
    # sandbox's own /tmp, or the sandbox sees an empty /tmp and no course
    import tempfile

    from flashcourse.grader import sandbox

    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        course = Path(folder).resolve() / "course"
        (course / "src").mkdir(parents=True)
        argv = sandbox.command(course, [], ["true"], home_template=tmp_path,
                               work_limit=sandbox.WORK_LIMIT, tmp_limit=sandbox.TMP_LIMIT)
    private_tmp = argv.index("--tmpfs")
    assert argv[private_tmp + 1] == "/tmp"
    package = str(course / "src")
    bound = [i for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1] == package]
    assert bound and bound[0] > private_tmp


def test_submissions_inside_the_course_are_hidden_from_every_sandbox(root):
    from flashcourse.grader import cli, sandbox

    submitted = [root / "submissions" / "alice" / "01-gpu-flash.ipynb"]
    folders = cli.hidden_folders(root, submitted, root / "reports")
    assert root / "submissions" in folders and root / "submissions" / "alice" in folders
    assert root not in folders and root.parent not in folders
    argv = sandbox.command(root, folders, ["true"], home_template=Path("/tmp/x"),
                           work_limit=sandbox.WORK_LIMIT, tmp_limit=sandbox.TMP_LIMIT)
    # only the parts of the course a run reads are bound: the rest (.git included) is absent,
    # and no argument, so no mount point, names a hidden folder
    triples = [argv[i:i + 3] for i in range(len(argv))]
    package = str(root / "src")
    assert ["--ro-bind", package, package] in triples
    assert ["--ro-bind", str(root), str(root)] not in triples
    paths = [Path(a) for a in argv if a.startswith("/")]
    assert not [path for path in paths for folder in folders if path.is_relative_to(folder)]


def test_a_sandbox_that_never_ran_the_notebook_is_crashed(root, tmp_path):
    """No message from the runner at all (bubblewrap failed, the runner died at once): the
    submission is CRASHED with a line saying so, and earns nothing."""
    from flashcourse.checks import registry
    from flashcourse.grader import channel, score

    registry._load_checks()
    path = samples.write(samples.filled_notebook(root), tmp_path / "ada" / "01-gpu-flash.ipynb")
    found, _ = collect.collect([path])
    sub, job = collect.prepare(found[0], collect.load_exercises(root))
    talk = channel.Conversation(notebook=job.notebook, grading_cells={}, keys={})
    score.score(sub, job, talk, timeout=60, wall_killed=False)
    assert sub.status == "CRASHED" and sub.earned == 0, sub
    assert any("could not be run" in p for p in sub.problems), sub.problems


def test_the_runner_and_the_checks_name_the_same_outputs():
    """inside.py imports nothing of the course, so it keeps its own copy of the output types
    the checks publish: they must stay the same."""
    from flashcourse.checks import recording
    from flashcourse.grader import inside

    assert (inside.RECORD_MIME, inside.TRIPWIRE_MIME, inside.HINT_MIME) == (
        recording.RECORD_MIME, recording.TRIPWIRE_MIME, recording.HINT_MIME)


# ---------------------------------------------------------------- a kernel that will not start

HANGING_KERNEL = '''\
import os, sys, time
tries, hangs = sys.argv[1], int(sys.argv[2])
with open(tries, "a") as log:
    log.write(f"{os.getpid()}\\n")
if len(open(tries).read().split()) <= hangs:
    time.sleep(600)  # alive and silent, as a start seen under heavy load
os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[3:]])
'''


def _run_inside(tmp_path, monkeypatch, hangs: int, waits, cells=None,
                answers=None) -> tuple[list[dict], list[int]]:
    """inside.run on a notebook (default: one cell) with a python3 kernel whose first `hangs`
    starts never answer, the grader's `answers` before each cell: (the frames it sent, the
    pids of every kernel started)."""
    import sys

    import nbformat

    from flashcourse.grader import inside

    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (tmp_path / "hanging.py").write_text(HANGING_KERNEL)
    tries = tmp_path / "tries.txt"
    tries.touch()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(tmp_path / "hanging.py"), str(tries), str(hangs),
                 "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source, id=cell_id)
                      for cell_id, source in (cells or {"answer": "print(6 * 7)"}).items()]
    incoming, outgoing = io.BytesIO(), io.BytesIO()
    inside.write_frame(incoming, {"notebook": notebook})
    for answer in answers or [{"key": None, "grading": False}] * len(notebook.cells):
        inside.write_frame(incoming, answer)  # the grader's answer before each cell
    incoming.seek(0)
    (tmp_path / "work").mkdir()
    assert inside.run(incoming, outgoing, 120, tmp_path / "work", kernel_waits=waits) == 0
    outgoing.seek(0)
    frames = list(iter(lambda: inside.read_frame(outgoing, 2**30), None))
    return frames, [int(pid) for pid in tries.read_text().split()]


def _gone(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # a child of this process: reap it if it ended
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def _score_frames(root, tmp_path, frames):
    from flashcourse.checks import registry
    from flashcourse.grader import channel, score

    registry._load_checks()
    path = samples.write(samples.filled_notebook(root), tmp_path / "ada" / "01-gpu-flash.ipynb")
    found, _ = collect.collect([path])
    sub, job = collect.prepare(found[0], collect.load_exercises(root))
    talk = channel.Conversation(notebook=job.notebook, grading_cells={}, keys={})
    for frame in frames:
        if frame.get("type") in ("kernel", "executed", "done"):
            talk._handle(frame)
    score.score(sub, job, talk, timeout=60, wall_killed=False)
    return sub


def test_a_kernel_start_that_never_answers_is_made_again(root, tmp_path, monkeypatch):
    """A first start that stays silent past its wait is stopped and started afresh; the
    notebook then runs as usual, the stuck kernel is gone, and the report notes the restart."""
    frames, pids = _run_inside(tmp_path, monkeypatch, hangs=1, waits=(3, 600))
    kinds = [frame["type"] for frame in frames]
    assert kinds[:2] == ["kernel", "kernel"] and kinds[-2:] == ["executed", "done"], kinds
    assert frames[0]["ok"] is False and "respond" in frames[0]["error"], frames[0]
    assert frames[1]["ok"] is True
    ran = [frame["entry"] for frame in frames if frame["type"] == "ran"]
    assert [entry["status"] for entry in ran] == ["ok"], ran
    assert "42" in frames[-2]["notebook"]
    assert len(pids) == 2 and _gone(pids[0]), pids
    sub = _score_frames(root, tmp_path, frames)
    assert any("started again" in note and "respond" in note for note in sub.notes), sub.notes
    assert sub.status != "CRASHED", sub


def test_a_kernel_that_never_starts_is_crashed_with_a_line(root, tmp_path, monkeypatch):
    """Every try silent: no cell runs, each kernel is stopped, and the submission is CRASHED
    with a line that blames the machine and says to grade it again (never a FAIL: no answer
    of the student's was looked at)."""
    frames, pids = _run_inside(tmp_path, monkeypatch, hangs=9, waits=(2, 2))
    assert [frame["type"] for frame in frames] == ["kernel", "kernel", "executed", "done"]
    assert not any(frame.get("ok") for frame in frames[:2])
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), pids
    sub = _score_frames(root, tmp_path, frames)
    assert sub.status == "CRASHED" and sub.earned == 0, sub
    line = next(p for p in sub.problems if "did not start" in p)
    assert "2 tries" in line and "grade it again" in line, line


PUBLISH = ("from IPython.display import publish_display_data\n"
           "publish_display_data({{'application/vnd.flashcourse.{kind}+json': {value}}})\n")


def test_the_runner_sends_records_of_grading_cells_only(tmp_path, monkeypatch):
    """A record or tripwire output published by a cell that is not a grading cell never leaves
    the sandbox (the grader takes none; a big one only cost it memory); a hint note leaves as
    its exercise and level, nothing else."""
    cells = {"mine": PUBLISH.format(kind="record", value="{'x': [{}] * 1000}")
             + PUBLISH.format(kind="tripwire", value="{'name': 'n'}")
             + PUBLISH.format(kind="hint", value="{'exercise': 'a/b', 'level': 2, 'x': [1] * 99}"),
             "check-a": PUBLISH.format(kind="record", value="{'exercise': 'a/b'}")}
    frames, _ = _run_inside(tmp_path, monkeypatch, hangs=0, waits=(600,), cells=cells,
                            answers=[{"key": None, "grading": False},
                                     {"key": None, "grading": True}])
    sent = [(frame["type"], frame.get("cell")) for frame in frames
            if frame["type"] in ("record", "tripwire", "hint")]
    assert sent == [("hint", "mine"), ("record", "check-a")], sent
    hint = next(frame["hint"] for frame in frames if frame["type"] == "hint")
    assert hint == {"exercise": "a/b", "level": 2}


def test_a_cell_cannot_clear_what_the_runner_takes_from_it(tmp_path, monkeypatch):
    """A tripwire output, a hint note and a record are taken aside as they arrive: a cell that
    clears its outputs afterwards (at once, or before its next output) clears only its own."""
    clear = "from IPython.display import clear_output\n"
    cells = {"check-a": PUBLISH.format(kind="tripwire", value="{'name': 'n', 'exercise': 'a'}")
             + PUBLISH.format(kind="hint", value="{'exercise': 'a/b', 'level': 1}")
             + clear + "clear_output()\nprint('kept')\n"
             + PUBLISH.format(kind="record", value="{'exercise': 'a/b'}")
             + "clear_output(wait=True)\nprint('last')\n"}
    frames, _ = _run_inside(tmp_path, monkeypatch, hangs=0, waits=(600,), cells=cells,
                            answers=[{"key": None, "grading": True}])
    sent = [frame["type"] for frame in frames if frame["type"] in ("record", "tripwire", "hint")]
    assert sent == ["record", "tripwire", "hint"], sent
    executed = json.loads(next(f["notebook"] for f in frames if f["type"] == "executed"))
    assert ["".join(o.get("text", "")) for o in executed["cells"][0]["outputs"]] == ["last\n"]


def test_a_frame_of_many_tiny_objects_is_not_read():
    """`[{}] * N` is 3 bytes of JSON and about 60 bytes of Python per object: such a frame
    comes back as "too complex", unread; a record's shape (few objects, long strings) is read."""
    from flashcourse.grader import channel, inside

    def frame(message):
        stream = io.BytesIO()
        inside.write_frame(stream, message)
        stream.seek(0)
        return inside.read_frame(stream, 2**30, channel.BYTES_PER_CONTAINER)

    flood = frame({"type": "record", "record": {"x": [{}] * 200_000}})
    assert flood["type"] == "too complex", flood.get("type")
    record = {"type": "record", "record": {"calls": [{"bytes": "QUJD" * 250_000}] * 40}}
    assert frame(record) == record
    talk = channel.Conversation(notebook={}, grading_cells={}, keys={})
    talk._handle(flood)
    assert talk.executed_problem and "more JSON objects" in talk.notes[0], talk.notes
