"""`bwprof monitor` with a fake NVML: the table, the CSV and the one-line refusals."""

from __future__ import annotations

import csv
import os
import stat
import time
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.telemetry import nvml as nvml_module
from bwprof.telemetry.counters import GPM_MIN_INTERVAL_S, CounterReader
from bwprof.telemetry.monitor import monitor, table
from bwprof.telemetry.nvml import Nvml
from bwprof.telemetry.session import SAMPLE_COLUMNS
from tests.telemetry.fakes import counter_pynvml

BUSES = ["00000000:1B:00.0", "00000000:9A:00.0"]


def _nvml():
    fake = counter_pynvml(
        {BUSES[0]: {"gpm": True}, BUSES[1]: {"curr_gen": 4}},
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=BUSES[int(h[1])].encode()),
    )
    return Nvml(fake)


def test_every_gpu_is_read_in_nvml_order():
    reader = CounterReader.every_gpu(_nvml())
    assert reader.labels == ["gpu0", "gpu1"]
    latest = reader.read()
    rendered = table(latest, 500, 1)
    assert rendered.row_count == 2 and len(rendered.columns) == 15


def _cells(rendered, heading):
    return list(next(c for c in rendered.columns if c.header == heading).cells)


def test_gpm_gives_bandwidths_in_the_view():
    """DRAM as GPM's utilisation x the HBM peak NVML implies (2 x 3201 MHz x 6016 bit / 8);
    PCIe from GPM's rate where the GPU has GPM, NVML's sample elsewhere."""
    reader = CounterReader.every_gpu(_nvml())
    peaks = reader.hbm_peaks()
    assert peaks["gpu0"] == pytest.approx(2 * 3201e6 * 6016 / 8 / 1e9)
    reader.read()
    time.sleep(GPM_MIN_INTERVAL_S)  # GPM needs two samples at least 100 ms apart
    latest = reader.read()
    assert latest[0]["dram_bw_util_pct"] is not None and latest[1]["dram_bw_util_pct"] is None
    rendered = table(latest, 500, 2, peaks)
    dram = float(latest[0]["dram_bw_util_pct"]) / 100 * peaks["gpu0"]
    assert _cells(rendered, "DRAM GB/s") == [f"{dram:.0f}", "-"]
    assert _cells(rendered, "PCIe rx MiB/s") == [f"{latest[0]['gpm_pcie_rx_mibps']:.0f}",
                                                 f"{latest[1]['pcie_rx_mibps']:.0f}"]
    assert latest[0]["gpm_pcie_rx_mibps"] != latest[0]["pcie_rx_mibps"]  # the test can tell
    assert _cells(table(latest, 500, 2), "DRAM GB/s") == ["-", "-"]  # no peak, no GB/s


def test_monitor_keeps_every_sample_in_the_csv(tmp_path):
    shown = []
    done = monitor(CounterReader.every_gpu(_nvml()), 0.001, tmp_path / "m.csv",
                   show=lambda latest, n: shown.append(n), count=3)
    assert done.taken == 3 and shown == [1, 2, 3] and done.error_count == 0
    with open(tmp_path / "m.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [*SAMPLE_COLUMNS, "schema_version"]  # as a run's samples.csv
    assert {r["schema_version"] for r in rows} == {str(SCHEMA_VERSION)}
    assert [r["device"] for r in rows] == ["gpu0", "gpu1"] * 3
    assert {r["pcie_gen"] for r in rows if r["device"] == "gpu1"} == {"4"}


def test_the_command(monkeypatch, tmp_path):
    monkeypatch.setattr(nvml_module, "_default", _nvml())
    result = CliRunner().invoke(app, ["monitor", "--interval", "1", "--count", "2", "--csv",
                                      str(tmp_path / "out.csv")])
    assert result.exit_code == 0, result.output
    assert "stopped after 2 sample(s)" in result.output
    assert (tmp_path / "out.csv").read_text().count("\n") == 1 + 4


# Catches: a GPU that answers no read shows an empty view and "0 samples", with no reason
def test_reads_that_fail_are_said_and_none_taken_exits_1(monkeypatch):
    monkeypatch.setattr(nvml_module, "_default", _nvml())

    def lost(self):
        raise RuntimeError("GPU is lost")

    monkeypatch.setattr(CounterReader, "read", lost)
    result = CliRunner().invoke(app, ["monitor", "--interval", "1", "--count", "3"])
    assert result.exit_code == 1
    assert "stopped after 0 sample(s)" in result.output
    assert "3 read(s) failed; the first: RuntimeError: GPU is lost" in result.output


def test_refusals_are_one_line(monkeypatch):
    runner = CliRunner()
    result = runner.invoke(app, ["monitor", "--interval", "0"])
    assert result.exit_code == 2 and result.output.startswith("error: --interval")
    monkeypatch.setattr(nvml_module, "_default", Nvml(SimpleNamespace(
        NVMLError=Exception, nvmlInit=lambda: (_ for _ in ()).throw(Exception("no driver")))))
    result = runner.invoke(app, ["monitor", "--count", "1"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: nothing to monitor: NVML unavailable: no driver"


def test_tx_comes_from_gpm_and_each_gpu_uses_its_own_peak():
    from bwprof.telemetry.monitor import table
    def cells(view, heading):
        return list(next(c for c in view.columns if c.header == heading).cells)
    base = {"pcie_tx_mibps": 1.0, "gpm_pcie_tx_mibps": 7.0, "dram_bw_util_pct": 50.0}
    view = table([{"device": "gpu0", **base}, {"device": "gpu1", **base}], 500, 1,
                 {"gpu0": 1000.0, "gpu1": 4000.0})
    assert cells(view, "PCIe tx MiB/s") == ["7", "7"]
    assert cells(view, "DRAM GB/s") == ["500", "2000"]


# Catches: `monitor --csv` on a full disk ended in an OSError traceback (its samples
# written with no error handling), and its text cells skipped the spreadsheet rule
def test_a_full_disk_under_the_csv_is_one_line_with_exit_3(monkeypatch, capsys):
    from bwprof import cli

    monkeypatch.setattr(nvml_module, "_default", _nvml())
    code = cli.main(["monitor", "--interval", "1", "--count", "2", "--csv", "/dev/full"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert err.startswith("error: cannot write /dev/full: No space left on device")
    assert err.rstrip().endswith("choose another --csv") and err.count("\n") == 1
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # a failed --csv is never unlinked


def test_the_csv_cells_follow_the_spreadsheet_rule(tmp_path):
    from bwprof.telemetry.monitor import CsvSamples

    sink = CsvSamples(tmp_path / "m.csv")
    sink.add([{"device": "=gpu0", "t_s": -1.5}])
    sink.close()
    with open(tmp_path / "m.csv") as f:
        row = next(csv.DictReader(f))
    assert row["device"] == "'=gpu0" and row["t_s"] == "-1.5"


# Catches (the second review): `monitor --csv RUN/results.csv` replaced a run's rows, and a
# --csv it made but could not write was left empty
def test_a_csv_inside_a_run_folder_is_refused(monkeypatch, capsys, tmp_path):
    from bwprof import cli

    (tmp_path / "system.json").write_text("{}")
    (tmp_path / "results.csv").write_text("case\nddr_copy\n")
    monkeypatch.setattr(nvml_module, "_default", _nvml())
    code = cli.main(["monitor", "--count", "1", "--csv", str(tmp_path / "results.csv")])
    assert code == 2 and "is a file of a bwprof run folder" in capsys.readouterr().err
    assert (tmp_path / "results.csv").read_text() == "case\nddr_copy\n"


def test_a_csv_it_made_and_could_not_write_is_removed(monkeypatch, capsys, tmp_path):
    from bwprof import cli
    from bwprof.errors import OutputError
    from bwprof.telemetry import monitor as monitor_module

    def full(*args, **kwargs):
        raise OutputError("cannot write m.csv: No space left on device")

    monkeypatch.setattr(nvml_module, "_default", _nvml())
    monkeypatch.setattr(monitor_module, "CsvSamples", full)
    assert cli.main(["monitor", "--count", "1", "--csv", str(tmp_path / "m.csv")]) == 3
    assert not (tmp_path / "m.csv").exists()
    (tmp_path / "kept.csv").write_text("")  # the user's own file stays, empty or not
    assert cli.main(["monitor", "--count", "1", "--csv", str(tmp_path / "kept.csv")]) == 3
    assert (tmp_path / "kept.csv").exists()
    capsys.readouterr()
