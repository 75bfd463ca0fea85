"""interpreter_calls: a kernel launch patches triton.language once for its device calls, and
every result is what Triton's own interpreter gives."""

import importlib
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from flashcourse import interpreter_calls, runtime
from flashcourse.kernels import ladder, verify

pytestmark = pytest.mark.skipif(not runtime.current().interpreter,
                                reason="the interpreter's device calls (no GPU run)")

# A helper that sees triton.language.core only, not triton.language: the launch below has not
# patched that module, so this helper's first call must patch it.
CORE_ONLY_HELPER = '''
import triton
from triton.language import core


@triton.jit
def clamp_below_zero(x):
    return core.where(x > 0, x, 0.0)
'''


@triton.jit
def _double(x):
    return x * 2.0


@triton.jit
def _doubles_then_clamps(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    for _ in range(3):
        x = _double(x)
    tl.store(y_ptr + offsets, core_only_helpers.clamp_below_zero(x),  # noqa: F821
             mask=offsets < n)


@triton.jit
def _fails(x):
    tl.static_assert(x.shape[0] == 3, "a failing helper")
    return x


@triton.jit
def _calls_a_failing_helper(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, _fails(tl.load(x_ptr + offsets)))


@triton.jit
def _doubles(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, _double(tl.load(x_ptr + offsets)))


@pytest.fixture
def helpers(tmp_path, monkeypatch):
    """core_only_helpers, imported from a file (Triton reads a kernel's source) as the global
    that _doubles_then_clamps calls."""
    (tmp_path / "core_only_helpers.py").write_text(CORE_ONLY_HELPER)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("core_only_helpers")
    monkeypatch.setitem(globals(), "core_only_helpers", module)
    yield module
    sys.modules.pop("core_only_helpers", None)


@pytest.fixture
def triton_calls(monkeypatch):
    """The names of the functions Triton's own _patch_lang is called for."""
    assert interpreter_calls.install()  # idempotent: conftest's runtime.setup installed it
    names = []
    own = interpreter_calls.triton_patch_lang

    def spy(fn):
        names.append(fn.__name__)
        return own(fn)

    monkeypatch.setattr(interpreter_calls, "triton_patch_lang", spy)
    return names


def _launch(x):
    y = torch.empty_like(x)
    _doubles_then_clamps[(4,)](x, y, x.numel(), BLOCK=32)
    return y


def test_a_launch_patches_once_for_its_helpers_and_again_for_a_module_it_did_not(
        helpers, triton_calls):
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    y = _launch(x)
    assert torch.equal(y, (8 * x).clamp(min=0))
    # four programs, each calling _double three times and the helper once: Triton alone
    # patches 17 times
    assert triton_calls == ["_doubles_then_clamps", "clamp_below_zero"]
    assert tl.core.is_builtin(tl.where) and tl.core.is_builtin(tl.dot)  # put back after it
    assert interpreter_calls._launches.running == []


def test_the_results_equal_triton_own_interpreter(helpers, monkeypatch):
    x = torch.randn(100, generator=torch.Generator().manual_seed(1))
    ours = _launch(x)
    steps = ladder.ladder_steps()
    ours_step = verify.forward(*verify.make_qkv(2, 3, 37, 16, torch.float32, "cpu", seed=3),
                               True, step=steps[-1])
    monkeypatch.setattr(interpreter, "_patch_lang", interpreter_calls.triton_patch_lang)
    monkeypatch.setattr(interpreter.GridExecutor, "__call__", interpreter_calls.triton_launch)
    assert torch.equal(_launch(x), ours)
    theirs_step = verify.forward(*verify.make_qkv(2, 3, 37, 16, torch.float32, "cpu", seed=3),
                                 True, step=steps[-1])
    for mine, triton_own in zip(ours_step, theirs_step, strict=True):
        assert torch.equal(mine, triton_own)


def test_a_launch_that_fails_leaves_nothing_behind(triton_calls):
    with pytest.raises(Exception, match="failing helper"):
        _calls_a_failing_helper[(1,)](torch.zeros(8), BLOCK=8)
    assert interpreter_calls._launches.running == []
    assert tl.core.is_builtin(tl.load)
    x = torch.randn(64)
    y = torch.empty_like(x)
    _doubles[(1,)](x, y, BLOCK=64)
    assert torch.equal(y, 2 * x)
    assert triton_calls == ["_calls_a_failing_helper", "_doubles"]


def test_setup_imports_no_triton_and_installs_once_the_interpreter_is_imported():
    code = ("import sys\n"
            "from flashcourse import interpreter_calls, runtime\n"
            "runtime.setup(verbose=False)\n"
            "assert 'triton' not in sys.modules\n"
            "import triton\n"
            "from triton.runtime import interpreter\n"
            "assert interpreter._patch_lang is interpreter_calls.patch_once_per_launch\n"
            "runtime.setup(verbose=False)\n"
            "assert sum(isinstance(f, interpreter_calls._InstallOnImport)\n"
            "           for f in sys.meta_path) == 0\n"
            "print('installed')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, FLASHCOURSE_INTERPRET="1"), timeout=300)
    assert done.stdout.strip() == "installed", done.stderr[-2000:]
