"""The class edition's checks of code in a student's notebook: the visible cases as examples.

In the class edition the package holds no reference that answers an exercise. So a code check
in the student's notebook does not compute the right output: it replays examples instead,
precomputed when the instructor built the edition (`authoring/capture.py`): every call the
lesson's check made of the reference solution on its visible cases, with the inputs handed
over and what came back. For a function, its arguments and its result; for a Triton kernel,
each launch's grid, scalar arguments and the bytes of every tensor storage it was given, before
and after (padding and canaries included, so a store outside an output shows).

`run_examples` calls the student's answer on the same inputs and compares with what the
solution gave: the first case that differs is named, with the largest error and where it is.
The points come from the instructor's grader, which runs the lesson's own checks, with hidden
cases and each student's own inputs, on the submitted notebook.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import numpy as np
import torch

from .. import runtime
from ..blanks import BlankNotFilled, is_blank, refuse_blanks, source_of
from . import recording
from .compare import compare, printable_answer
from .errors import NotStarted, WrongAnswer

FOLDER = Path(__file__).with_name("examples")
FORMAT = 1

# (atol, rtol) of a student's result against the solution's, by dtype: both are within the
# lesson's tolerance of the exact answer, so these are about twice the lessons' own.
TOLERANCES = {"float64": (1e-8, 1e-6), "float32": (5e-4, 2e-3), "float16": (1e-2, 2e-2),
              "bfloat16": (4e-2, 4e-2)}
# tl.dot runs float32 as TF32 on a GPU: examples captured on a CPU are met within fp16's bound
GPU_FLOAT32 = (1e-2, 2e-2)


def path_of(stem: str, folder: Path | None = None) -> Path:
    """The examples of lessons/<stem>.qmd."""
    return (folder or FOLDER) / f"{stem}.json.gz"


def read(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path.name}: examples of another format; rebuild them")
    return data


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dict(data, format=FORMAT), sort_keys=True)
    # mtime=0: the same examples give the same bytes
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))


def tolerance(dtype_name: str) -> tuple[float, float]:
    if dtype_name == "float32" and not runtime.current().interpreter:
        return GPU_FLOAT32
    return TOLERANCES.get(dtype_name, (0.0, 0.0))


# ---------------------------------------------------------------- kernel launches as data


def _bytes_of(view: torch.Tensor) -> str:
    return base64.b64encode(view.cpu().numpy().tobytes()).decode()


def _storage_view(tensor: torch.Tensor) -> torch.Tensor:
    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(
        storage, 0, (storage.nbytes(),))


class LaunchCapture:
    """The arguments of one launch, with the tensors' storages shared as the launch shares
    them; `finish()` adds each storage's bytes after the launch."""

    def __init__(self, arg_names: list[str], args: tuple, kwargs: dict, grid):
        self.storages: list[torch.Tensor] = []
        self._index: dict[int, int] = {}
        named = dict(zip(arg_names, args, strict=False))
        self.args = [self._value(a, name) for a, name in zip(args, arg_names, strict=False)]
        self.kwargs = {k: self._value(v, k) for k, v in kwargs.items()}
        if callable(grid):
            grid = grid({**named, **kwargs})
        self.grid = [int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,))]
        self.before = [_bytes_of(s) for s in self.storages]

    def _value(self, value, name: str):
        if isinstance(value, torch.Tensor):
            storage = _storage_view(value)
            key = value.untyped_storage().data_ptr()
            if key not in self._index:
                self._index[key] = len(self.storages)
                self.storages.append(storage)
            return {"tensor": str(value.dtype).removeprefix("torch."), "name": name,
                    "storage": self._index[key], "shape": list(value.shape),
                    "stride": list(value.stride()), "offset": value.storage_offset()}
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, (bool, int, float, str, type(None))):
            return {"scalar": recording.encode(value)}
        if hasattr(value, "value") and isinstance(value.value, (bool, int, float)):
            return {"scalar": recording.encode(value.value)}  # a tl.constexpr
        raise TypeError(f"argument {name} is a {type(value).__name__}")

    def finish(self, label: str) -> dict:
        return {"kind": "launch", "label": label, "grid": self.grid, "args": self.args,
                "kwargs": self.kwargs, "before": self.before,
                "after": [None if after == before else after for after, before in
                          zip((_bytes_of(s) for s in self.storages), self.before,
                              strict=True)],
                "storage_dtypes": self._storage_dtypes()}

    def _storage_dtypes(self) -> list[str]:
        dtypes = ["uint8"] * len(self.storages)
        for spec in [*self.args, *self.kwargs.values()]:
            if "tensor" in spec and dtypes[spec["storage"]] == "uint8":
                dtypes[spec["storage"]] = spec["tensor"]
        return dtypes


def build_launch(step: dict, device: str):
    """The storages of a recorded launch, rebuilt with their bytes before it, and its
    arguments as views into them."""
    storages = [torch.frombuffer(bytearray(base64.b64decode(raw)), dtype=torch.uint8).to(device)
                if raw else torch.empty(0, dtype=torch.uint8, device=device)
                for raw in step["before"]]

    def value(spec):
        if "tensor" in spec:
            dtype = recording.tensor_dtypes()[spec["tensor"]]
            flat = storages[spec["storage"]].view(dtype)
            return flat.as_strided(spec["shape"], spec["stride"], spec["offset"])
        if "dtype" in spec:
            return recording.tensor_dtypes()[spec["dtype"]]
        return recording.decode(spec["scalar"])

    args = [value(spec) for spec in step["args"]]
    kwargs = {name: value(spec) for name, spec in step["kwargs"].items()}
    return storages, args, kwargs


def _where_in(step: dict, storage: int, element: int, itemsize: int) -> str:
    """Which argument holds element `element` of storage `storage`, at which index."""
    for spec in [*step["args"], *step["kwargs"].values()]:
        if spec.get("storage") != storage:
            continue
        ratio = recording.tensor_dtypes()[spec["tensor"]].itemsize / itemsize
        count = sum((n - 1) * s for n, s in zip(spec["shape"], spec["stride"], strict=True))
        positions = torch.arange(spec["offset"] + count + 1).as_strided(
            spec["shape"], spec["stride"], spec["offset"])
        found = torch.nonzero(positions == int(element / ratio))
        if len(found):
            index = tuple(int(i) for i in found[0])
            return f"`{spec['name']}` at index {index}"
    names = [spec["name"] for spec in step["args"] if spec.get("storage") == storage]
    around = f" around `{names[0]}`" if names else ""
    return f"the padding{around}, outside the tensor"


def _compare_storage(step: dict, number: int, got: torch.Tensor, label: str) -> None:
    dtype_name = step["storage_dtypes"][number]
    dtype = recording.tensor_dtypes()[dtype_name]
    before_raw, after_raw = step["before"][number], step["after"][number]
    if not before_raw:
        return
    before = values_of(before_raw, dtype)
    want = before if after_raw is None else values_of(after_raw, dtype)
    got_values = got.cpu().view(dtype).to(torch.float64).numpy()
    atol, rtol = (0.0, 0.0) if after_raw is None else tolerance(dtype_name)
    same = np.isclose(got_values, want, atol=atol, rtol=rtol, equal_nan=True)
    if same.all():
        return
    first = int(np.flatnonzero(~same)[0])
    where = _where_in(step, number, first, dtype.itemsize)
    if np.isclose(want[first], before[first], atol=0, rtol=0, equal_nan=True):
        what = ("your kernel changed a value the solution leaves as it was (a store outside "
                "the output, or into an input)")
    else:
        what = "your kernel's output differs from the expected output"
    raise WrongAnswer(
        f"{label}: {what}: {int((~same).sum())} of {same.size} values differ, first in "
        f"{where} (expected {want[first]:.6g}, got {got_values[first]:.6g}; tolerance "
        f"atol={atol:g}, rtol={rtol:g}).")


def values_of(raw: str, dtype: torch.dtype) -> np.ndarray:
    flat = torch.frombuffer(bytearray(base64.b64decode(raw)), dtype=torch.uint8)
    return flat.view(dtype).to(torch.float64).numpy()


def _run_launch(kernel, step: dict) -> None:
    from . import guards

    device = runtime.current().device
    storages, args, kwargs = build_launch(step, device)
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]

    def launch() -> None:
        kernel[tuple(step["grid"])](*args, **kwargs)

    guards.guarded(step["label"], launch, tensors=tensors)
    for number, storage in enumerate(storages):
        _compare_storage(step, number, storage, step["label"])


# ---------------------------------------------------------------- calls of a function


def _compare_value(got, want, label: str, where: str = "the result") -> None:
    if isinstance(want, (np.ndarray, torch.Tensor)):
        want_np = want.detach().cpu().numpy() if isinstance(want, torch.Tensor) else want
        if want_np.dtype.kind in "fc":
            atol, rtol = tolerance(str(want_np.dtype))
        else:
            atol, rtol = 0.0, 0.0
        compare(got, want_np, f"{label} ({where})", atol=atol, rtol=rtol)
        return
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            raise WrongAnswer(f"{label}: {where} should be a tuple of {len(want)} values, "
                              f"got {type(got).__name__}"
                              + (f" of {len(got)}" if isinstance(got, (tuple, list)) else ""))
        for number, (g, w) in enumerate(zip(got, want, strict=True)):
            _compare_value(g, w, label, f"item {number} of {where}")
        return
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            raise WrongAnswer(f"{label}: {where} should be a dict with keys {sorted(want)}")
        for key in want:
            _compare_value(got[key], want[key], label, f"{where}[{key!r}]")
        return
    if isinstance(want, bool) or isinstance(want, str) or want is None:
        if got != want:
            raise WrongAnswer(f"{label}: {where} is {printable_answer(got)}, which is not the "
                              "expected value.")
        return
    if isinstance(want, (int, float)):
        number = isinstance(got, (int, float, np.number)) and not isinstance(got, bool)
        if not number or not np.isclose(float(got), float(want), rtol=1e-6, atol=1e-9,
                                        equal_nan=True):
            raise WrongAnswer(f"{label}: {where} is {printable_answer(got)}, which is not the "
                              "expected value.")
        return


def _run_call(answer, step: dict) -> None:
    from . import registry

    args = recording.decode(step["args"])
    kwargs = recording.decode(step["kwargs"])
    got = registry.run_student(answer, step["label"], *args, **kwargs)
    _compare_value(got, recording.decode(step["result"]), step["label"])


# ---------------------------------------------------------------- the check


def refuse_stub(answer, exercise_id: str, kernel: bool) -> None:
    """A kernel exercise wants a @triton.jit kernel; a stub still handed out is not started."""
    if kernel:
        from triton.runtime.jit import KernelInterface

        if not isinstance(answer, KernelInterface):
            raise WrongAnswer(f"{exercise_id}: pass the @triton.jit kernel itself (got "
                              f"{type(answer).__name__}); the check launches it.")
    elif not callable(answer):
        raise WrongAnswer(f"{exercise_id}: pass your function itself (got "
                          f"{type(answer).__name__}).")
    refuse_blanks(answer, getattr(answer, "__name__", exercise_id))
    if "raise NotImplementedError" in (source_of(answer) or ""):
        raise NotStarted(f"{exercise_id}: your code still raises NotImplementedError. Replace "
                         "the `raise NotImplementedError` line with your implementation.")


def run_examples(exercise_id: str, answer, item: dict) -> str:
    """Run `answer` on the exercise's examples; the summary line, or WrongAnswer naming the
    first case that differs from the solution's output."""
    if is_blank(answer):
        raise BlankNotFilled(f"Fill in the blank: the answer to {exercise_id} is still ______.")
    steps = item.get("steps")
    if callable(answer) or steps:
        refuse_stub(answer, exercise_id, item.get("kernel", False))
    if not steps:  # called in other processes, or data: only the grader can check it
        return "recorded; checked when your instructor grades the notebook"
    gpu = not runtime.current().interpreter
    left = [step for step in steps if gpu and step.get("tf32_sensitive")]
    for step in steps:
        if step in left:
            continue
        if step["kind"] == "launch":
            _run_launch(answer, step)
        else:
            _run_call(answer, step)
    cases = len(dict.fromkeys(step["label"] for step in steps if step not in left))
    summary = (f"{cases} visible case(s) match the expected outputs; the grader runs hidden "
               "cases on your own inputs")
    if left:  # TF32 alone moves their outputs: the grader runs them in float16 on a GPU
        summary += (f" ({len(dict.fromkeys(s['label'] for s in left))} float32 case(s) with "
                    "large scores are left to the grader on a GPU)")
    return summary
