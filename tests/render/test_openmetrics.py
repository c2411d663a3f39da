"""`bwprof export --openmetrics`: the text both Prometheus parsers read (the OpenMetrics one
and the classic one node_exporter's textfile collector uses), with each figure equal to the
summary's, its verdict and the box's, and every refusal one line and exit 2."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families as classic_families
from prometheus_client.samples import Sample

import bwprof
from bwprof.analysis.answer import answer
from bwprof.analysis.judge import CHECK_VERDICTS, VERDICTS
from bwprof.cli import main
from bwprof.render.openmetrics import FIGURE_LABELS, RUN_LABELS, UNITS, openmetrics_text
from bwprof.schema.metrics import METRICS
from tests.conftest import DATA

H200 = DATA / "h200-quick"
GBPS = "bwprof_bandwidth_bytes_per_second"


def _export(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main(["export", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def _families(text: str) -> dict[str, Metric]:
    """The families as the OpenMetrics parser reads them, after checking the classic parser
    (the textfile collector's format) reads the same samples."""
    families = {family.name: family for family in om_families(text)}
    classic = {family.name: family for family in classic_families(text)}
    assert {name: family.samples for name, family in classic.items()} == {
        name: family.samples for name, family in families.items()}
    return families


def _samples(families: dict[str, Metric], name: str) -> list[Sample]:
    return list(families[name].samples)


def _edit_system(folder: Path, edit) -> None:
    system = json.loads((folder / "system.json").read_text())
    edit(system)
    (folder / "system.json").write_text(json.dumps(system))


def test_the_h200_run_holds_its_hbm_figure_peak_and_verdicts(tmp_path, capsys):
    target = tmp_path / "bwprof.prom"
    code, out, err = _export(capsys, H200, "--openmetrics", target)
    assert code == 0 and err == ""
    assert out.startswith("wrote ") and str(target) in out
    text = target.read_text(encoding="utf-8")
    assert text.endswith("\n# EOF\n")
    families = _families(text)
    run = bwprof.load(H200)
    row = run.summary[run.summary["case"] == "hbm_triad"].iloc[0]
    (hbm,) = [s for s in _samples(families, GBPS) if s.labels["case"] == "hbm_triad"]
    assert hbm.value / 1e9 == pytest.approx(row["value"], rel=1e-12)
    uuid = run.meta.gpus.device(row["device"]).metadata["uuid"]
    assert hbm.labels == {"host": run.meta.hostname, "box": "", "gpu_uuid": uuid,
                          "device": row["device"], "device_name": row["device_name"],
                          "path": "hbm", "case": "hbm_triad"}
    assert families[GBPS].unit == "bytes_per_second"
    (peak,) = [s for s in _samples(families, "bwprof_bandwidth_peak_bytes_per_second")
               if s.labels == hbm.labels]
    assert peak.value / 1e9 == pytest.approx(row["peak_value"], rel=1e-12)
    (share,) = [s for s in _samples(families, "bwprof_fraction_of_peak_ratio")
                if s.labels == hbm.labels]
    assert share.value * 100 == pytest.approx(row["pct_of_peak"], rel=1e-12)
    # Its verdict: one state set to 1, the one `bwprof accept` gives.
    (check,) = [c for c in run.checks if c.case == "hbm_triad"]
    states = {s.labels["verdict"]: s.value for s in _samples(families, "bwprof_verdict")
              if s.labels["case"] == "hbm_triad"}
    assert states == {v: float(v == check.verdict) for v in CHECK_VERDICTS}
    box = {s.labels["verdict"]: s.value for s in _samples(families, "bwprof_box_verdict")}
    assert box == {v: float(v == answer(run).verdict) for v in VERDICTS}
    (start,) = _samples(families, "bwprof_run_timestamp_seconds")
    assert start.value == pd.Timestamp(run.meta.started_utc).timestamp()
    (info,) = _samples(families, "bwprof_run_info")
    assert info.labels["run_id"] == run.run_id


def test_every_figure_of_the_summary_is_there_in_base_units(tmp_path, capsys):
    text = openmetrics_text([bwprof.load(H200)])
    families = _families(text)
    summary = bwprof.load(H200).summary
    figures = summary[(summary["status"] == "ok") & summary["value"].notna()]
    written = {(s.labels["case"], s.labels["device"]): (name, s.value)
               for name in families if name.startswith(tuple(
                   f"bwprof_{u.stem}_{u.unit}" for u in UNITS.values()))
               for s in _samples(families, name)
               if "_peak_" not in name}
    assert len(written) == len(figures) > 5
    for row in figures.to_dict("records"):
        name, value = written[(row["case"], row["device"])]
        unit = UNITS[row["metric"]]
        assert name == f"bwprof_{unit.stem}_{unit.unit}"
        assert value * METRICS[row["metric"]].scale == pytest.approx(row["value"], rel=1e-12)


def test_every_metric_a_row_may_carry_has_a_family():
    assert set(UNITS) == set(METRICS)


def test_every_family_keeps_one_set_of_label_names_and_one_state_per_verdict():
    """The textfile collector (client_golang) refuses a family whose samples differ in
    label names; each verdict is one-hot."""
    families = _families(openmetrics_text([bwprof.load(H200)]))
    for name, family in families.items():
        names = {tuple(s.labels) for s in family.samples}
        expected = {
            "bwprof_verdict": (*FIGURE_LABELS, "verdict"),
            "bwprof_box_verdict": (*RUN_LABELS, "verdict"),
            "bwprof_run_timestamp_seconds": RUN_LABELS,
            "bwprof_run_info": (*RUN_LABELS, "run_id", "bwprof_version"),
        }.get(name, FIGURE_LABELS)
        assert names == {expected}, name
    groups: dict[tuple[str, ...], float] = {}
    for sample in _samples(families, "bwprof_verdict"):
        key = tuple(v for k, v in sample.labels.items() if k != "verdict")
        groups[key] = groups.get(key, 0) + sample.value
    assert groups and set(groups.values()) == {1}


def test_label_values_are_escaped_and_the_box_key_is_read(run_copy):
    folder = run_copy("h200-quick")
    weird = 'rack "7"\\left\nslot'

    def edit(system):
        system["host"]["hostname"] = weird
        system["host"]["identity"] = {"box": "3f2a9c1b7d4e", "box_source": "machine_id"}

    _edit_system(folder, edit)
    text = openmetrics_text([bwprof.load(folder)])
    assert '\\"7\\"\\\\left\\\\x0aslot' in text  # one line; quote and backslash escaped
    families = _families(text)
    for name, family in families.items():
        assert {s.labels["host"] for s in family.samples} == {'rack "7"\\left\\x0aslot'}, name
        assert {s.labels["box"] for s in family.samples} == {"3f2a9c1b7d4e"}, name


def test_a_fleet_of_boxes_goes_in_one_file_and_two_runs_of_one_box_do_not(run_copy, tmp_path,
                                                                          capsys):
    first = run_copy("h200-quick")
    second = tmp_path / "other"
    shutil.copytree(H200, second)
    target = tmp_path / "fleet.prom"
    code, _out, err = _export(capsys, first, second, "--openmetrics", target)
    assert code == 2 and not target.exists()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert "are runs of one box (host vm)" in err
    _edit_system(second, lambda system: system["host"].update(
        identity={"box": "0123456789ab", "box_source": "dmi_uuid"}))
    code, _out, err = _export(capsys, first, second, "--openmetrics", target)
    assert code == 0 and err == ""
    families = _families(target.read_text(encoding="utf-8"))
    boxes = {s.labels["box"] for s in _samples(families, GBPS)
             if s.labels["case"] == "hbm_triad"}
    assert boxes == {"", "0123456789ab"}
    assert len(_samples(families, "bwprof_run_timestamp_seconds")) == 2


def test_a_simulated_run_is_refused_and_nothing_written(tmp_path, capsys):
    target = tmp_path / "bwprof.prom"
    code, out, err = _export(capsys, DATA / "sim-a", "--openmetrics", target)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert "simulated run" in err and "not a measurement" in err
    assert not target.exists()


def test_a_run_that_did_not_finish_is_refused(run_copy, tmp_path, capsys):
    folder = run_copy("h200-quick")
    _edit_system(folder, lambda system: system.update(finished_utc=None))
    code, _out, err = _export(capsys, folder, "--openmetrics", tmp_path / "bwprof.prom")
    assert code == 2 and len(err.splitlines()) == 1
    assert "export writes finished runs only" in err


@pytest.mark.parametrize(("args", "message"), [
    (["{tmp}/nope", "--openmetrics", "{tmp}/bwprof.prom"], "run folder {tmp}/nope does not exist"),
    ([H200, "--openmetrics", "{tmp}"], "--openmetrics {tmp} is a folder"),
    ([H200, "--openmetrics", "{tmp}/missing/bwprof.prom"],
     "--openmetrics {tmp}/missing/bwprof.prom: its folder {tmp}/missing does not exist"),
    ([H200], "give --openmetrics FILE"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    args = [str(a).format(tmp=tmp_path) for a in args]
    code, out, err = _export(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {message.format(tmp=tmp_path)}"), err
    assert len(err.splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_the_file_is_replaced_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    """A write that fails leaves the old file for the collector and no temporary file."""
    target = tmp_path / "bwprof.prom"
    target.write_text("# EOF\n")
    import bwprof.store.atomic as atomic

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    code, _out, err = _export(capsys, H200, "--openmetrics", target)
    assert code == 3 and len(err.splitlines()) == 1
    assert "No space left on device" in err and "--openmetrics" in err
    assert target.read_text() == "# EOF\n" and os.listdir(tmp_path) == ["bwprof.prom"]
    monkeypatch.undo()
    code, _out, _err = _export(capsys, H200, "--openmetrics", target)
    assert code == 0 and target.read_text().count("bwprof_box_verdict{") == len(VERDICTS)
    assert os.listdir(tmp_path) == ["bwprof.prom"]


def test_dash_writes_to_stdout_and_another_name_gets_a_note(tmp_path, capsys):
    code, out, err = _export(capsys, H200, "--openmetrics", "-")
    assert code == 0 and err == "" and out.endswith("# EOF\n")
    assert _families(out)[GBPS]
    code, out, err = _export(capsys, H200, "--openmetrics", tmp_path / "bwprof.txt")
    assert code == 0 and "reads only files named *.prom" in err
