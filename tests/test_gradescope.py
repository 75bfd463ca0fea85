"""`grade --format gradescope` (grader/gradescope.py): one results.json per submission, checked
against the schema written from Gradescope's autograder specification
(ci/gradescope/results.schema.json), on the class of result records of samples.synthetic_class
(no sandbox): one test per item with its points, the failing case's details only after the due
date, tampering scored 0, every file valid. The schema itself rejects what Gradescope would."""

import copy
import json

import pytest

from flashcourse.checks import LESSON_MODULES
from flashcourse.grader import cli, gradescope, outputs, samples

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")


@pytest.fixture(scope="module")
def validator(root):
    schema = json.loads((root / "ci" / "gradescope" / "results.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    names = list(LESSON_MODULES)
    subs = samples.synthetic_class(names[0], names[4])
    out = tmp_path_factory.mktemp("gradescope")
    outputs.write(subs, out, timeout=60, jobs=1, formats=("gradescope",))
    return subs, out


def test_every_file_validates_and_matches_its_submission(written, validator):
    subs, out = written
    assert not (out / "progress.html").exists()  # only the format asked for
    files = sorted((out / gradescope.FOLDER).glob("*/results.json"))
    assert len(files) == len(subs) == 36
    for sub in subs:
        data = json.loads(gradescope.results_path(sub, out).read_text(encoding="utf-8"))
        validator.validate(data)
        items = [t for t in data["tests"] if "details" not in t["tags"]
                 and t["tags"][0] in ("code", "question", "veto")]
        assert [t["max_score"] for t in items] == [item.points for item in sub.exercises]
        assert sum(t["score"] for t in items) == sub.earned
        assert data["extra_data"]["submission"] == sub.label


def test_details_wait_for_the_due_date_and_tampering_scores_0(written):
    subs, out = written
    by_student = {sub.label.split("/")[0]: sub for sub in subs}
    rescale = json.loads(gradescope.results_path(by_student["s00"], out).read_text())
    kernel, details = rescale["tests"][0], rescale["tests"][1]
    assert kernel["visibility"] == "visible" and kernel["status"] == "failed"
    assert f"Likely mistake: {samples.NO_RESCALE}." in kernel["output"]
    assert "n=256" not in kernel["output"]  # the failing case's inputs: not yet
    assert details["visibility"] == "after_due_date" and "n=256" in details["output"]
    assert details["max_score"] == 0
    veto = next(t for t in rescale["tests"] if t["tags"] == ["veto"])
    assert veto["status"] == "passed"
    tampered = json.loads(gradescope.results_path(by_student["s15"], out).read_text())
    assert tampered["score"] == 0 and "TAMPERED" in tampered["output"]
    integrity = next(t for t in tampered["tests"] if t["tags"] == ["integrity"])
    assert integrity["status"] == "failed" and "sdpa" in integrity["output"]
    right = json.loads(gradescope.results_path(by_student["s22"], out).read_text())
    assert right["score"] == 10 and right["extra_data"]["passed"] is True
    written_test = next(t for t in right["tests"] if t["tags"] == ["written"])
    assert written_test["score"] == 0 and "not scored yet" in written_test["output"]


@pytest.mark.parametrize("change", [
    lambda d: d.update(visibility="public"),
    lambda d: d["tests"][0].update(status="ok"),
    lambda d: d["tests"][0].update(score="4"),
    lambda d: d.update(unknown_field=1),
    lambda d: (d.pop("score"), d["tests"][0].pop("score")),
])
def test_the_schema_rejects_what_gradescope_would(written, validator, change):
    subs, out = written
    data = json.loads(gradescope.results_path(subs[0], out).read_text())
    validator.validate(data)
    broken = copy.deepcopy(data)
    change(broken)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_an_unknown_format_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([str(tmp_path), "--format", "pdf", "--out", str(tmp_path / "out")])
    assert stop.value.code == 2 and "invalid choice: 'pdf'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="unknown format"):
        outputs.write([], tmp_path / "out", 60, 1, formats=("pdf",))
