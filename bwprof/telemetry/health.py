"""Whether a GPU got worse while bwprof measured it: memory errors, repairs, critical Xids.

A figure measured on a GPU that raised new uncorrected ECC errors, remapped a row or raised
a hardware Xid (79: fallen off the bus) is a failing GPU's, not the part's: the run records
each GPU's counts before and after (system.json, `telemetry.health`), reads the GPUs a job
uses again around it so the rows measured while a GPU got worse are flagged `gpu_degraded`
(`bwprof.schema.meta.degrades`: not for corrected ECC errors alone, nor for an application's
Xid), and the findings name the GPU and the count. Every read goes through `Nvml`'s one query
function: a count the GPU does not give (ECC off, NotSupported) is None and never a change,
and is not asked for again. Every read runs on a daemon thread joined with a deadline, as the
sampler's do: a lost or wedged GPU's NVML call must not hold the run forever.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from bwprof.deadline import call_within
from bwprof.schema.meta import GpuHealth, MemoryHealth, degrades, health_changes
from bwprof.telemetry.nvml import Nvml

log = logging.getLogger("bwprof.health")

GPU_IN_LABEL = re.compile(r"gpu\d+")
AGGREGATE = ("ecc_corrected_aggregate", "ecc_uncorrected_aggregate")
DEADLINE_S = 10.0
"""How long one health read of the job's GPUs may take before the run goes on without it (a
healthy GPU answers its few NVML calls in well under a millisecond)."""

T = TypeVar("T")


def gpus_of(device: str, every_gpu: Sequence[str]) -> set[str]:
    """The GPUs a row's device label measured: `gpu0`, both of `gpu0->gpu1`, every GPU for
    `all` (and `all` of `all->gpu3`)."""
    found = set(GPU_IN_LABEL.findall(device))
    if re.search(r"(^|[^a-z])all($|[^a-z])", device):
        found.update(every_gpu)
    return found


@dataclass
class _Watched:
    label: str
    handle: Any
    before: MemoryHealth
    last: MemoryHealth
    unsupported: set[tuple[object, ...]] = field(default_factory=set)
    """The (call, arguments) this GPU answered NotSupported: not made again."""
    event_set: Any = None
    xids: list[int] = field(default_factory=list)
    flagged_rows: int = 0


class HealthWatch:
    """Reads each GPU's memory health at the start, at each `poll()` and at the end, and
    drains its critical Xid events; `poll()` says which GPUs got worse since the last one."""

    def __init__(self, nvml: Nvml, handles: Sequence[tuple[str, Any]],
                 deadline_s: float = DEADLINE_S) -> None:
        self.nvml = nvml
        self.deadline_s = deadline_s
        self._gpus: list[_Watched] = []
        self._pending: threading.Thread | None = None  # a read past its deadline
        self._finished: tuple[GpuHealth, ...] | None = None
        self._bounded(lambda: self._start(handles), "first read", None)

    @property
    def labels(self) -> list[str]:
        return [gpu.label for gpu in self._gpus]

    def _start(self, handles: Sequence[tuple[str, Any]]) -> None:
        for label, handle in handles:
            gpu = _Watched(label, handle, MemoryHealth(), MemoryHealth())
            gpu.before = gpu.last = self._read(gpu)
            gpu.event_set = self.nvml.xid_event_set(handle)
            self._gpus.append(gpu)

    def _read(self, gpu: _Watched, aggregate: bool = True) -> MemoryHealth:
        return MemoryHealth.from_dict(
            self.nvml.memory_health(gpu.handle, aggregate, unsupported=gpu.unsupported),
            "health")

    def _bounded(self, read: Callable[[], T], what: str, otherwise: T) -> T:
        """`read()` on a daemon thread joined for `deadline_s`; `otherwise` (and a log line)
        when it did not end in time, or while an earlier read is still in NVML."""
        if self._pending is not None and self._pending.is_alive():
            log.warning("NVML health %s skipped: an earlier read is still waiting on NVML",
                        what)
            return otherwise
        stuck, value = call_within(read, self.deadline_s, "bwprof-health")
        if stuck is not None:
            self._pending = stuck
            log.warning("NVML health %s did not answer within %.1f s (a GPU lost or wedged?); "
                        "the run goes on without it", what, self.deadline_s)
            return otherwise
        return cast(T, value)

    def poll(self, labels: Collection[str] | None = None,
             aggregate: bool = False) -> frozenset[str]:
        """The GPUs (of `labels`; None: all) whose counts rose beyond corrected ECC errors,
        whose remap or retirement turned pending, or that raised a hardware or unknown Xid
        since the previous poll (or the start). Around a job the aggregate ECC counts are
        not read (they count the errors the volatile ones do, and each is one more NVML
        call per GPU per job): the last reading of each is kept."""
        if self._finished is not None:
            return frozenset()
        return self._bounded(lambda: self._poll(labels, aggregate), "poll", frozenset())

    def _poll(self, labels: Collection[str] | None, aggregate: bool) -> frozenset[str]:
        worse = set()
        for gpu in self._gpus:
            if labels is not None and gpu.label not in labels:
                continue
            if self.nvml.is_lost(gpu.handle):  # fallen off the bus: it answers nothing more
                continue
            now = self._read(gpu, aggregate)
            if not aggregate:
                now = replace(now, **{name: getattr(gpu.last, name) for name in AGGREGATE})
            xids = self.nvml.xid_events(gpu.event_set) if gpu.event_set is not None else []
            if degrades(health_changes(gpu.last, now), xids):
                worse.add(gpu.label)
            gpu.xids.extend(xids)
            gpu.last = now
        return frozenset(worse)

    def flagged(self, label: str) -> None:
        """Count a row flagged `gpu_degraded` for this GPU (system.json says how many)."""
        for gpu in self._gpus:
            if gpu.label == label:
                gpu.flagged_rows += 1

    def _last_read(self) -> None:
        self._poll(None, aggregate=True)
        for gpu in self._gpus:
            if gpu.event_set is not None:
                self.nvml.free_event_set(gpu.event_set)

    def finish(self) -> tuple[GpuHealth, ...]:
        """Read every GPU a last time, free the event sets, and say what each went through;
        the same answer on every later call. A last read past its deadline leaves each GPU's
        last reading as its `after`."""
        if self._finished is None:
            self._bounded(self._last_read, "last read", None)
            self._finished = tuple(
                GpuHealth(device=gpu.label, before=gpu.before, after=gpu.last,
                          xid_events=None if gpu.event_set is None else tuple(gpu.xids),
                          flagged_rows=gpu.flagged_rows)
                for gpu in list(self._gpus))
        return self._finished
