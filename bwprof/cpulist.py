"""CPU lists in Linux's spelling ('0-3,8,10-11'), as sysfs, NVML affinity and taskset use."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

MAX_CPU = 1 << 16
"""CPU numbers above this are no machine's (Linux builds for at most 8192): a range such as
'0-99999999999' read from a file is malformed, not a set of 10**11 CPUs to build."""


def parse_cpu_list(text: str | None) -> frozenset[int] | None:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}; None for empty or malformed text (a range
    running backwards, or a CPU number above MAX_CPU)."""
    if not text or not text.strip():
        return None
    cpus: set[int] = set()
    for part in text.strip().split(","):
        match = re.fullmatch(r"\s*(\d{1,6})(?:-(\d{1,6}))?\s*", part)
        if not match:
            return None
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first or last > MAX_CPU:
            return None
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8'."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    start = 0
    for position, cpu in enumerate(ordered):
        if position == 0 or cpu != ordered[position - 1] + 1:
            start = cpu
        if position == len(ordered) - 1 or ordered[position + 1] != cpu + 1:
            ranges.append(str(start) if start == cpu else f"{start}-{cpu}")
    return ",".join(ranges)


@contextmanager
def cpu_affinity(cpus: frozenset[int] | None) -> Iterator[bool]:
    """Run the block on `cpus` (so pages touched there land on their NUMA node), then
    restore. Yields whether the placement applied: False when no CPUs were given or the
    system refused (a container's cpuset), so callers do not claim a NUMA node."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield False
        return
    previous = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setaffinity(0, previous)


def _thread_ids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _set_affinity(tid: int, cpus: Iterable[int]) -> bool:
    try:
        os.sched_setaffinity(tid, cpus)
        return True
    except ProcessLookupError:  # the thread ended meanwhile: nothing to place
        return True
    except OSError:
        return False


@contextmanager
def process_affinity(cpus: frozenset[int] | None) -> Iterator[bool]:
    """Run the block with every thread of this process on `cpus`, then restore each one.

    `cpu_affinity` moves only the calling thread; a Numba parallel kernel runs on worker
    threads created at its first launch, which keep the mask they were born with. Setting
    the mask per thread id moves the workers too, so a NUMA node's STREAM runs on its own
    cores and its arrays are first-touched into its own memory. Yields False, changing
    nothing, when no CPUs were given or the system refused (a container's cpuset)."""
    if not cpus or not hasattr(os, "sched_setaffinity") or not _thread_ids():
        yield False
        return
    default = os.sched_getaffinity(0)
    previous: dict[int, set[int]] = {}
    for tid in _thread_ids():
        try:
            previous[tid] = os.sched_getaffinity(tid)
        except OSError:
            continue
    placed = all(_set_affinity(tid, cpus) for tid in previous)
    try:
        yield placed
    finally:
        # Threads born inside the block inherited `cpus`: give them the caller's old mask.
        for tid in _thread_ids():
            _set_affinity(tid, previous.get(tid, default))
