"""`python -m flashcourse grade PATH... [--out DIR] [--jobs N] [--timeout S] [--memory GIB]
[--secret TEXT] [--student-from folder|file|metadata] [--scores FILE] [--shard K/N]
[--format reports|gradescope]... [--no-sandbox]`; `grade merge DIR... --out DIR` (shards.py)
puts the parts of a sharded run, and later regrades, together.

For each submission the grader (this process, which never runs student code)

1. reads it once, without following links (links and files outside the folder are refused),
   validates it as data, matches its lesson, and scans it: edited grading cells, patching,
   reference calls in answer cells, kernel answers that are not `@triton.jit` functions, answer
   cells still blank (collect.py, validate.py, scan.py, answers.py);
2. runs it in its own bubblewrap sandbox (sandbox.py, limits.py, inside.py), with every grading
   cell taken from the pristine exercise notebook and FLASHCOURSE_GRADING=1, and talks to it
   over a channel (channel.py): before each grading cell it sends that exercise's key, derived
   from this run's secret (random unless --secret is given; it never enters a sandbox), and it
   keeps the record that grading cell produced;
3. after the sandbox has ended, replays every check of the lesson here, on those records and
   with the same keys, and scores (score.py). Hidden cases always run in the replay.

Reports (outputs.py: report.py, gradescope.py) are written only after every sandbox has
ended. Exit status 0 when every submission passed, 1 otherwise, 2 when there was nothing to
grade, no sandbox could be made, a --shard value, the scores file or a lesson source could not
be used.

The written answers (the open part of each question, its points and rubric in the lesson
source) are scored by the instructor, on top of the automatic points: the reports include
open-answers.csv, one row per submission and open question with a blank `score` column; graded
again with `--scores FILE` (that file, filled in), every report folds the scores into the totals
(written.py). A total stays marked provisional while any written answer of its submission is
unscored; an answer left as the exercise gave it scores 0 by itself. The scores file is checked
against this run before any sandbox starts. The pass line, and with it the exit status, stays on
the automatic points.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import bench, i18n, runtime
from ..authoring import build
from ..checks import recording, registry
from . import channel, collect, limits, outputs, report, sandbox, score, shards, written
from .submission import CRASHED, DEFAULT_TIMEOUT, MALFORMED, TIMEOUT, Submission

STARTUP_ALLOWANCE = 120  # seconds of a run that are not any cell's (kernel start, imports)
LOG_TAIL = 600  # characters of the end of a sandbox's error output kept in a note
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _sandbox_env(home: str, interpreter: bool,
                 lang: str = i18n.SOURCE_LANGUAGE) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {"PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": home,
           "LANG": "C.UTF-8", "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONNOUSERSITE": "1", "JUPYTER_RUNTIME_DIR": f"{home}/runtime",
           "JUPYTER_CONFIG_DIR": f"{home}/jupyter", "IPYTHONDIR": f"{home}/ipython",
           "MPLCONFIGDIR": f"{home}/matplotlib", "TRITON_CACHE_DIR": f"{home}/triton",
           registry.GRADING_MODE_ENV: "1", bench.SKIP_ENV: "1",
           recording.RECORD_CHANNEL_ENV: "display",
           i18n.LANG_ENV: lang}  # the messages of the executed notebook, in its language
    for name in THREAD_VARIABLES:  # one thread per kernel: parallel sandboxes must not
        env[name] = "1"  # oversubscribe the cores
    if interpreter:
        env[runtime.FORCE_INTERPRETER_ENV] = "1"
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TRITON_PTXAS_PATH"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def numbered_work_folder() -> Path:
    """A new private folder for a run's work, named by digits only: its path is on the
    sandbox's bwrap command line (the home template is bound from it), which a submission can
    read, so a random name of letters could spell a classmate's name there."""
    while True:
        folder = Path(tempfile.gettempdir()) / f"fcgrade-{secrets.randbelow(10**12):012d}"
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return folder


class Grader:
    def __init__(self, root: Path, timeout: float, jobs: int, sandboxed: bool,
                 hidden: list[Path], secret: bytes | None = None,
                 memory: int = sandbox.SANDBOX_MEMORY_LIMIT):
        self.root, self.timeout, self.jobs, self.sandboxed = root, timeout, jobs, sandboxed
        self.hidden = hidden
        self.slots: queue.Queue[int] = queue.Queue()
        for slot in range(jobs):
            self.slots.put(slot)
        self.replay_lock = threading.Lock()  # replays share the check registry's state
        self.work = numbered_work_folder()
        self.memory = memory  # bytes: every process of one sandbox together
        self.secret = secret or os.urandom(32)  # the run's own: never enters a sandbox
        self.interpreter = runtime.current().interpreter
        self.gpu = not self.interpreter
        self.home = self._home_template()

    def _home_template(self) -> Path:
        """A home folder copied into every sandbox, with matplotlib's font cache already built
        (each sandbox would otherwise spend a second building it)."""
        home = self.work / "home-template"
        env = dict(os.environ, MPLCONFIGDIR=str(home / "matplotlib"), MPLBACKEND="Agg")
        subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env,
                       capture_output=True, check=False)
        return home

    def run_one(self, number: int, job: collect.Job) -> Path:
        """Run one submission in its sandbox and score it; its work folder (on the host,
        written by the grader only: the executed notebook)."""
        work = self.work / f"s{number:04d}"
        (work / "out").mkdir(parents=True)
        keys = {ex.id: channel.exercise_key(self.secret, job.sub.label, ex.id)
                for ex in job.lesson.exercises}
        talk = channel.Conversation(
            notebook=job.notebook, keys=keys,
            grading_cells={cell: exercise for exercise, (cell, _) in job.checks.items()})
        # the budget of the lesson's own cells: a submission's extra cells buy it no time
        wall = self.timeout * job.budget_cells + STARTUP_ALLOWANCE
        slot = self.slots.get()
        try:
            with contextlib.ExitStack() as stack:
                status, seconds, log, cap = self._run_sandbox(stack, work, talk, wall,
                                                              job.sub.lang)
        finally:
            self.slots.put(slot)
        sub = job.sub
        sub.seconds = round(seconds, 2)
        if not self.sandboxed:
            sub.sandbox = "none"
        if talk.executed is not None:
            (work / "out" / "executed.ipynb").write_bytes(talk.executed)
        elif talk.executed_problem:
            (work / "out" / report.NOT_KEPT).write_text(talk.executed_problem, encoding="utf-8")
        if cap is not None and cap.hit:
            sub.problems.append(cap.message())
        with self.replay_lock:
            score.score(sub, job, talk, self.timeout, wall_killed=status is None)
        if status not in (0, None) and (sub.status == CRASHED or not sub.problems):
            # a crash keeps what the sandbox said: often the only account of the fault
            sub.notes.append(f"the sandbox exited with status {status}: "
                             f"{collect.printable(log.strip()[-LOG_TAIL:], LOG_TAIL)}")
        return work

    def _run_sandbox(self, stack: contextlib.ExitStack, work: Path,
                     talk: channel.Conversation, wall: float, lang: str):
        """Run one sandbox (or, unsandboxed, the runner alone): (status, seconds, the end of
        its error output, its memory cap or None)."""
        inside = Path(__file__).with_name("inside.py")
        runner = [sys.executable, str(inside), f"--timeout={self.timeout:g}"]
        if not self.sandboxed:
            folder = work / "unsandboxed"
            folder.mkdir()
            shutil.copytree(self.home, folder / "home-template")
            env = _sandbox_env(str(folder / "home"), self.interpreter, lang)
            return (*sandbox.run(runner + [f"--work={folder}"], env, wall, talk.talk), None)
        uid = None
        prefix: list[str] = []
        if os.geteuid() == 0:  # a user of its own, held by no other sandbox on this machine
            uid = stack.enter_context(limits.UidLease()).uid
            prefix = sandbox.drop_privileges(uid)
        cap = stack.enter_context(limits.memory_cap(self.memory, uid=uid))
        argv = (cap.prefix + limits.fresh_keyring_prefix() + sandbox.limits(self.gpu)
                + sandbox.command(self.root, self.hidden, prefix + runner, self.home,
                                  sandbox.WORK_LIMIT, sandbox.TMP_LIMIT))
        env = _sandbox_env(f"{sandbox.MOUNT_POINT}/home", self.interpreter, lang)
        return (*sandbox.run(argv, env, wall, talk.talk, on_start=cap.watch), cap)

    def close(self) -> None:
        if not os.environ.get("FLASHCOURSE_KEEP_GRADING_WORK"):
            shutil.rmtree(self.work, ignore_errors=True)


def hidden_folders(root: Path, submitted: list[Path], out: Path | None) -> list[Path]:
    """Folders a sandbox must not see although they lie in what it mounts: every folder above a
    submission up to the course (so a classmate's notebook beside it is hidden too), the
    reports, the students' workspace and the repository's history."""
    folders = {root / "work", root / "grading-output", root / ".git"}
    if out is not None:
        folders.add(out)
    for path in submitted:
        for parent in Path(os.path.abspath(path)).parents:
            if root.is_relative_to(parent):
                break  # never the course itself, nor anything above it
            folders.add(parent)
    return sorted(folders)


def grade(found: list[collect.Found], missing: list[str], out: Path | None = None,
          jobs: int | None = None, timeout: float = DEFAULT_TIMEOUT, root: Path | None = None,
          sandboxed: bool = True, progress=None, secret: str | None = None,
          memory: int | None = None, student_from: str = "folder",
          scores: written.Scores | None = None,
          formats: tuple[str, ...] = outputs.DEFAULT_FORMATS) -> list[Submission]:
    """Grade every found notebook; write the reports under `out` when given (`formats`:
    outputs.FORMATS). `secret` (else a
    random one) derives every exercise's key: the same secret and labels give the same inputs.
    `memory`: bytes of one sandbox. `student_from`: the rule that says whose each submission is
    (report.student_of). `scores`: the instructor's scores of the written answers
    (written.read_scores), checked against this run before any sandbox runs (ScoresError).
    The replays need grading mode in this process's environment: it is restored afterwards."""
    saved = {name: os.environ.get(name) for name in (registry.GRADING_MODE_ENV,
                                                     registry.SECRET_ENV)}
    try:
        return _grade(found, missing, out, jobs, timeout, root, sandboxed, progress, secret,
                      memory, student_from, scores, formats)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _grade(found: list[collect.Found], missing: list[str], out: Path | None = None,
          jobs: int | None = None, timeout: float = DEFAULT_TIMEOUT, root: Path | None = None,
          sandboxed: bool = True, progress=None, secret: str | None = None,
          memory: int | None = None, student_from: str = "folder",
          scores: written.Scores | None = None,
          formats: tuple[str, ...] = outputs.DEFAULT_FORMATS) -> list[Submission]:
    if student_from not in report.STUDENT_RULES:  # before any sandbox runs
        raise ValueError(f"unknown student rule {student_from!r}; the rules are: "
                         + ", ".join(report.STUDENT_RULES))
    if sandboxed:
        sandbox.bwrap()  # raises SandboxUnavailable with what to do
    root = (root or collect.course_root()).resolve()
    exercises = collect.load_exercises(root)
    editions = collect.load_editions(root)
    registry._load_checks()
    runtime.setup(verbose=False)
    os.environ[registry.GRADING_MODE_ENV] = "1"  # the replay runs the hidden cases
    os.environ.pop(registry.SECRET_ENV, None)  # the replay's inputs come from the run's keys
    jobs = max(1, jobs or min(len(found) or 1, os.cpu_count() or 1))
    hidden = hidden_folders(root, [item.path for item in found], out)
    if sandboxed:
        sandbox.check_hidden(root, hidden)  # before any sandbox: raises saying what to move
    subs: list[Submission] = []
    prepared: list[tuple[int, collect.Job]] = []
    for number, item in enumerate(found):
        try:
            sub, job = collect.prepare(item, exercises, editions)
        except Exception as err:  # noqa: BLE001  (one bad notebook must not stop the class)
            sub, job = collect.lesson_from_name(Submission(
                label=item.label, path=str(item.path), status=MALFORMED,
                problems=[f"malformed notebook: it could not be read ({type(err).__name__})"]),
                item.path, exercises), None
        subs.append(sub)
        if job is not None:
            prepared.append((number, job))
    collect.stop_scanner()  # every submission is scanned: its helper process can go
    for sub in subs:  # whose each is, before the scores (which name students) are checked
        sub.student_from = student_from
    written.attach(subs, root, exercises, editions)
    if scores is not None:  # a bad scores file stops the run before any sandbox
        written.fold(subs, scores)
    grader = Grader(root, timeout, jobs, sandboxed, hidden,
                    secret.encode("utf-8", "surrogatepass") if secret else None,
                    memory or sandbox.SANDBOX_MEMORY_LIMIT)
    executed: dict[int, Path] = {}
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {number: pool.submit(grader.run_one, number, job)
                       for number, job in prepared}
            for number, future in futures.items():
                try:
                    executed[number] = future.result()
                except Exception as err:  # noqa: BLE001  (the others are still graded)
                    subs[number].status = CRASHED
                    subs[number].problems.append(
                        f"the grader could not finish this submission ({type(err).__name__}: "
                        f"{collect.printable(str(err), 200)})")
                if progress:
                    progress(subs[number])
        for name in missing:
            subs.append(Submission(label=name, path=name, status=MALFORMED,
                                   problems=["no such file or folder"]))
        for sub in subs:
            sub.student_from = student_from
        if out is not None:  # every sandbox has ended: only now are reports written
            # a copy not kept gets a note, so the copies come before the reports
            report.copy_executed(subs, executed, out, channel.EXECUTED_LIMIT)
            outputs.write(subs, out, timeout, jobs, formats)
    finally:
        grader.close()
    return subs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a submitted notebook, or a folder of them (searched recursively)")
    parser.add_argument("--out", type=Path, default=Path("grading-output"),
                        help="folder for scorecard.txt, results.csv, students.csv, junit.xml, "
                             "progress.html, open-answers.csv, results.json and executed/ "
                             "(default: grading-output)")
    parser.add_argument("--jobs", "-j", type=int, default=None,
                        help="submissions graded at once (default: one per CPU core)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds one cell may run (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--root", type=Path, default=None,
                        help="course folder with exercises/ (default: found from here)")
    parser.add_argument("--secret", default=None,
                        help="derive every case's inputs from this text instead of a random "
                             "secret of the run, to grade again with the same inputs (it never "
                             "enters a sandbox; keep it out of the repository)")
    parser.add_argument("--memory", type=float, default=None, metavar="GIB",
                        help="memory of one sandbox, all its processes together, in GiB "
                             f"(default {sandbox.SANDBOX_MEMORY_LIMIT / 2**30:g})")
    parser.add_argument("--student-from", choices=report.STUDENT_RULES, default="folder",
                        help="whose each submission is, for students.csv and progress.html: "
                             "folder, the first folder of its path (default); file, its file "
                             "name before `__` (as ./course submit names it); metadata, its "
                             "notebook's metadata.flashcourse.student. With file or metadata "
                             "the id is a claim the student wrote: a lesson of a student "
                             "counts as passed when one of its submissions passed, and a "
                             "student with several submissions of one lesson is listed under "
                             "TO CHECK (scorecard, progress.html, students.csv's to_check)")
    parser.add_argument("--scores", type=Path, default=None, metavar="FILE",
                        help="an open-answers.csv of an earlier run with its score column "
                             "filled in: fold those scores of the written answers into every "
                             "report (checked before anything runs; the pass line stays on the "
                             "automatic points)")
    parser.add_argument("--shard", default=None, metavar="K/N",
                        help="grade only part K of N (counted from 1) of the submissions, by "
                             "a hash of each one's label; merge the parts' --out folders with "
                             "`grade merge DIR... --out DIR`")
    parser.add_argument("--format", action="append", choices=outputs.FORMATS, default=None,
                        help="what to write under --out: reports (the default: everything "
                             "above) and/or gradescope (gradescope/NAME/results.json per "
                             "submission, Gradescope's autograder format); repeat it for both")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run submissions without bubblewrap (unsafe; every report line "
                             "says so)")


def run_cli(args: argparse.Namespace) -> int:
    try:  # a scores file that cannot be used stops the run before anything is graded
        scores = written.read_scores(args.scores) if args.scores else None
    except written.ScoresError as err:
        print(f"cannot grade: {err}", file=sys.stderr)
        return 2
    try:
        shard = shards.parse_shard(args.shard) if args.shard else None
        if shard and scores:  # its rows name the whole class, a part holds some of it
            raise shards.ShardError("--scores with --shard: fold the scores in at the merge "
                                    "instead (grade merge DIR... --out DIR --scores FILE)")
    except shards.ShardError as err:
        print(f"cannot grade: {err}", file=sys.stderr)
        return 2
    formats = tuple(args.format or outputs.DEFAULT_FORMATS)
    found, missing = collect.collect(args.paths)
    if not found:
        print("nothing to grade: no .ipynb files under "
              + ", ".join(collect.printable(str(p)) for p in args.paths), file=sys.stderr)
        return 2
    everyone = [item.label for item in found] + missing  # the order an unsharded run reports
    if shard:
        found = shards.select(found, *shard)
        print(f"shard {shard[0]}/{shard[1]}: {len(found)} of {len(everyone) - len(missing)} "
              "submissions", file=sys.stderr)
    started = time.monotonic()
    try:
        if found:
            subs = grade(found, missing, out=args.out, jobs=args.jobs, timeout=args.timeout,
                         root=args.root, sandboxed=not args.no_sandbox, secret=args.secret,
                         memory=int(args.memory * 2**30) if args.memory else None,
                         student_from=args.student_from, scores=scores, formats=formats)
        else:  # an empty part still writes its (empty) reports, for the merge
            subs = [Submission(label=name, path=name, status=MALFORMED,
                               problems=["no such file or folder"]) for name in missing]
            report.copy_executed(subs, {}, args.out, channel.EXECUTED_LIMIT)
            outputs.write(subs, args.out, args.timeout, args.jobs or 1, formats)
    except (sandbox.SandboxUnavailable, written.ScoresError, build.LessonSourceError) as err:
        print(f"cannot grade: {err}", file=sys.stderr)
        return 2
    if shard:
        shards.write_shard_file(args.out, *shard, everyone, subs)
    print(report.scorecard_text(subs))
    elapsed = time.monotonic() - started
    timed_out = sum(s.status == TIMEOUT for s in subs)
    print(f"\n{sum(s.passed for s in subs)} of {len(subs)} submissions passed "
          f"({elapsed:.1f} s{f', {timed_out} stopped at the time limit' if timed_out else ''})."
          f" Reports in {args.out}/: "
          + ("scorecard.txt, results.csv, students.csv, junit.xml, progress.html, class.csv, "
             "open-answers.csv, results.json, submissions/, " if "reports" in formats else "")
          + ("gradescope/, " if "gradescope" in formats else "") + "executed/")
    claims = report.claims_lines(subs)
    if claims:
        print(f"{len(claims)} time{'s' if len(claims) > 1 else ''} a student has several "
              "submissions of one lesson (the best counts): check them, listed under TO CHECK "
              "above and in students.csv's to_check column.")
    unscored = sum(s.unscored for s in subs)
    if unscored:
        print(f"{unscored} written answer{'s are' if unscored > 1 else ' is'} not scored yet: "
              f"fill the score column of {args.out}/open-answers.csv and grade again with "
              "--scores FILE.")
    return 0 if all(s.passed for s in subs) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashcourse grade",
                                     description="Grade submitted lesson notebooks.")
    add_arguments(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
