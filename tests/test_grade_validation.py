"""No submission can stop or slow the grading of a class: notebooks, files and records are read
as data, each bad one gets its own line (MALFORMED, or an error for one exercise), and the
scan of one submission is bounded in time. Unit tests: no sandbox runs here."""

import copy
import json
import math
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from flashcourse.checks import recording
from flashcourse.grader import collect, samples, score, validate
from flashcourse.grader.submission import MALFORMED

PROMPT = 30  # seconds: a read that takes longer has blocked


@pytest.fixture(scope="module")
def exercises(root):
    from flashcourse.checks import registry

    registry._load_checks()
    return collect.load_exercises(root)


@pytest.fixture(scope="module")
def solution(root) -> dict:
    return samples.filled_notebook(root)


def _prepare(tmp_path: Path, exercises, notebook=None, text: str | None = None):
    path = tmp_path / "01-gpu-flash.ipynb"
    if text is None:
        samples.write(notebook, path)
    else:
        path.write_text(text, encoding="utf-8")
    return collect.prepare(collect.Found(path, "student"), exercises)


def _answer_cell(notebook: dict, cell_id: str = "answer-q2") -> dict:
    return next(c for c in notebook["cells"] if c.get("id") == cell_id)


def _promptly(call, *args):
    """`call(*args)` in a thread: what it returned or raised, failing the test if it blocks."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call(*args)
        except BaseException as err:  # noqa: BLE001  (handed to the test)
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PROMPT)
    assert not thread.is_alive(), f"{call.__name__} blocked for {PROMPT} s"
    return outcome


# ---------------------------------------------------------------- notebooks


def test_a_solution_notebook_validates_and_is_prepared(tmp_path, exercises, solution):
    clean = validate.notebook(json.loads(json.dumps(solution)))
    assert len(clean["cells"]) == len(solution["cells"])
    assert all(isinstance(c["source"], str) and isinstance(c.get("id", ""), str)
               for c in clean["cells"])
    assert all("outputs" not in c for c in clean["cells"])
    sub, job = _prepare(tmp_path, exercises, solution)
    assert job is not None and sub.status != MALFORMED, sub.problems
    assert not sub.tampering, sub.tampering


def test_a_numeric_cell_id_gets_a_malformed_line(tmp_path, exercises, solution):
    notebook = copy.deepcopy(solution)
    number = notebook["cells"].index(_answer_cell(notebook)) + 1
    _answer_cell(notebook)["id"] = 12
    sub, job = _prepare(tmp_path, exercises, notebook)
    assert job is None and sub.status == MALFORMED
    assert sub.problems == [f"malformed notebook: cell {number}: `id` is a number; "
                            "expected text"]


def test_a_source_of_numbers_gets_a_malformed_line(tmp_path, exercises, solution):
    notebook = copy.deepcopy(solution)
    _answer_cell(notebook)["source"] = [1, 2, 3]
    sub, job = _prepare(tmp_path, exercises, notebook)
    assert job is None and sub.status == MALFORMED
    assert "`source` is a list of numbers; expected text" in sub.problems[0]


@pytest.mark.parametrize(("change", "expected"), [
    (lambda nb: nb.update(nbformat=3), "nbformat 3, expected nbformat 4"),
    (lambda nb: nb.update(nbformat="4"), "`nbformat` is text, expected nbformat 4"),
    (lambda nb: nb.update(cells={}), "`cells` is an object; expected a list"),
    (lambda nb: nb["cells"].append(7), "is a number; expected a cell"),
    (lambda nb: nb["cells"][0].update(cell_type=["code"]), "`cell_type` is a list of texts"),
    (lambda nb: nb["cells"][0].update(cell_type="python"), "`cell_type` is 'python'"),
    (lambda nb: nb["cells"][0].update(metadata=[]), "`metadata` is an empty list"),
    (lambda nb: nb["cells"][0].update(source="x = 1\0"), "`source` holds a NUL"),
    (lambda nb: nb["cells"][0].update(source="\ud800"), "lone surrogate"),
    (lambda nb: nb["cells"][0].update(id="x" * 300), "`id` is 300 characters long"),
    (lambda nb: nb.update(cells=[{"cell_type": "raw", "source": ""}] * 2001), "2,001 cells"),
])
def test_malformed_fields_are_named(solution, change, expected):
    notebook = copy.deepcopy(solution)
    change(notebook)
    with pytest.raises(ValueError, match=re.escape(expected)):
        validate.notebook(notebook)


def test_outputs_and_metadata_never_reach_the_grader(solution):
    notebook = copy.deepcopy(solution)
    notebook["cells"][0]["outputs"] = [{"anything": [1, {"deep": []}]}]
    notebook["cells"][0]["metadata"] = {"tags": ["raises-exception"]}
    notebook["cells"][0]["id"] = ""
    first = validate.notebook(notebook)["cells"][0]
    assert first == {"cell_type": first["cell_type"], "metadata": {},
                     "source": first["source"]}


def test_a_long_expression_gets_a_line_and_grading_goes_on(tmp_path, exercises, solution):
    notebook = copy.deepcopy(solution)
    _answer_cell(notebook)["source"] += "\nx = " + "+".join(["1"] * 5000)
    sub, _ = _prepare(tmp_path, exercises, notebook)  # returns: does not raise
    lines = sub.problems + sub.tampering
    assert sub.status == MALFORMED or any("could not be scanned" in line for line in lines), \
        lines
    sub, job = _prepare(tmp_path, exercises, solution)  # the next submission is scanned
    assert job is not None and not sub.tampering


def test_deep_json_nesting_gets_a_malformed_line(tmp_path, exercises):
    deep = "[" * 100_000 + "]" * 100_000
    text = '{"nbformat": 4, "cells": [], "metadata": {"x": ' + deep + "}}"
    sub, job = _prepare(tmp_path, exercises, text=text)
    assert job is None and sub.status == MALFORMED
    assert "nested more than 64 deep" in sub.problems[0]
    with pytest.raises(ValueError, match="nested more than 3 deep"):
        validate.parse_json(b'{"a": [[[1]]]}', max_depth=3)
    assert validate.parse_json(b'{"a": ["[[[[", "\\\\", "\\"[[["]}', max_depth=2) == {
        "a": ["[[[[", "\\", '"[[[']}


def test_a_5_mb_notebook_is_refused_at_once(tmp_path, exercises, solution):
    one_cell = copy.deepcopy(solution)
    _answer_cell(one_cell)["source"] += "\n" + "y = 1\n" * 800_000
    many_cells = copy.deepcopy(solution)
    many_cells["cells"] += [{"cell_type": "code", "id": f"c{n}", "metadata": {}, "outputs": [],
                             "source": "import numpy as np\nz = np.zeros(3)\n" * 30}
                            for n in range(4000)]
    spread = copy.deepcopy(solution)  # every cell within its own bound
    spread["cells"] += [{"cell_type": "code", "source": ""} for _ in range(20)]
    for number, cell in enumerate(spread["cells"]):
        cell["source"] = f"y{number} = 1\n" * 11_000
    for notebook, why in [(one_cell, "characters long (at most 100,000)"),
                          (many_cells, f"{len(many_cells['cells']):,} cells (at most 2,000)"),
                          (spread, "more than 1,000,000 characters of source")]:
        started = time.monotonic()
        sub, job = _prepare(tmp_path, exercises, notebook)
        seconds = time.monotonic() - started
        assert job is None and sub.status == MALFORMED and why in sub.problems[0], sub.problems
        assert (tmp_path / "01-gpu-flash.ipynb").stat().st_size > 4_000_000
        assert seconds < 20, f"{seconds:.1f} s to refuse a 5 MB notebook"


def test_a_scan_past_its_time_is_killed_and_the_next_one_runs(exercises, solution):
    pristine = exercises["01-gpu-flash"]
    cells = validate.notebook(copy.deepcopy(solution))["cells"]
    slow = copy.deepcopy(cells)
    for cell in slow:
        if cell.get("id", "").startswith("answer"):
            cell["source"] = "%time y = 1\n" * 8000  # minutes of IPython's transformer
    started = time.monotonic()
    with pytest.raises(collect.ScanFailed, match="ran past 0.5 s"):
        collect.scan_isolated(pristine, slow, {}, {}, seconds=0.5)
    assert time.monotonic() - started < 20
    assert collect.scan_isolated(pristine, cells, {}, {}).tampering == []
    with pytest.raises(collect.ScanFailed, match="KeyError"):  # raised in the scan: said
        collect.scan_isolated({}, cells, {}, {})
    assert collect.scan_isolated(pristine, cells, {}, {}).tampering == []


def test_an_unexpected_error_in_one_submission_gets_a_malformed_line(tmp_path, exercises,
                                                                       solution, monkeypatch):
    def explode(*args):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(collect, "match_exercise", explode)
    sub, job = _prepare(tmp_path, exercises, solution)
    assert job is None and sub.status == MALFORMED
    assert "could not be scanned (RecursionError: maximum recursion" in sub.problems[0]


# ---------------------------------------------------------------- files


def test_a_fifo_is_refused_without_blocking(tmp_path, exercises):
    fifo = tmp_path / "01-gpu-flash.ipynb"
    os.mkfifo(fifo)  # nobody writes: opening it for reading without O_NONBLOCK would block
    outcome = _promptly(collect.read_regular, fifo, 2**20)
    assert "FIFO" in str(outcome.get("error")), outcome
    outcome = _promptly(collect.prepare, collect.Found(fifo, "student"), exercises)
    sub, job = outcome["value"]
    assert job is None and sub.status == MALFORMED and "FIFO" in sub.problems[0]
    assert _promptly(score.read_untrusted, fifo, 2**20) == {"value": None}


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_a_device_is_refused_without_reading(tmp_path):
    outcome = _promptly(collect.read_regular, Path("/dev/zero"), 2**20)
    assert "character device" in str(outcome.get("error")), outcome
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    outcome = _promptly(collect.read_regular, link, 2**20)
    assert "symbolic link" in str(outcome.get("error")), outcome
    assert "a folder" in str(_promptly(collect.read_regular, tmp_path, 2**20).get("error"))


# ---------------------------------------------------------------- records


def _array(dtype: str, shape, data: bytes) -> dict:
    import base64

    return {"array": dtype, "shape": shape, "data": base64.b64encode(data).decode()}


def test_a_huge_shape_with_no_data_is_refused_before_allocating():
    started = time.monotonic()
    for value in ({"tensor": "float32", "shape": [600_000_000], "data": ""},
                  {"array": "<f4", "shape": [2**20, 2**20, 2**20], "data": ""},
                  {"tensor": "float64", "shape": [2**62, 4], "data": "AAAA"},
                  {"array": "<f8", "shape": [0, 2**62, 2**62], "data": ""},
                  {"tensor": "float32", "shape": [0, 2**40, 2**40], "data": ""}):
        with pytest.raises(recording.RecordMismatch, match="shape does not match its data"):
            recording.decode(value)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("value", "expected"), [
    (_array("<f4", [3], bytes(8)), "shape does not match its data"),
    (_array("<f4", [2, 2], bytes(15)), "shape does not match its data"),
    ({"array": "<f4", "shape": [1], "data": "AAA!AAA="}, "not base64"),
    (_array("<f4", [1] * 9, bytes(4)), "at most 8 sizes"),
    (_array("<f4", [-1], b""), "at most 8 sizes"),
    (_array("<f4", [True], bytes(4)), "at most 8 sizes"),
    (_array("<f4", "4", bytes(4)), "at most 8 sizes"),
    (_array("<U4", [1], bytes(16)), "dtype the grader does not read"),
    (_array("|V4", [1], bytes(4)), "dtype the grader does not read"),
    (_array(["<f4"], [1], bytes(4)), "dtype the grader does not read"),
    ({"tensor": "qint8", "shape": [1], "data": "AA=="}, "unknown tensor dtype"),
    ({"tensor": "Tensor", "shape": [1], "data": "AA=="}, "unknown tensor dtype"),
    ({"float": "1" * 10_000}, "unreadable number"),
    ("x" * (recording.MAX_TEXT_CHARS + 1), "text is too long"),
    ({"list": [0] * (recording.MAX_ITEMS + 1)}, "more than 1,000,000 items"),
])
def test_record_values_are_checked_as_data(value, expected):
    with pytest.raises(recording.RecordMismatch, match=expected):
        recording.decode(value)


def test_a_deeply_nested_record_is_refused():
    value = 1
    for _ in range(10_000):
        value = {"list": [value]}
    with pytest.raises(recording.RecordMismatch, match="nested too deeply"):
        recording.decode(value)


def test_a_record_holds_at_most_its_budget(monkeypatch):
    monkeypatch.setattr(recording, "MAX_DECODED_BYTES", 1000)
    with pytest.raises(recording.RecordMismatch, match="larger than the grader reads"):
        recording.decode({"list": [_array("<f8", [100], bytes(800))] * 2})


def test_recorded_values_still_decode_as_they_were():
    values = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((0, 4)),
              np.arange(3, dtype=">i8"), torch.arange(5, dtype=torch.bfloat16),
              torch.zeros(0, 3, dtype=torch.float16), torch.tensor([[True, False]]),
              (1, [2.5, math.inf, -math.inf], {"a": "b"})]
    for value in values:
        back = recording.decode(json.loads(json.dumps(recording.encode(value))))
        if isinstance(value, np.ndarray):
            assert back.dtype == value.dtype and np.array_equal(back, value)
        elif isinstance(value, torch.Tensor):
            assert back.dtype == value.dtype and torch.equal(back.cpu(), value)
        else:
            assert back == value
    assert math.isnan(recording.decode({"float": "nan"}))


def test_restored_storage_must_match_in_size():
    tensor = torch.zeros(4)
    recording.restore_storage(tensor, recording.encode_storage(torch.ones(4)))
    assert torch.equal(tensor, torch.ones(4))
    for data in (recording.encode_storage(torch.ones(5)), 17, "AAAA" * 4 + "A!A=" * 2, ""):
        with pytest.raises(recording.RecordMismatch):
            recording.restore_storage(tensor, data)
    recording.restore_storage(torch.zeros(0), "")  # an empty storage holds nothing


# ---------------------------------------------------------------- the runner's account


def test_a_bad_runner_account_cannot_crash_scoring():
    bad = {"cells": [
        {"id": "a", "status": ["ok"], "seconds": 10**400, "dropped": -5, "ename": [1],
         "evalue": "e" * 10**5},
        {"id": "b", "status": "kernel died", "seconds": float("nan"), "dropped": "many"},
        {"id": 7, "status": "ok"}, "junk", None,
        {"id": "c" * 10**4, "status": "timeout", "seconds": -3, "dropped": True},
    ], "running": ["x"]}
    runs, running, accounted = score.cell_runs(bad)
    assert accounted and running is None
    assert set(runs) == {"a", "b", "c" * 200}
    assert runs["a"] == {"id": "a", "status": "error", "ename": "", "evalue": "e" * 4000,
                         "seconds": 0.0, "dropped": 0}
    assert runs["b"]["status"] == "kernel died" and runs["b"]["seconds"] == 0.0
    assert runs["c" * 200]["seconds"] == 0.0 and runs["c" * 200]["dropped"] == 0
    for run in runs.values():
        score._why_not_run(run, 10)
    assert score.cell_runs({"cells": "x"}) == ({}, None, False)
    assert score.cell_runs([1]) == ({}, None, False)


def test_a_lesson_the_course_has_split_gets_a_line_that_says_what_to_do(tmp_path, exercises,
                                                                        solution):
    path = tmp_path / "ada__06-flash-attention.ipynb"  # lesson 6 before it became 6 and 7
    samples.write(solution, path)
    sub, job = collect.prepare(collect.Found(path, "ada"), exercises)
    assert job is None and sub.status == "UNMATCHED"
    assert "split it into 06-flash-forward and 07-flash-backward" in sub.problems[0]
    assert "./course update" in sub.problems[0]
    # a file of today's lesson 6 is matched as usual
    assert collect.split_lesson("ada__06-flash-forward.ipynb", exercises) is None
