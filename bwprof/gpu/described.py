"""GPUs described in a file (`bwprof.described`), for planning only: `bwprof run --dry-run
--machine FILE` and the machine-shape tests expand and cost a plan on them. They answer what
planning asks (how many, their properties, their free memory, peer access) and refuse to
measure anything."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bwprof.described import DescribedGpu
from bwprof.gpu.backend import Sample, Work
from bwprof.schema.meta import DeviceProperties

FREE_SHARE = 0.97
"""Free memory of an idle GPU, as a share of its total (the driver keeps the rest)."""


class MeasuresNothing(RuntimeError):
    """A described GPU was asked to run something: planning code reached for the hardware."""


class DescribedBackend:
    name = "described"
    placement_failed = False
    sample_scale = 1.0

    def __init__(self, gpus: Sequence[DescribedGpu]) -> None:
        self.gpus = tuple(gpus)
        self.deadline_s = 0.0  # measures nothing: never waits on a GPU
        self.wedged: dict[int, str] = {}

    def device_count(self) -> int:
        return len(self.gpus)

    def properties(self, device: int) -> DeviceProperties:
        return self.gpus[device].properties

    def metadata(self, properties: DeviceProperties) -> dict[str, object]:
        """The NVML view of a device (`devices.describe`'s metadata), from the file."""
        return dict(self.gpus[properties.index].metadata)

    def free_memory(self, device: int) -> int:
        return int(FREE_SHARE * self.gpus[device].properties.total_memory_bytes)

    def enable_peer_access(self, device: int, peer: int) -> bool:
        return bool(self.gpus[device].metadata.get("p2p_supported", True))

    def release(self) -> None:
        pass

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise MeasuresNothing("a described GPU measures nothing: it is for planning")

    device_array = host_array = kernel_view = new_stream = copy = chase_view = _refuse
    launch = gemm = gemm_library = zero = upload = download = _refuse

    def time_sample(self, works: Sequence[Work], gate: bool, hold_us: int) -> Sample:
        return self._refuse()
