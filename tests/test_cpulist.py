import pytest

from bwprof.cpulist import format_cpu_list, parse_cpu_list


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("5", {5}), (" 0-1 ", {0, 1})],
)
def test_round_trip(text, cpus):
    assert parse_cpu_list(text) == frozenset(cpus)
    assert parse_cpu_list(format_cpu_list(cpus)) == frozenset(cpus)


def test_format_merges_runs():
    assert format_cpu_list([3, 1, 2, 0, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""


@pytest.mark.parametrize("text", [None, "", "  ", "0-a", "1,,2"])
def test_parse_rejects_empty_or_malformed(text):
    assert parse_cpu_list(text) is None


def test_cpu_affinity_applies_and_restores():
    import os

    from bwprof.cpulist import cpu_affinity

    before = os.sched_getaffinity(0)
    one = frozenset({min(before)})
    with cpu_affinity(one) as placed:
        assert placed and os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with cpu_affinity(None) as placed:
        assert not placed
    with cpu_affinity(frozenset({10_000})) as placed:  # no such CPU: refused, not raised
        assert not placed
    assert os.sched_getaffinity(0) == before
