"""What a GPU case's function gets for one job (`CaseRun`). What a job needs in memory for the
fits-in-memory check (`Footprint`, `DEVICE_MEMORY_SHARE`) is plain data in `bwprof.gpu.layout`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bwprof.gpu.buffers import BufferPool
from bwprof.gpu.devices import GpuDevice
from bwprof.measurement import Job
from bwprof.peaks import pcie_peak_gbps

if TYPE_CHECKING:
    from bwprof.gpu.cases import GpuCase


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


DEADLINE_FLOOR_S = 60.0
"""The shortest a wait on a GPU may last before its GPU is taken as wedged: a real wedge
costs it once (the GPU is not waited on again), a slow honest job never meets it."""
DEADLINE_MULTIPLE = 5.0
"""How many times the job's planned time (at the link's current rate) a wait may last."""


def link_slowdown(devices: Sequence[GpuDevice]) -> float:
    """How many times slower than its maximum the slowest of `devices`' PCIe links runs now
    (NVML's current generation and width, recorded in the metadata), 1 where unknown: a
    link trained down (Gen1 x1 is about 250 times under Gen5 x16) is the very fault bwprof
    exists to find, and its honest copies must not be taken for a wedge. An idle GPU may
    have dropped its link to save power: that only lengthens the deadline."""
    slowest = 1.0
    for device in devices:
        gen, width = (device.metadata.get("pcie_gen_current"),
                      device.metadata.get("pcie_width_current"))
        current = pcie_peak_gbps(gen if isinstance(gen, int) else None,
                                 width if isinstance(width, int) else None)
        if current and device.peak_pcie_gbps and current < device.peak_pcie_gbps:
            slowest = max(slowest, device.peak_pcie_gbps / current)
    return slowest


def wait_deadline_s(planned_s: float, slowdown: float = 1.0) -> float:
    """How long one wait on a GPU (a sample's events, a blocking copy or synchronise) of a
    job planned to take `planned_s` (`bwprof.costs`: the whole job, every sample, at the
    links' maximum rates) may last before its GPU is taken as wedged, its link running
    `slowdown` times under that maximum (`link_slowdown`): no single sample outlasts its
    whole job, so five times the job at the link's current rate, at least 60 s. A blocking
    copy gets its bytes at 0.2 GB/s on top (`bwprof.gpu.runtime.SLOWEST_COPY_GBPS`)."""
    return max(DEADLINE_FLOOR_S, DEADLINE_MULTIPLE * planned_s * max(1.0, slowdown))
