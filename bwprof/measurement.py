"""What a case implementation hands back to the runner: raw per-operation times, not figures,
and the one type for "cannot run here, because ..." (`NotRun`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bwprof.units import format_bytes


@dataclass(frozen=True)
class Job:
    """One unit of work: a case at one size, thread count and device (None where not used)."""

    case: str
    size_bytes: int | None = None
    threads: int | None = None
    device: int | None = None
    peer: int | None = None
    """Second GPU of a GPU-to-GPU job."""
    streams: int | None = None
    """Stream count of a job that sweeps it (pipeline_chunked)."""
    ranks: tuple[int, int] | None = None
    """Sending and receiving MPI rank of a network job (net_p2p)."""
    memory: str | None = None
    """Buffer kind of a job whose case measures several (net_p2p: host or hbm)."""
    numa_node: int | None = None
    """Host NUMA node whose cores and memory alone a host job uses (None: the whole host);
    with `memory_node`, the node whose CPUs run it."""
    memory_node: int | None = None
    """Host NUMA node whose memory a job reads from another node's CPUs (lat_host_numa)."""
    dtype: str | None = None
    """Arithmetic of a compute job (`gemm_*`, `fma_gpu`): fp64, fp32, tf32, fp16, bf16."""
    load_pct: int | None = None
    """Nominal intensity, in percent of full, of the load a loaded-latency job runs beside
    its chase (0: the load idle)."""
    note: str = field(default="", compare=False)
    """Why the job's size is what it is, where the case had to choose (a default that did
    not fit and was halved); its rows carry it."""

    @property
    def device_label(self) -> str:
        """The row's device before anything is measured: gpu0, gpu0->gpu1, rank0->rank1, ''."""
        if self.ranks is not None:
            return f"rank{self.ranks[0]}->rank{self.ranks[1]}"
        if self.numa_node is not None and self.memory_node is not None:
            return f"numa{self.numa_node}->numa{self.memory_node}"
        if self.numa_node is not None:
            return f"numa{self.numa_node}"
        if self.device is None:
            return ""
        return f"gpu{self.device}" if self.peer is None else f"gpu{self.device}->gpu{self.peer}"

    def label(self) -> str:
        parts = [self.case]
        if self.size_bytes is not None:
            parts.append(format_bytes(self.size_bytes))
        if self.threads is not None:
            parts.append(f"{self.threads} threads")
        if self.numa_node is not None and self.memory_node is not None:
            parts.append(f"NUMA node {self.numa_node} CPUs, node {self.memory_node} memory")
        elif self.numa_node is not None:
            parts.append(f"NUMA node {self.numa_node}")
        if self.device is not None:
            parts.append(f"gpu{self.device}" if self.peer is None
                         else f"gpu{self.device}-gpu{self.peer}")
        if self.ranks is not None:
            parts.append(f"rank{self.ranks[0]}->rank{self.ranks[1]} {self.memory or ''}".strip())
        if self.streams is not None:
            parts.append(f"{self.streams} streams")
        if self.load_pct is not None:
            parts.append(f"load {self.load_pct}%")
        if self.dtype is not None:
            parts.append(self.dtype)
        return " ".join(parts)


@dataclass(frozen=True)
class Measurement:
    """Raw outcome of one row: the time of one operation in each kept sample, and validation.

    The runner derives median, best, CV and the figure (in the case's metric) from
    `seconds_per_op` and the work of one operation: `work_per_op` where the metric counts
    something else than bytes (FLOP, dependent loads), else `bytes_per_op`.
    """

    seconds_per_op: tuple[float, ...]
    bytes_per_op: int
    size_bytes: int
    device: str
    device_name: str
    direction: str
    memory: str
    valid: bool
    note: str = ""
    threads: int | None = None
    streams: int | None = None
    numa_node: int | None = None
    ops_per_sample: int = 1
    peak: float | None = None
    """Theoretical peak in the metric's unit (GB/s for bandwidth); None where unknown or where
    it does not apply (a cache-resident row)."""
    phase: str = ""
    overlap_efficiency: float | None = None
    work_per_op: float | None = None
    flags: frozenset[str] = frozenset()
    """Facts about the row that code acts on (`bwprof.schema.flags`)."""
    window_s: tuple[float, float] | None = None
    """time.monotonic() interval in which this row's operations ran (counters join on it)."""
    window_ops: int | None = None
    """Operations of `bytes_per_op` issued in that interval (warm-up included)."""
    page_bytes: int | None = None
    """Page size backing the row's host buffer, where the case reads it back."""
    cache_level: str = ""
    """Latency rows: the cache level holding the working set, or `DDR`/`HBM` beyond them."""
    load_gbps: float | None = None
    """Loaded-latency rows: what the concurrent load achieved while the chase ran."""
    dtype: str = ""
    """Compute rows: the arithmetic of their FLOP (fp64, fp32, tf32, fp16, bf16)."""
    host_others_pct: float | None = None
    host_steal_pct: float | None = None
    """Host rows: the share (%) of the measuring cores' time other processes took, and the
    share a hypervisor stole, over the row's job (`bwprof.host.busy`); None where unknown."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def work(self) -> float:
        """The work of one operation in the metric's terms."""
        return self.bytes_per_op if self.work_per_op is None else self.work_per_op


def join_notes(*notes: str) -> str:
    """A row's note from its parts, the empty ones left out."""
    return "; ".join(n for n in notes if n)


class NotRun(Exception):
    """A job (or a whole case) that cannot run here: a row with this status and reason, not a
    failure. Raised by case code mid-job, or returned by `Executor.unavailable` up front."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status  # "skipped" (could not run) or "waived" (does not apply)
        self.reason = reason

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, NotRun)
                and (self.status, self.reason) == (other.status, other.reason))

    def __hash__(self) -> int:
        return hash((self.status, self.reason))

    def __repr__(self) -> str:
        return f"NotRun({self.status!r}, {self.reason!r})"
