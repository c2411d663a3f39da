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


def _masks() -> dict[int, set[int]]:
    """Each live thread's CPU mask; a thread that ends while they are read (another test's
    leftover thread in this worker) is left out."""
    import os

    masks = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            masks[tid] = os.sched_getaffinity(tid)
        except (ProcessLookupError, FileNotFoundError):
            continue
    return masks


def test_process_affinity_moves_every_thread_and_restores_each():
    import os
    import threading

    from bwprof.cpulist import process_affinity

    before = os.sched_getaffinity(0)
    one = frozenset({min(before)})
    release, started, born_inside = threading.Event(), threading.Event(), []

    def live_until_released():
        born_inside.append(threading.get_native_id())
        started.set()
        release.wait()

    worker = threading.Thread(target=release.wait)  # stands in for a Numba worker
    late = threading.Thread(target=live_until_released)
    worker.start()
    try:
        original = _masks()
        with process_affinity(one) as placed:
            assert placed
            assert set(_masks()[worker.native_id]) == one  # not only the calling thread
            late.start()
            assert started.wait(120), "the thread born inside the block did not start"
        assert _masks()[worker.native_id] == original[worker.native_id]
        assert os.sched_getaffinity(0) == before
        assert _masks()[born_inside[0]] == before  # born inside the block, restored as well
    finally:
        release.set()
        for thread in (worker, late):
            if thread.is_alive():
                thread.join()


def test_process_affinity_refused_changes_nothing():
    import os

    from bwprof.cpulist import process_affinity

    original = _masks()
    with process_affinity(frozenset({10_000})) as placed:  # no such CPU
        assert not placed
    with process_affinity(None) as placed:
        assert not placed
    after = _masks()  # the threads alive before and after (one may have ended between)
    assert {tid: after[tid] for tid in original if tid in after} == {
        tid: mask for tid, mask in original.items() if tid in after}
    assert os.sched_getaffinity(0) == original[os.getpid()]
