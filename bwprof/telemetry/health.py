"""Whether a GPU got worse while bwprof measured it: memory errors, repairs, critical Xids.

A figure measured on a GPU that raised new uncorrected ECC errors, remapped a row or raised
Xid 79 (fallen off the bus) is a failing GPU's, not the part's: the run records each GPU's
counts before and after (system.json, `telemetry.health`), reads them again around each GPU
job so the rows measured while a GPU got worse are flagged `gpu_degraded`, and the findings
name the GPU and the count. Every read goes through `Nvml`'s one query function: a count the
GPU does not give (ECC off, NotSupported) is None and never a change.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bwprof.schema.meta import GpuHealth, MemoryHealth, health_changes
from bwprof.telemetry.nvml import Nvml

GPU_IN_LABEL = re.compile(r"gpu\d+")
AGGREGATE = ("ecc_corrected_aggregate", "ecc_uncorrected_aggregate")


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
    event_set: Any = None
    xids: list[int] = field(default_factory=list)
    flagged_rows: int = 0


class HealthWatch:
    """Reads each GPU's memory health at the start, at each `poll()` and at the end, and
    drains its critical Xid events; `poll()` says which GPUs got worse since the last one."""

    def __init__(self, nvml: Nvml, handles: Sequence[tuple[str, Any]]) -> None:
        self.nvml = nvml
        self._gpus = [_Watched(label, handle, reading, reading)
                      for label, handle in handles
                      for reading in [self._read(handle)]]
        for gpu in self._gpus:
            gpu.event_set = nvml.xid_event_set(gpu.handle)
        self._finished: tuple[GpuHealth, ...] | None = None

    @property
    def labels(self) -> list[str]:
        return [gpu.label for gpu in self._gpus]

    def _read(self, handle: Any, aggregate: bool = True) -> MemoryHealth:
        return MemoryHealth.from_dict(self.nvml.memory_health(handle, aggregate), "health")

    def poll(self, aggregate: bool = False) -> frozenset[str]:
        """The GPUs whose counts rose, whose remap or retirement turned pending, or that
        raised a critical Xid since the previous poll (or the start). Around a job the
        aggregate ECC counts are not read (they count the errors the volatile ones do, and
        each is one more NVML call per GPU per job): the last reading of each is kept."""
        worse = set()
        for gpu in self._gpus:
            if self._finished is not None:
                break
            now = self._read(gpu.handle, aggregate)
            if not aggregate:
                now = replace(now, **{name: getattr(gpu.last, name) for name in AGGREGATE})
            xids = self.nvml.xid_events(gpu.event_set) if gpu.event_set is not None else []
            if health_changes(gpu.last, now) or xids:
                worse.add(gpu.label)
            gpu.xids.extend(xids)
            gpu.last = now
        return frozenset(worse)

    def flagged(self, label: str) -> None:
        """Count a row flagged `gpu_degraded` for this GPU (system.json says how many)."""
        for gpu in self._gpus:
            if gpu.label == label:
                gpu.flagged_rows += 1

    def finish(self) -> tuple[GpuHealth, ...]:
        """Read every GPU a last time, free the event sets, and say what each went through;
        the same answer on every later call."""
        if self._finished is None:
            self.poll(aggregate=True)
            for gpu in self._gpus:
                if gpu.event_set is not None:
                    self.nvml.free_event_set(gpu.event_set)
            self._finished = tuple(
                GpuHealth(device=gpu.label, before=gpu.before, after=gpu.last,
                          xid_events=None if gpu.event_set is None else tuple(gpu.xids),
                          flagged_rows=gpu.flagged_rows)
                for gpu in self._gpus)
        return self._finished
