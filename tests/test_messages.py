"""Messages first: in a notebook, a course error shows its message only (no traceback into the
package), an error raised by the student's own code shows the student's frames, and the cell
still fails."""

import re

import nbformat
from notebook_runs import run_notebook

ANSI = re.compile(r"\x1b\[[0-9;]*m")

CRASHING_ANSWER = '''\
def helper(Q):
    raise ValueError("my own bug")


def flash_attention(Q, K, V, block_size=64):
    return helper(Q)


check("gpu-flash/flash-attention", flash_attention)'''


def _run(tmp_path, sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    run_notebook(nb, tmp_path)
    return nb.cells


def _error(cell):
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1, cell.outputs
    return errors[0], ANSI.sub("", "\n".join(errors[0].traceback))


def test_course_errors_show_their_message_and_student_frames_only(tmp_path):
    cells = _run(tmp_path, [
        "import flashcourse as fc\nfrom flashcourse import ______, check\nfc.setup()",
        'check("gpu-flash/q1-memory", {"s_bytes": 1, "nxn_hbm_passes": ______, '
        '"flash_extra_memory": "O(N)"})',
        'check("gpu-flash/q1-memory", {"s_bytes": 1, "nxn_hbm_passes": 4, '
        '"flash_extra_memory": "O(N)"})',
        CRASHING_ANSWER,
        "1 / 0",
        'print("still running")',
    ])
    blank, text = _error(cells[1])
    assert blank.ename == "BlankNotFilled" and text.startswith("BlankNotFilled: Fill in")
    wrong, text = _error(cells[2])
    assert wrong.ename == "WrongAnswer"
    assert text.startswith("WrongAnswer: gpu-flash/q1-memory: 1 of 3 answers are wrong")
    assert "s_bytes = 1 is not right" in text and "section 5" in text
    assert "Traceback" not in text and "registry.py" not in text and "site-packages" not in text
    crash, text = _error(cells[3])
    assert crash.ename == "WrongAnswer" and "your code raised ValueError: my own bug" in text
    assert "Traceback of your code" in text and "in helper" in text
    assert "in flash_attention" in text
    assert "flashcourse" not in text.split("Traceback of your code")[1], text
    plain, text = _error(cells[4])  # the student's own error keeps IPython's traceback
    assert plain.ename == "ZeroDivisionError" and "Traceback" in text
    assert cells[5].outputs[0].text == "still running\n"


def test_a_course_error_still_fails_the_cell(tmp_path):
    import pytest
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in [
        "import flashcourse as fc\nfc.setup()", 'fc.check("gpu-flash/q1-memory", {})',
        'print("not reached")']]
    with pytest.raises(CellExecutionError, match="WrongAnswer"):
        run_notebook(nb, tmp_path, allow_errors=False)
    assert nb.cells[2].outputs == []


def test_recorded_tables_render_as_tables_in_a_notebook(root):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(
        "from flashcourse import bench\n"
        'bench.show_recorded("02-copy-bandwidth", ["kernel", "GB/s"])'))
    run_notebook(nb, root, timeout=120, allow_errors=False)
    outputs = nb.cells[0].outputs
    markdown = [o for o in outputs if "text/markdown" in o.get("data", {})]
    assert markdown, outputs  # a table, not Markdown source printed as text
    text = markdown[0]["data"]["text/markdown"]
    assert text.startswith("Measured ") and "| kernel | GB/s |" in text
    assert not [o for o in outputs if o.get("output_type") == "stream"]
