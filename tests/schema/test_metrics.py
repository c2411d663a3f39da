import pytest

from bwprof.schema.metrics import BANDWIDTH, EFFICIENCY, LATENCY, METRICS, THROUGHPUT, get_metric


def test_rates_are_work_over_seconds_in_their_unit():
    assert BANDWIDTH.value(3e9, 0.5) == pytest.approx(6.0)  # GB/s
    assert THROUGHPUT.value(2 * 4096**3, 1.0) == pytest.approx(2 * 4096**3 / 1e12)  # TFLOP/s


def test_latency_is_seconds_per_load_in_ns():
    assert LATENCY.value(1000, 1e-4) == pytest.approx(100.0)  # 1000 loads in 100 us: 100 ns


def test_the_fastest_sample_is_the_best_whichever_way_is_better():
    fast, slow = 1.0, 2.0
    for metric in (BANDWIDTH, LATENCY, THROUGHPUT):
        assert metric.better(metric.value(10.0, fast), metric.value(10.0, slow))
        assert not metric.better(metric.value(10.0, slow), metric.value(10.0, fast))


def test_a_ratio_is_not_derived_from_a_time():
    with pytest.raises(ValueError, match="ratio"):
        EFFICIENCY.value(1.0, 1.0)


@pytest.mark.parametrize(("work", "seconds"), [(0, 1.0), (1.0, 0.0), (-1.0, 1.0)])
def test_no_value_from_nothing(work, seconds):
    with pytest.raises(ValueError, match="positive"):
        BANDWIDTH.value(work, seconds)


def test_every_metric_names_its_unit_and_direction():
    assert {m: (METRICS[m].unit, METRICS[m].higher_is_better) for m in METRICS} == {
        "bandwidth": ("GB/s", True), "latency": ("ns", False),
        "throughput": ("TFLOP/s", True), "efficiency": ("ratio", True)}
    with pytest.raises(ValueError, match="unknown metric 'speed'"):
        get_metric("speed")
