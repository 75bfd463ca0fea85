"""The checks' runs of an answer on the ranks: `run_answer` runs the jobs of
`distributed/tries.py` (what runs in each rank) as one call of student code
(`registry.run_student`); `answers_by_case` runs an answer on every case at every ring size
and judges the cases in order, a crash or a deadlock where it happened."""

from __future__ import annotations

from ...distributed.tries import run_job, try_answer  # noqa: F401  (the checks' runner)
from ...i18n import _
from .. import registry
from .common import WORLD_SIZES

NOT_WRITTEN = "NotImplementedError"  # how a rank reports the stub of an exercise


def run_answer(answer, job: str, world: int, cases: list, labels: list[str]) -> list:
    return registry.run_student(run_job, _("{job} on {world} ranks").format(job=job,
                                           world=world), answer, job, world, cases,
                                labels, keep_results=True)


def answers_by_case(answer, job: str, cases: list, make_input, describe_case, section: str):
    """Run the answer on every case in rings of each size in WORLD_SIZES; yield (world,
    "case i/n (what it is)", params, the case's input make_input(*params), each rank's
    results). `describe_case(params, world)` says what a case is; a case in which a rank
    crashed or the ranks deadlocked raises there, after the cases before it were judged, its
    message ending with where the lesson explains the ring (`section`)."""
    for world in WORLD_SIZES:
        inputs = [make_input(*params) for params in cases]
        labels = [describe_case(params, world) for params in cases]
        results = run_answer(answer, job, world, inputs, labels)
        for number, per_rank in enumerate(results[:len(cases)], 1):
            params, case = cases[number - 1], inputs[number - 1]
            if isinstance(per_rank, dict):  # the run ended here
                failed = str(per_rank.get("failed"))
                if f"raised {NOT_WRITTEN}" in failed:
                    raise NotImplementedError(failed)
                raise registry.WrongAnswer(_("{failed} See {section}.").format(
                    failed=failed, section=_(section)))
            yield world, _("case {number}/{total} ({labels})").format(number=number,
                           total=len(cases), labels=labels[number - 1]), params, case, \
                per_rank
        if len(results) != len(cases):
            raise registry.WrongAnswer(_("{job} on {world} ranks: results came back for "
                                         "{count} of {total} cases.").format(
                job=job, world=world, count=len(results), total=len(cases)))
