"""A fleet job says what became of every rank (finished, interrupted, failed, lost) and ends
with the job's one exit code on every rank (issue 37). No MPI: a scripted fleet stands in."""

from __future__ import annotations

import json
import shutil
import threading
import time
from types import SimpleNamespace

import pandas as pd
import pytest

import bwprof
from bwprof.errors import BwprofError, RunInterrupted
from bwprof.fleet import run as fleet_run
from bwprof.fleet.comm import HEARTBEAT_TAG
from bwprof.fleet.merge import RankName, merge
from bwprof.fleet.run import QuietExit, job_code
from tests.fleet.helpers import gives_up
from tests.fleet.test_merge import FLEET_OPTIONS, _FakeFleet, _report, _rows

TWO_JOBS = {**FLEET_OPTIONS, "cases": "ddr_triad,ddr_copy"}


class _Said(_FakeFleet):
    """A fake fleet that keeps what rank 0 broadcast (its last: the job's exit code)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.said: list[object] = []

    def bcast(self, value, what):
        self.said.append((what, value))
        return super().bcast(value, what)


class _StopAtSecondJob:
    """Progress listener: Ctrl-C as the second job starts (after the first row is kept)."""

    def __init__(self) -> None:
        self.jobs = 0

    def start(self, total, estimate_s=None):
        pass

    def job_started(self, job, left_s=None):
        self.jobs += 1
        if self.jobs == 2:
            raise KeyboardInterrupt

    def job_finished(self, job, rows):
        pass


def _join(monkeypatch, fleet) -> None:
    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: fleet))
    monkeypatch.setattr(fleet_run, "import_mpi",
                        lambda: SimpleNamespace(Get_library_version=lambda: "fake MPI"))


# Catches: an interrupted rank 0 left the job without a merged folder (its rows only in
# ranks/rank-0000, the other ranks' nowhere merged) and nothing said which rank stopped
def test_an_interrupted_rank_0_still_merges_every_ranks_rows_and_names_each_fate(
        monkeypatch, tmp_path):
    other = _report(1, "node1", _rows("node1", 20.0, 1))

    def gathered(mine):  # rank 1: its options are good, its GPU count, its report
        if isinstance(mine, tuple):
            return {0: mine, 1: (2, "node1", None)}
        return {0: mine, 1: other if mine is not None else None}

    fleet = _Said(0, 2, gathered=gathered)
    _join(monkeypatch, fleet)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as stopped:
        fleet_run.run_fleet(out=out, progress=_StopAtSecondJob(), **TWO_JOBS)
    result = stopped.value.result
    assert result.run_dir == out and result.interrupted
    system = json.loads((out / "system.json").read_text())
    assert system["interrupted"] is True and system["stopped_by"]
    assert [(r["rank"], r["status"]) for r in system["mpi"]["ranks"]] == [
        (0, "interrupted"), (1, "ok")]
    results = pd.read_csv(out / "results.csv")
    assert list(results[results["rank"] == 0]["status"]) == ["ok"]  # the first job's row
    assert len(results[results["rank"] == 1]) == 2  # every row the other rank sent
    assert not (out / "summary.csv").exists()  # an interrupted run draws no report files
    assert fleet.said[-1] == ("the merged folder", 130)  # every rank exits 130 with it


# Catches: a rank other than 0 that failed exited 1 at once (mpirun then killed rank 0
# while it merged) and, once rank 0 had the reports, every rank went into MPI_Finalize
# without waiting: a rank 0 stopped while merging held them there forever
def test_a_rank_other_than_0_ends_on_rank_0s_word_with_the_jobs_code(monkeypatch, tmp_path):
    fleet = _FakeFleet(1, 2, answers=[(None, "fleet-1", tmp_path / "run"),
                                      [(2, "node0", None), (2, "node1", None)],
                                      (False, "test"), 130])
    _join(monkeypatch, fleet)
    monkeypatch.setattr(fleet_run.api, "run", lambda **options: (_ for _ in ()).throw(
        RuntimeError("GPU fell off the bus")))
    with pytest.raises(SystemExit) as exited:
        fleet_run.run_fleet(out=None, **FLEET_OPTIONS)
    assert exited.value.code == 130 and fleet.answers == []


# Catches: a rank given a bad option (an MPMD launch) measured nothing and failed the job
# with exit 1, as if a measurement had failed, after the others had measured
def test_one_ranks_bad_option_stops_the_job_as_bad_input_before_anything_is_written(
        monkeypatch, tmp_path):
    refused = "--repeats must be from 2 (the first repetition is dropped) to 1000, got 0"
    fleet = _FakeFleet(0, 2, gathered=lambda mine: {0: mine, 1: refused})
    _join(monkeypatch, fleet)
    out = tmp_path / "run"
    with pytest.raises(BwprofError, match=r"^rank 1's options: --repeats must be") as error:
        fleet_run.run_fleet(out=out, **FLEET_OPTIONS)
    assert error.value.exit_code == 2 and not out.exists()
    rank1 = _FakeFleet(1, 2, answers=[(f"rank 1's options: {refused}", None, None)])
    _join(monkeypatch, rank1)
    with pytest.raises(QuietExit):
        fleet_run.run_fleet(out=None, **{**FLEET_OPTIONS, "repeats": 0})
    assert rank1.sent[0] == refused  # its own check, sent to rank 0


def test_the_merge_marks_the_run_interrupted_by_the_ranks_signal(tmp_path):
    received = {0: _report(0, "node0", _rows("node0", 30.0, 0)),
                1: _report(1, "node1", _rows("node1", 20.0, 1)[:1], interrupted="SIGTERM")}
    result = merge(tmp_path, "fleet-1", received, size=3, timeout_s=60.0, options={})
    system = json.loads((tmp_path / "system.json").read_text())
    assert system["interrupted"] is True and system["stopped_by"] == "SIGTERM (rank(s) 1)"
    assert [(r["status"], r.get("error")) for r in system["mpi"]["ranks"]] == [
        ("ok", None), ("interrupted", "SIGTERM"), ("missing", None)]
    assert result.interrupted and len(result.results) == 4  # 3 rows and rank 2's error row
    assert job_code(result) == 130


# Catches: after a stop signal rank 0 waited the whole --mpi-timeout for a rank that died
# (mpirun's SIGKILL, a second after its SIGTERM, then took rank 0 before it wrote anything)
def test_after_a_stop_signal_rank_0_waits_for_a_silent_rank_only_briefly(monkeypatch):
    from bwprof.fleet import comm as comm_module
    from bwprof.fleet.comm import HURRIED_WAIT_S, Fleet
    from tests.fleet.test_comm import FakeComm

    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    fleet = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="node0",
                  timeout_s=600.0)
    started = time.monotonic()
    assert fleet.gather("mine", "results", hurry=lambda: True) == {0: "mine", 1: "from one"}
    assert time.monotonic() - started < HURRIED_WAIT_S + 5  # not the 600 s


class _GoAheadThenSilence:
    """Rank 1's view of a rank 0 stopped (SIGSTOP) just after its go-ahead: the send of the
    results never completes and no heartbeat comes."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    def iprobe(self, source, tag):
        return tag != HEARTBEAT_TAG

    def recv(self, source, tag):
        return None

    def send(self, value, dest, tag):  # what a blocking send to a stopped rank does
        threading.Event().wait()

    def isend(self, value, dest, tag):
        self.sent.append(value)
        return SimpleNamespace(test=lambda: (False, None))


# Catches: a rank sending its results to a rank 0 stopped mid-gather blocked in MPI for good
# (SIGSTOP on rank 0 under --mpi-timeout 20: the job never ended)
def test_a_ranks_results_to_a_stopped_rank_0_time_out(monkeypatch):
    from bwprof.fleet import comm as comm_module
    from bwprof.fleet.comm import Fleet

    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    fleet = Fleet(_GoAheadThenSilence(), rank=1, size=2, local_rank=0, local_size=1,
                  host="n", timeout_s=0.05)
    outcome = gives_up(lambda: fleet.gather("a large report", "every rank's results"))
    assert outcome == ["rank 1 waited 0.05 s for every rank's results from rank 0, silent "
                       "all that time"]


# Catches: ranks waiting for rank 0's word took a long merge for a hang
def test_rank_0_beats_while_it_merges():
    from bwprof.fleet.comm import Fleet
    from tests.fleet.test_comm import FakeComm

    fleet = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="node0",
                  timeout_s=0.5)  # a beat every 0.05 s
    with fleet.beating():
        time.sleep(0.5)
    beats = [dest for dest, tag in fleet.comm.sent if tag == HEARTBEAT_TAG]
    assert len(beats) >= 4 and set(beats) == {1, 2}
    after = len(fleet.comm.sent)
    time.sleep(0.2)
    assert len(fleet.comm.sent) == after  # the beats end with the merge


# Catches: a stop signal while rank 0 wrote the merged folder (held there, as it must be)
# was then forgotten: the job exited 0 as if nothing had stopped it
def test_a_signal_held_while_rank_0_merges_still_ends_the_job_with_130(monkeypatch, tmp_path):
    from bwprof import interrupts

    fleet = _Said(0, 1)
    _join(monkeypatch, fleet)
    real_result = fleet_run.MergeStream.result  # the merge's last step (issue 36's stream)

    def merge_then_sigterm(self, *args, **kwargs):
        result = real_result(self, *args, **kwargs)
        interrupts._received.append("SIGTERM")  # as interrupts' handler records one held
        return result

    monkeypatch.setattr(fleet_run.MergeStream, "result", merge_then_sigterm)
    monkeypatch.setattr(interrupts, "_received", [])
    with pytest.raises(RunInterrupted) as stopped:
        fleet_run.run_fleet(out=tmp_path / "run", **FLEET_OPTIONS)
    assert fleet.said[-1] == ("the merged folder", 130)
    system = json.loads((tmp_path / "run" / "system.json").read_text())
    # Every rank had reported: the folder is whole, and says the signal came after every
    # case was measured, as a single run's does (so folder and exit 130 agree), and reading
    # takes it as finished.
    assert system["interrupted"] is True
    assert system["stopped_by"] == "SIGTERM after every case was measured"
    assert bwprof.load(tmp_path / "run").state == "finished"
    assert "merged folder is whole" in stopped.value.result.notes[-1]


class _SignalOnceReported(_FakeFleet):
    """Rank 1 of two, stopped by a signal just after it sent its report to rank 0."""

    def stream(self, value, what, take, sources=None, hurry=None):
        from bwprof import interrupts

        interrupts._received.append("SIGTERM")  # as interrupts' handler records one held
        return super().stream(value, what, take, sources, hurry)


# Catches: a rank signalled once it had sent its report exited 130 while rank 0 exited 0
# and the merged folder said the run was not interrupted
def test_a_rank_signalled_after_its_report_exits_with_rank_0s_code(monkeypatch, tmp_path):
    from bwprof import interrupts

    monkeypatch.setattr(interrupts, "_received", [])
    fleet = _SignalOnceReported(1, 2, answers=[(None, "fleet-1", tmp_path / "run"),
                                               [(2, "node0", None), (2, "node1", None)],
                                               (False, "test"), 0])
    _join(monkeypatch, fleet)
    monkeypatch.setattr(fleet_run.api, "run", lambda **options: SimpleNamespace(meta=None))
    assert fleet_run.run_fleet(out=None, **FLEET_OPTIONS) is None  # no SystemExit(130)
    assert fleet.answers == [] and not fleet.sent[-1].interrupted  # its report: whole


# Catches: an interrupted job whose merged files could not be written exited 3 on every
# rank (130 comes first: docs/fleet.md)
def test_an_interrupted_job_that_cannot_write_its_merge_exits_130(monkeypatch, tmp_path):
    from bwprof import interrupts
    from bwprof.errors import OutputError

    monkeypatch.setattr(interrupts, "_received", [])
    fleet = _Said(0, 1)
    _join(monkeypatch, fleet)
    monkeypatch.setattr(fleet_run.api, "run", lambda **options: (_ for _ in ()).throw(
        KeyboardInterrupt()))

    def disk_full(self):  # as close() on a full disk: its files closed, the error raised
        self.abandon()
        raise OutputError("could not write results.csv: No space left on device")

    monkeypatch.setattr(fleet_run.MergeStream, "close", disk_full)
    with pytest.raises(OutputError) as refused:
        fleet_run.run_fleet(out=tmp_path / "run", **FLEET_OPTIONS)
    assert refused.value.exit_code == 130 and fleet.said[-1] == ("the merged folder", 130)


def _silent_rank_1(tmp_path, folder_says: bool):
    """Rank 0 of a fake 2-rank fleet whose rank 1 sends nothing after the GPU counts: once
    rank 0 has measured, rank 1's folder is a copy of rank 0's, its system.json saying it
    was stopped by SIGTERM (`folder_says`) or, as its claim wrote it, nothing more."""
    out = tmp_path / "run"

    def gathered(mine):
        if isinstance(mine, tuple):  # the GPU counts
            return {0: mine, 1: (2, "node1", None)}
        if isinstance(mine, RankName):  # rank 1 still finishing: its folder as it is now
            own, other = out / "ranks" / "rank-0000", out / "ranks" / "rank-0001"
            shutil.copytree(own, other)
            system = json.loads((other / "system.json").read_text())
            system.update(interrupted=folder_says, stopped_by="SIGTERM", finished_utc=None)
            if not folder_says:
                del system["stopped_by"]
            (other / "system.json").write_text(json.dumps(system))
        return {0: mine} if mine is not None else {0: None, 1: None}

    fleet = _Said(0, 2, gathered=gathered)
    return out, fleet


# Catches (issue 37): a rank that sent nothing in time (0.2 s after a stop signal, or the
# whole timeout) was merged as `missing` with none of its rows, though every row it finished
# was in its own folder, on the disk rank 0 writes to
@pytest.mark.parametrize("said", ["by its folder", "by its word", "nowhere"])
def test_a_rank_that_sent_nothing_is_merged_from_its_own_folder(monkeypatch, tmp_path, said):
    """Its fate: `interrupted` where its folder says a signal stopped it, or it told rank 0
    one came (its folder not final yet); else `missing`. Its finished rows kept each time."""
    out, fleet = _silent_rank_1(tmp_path, folder_says=said == "by its folder")
    fleet.announced = {1: "SIGTERM"} if said == "by its word" else {}
    _join(monkeypatch, fleet)
    if said != "nowhere":
        with pytest.raises(RunInterrupted):
            fleet_run.run_fleet(out=out, **TWO_JOBS)
    else:
        fleet_run.run_fleet(out=out, **TWO_JOBS)
    ranks = json.loads((out / "system.json").read_text())["mpi"]["ranks"]
    results = pd.read_csv(out / "results.csv")
    own = pd.read_csv(out / "ranks" / "rank-0001" / "results.csv")
    merged = results[(results["rank"] == 1) & (results["case"] != "rank")]
    assert len(own) == 2 and list(merged["case"]) == list(own["case"])  # every row kept
    assert list(merged["gbps_best"]) == list(own["gbps_best"])
    timings = pd.read_csv(out / "timings.csv")
    assert set(timings["result_row"]) == set(range(len(results[results["case"] != "rank"])))
    errors = results[results["status"] == "error"]
    if said != "nowhere":  # it was stopped by a signal: so says the merge, and 130
        assert [(r["status"], r.get("error")) for r in ranks] == [
            ("ok", None), ("interrupted", "SIGTERM")]
        assert errors.empty
        assert fleet.said[-1] == ("the merged folder", 130)
    else:  # no word and no end in its folder: missing, its finished rows kept, exit 1
        assert [r["status"] for r in ranks] == ["ok", "missing"]
        assert list(errors["rank"]) == [1]
        assert errors["note"].iloc[0] == ("rank 1 did not report within 1800 s (hung or "
                                          "died); its 2 finished row(s), read from its "
                                          "folder, are kept")
        assert fleet.said[-1] == ("the merged folder", 1)
    assert fleet.aborted == fleet.said[-1][1]  # the job ended: rank 1 may be there still
