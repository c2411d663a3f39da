"""Loading run folders: every bad folder or file is one line and exit 2, never a traceback."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.errors import BwprofError
from bwprof.store.runfolder import load_run, machine_line
from tests.conftest import DATA
from tests.store.test_export import set_first_row

runner = CliRunner()


def test_the_stored_runs_load():
    host = load_run(DATA / "host-ddr")
    assert host.simulated is False and host.host == "vm" and host.samples is None
    assert set(host.results["backend"]) == {"host"}
    sim = load_run(DATA / "sim-a")
    assert sim.simulated is True and sim.meta.gpus.count == 2
    assert sim.system["gpus"]["count"] == 2  # the dict view, for code written before meta
    assert machine_line(sim.meta).endswith("· 2× simulated GPU")
    assert machine_line(host.meta).endswith("· no GPU")


def test_a_fleet_is_named_by_its_nodes_and_every_gpu_not_by_rank_0s_box():
    """A merged fleet's own host and GPUs are rank 0's: its title counted every node's."""
    from dataclasses import replace

    from bwprof.schema.meta import NodeMeta

    sim = load_run(DATA / "sim-a").meta
    node = NodeMeta(host=sim.host, gpus=sim.gpus, telemetry=sim.telemetry)
    own = NodeMeta(host=replace(sim.host, hostname="b"), gpus=sim.gpus, telemetry=None)
    fleet = replace(sim, nodes={"a": node, "b": own, "c": node})
    cpu = sim.host.cpu_model
    assert machine_line(fleet) == f"3 nodes ({cpu}) · 6× simulated GPU"
    other = NodeMeta(host=replace(sim.host, cpu_model="another CPU"), gpus=replace(
        sim.gpus, devices=sim.gpus.devices[:1]), telemetry=None)
    mixed = replace(sim, nodes={"a": node, "d": other})
    assert machine_line(mixed) == "2 nodes · 3× simulated GPU"
    one = replace(sim, nodes={"a": node})  # a fleet of one node reads as its box
    assert machine_line(one) == machine_line(sim)


def _replace(path, old, new):
    path.write_text(path.read_text().replace(old, new, 1))


def _device(**parts):
    """A GPU entry of system.json as sim-a's first, with `parts` on top, as JSON text."""
    device = json.loads((DATA / "sim-a" / "system.json").read_text())["gpus"]["devices"][0]
    return json.dumps({**device, **parts})


def _first_gbps_best(value):
    """A breakage that writes `value` into the first row's gbps_best cell."""
    def damage(run):
        lines = (run / "results.csv").read_text().splitlines()
        cells = lines[1].split(",")
        cells[19] = value  # gbps_best
        lines[1] = ",".join(cells)
        (run / "results.csv").write_text("\n".join(lines) + "\n")
    return damage


def _other_schema_in_results(run):
    lines = (run / "results.csv").read_text().splitlines()
    lines[1:] = [line.rsplit(",", 1)[0] + ",3" for line in lines[1:]]
    (run / "results.csv").write_text("\n".join(lines) + "\n")


def _ragged(run):
    lines = (run / "results.csv").read_text().splitlines()
    lines[3] += ",x,y"
    (run / "results.csv").write_text("\n".join(lines) + "\n")


BREAKAGES = {
    "missing folder": (lambda run: None, "run folder {run}x does not exist", "x"),
    "a file": (lambda run: None, "is not a run folder (it is a file)", "/results.csv"),
    "no results.csv": (lambda run: (run / "results.csv").unlink(),
                       "is not a bwprof run folder (no results.csv)", ""),
    "no system.json": (lambda run: (run / "system.json").unlink(),
                       "is not a bwprof run folder (no system.json)", ""),
    "foreign csv": (lambda run: (run / "results.csv").write_text("a,b\n1,2\n"),
                    "is not a bwprof results file (missing run_id", ""),
    "ragged csv": (_ragged, "cannot read", ""),
    "bad value": (_first_gbps_best("fast"), "is malformed: column gbps_best", ""),
    "bad status": (lambda run: _replace(run / "results.csv", ",ok,", ",great,"),
                   "is malformed: unknown status great in row 1 (line 2)", ""),
    "negative figure": (_first_gbps_best("-5"),
                        "column gbps_best holds a negative value in row 1", ""),
    "infinite figure": (_first_gbps_best("inf"),
                        "column gbps_best holds an infinite value in row 1", ""),
    "ok row without its figure": (_first_gbps_best(""),
                                  "an ok row without its figure (gbps_best, gbps_median) in "
                                  "row 1 (line 2)", ""),
    "system gpus a list": (
        lambda run: _replace(run / "system.json", '"gpus": {', '"gpus": [1, 2], "was": {'),
        "system.json is malformed: gpus should be an object, not list", ""),
    "system device properties not an object": (
        lambda run: _replace(run / "system.json", '"gpus": {',
                             f'"gpus": {{"devices": [{_device(properties="oops")}],'),
        "system.json is malformed: gpus.devices[0].properties should be an object, not str", ""),
    "system devices not objects": (
        lambda run: _replace(run / "system.json", '"gpus": {', '"gpus": {"devices": [1],'),
        "system.json is malformed: gpus.devices[0] should be an object, not int", ""),
    "other schema (results)": (_other_schema_in_results,
                               "has schema version 3, this bwprof reads 1 and 2", ""),
    "other schema (system)": (
        lambda run: _replace(run / "system.json", '"schema_version": 1', '"schema_version": 7'),
        "system.json has schema version 7, this bwprof reads 1 and 2", ""),
    "system not json": (lambda run: (run / "system.json").write_text("{nope"),
                        "system.json is malformed", ""),
    "system not bwprof": (lambda run: (run / "system.json").write_text("[1, 2]"),
                          "is not a bwprof system.json", ""),
    "integer too large for its column": (
        lambda run: set_first_row(run / "results.csv", "size_bytes", "9" * 23),
        "is malformed: column size_bytes", ""),
    "system idle check not a list": (
        lambda run: _replace(run / "system.json", '"gpus": {',
                             '"telemetry": {"idle_check": 5}, "gpus": {'),
        "telemetry.idle_check should be a list, not int", ""),
    "system device metadata not an object": (
        lambda run: _replace(run / "system.json", '"gpus": {',
                             f'"gpus": {{"devices": [{_device(metadata="oops")}],'),
        "system.json is malformed: gpus.devices[0].metadata should be an object, not str", ""),
    "system: a string where a number belongs": (
        lambda run: _replace(run / "system.json", '"count": null', '"count": "2"'),
        "system.json is malformed: gpus.count should be an integer, not str", ""),
    "system: a negative count": (
        lambda run: _replace(run / "system.json", '"count": null', '"count": -1'),
        "system.json is malformed: gpus.count should be 0 or more, not -1", ""),
    "system: a required part missing": (
        lambda run: _replace(run / "system.json", '"cpu_model":', '"cpu_name":'),
        "system.json is malformed: host.cpu_model is missing", ""),
    "system: a GPU's peak not finite": (
        lambda run: _replace(run / "system.json", '"gpus": {',
                             '"gpus": {"devices": ['
                             + _device(peak_hbm_gbps=12345.678).replace("12345.678", "1e999")
                             + '],'),
        "system.json is malformed: gpus.devices[0].peak_hbm_gbps should be a finite number, "
        "not inf", ""),
    "system: NaN, which JSON does not allow": (
        lambda run: _replace(run / "system.json", '"gpus": {', '"gpus": {"detail": NaN,'),
        "system.json is malformed: NaN is not a number JSON allows", ""),
    "system: a nested object 200,000 deep": (
        lambda run: _replace(run / "system.json", '"gpus": {',
                             '"deep": ' + "[" * 200_000 + "]" * 200_000 + ', "gpus": {'),
        "system.json is malformed: nested too deeply to be bwprof's", ""),
    "system: an integer of 5,000 digits": (
        lambda run: _replace(run / "system.json", '"count": null', '"count": ' + "9" * 5000),
        "system.json is malformed: Exceeds the limit", ""),
    "system: a boolean for the schema version": (
        lambda run: _replace(run / "system.json", '"schema_version": 1', '"schema_version": true'),
        "system.json has schema version True, this bwprof reads 1 and 2", ""),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_bad_run_folder_is_one_line_and_exit_2(run_copy, tmp_path, breakage):
    run = run_copy("host-ddr")
    damage, message, suffix = BREAKAGES[breakage]
    damage(run)
    target = f"{run}{suffix}"
    with pytest.raises(BwprofError, match=re.escape(message.format(run=run))):
        load_run(target)
    for command in (["report", target, "--out", str(tmp_path / "out")],
                    ["compare", str(DATA / "host-ddr"), target]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ") and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_samples_and_findings_are_read_when_present(run_copy):
    run = run_copy("host-ddr")
    (run / "samples.csv").write_text("t_s,device,case,power_w\n0.0,gpu0,ddr_triad,100\n")
    (run / "findings.csv").write_text("severity,device,what\nwarning,gpu0,link at Gen4\n")
    loaded = load_run(run)
    assert list(loaded.samples["power_w"]) == [100]
    assert loaded.findings.iloc[0]["what"] == "link at Gen4"
    result = runner.invoke(app, ["report", str(run), "--no-plots"])
    assert "finding warning: gpu0: link at Gen4" in result.output


def test_a_parquet_only_run_folder_loads(run_copy, tmp_path):
    run = run_copy("host-ddr")
    result = runner.invoke(app, ["report", str(run), "--format", "parquet", "--no-plots",
                                 "--out", str(run)])  # asked: into the run folder itself
    assert result.exit_code == 0, result.output
    assert {"results.parquet", "timings.parquet", "summary.parquet"} <= {
        p.name for p in run.iterdir()}
    (run / "results.csv").unlink()
    loaded = load_run(run)
    assert list(loaded.results["case"])[:2] == ["ddr_copy", "ddr_scale"]
    assert (pd.read_parquet(run / "summary.parquet")["schema_version"] == 2).all()
    assert json.loads((run / "system.json").read_text())["schema_version"] == 1  # untouched


@pytest.mark.parametrize("damage", ["[{", "[1, 2]", '{"schema_version": 1, "timelines": '
                                                  '[{"case": "x"}]}'])
def test_a_damaged_timelines_file_costs_only_the_timeline_plots(run_copy, tmp_path, damage):
    run = run_copy("host-ddr")
    (run / "timelines.json").write_text(damage)
    assert load_run(run).results is not None
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "timeline plots not drawn: " in result.output
    assert (tmp_path / "out" / "bandwidth_vs_size.png").is_file()  # the other plots stand


def test_a_last_line_cut_off_by_a_stopped_run_is_left_out_and_said(run_copy, tmp_path):
    """The writer ends every row with a newline: a last line without one is half-written,
    and may hold a number cut short, so the rows before it are the run."""
    run = run_copy("host-ddr")
    text = (run / "results.csv").read_text()
    whole = len(load_run(run).results)
    (run / "results.csv").write_text(text[: text.rstrip("\n").rfind("\n") + 40])
    loaded = load_run(run)
    assert len(loaded.results) == whole - 1
    assert loaded.notes == ["results.csv: its last line was cut off (the run was stopped while "
                            "writing it) and is left out"]
    result = runner.invoke(app, ["report", str(run), "--no-plots", "--out", str(tmp_path)])
    assert result.exit_code == 0 and loaded.notes[0] in result.output
    result = runner.invoke(app, ["compare", str(run), str(DATA / "host-ddr")])
    assert f"warning: run A: {loaded.notes[0]}" in result.output


# Catches: an older writer's row cut off inside a quoted multi-line note (CUDA error text)
# leaves a quote open; the cut at the last newline did not close it, pandas failed with
# "EOF inside string" and `report` refused every row of the folder
@pytest.mark.parametrize("cut", ["after a line break", "mid-word"])
def test_a_last_row_torn_inside_a_multi_line_note_costs_only_that_row(run_copy, tmp_path, cut):
    import csv
    import io

    run = run_copy("host-ddr")
    with open(run / "results.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    note = header.index("note")
    rows[-2][note] = 'CUDA error: out of memory\n"cudaMalloc" failed\nat line 3'  # kept whole
    rows[-1][note] = "CUDA error: an illegal memory access\nsecond line\nthird line"
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([header, *rows])
    whole = text.getvalue()
    end = whole.index("second line\n") + (len("second line\n") if cut == "after a line break"
                                          else len("seco"))
    (run / "results.csv").write_text(whole[:end])
    loaded = load_run(run)
    assert len(loaded.results) == len(rows) - 1
    assert loaded.results["note"].iloc[-1] == rows[-2][note]
    assert list(loaded.results["case"]) == [row[header.index("case")] for row in rows[:-1]]
    assert loaded.notes == ["results.csv: its last line was cut off (the run was stopped while "
                            "writing it) and is left out"]
    result = runner.invoke(app, ["report", str(run), "--no-plots", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and loaded.notes[0] in result.output


def test_a_table_broken_before_its_last_row_is_still_refused(run_copy):
    """Leaving out the last record is for a torn last row only: an open quote earlier on
    still leaves the table unreadable, and says so in one line."""
    run = run_copy("host-ddr")
    lines = (run / "results.csv").read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(",ok,", ',ok,"', 1)
    (run / "results.csv").write_text("".join(lines))
    with pytest.raises(BwprofError, match=r"^cannot read .*results\.csv: .*EOF inside string"):
        load_run(run)


def test_a_bad_value_names_its_row_and_its_line_only_in_a_csv(run_copy):
    from bwprof.schema.table import checked_results

    frame = pd.read_csv(run_copy("host-ddr") / "results.csv")
    frame.loc[1, "status"] = "great"
    with pytest.raises(BwprofError, match=r"unknown status great in row 2 \(line 3\)$"):
        checked_results(frame.copy(), Path("results.csv"))
    with pytest.raises(BwprofError, match=r"unknown status great in row 2$"):
        checked_results(frame, Path("results.parquet"))


def test_a_version_2_table_that_fills_only_the_values_reads_its_gbps_from_them(tmp_path):
    """Version 2's figure is the value; GB/s columns follow it on reading (a table another
    tool wrote, or one edited by hand, reads the same in every report)."""
    from bwprof.schema.table import read_results, results_frame
    from tests.store.test_export import make_row

    path = tmp_path / "results.csv"
    frame = results_frame([make_row(gbps_best=3.0, gbps_median=2.0, peak_gbps=10.0)])
    frame.loc[0, ["gbps_best", "gbps_median"]] = [None, 99.0]
    frame.to_csv(path, index=False)
    read = read_results(path)
    assert read.loc[0, ["gbps_best", "gbps_median", "peak_gbps"]].tolist() == [3.0, 2.0, 10.0]


def test_copy_figures_are_derived_only_where_a_file_lacks_them_and_a_whole_file_is_not_copied():
    """An older file's copying rows get `copy_gbps_*` from their GB/s and the case's share;
    a file that carries every one comes back as it is (not a copy of a fleet's million
    rows), and the frame read is never changed in place."""
    from bwprof.store.runfolder import with_copy_figures

    results = load_run(DATA / "h200-quick").results
    assert with_copy_figures(results) is results
    older = results.copy()
    copying = older["case"].isin(["ddr_copy", "h2d_pinned"]) & older["metric"].eq("bandwidth")
    assert copying.any()
    older.loc[copying, ["copy_gbps_median", "copy_gbps_best"]] = float("nan")
    before = older.copy()
    derived = with_copy_figures(older)
    pd.testing.assert_frame_equal(older, before)
    share = older.loc[copying, "case"].map({"ddr_copy": 0.5, "h2d_pinned": 1.0})
    pd.testing.assert_series_equal(derived.loc[copying, "copy_gbps_median"],
                                   older.loc[copying, "gbps_median"] * share,
                                   check_names=False)
    pd.testing.assert_frame_equal(derived, results)
