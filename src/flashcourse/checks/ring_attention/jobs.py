"""The checks' runs of an answer on the ranks: `run_answer` runs the jobs of
`distributed/tries.py` (what runs in each rank) as one call of student code
(`registry.run_student`); `answers_by_case` runs an answer on every case at every ring size."""

from __future__ import annotations

from ...distributed.tries import run_job, try_answer  # noqa: F401  (the checks' runner)
from .. import registry
from .common import WORLD_SIZES


def run_answer(answer, job: str, world: int, cases: list) -> list:
    return registry.run_student(run_job, f"{job} on {world} ranks", answer, job, world, cases)


def answers_by_case(answer, job: str, cases: list, make_input):
    """Run the answer on every case in rings of each size in WORLD_SIZES; yield (world,
    "case i/n", params, the case's input make_input(*params), each rank's results)."""
    for world in WORLD_SIZES:
        inputs = [make_input(*params) for params in cases]
        results = run_answer(answer, job, world, inputs)
        for number, (params, case, per_rank) in enumerate(
                zip(cases, inputs, results, strict=True), 1):
            yield world, f"case {number}/{len(cases)}", params, case, per_rank
