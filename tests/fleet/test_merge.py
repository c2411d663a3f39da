"""Rank 0's merge of the ranks' reports into one run folder (no MPI needed)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from types import SimpleNamespace

import pandas as pd
import pytest

from bwprof.fleet.merge import RankReport, merge
from bwprof.schema.table import read_results
from tests.schema import builders
from tests.schema.builders import gpus, meta
from tests.store.test_export import make_row


def _report(rank, host, rows, gpu=0, **extra):
    system = meta(run_id="fleet-1", host=builders.host(hostname=host, kernel=f"rank {rank}"),
                  gpus=gpus(builders.gpu(gpu, metadata={"driver_version":
                                                        extra.pop("driver", "580")})))
    return RankReport(rank=rank, host=host, local_rank=0, local_size=1, gpus=[gpu],
                      host_cases=True, rows=[r.as_dict() for r in rows], meta=system,
                      **extra)


def _rows(host, ddr, rank):
    return [make_row(run_id="fleet-1", host=host, case="ddr_triad", device="cpu",
                     gbps_median=ddr, gbps_best=ddr * 1.02, rank=rank),
            make_row(run_id="fleet-1", host=host, case="hbm_triad", backend="cuda",
                     device="gpu0", device_name="NVIDIA H200", memory="hbm", threads=None,
                     size_bytes=256 << 20, gbps_median=4000.0, gbps_best=4080.0, rank=rank)]


def test_merge_names_every_node_keeps_every_row_and_says_who_failed(tmp_path):
    received = {
        0: _report(0, "node0", _rows("node0", 30.0, 0), findings=[
            {"severity": "warning", "device": "gpu0", "what": "PCIe link below its maximum",
             "why": "x", "evidence": "Gen4"}]),
        1: _report(1, "node1", _rows("node1", 20.0, 1), driver="550",
                   error="RuntimeError: GPU fell off the bus"),
        2: _report(2, "node2", _rows("node2", 30.5, 2), timings=[
            {"run_id": "fleet-1", "result_row": 1, "case": "hbm_triad", "device": "gpu0",
             "sample": 0, "seconds_per_op": 1e-4}]),
    }
    result = merge(tmp_path, "fleet-1", received, size=4, timeout_s=60.0, options={})
    (timing,) = pd.read_csv(tmp_path / "timings.csv").itertuples()
    assert (timing.result_row, timing.device) == (6, "node2:gpu0")
    assert (timing.host, timing.rank, timing.seconds_per_op) == ("node2", 2, 1e-4)
    # Written through the run writer: the same columns as a single run's timings.
    from bwprof.schema.rows import TIMING_COLUMNS
    assert tuple(pd.read_csv(tmp_path / "timings.csv").columns) == TIMING_COLUMNS
    frame = read_results(tmp_path / "results.csv")
    assert list(frame["rank"]) == [0, 0, 1, 1, 1, 2, 2, 3]
    assert frame.loc[6, "device"] == "node2:gpu0"  # where the timing above points
    assert list(frame["device"][:2]) == ["node0:cpu", "node0:gpu0"]
    errors = frame[frame["status"] == "error"]
    assert list(errors["note"]) == [
        "rank 1 on node1 failed: RuntimeError: GPU fell off the bus",
        "rank 3 did not report within 60 s (hung or died)"]
    system = json.loads((tmp_path / "system.json").read_text())
    assert [r["status"] for r in system["mpi"]["ranks"]] == ["ok", "failed", "ok", "missing"]
    assert set(system["nodes"]) == {"node0", "node1", "node2"}
    findings = pd.read_csv(tmp_path / "findings.csv")
    assert "node0:gpu0" in set(findings["device"])  # a rank's own finding, named by node
    whats = set(findings["what"])
    assert "node node1 below the fleet median on ddr_triad" in whats
    assert "node node1: driver differs from the fleet" in whats
    summary = pd.read_csv(tmp_path / "summary.csv")
    ddr = summary[summary["path"] == "ddr"]
    assert list(ddr["device"]) == ["node0:cpu", "node1:cpu", "node2:cpu"]  # one per node
    assert len(result.failed) == 2
    # The fleet folder gets the one shareable page a single run gets (issue 21).
    assert (tmp_path / "report.html").is_file()


def test_compare_accepts_fleet_runs_per_node_or_per_model(tmp_path):
    from bwprof.analysis.compare import compare_runs
    from bwprof.store.runfolder import load_run

    for name, slow in (("a", 30.0), ("b", 15.0)):
        received = {r: _report(r, f"node{r}", _rows(f"node{r}", slow if r == 1 else 30.0, r))
                    for r in range(3)}
        (tmp_path / name).mkdir()
        merge(tmp_path / name, "fleet-1", received, size=3, timeout_s=60.0,
              options={"plots": False})
    runs = [load_run(tmp_path / "a"), load_run(tmp_path / "b")]
    per_node = compare_runs(runs).rows
    node1 = per_node[(per_node["device"] == "node1:cpu") & (per_node["scope"] == "summary")
                     & (per_node["run"] == per_node["run"].iloc[-1])]
    assert node1["change_pct"].round(1).tolist() == [-50.0]
    per_model = compare_runs(runs, by="model").rows
    ddr = per_model[(per_model["scope"] == "summary") & (per_model["case"] == "ddr_triad")]
    assert set(ddr["device"]) == {"median of CPU, with comma"}
    assert ddr["value"].tolist() == [30.0, 30.0]  # the median of 30, 15, 30


def test_the_network_path_shows_only_in_runs_with_net_p2p_rows():
    from bwprof.analysis.summary import build_summary
    from bwprof.schema.table import results_frame

    net = [make_row(case="net_p2p", backend="mpi", device="rank0->rank1", memory="host",
                    direction="net", threads=None, size_bytes=size, gbps_median=gbps,
                    gbps_best=gbps * 1.02)
           for size, gbps in ((1 << 20, 2.0), (256 << 20, 3.0))]
    summary = build_summary(results_frame([*_rows("node0", 30.0, 0), *net]))
    (row,) = summary[summary["path"] == "net"].itertuples()
    assert (row.device, row.size_bytes, row.gbps) == ("rank0->rank1", 256 << 20, 3.0)
    assert "net" not in set(build_summary(results_frame(_rows("node0", 30.0, 0)))["path"])


def test_compare_keeps_host_and_gpu_buffer_figures_apart(tmp_path):
    from bwprof.analysis.compare import compare_runs
    from bwprof.store.runfolder import load_run

    for name in ("a", "b"):
        rows = [make_row(run_id="r", case="net_p2p", backend="mpi", device="rank0->rank1",
                         memory=memory, direction="net", threads=None, size_bytes=1 << 20,
                         gbps_best=gbps, rank=0)
                for memory, gbps in (("host", 10.0), ("hbm", 40.0))]
        (tmp_path / name).mkdir()
        merge(tmp_path / name, "r", {0: _report(0, "node0", rows)}, size=1, timeout_s=1.0,
              options={"plots": False})
    frame = compare_runs([load_run(tmp_path / "a"), load_run(tmp_path / "b")]).rows
    rows = frame[frame["scope"] == "row"]
    assert sorted(set(zip(rows["memory"], rows["value"], strict=True))) == [("hbm", 40.0),
                                                                            ("host", 10.0)]


def _fleet_report(rank, host, rows, **extra):
    from tests.fleet.test_merge import _report

    return _report(rank, host, rows, **extra)


# Catches: a rank whose rows failed validation is listed as ok
def test_a_rank_with_an_invalid_row_is_listed_as_failed(tmp_path):
    from bwprof.fleet.merge import merge
    from tests.fleet.test_merge import _rows
    from tests.store.test_export import make_row

    bad = [*_rows("node1", 20.0, 1),
           make_row(run_id="fleet-1", host="node1", case="ddr_copy", status="invalid",
                    note="validation failed: 1 of 3 elements", rank=1)]
    received = {0: _fleet_report(0, "node0", _rows("node0", 30.0, 0)),
                1: _fleet_report(1, "node1", bad)}
    result = merge(tmp_path, "fleet-1", received, size=2, timeout_s=60.0, options={"plots": False})
    system = json.loads((tmp_path / "system.json").read_text())
    assert [r["status"] for r in system["mpi"]["ranks"]] == ["ok", "failed"]
    assert [r.status for r in result.failed] == ["invalid"]


# Catches: with several ranks on a node (one GPU each), the node lists only the first
# rank's GPU, or a later rank's host metadata replaces the first's
def test_a_node_lists_every_ranks_gpus_and_its_first_ranks_host(tmp_path):
    from bwprof.fleet.merge import merge
    from tests.fleet.test_merge import _rows

    received = {0: _fleet_report(0, "node0", _rows("node0", 30.0, 0), gpu=0, driver="580"),
                1: _fleet_report(1, "node0", _rows("node0", 30.0, 1), gpu=1, driver="550"),
                2: _fleet_report(2, "node1", _rows("node1", 30.0, 2), gpu=0)}
    merge(tmp_path, "fleet-1", received, size=3, timeout_s=60.0, options={"plots": False})
    system = json.loads((tmp_path / "system.json").read_text())
    nodes = system["nodes"]
    assert list(nodes) == ["node0", "node1"]
    assert nodes["node0"]["host"]["kernel"] == "rank 0"  # the first rank's host
    drivers = [(d["index"], d["metadata"]["driver_version"])
               for d in nodes["node0"]["gpus"]["devices"]]
    assert drivers == [(0, "580"), (1, "550")]
    assert [d["index"] for d in nodes["node1"]["gpus"]["devices"]] == [0]
    # The top level describes rank 0's node as a whole, as a single-node run would.
    assert [d["index"] for d in system["gpus"]["devices"]] == [0, 1]


class _FakeFleet:
    """One rank's view of a fleet: bcast answers from a script (rank 0: its own value)."""

    def __init__(self, rank, size, answers=(), gathered=None):
        self.rank, self.size, self.local_rank, self.local_size = rank, size, 0, 1
        self.host = f"node{rank}"
        self.answers, self.gathered, self.sent, self.aborted = list(answers), gathered, [], None

    def bcast(self, value, what):
        return value if self.rank == 0 else self.answers.pop(0)

    def gather(self, value, what, hurry=None):
        self.sent.append(value)
        if self.rank != 0:
            return None
        return self.gathered(value) if self.gathered else {0: value}

    def stream(self, value, what, take, sources=None, hurry=None):
        """`gather`'s values, handed to `take` in rank order (`Fleet.stream`)."""
        got = self.gather(value, what, hurry)
        for rank in sorted(got or {}):
            take(rank, got[rank])
        return None if got is None else sorted(got)

    def abort(self, code):
        self.aborted = code

    @contextmanager
    def beating(self):
        yield

    def heartbeat(self):
        self.beats = getattr(self, "beats", 0) + 1

    def drain(self):
        pass

    def stopped_ranks(self):
        """The ranks that told rank 0 a stop signal reached them (`Fleet.announce_stop`)."""
        return getattr(self, "announced", {})


FLEET_OPTIONS = dict(cases="ddr_triad", preset="quick", repeats=2, threads="1", size="1MiB",
                     sample_interval_ms=50, file_format="csv", simulate=True, plots=False,
                     telemetry=False)


# Catches: a rank other than 0 that failed exits 0
def test_a_failed_rank_other_than_0_exits_1_after_reporting(monkeypatch, tmp_path):
    from bwprof.fleet import run as fleet_run

    fleet = _FakeFleet(1, 2, answers=[(None, "fleet-1", tmp_path / "run"),
                                      [(2, "node0", None), (2, "node1", None)], (False, "test"),
                                      1])  # rank 0's word: the merged folder, exit 1
    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: fleet))

    def fail(**options):
        raise RuntimeError("GPU fell off the bus")

    monkeypatch.setattr(fleet_run.api, "run", fail)
    with pytest.raises(SystemExit) as exited:
        fleet_run.run_fleet(out=None, **FLEET_OPTIONS)
    assert exited.value.code == 1
    report = fleet.sent[-1]  # after its options' check, the GPU counts, its name: its report
    assert report.error == "RuntimeError: GPU fell off the bus"


# Catches: rank 0 waits on instead of ending the job when a rank did not
# report
def test_rank_0_ends_the_job_when_a_rank_did_not_report(monkeypatch, tmp_path, capsys):
    from bwprof.fleet import run as fleet_run

    fleet = _FakeFleet(0, 2)
    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: fleet))
    monkeypatch.setattr(fleet_run, "import_mpi",
                        lambda: SimpleNamespace(Get_library_version=lambda: "fake MPI"))

    def fail(**options):
        raise RuntimeError("no rows today")

    monkeypatch.setattr(fleet_run.api, "run", fail)
    result = fleet_run.run_fleet(out=tmp_path / "run", timeout_s=5.0, **FLEET_OPTIONS)
    assert fleet.aborted == 1
    assert "rank(s) 1 did not report within 5 s" in capsys.readouterr().err
    notes = list(result.results["note"])
    assert "rank 1 did not report within 5 s (hung or died)" in notes


class _StuckFleet(_FakeFleet):
    """A fleet whose every collective step times out, as with a hung peer."""

    def bcast(self, value, what):
        from bwprof.fleet.comm import FleetTimeout

        raise FleetTimeout(f"rank {self.rank} waited 3 s for {what}")

    gather = bcast


# Catches: a collective step that times out ends a rank with a traceback (and, on rank 0,
# leaves the other ranks waiting)
@pytest.mark.parametrize(("rank", "says"), [
    (0, "rank 0 waited 3 s for every rank's options: a rank hangs or died; ending the job"),
    (1, "rank 1 waited 3 s for every rank's options: rank 0 hangs"),
])
def test_a_timed_out_step_ends_the_job_with_one_line(monkeypatch, capsys, tmp_path, rank,
                                                     says):
    from bwprof.fleet import run as fleet_run

    fleet = _StuckFleet(rank, 2)
    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: fleet))
    with pytest.raises(SystemExit) as exited:
        fleet_run.run_fleet(out=tmp_path / "run", **FLEET_OPTIONS)
    assert exited.value.code == 1 and fleet.aborted == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {says}") and err.count("\n") == 1
    assert "Traceback" not in err


# Catches: a rank measuring for longer than --mpi-timeout is given up on by ranks that
# finished early, because it never says it is alive
def test_a_rank_sends_a_heartbeat_at_each_job(monkeypatch, tmp_path):
    from bwprof.fleet import run as fleet_run

    fleet = _FakeFleet(0, 1)
    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: fleet))
    monkeypatch.setattr(fleet_run, "import_mpi",
                        lambda: SimpleNamespace(Get_library_version=lambda: "fake MPI"))
    result = fleet_run.run_fleet(out=tmp_path / "run", **FLEET_OPTIONS)
    jobs = len(result.results)
    assert jobs >= 1 and fleet.beats == 2 * jobs  # at each job's start and end


# Catches: a fleet run's top folder is not claimed: a second job given the same --out merges
# its rows into the first's folder
def test_a_fleet_run_claims_its_top_folder_as_a_single_run_does(monkeypatch, tmp_path):
    import bwprof
    from bwprof.errors import BwprofError
    from bwprof.fleet import run as fleet_run
    from bwprof.store.runlock import LOCK_FILE

    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: _FakeFleet(0, 1)))
    monkeypatch.setattr(fleet_run, "import_mpi",
                        lambda: SimpleNamespace(Get_library_version=lambda: "fake MPI"))
    out = tmp_path / "run"
    result = fleet_run.run_fleet(out=out, **FLEET_OPTIONS)
    assert result.run_dir == out and (out / LOCK_FILE).is_file()
    assert (out / "ranks" / "rank-0000" / LOCK_FILE).is_file()  # each rank's folder its own
    before = (out / "results.csv").read_bytes()
    with pytest.raises(BwprofError, match=f"output folder {out} belongs to another run"):
        fleet_run.run_fleet(out=out, **FLEET_OPTIONS)
    assert (out / "results.csv").read_bytes() == before
    assert list(bwprof.load(out).results["case"]) == list(result.results["case"])


# Catches: text cells that a spreadsheet would run as formulas get a second apostrophe in
# the merged folder (the rank's escaped cells were escaped again), or none
def test_a_formula_in_a_ranks_cells_is_escaped_once_in_the_merged_folder(tmp_path):
    from bwprof.fleet.run import _records
    from bwprof.schema.cells import frame_from_spreadsheet
    from bwprof.store.export import RunWriter

    rank = tmp_path / "rank"
    rank.mkdir()
    writer = RunWriter(rank)
    writer.add(make_row(run_id="fleet-1", host="=cmd", note="@SUM(A1)", rank=0), [1e-6])
    writer.close()
    report = _report(0, "=cmd", [])
    report.rows = _records(rank / "results.csv", report.notes)
    report.timings = _records(rank / "timings.csv", report.notes)
    assert report.rows[0]["host"] == "=cmd" and not report.notes  # read back as measured
    (tmp_path / "merged").mkdir()
    merge(tmp_path / "merged", "fleet-1", {0: report}, size=1, timeout_s=1.0,
          options={"plots": False})
    raw = pd.read_csv(tmp_path / "merged" / "results.csv")
    assert (raw.loc[0, "host"], raw.loc[0, "note"]) == ("'=cmd", "'@SUM(A1)")
    assert raw.loc[0, "device"] == "'=cmd:cpu"
    back = frame_from_spreadsheet(raw)
    assert (back.loc[0, "host"], back.loc[0, "note"]) == ("=cmd", "@SUM(A1)")
    assert pd.read_csv(tmp_path / "merged" / "timings.csv").loc[0, "host"] == "'=cmd"


# Catches (the review): a rank's damaged table was dropped from the merge without a word
def test_a_ranks_damaged_table_is_left_out_with_a_note(tmp_path):
    from bwprof.fleet.run import _records

    (tmp_path / "samples.csv").write_bytes(b"t_s,device\n\xff\xfe,gpu0\n")
    report = _report(0, "node0", [])
    assert _records(tmp_path / "samples.csv", report.notes) == []
    assert _records(tmp_path / "findings.csv", report.notes) == []  # missing: no note
    (note,) = report.notes
    assert note.startswith("samples.csv is left out of the merge:") and "UTF-8" in note
    (tmp_path / "merged").mkdir()
    result = merge(tmp_path / "merged", "fleet-1", {0: report}, size=1, timeout_s=1.0,
                   options={"plots": False})
    assert any(n.startswith("rank 0 on node0: samples.csv is left out") for n in result.notes)


def _with_box(report, box):
    """The rank's report as from a machine whose identity has the box key `box`."""
    from dataclasses import replace

    from bwprof.schema.meta import MachineIdentity

    identity = MachineIdentity(box=box, box_source="machine_id")
    return replace(report, meta=replace(report.meta,
                                        host=replace(report.meta.host, identity=identity)))


# Catches: two machines sharing a host name merged into one node (their GPUs, figures and
# findings mixed), as when nodes were keyed by host name only
def test_two_ranks_of_one_host_name_on_two_boxes_are_two_nodes(tmp_path):
    received = {0: _with_box(_report(0, "vm", _rows("vm", 30.0, 0)), "aaaaaaaaaaaa"),
                1: _with_box(_report(1, "vm", _rows("vm", 20.0, 1), gpu=1), "bbbbbbbbbbbb"),
                2: _with_box(_report(2, "vm", _rows("vm", 30.5, 2)), "cccccccccccc")}
    merge(tmp_path, "fleet-1", received, size=3, timeout_s=60.0, options={"plots": False})
    system = json.loads((tmp_path / "system.json").read_text())
    assert list(system["nodes"]) == ["vm#aaaaaaaaaaaa", "vm#bbbbbbbbbbbb", "vm#cccccccccccc"]
    assert [d["index"] for d in system["nodes"]["vm#bbbbbbbbbbbb"]["gpus"]["devices"]] == [1]
    assert [d["index"] for d in system["gpus"]["devices"]] == [0]  # rank 0's node only
    assert [r["host"] for r in system["mpi"]["ranks"]] == ["vm", "vm", "vm"]
    frame = read_results(tmp_path / "results.csv")
    assert list(frame["device"][:2]) == ["vm#aaaaaaaaaaaa:cpu", "vm#aaaaaaaaaaaa:gpu0"]
    assert set(frame["host"]) == {"vm"}
    findings = pd.read_csv(tmp_path / "findings.csv")
    assert "node vm#bbbbbbbbbbbb below the fleet median on ddr_triad" in set(findings["what"])


def test_ranks_of_one_box_or_without_one_share_their_host_names_node(tmp_path):
    """Several ranks on one box (one GPU each) are one node named by host name, as are ranks
    whose runs recorded no identity."""
    received = {0: _with_box(_report(0, "vm", _rows("vm", 30.0, 0)), "aaaaaaaaaaaa"),
                1: _with_box(_report(1, "vm", _rows("vm", 30.0, 1), gpu=1), "aaaaaaaaaaaa"),
                2: _report(2, "old", _rows("old", 30.0, 2)),
                3: _report(3, "old", _rows("old", 30.0, 3), gpu=1)}
    merge(tmp_path, "fleet-1", received, size=4, timeout_s=60.0, options={"plots": False})
    system = json.loads((tmp_path / "system.json").read_text())
    assert list(system["nodes"]) == ["vm", "old"]
    assert [d["index"] for d in system["nodes"]["vm"]["gpus"]["devices"]] == [0, 1]
