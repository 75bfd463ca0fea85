"""`python -m flashcourse grade`: grading submitted notebooks, one sandbox per submission.

Which side of the sandbox each module runs on:

- `cli.py` (grader, the host): the command: collect, run each sandbox, score, write reports.
- `collect.py` (grader): find submissions, refuse links, match the lesson, build the notebook
  the sandbox runs; `validate.py` checks every field of a notebook as data first.
- `scan.py` (grader, in a helper process bounded in time and memory): static scan of the
  student's cells: tampering, reference calls in answers (followed through helpers in other
  cells), dynamic name lookups, kernel answers that are not `@triton.jit` functions.
- `answers.py` (grader): which cells answer which exercise, and which are still blank.
- `sandbox.py`, `limits.py` (grader): the bubblewrap command; a uid per sandbox that no other
  sandbox on the machine holds, one memory bound for all its processes, fresh keyrings.
- `channel.py` (grader): the grader's end of the channel to a sandbox: the notebook and each
  exercise's key go in, records, tripwire hits and the runner's account come out.
- `inside.py` (**sandbox**): the only grader code that runs beside student code; it executes
  the notebook, holds the channel's other end, and imports nothing of the course.
- `score.py` (grader): replays every check on the records (`flashcourse.checks.recording`).
- `report.py` (grader): scorecard, CSV, JUnit XML, HTML and JSON, written after every sandbox;
  `analytics.py` counts what the class got wrong for it (progress.html, class.csv);
  `gradescope.py`: Gradescope's results.json per submission; `outputs.py`: which of them
  `--format` asks for.
- `shards.py` (grader): `--shard K/N` (a part of the class by a hash of each label) and
  `grade merge` (the parts, and later regrades, as one set of reports).
- `written.py` (grader): the written answers: their points and rubrics from the lesson source,
  and `--scores FILE`, an instructor's filled open-answers.csv, checked and folded in.
- `submission.py` (grader): the result records (statuses, items, problems).
- `pytest_plugin.py` (pytest): `pytest --nbval SUBMISSION.ipynb` grades through `cli.grade`.
- `samples.py` (tests): filled-in and known-wrong submissions; a class of result records with
  planted mistakes (`synthetic_class`).

Inside the sandbox the student's kernel runs the lesson's pristine grading cells; each
`check(...)` only records data there, on inputs from a key the grader issued for that exercise
just before its cell. Every point is decided on the grader's side by running the check again on
that data, so nothing the notebook does to its own process changes a verdict.
"""
