"""Whether the host was busy while bwprof measured on it: the CPU time other processes took
on the measuring cores over a host job's window, and the time a hypervisor stole from them.

Read at the window's two ends from /proc/stat's per-CPU counters (USER_HZ ticks: user,
nice, system, idle, iowait, irq, softirq, steal) and from this process's own CPU time
(`time.process_time`: every thread of bwprof's). Over the measuring cores, the time that
was neither idle (idle, iowait) nor stolen is what ran there; less bwprof's own CPU time,
it is what other processes (and interrupts) took. Both shares are of the cores' whole time
over the window, steal included.

A job is **busy** where other processes took more than `OTHERS_LIMIT` (5%) of the measuring
cores' time, or the hypervisor stole more than `STEAL_LIMIT` (5%), beyond the counters'
resolution (`RESOLUTION_TICKS` per core). Why 5%: a CPU-bound figure loses about the share
of its cores' time that others take, and 5% is what the verdicts leave a healthy figure (WARN
below 95% of the expected figure) and the spread above which a figure is noisy
(`NOISY_CV`): a host busier than that can move a verdict by itself. An idle server's
housekeeping takes well under 1% of its cores.

Where /proc/stat is missing or unreadable (not Linux, a sandbox without it), or the window is
shorter than a tick, the reading is None: unknown, never an error, and never busy.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bwprof.cpulist import format_cpu_list

PROC_STAT = Path("/proc/stat")
"""Where the counters are read (looked up at each read: the tests point it elsewhere)."""

OTHERS_LIMIT = 0.05
"""Share of the measuring cores' time other processes may take before a job is busy."""
STEAL_LIMIT = 0.05
"""Share of the measuring cores' time a hypervisor may steal before a job is busy."""
RESOLUTION_TICKS = 2
"""Ticks per core the counters may be off over a window (one at each end of it): a share is
held against its limit only beyond them, so a short window cannot trip on rounding."""


@dataclass(frozen=True)
class CpuTicks:
    """One CPU's /proc/stat counters, in ticks: all of its time, idle (idle + iowait), steal."""

    total: int
    idle: int
    steal: int


def read_stat(path: Path | None = None) -> dict[int, CpuTicks] | None:
    """Each CPU's counters (`cpuN` lines) in `path` (default `PROC_STAT`), or None where the
    file cannot be read or holds no CPU line. Guest time is already inside user time, so it
    is not added again."""
    if path is None:
        path = PROC_STAT
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except (OSError, ValueError):
        return None
    cpus: dict[int, CpuTicks] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        try:
            fields = [int(part) for part in rest.split()[:8]]
        except ValueError:
            continue
        if len(fields) < 4 or any(value < 0 for value in fields):
            continue
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        steal = fields[7] if len(fields) > 7 else 0
        cpus[int(name[3:])] = CpuTicks(sum(fields), idle, steal)
    return cpus or None


def ticks_per_second() -> int:
    """USER_HZ, the unit of /proc/stat (100 on every Linux build bwprof knows)."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError):
        return 100
    return hz if hz > 0 else 100


@dataclass(frozen=True)
class HostBusy:
    """What the measuring cores did over one job's window, besides bwprof's own work."""

    cpus: frozenset[int]
    """The measuring cores (those /proc/stat listed)."""
    window_s: float
    """The cores' time over the window, per core (seconds)."""
    others_share: float
    """Share of the cores' time other processes took (0 to 1)."""
    steal_share: float
    """Share of the cores' time the hypervisor stole (0 to 1; 0 on bare metal)."""
    busy: bool
    """Either share beyond its limit (and beyond the counters' resolution)."""

    @property
    def others_pct(self) -> float:
        return 100 * self.others_share

    @property
    def steal_pct(self) -> float:
        return 100 * self.steal_share

    def note(self) -> str:
        """The row's words for a busy job (empty for a quiet one)."""
        if not self.busy:
            return ""
        steal = f", steal {self.steal_pct:.0f}%" if self.steal_share >= 0.005 else ""
        return (f"host busy: other processes took {self.others_pct:.0f}% of the measuring "
                f"cores' time (CPUs {format_cpu_list(self.cpus)}{steal}) over "
                f"{self.window_s:.1f} s: the figure is partly theirs")


def judge(cpus: frozenset[int], start: Mapping[int, CpuTicks], end: Mapping[int, CpuTicks],
          own_s: float, hz: int) -> HostBusy | None:
    """The window between two readings of the counters, over `cpus` (every CPU listed where
    empty), with bwprof's own CPU time over it (`own_s`); None where the counters cannot tell
    (no measuring core listed at both ends, a counter that went back, under a tick)."""
    chosen = [cpu for cpu in (sorted(cpus) if cpus else sorted(end)) if cpu in start
              and cpu in end]
    if not chosen:
        return None
    deltas = [(end[cpu].total - start[cpu].total, end[cpu].idle - start[cpu].idle,
               end[cpu].steal - start[cpu].steal) for cpu in chosen]
    if any(min(delta) < 0 or idle + steal > total for delta in deltas
           for total, idle, steal in [delta]):
        return None  # a CPU taken offline and back, a counter reset: cannot tell
    capacity = sum(total for total, _, _ in deltas)
    if capacity <= 0:
        return None
    ran = sum(total - idle - steal for total, idle, steal in deltas)
    stolen = sum(steal for _, _, steal in deltas)
    others = max(0.0, ran - max(0.0, own_s) * hz)
    margin = RESOLUTION_TICKS * len(chosen)
    busy = (others - margin > OTHERS_LIMIT * capacity
            or stolen - margin > STEAL_LIMIT * capacity)
    return HostBusy(frozenset(chosen), capacity / len(chosen) / hz,
                    min(1.0, others / capacity), stolen / capacity, busy)


class BusyWindow:
    """One job's window: started when made, read by `stop`. Never raises: a counter that
    cannot be read makes the reading None (unknown)."""

    def __init__(self, cpus: frozenset[int], stat: Path | None = None,
                 own_time: Callable[[], float] = time.process_time,
                 hz: int | None = None) -> None:
        self.cpus, self.stat, self.own_time = cpus, stat, own_time
        self.hz = hz if hz is not None else ticks_per_second()
        self._own = own_time()
        self._start = read_stat(stat)

    def stop(self) -> HostBusy | None:
        end = read_stat(self.stat)
        own = self.own_time() - self._own
        if self._start is None or end is None:
            return None
        return judge(self.cpus, self._start, end, own, self.hz)
