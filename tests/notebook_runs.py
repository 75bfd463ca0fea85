"""Run a notebook in a fresh Jupyter kernel as the grader's runner starts one (a start that
does not answer is made again: `inside.start_kernel`), for the tests that execute notebooks."""

from pathlib import Path

from nbclient import NotebookClient

from flashcourse.grader.inside import start_kernel


def run_notebook(notebook, folder: Path, timeout: float = 300, allow_errors: bool = True):
    """Execute `notebook` in place with `folder` as its working folder; returns it. With
    `allow_errors=False` the first failing cell raises nbclient's CellExecutionError."""
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            allow_errors=allow_errors,
                            resources={"metadata": {"path": str(folder)}})
    start_kernel(client)
    client.execute()
    return notebook
