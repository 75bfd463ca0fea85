import os
import subprocess
import sys

import pytest
import torch
from notebook_runs import run_notebook

from flashcourse import runtime
from flashcourse.runtime import CourseInputError


def _banner(env):
    code = ("import os, flashcourse as fc; fc.setup(); "
            "print(os.environ.get('TRITON_INTERPRET'))")
    clean = {k: v for k, v in __import__("os").environ.items()
             if k not in ("FLASHCOURSE_INTERPRET", "TRITON_INTERPRET")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_setup_prints_one_line_and_sets_the_interpreter_without_gpu():
    lines = _banner({})
    expected = ("Runtime: Triton interpreter on CPU (no CUDA GPU found)."
                if not torch.cuda.is_available() else "Runtime: compiled Triton")
    assert lines[0].startswith(expected)
    assert len(lines) == 2


def test_environment_variable_forces_the_interpreter():
    lines = _banner({"FLASHCOURSE_INTERPRET": "1"})
    assert lines == ["Runtime: Triton interpreter on CPU (forced by FLASHCOURSE_INTERPRET=1).",
                     "1"]


def test_bf16_dot_is_refused_in_the_interpreter(monkeypatch):
    monkeypatch.setenv("FLASHCOURSE_INTERPRET", "1")
    runtime.reset_for_tests()
    runtime.setup(verbose=False)
    x = torch.zeros(4, 4, dtype=torch.bfloat16)
    with pytest.raises(CourseInputError, match="bf16 tl.dot wrongly"):
        runtime.check_tensors(x, names=("q",), dot=True)
    runtime.check_tensors(x.float(), names=("q",), dot=True)
    runtime.check_tensors(x, names=("q",), dot=False)  # copies and casts of bf16 are fine
    runtime.reset_for_tests()


@pytest.mark.parametrize("bad, message", [
    (__import__("numpy").zeros(3), "torch.from_numpy"),
    (torch.zeros(3, device="meta"), "Move it with"),
])
def test_bad_inputs_name_the_fix(bad, message):
    with pytest.raises(CourseInputError, match=message):
        runtime.check_tensors(bad, names=("x",))


def test_cli_lists_exercise_ids():
    out = subprocess.run([sys.executable, "-m", "flashcourse", "list"], capture_output=True,
                         text=True, check=True).stdout
    assert "gpu-flash/flash-attention\t4\tcode" in out


def test_block_size_must_be_a_power_of_two():
    runtime.check_block_size("BLOCK", 64)
    with pytest.raises(CourseInputError, match=r"BLOCK=48 is not a power of two.*Use 32 or 64"):
        runtime.check_block_size("BLOCK", 48)


def test_launchers_refuse_non_power_of_two_blocks():
    # every launcher that takes block sizes says so before Triton fails deep inside
    from flashcourse.checks import softmax
    from flashcourse.checks import tiling_matmul as tiling
    from flashcourse.kernels import attention, host

    q = torch.zeros(1, 1, 8, 16)
    x = torch.zeros(2, 8)
    calls = {
        "BLOCK_M=48": lambda: host.forward(q, q, q, config=(48, 16, 4, 1)),
        "BLOCK_N=24": lambda: attention.forward_config(16, False, 64, 24),
        "BLOCK_M=96": lambda: attention.backward_config(16, 96, 16),
        "BLOCK=100": lambda: softmax.launch_online_softmax(None, x, x, 100),
        "BLOCK_K=20": lambda: tiling.launch(None, x, x.T, x, 16, 16, 20, 1),
    }
    for message, call in calls.items():
        with pytest.raises(CourseInputError, match=f"{message} is not a power of two"):
            call()




def test_the_setup_cell_of_a_notebook_prints_the_runtime_once(tmp_path):
    """`fc.setup()` as the last line of a cell: its line, and no `Runtime(...)` value under it;
    a runtime shown later on its own is its line."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import flashcourse as fc\nfc.setup()"),
                nbformat.v4.new_code_cell("fc.runtime.current()")]
    run_notebook(nb, tmp_path, timeout=120, allow_errors=False)
    for cell in nb.cells:
        texts = [o.get("text", "") for o in cell.outputs]
        assert [o.output_type for o in cell.outputs] == ["stream"], cell.outputs
        assert texts[0].count("Runtime: ") == 1 and "Runtime(" not in texts[0], texts


def test_compile_only_picks_compiled_triton_and_refuses_after_the_interpreter(monkeypatch):
    monkeypatch.setenv("FLASHCOURSE_INTERPRET", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # restored after the test, popped below
    runtime.reset_for_tests()
    runtime.setup(verbose=False)
    with pytest.raises(CourseInputError, match=r"call compile_only\(\) before setup"):
        runtime.compile_only()
    runtime.reset_for_tests()
    chosen = runtime.compile_only()
    assert not chosen.interpreter and runtime.current() is chosen and chosen.device == "cpu"
    assert "TRITON_INTERPRET" not in os.environ  # the kernels' @triton.jit must compile
    runtime.reset_for_tests()
