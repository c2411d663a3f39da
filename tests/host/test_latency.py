"""The host latency cases through the real executor and runner, on small working sets: a host
whose last-level cache is said to be 16 KiB sweeps 4 KiB to 64 KiB, so every chase here is
real but short. Tests check shapes, validation and bookkeeping, never a latency's size."""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import replace

import pytest

from bwprof.host import latency
from bwprof.host.cases import HOST_CASES
from bwprof.host.ddr import HostExecutor
from bwprof.host.facts import HostFacts, HostNode
from bwprof.plan import make_plan
from bwprof.schema.meta import CacheLevel
from bwprof.units import KiB, MiB
from tests.host.runs import CPUS, run_host_cases

LLC = 16 * KiB
CACHES = (CacheLevel(1, "Data", 8 * KiB, 2), CacheLevel(2, "Unified", LLC, 1))


def _run(cases, *, threads=None, nodes=(), cpus=CPUS, preset="quick"):
    return run_host_cases(cases, llc_bytes=LLC, threads=threads, preset=preset, caches=CACHES,
                          nodes=nodes, cpus=cpus)


L3_32_MIB = (*CACHES, CacheLevel(3, "Unified", 32 * MiB, 1))


def test_the_sweep_runs_from_4_kib_to_4x_the_llc():
    facts = HostFacts("cpu", L3_32_MIB, "sysfs", 32 * MiB, memory_available_bytes=8 << 30)
    standard = make_plan(cases="lat_host", usable_cpus=2, llc_bytes=32 * MiB,
                         memory_available_bytes=8 << 30)
    sizes, note = latency.sweep_sizes(facts, standard)
    assert sizes[0] == 4 * KiB and sizes[-1] == 128 * MiB and note == ""
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))
    quick, _ = latency.sweep_sizes(facts, replace(standard, preset="quick"))
    assert quick[-1] == 128 * MiB  # the last 4x step cut to 4x the cache: no overshoot
    assert all(b == 4 * a for a, b in itertools.pairwise(quick[:-1])) and quick[-2] < quick[-1]
    unknown, _ = latency.sweep_sizes(replace(facts, caches=(), llc_bytes=None), standard)
    assert unknown[-1] == latency.UNKNOWN_LLC_END_BYTES


def test_the_sweep_ends_at_4x_the_cache_one_thread_fills():
    """Two sockets of 256 MiB of L3 in 32 MiB CCXs: a thread's loads go through its CCX's
    32 MiB, so 128 MiB is its DRAM point, not 2 GiB (4x every instance together)."""
    ccxs = (CacheLevel(1, "Data", 32 * KiB, 128), CacheLevel(3, "Unified", 32 * MiB, 16))
    facts = HostFacts("cpu", ccxs, "sysfs", 512 * MiB, memory_available_bytes=1 << 40)
    plan = make_plan(cases="lat_host", usable_cpus=128, llc_bytes=512 * MiB,
                     memory_available_bytes=1 << 40)
    assert latency.sweep_sizes(facts, plan)[0][-1] == 128 * MiB


def test_the_sweep_stops_where_memory_runs_out_and_says_so():
    facts = HostFacts("cpu", L3_32_MIB, "sysfs", 32 * MiB, memory_available_bytes=100 * MiB)
    plan = make_plan(cases="lat_host", usable_cpus=2, llc_bytes=32 * MiB,
                     memory_available_bytes=8 << 30)
    sizes, note = latency.sweep_sizes(facts, plan)
    assert sizes[-1] == 32 * MiB and "sweep stops at 32 MiB" in note


def test_a_300_mib_cache_gets_a_dram_point_within_a_quarter_of_the_ram():
    """The H200 box's host shape: 300 MiB of L3 puts 4x the cache at 1.2 GiB, so the sweep
    runs to 2 GiB (a DDR point, not in_cache), which a 24 GiB VM holds in its quarter."""
    caches = (CacheLevel(1, "Data", 48 * KiB, 2), CacheLevel(3, "Unified", 300 * MiB, 1))
    facts = HostFacts("cpu", caches, "sysfs", 300 * MiB, memory_available_bytes=22 << 30,
                      memory_total_bytes=24 << 30)
    plan = make_plan(cases="lat_host", usable_cpus=2, llc_bytes=300 * MiB,
                     memory_available_bytes=22 << 30)
    sizes, note = latency.sweep_sizes(facts, plan)
    assert sizes[-1] == 2 << 30 and note == ""
    small = replace(facts, memory_total_bytes=6 << 30)  # a quarter is 1.5 GiB
    sizes, note = latency.sweep_sizes(small, plan)
    assert sizes[-1] == 1 << 30 and "more than 25% of the RAM" in note


def test_size_sets_the_working_sets_as_it_sets_the_ddr_arrays():
    facts = HostFacts("cpu", CACHES, "sysfs", 32 * MiB, memory_available_bytes=8 << 30)
    plan = make_plan(cases="lat_host", size="1GiB,64KiB", usable_cpus=2, llc_bytes=32 * MiB,
                     memory_available_bytes=8 << 30)
    assert latency.sweep_sizes(facts, plan) == ([64 * KiB, 1 << 30], "")
    rows = run_host_cases("lat_host", llc_bytes=LLC, size="8KiB,32KiB", caches=CACHES)
    assert [(r.size_bytes, r.status) for r in rows] == [(8 * KiB, "ok"), (32 * KiB, "ok")]


def test_lat_host_rows_are_validated_latencies_with_their_cache_level():
    rows = _run("lat_host")
    assert [r.size_bytes for r in rows] == [4 * KiB, 16 * KiB, 64 * KiB]
    for row in rows:
        assert (row.status, row.metric, row.unit, row.higher_is_better) == ("ok", "latency",
                                                                              "ns", False)
        assert row.value_best is not None and row.value_best <= row.value_median
        assert latency.MIN_LOADS <= row.work_per_op <= latency.MAX_LOADS
        assert row.threads == 1
        assert row.page_bytes == os.sysconf("SC_PAGE_SIZE") and row.peak_value is None
        assert "TLB misses are part of the figure" in row.note
    assert [r.cache_level for r in rows] == ["L1", "L2", "DDR"]
    assert [("in_cache" in r.flags) for r in rows] == [True, True, False]


def test_a_chase_that_ends_on_the_wrong_line_is_invalid(monkeypatch):
    monkeypatch.setattr(latency.Chain, "ended_right", lambda self: False)
    rows = _run("lat_host")
    assert {r.status for r in rows} == {"invalid"}
    assert all(r.note.startswith("validation failed") for r in rows)


def test_the_numa_matrix_is_waived_on_one_node():
    (row,) = _run("lat_host_numa")
    assert row.status == "waived" and "one NUMA node" in row.note


def test_the_numa_matrix_has_a_row_per_cpu_node_and_memory_node():
    cpus = sorted(CPUS)
    nodes = (HostNode(0, frozenset(cpus[:1]), 8 << 30), HostNode(1, frozenset(cpus[-1:]),
                                                                  8 << 30))
    case = next(c for c in HOST_CASES if c.key == "lat_host_numa")
    plan = make_plan(cases="lat_host_numa", usable_cpus=2, llc_bytes=LLC,
                     memory_available_bytes=8 << 30)
    jobs = latency.numa_jobs(case, HostFacts("cpu", CACHES, "sysfs", LLC, nodes), plan)
    assert [j.device_label for j in jobs] == ["numa0->numa0", "numa1->numa0", "numa0->numa1",
                                              "numa1->numa1"]
    # This machine has one node: memory asked of "node 1" lands on node 0, and the row says
    # it could not be placed (or, where pages cannot be read back, that it is unverified).
    rows = _run("lat_host_numa", nodes=nodes)
    assert [r.device for r in rows if r.status == "ok"][:2] == ["numa0->numa0", "numa1->numa0"]
    for row in rows:
        if row.device.endswith("numa1"):
            assert (row.status == "skipped" and "landed on NUMA node 1" in row.note) or \
                "numa_unverified" in row.flags


@pytest.mark.skipif(len(CPUS) < 2, reason="the loaded chase needs 2 CPUs")
def test_the_loaded_chase_records_what_the_load_achieved_at_each_level():
    before = set(threading.enumerate())
    rows = _run("lat_host_loaded", preset="standard")
    assert [r.phase for r in rows] == [f"load_{n}" for n in latency.LOAD_LEVELS]
    assert all(r.status == "ok" and r.threads == len(CPUS) for r in rows)
    assert rows[0].load_gbps == 0.0 and "load idle" in rows[0].note
    assert all(r.load_gbps and r.load_gbps > 0 for r in rows[1:])
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]


def test_the_quick_preset_loads_at_three_levels():
    facts = HostFacts("cpu", CACHES, "sysfs", LLC, cpus=CPUS, memory_available_bytes=8 << 30)
    plan = make_plan(cases="lat_host_loaded", preset="quick", usable_cpus=len(CPUS),
                     llc_bytes=LLC, memory_available_bytes=8 << 30)
    (case,) = [c for c in HOST_CASES if c.key == "lat_host_loaded"]
    assert [j.load_pct for j in latency.loaded_jobs(case, facts, plan)] == [0, 50, 100]


def test_the_loaded_chase_needs_a_core_for_the_load():
    (row,) = _run("lat_host_loaded", cpus=frozenset(sorted(CPUS)[:1]))
    assert row.status == "waived" and "needs a second core" in row.note
    if len(CPUS) >= 2:
        rows = _run("lat_host_loaded", threads="1")
        assert {r.status for r in rows} == {"waived"} and "--threads 1" in rows[0].note


def test_the_load_avoids_the_chase_core_and_its_smt_siblings(monkeypatch):
    monkeypatch.setattr(latency, "core_siblings", lambda cpu: frozenset({cpu, cpu + 4}))
    nodes = (HostNode(0, frozenset({0, 1, 2, 4, 5}), 8 << 30),
             HostNode(1, frozenset({3, 6, 7}), 8 << 30))
    host = HostFacts("cpu", CACHES, "sysfs", LLC, nodes, frozenset(range(8)))
    assert latency._loaded_cores(host, 8) == (0, [1, 2, 5])  # node 0, not CPU 4 (0's sibling)
    assert latency._loaded_cores(host, 2) == (0, [1])
    alone = HostFacts("cpu", CACHES, "sysfs", LLC, (), frozenset({0, 4}))
    assert latency._loaded_cores(alone, 2) == (0, [])
    case = next(c for c in HOST_CASES if c.key == "lat_host_loaded")
    assert latency.loaded_unavailable(case, alone) is not None


@pytest.mark.skipif(len(CPUS) < 2, reason="the loaded chase needs 2 CPUs")
def test_a_load_thread_refused_its_cpu_fails_the_row_without_waiting(monkeypatch):
    from contextlib import contextmanager

    real = latency.cpu_affinity

    @contextmanager
    def refuse_load_cores(cpus):
        if cpus and min(cpus) != min(CPUS) and len(cpus) == 1:
            yield False
            return
        with real(cpus) as pinned:
            yield pinned

    monkeypatch.setattr(latency, "cpu_affinity", refuse_load_cores)
    monkeypatch.setattr(latency, "READY_TIMEOUT_S", 60.0)
    rows = _run("lat_host_loaded")
    assert {r.status for r in rows} == {"skipped"} and "CPU affinity refused" in rows[0].note
    assert "keep the load" in rows[0].note


@pytest.mark.skipif(len(CPUS) < 2, reason="the loaded chase needs 2 CPUs")
def test_a_chase_stopped_midway_stops_its_load_threads(monkeypatch):
    before = set(threading.enumerate())
    walks: list[int] = []
    stop_after: list[int] = []

    def walk(self, loads):
        walks.append(loads)
        if stop_after and len(walks) == stop_after[0]:  # with the load running
            raise KeyboardInterrupt
        return 1e-3

    monkeypatch.setattr(latency.Chain, "walk", walk)
    plan = make_plan(preset="quick", cases="lat_host_loaded", repeats=2,
                     usable_cpus=len(CPUS), llc_bytes=LLC, memory_available_bytes=8 << 30)
    executor = HostExecutor("test CPU", llc_bytes=LLC, caches=CACHES, cpus=CPUS,
                            memory_available_bytes=8 << 30)
    case = next(c for c in HOST_CASES if c.key == "lat_host_loaded")
    jobs = executor.jobs(case, plan)
    executor.measure(case, jobs[0], plan)  # idle: no load thread
    walks.clear()
    stop_after.append(2)  # after the warm-up lap
    with pytest.raises(KeyboardInterrupt):
        executor.measure(case, jobs[-1], plan)
    executor.close()
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]


# Catches: the 512 MiB lat_host row of a 300 MiB-L3 host said `cache_level=DDR` and carried
# `in_cache` (the level counted from the L3's size, the flag from 4x it): one rule for both.
@pytest.mark.parametrize("llc", [300 * MiB, 32 * MiB])
def test_cache_level_and_in_cache_agree_at_the_boundaries(llc):
    caches = (CacheLevel(1, "Data", 48 * KiB, 2), CacheLevel(2, "Unified", 2 * MiB, 2),
              CacheLevel(3, "Unified", llc, 1))
    facts = HostFacts("cpu", caches, "sysfs", llc)
    expected = {llc: "L3", llc + 64: "L3+DDR", 2 * llc: "L3+DDR", 4 * llc - 64: "L3+DDR",
                4 * llc: "DDR", 8 * llc: "DDR"}
    for size, level in expected.items():
        assert latency.chase_level(facts, size) == level, size
        assert latency.in_cache(facts, size) == (level != "DDR"), size
    assert latency.chase_level(facts, 512 * MiB) == ("L3+DDR" if llc == 300 * MiB else "DDR")
    assert latency.chase_level(replace(facts, caches=()), 8 * llc) == ""  # no level known


def test_a_chased_row_beyond_the_last_level_but_under_4x_it_is_not_ddr():
    """Real chases on the 16 KiB-'LLC' shape: 32 KiB spills from the L2 but stays in_cache,
    64 KiB (4x) is the DDR point."""
    rows = run_host_cases("lat_host", llc_bytes=LLC, size="32KiB,64KiB", caches=CACHES)
    assert [(r.cache_level, "in_cache" in r.flags) for r in rows] == [("L2+DDR", True),
                                                                      ("DDR", False)]
    assert "L2 holds part of the working set, DDR the rest" in rows[0].note
