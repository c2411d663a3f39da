"""How busy the host was during a host job (`bwprof.host.busy`), and that every host job
carries it: /proc/stat as a 2-CPU VM writes it, read twice around a window."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bwprof.cases import get_case
from bwprof.costs import Cost
from bwprof.host import busy
from bwprof.host.cases import HostCase
from bwprof.host.ddr import HostExecutor
from bwprof.measurement import Job, Measurement
from bwprof.schema import flags

# Two readings of a 2-vCPU VM's /proc/stat, 1 s apart (USER_HZ 100: 100 ticks a CPU).
# Columns: user nice system idle iowait irq softirq steal guest guest_nice.
BEFORE = """cpu  20918 0 5418 72639 423 0 80 175 0 0
cpu0 8727 0 1867 38971 127 0 27 97 0 0
cpu1 12190 0 3551 33668 296 0 53 77 0 0
intr 152352 0 0 0
ctxt 99489
"""


def after(cpu0: tuple[int, ...], cpu1: tuple[int, ...]) -> str:
    """BEFORE plus each CPU's ticks over the window (user, system, idle, steal)."""
    lines = []
    for name, (user, system, idle, steal) in (("cpu0", cpu0), ("cpu1", cpu1)):
        base = [int(v) for v in next(line for line in BEFORE.splitlines()
                                     if line.startswith(name + " ")).split()[1:]]
        base[0] += user
        base[2] += system
        base[3] += idle
        base[7] += steal
        lines.append(f"{name} {' '.join(map(str, base))}")
    return "cpu  0 0 0 0 0 0 0 0 0 0\n" + "\n".join(lines) + "\nintr 1\n"


def window(tmp_path: Path, end: str, own_s: float, cpus: frozenset[int] = frozenset()
           ) -> busy.HostBusy | None:
    """The reading of a window whose /proc/stat goes from BEFORE to `end` while bwprof itself
    used `own_s` seconds of CPU."""
    stat = tmp_path / "stat"
    stat.write_text(BEFORE)
    clock = iter([10.0, 10.0 + own_s])
    watch = busy.BusyWindow(cpus, stat=stat, own_time=lambda: next(clock), hz=100)
    stat.write_text(end)
    return watch.stop()


def test_the_counters_of_each_cpu_are_read_without_the_total_line(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(BEFORE)
    cpus = busy.read_stat(stat)
    assert cpus is not None and set(cpus) == {0, 1}
    assert cpus[0] == busy.CpuTicks(total=8727 + 1867 + 38971 + 127 + 27 + 97,
                                    idle=38971 + 127, steal=97)
    # An old kernel's four fields: no iowait, no steal.
    stat.write_text("cpu0 10 0 5 100\n")
    assert busy.read_stat(stat) == {0: busy.CpuTicks(115, 100, 0)}


@pytest.mark.parametrize("text", [None, "", "intr 1 2 3\n", "cpu0 a b c d\n"])
def test_a_missing_or_unreadable_proc_stat_is_unknown_not_an_error(tmp_path, text):
    """(So it is in every other test: tests/conftest.py points PROC_STAT at nothing.)"""
    stat = tmp_path / "stat"
    if text is not None:
        stat.write_text(text)
    assert busy.read_stat(stat) is None
    watch = busy.BusyWindow(frozenset({0}), stat=stat)
    assert watch.stop() is None


def test_an_idle_host_is_not_busy_whatever_bwprof_itself_used(tmp_path):
    """bwprof's two threads filled both cores; the housekeeping of an idle VM (1 tick a
    core) and a tick of steal are far under the limits."""
    reading = window(tmp_path, after((99, 1, 0, 0), (98, 1, 0, 1)), own_s=1.98)
    assert reading is not None and not reading.busy
    assert reading.cpus == {0, 1} and reading.window_s == pytest.approx(1.0)
    assert reading.others_pct < 1 and reading.steal_pct == pytest.approx(0.5)
    assert reading.note() == ""
    # One thread on an idle 2-core VM: the other core idle is not busy either.
    assert not window(tmp_path, after((99, 1, 0, 0), (1, 0, 99, 0)), own_s=0.99).busy


def test_other_processes_on_the_measuring_cores_make_the_job_busy(tmp_path):
    """Two busy loops beside bwprof's two threads: each core shared half and half."""
    reading = window(tmp_path, after((98, 2, 0, 0), (97, 3, 0, 0)), own_s=1.0)
    assert reading is not None and reading.busy
    assert reading.others_pct == pytest.approx(50.0)
    assert reading.note().startswith("host busy: other processes took 50% of the measuring "
                                     "cores' time (CPUs 0-1) over 1.0 s")


def test_steal_beyond_its_limit_makes_the_job_busy(tmp_path):
    reading = window(tmp_path, after((80, 0, 0, 20), (80, 0, 0, 20)), own_s=1.6)
    assert reading is not None and reading.busy
    assert reading.others_pct == pytest.approx(0.0) and reading.steal_pct == pytest.approx(20)
    assert "steal 20%" in reading.note()


def test_only_the_measuring_cores_count(tmp_path):
    """A NUMA node's job on CPU 0: a busy loop on CPU 1 is another node's."""
    busy_elsewhere = after((100, 0, 0, 0), (100, 0, 0, 0))
    assert not window(tmp_path, busy_elsewhere, own_s=1.0, cpus=frozenset({0})).busy
    assert window(tmp_path, busy_elsewhere, own_s=1.0, cpus=frozenset({0, 1})).busy


def test_a_window_too_short_for_the_counters_cannot_trip_on_their_rounding(tmp_path):
    """Two ticks a core are the counters' resolution over a window: 3 of 6 ticks
    busy is within it, 6 of 10 beyond it."""
    assert not window(tmp_path, after((2, 0, 1, 0), (2, 0, 1, 0)), own_s=0.02).busy
    assert window(tmp_path, after((5, 0, 0, 0), (5, 0, 0, 0)), own_s=0.0).busy


def test_counters_that_went_back_or_did_not_move_are_unknown(tmp_path):
    assert window(tmp_path, after((-50, 0, 10, 0), (1, 0, 10, 0)), own_s=0.0) is None
    assert window(tmp_path, after((-5, 0, 10, 0), (1, 0, 10, 0)), own_s=0.0) is None
    assert window(tmp_path, after((0, 0, 0, 0), (0, 0, 0, 0)), own_s=0.0) is None
    assert window(tmp_path, BEFORE.replace("cpu1", "cpu7"), own_s=0.0,
                  cpus=frozenset({1})) is None


def test_the_threshold_is_stated_as_the_verdicts_margin():
    assert busy.OTHERS_LIMIT == busy.STEAL_LIMIT == flags.NOISY_CV == 0.05


# -- real processes -----------------------------------------------------------------------

LOOP = ("import time\nend = time.monotonic() + 120\nprint('spinning', flush=True)\n"
        "while time.monotonic() < end: pass\n")
"""A busy loop that says when it spins (it stops by itself, should the test not kill it)."""


REAL_STAT = Path("/proc/stat")


@pytest.mark.skipif(busy.read_stat(REAL_STAT) is None, reason="no /proc/stat here")
def test_busy_loops_on_every_core_make_a_real_window_busy():
    """Other processes that spin on every core while bwprof waits: whatever else the
    machine runs, they take most of its cores (load only adds to that)."""
    cpus = frozenset(os.sched_getaffinity(0))
    loops = [subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True)
             for _ in cpus]
    try:
        for loop in loops:  # however long Python takes to start on a loaded machine
            assert loop.stdout is not None and loop.stdout.readline() == "spinning\n"
        watch = busy.BusyWindow(cpus, stat=REAL_STAT)
        time.sleep(0.5)
        reading = watch.stop()
    finally:
        for loop in loops:
            loop.kill()
            loop.communicate()  # waits, and closes its pipe
    assert reading is not None and reading.busy and reading.others_pct > 40


# -- every host job ------------------------------------------------------------------------


class FakeWindow:
    """A window whose reading is given (`busy.judge` of made-up counters)."""

    def __init__(self, reading: busy.HostBusy | None) -> None:
        self.reading = reading
        self.cpus: list[frozenset[int]] = []

    def __call__(self, cpus: frozenset[int]) -> FakeWindow:
        self.cpus.append(cpus)
        return self

    def stop(self) -> busy.HostBusy | None:
        return self.reading


def reading(others_ticks: int, steal_ticks: int = 0) -> busy.HostBusy | None:
    """Two cores over 1 s: `others_ticks` of theirs besides bwprof's 100."""
    start = {0: busy.CpuTicks(0, 0, 0), 1: busy.CpuTicks(0, 0, 0)}
    ran = 100 + others_ticks
    end = {0: busy.CpuTicks(100, 100 - ran // 2 - steal_ticks // 2, steal_ticks // 2),
           1: busy.CpuTicks(100, 100 - (ran - ran // 2) - (steal_ticks - steal_ticks // 2),
                            steal_ticks - steal_ticks // 2)}
    return busy.judge(frozenset(), start, end, own_s=1.0, hz=100)


def test_a_ddr_job_on_a_busy_host_is_flagged_with_its_shares(small_plan):
    fake = FakeWindow(reading(others_ticks=60))
    executor = HostExecutor("test cpu", busy_window=fake, cpus=frozenset({0, 1}))
    case = get_case("ddr_triad")
    (job,) = executor.jobs(case, small_plan)
    (m,) = executor.measure(case, job, small_plan)
    assert fake.cpus == [frozenset({0, 1})]
    assert flags.BUSY_HOST in m.flags and m.valid
    assert m.host_others_pct == pytest.approx(30.0) and m.host_steal_pct == 0.0
    assert "host busy: other processes took 30% of the measuring cores' time" in m.note


def test_a_quiet_or_unknown_host_leaves_the_rows_unflagged(small_plan):
    case = get_case("ddr_triad")
    quiet = HostExecutor("test cpu", busy_window=FakeWindow(reading(others_ticks=2)))
    (job,) = quiet.jobs(case, small_plan)
    (m,) = quiet.measure(case, job, small_plan)
    assert flags.BUSY_HOST not in m.flags and m.host_others_pct == pytest.approx(1.0)
    unknown = HostExecutor("test cpu", busy_window=FakeWindow(None))
    (m,) = unknown.measure(case, job, small_plan)
    assert flags.BUSY_HOST not in m.flags and m.host_others_pct is None
    assert m.host_steal_pct is None


def test_a_declared_host_case_is_watched_too(small_plan):
    """Latency and gemm run through their own function: the same window wraps them, and
    every row of the job (a loaded-latency job has one per load) gets its reading."""
    def two_rows(run):
        return [Measurement((1e-7,), 64, 4096, "cpu", "test cpu", "within", "ddr", True,
                            work_per_op=1.0, phase=phase) for phase in ("load_0", "load_50")]

    case = HostCase(key="lat_test", description="", target="host", memory="ddr",
                    direction="within", byte_convention="copy", bytes_factor=1,
                    metric="latency", expand=lambda case, facts, plan: [Job(case.key)],
                    run=two_rows, cost=lambda job, plan, facts, previous: Cost(0.0))
    fake = FakeWindow(reading(others_ticks=0, steal_ticks=30))
    executor = HostExecutor("test cpu", busy_window=fake)
    rows = executor.measure(case, Job("lat_test", numa_node=None), small_plan)
    assert [flags.BUSY_HOST in m.flags for m in rows] == [True, True]
    assert [m.host_steal_pct for m in rows] == [pytest.approx(15.0)] * 2


def test_a_numa_nodes_job_is_watched_on_that_nodes_cores(small_plan, monkeypatch):
    from bwprof.host import placement
    from bwprof.host.facts import HostNode

    monkeypatch.setattr(placement, "node_share", lambda arrays, node: 1.0)
    nodes = (HostNode(0, frozenset({0}), 8 << 30), HostNode(1, frozenset({1}), 8 << 30))
    fake = FakeWindow(reading(others_ticks=0))
    executor = HostExecutor("test cpu", nodes=nodes, busy_window=fake,
                            cpus=frozenset({0, 1}))
    case = get_case("ddr_triad")
    for job in executor.jobs(case, small_plan):
        executor.measure(case, job, small_plan)
    assert fake.cpus == [frozenset({0, 1}), frozenset({0}), frozenset({1})]


def test_the_runner_writes_the_shares_and_the_flag_into_the_row(small_plan):
    from tests.host.runs import run_host_cases

    rows = run_host_cases("ddr_triad", llc_bytes=1 << 20, threads="1",
                          busy_window=FakeWindow(reading(others_ticks=60, steal_ticks=10)))
    (row,) = [r for r in rows if r.case == "ddr_triad" and r.status == "ok"]
    assert flags.BUSY_HOST in row.flags
    assert (row.host_others_pct, row.host_steal_pct) == (pytest.approx(30.0),
                                                        pytest.approx(5.0))
    assert row.as_dict()["flags"].endswith("busy_host")
