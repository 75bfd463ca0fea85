"""Sharded grading and the merge (grader/shards.py): a submission's part depends on its label
alone; bad --shard values and unusable merge inputs are refused with a line saying what to do;
the merge of a class's parts, of result records built in-process, is the unsharded reports; a
late submission replaces its earlier result and keeps the instructor's written scores. Then a
small class of real lesson 1 notebooks graded in its sandboxes: 3 shards as separate processes
and one unsharded run at the same time, merged, compared file by file. Only what is measured,
not graded, may differ there: durations (`seconds`, junit's `time`, Gradescope's
`execution_time`, class.csv's grading seconds), the run's `jobs` setting, the spans
progress.html marks `volatile` (its timestamp and grading times), and where an executed
notebook's printed text was cut into stream messages (the kernel flushes on a timer)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashcourse.checks import LESSON_MODULES
from flashcourse.grader import cli, outputs, report, samples, shards
from flashcourse.grader.submission import as_dict


def test_a_part_depends_on_the_label_alone():
    labels = [f"student{n:03d}/01.ipynb" for n in range(300)]
    before = {label: shards.part_of(label, 3) for label in labels}
    assert set(before.values()) == {1, 2, 3}
    assert all(60 < list(before.values()).count(k) < 140 for k in (1, 2, 3))
    more = labels + [f"late{n}/01.ipynb" for n in range(100)]
    assert all(shards.part_of(label, 3) == before[label] for label in more if label in before)
    assert shards.parse_shard("2/3") == (2, 3) and shards.parse_shard(" 1/1 ") == (1, 1)


@pytest.mark.parametrize("value, says", [
    ("0/3", "K must be from 1 to N"), ("4/3", "K must be from 1 to N"),
    ("1/0", "K must be from 1 to N"), ("3", "write it K/N"), ("a/b", "write it K/N"),
    ("1/3/3", "write it K/N")])
def test_a_bad_shard_is_refused_before_anything_runs(tmp_path, capsys, value, says):
    assert cli.main([str(tmp_path), "--shard", value, "--out", str(tmp_path / "o")]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_scores_go_to_the_merge_not_to_a_shard(tmp_path, capsys):
    scores = tmp_path / "open-answers.csv"
    report.write_open_answers(_class(), scores)
    assert cli.main([str(tmp_path), "--shard", "1/2", "--scores", str(scores)]) == 2
    assert "fold the scores in at the merge" in capsys.readouterr().err


def _class():
    names = list(LESSON_MODULES)
    return samples.synthetic_class(names[0], names[4])


def _write_parts(subs, folder: Path, parts: int) -> list[Path]:
    """The class's records written as `grade --shard K/N` would write them."""
    everyone = [sub.label for sub in subs]
    out = []
    for part in range(1, parts + 1):
        mine = [sub for sub in subs if shards.part_of(sub.label, parts) == part]
        target = folder / f"part-{part}"
        report.copy_executed(mine, {}, target, 1)
        outputs.write(mine, target, 60, 2)
        shards.write_shard_file(target, part, parts, everyone, mine)
        out.append(target)
    return out


def test_merged_parts_are_the_unsharded_reports(tmp_path):
    subs = _class()
    report.copy_executed(subs, {}, tmp_path / "whole", 1)
    outputs.write(subs, tmp_path / "whole", 60, 2)
    parts = _write_parts(_class(), tmp_path, 3)
    assert shards.merge_main([*map(str, reversed(parts)), "--out", str(tmp_path / "m")]) == 1
    for name in ("results.json", "results.csv", "class.csv", "junit.xml", "students.csv",
                 "open-answers.csv", "scorecard.txt"):
        assert (tmp_path / "m" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert _volatile_free(tmp_path / "m" / "progress.html") == \
        _volatile_free(tmp_path / "whole" / "progress.html")


def _empty(folder: Path) -> Path:
    folder.mkdir()
    return folder


@pytest.mark.parametrize("breaks, says", [
    (lambda parts: parts[:2], "shard(s) 3 of 3 are missing"),
    (lambda parts: parts + parts[:1], "is given twice"),
    (lambda parts: [parts[0] / "results.json"], "not a folder"),
    (lambda parts: [_empty(parts[0].parent / "empty")], "results.json: missing"),
    (lambda parts: (parts[0].joinpath("results.json").write_text("{oops"), parts)[1],
     "not JSON"),
    (lambda parts: (parts[1].joinpath("results.json").write_text(json.dumps(
        {"timeout": 60, "jobs": 1, "submissions": [{"label": 7, "path": "x"}]})), parts)[1],
     "submission 1.label: expected text, got int"),
    (lambda parts: (parts[2].joinpath("shard.json").write_text(json.dumps(
        {"shard": 5, "shards": 3, "class": [], "graded": []})), parts)[1],
     "1 <= shard <= shards"),
])
def test_an_unusable_merge_input_is_refused(tmp_path, capsys, breaks, says):
    parts = _write_parts(_class(), tmp_path, 3)
    given = breaks(parts)
    assert shards.merge_main([*map(str, given), "--out", str(tmp_path / "merged")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("cannot merge: ") and says in error, error
    assert "Traceback" not in error and not (tmp_path / "merged").exists()


def test_the_merge_never_writes_into_an_input(tmp_path, capsys):
    parts = _write_parts(_class(), tmp_path, 1)
    assert shards.merge_main([str(parts[0]), "--out", str(parts[0])]) == 2
    assert "overlap" in capsys.readouterr().err


def test_a_late_submission_replaces_its_result_and_keeps_the_written_scores(tmp_path):
    subs = _class()
    for sub in subs[:2]:
        sub.written[0].score = 1.5  # the instructor's, from an earlier --scores
    outputs.write(subs, tmp_path / "class", 60, 2)
    late = _class()[:2]  # regraded: s00 now passes, s01 also rewrote its written answer
    late[0].status, late[0].earned = "PASS", 10.0
    late[1].written[0].answer = late[1].open_answers["open-q1"] = "A new answer."
    outputs.write(late, tmp_path / "late", 60, 1)
    merged = tmp_path / "merged"
    assert shards.merge_main([str(tmp_path / "class"), str(tmp_path / "late"),
                              "--out", str(merged)]) == 1
    data = json.loads((merged / "results.json").read_text())["submissions"]
    assert [row["label"] for row in data] == [sub.label for sub in subs]  # same order
    assert data[0]["status"] == "PASS" and data[0]["written"][0]["score"] == 1.5
    assert data[1]["written"][0]["score"] is None  # a new text is scored anew
    assert data[2] == json.loads(json.dumps(as_dict(subs[2])))


def _volatile_free(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return re.sub(r'<span class="volatile">.*?</span>', "", text, flags=re.S)


def _comparable(path: Path, relative: str):
    """The file's content less what is measured, not graded (see the module's docstring)."""
    if relative.endswith(".html"):
        return _volatile_free(path)
    if relative == "results.json":
        data = json.loads(path.read_text())
        data.pop("jobs")
        for sub in data["submissions"]:
            sub.pop("seconds")
        return data
    if relative.startswith("gradescope/"):
        data = json.loads(path.read_text())
        data.pop("execution_time")
        return data
    if relative == "results.csv":
        return [line.rsplit(",", 1)[0] for line in path.read_text().splitlines()]
    if relative == "class.csv":
        return [line for line in path.read_text().splitlines() if ",grading seconds," not in line]
    if relative == "junit.xml":
        return re.sub(r' time="[^"]*"', "", path.read_text())
    if relative.startswith("executed/"):
        return _streams_joined(json.loads(path.read_text()))
    return path.read_bytes()


def _streams_joined(notebook: dict) -> dict:
    """The notebook with each cell's consecutive stream outputs of one name as one output."""
    for cell in notebook["cells"]:
        joined = []
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", []))
            if (output["output_type"] == "stream" and joined
                    and joined[-1]["output_type"] == "stream"
                    and joined[-1]["name"] == output["name"]):
                joined[-1]["text"] += text
            else:
                joined.append(dict(output, text=text) if "text" in output else output)
        cell["outputs"] = joined
    return notebook


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_three_shards_graded_apart_merge_into_the_unsharded_reports(root, tmp_path):
    lesson = list(LESSON_MODULES)[0]
    plans = [(), ("no-rescale",), ("q1-wrong", "veto")]
    names = {}  # one submission per part: each shard grades one (a sandbox costs seconds)
    for number in range(100):
        name = f"student{number:02d}"
        names.setdefault(shards.part_of(f"{name}/{lesson}.ipynb", 3), name)
    names = [names[part] for part in (1, 2, 3)]
    subs = tmp_path / "submissions"
    for name, mistakes in zip(names, plans, strict=True):
        samples.write(samples.filled_notebook(root, lesson, mistakes=mistakes, student=name),
                      subs / name / f"{lesson}.ipynb")
    common = [sys.executable, "-m", "flashcourse", "grade", str(subs), "--secret", "shards",
              "--format", "reports", "--format", "gradescope", "--root", str(root)]
    runs = [subprocess.Popen([*common, "--shard", f"{k}/3", "--jobs", "1",
                              "--out", str(tmp_path / f"part-{k}")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for k in (1, 2, 3)]
    # the unsharded run meanwhile, in this process
    assert cli.main([*common[4:], "--jobs", "2", "--out", str(tmp_path / "whole")]) == 1
    for run in runs:
        output, _ = run.communicate(timeout=500)
        assert run.returncode in (0, 1), output[-3000:]  # 1: graded, one did not pass
    merged = tmp_path / "merged"
    parts = [str(tmp_path / f"part-{k}") for k in (3, 1, 2)]  # in any order
    assert shards.merge_main([*parts, "--out", str(merged), "--format", "reports",
                              "--format", "gradescope"]) == 1
    whole = tmp_path / "whole"
    files = sorted(str(p.relative_to(whole)) for p in whole.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(merged)) for p in merged.rglob("*") if p.is_file())
    assert len([f for f in files if f.startswith("executed/")]) == len(plans)
    assert len([f for f in files if f.startswith("gradescope/")]) == len(plans)
    for relative in files:
        assert _comparable(merged / relative, relative) == \
            _comparable(whole / relative, relative), relative
    verdicts = {row["label"].split("/")[0]: row["status"] for row in
                json.loads((merged / "results.json").read_text())["submissions"]}
    assert sorted(verdicts.values()) == ["FAIL", "FAIL", "PASS"]
    assert verdicts[names[0]] == "PASS"
