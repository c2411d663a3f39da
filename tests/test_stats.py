import math

import pytest

from bwprof.stats import gbps, pct_of_peak, summarize


def test_summarize_median_best_and_cv():
    s = summarize([2.0, 1.0, 4.0, 3.0])
    assert s.n == 4
    assert s.median_s == 2.5
    assert s.min_s == 1.0
    assert s.max_s == 4.0
    assert s.mean_s == 2.5
    assert s.cv == pytest.approx(math.sqrt(5 / 3) / 2.5)


def test_a_single_sample_has_no_cv():
    assert summarize([0.5]).cv is None


@pytest.mark.parametrize("bad", [[], [0.0], [1.0, -1.0], [float("nan")], [float("inf")]])
def test_summarize_rejects_impossible_samples(bad):
    with pytest.raises(ValueError, match=r"no timed samples|positive and finite"):
        summarize(bad)


def test_gbps_is_decimal_gigabytes():
    assert gbps(3e9, 1.5) == 2.0
    with pytest.raises(ValueError, match="seconds must be positive"):
        gbps(1, 0)


def test_pct_of_peak_needs_a_peak():
    assert pct_of_peak(50.0, 200.0) == 25.0
    assert pct_of_peak(50.0, None) is None
    assert pct_of_peak(None, 10.0) is None


def test_overlap_efficiency_on_hand_made_timelines():
    from bwprof.stats import overlap_efficiency

    # Copy 4 ms and kernel 3 ms: fully hidden at 4 ms, serial at 7 ms, half way at 5.5 ms.
    assert overlap_efficiency([4.0, 3.0], 4.0) == 1.0
    assert overlap_efficiency([4.0, 3.0], 7.0) == 0.0
    assert overlap_efficiency([4.0, 3.0], 5.5) == pytest.approx(0.5)
    # Three parts: 4 + 3 + 2 = 9 serial, 4 at best; 6 ms concurrent hides 3 of 5.
    assert overlap_efficiency([4.0, 3.0, 2.0], 6.0) == pytest.approx(0.6)
    # Clamped: faster than the longest part alone (noise) or slower than serial.
    assert overlap_efficiency([4.0, 3.0], 3.9) == 1.0
    assert overlap_efficiency([4.0, 3.0], 8.0) == 0.0
    with pytest.raises(ValueError, match="at least two parts"):
        overlap_efficiency([1.0], 1.0)
