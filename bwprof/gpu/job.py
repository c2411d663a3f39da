"""What a GPU case's function gets for one job (`CaseRun`), and what a job needs in memory
(`Footprint`) for the fits-in-memory check made before it runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bwprof.gpu.buffers import BufferPool
from bwprof.gpu.devices import GpuDevice
from bwprof.measurement import Job

if TYPE_CHECKING:
    from bwprof.gpu.cases import GpuCase


@dataclass(frozen=True)
class Footprint:
    """Bytes a job allocates: on each GPU it uses, and in host memory for each of them."""

    device_bytes: int
    host_bytes: int = 0


@dataclass(frozen=True)
class CaseRun:
    """One job of a GPU case, with everything its function needs to run it."""

    case: GpuCase
    job: Job
    pool: BufferPool
    devices: Sequence[GpuDevice]
    """Every GPU the executor holds (a job names its own by CUDA index)."""
    samples: int
    counter_window_s: float = 0.0
    """How long to repeat the work after timing so counters sample it (0: no window)."""
    scratch: dict[object, object] = field(default_factory=dict)
    """What the jobs of one case hand on to the next (the executor clears it between cases):
    gemm_gpu's medians so far per device and dtype, for its plateau stop."""

    @property
    def size(self) -> int:
        return self.job.size_bytes or 0

    def gpu(self, index: int | None) -> GpuDevice:
        """The device of a CUDA index (a fleet rank may hold only gpu3 of its node)."""
        return next(d for d in self.devices if d.index == (index or 0))

    @property
    def device(self) -> GpuDevice:
        return self.gpu(self.job.device)

    @property
    def peer(self) -> GpuDevice:
        assert self.job.peer is not None, f"{self.job.case} is not a pair job"
        return self.gpu(self.job.peer)


DEVICE_MEMORY_SHARE = 0.9
"""A job may take at most this share of a GPU's free memory (the rest is the driver's)."""

DEADLINE_FLOOR_S = 10.0
DEADLINE_MULTIPLE = 5.0
"""The deadline rule (`wait_deadline_s`): a wait on a GPU may last DEADLINE_MULTIPLE x the
job's planned time, and never less than DEADLINE_FLOOR_S."""


def wait_deadline_s(planned_s: float) -> float:
    """How long one wait on a GPU (a sample's events, a blocking copy or synchronise) of a
    job planned to take `planned_s` (`bwprof.costs`: the whole job, every sample, on a slow
    machine) may last before its GPU is taken as wedged: no single sample outlasts its whole
    job, so five times the job, at least 10 s, leaves room for a link trained far below its
    maximum (x1 Gen1 moves a 1 GiB copy in about 4 s) while a stalled copy ends the job."""
    return max(DEADLINE_FLOOR_S, DEADLINE_MULTIPLE * planned_s)
