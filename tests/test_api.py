import json

import pandas as pd
import pytest

import bwprof
from bwprof.api import case_availability
from bwprof.cases import CASES
from bwprof.errors import BwprofError, RunInterrupted
from bwprof.gpu.runtime import NO_GPU_REASON, probe
from bwprof.host import stream
from bwprof.schema.table import read_results
from tests.schema.builders import meta

SMALL = {"size": "1MiB", "repeats": 3, "threads": "1"}


def test_run_returns_a_frame_and_metadata_without_writing():
    result = bwprof.run(cases="ddr_triad,ddr_copy", **SMALL)
    assert result.run_dir is None
    assert list(result.results["case"]) == ["ddr_copy", "ddr_triad"]
    assert (result.results["status"] == "ok").all()
    assert (result.results["gbps_best"] > 0).all()
    assert result.system["schema_version"] == 2
    assert result.system["plan"]["cases"] == ["ddr_copy", "ddr_triad"]
    assert result.system["gpus"]["reason"].startswith("not probed")
    assert result.failed == []


def test_a_host_with_two_numa_nodes_gets_a_row_per_node(monkeypatch, tmp_path):
    import os

    from bwprof import system
    from bwprof.cpulist import format_cpu_list
    from bwprof.host import placement

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to stand in for two NUMA nodes")
    half = len(cpus) // 2
    monkeypatch.setattr(system, "numa_nodes", lambda: [
        system.NumaNode(0, format_cpu_list(cpus[:half]), 8 << 30),
        system.NumaNode(1, format_cpu_list(cpus[half:]), 8 << 30)])
    # The topology is made up: every page lies on this machine's one node whatever we ask.
    monkeypatch.setattr(placement, "node_share", lambda arrays, node: 1.0)
    result = bwprof.run(cases="ddr_triad", out=tmp_path / "r", plots=False, **SMALL)
    frame = read_results(tmp_path / "r" / "results.csv")
    assert list(frame["device"]) == ["cpu", "numa0", "numa1"]
    assert list(frame["threads"]) == [1, half, len(cpus) - half]
    assert (frame["status"] == "ok").all()
    ddr = result.summary[result.summary["path"] == "ddr"]
    assert list(ddr["device"]) == ["cpu", "numa0", "numa1"]


def test_run_writes_the_run_folder(tmp_path):
    out = tmp_path / "run"
    result = bwprof.run(cases="ddr_dot,h2d_pinned", out=out, command_line=["x"], plots=False,
                        **SMALL)
    frame = read_results(out / "results.csv")
    assert list(frame["case"]) == ["ddr_dot", "h2d_pinned"]
    system = json.loads((out / "system.json").read_text())
    assert system["command_line"] == ["x"]
    assert system["finished_utc"] and system["interrupted"] is False
    assert system["host"]["cpu_model"] == result.system["host"]["cpu_model"]
    assert (out / "timings.csv").read_text().count("\n") == 1 + 2


def test_gpu_cases_without_a_gpu_are_skipped_once_with_the_reason():
    from bwprof.gpu.runtime import probe

    if probe().count:
        pytest.skip("this machine has a GPU")
    result = bwprof.run(cases="ddr_copy,h2d_,hbm_triad", **SMALL)
    gpu = result.results[result.results["case"] != "ddr_copy"]
    assert list(gpu["case"]) == ["h2d_pinned", "h2d_pageable", "hbm_triad", "h2d_all",
                                 "h2d_all_bidir", "h2d_sm"]
    assert (gpu["status"] == "skipped").all()
    assert gpu["note"].str.startswith("no NVIDIA driver / no CUDA device found").all()
    assert result.failed == []
    assert result.system["gpus"]["count"] == 0


def test_bad_options_write_nothing(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(BwprofError, match="--repeats must be from 2"):
        bwprof.run(cases="ddr_", repeats=1, out=out)
    assert not out.exists()


def test_a_kernel_made_to_fail_marks_the_row_invalid(monkeypatch, tmp_path):
    def broken(a, b, c, scalar):
        a[:] = b + scalar * c
        a[-1] = 0.0

    monkeypatch.setitem(stream.KERNELS, "triad",
                        stream.StreamKernel("triad", broken, stream.KERNELS["triad"].replay))
    result = bwprof.run(cases="ddr_triad,ddr_copy", out=tmp_path / "r", plots=False,
                        **SMALL)
    statuses = dict(zip(result.results["case"], result.results["status"], strict=True))
    assert statuses == {"ddr_copy": "ok", "ddr_triad": "invalid"}
    assert [r.case for r in result.failed] == ["ddr_triad"]


def test_interrupt_keeps_finished_rows_and_marks_the_metadata(monkeypatch, tmp_path):
    from bwprof.host.ddr import HostExecutor

    real_measure = HostExecutor.measure

    def measure(self, case, job, plan):
        if case.key == "ddr_add":
            raise KeyboardInterrupt
        return real_measure(self, case, job, plan)

    monkeypatch.setattr(HostExecutor, "measure", measure)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as info:
        bwprof.run(cases="ddr_", out=out, **SMALL)
    assert [r.case for r in info.value.result.rows] == ["ddr_copy", "ddr_scale"]
    assert list(read_results(out / "results.csv")["case"]) == ["ddr_copy", "ddr_scale"]
    system = json.loads((out / "system.json").read_text())
    assert system["interrupted"] is True and system["stopped_by"] == "KeyboardInterrupt"
    # findings.csv is written (and the files closed) on the way out, as for a finished run.
    findings = pd.read_csv(out / "findings.csv")
    assert list(findings.columns) == ["severity", "device", "what", "why", "evidence",
                                      "schema_version"]



def test_an_interrupt_while_the_report_files_are_written_marks_the_run_interrupted(
        monkeypatch, tmp_path):
    """Every case was measured: the signal costs summary.csv and the plots, said in a note
    (never a second 'interrupted' line beside the CLI's one), and the run ends interrupted,
    as its exit 130 says (issue 37), its system.json saying every case was measured."""
    from bwprof import api

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "write_report_files", interrupted)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as info:
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    system = json.loads((out / "system.json").read_text())
    assert system["interrupted"] is True
    assert system["stopped_by"] == "KeyboardInterrupt after every case was measured"
    (note,) = info.value.result.notes
    assert note.startswith("note: every case was measured") and "bwprof report RUN_DIR" in note
    assert "interrupted" not in note


def _section(page: str, name: str) -> str:
    return page.split(f'id="{name}"', 1)[1].split("</section>", 1)[0]


# Catches (issue 32): the run's own report.html said "finished: never finalised": it was
# written before the final system.json, from the metadata of the run's start
def test_the_runs_own_page_is_written_from_its_final_metadata(tmp_path):
    from bwprof import cli

    out = tmp_path / "run"
    bwprof.run(cases="ddr_copy", out=out, **{**SMALL, "plots": True})
    page = (out / "report.html").read_text(encoding="utf-8")
    system = json.loads((out / "system.json").read_text())
    assert system["finished_utc"] and system["interrupted"] is False
    assert "never finalised" not in page
    identity = _section(page, "identity")
    assert f"<dt>finished</dt><dd>{system['finished_utc']}</dd>" in identity
    assert page.split("<header>", 1)[1].split("</p>", 1)[0].endswith(" · finished")
    # The same page as `bwprof report --html` gives on the folder, plots aside.
    again = tmp_path / "again"
    assert cli.main(["report", str(out), "--html", "--out", str(again)]) == 0
    other = (again / "report.html").read_text(encoding="utf-8")
    assert page.split("<header>", 1)[1].split("</header>", 1)[0] == \
        other.split("<header>", 1)[1].split("</header>", 1)[0]
    for name in ("identity", "verdict", "summary", "findings", "results"):
        assert _section(page, name) == _section(other, name), name

def test_case_availability_names_why_a_case_cannot_run():
    availability = case_availability(CASES)
    assert availability["ddr_triad"] is None
    assert set(availability) == {c.key for c in CASES}
    assert availability["net_p2p"].startswith("needs an MPI launch of 2 ranks or more")
    if not probe().count:  # no GPU here: every GPU case says why
        gpu_keys = {c.key for c in CASES if c.target == "gpu"}
        assert gpu_keys and {availability[k] for k in gpu_keys} == {NO_GPU_REASON}


# Catches: the cheap availability (no executor built, no Numba) answering otherwise than
# the executors `bwprof run` builds: every case's reason must be the executor's own
def test_case_availability_is_what_the_executors_say():
    from bwprof.api import gpu_executor, host_executor
    from bwprof.system import host_info

    host, (gpus, _meta) = host_executor(host_info()), gpu_executor()
    try:
        for case in CASES:
            executor = {"gpu": gpus, "host": host}.get(case.target)
            if executor is None:
                continue
            why = executor.unavailable_reason(case)
            assert case_availability([case])[case.key] == (None if why is None
                                                           else why.reason), case.key
    finally:
        gpus.close()
        host.close()


def test_telemetry_says_why_it_is_off(tmp_path):
    result = bwprof.run(cases="ddr_copy", **SMALL)
    assert result.system["telemetry"]["reason"] == "no GPU case selected"
    no_gpu = bwprof.run(cases="ddr_copy,h2d_pinned", telemetry=False, **SMALL)
    assert no_gpu.system["telemetry"]["reason"].startswith("no NVIDIA driver")
    simulated = bwprof.run(cases="h2d_pinned", preset="quick", repeats=2, simulate=True)
    assert simulated.system["telemetry"]["reason"].startswith("simulated backend")
    assert simulated.samples is None and simulated.findings.columns[0] == "severity"


def test_sample_interval_is_checked_before_anything_is_written(tmp_path):
    with pytest.raises(BwprofError, match="--sample-interval must be between 1 and 60000"):
        bwprof.run(cases="ddr_copy", sample_interval_ms=0, out=tmp_path / "r", **SMALL)
    assert not (tmp_path / "r").exists()


def test_run_folder_holds_findings_and_telemetry_columns(tmp_path):
    import pandas as pd

    from bwprof.schema.rows import TELEMETRY_COLUMNS

    bwprof.run(cases="ddr_copy", out=tmp_path / "r", plots=False, **SMALL)
    assert list(pd.read_csv(tmp_path / "r" / "findings.csv").columns) == [
        "severity", "device", "what", "why", "evidence", "schema_version"]
    header = (tmp_path / "r" / "results.csv").read_text().splitlines()[0].split(",")
    assert header[-len(TELEMETRY_COLUMNS):] == list(TELEMETRY_COLUMNS)


def test_the_idle_check_runs_with_telemetry_off_too(monkeypatch):
    """A busy GPU gets a finding whether or not the counters are sampled during the run."""

    from bwprof.analysis.findings import busy_before_run
    from bwprof.api import start_telemetry
    from bwprof.gpu.devices import describe
    from bwprof.gpu.executor import GpuExecutor
    from bwprof.telemetry import nvml
    from tests.gpu.test_devices import H200Like
    from tests.telemetry.fakes import counter_pynvml

    fake = counter_pynvml({"00000000:1B:00.0": {"pids": [4242]}})
    monkeypatch.setattr(nvml, "_default", nvml.Nvml(fake))
    backend = H200Like(devices=1)
    backend.name = "cuda"  # a real GPU's executor, as far as telemetry can tell
    executor = GpuExecutor(backend, describe(backend))
    for enabled in (False, True):
        session, telemetry = start_telemetry(executor, None, enabled=enabled, interval_s=0.05)
        (busy,) = busy_before_run(meta(telemetry=telemetry))
        assert busy.device == "gpu0" and "4242" in busy.evidence
        if enabled:
            assert session is not None and telemetry.enabled
            session.stop()
        else:
            assert session is None
            assert telemetry.reason == "switched off (--no-telemetry); the idle check still ran"


def test_load_reads_a_run_folder_back_with_typed_metadata(tmp_path):
    from bwprof.schema.meta import RunMeta

    out = tmp_path / "run"
    result = bwprof.run(cases="ddr_triad,h2d_pinned", simulate=True, out=out, plots=False,
                        **SMALL)
    loaded = bwprof.load(out)
    assert isinstance(loaded.meta, RunMeta) and loaded.meta == result.meta
    assert loaded.meta.gpus.count == 2 and loaded.meta.simulated
    for column in ("size_bytes", "threads", "repeats", "numa_node", "schema_version"):
        assert str(loaded.results[column].dtype) == "Int64", column  # empty cells stay empty
    assert list(loaded.results["case"]) == list(result.results["case"])
    assert loaded.findings is not None and loaded.samples is None  # simulated: no counters
    assert list(loaded.summary["path"]) == list(result.summary["path"])
    assert loaded.system["run_id"] == result.meta.run_id  # the dict view, read-only
    with pytest.raises(TypeError):
        loaded.system["run_id"] = "x"


def test_load_reads_the_stored_version_1_runs():
    from tests.conftest import DATA

    loaded = bwprof.load(DATA / "h200-quick")
    assert loaded.meta.schema_version == 1
    (h200,) = loaded.meta.gpus.devices
    assert h200.name == "NVIDIA H200" and h200.metadata["driver_version"] == "580.159.04"
    assert loaded.meta.telemetry is not None and loaded.meta.telemetry.samples == 493
    assert loaded.samples is not None and len(loaded.samples)
    assert str(loaded.results["size_bytes"].dtype) == "Int64"


@pytest.mark.parametrize("damage", ["missing", "not json", "wrong kind"])
def test_load_of_a_bad_folder_is_one_line(tmp_path, damage):
    import shutil

    from tests.conftest import DATA

    folder = tmp_path / "run"
    if damage != "missing":
        shutil.copytree(DATA / "host-ddr", folder)
        (folder / "system.json").write_text(
            "{nope" if damage == "not json" else '{"schema_version": 1, "gpus": 3}')
    with pytest.raises(BwprofError) as caught:
        bwprof.load(folder)
    assert len(str(caught.value).splitlines()) == 1


def test_a_fresh_run_writes_schema_2_with_metric_unit_values_and_flags(tmp_path):
    """On a CPU-only machine: every row names its metric and unit; a DDR row whose arrays
    are smaller than 4x the last-level cache carries `in_cache` and no DDR peak."""
    import csv

    result = bwprof.run(cases="ddr_triad", out=tmp_path / "r", plots=False, **SMALL)
    with open(tmp_path / "r" / "results.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["schema_version"] == "2"
    assert (row["metric"], row["unit"], row["higher_is_better"]) == ("bandwidth", "GB/s", "True")
    assert float(row["value_best"]) == float(row["gbps_best"]) > 0
    assert float(row["value_median"]) == float(row["gbps_median"]) > 0
    llc = result.system["host"]["llc_bytes_total"]
    if llc and 4 * llc > 1 << 20:  # 1 MiB arrays: cache-resident wherever the LLC is known
        assert "in_cache" in row["flags"].split("|") and row["peak_value"] == ""
    else:
        assert "cache_unknown" in row["flags"].split("|")
    assert json.loads((tmp_path / "r" / "system.json").read_text())["schema_version"] == 2


def test_a_run_records_its_gpus_uuids_in_the_machine_identity(monkeypatch, tmp_path):
    """The GPUs' UUIDs join system.json's host.identity once the GPUs are probed (issue 34);
    the simulated GPUs have none, so NVML's answer is stood in for here."""
    from dataclasses import replace

    from bwprof import api

    real = api.gpu_executor

    def with_uuids(*args, **kwargs):
        executor, gpus = real(*args, **kwargs)
        devices = tuple(replace(d, metadata={**d.metadata, "uuid": f"GPU-{d.index:04d}"})
                        for d in gpus.devices)
        return executor, replace(gpus, devices=devices)

    monkeypatch.setattr(api, "gpu_executor", with_uuids)
    result = bwprof.run(cases="h2d_pinned", preset="quick", repeats=2, simulate=True,
                        out=tmp_path / "run", plots=False)
    identity = bwprof.load(tmp_path / "run").meta.host.identity
    count = len(result.meta.gpus.devices)
    assert count and identity.gpu_uuids == tuple(f"GPU-{i:04d}" for i in range(count))
    assert identity.box and identity.box_source


# Catches (issue 37): a host name that is not UTF-8 (gethostname's surrogate escapes) made
# writing the first row raise UnicodeEncodeError: the run ended with a traceback and lost
# every row; a kernel release and /proc/cpuinfo of such bytes likewise
def test_a_machine_whose_names_are_not_utf8_is_measured_written_and_reported(
        tmp_path, monkeypatch, capsys):
    import socket

    from bwprof import cli, system

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_bytes(b"processor\t: 0\nmodel name\t: EPYC \xff 9654\n")
    real_cpu_model = system.cpu_model
    monkeypatch.setattr(system, "cpu_model", lambda path=cpuinfo: real_cpu_model(path))
    monkeypatch.setattr(socket, "gethostname", lambda: "box\udcff")
    monkeypatch.setattr(system.platform, "release", lambda: "6.8.0-\udcfe")
    monkeypatch.setattr(system.platform, "platform", lambda: "Linux-6.8.0-\udcfe")
    out = tmp_path / "r"
    result = bwprof.run(cases="ddr_copy", out=out, plots=False, **SMALL)
    assert result.run_id.startswith("box\\xff-")
    system_json = json.loads((out / "system.json").read_bytes().decode("utf-8"))
    assert system_json["host"]["hostname"] == "box\\xff"
    assert system_json["host"]["cpu_model"] == "EPYC \\xff 9654"
    assert system_json["host"]["kernel"] == "6.8.0-\\xfe"
    rows = pd.read_csv(out / "results.csv", encoding="utf-8")
    assert len(rows) == len(result.results) > 0 and set(rows["host"]) == {"box\\xff"}
    assert bwprof.load(out).meta.hostname == "box\\xff"
    capsys.readouterr()
    assert cli.main(["report", str(out), "--no-plots"]) == 0
    assert "box\\xff" in capsys.readouterr().out


# Catches (issue 37): bwprof.run(cases=123) and out=123 raised TypeError, not bwprof's one line
@pytest.mark.parametrize(("options", "words"), [
    ({"cases": 123}, "--cases expects a string such as 'ddr_triad,h2d_' or a list of strings, "
                     "got 123"),
    ({"cases": ["ddr_copy", 1]}, "--cases expects"),
    ({"out": 123}, "out must be a path"),
    ({"repeats": 2.5}, "--repeats must be a whole number, got 2.5"),
    ({"threads": "1,,2"}, "--threads '1,,2' has an empty entry between commas"),
])
def test_arguments_of_the_wrong_kind_are_one_line_errors(tmp_path, monkeypatch, options,
                                                         words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BwprofError) as refused:
        bwprof.run(**{"cases": "ddr_copy", **SMALL, **options})
    assert str(refused.value).startswith(words) and "\n" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []
