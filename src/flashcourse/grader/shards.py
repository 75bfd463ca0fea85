"""Grading a class in parts on as many machines as an engine gives (a Slurm job array, a
Kubernetes Indexed Job, a CI matrix: recipes in ci/), and putting the parts back together.

`grade SUBS --shard K/N --out DIR` collects every submission as an unsharded run does (so the
labels are the same) and grades those in part K of N. A submission's part depends on its label
alone (its SHA-256), so adding or removing files elsewhere moves no other submission.
DIR/shard.json records the part and every label of the class in the order an unsharded run
reports them.

`grade merge DIR... --out OUT` reads each DIR's results.json (and shard.json) and writes one set
of reports, the same as one unsharded run's but for timestamps and durations. The shards of one
run must all be there, each once. A DIR given later replaces the results of the labels it holds:
a late or regraded submission, graded alone from a folder laid out like the class's
(late/alice/01-gpu-flash.ipynb is alice/01-gpu-flash.ipynb), merged after the class, replaces
its earlier result without regrading anyone else. The instructor's score of a written answer is
kept when its text is unchanged; `--scores FILE` folds a filled open-answers.csv in, as `grade
--scores` does. Every input is read as data: a folder, file or field that is not what `grade`
writes stops the merge with one line naming it; nothing is written then.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from . import channel, outputs, report, written
from .collect import Found, printable, read_regular
from .submission import RecordError, Submission, from_dict

SHARD_FILE = "shard.json"
RESULTS_FILE = "results.json"
RESULTS_LIMIT = 1 << 30  # bytes of one results.json read back
SHARD_PATTERN = re.compile(r"(\d{1,6})/(\d{1,6})")


class ShardError(ValueError):
    """A --shard value or a merge input that cannot be used; the message says what to do."""


def parse_shard(text: str) -> tuple[int, int]:
    """(K, N) of `--shard K/N`, 1 <= K <= N."""
    found = SHARD_PATTERN.fullmatch(text.strip())
    if not found:
        raise ShardError(f"--shard {printable(text, 40)!r}: write it K/N, the part K of N "
                         "parts, counted from 1 (e.g. --shard 2/3)")
    part, parts = int(found.group(1)), int(found.group(2))
    if parts < 1 or not 1 <= part <= parts:
        raise ShardError(f"--shard {part}/{parts}: K must be from 1 to N "
                         f"(e.g. --shard 1/{max(parts, 1)}); a Kubernetes index counts from "
                         "0: pass index + 1")
    return part, parts


def part_of(label: str, parts: int) -> int:
    """The part (1 to `parts`) a label falls in: its SHA-256, nothing else."""
    digest = hashlib.sha256(label.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % parts + 1


def select(found: list[Found], part: int, parts: int) -> list[Found]:
    return [item for item in found if part_of(item.label, parts) == part]


def write_shard_file(out: Path, part: int, parts: int, everyone: list[str],
                     graded: list[Submission]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / SHARD_FILE).write_text(json.dumps(report.json_safe({
        "shard": part, "shards": parts, "class": everyone,
        "graded": [sub.label for sub in graded]}), indent=1), encoding="utf-8")


# ---------------------------------------------------------------- merging


@dataclass
class Part:
    folder: Path
    timeout: float
    jobs: int
    subs: list[Submission]
    shard: tuple[int, int] | None  # (K, N) when the folder is a shard's
    everyone: list[str]  # every label of the class, in report order (a shard's: its class)


def _read_json(path: Path, what: str):
    where = printable(str(path), 300)
    if not path.exists() and not path.is_symlink():
        raise ShardError(f"{where}: missing; {what}")
    try:
        data = read_regular(path, RESULTS_LIMIT)
    except ValueError as err:
        raise ShardError(f"{where}: {err}") from None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ShardError(f"{where}: not JSON ({type(err).__name__}); {what}") from None


def read_part(folder: Path) -> Part:
    """One merge input: the --out folder of a `grade` run, sharded or not, or of a merge."""
    where = printable(str(folder), 300)
    if not folder.is_dir() or folder.is_symlink():
        raise ShardError(f"{where}: not a folder; give the --out folders of grade runs")
    what = "give the --out folder of a `grade` run (it writes results.json there)"
    data = _read_json(folder / RESULTS_FILE, what)
    if not isinstance(data, dict) or not isinstance(data.get("submissions"), list):
        raise ShardError(f"{where}/{RESULTS_FILE}: it has no list of submissions; {what}")
    try:
        subs = [from_dict(item, where=f"submission {number + 1}")
                for number, item in enumerate(data["submissions"])]
    except RecordError as err:
        raise ShardError(f"{where}/{RESULTS_FILE}: {err}; {what}") from None
    timeout, jobs = data.get("timeout"), data.get("jobs")
    if type(timeout) not in (int, float) or type(jobs) is not int:
        raise ShardError(f"{where}/{RESULTS_FILE}: timeout and jobs must be numbers; {what}")
    labels = [sub.label for sub in subs]
    if len(set(labels)) != len(labels):
        raise ShardError(f"{where}/{RESULTS_FILE}: a label appears twice; {what}")
    shard, everyone = None, labels
    if (folder / SHARD_FILE).exists() or (folder / SHARD_FILE).is_symlink():
        shard, everyone = _read_shard_file(folder, labels)
    return Part(folder, timeout, jobs, subs, shard, everyone)


def _read_shard_file(folder: Path, labels: list[str]) -> tuple[tuple[int, int], list[str]]:
    where = printable(str(folder / SHARD_FILE), 300)
    data = _read_json(folder / SHARD_FILE, "it is written by grade --shard")
    if not isinstance(data, dict):
        raise ShardError(f"{where}: expected an object")
    part, parts = data.get("shard"), data.get("shards")
    everyone, graded = data.get("class"), data.get("graded")
    if not (type(part) is int and type(parts) is int and 1 <= part <= parts):
        raise ShardError(f"{where}: shard and shards must be whole numbers, 1 <= shard <= "
                         "shards")
    for name, value in (("class", everyone), ("graded", graded)):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ShardError(f"{where}: {name} must be a list of labels")
    if sorted(graded) != sorted(labels):
        raise ShardError(f"{where}: its graded labels are not those of results.json beside "
                         "it (was one of the two replaced?)")
    if not set(labels) <= set(everyone):
        raise ShardError(f"{where}: results.json holds labels its class does not list")
    return (part, parts), everyone


def _check_shards(parts: list[Part]) -> None:
    """Every run given in shards is given whole: each part 1..N once, all of the same class."""
    runs: dict[tuple[int, tuple[str, ...]], dict[int, Path]] = {}
    for part in parts:
        if part.shard is None:
            continue
        k, n = part.shard
        seen = runs.setdefault((n, tuple(part.everyone)), {})
        if k in seen:
            raise ShardError(f"{printable(str(part.folder), 300)}: shard {k}/{n} is given "
                             f"twice (also {printable(str(seen[k]), 300)})")
        seen[k] = part.folder
    for (n, _), seen in runs.items():
        absent = [str(k) for k in range(1, n + 1) if k not in seen]
        if absent:
            given = ", ".join(printable(str(folder), 200) for folder in seen.values())
            raise ShardError(f"shard(s) {', '.join(absent)} of {n} are missing (given: "
                             f"{given}); run `grade SUBS --shard K/{n}` for each and merge "
                             "them all")
    if len(runs) > 1:
        raise ShardError("the shards given come from different runs (their numbers of parts "
                         "or their classes differ): merge one sharded run at a time, then "
                         "merge its output with the others")


def keep_scores(old: Submission, new: Submission) -> int:
    """Give `new` the instructor's scores `old` had for written answers of the same text;
    how many were kept."""
    before = {item.id: item for item in old.written}
    kept = 0
    for item in new.written:
        earlier = before.get(item.id)
        if (item.score is None and earlier is not None and earlier.score is not None
                and earlier.answer == item.answer and earlier.answered == item.answered):
            item.score = earlier.score
            kept += 1
    return kept


def merge(folders: list[Path]) -> tuple[list[Submission], dict[str, Path], Part, list[str]]:
    """(the submissions in report order, the folder each one's result came from, the first
    input, a line per replaced result)."""
    if not folders:
        raise ShardError("nothing to merge: give the --out folders of grade runs")
    parts = [read_part(folder) for folder in folders]
    _check_shards(parts)
    order: dict[str, None] = {}
    chosen: dict[str, tuple[Submission, Path]] = {}
    replaced = []
    for part in parts:
        order.update(dict.fromkeys(part.everyone))
        for sub in part.subs:
            if sub.label in chosen:
                old, source = chosen[sub.label]
                kept = keep_scores(old, sub)
                replaced.append(f"{printable(sub.label)}: the result of "
                                f"{printable(str(part.folder))} replaces that of "
                                f"{printable(str(source))}"
                                + (f" ({kept} written score(s) kept)" if kept else ""))
            chosen[sub.label] = (sub, part.folder)
    absent = [label for label in order if label not in chosen]
    if absent:
        raise ShardError(f"{printable(absent[0])}: listed by a shard.json but in no "
                         "results.json given")
    subs = [chosen[label][0] for label in order]
    return subs, {label: chosen[label][1] for label in order}, parts[0], replaced


def copy_executed(subs: list[Submission], sources: dict[str, Path], out: Path) -> None:
    """Each submission's executed copy from the folder its result came from, into
    out/executed/ (read without following links, at most the grader's limit)."""
    folder = out / "executed"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for sub in subs:
        name = report.executed_name(sub)
        source = sources[sub.label] / "executed" / name
        if not source.exists():
            continue  # the run that graded it said why in its notes
        try:
            (folder / name).write_bytes(read_regular(source, channel.EXECUTED_LIMIT))
        except (ValueError, OSError) as err:
            sub.notes.append(f"executed copy not kept by the merge: {printable(str(err), 200)}")


def merge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folders", nargs="+", type=Path, metavar="DIR",
                        help="--out folders of grade runs: every shard of a sharded run, and "
                             "later runs whose results replace earlier ones")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for the merged reports (not one of the inputs)")
    parser.add_argument("--scores", type=Path, default=None, metavar="FILE",
                        help="a filled open-answers.csv to fold in, as grade --scores")
    parser.add_argument("--format", action="append", choices=outputs.FORMATS, default=None,
                        help="what to write: reports (default) and/or gradescope; repeat it "
                             "for both")


def merge_main(argv: list[str]) -> int:
    """`python -m flashcourse grade merge DIR... --out OUT`: exit 0 when every submission
    passed, 1 otherwise, 2 when the inputs or the scores file cannot be used."""
    parser = argparse.ArgumentParser(prog="python -m flashcourse grade merge",
                                     description="Merge the reports of grade runs.")
    merge_arguments(parser)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    for folder in args.folders:
        inside = folder.resolve()
        if out == inside or out.is_relative_to(inside) or inside.is_relative_to(out):
            print(f"cannot merge: --out {printable(str(args.out))} and the input "
                  f"{printable(str(folder))} overlap; write the merge to a folder of its own",
                  file=sys.stderr)
            return 2
    try:
        subs, sources, first, replaced = merge(args.folders)
        if args.scores is not None:
            written.fold(subs, written.read_scores(args.scores))
    except (ShardError, written.ScoresError) as err:
        print(f"cannot merge: {err}", file=sys.stderr)
        return 2
    copy_executed(subs, sources, args.out)
    outputs.write(subs, args.out, first.timeout, first.jobs,
                  tuple(args.format or outputs.DEFAULT_FORMATS))
    for line in replaced:
        print(f"replaced: {line}")
    print(f"{sum(s.passed for s in subs)} of {len(subs)} submissions passed, merged from "
          f"{len(args.folders)} folder(s) into {printable(str(args.out))}/.")
    return 0 if all(s.passed for s in subs) else 1
