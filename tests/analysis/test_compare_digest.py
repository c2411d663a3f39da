"""`compare_digest` (issue 36): a fleet comparison's figures across devices, one row per later
run and figure, made from columns: how many devices align and compared, the median change
(statistics.median's), beyond noise worse and better, and the worst devices in order."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from bwprof import saved
from bwprof.analysis.compare import DIGEST_WORST, compare_digest, compare_runs
from tests.render.test_fleet_digest import make_fleet

NODES = 21
LATER = [0.98] * 11 + [0.96] * 10
LATER[3] = 1.10  # better
# node0's hbm_triad raised in B: 20 compared, 10 at -4%, 9 at -2%, one at +10%: the median is
# between -4% and -2% (an even count).


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("digest")
    a = make_fleet(root / "a", [1.0] * NODES)
    b = make_fleet(root / "b", LATER, failed="node0:gpu0")
    return compare_runs([saved._load(a, "RUN_DIRS"), saved._load(b, "RUN_DIRS")])


def _figure(digest, case: str):
    rows = digest[digest["case"] == case]
    assert len(rows) == 1
    return rows.iloc[0]


def test_the_digest_counts_and_medians_each_figure_across_devices(comparison):
    digest = compare_digest(comparison, "summary")
    assert set(digest["run"]) == {"B"}
    hbm = _figure(digest, "hbm_triad")
    later = comparison.rows[(comparison.rows["scope"] == "summary")
                            & (comparison.rows["case"] == "hbm_triad")
                            & ~comparison.rows["baseline"]]
    assert hbm["aligned"] == len(later) == NODES
    assert hbm["compared"] == NODES - 1  # node0's hbm_triad raised in B
    assert hbm["median_change"] == pytest.approx(
        statistics.median(later["change_pct"].dropna().tolist()))
    assert hbm["median_change"] == pytest.approx(-3.0, abs=0.01)
    assert hbm["better"] == 1 and hbm["worse"] == NODES - 2
    assert hbm["on"] == "GPUs" and _figure(digest, "ddr_triad")["on"] == "hosts"
    assert _figure(digest, "h2d_all")["on"] == "boxes"


def test_the_worst_are_those_that_fell_most_in_table_order(comparison):
    hbm = _figure(compare_digest(comparison, "summary"), "hbm_triad")
    assert len(hbm["worst"]) == DIGEST_WORST
    assert [device for device, _ in hbm["worst"]] == ["node11:gpu0", "node12:gpu0",
                                                     "node13:gpu0"]
    assert all(change == pytest.approx(-4.0) for _, change in hbm["worst"])


def test_every_row_of_a_scope_is_in_one_digest_row(comparison):
    for scope in ("summary", "row"):
        digest = compare_digest(comparison, scope)
        rows = comparison.rows
        later = rows[(rows["scope"] == scope) & ~rows["baseline"]]
        assert digest["aligned"].sum() == len(later)
        assert digest["compared"].sum() == later["change_pct"].notna().sum()


def test_a_comparison_with_nothing_later_has_an_empty_digest(tmp_path: Path):
    a = make_fleet(tmp_path / "a", [1.0] * 2)
    run = saved._load(a, "RUN_DIRS")
    comparison = compare_runs([run, run])
    comparison.rows = comparison.rows[comparison.rows["baseline"]]
    assert compare_digest(comparison).empty
