"""The streamed merge (`MergeStream`, rank 0 taking one rank's report at a time) against the
in-memory one (`merge`, every report in hand): the same folder, file for file, byte for byte
(issue 36)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bwprof.fleet.merge import MergeStream, merge
from tests.fleet import synthetic

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
    return reports


def _streamed(out: Path, reports: dict[int, synthetic.RankReport], size: int,
              options: dict[str, object]):
    stream = MergeStream(out, "fleet-1", {r: synthetic.RankName.of(report)
                                          for r, report in reports.items()}, size, 60.0)
    for rank in sorted(reports):
        stream.add(reports[rank])
    stream.close()
    return stream.result(options)


# Catches: a streamed merge that numbers timings, orders rows, names nodes or writes
# system.json, timelines.json or findings.csv otherwise than the in-memory merge
def test_the_streamed_merge_writes_the_in_memory_merges_folder_byte_for_byte(tmp_path, source):
    reports = _fleet(source)
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    expected = merge(old, "fleet-1", reports, size=8, timeout_s=60.0, options={"plots": False})
    got = _streamed(new, reports, 8, {"plots": False})
    for name in FILES:
        assert (new / name).read_bytes() == (old / name).read_bytes(), name
    assert sorted(p.name for p in new.iterdir()) == sorted(p.name for p in old.iterdir())
    # What the run command shows from it: the same rows, failures, notes and metadata (the
    # rows as the folder gives them back: an empty text cell is None there, '' in memory).
    def shown(rows):
        return [(r.rank, r.device, r.case, r.size_bytes, r.status, r.note, r.value_median)
                for r in rows]

    assert shown(got.rows) == shown(expected.rows)
    assert len(got.failed) == len(expected.failed) == 3  # rank 2's error, ranks 3 and 7
    assert got.notes == expected.notes
    assert got.meta == expected.meta


def test_the_merged_folder_reads_as_one_run(tmp_path, source):
    from bwprof import saved

    reports = _fleet(source)
    _streamed(tmp_path, reports, 8, {"plots": False})
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
