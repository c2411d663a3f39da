"""The end of `bwprof run` (summary.csv, plots, formats) and `bwprof report` on a saved run."""

import json

import pandas as pd
from typer.testing import CliRunner

import bwprof
from bwprof.analysis.summary import SUMMARY_COLUMNS
from bwprof.cli import app
from tests.conftest import DATA

runner = CliRunner()
SMALL = ["--size", "1MiB", "--repeats", "3", "--threads", "1"]


def test_run_writes_the_summary_and_plots_and_prints_the_summary(tmp_path, monkeypatch):
    from bwprof import system

    # A 128 KiB last-level cache, so 1 MiB arrays count as DDR (not cache) on any machine.
    monkeypatch.setattr(system, "llc_bytes_total", lambda levels: 128 << 10)
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--cases", "ddr_triad", "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps at the terminal's width
    assert "bwprof summary: " in text and "· no GPU" in text
    assert "so there is no HBM/DDR ratio" in text
    summary = pd.read_csv(out / "summary.csv")
    assert tuple(summary.columns) == SUMMARY_COLUMNS
    results = pd.read_csv(out / "results.csv")
    assert summary.loc[0, "gbps"] == results.loc[0, "gbps_median"]
    assert summary.loc[0, "gbps_best"] == results.loc[0, "gbps_best"]
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
    assert [p.name for p in result.files] == ["summary.csv", "results.parquet", "columns.csv"]
    assert result.notes == []


def test_report_rerenders_a_saved_run_into_its_report_subfolder(run_copy):
    run = run_copy("sim-a")
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"run {run}: ")
    assert "simulated 44 GPU row(s)" in result.output
    assert f"wrote summary.csv, results.parquet, bandwidth_vs_size.png, summary_vs_peak.png, " \
           f"p2p_heatmap.png, " \
           f"columns.csv in {run / 'report'}\n" in result.output
    assert (run / "report" / "summary.csv").is_file()  # not beside the archived rows
    assert not (run / "summary.csv").exists()


def test_report_json(tmp_path):
    result = runner.invoke(app, ["report", str(DATA / "sim-a"), "--json", "--no-plots",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["schema_version"] == 2 and payload["run"]["simulated"] is True
    assert payload["model"] is None and payload["findings"] == []
    hbm = [row for row in payload["summary"] if row["case"] == "hbm_triad"]
    assert [row["backend"] for row in hbm] == ["simulated", "simulated"]
    assert all(row["gbps"] > 0 and row["peak_gbps"] is None for row in hbm)
    assert payload["headline"].startswith("HBM against DDR: the GPU rows of this run are")
    # Every line the terminal prints under the table, by kind: scripts see what people see.
    lines = payload["lines"]
    assert lines["headline"] == [payload["headline"]]
    assert lines["simulated"][0].startswith("simulated 44 GPU row(s)")
    terminal = runner.invoke(app, ["report", str(DATA / "sim-a"), "--no-plots",
                                   "--out", str(tmp_path)], env={"COLUMNS": "250"}).output
    assert all(line in terminal for kind in lines.values() for line in kind)
    assert "rows" not in payload
    with_rows = json.loads(runner.invoke(app, ["report", str(DATA / "sim-a"), "--json", "--rows",
                                               "--no-plots", "--out", str(tmp_path)]).output)
    results = pd.read_csv(DATA / "sim-a" / "results.csv")
    assert len(with_rows["rows"]) == len(results)
    assert [row["case"] for row in with_rows["rows"]] == list(results["case"])


def test_report_shows_every_row_with_rows(tmp_path):
    result = runner.invoke(app, ["report", str(DATA / "host-ddr"), "--rows", "--no-plots",
                                 "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert "bwprof results" in result.output and "ddr_scale" in result.output


def test_parquet_without_pyarrow_is_one_line(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--out", str(out), "--format", "parquet", *SMALL])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --format parquet needs pyarrow: "
                                     "python3 -m pip install pyarrow")
    assert not out.exists()



# -- issue 35: the answer first ----------------------------------------------------------------


def test_report_says_the_verdict_and_the_next_step_first(tmp_path):
    run = DATA / "h200-quick"
    result = runner.invoke(app, ["report", str(run), "--no-plots", "--out", str(tmp_path)],
                           env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"run {run}: ")
    assert lines[1].startswith("verdict: PASS (") and " pass" in lines[1]
    assert lines[2].startswith(f"next: keep it for trends with `bwprof history add {run} "
                               "--store STORE`")
    assert lines[3].startswith("bwprof summary")


def test_report_json_gives_the_verdict_its_worst_path_and_the_next_step(tmp_path):
    from bwprof.analysis.answer import answer
    from bwprof.render.outputs import Written
    from bwprof.saved import RunReport, run_report_json
    from tests.analysis.test_answer import _with_hbm_at

    payload = json.loads(runner.invoke(app, ["report", str(DATA / "h200-quick"),
                                             "--json"]).output)
    verdict = payload["verdict"]
    assert verdict["verdict"] == "PASS" and verdict["worst"] is None
    assert verdict["line"].startswith("verdict: PASS (") and verdict["counts"]["PASS"] > 0
    assert "bwprof history add" in verdict["next_step"]
    slow = _with_hbm_at(0.5)
    verdict = run_report_json(RunReport(slow, Written()), warn=False,
                              run_dir="reports/x y")["verdict"]
    assert verdict["verdict"] == "FAIL" and verdict["line"] == answer(slow).line()
    worst = verdict["worst"]
    assert (worst["path"], worst["case"], worst["device"]) == ("hbm", "hbm_triad", "gpu0")
    assert worst["verdict"] == "FAIL" and worst["pct_of_band"] < 100
    assert "`bwprof accept 'reports/x y'`" in verdict["next_step"]  # a shell word to paste
    simulated = json.loads(runner.invoke(app, ["report", str(DATA / "sim-a"), "--json"]).output)
    assert simulated["verdict"]["verdict"] == "CANNOT_JUDGE"
    assert simulated["verdict"]["simulated"] is True


def test_compare_and_accept_refuse_parquet_without_an_out_folder_in_one_line_each():
    """`--format parquet` writes a file: without --out there is nowhere to write it, said
    in the same words by both commands (one check), naming the file each would write."""
    import pytest

    from bwprof import saved
    from bwprof.errors import BwprofError

    folder = DATA / "h200-quick"
    for call, name in ((lambda: saved.compare([folder, folder], file_format="parquet"),
                        "compare.parquet"),
                       (lambda: saved.accept([folder], file_format="parquet"),
                        "accept.parquet")):
        with pytest.raises(BwprofError) as refused:
            call()
        assert str(refused.value) == (f"--format parquet writes {name}: give it a folder "
                                      "with --out DIR")
