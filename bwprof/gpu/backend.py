"""The interface every GPU backend implements: the real one (`runtime.CudaBackend`, CuPy and
Numba CUDA) and the simulated one (`sim.SimBackend`, NumPy on the CPU, for tests only).

Case code (`transfers`, `hbm`) talks only to this interface, so the simulated backend drives
the very same loops, validation and rows that run on a GPU. Backends return raw times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bwprof.schema.meta import DeviceProperties


class OutOfMemory(Exception):
    """An allocation did not fit (device memory or pinned host memory)."""


@dataclass(frozen=True)
class Work:
    """One stream's share of a timed sample: `enqueue()` issued `ops` times back to back,
    after `warmup` untimed issues behind the gate (the engine's start-up and the first TLB
    misses land there, not in the timed operations; nvbandwidth queues its warm-up copies
    the same way, after the spin kernel and before the start event)."""

    stream: Any
    enqueue: Callable[[], None]
    ops: int
    warmup: int = 0


@dataclass(frozen=True)
class Sample:
    """Times of one sample, per stream, from CUDA events (seconds).

    `starts_s`/`ends_s` are relative to the earliest start when every stream is on one device;
    across devices only durations are comparable, and starts are reported as 0.
    `covered` says the gate was still closed when the last operation had been enqueued, i.e.
    enqueue time is not in the figure.
    `total_s` is the whole sample on one clock: from the first stream's start event (every
    other stream's timed part waits for it) to one final event on that stream that waits for
    every stream's end event (nvbandwidth's total-bandwidth timing), so it holds across
    devices and a stream that started late lengthens it instead of hiding from it.
    """

    seconds: tuple[float, ...]
    starts_s: tuple[float, ...]
    ends_s: tuple[float, ...]
    covered: bool
    total_s: float | None = None

    @property
    def span_s(self) -> float:
        """The sample's time on one clock (`total_s`; a backend without it: first start to
        last end, which only events of one device can give)."""
        if self.total_s is not None:
            return self.total_s
        return max(self.ends_s) - min(self.starts_s)


class GpuBackend(Protocol):
    name: str  # "cuda" or "simulated"
    placement_failed: bool
    """CPU affinity was refused while placing host memory: it may lie on any NUMA node."""
    sample_scale: float
    """The share of bwprof's sample lengths (`sampling.TARGET_SAMPLE_S`, the chase's
    `latency.TARGET_SAMPLE_S`) this backend's timings are taken over: 1 on a GPU."""
    deadline_s: float
    """How long one wait on a GPU may last before the GPU is taken as wedged (the executor
    sets it per job: `bwprof.gpu.job.wait_deadline_s`)."""

    @property
    def wedged(self) -> Mapping[int, str]:
        """GPUs that did not finish work within the deadline, with why: never used (nor
        synchronised) again in this run."""

    def device_count(self) -> int: ...

    def properties(self, device: int) -> DeviceProperties: ...

    def free_memory(self, device: int) -> int: ...

    def device_array(self, device: int, nbytes: int) -> Any:
        """A 1-D uint8 array in device memory; raises OutOfMemory."""

    def host_array(self, nbytes: int, pinned: bool, cpus: frozenset[int] | None = None) -> Any:
        """A 1-D uint8 NumPy array in host memory, first-touched on `cpus`; OutOfMemory."""

    def kernel_view(self, array: Any) -> Any:
        """A float64 view of a device array in the form kernels are launched with."""

    def new_stream(self, device: int) -> Any: ...

    def copy(self, dst: Any, src: Any, nbytes: int, stream: Any) -> None:
        """Enqueue an asynchronous copy of the first `nbytes` (host, device or peer)."""

    def chase_view(self, array: Any, device: int) -> Any:
        """A uint64 view of a chase buffer for kernels on `device`: a device array of that
        GPU or of a peer (peer access on), or a pinned host array (mapped into every
        device's address space under unified addressing)."""

    def launch(self, kernel: str, stream: Any, *args: Any, blocks: int | None = None) -> None:
        """Enqueue a kernel of `bwprof.gpu.kernels` over arrays from `kernel_view` (or
        `chase_view`); `blocks` overrides the kernel's own grid (the load kernel's
        intensity)."""

    def gemm(self, stream: Any, dtype: str, n: int, a: Any, b: Any, c: Any) -> None:
        """Enqueue c = a @ b on `stream`: n x n row-major matrices in the raw device arrays
        `a`, `b`, `c`, stored as `bwprof.gpu.matrices.STORAGE[dtype]` (tf32: fp32 storage,
        tensor cores allowed)."""

    def gemm_library(self, device: int) -> str:
        """What runs `gemm` on `device`, with its version (cuBLAS and CuPy's versions)."""

    def zero(self, array: Any, nbytes: int) -> None:
        """Blocking: set the first `nbytes` of a device array to zero."""

    def upload(self, dst: Any, values: Any, offset: int = 0) -> None:
        """Blocking copy of a NumPy array into a device array at byte `offset`."""

    def download(self, src: Any, nbytes: int, offset: int = 0, out: Any = None) -> Any:
        """Blocking copy of `nbytes` of a device array from byte `offset` into NumPy: into
        the start of `out` when given (a reused pinned buffer), else a new array."""

    def time_sample(self, works: Sequence[Work], gate: bool, hold_us: int) -> Sample:
        """Run one sample: optionally hold the GPU(s) while everything is enqueued; each
        stream issues its untimed warm-up operations first, and where there are any, no
        stream's timed part starts before every stream's warm-up has ended (so the streams'
        timed parts still start together); then time each stream from its start event to
        its end event."""

    def enable_peer_access(self, device: int, peer: int) -> bool:
        """Turn on access from `device` to `peer`'s memory; False where unsupported."""

    def release(self) -> None:
        """Free cached memory; called between cases and at the end."""
