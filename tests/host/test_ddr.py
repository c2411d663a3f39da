import numba
import numpy as np
import pytest

from bwprof.cases import get_case
from bwprof.host import stream
from bwprof.host.ddr import HostExecutor, HostStream
from bwprof.measurement import Job
from bwprof.units import MiB


def _broken_triad(a, b, c, scalar):
    """Triad that gets one element wrong: validation must catch it."""
    a[:] = b + scalar * c
    a[a.size // 2] += 1.0


def test_time_kernel_drops_the_first_repetition(fake_clock_factory):
    clock = fake_clock_factory([9.0, 1.0, 2.0, 3.0])
    bench = HostStream(2048, clock=clock)
    seconds, _ = bench.time_kernel("copy", repeats=4)
    assert seconds == [1.0, 2.0, 3.0]
    assert bench.validate("copy", 4, None) == ""


def test_validation_catches_a_wrong_element():
    kernels = {**stream.KERNELS, "triad": stream.StreamKernel("triad", _broken_triad,
                                                              stream.KERNELS["triad"].replay)}
    bench = HostStream(2048, kernels=kernels)
    _, value = bench.time_kernel("triad", repeats=2)
    assert "1 of 2048 elements of a" in bench.validate("triad", 2, value)


@pytest.mark.parametrize("name", ["copy", "scale", "add", "triad"])
def test_validation_catches_timed_launches_that_did_nothing(name):
    """Each kernel works on its first launch only (the dropped one): left over from it, its
    output would validate, as every launch writes the same values."""
    real = stream.KERNELS[name]
    calls = []

    def first_only(a, b, c, scalar):
        calls.append(1)
        if len(calls) == 1:
            real.run(a, b, c, scalar)

    kernels = {**stream.KERNELS, name: stream.StreamKernel(name, first_only, real.replay,
                                                           real.writes)}
    bench = HostStream(2048, kernels=kernels)
    bench.time_kernel(name, repeats=4)
    assert f"2048 of 2048 elements of {real.writes}" in bench.validate(name, 4, None)
    # The real kernel, poisoned the same way, validates.
    bench = HostStream(2048)
    bench.time_kernel(name, repeats=4)
    assert bench.validate(name, 4, None) == ""


def test_validation_catches_a_wrong_dot():
    bench = HostStream(2048)
    bench.time_kernel("dot", repeats=2)
    assert "dot = 1.0" in bench.validate("dot", 2, 1.0)


def test_executor_measures_every_size_and_thread_count(small_plan):
    executor = HostExecutor("test cpu")
    case = get_case("ddr_triad")
    jobs = executor.jobs(case, small_plan)
    assert jobs == [Job("ddr_triad", size_bytes=MiB, threads=1)]
    before = numba.get_num_threads()
    (m,) = executor.measure(case, jobs[0], small_plan)
    assert numba.get_num_threads() == before
    assert m.valid and m.note == ""
    assert len(m.seconds_per_op) == small_plan.repeats - 1
    assert all(s > 0 for s in m.seconds_per_op)
    assert m.bytes_per_op == 3 * MiB
    assert (m.device, m.device_name, m.memory, m.threads) == ("cpu", "test cpu", "ddr", 1)


def test_executor_marks_a_failed_validation(small_plan):
    kernels = {**stream.KERNELS, "triad": stream.StreamKernel("triad", _broken_triad,
                                                              stream.KERNELS["triad"].replay)}
    executor = HostExecutor("cpu", kernels=kernels)
    case = get_case("ddr_triad")
    (m,) = executor.measure(case, executor.jobs(case, small_plan)[0], small_plan)
    assert not m.valid
    assert m.note.startswith("validation failed")


@pytest.mark.parametrize("key", ["ddr_copy", "ddr_scale", "ddr_add", "ddr_dot"])
def test_every_ddr_case_validates(small_plan, key):
    executor = HostExecutor("cpu")
    case = get_case(key)
    (m,) = executor.measure(case, executor.jobs(case, small_plan)[0], small_plan)
    assert m.valid, m.note
    assert np.isfinite(m.seconds_per_op).all()


def test_each_thread_count_gets_arrays_first_touched_by_its_own_threads(monkeypatch):
    from bwprof.host import ddr
    from bwprof.plan import make_plan

    made = []

    class Recorded(ddr.HostStream):
        def __init__(self, *args, **kwargs):
            made.append(numba.get_num_threads())  # the threads that will first touch them
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(ddr, "HostStream", Recorded)
    plan = make_plan(cases="ddr_copy,ddr_triad", repeats=2, threads="1,2", size="1MiB",
                     usable_cpus=2, llc_bytes=None, memory_available_bytes=None)
    executor = HostExecutor("cpu")
    for case in plan.host_cases:
        for job in executor.jobs(case, plan):
            executor.measure(case, job, plan)
    # copy@1, copy@2, triad@1, triad@2: fresh arrays whenever the thread count changes.
    assert made == [1, 2, 1, 2]


def _two_nodes():
    """This machine's CPUs split into two NUMA nodes (real affinity, made-up topology)."""
    import os

    from bwprof.host.facts import HostNode

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to stand in for two NUMA nodes")
    return (HostNode(0, frozenset(cpus[: len(cpus) // 2]), 8 << 30),
            HostNode(1, frozenset(cpus[len(cpus) // 2:]), 8 << 30))


def test_measurable_nodes_need_two_nodes_with_memory_and_allowed_cpus():
    from bwprof.host.facts import HostNode, measurable_nodes
    from bwprof.system import NumaNode

    nodes = [NumaNode(0, "0-3", 64 << 30), NumaNode(1, "4-7", 64 << 30),
             NumaNode(2, "", 64 << 30),  # CXL or HBM node without CPUs
             NumaNode(3, "8-9", 0),  # CPUs without memory
             NumaNode(4, "0-9", None)]  # memory not told (gVisor): not trusted
    assert measurable_nodes(nodes, frozenset(range(10))) == (
        HostNode(0, frozenset(range(4)), 64 << 30), HostNode(1, frozenset(range(4, 8)), 64 << 30))
    # A cpuset that reaches one node leaves nothing to compare: the whole-host row is that node.
    assert measurable_nodes(nodes, frozenset({0, 1})) == ()
    assert measurable_nodes(nodes[:1], frozenset(range(10))) == ()


def test_each_numa_node_runs_on_its_own_cpus_with_its_own_arrays(small_plan, monkeypatch):
    import os

    from bwprof.host import ddr

    nodes = _two_nodes()
    monkeypatch.setattr(ddr.placement, "node_share", lambda arrays, node: 1.0)
    seen: list[set[int]] = []

    def triad_recording_affinity(a, b, c, scalar):
        threads = os.listdir("/proc/self/task")
        seen.append(set.union(*(os.sched_getaffinity(int(t)) for t in threads)))
        stream.KERNELS["triad"].run(a, b, c, scalar)

    kernels = {**stream.KERNELS, "triad": stream.StreamKernel(
        "triad", triad_recording_affinity, stream.KERNELS["triad"].replay)}
    made = []

    class Recorded(ddr.HostStream):
        def __init__(self, *args, **kwargs):
            made.append(os.sched_getaffinity(0))  # the CPUs whose threads first touch them
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(ddr, "HostStream", Recorded)
    executor = HostExecutor("cpu", kernels=kernels, nodes=nodes)
    case = get_case("ddr_triad")
    jobs = executor.jobs(case, small_plan)
    assert jobs == [Job("ddr_triad", size_bytes=MiB, threads=1),
                    *(Job("ddr_triad", size_bytes=MiB, threads=len(n.cpus), numa_node=n.node)
                      for n in nodes)]
    before = os.sched_getaffinity(0)
    rows = [m for job in jobs for m in executor.measure(case, job, small_plan)]
    assert os.sched_getaffinity(0) == before
    assert [m.device for m in rows] == ["cpu", "numa0", "numa1"]
    assert [m.numa_node for m in rows] == [None, 0, 1]
    assert all(m.valid for m in rows), [m.note for m in rows]
    assert "NUMA node 1 alone" in rows[2].note
    # Whole host on every CPU; then each node's threads, all of them, on its CPUs only.
    runs = small_plan.repeats
    assert seen[:runs] == [set(before)] * runs
    assert seen[runs:2 * runs] == [set(nodes[0].cpus)] * runs
    assert seen[2 * runs:] == [set(nodes[1].cpus)] * runs
    assert made == [before, nodes[0].cpus, nodes[1].cpus]  # fresh arrays, touched in place


def test_the_hosts_ddr_peak_goes_on_whole_host_rows_only(small_plan, monkeypatch):
    from bwprof.host import ddr

    nodes = _two_nodes()
    monkeypatch.setattr(ddr.placement, "node_share", lambda arrays, node: 1.0)
    executor = HostExecutor("cpu", nodes=nodes, peak_gbps=614.4)
    case = get_case("ddr_copy")
    rows = [m for job in executor.jobs(case, small_plan)
            for m in executor.measure(case, job, small_plan)]
    assert [(m.device, m.peak) for m in rows] == [("cpu", 614.4), ("numa0", None),
                                                       ("numa1", None)]


def test_arrays_the_cache_may_hold_get_no_ddr_peak(small_plan):
    """1 MiB arrays under 4x a 32 MiB cache: the figure may beat DDR's peak honestly."""
    case = get_case("ddr_copy")
    in_cache = HostExecutor("cpu", peak_gbps=614.4, llc_bytes=32 * MiB)
    job = in_cache.jobs(case, small_plan)[0]
    cached, = in_cache.measure(case, job, small_plan)
    assert cached.peak is None and "under 4x the last-level cache (32 MiB)" in cached.note
    assert cached.flags == {"in_cache"}
    big_enough = HostExecutor("cpu", peak_gbps=614.4, llc_bytes=MiB // 4)
    row, = big_enough.measure(case, job, small_plan)
    assert row.peak == 614.4 and "cache" not in row.note and row.flags == frozenset()


@pytest.mark.parametrize(("source", "llc", "caveat"), [
    ("sysfs", MiB // 4, None),
    ("cpuid", MiB // 4, "last-level cache 256 KiB from CPUID, one instance (/sys lists no "
                        "caches): where the host has more, the arrays may be partly "
                        "cache-resident"),
    (None, None, "last-level cache size unknown (/sys lists no caches): the arrays may be "
                 "partly cache-resident"),
])
def test_rows_say_when_the_cache_sizes_are_not_the_whole_account(small_plan, source, llc,
                                                                   caveat):
    """gVisor lists no caches in /sys: CPUID gives one instance of each level, or nothing."""
    case = get_case("ddr_copy")
    executor = HostExecutor("cpu", llc_bytes=llc, cache_source=source)
    row, = executor.measure(case, executor.jobs(case, small_plan)[0], small_plan)
    assert ("partly cache-resident" in row.note) == (caveat is not None)
    assert caveat is None or caveat in row.note
    small = HostExecutor("cpu", llc_bytes=32 * MiB, cache_source="cpuid")  # 1 MiB arrays
    cached, = small.measure(case, small.jobs(case, small_plan)[0], small_plan)
    assert "under 4x the last-level cache" in cached.note and "CPUID" not in cached.note


def test_a_node_whose_pages_landed_elsewhere_is_skipped(small_plan, monkeypatch):
    """Page placement is read back after the first touch: a node short of free memory
    spills to another, and its row would claim one node while measuring two."""
    from bwprof.host import ddr
    from bwprof.measurement import NotRun

    nodes = _two_nodes()
    shares = {0: 0.5, 1: None}  # node 0 spilled; node 1 on a kernel that cannot tell
    asked = []

    def share(arrays, node):
        asked.append((node, sum(a.nbytes for a in arrays)))
        return shares[node]

    monkeypatch.setattr(ddr.placement, "node_share", share)
    executor = HostExecutor("cpu", nodes=nodes)
    case = get_case("ddr_copy")
    whole, on_node0, on_node1 = executor.jobs(case, small_plan)
    executor.measure(case, whole, small_plan)
    assert asked == []  # whole-host rows claim no node
    with pytest.raises(NotRun, match="only 50% of the arrays' pages landed on NUMA node 0"):
        executor.measure(case, on_node0, small_plan)
    row, = executor.measure(case, on_node1, small_plan)
    assert row.valid and "placement not verified" in row.note
    assert asked == [(0, 3 * MiB), (1, 3 * MiB)]
    shares[0] = 0.97
    row, = executor.measure(case, on_node0, small_plan)  # fresh arrays, asked again
    assert "97% of sampled pages found there" in row.note and len(asked) == 3


def test_a_numa_node_too_small_or_refusing_affinity_is_skipped(small_plan, monkeypatch):
    import os

    from bwprof.host.facts import HostNode
    from bwprof.measurement import NotRun

    cpus = frozenset(os.sched_getaffinity(0))
    tiny = HostNode(0, cpus, 2 * MiB)
    executor = HostExecutor("cpu", nodes=(tiny, HostNode(1, frozenset({10_000}), 8 << 30)))
    case = get_case("ddr_copy")
    with pytest.raises(NotRun, match="do not fit in NUMA node 0") as small:
        executor.measure(case, Job("ddr_copy", size_bytes=MiB, threads=1, numa_node=0),
                         small_plan)
    assert small.value.status == "skipped"
    with pytest.raises(NotRun, match="CPU affinity refused"):
        executor.measure(case, Job("ddr_copy", size_bytes=MiB, threads=1, numa_node=1),
                         small_plan)
    assert os.sched_getaffinity(0) == cpus


def test_rows_say_when_their_arrays_missed_the_huge_pages_the_kernel_should_give(
        small_plan, monkeypatch):
    from bwprof.host import placement

    monkeypatch.setattr(placement, "HUGE_CHECK_MIN_BYTES", 0)  # 1 MiB arrays count here
    case = get_case("ddr_triad")
    shares = iter([0.5, 0.99])
    monkeypatch.setattr(placement, "huge_page_share", lambda arrays: next(shares))
    executor = HostExecutor("cpu", huge_pages_expected=True)
    job = executor.jobs(case, small_plan)[0]
    short, = executor.measure(case, job, small_plan)
    assert "only 50% of the arrays in 2 MiB pages" in short.note
    executor.close()  # new arrays for the next job: read again
    fine, = executor.measure(case, job, small_plan)
    assert "2 MiB" not in fine.note
    # Where the kernel gives none (THP 'never'), nothing is read and nothing said.
    monkeypatch.setattr(placement, "huge_page_share", lambda arrays: pytest.fail("read"))
    row, = HostExecutor("cpu").measure(case, job, small_plan)
    assert "2 MiB" not in row.note


# Catches: a NUMA node's rows run with the plan's thread count instead of one
# thread per CPU of the node
def test_each_numa_nodes_row_uses_every_cpu_of_that_node(small_plan):
    from bwprof.cases import get_case
    from bwprof.host.ddr import HostExecutor, HostNode
    from bwprof.measurement import Job

    nodes = (HostNode(0, frozenset({0, 1, 2}), 8 << 30),
             HostNode(1, frozenset({3, 4, 5, 6, 7}), 8 << 30))
    jobs = HostExecutor("cpu", nodes=nodes).jobs(get_case("ddr_triad"), small_plan)
    assert small_plan.threads == (1,)
    assert jobs == [Job("ddr_triad", size_bytes=MiB, threads=1),
                    Job("ddr_triad", size_bytes=MiB, threads=3, numa_node=0),
                    Job("ddr_triad", size_bytes=MiB, threads=5, numa_node=1)]
