"""The README's results table is made from assets/results/: a number that drifts is caught."""

import shutil
from pathlib import Path

import pytest

from flashcourse.authoring import build, results_table


def test_the_readme_table_is_the_recorded_one(root):
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert results_table.table(root / "assets" / "results") in readme
    assert "1.18x to 1.40x" not in readme  # the stale figures of an older run


def test_a_changed_csv_makes_the_readme_stale(root, tmp_path):
    copy = tmp_path / "course"
    shutil.copytree(root / "assets" / "results", copy / "assets" / "results")
    shutil.copy(root / "README.md", copy / "README.md")
    assert build.rendered(copy)[copy / "README.md"] == (copy / "README.md").read_text()
    matmul = copy / "assets" / "results" / "04-matmul.csv"
    matmul.write_text(matmul.read_text().replace("700.99", "650.99"))
    stale = build.rendered(copy)[copy / "README.md"]
    assert "663 vs 651 TFLOP/s" in stale


def test_a_missing_row_is_an_error_naming_it(root, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(root / "assets" / "results", results)
    rows = (results / "04-matmul.csv").read_text().splitlines()
    (results / "04-matmul.csv").write_text(
        "\n".join(line for line in rows if "torch.matmul" not in line) + "\n")
    with pytest.raises(ValueError, match="0 rows where {'kernel': 'torch.matmul'}"):
        results_table.table(results)


def test_a_readme_without_markers_is_refused():
    with pytest.raises(ValueError, match="markers"):
        results_table.readme_with_table("# no table here\n", Path("."))


def test_the_measured_ceilings_are_the_recorded_ones(root):
    """Lesson 2's ridge point comes from ceilings the course recorded (02-ceilings.csv)."""
    import csv

    from flashcourse import hardware

    with (root / "assets" / "results" / "02-ceilings.csv").open(newline="") as handle:
        rows = {(row["ceiling"], row["shape"]): float(row["rate"])
                for row in csv.DictReader(handle)}
    gemm = rows[("GEMM bf16 (torch.matmul, cuBLAS)", "8192^3")]
    copy = rows[("device-to-device copy", "2 GiB")]
    assert hardware.H200_MEASURED_GEMM_BF16_TFLOPS == round(gemm)
    assert hardware.H200_MEASURED_COPY_TBS == round(copy, 1)


def _two_version_table(tmp_path, monkeypatch):
    from flashcourse import bench

    (tmp_path / "xx-demo.csv").write_text(
        "date,gpu,torch,triton,cuda,python,d,ratio\n"
        "2026-12-02,NVIDIA H200,2.11,3.6.0,13.0,3.12,64,0.9\n"
        "2026-12-03,NVIDIA H200,2.11,3.9.0,13.0,3.12,64,1.1\n", encoding="utf-8")
    monkeypatch.setattr(bench, "RECORDED_RESULTS", tmp_path)
    return bench


def test_a_table_of_two_runs_names_both_versions_and_tells_rows_apart(tmp_path, monkeypatch,
                                                                      capsys):
    bench = _two_version_table(tmp_path, monkeypatch)
    bench.show_recorded("xx-demo", ["d", "ratio"])
    header, columns, _, first, second = capsys.readouterr().out.splitlines()
    assert header == ("Measured 2026-12-02 to 2026-12-03 on NVIDIA H200, torch 2.11, "
                      "Triton 3.6.0 and 3.9.0:")
    assert columns == "| triton | d | ratio |"
    assert first.startswith("| 3.6.0 |") and second.startswith("| 3.9.0 |")


def test_a_filtered_table_shows_only_its_run(tmp_path, monkeypatch, capsys):
    bench = _two_version_table(tmp_path, monkeypatch)
    bench.show_recorded("xx-demo", ["d", "ratio"], where={"triton": "3.9.0"})
    header, columns, _, only = capsys.readouterr().out.splitlines()
    assert header == "Measured 2026-12-03 on NVIDIA H200, torch 2.11, Triton 3.9.0:"
    assert columns == "| d | ratio |" and only == "| 64 | 1.1 |"
    bench.show_recorded("xx-demo", ["d"], where={"triton": "3.7.0"})
    assert (capsys.readouterr().out.strip()
            == "No recorded results for xx-demo where {'triton': '3.7.0'}.")


def test_rows_with_different_columns_share_one_header(tmp_path, monkeypatch):
    import csv

    from flashcourse import bench

    monkeypatch.setattr(bench, "environment", lambda: {"date": "2026-12-05", "gpu": "H200"})
    bench.write_csv(tmp_path / "ragged.csv", [{"shape": 1, "cudnn ms": 0.5},
                                              {"shape": 1, "kv loads": "tma", "ms": 0.4}])
    with (tmp_path / "ragged.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["date", "gpu", "shape", "cudnn ms", "kv loads", "ms"]
    assert rows[0]["kv loads"] == "" and rows[1]["cudnn ms"] == "" and rows[1]["ms"] == "0.4"
