"""A rank 0 that went silent (stopped with SIGSTOP, hung or died) before its merge: the
ranks that gave up on it merge the ranks' own folders into the job's folder in its place, so
`bwprof report RUN` reads it (issue 37: RUN held only ranks/ and the lock, and was refused).
No MPI: a scripted rank 1 stands in (tests/test_mpirun.py runs a real job of it)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import bwprof
from bwprof.fleet import run as fleet_run
from bwprof.fleet.comm import FleetTimeout
from bwprof.fleet.merge import RankName
from bwprof.fleet.run import MERGE_LOCK, RankReport, _merge_for_rank_0
from bwprof.store.runlock import waiting_for
from tests.fleet.test_fates import TWO_JOBS, _join
from tests.fleet.test_merge import _FakeFleet

SILENT = "rank 1 waited 5 s for every rank's name from rank 0, silent all that time"


class _Rank0Silent(_FakeFleet):
    """Rank 1 of a fake fleet of `size` ranks: rank 0 answers until the last steps, then
    goes silent (its names' gather times out). As that happens, rank 0's folder (and each
    other rank's) is a copy of this rank's own, as far as `finished` says each got."""

    def __init__(self, out: Path, size: int, finished: dict[int, bool]) -> None:
        super().__init__(1, size, answers=[
            (None, "fleet-1", out), [(2, f"node{r}", None) for r in range(size)],
            (False, "test")])
        self.out, self.finished, self.gone = out, finished, None

    def gather(self, value, what, hurry=None):
        if not isinstance(value, RankName):
            return super().gather(value, what, hurry)
        ranks = self.out / "ranks"
        for rank, finished in self.finished.items():
            shutil.copytree(ranks / "rank-0001", ranks / f"rank-{rank:04d}")
            system_path = ranks / f"rank-{rank:04d}" / "system.json"
            system = json.loads(system_path.read_text())
            system["host"]["hostname"] = f"node{rank}"
            if not finished:
                system["finished_utc"] = None
            system_path.write_text(json.dumps(system))
        self.gone = SILENT
        raise FleetTimeout(SILENT)

    def silent(self, peer):
        return self.gone if peer == 0 else None

    def stopped_ranks(self):
        return {}


def _run_rank_1(monkeypatch, tmp_path, size=2, finished=None):
    out = tmp_path / "run"
    fleet = _Rank0Silent(out, size, finished if finished is not None else {0: True})
    _join(monkeypatch, fleet)
    with pytest.raises(SystemExit) as exited:
        fleet_run.run_fleet(out=None, timeout_s=5.0, **TWO_JOBS)
    return out, fleet, exited.value.code


# Catches (issue 37): a rank 0 stopped before its merge left RUN with only ranks/ and its
# lock: `bwprof report RUN` refused it ("not a bwprof run folder (no system.json)")
def test_a_rank_0_silent_before_its_merge_leaves_a_merged_folder_naming_it_missing(
        monkeypatch, tmp_path, capsys):
    out, fleet, code = _run_rank_1(monkeypatch, tmp_path)
    assert code == 1 and fleet.aborted == 1  # a rank lost: the job fails (docs/fleet.md)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: {SILENT}: rank 0 hangs, was stopped or died before its merge; rank 1 merged "
        f"the ranks' folders into {out} in its place (rank 0 `missing`, its 2 finished "
        f"row(s) kept); ending the job")
    run = bwprof.load(out)  # what `bwprof report RUN` reads
    assert run.meta.state == "finished" and run.meta.run_id == "fleet-1"
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [(0, "missing"), (1, "ok")]
    results = pd.read_csv(out / "results.csv")
    for rank in (0, 1):  # every row each rank finished, from its own folder or its report
        own = pd.read_csv(out / "ranks" / f"rank-{rank:04d}" / "results.csv")
        merged = results[(results["rank"] == rank) & (results["case"] != "rank")]
        assert list(merged["case"]) == list(own["case"]) and len(own) == 2
        assert list(merged["gbps_best"]) == list(own["gbps_best"])
    (error,) = results[results["status"] == "error"].to_dict("records")
    assert error["rank"] == 0 and error["note"] == (
        "rank 0 went silent for 5 s before its merge (stopped, hung or died): rank 1 merged "
        "the ranks' folders in its place; its 2 finished row(s), read from its folder, are "
        "kept")
    assert (out / "summary.csv").is_file()


# Catches: a live rank whose folder is final named `missing` by the merge in rank 0's place,
# or one still measuring named `ok` (its rows cut short)
def test_in_rank_0s_place_a_finished_rank_keeps_its_fate_and_one_measuring_is_missing(
        monkeypatch, tmp_path):
    out, _, code = _run_rank_1(monkeypatch, tmp_path, size=4,
                               finished={0: False, 2: True, 3: False})
    assert code == 1
    run = bwprof.load(out)
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [
        (0, "missing"), (1, "ok"), (2, "ok"), (3, "missing")]
    assert run.meta.state == "finished"  # the merge is whole, whatever rank 0 got to
    notes = list(run.results[run.results["status"] == "error"]["note"])
    assert notes[1] == ("rank 3's folder was not final when rank 1 merged in rank 0's place "
                        "(measuring still, hung or died); its 2 finished row(s) are kept")
    assert len(run.results[run.results["case"] != "rank"]) == 8


# Catches: a rank merging over rank 0's own merge, begun before it went silent (its folder
# reads as stopped mid-merge: `bwprof report` takes it)
def test_no_merge_in_rank_0s_place_once_its_own_merge_began(tmp_path):
    out = tmp_path / "run"
    (out / "ranks").mkdir(parents=True)
    (out / "system.json").write_text("{}")
    assert _merge_for_rank_0(1, 2, RankReport(1, "n", 0, 1, [], True), out, "fleet-1", 5.0,
                             {}, {}) is None
    assert (out / "system.json").read_text() == "{}"
    assert not (out / "ranks" / MERGE_LOCK).exists()


# Catches: two ranks that gave up on rank 0 merging at once (one's abort killing the other
# mid-write): the second waits for the first's lock, then finds the folder written
def test_a_second_rank_waits_for_the_first_ones_merge_and_does_not_merge_again(tmp_path):
    out = tmp_path / "run"
    (out / "ranks").mkdir(parents=True)
    outcome: list[object] = []
    report = RankReport(2, "n", 0, 1, [], True)
    with waiting_for(out / "ranks" / MERGE_LOCK):  # rank 1 is merging
        second = threading.Thread(target=lambda: outcome.append(_merge_for_rank_0(
            2, 3, report, out, "fleet-1", 5.0, {}, {})))
        second.start()
        time.sleep(0.3)
        assert second.is_alive() and outcome == []  # waiting, not merging
        shutil.copytree(Path(bwprof.__file__).parents[1] / "tests" / "data" / "h200-quick",
                        out, dirs_exist_ok=True)  # rank 1's merged folder
    second.join(timeout=30)
    assert outcome == [(1, f"another rank merged the ranks' folders into {out}")]


# Catches: a merge in rank 0's place that the disk refused left the rank with an OutputError
# and no abort (the stopped rank 0 kept the job alive until mpirun noticed the exit)
def test_a_merge_in_rank_0s_place_the_disk_refuses_still_ends_the_job(monkeypatch, tmp_path,
                                                                      capsys):
    from bwprof.errors import OutputError

    def disk_full(self):
        self.abandon()
        raise OutputError("could not write results.csv: No space left on device")

    monkeypatch.setattr(fleet_run.MergeStream, "close", disk_full)
    out, fleet, code = _run_rank_1(monkeypatch, tmp_path)
    assert code == 1 and fleet.aborted == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "note: rank 1 could not merge the ranks' folders in rank 0's place (could not write "
        "results.csv: No space left on device)",
        f"error: {SILENT}: rank 0 hangs (or one of its jobs outlasted --mpi-timeout); what "
        f"this rank measured is in its RUN/ranks/rank-0001 folder; ending the job"]
    assert (out / "ranks" / "rank-0001" / "results.csv").is_file()
