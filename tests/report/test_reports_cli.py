"""The end of `bwprof run`: the summary printed, summary.csv, plots, formats."""

import pandas as pd
from typer.testing import CliRunner

import bwprof
from bwprof.cli import app
from bwprof.report.summary import SUMMARY_COLUMNS

runner = CliRunner()
SMALL = ["--size", "1MiB", "--repeats", "3", "--threads", "1"]


def test_run_writes_the_summary_and_plots_and_prints_the_summary(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--cases", "ddr_triad", "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    assert "bwprof summary: " in result.output and "· no GPU" in result.output
    assert "so there is no HBM/DDR ratio" in result.output
    summary = pd.read_csv(out / "summary.csv")
    assert tuple(summary.columns) == SUMMARY_COLUMNS
    results = pd.read_csv(out / "results.csv")
    assert summary.loc[0, "gbps"] == results.loc[0, "gbps_best"]
    assert {"bandwidth_vs_size.png", "summary_vs_peak.png"} <= {p.name for p in out.iterdir()}


def test_no_plots_and_parquet(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--cases", "ddr_copy", "--out", str(out), "--quiet",
                                 "--no-plots", "--format", "parquet", *SMALL])
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert not any(name.endswith(".png") for name in names)
    assert {"summary.csv", "summary.parquet", "results.parquet", "timings.parquet"} <= names
    assert pd.read_parquet(out / "results.parquet").loc[0, "case"] == "ddr_copy"


def test_a_bad_format_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--out", str(out), "--format", "xlsx", *SMALL])
    assert result.exit_code == 2
    assert result.output.strip() == "error: unknown --format 'xlsx'; choose one of: csv, parquet"
    assert not out.exists()


def test_api_run_plots_only_when_asked_and_only_with_a_folder(tmp_path):
    result = bwprof.run(cases="ddr_triad", size="1MiB", repeats=3, threads="1")
    assert result.files == [] and result.summary.iloc[0]["path"] == "ddr"
    result = bwprof.run(cases="ddr_triad", size="1MiB", repeats=3, threads="1",
                        out=tmp_path / "r", plots=False)
    assert [p.name for p in result.files] == ["summary.csv"] and result.notes == []


def test_parquet_without_pyarrow_is_one_line(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--out", str(out), "--format", "parquet", *SMALL])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --format parquet needs pyarrow: "
                                     "python3 -m pip install pyarrow")
    assert not out.exists()
