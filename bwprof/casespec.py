"""What every case declares, whatever runs it: its key, description, the hardware it needs,
what its figure measures and how its bytes are counted. Targets add how they run it
(`bwprof.gpu.cases.GpuCase`); the catalogue of every case is `bwprof.cases`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bwprof.schema.metrics import get_metric

Target = Literal["host", "gpu", "mpi"]
ByteConvention = Literal["copy", "traffic"]


@dataclass(frozen=True)
class CaseSpec:
    key: str
    description: str
    target: Target
    memory: str
    direction: str
    byte_convention: ByteConvention
    bytes_factor: int
    """Bytes counted per operation = bytes_factor × bytes of one buffer (STREAM: arrays touched)."""
    min_gpus: int = 0
    whole_node: bool = False
    """Needs every GPU of the node at once (all-GPU and GPU-to-GPU cases): a fleet rank that
    holds one GPU of its node (several ranks a node) cannot run it."""
    metric: str = "bandwidth"
    """What its rows' figure measures (`bwprof.schema.metrics`): bandwidth, latency, ..."""
    headline: bool = False
    """Its rows give a memory path's headline figure (the summary's and the verdicts'): in
    the quick preset only these repeat their work for a counter window."""
    copied_factor: int | None = None
    """Where the operation is a copy: bytes copied per operation = copied_factor × bytes of
    one buffer, each byte counted once (nvbandwidth's, bandwidthTest's and OSU's convention).
    A `copy`-convention transfer copies what it counts (copied_factor = bytes_factor); a
    `traffic`-convention copy (`d2d_copy`, STREAM Copy) counts the buffer read and the
    buffer written, so it copies half. None where the operation is not a copy (a STREAM
    Scale, Add, Triad or Dot, a latency chase, an overlap case whose rows mix copies and a
    kernel): its rows have no copy-convention figure."""

    def __post_init__(self) -> None:
        """A case's figure is derived from timed operations: its metric must be one that a
        time gives (a rate or a time per unit of work), not a ratio a case computes."""
        metric = get_metric(self.metric)
        if metric.kind not in ("rate", "time"):
            raise ValueError(f"case {self.key}: metric {self.metric!r} is not derived from "
                             "timed operations; declare bandwidth, latency or throughput")

    def bytes_per_op(self, buffer_bytes: int) -> int:
        return self.bytes_factor * buffer_bytes

    @property
    def copy_share(self) -> float | None:
        """Bytes copied over bytes counted (1 for a copy-convention copy, 1/2 for a
        traffic-convention one); None where the operation is not a copy. A row's
        copy-convention GB/s is its GB/s times this, whatever its bytes per operation (a
        both-ways row counts both directions, and copies both)."""
        if self.copied_factor is None or not self.bytes_factor:
            return None
        return self.copied_factor / self.bytes_factor
