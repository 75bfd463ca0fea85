"""The CI recipes in ci/ (GitHub Classroom, GitLab CI): one step per lesson, each running the
course's `pytest --nbval` grading on the file `./course submit` writes; the lesson 1 command,
as written there, run on sample submissions."""

import re
import shlex
import subprocess
import sys

import yaml

from flashcourse import workspace
from flashcourse.grader import samples


def _lessons(root) -> list[str]:
    return [path.stem for path in workspace.lessons(root)]


def _classroom_steps(root) -> dict[str, dict]:
    workflow = yaml.safe_load((root / "ci" / "github-classroom.yml").read_text())
    steps = workflow["jobs"]["grade"]["steps"]
    return {s["with"]["test-name"]: s["with"] for s in steps
            if "autograding-command-grader" in s.get("uses", "")}


def test_one_classroom_step_and_one_gitlab_job_per_lesson(root):
    steps = _classroom_steps(root)
    assert sorted(steps) == _lessons(root)
    for slug, step in steps.items():
        assert step["max-score"] == 10 and f"submit/*__{slug}.ipynb" in step["command"]
        assert "--nbval" in step["command"] and "no:xdist" in step["command"]
    jobs = yaml.safe_load((root / "ci" / "gitlab-ci.yml").read_text())
    scripts = [job["script"][0] for name, job in jobs.items() if name.startswith("grade-")]
    assert len(scripts) == len(_lessons(root))
    assert all("--junitxml=" in script and "--nbval" in script for script in scripts)


def _run(command: str, folder) -> int:
    argv = shlex.split(command)
    assert argv[0] == "python"
    pattern = argv[-1]
    notebooks = sorted(str(p.relative_to(folder)) for p in folder.glob(pattern))
    done = subprocess.run([sys.executable, *argv[1:-1], *notebooks], cwd=folder,
                          capture_output=True, text=True, timeout=900)
    return done.returncode


def test_the_lesson_1_command_grades_what_submit_writes(root, tmp_path, record_rejection):
    command = _classroom_steps(root)["01-gpu-flash"]["command"]
    assert re.search(r"submit/\*__01-gpu-flash\.ipynb$", command)
    samples.write(samples.filled_notebook(root), tmp_path / "submit" / "ada__01-gpu-flash.ipynb")
    assert _run(command, tmp_path) == 0
    wrong = samples.filled_notebook(root, mistakes=("no-rescale",))
    samples.write(wrong, tmp_path / "submit" / "ada__01-gpu-flash.ipynb")
    assert _run(command, tmp_path) == 1
    record_rejection("grade/nbval", "the Classroom step on a wrong lesson 1")
