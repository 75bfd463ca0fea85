"""A submission read as data, before any other part of the grader touches it (grader side).

`parse_json` parses untrusted JSON (a submitted notebook, a file a sandbox left) under a bound
on its nesting, so that no input reaches the recursion limit or the C stack. `notebook` checks
a parsed submission field by field and returns a copy that holds only what grading reads: each
cell's type, id and source, as text. A field of the wrong kind or size raises ValueError naming
the cell and the field, and the submission gets its own MALFORMED line: whatever a notebook
holds, the later steps (scan, matching, the run notebook) only ever see plain strings.
"""

from __future__ import annotations

import json

import numpy as np

MAX_JSON_DEPTH = 64  # arrays and objects inside one another; notebooks nest about 6 deep
MAX_CELLS = 2_000  # the lessons' notebooks have under 100
MAX_CELL_SOURCE = 100_000  # characters of one cell; the lessons' longest has about 6,000
MAX_SOURCE = 1_000_000  # characters of all cells together; the lessons' longest has 50,000
MAX_ID_CHARS = 256
CELL_TYPES = ("code", "markdown", "raw")

_DEPTH_CHUNK = 2**20  # bytes counted at a time, so counting needs little memory
_BRACKETS, _QUOTE = b"[]{}", ord('"')
_STEP = np.zeros(256, dtype=np.int64)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1


def json_depth(raw: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply arrays and objects nest in the JSON text `raw`, brackets inside strings not
    counted; linear time, no recursion, and counting stops once it passes `limit`."""
    # Escaped backslashes, then escaped quotes, go first: every quote left delimits a string.
    data = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    depth = deepest = inside = 0
    for start in range(0, len(data), _DEPTH_CHUNK):
        end = min(start + _DEPTH_CHUNK, len(data))
        if all(data.find(byte, start, end) < 0 for byte in _BRACKETS):  # inside long strings
            inside = (inside + data.count(_QUOTE, start, end)) & 1
            continue
        chunk = np.frombuffer(data, np.uint8, end - start, start)
        in_string = (np.cumsum(chunk == _QUOTE) + inside) & 1
        inside = int(in_string[-1])
        running = np.cumsum(_STEP[chunk] * (in_string == 0)) + depth
        deepest, depth = max(deepest, int(running.max())), int(running[-1])
        if deepest > limit:
            break
    return deepest


def parse_json(raw: bytes | str, max_depth: int = MAX_JSON_DEPTH):
    """`raw` parsed as JSON; ValueError saying why it cannot be (not UTF-8, not JSON, nested
    deeper than `max_depth`)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"not valid JSON: not UTF-8 text ({err.reason} at byte "
                         f"{err.start:,})") from None
    if json_depth(raw, max_depth) > max_depth:
        raise ValueError(f"JSON nested more than {max_depth} deep (arrays and objects inside "
                         "one another)")
    try:
        return json.loads(text)
    except RecursionError:  # the depth bound above makes this unreachable; kept as a guard
        raise ValueError("JSON nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, or an integer with too many digits
        raise ValueError(f"not valid JSON: {err}") from None


def kind(value) -> str:
    """What a JSON value is, in words, for a message (never the value itself: it may be huge)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    kinds = {kind(item) for item in value[:100]}
    if not kinds:
        return "an empty list"
    if len(kinds) > 1:
        return "a list of mixed values"
    single = kinds.pop()
    plural = {"a number": "numbers", "text": "texts", "a boolean": "booleans",
              "an object": "objects", "null": "nulls"}
    return f"a list of {plural.get(single, 'lists')}"


def _text(value: str, where: str, field: str) -> str:
    """`value` unchanged when a notebook tool could write it: no NUL, no lone surrogate."""
    if "\0" in value:
        raise ValueError(f"{where}: `{field}` holds a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where}: `{field}` holds a lone surrogate (not text)") from None
    return value


def _source(value, where: str) -> str:
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        value = "".join(value)
    if not isinstance(value, str):
        raise ValueError(f"{where}: `source` is {kind(value)}; expected text (or a list of "
                         "lines of text)")
    if len(value) > MAX_CELL_SOURCE:
        raise ValueError(f"{where}: its source is {len(value):,} characters long (at most "
                         f"{MAX_CELL_SOURCE:,})")
    return _text(value, where, "source")


def _cell(cell, number: int) -> dict:
    """One validated cell, numbered from 1 in messages, with only type, id and source."""
    where = f"cell {number}"
    if not isinstance(cell, dict):
        raise ValueError(f"{where} is {kind(cell)}; expected a cell (an object)")
    cell_type = cell.get("cell_type")
    if cell_type not in CELL_TYPES:
        found = repr(cell_type) if isinstance(cell_type, str) and len(cell_type) <= 40 \
            else kind(cell_type)
        raise ValueError(f"{where}: `cell_type` is {found}; expected one of "
                         f"{', '.join(CELL_TYPES)}")
    clean = {"cell_type": cell_type, "metadata": {}}
    cell_id = cell.get("id")
    if cell_id is not None:
        if not isinstance(cell_id, str):
            raise ValueError(f"{where}: `id` is {kind(cell_id)}; expected text")
        if len(cell_id) > MAX_ID_CHARS:
            raise ValueError(f"{where}: `id` is {len(cell_id):,} characters long (at most "
                             f"{MAX_ID_CHARS})")
        if cell_id:
            clean["id"] = _text(cell_id, where, "id")
    if cell.get("metadata") is not None and not isinstance(cell["metadata"], dict):
        raise ValueError(f"{where}: `metadata` is {kind(cell['metadata'])}; expected an object")
    clean["source"] = _source(cell.get("source", ""), where)
    return clean  # outputs and metadata are dropped: grading never reads them


def notebook(data) -> dict:
    """A parsed submission checked as data: nbformat 4, at most MAX_CELLS cells, each with a
    known type, an id that is text (or none) and a source that is text, within the size
    bounds. Returns a new notebook with only those fields (sources joined into one string);
    ValueError naming the cell and the field otherwise."""
    if not isinstance(data, dict):
        raise ValueError(f"the JSON is {kind(data)}, not a notebook (an object with `cells`)")
    version = data.get("nbformat")
    if type(version) is not int or version != 4:
        found = f"nbformat {version}" if type(version) is int else \
            f"`nbformat` is {kind(version)}" if "nbformat" in data else "no `nbformat`"
        raise ValueError(f"{found}, expected nbformat 4")
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise ValueError(f"`cells` is {kind(cells)}; expected a list of notebook cells"
                         if "cells" in data else "JSON without a list of notebook cells")
    if len(cells) > MAX_CELLS:
        raise ValueError(f"{len(cells):,} cells (at most {MAX_CELLS:,})")
    clean, total = [], 0
    for number, cell in enumerate(cells, 1):
        clean.append(_cell(cell, number))
        total += len(clean[-1]["source"])
        if total > MAX_SOURCE:
            raise ValueError(f"the cells hold more than {MAX_SOURCE:,} characters of source "
                             f"(passed at cell {number})")
    minor = data.get("nbformat_minor")
    return {"cells": clean, "metadata": {}, "nbformat": 4,
            "nbformat_minor": minor if type(minor) is int and 0 <= minor < 100 else 5}
