"""The fleet table's cells (`bwprof.analysis.outliers`)."""

from __future__ import annotations

from bwprof.analysis.judge import Check
from bwprof.analysis.outliers import _cell


def _check(verdict: str, pct_of_band: float | None) -> Check:
    return Check(box="vm", run_dir="r", device="gpu0", gpu_model="NVIDIA H200", part="H200",
                 path="hbm", case="hbm_triad", verdict=verdict, reason="",
                 pct_of_band=pct_of_band)


def test_a_cell_gives_the_band_share_of_its_verdict():
    assert _cell([_check("PASS", 99.4)], flagged=False) == "PASS 99%"
    assert _cell([_check("FAIL", 52.0)], flagged=True) == "FAIL 52%!"


def test_a_failing_cell_never_reads_100_percent_or_more():
    """A spec's FAIL line above what a healthy part reaches: 'FAIL 104%' would read as a
    pass; the cell says FAIL alone (the reason names the line)."""
    assert _cell([_check("FAIL", 104.0)], flagged=False) == "FAIL"
    assert _cell([_check("WARN", 100.0)], flagged=False) == "WARN"


def test_a_subnormal_median_finds_no_outlier():
    """Latencies of 5e-324 ns (a damaged results.csv): a % from such a median overflowed to
    inf, so the sound GPU was an 'inf%' outlier; it is not comparable instead (issue 37)."""
    from dataclasses import replace

    from bwprof.analysis.outliers import outliers

    checks = [replace(_check("PASS", None), box=f"n{i}", value=value, higher_is_better=False)
              for i, value in enumerate((5e-324, 5e-324, 400.0))]
    assert outliers(checks, 10.0) == []
    sound = [replace(c, value=v) for c, v in zip(checks, (400.0, 401.0, 800.0), strict=True)]
    assert [o.box for o in outliers(sound, 10.0)] == ["n2"]
