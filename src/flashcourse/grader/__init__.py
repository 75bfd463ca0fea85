"""`python -m flashcourse grade`: grading submitted notebooks, one sandbox per submission.

Which side of the sandbox each module runs on:

- `cli.py` (grader, the host): the command: collect, run each sandbox, score, write reports.
- `collect.py` (grader): find submissions, refuse links, match the lesson, build the notebook
  the sandbox runs.
- `scan.py` (grader): static scan of the student's cells: tampering, reference calls in answers,
  kernel answers that are not `@triton.jit` functions.
- `sandbox.py` (grader): the bubblewrap command and its limits (time, memory, processes, files).
- `inside.py` (**sandbox**): the only grader code that runs beside student code; it executes
  the notebook and imports nothing of the course.
- `score.py` (grader): replays every check on the recorded data (`flashcourse.checks.recording`).
- `report.py` (grader): scorecard, CSV, JUnit XML, HTML and JSON, written after every sandbox.
- `submission.py` (grader): the result records (statuses, items, problems).
- `samples.py` (tests): filled-in and known-wrong submissions.

Inside the sandbox the student's kernel runs the lesson's pristine grading cells; each
`check(...)` only records data there. Every point is decided on the grader's side by running
the check again on that data, so nothing the notebook does to its own process changes a verdict.
"""
