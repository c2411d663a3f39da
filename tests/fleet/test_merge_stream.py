"""The streamed merge (`MergeStream`, rank 0 taking one rank's report at a time) against the
in-memory one (`tests/fleet/reference_merge.py`, every report in hand, as bwprof merged
before): the same folder, file for file, byte for byte
(issue 36), and rank 0's memory flat as the fleet grows."""

from __future__ import annotations

import gc
import tracemalloc

import pandas as pd
import pytest

from bwprof.fleet.merge import MergeStream, merge
from tests.fleet import synthetic
from tests.fleet.reference_merge import merge_in_memory

FILES = ("results.csv", "timings.csv", "samples.csv", "findings.csv", "timelines.json",
         "system.json", "summary.csv", "columns.csv")


@pytest.fixture(scope="module")
def source() -> synthetic.Source:
    return synthetic.Source()


def _fleet(source: synthetic.Source) -> dict[int, synthetic.RankReport]:
    """Seven ranks: two nodes of two ranks (one GPU each), two machines both named
    node0004 (box keys told apart), a rank that failed, one on another driver; rank 3 and
    the last rank (7) never report."""
    reports = {r: synthetic.report(source, r, per_node=2) for r in (0, 1)}
    reports[2] = synthetic.report(source, 2, per_node=2, error="RuntimeError: GPU fell off")
    reports[4] = synthetic.report(source, 4, driver="550")
    reports[5] = synthetic.report(source, 5)
    reports[6] = synthetic.report(source, 6)
    for rank, box in ((5, "aaaaaaaaaaaa"), (6, "bbbbbbbbbbbb")):
        reports[rank] = synthetic.report(source, rank, box=box)
        reports[rank].host = "node0004"
        assert reports[rank].meta is not None and reports[rank].meta.host is not None
    for row in reports[5].rows:  # a slow box: below the fleet's median on every path
        for column in ("value_median", "value_best", "gbps_median", "gbps_best"):
            row[column] = row[column] * 0.5
    return reports


# Catches: a streamed merge that numbers timings, orders rows, names nodes or writes
# system.json, timelines.json or findings.csv otherwise than the in-memory merge
@pytest.mark.parametrize("stopped", [None, "SIGTERM"])
def test_the_streamed_merge_writes_the_in_memory_merges_folder_byte_for_byte(tmp_path, source,
                                                                            stopped):
    reports = _fleet(source)
    reports[6].interrupted = stopped  # an interrupted rank: no report files, 130
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    expected = merge_in_memory(old, "fleet-1", reports, size=8, timeout_s=60.0,
                               options={"plots": False})
    got = merge(new, "fleet-1", reports, size=8, timeout_s=60.0, options={"plots": False})
    assert sorted(p.name for p in new.iterdir()) == sorted(p.name for p in old.iterdir())
    for name in FILES:
        if stopped is None or name not in ("summary.csv", "columns.csv"):
            assert (new / name).read_bytes() == (old / name).read_bytes(), name
    assert got.interrupted == expected.interrupted == (stopped is not None)
    # What the run command shows from it: the same rows, failures, notes and metadata (the
    # rows as the folder gives them back: an empty text cell is None there, '' in memory).
    def shown(rows):
        return [(r.rank, r.device, r.case, r.size_bytes, r.status, r.note, r.value_median)
                for r in rows]

    assert shown(got.rows) == shown(expected.rows)
    assert len(got.failed) == len(expected.failed) == 3  # rank 2's error, ranks 3 and 7
    assert expected.meta.mpi is not None
    assert [r.status for r in expected.meta.mpi.ranks] == [
        "ok", "ok", "failed", "missing", "ok", "ok", "interrupted" if stopped else "ok",
        "missing"]
    assert got.notes == expected.notes
    assert got.meta == expected.meta
    whats = set(pd.read_csv(new / "findings.csv")["what"])
    assert "node node0005#aaaaaaaaaaaa below the fleet median on hbm_triad" in whats


def test_the_merged_folder_reads_as_one_run(tmp_path, source):
    from bwprof import saved

    reports = _fleet(source)
    merge(tmp_path, "fleet-1", reports, size=8, timeout_s=60.0, options={"plots": False})
    report = saved.make_run_report(tmp_path, plots=False, write=False)
    assert set(report.run.results["rank"]) == {0, 1, 2, 3, 4, 5, 6, 7}
    assert {"node0004#aaaaaaaaaaaa:gpu0", "node0004#bbbbbbbbbbbb:gpu0"} <= set(
        report.run.results["device"])


def test_a_rank_out_of_order_is_refused(tmp_path, source):
    stream = MergeStream(tmp_path, "r", synthetic.names(3), 3, 1.0)
    stream.add(synthetic.report(source, 1))
    with pytest.raises(ValueError, match="in order"):
        stream.add(synthetic.report(source, 0))
    stream.close()


class _Ranks:
    """Rank 0's view of a job of `size` ranks: each sends its report once given the
    go-ahead (a send on the stream's tag), except the `silent` ones."""

    def __init__(self, size: int, silent: frozenset[int] = frozenset()) -> None:
        self.size, self.silent = size, silent
        self.go: list[int] = []
        self.taken: set[int] = set()

    def iprobe(self, source, tag):
        from bwprof.fleet.comm import HEARTBEAT_TAG

        return (tag != HEARTBEAT_TAG and source in self.go and source not in self.silent
                and source not in self.taken)

    def recv(self, source, tag):
        self.taken.add(source)
        return f"report of {source}"

    def isend(self, value, dest, tag):
        from bwprof.fleet.comm import HEARTBEAT_TAG
        from tests.fleet.test_comm import Request

        if tag != HEARTBEAT_TAG:
            self.go.append(dest)
        return Request(True)


# Catches: a stream that hands rank 0 the reports out of rank order, lets every rank send at
# once (rank 0 then holds them all), waits for a silent rank forever, or asks one not listed
def test_the_stream_hands_over_one_rank_at_a_time_in_rank_order(monkeypatch):
    from bwprof.fleet import comm as comm_module
    from bwprof.fleet.comm import Fleet

    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    ranks = _Ranks(12, silent=frozenset({4}))
    fleet = Fleet(ranks, rank=0, size=12, local_rank=0, local_size=1, host="node0",
                  timeout_s=0.05)
    taken = []

    def take(rank, value):
        assert len(ranks.go) <= rank + Fleet.STREAM_AHEAD  # few sends under way at once
        taken.append((rank, value))

    sent = fleet.stream("mine", "results", take, sources=[r for r in range(12) if r != 9])
    assert sent == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11]
    assert taken[0] == (0, "mine") and taken[1:] == [(r, f"report of {r}") for r in sent[1:]]
    assert sorted(ranks.go) == [r for r in range(1, 12) if r != 9]  # each asked once


def _traced(step) -> tuple[int, int]:
    """(memory still held after `step`, the peak during it), in bytes, Python's own."""
    gc.collect()
    tracemalloc.start()
    try:
        kept = step()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        del kept
        return held, peak
    finally:
        tracemalloc.stop()


# Catches: rank 0 keeping every rank's rows, samples, nodes or timelines until the end (the
# in-memory merge: 10 MB more per 10 ranks of this size)
def test_rank_0s_memory_stays_flat_from_10_to_1000_ranks(tmp_path, source):
    """A 1,000-rank merge of this size (93 rows, 494 samples a rank) takes minutes here
    (benchmarks/growth_merge.py measures it: record its figures in docs/fleet.md); this test
    takes 10 ranks whole, then what 1,000 ranks' names and each further rank leave held
    (measured over 30 ranks) and the end of a 1,000-rank merge (960 of them missing: the
    findings of 40), and holds the 1,000-rank peak so foretold to within 2x."""
    def whole():
        stream = MergeStream(tmp_path / "ten", "fleet-1", synthetic.names(10), 10, 60.0)
        for report in synthetic.reports(source, 10):
            stream.add(report)
        stream.close()

    (tmp_path / "ten").mkdir()
    _, peak_10 = _traced(whole)
    reports = synthetic.reports(source, 40)
    stream = None

    def start():  # 1,000 ranks' names, the first 10 ranks merged
        nonlocal stream
        stream = MergeStream(tmp_path / "big", "fleet-1", synthetic.names(1000), 1000, 60.0)
        for _ in range(10):
            stream.add(next(reports))
        return stream

    def more():  # 30 ranks more
        for report in reports:
            stream.add(report)

    (tmp_path / "big").mkdir()
    held_10, peak_start = _traced(start)
    gc.collect()
    tracemalloc.start()
    try:
        more()
        gc.collect()
        held_40, peak_more = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _, peak_close = _traced(stream.close)  # 960 ranks missing: 1,000 in system.json
    per_rank = max(0, held_40) / 30  # traced from the 10th rank on: what each rank leaves
    foretold = max(peak_start, held_10 + peak_more, held_10 + held_40 + peak_close) + (
        960 * per_rank)
    assert per_rank < 4096, per_rank  # small per-rank records only: fate, name, picks
    assert foretold <= 2 * peak_10, (foretold, peak_10, per_rank)


# Catches: rank 0 killed (or stopped, then aborted) mid-merge leaving results.csv and
# timings.csv but no system.json, a folder `bwprof report` refused as "not a bwprof run
# folder" although it held every row merged before (issue 37)
def test_a_merge_killed_after_its_first_ranks_leaves_a_folder_report_reads(tmp_path, source,
                                                                            capsys):
    from bwprof.cli import main
    from bwprof.store.export import prepare_run_dir
    from bwprof.store.runfolder import load_run

    reports = _fleet(source)
    claim = prepare_run_dir(tmp_path / "F")  # rank 0's claim of the top folder, as run.py's
    stream = MergeStream(claim.folder, "fleet-1", synthetic.names(8), 8, 60.0)
    stream.add(reports[0])
    stream.add(reports[1])  # then rank 0 dies: close() never runs, its lock is let go
    claim.release()
    run = load_run(claim.folder)
    assert run.state == "incomplete"
    assert run.meta.run_id == "fleet-1" and run.meta.mpi is not None
    assert run.meta.mpi.size == 8
    assert set(run.results["rank"]) == {0, 1}
    assert len(run.results) == len(reports[0].rows) + len(reports[1].rows)
    capsys.readouterr()
    assert main(["report", str(claim.folder), "--no-plots"]) == 0
    assert "stopped without finishing" in capsys.readouterr().err
    stream.abandon()
