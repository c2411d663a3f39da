"""The simulated GPU backend: the calls of `runtime.CudaBackend`, carried out on the CPU.

It exists so tests drive every GPU case through the real runner, validation and report code
without a GPU. Copies are NumPy copies, kernels are the host STREAM kernels, streams run one
after another and the gate does nothing: its timings are CPU stand-ins, never measurements,
and every row it produces says `simulated`.
"""

from __future__ import annotations

import mmap
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numba import njit, prange

from bwprof.described import DescribedGpu
from bwprof.gpu import matrices
from bwprof.gpu.backend import DeviceProperties, OutOfMemory, Sample, Work
from bwprof.gpu.kernel_params import (
    FMA_CHAINS,
    FMA_START_STEP,
    LOAD_BYTES_PER_ELEMENT,
    STATE_GENERATION,
    STATE_LOAD_BYTES,
    STATE_POSITION,
    fma_steps,
)
from bwprof.host import stream as host_stream

SIM_DEVICES = 2
SIM_MEMORY_BYTES = 64 << 20
SIM_L2_BYTES = 1 << 20
SIM_SAMPLE_SCALE = 0.1
"""Simulated samples last a tenth of a GPU's: their timings are CPU stand-ins that no figure
is made of, so a longer sample buys nothing, and a tenth runs the same sampling paths (the
operations per sample, the warm-up, the chase's steps) in a tenth of the time."""
UNSIMULATED_METADATA = frozenset({
    "cpu_affinity", "pcie_gen_max", "pcie_width_max", "peak_hbm_gbps", "peak_pcie_gbps",
    "peak_nvlink_gbps", "peak_c2c_gbps"})
"""What a described GPU's metadata says that a simulated GPU does not keep: its CPUs are the
described machine's, not this one's (host buffers are neither pinned to them nor checked on
them), and a theoretical peak would judge CPU copies against a GPU's link (a figure above its
peak is marked invalid)."""


@njit(parallel=True, cache=True)
def _compute(x, y, iterations, scale, step):  # pragma: no cover - compiled
    """The CPU twin of `kernels.compute`: the same dependent multiply-adds per element."""
    for i in prange(x.size):
        value = x[i]
        for _ in range(iterations):
            value = value * scale + step
        y[i] = value


@njit(cache=True)
def _chase(chain, state, steps):  # pragma: no cover - compiled
    """The CPU twin of `kernels.chase`: the same walk over the addresses the chain holds,
    from and back into the state. An address outside the chain (a chain written with the
    wrong base) stops the walk where it is, so the check after the samples fails, instead of
    reading wherever it points as the kernel would."""
    base = np.uint64(chain.ctypes.data)
    end = base + np.uint64(chain.size) * np.uint64(8)
    address = state[STATE_POSITION]
    for _ in range(steps):
        if address < base or address >= end or (address - base) % np.uint64(8):
            break
        address = chain[(address - base) // np.uint64(8)]
    state[STATE_POSITION] = address
    state[STATE_GENERATION] += np.uint64(1)


def _fma(out, iterations, scale, step, single):
    """The CPU twin of `kernels.fma_fp32`/`fma_fp64`: one thread's chains, whose stored sum
    every thread of the kernel shares (the chains do not depend on the thread), copied to
    every element. `iterations` counts trips of FMA_UNROLL steps, as the kernels'."""
    kind = np.float32 if single else np.float64
    chains = (1.0 + FMA_START_STEP * np.arange(FMA_CHAINS)).astype(kind)
    scale, step = kind(scale), kind(step)
    for _ in range(fma_steps(int(iterations))):
        chains = chains * scale + step  # exact here: no rounding for an FMA to skip
    out[:] = float(np.sum(chains.astype(np.float64)))


def _load(src, dst, state, generation, max_passes):
    """The CPU twin of `kernels.load`: copy passes until the chase's generation moves on or
    `max_passes` are done, then count the bytes moved. The simulator runs streams one after
    another and the chase comes first, so here the load sees the flag at once and moves
    nothing: it can never wait for a chase that runs after it."""
    moved = 0
    for _ in range(int(max_passes)):
        if int(state[STATE_GENERATION]) != int(generation):
            break
        np.copyto(dst, src)
        moved += src.size * LOAD_BYTES_PER_ELEMENT
    state[STATE_LOAD_BYTES] += np.uint64(moved)


def _sm_copy(src, dst):
    """The CPU twin of `kernels.sm_copy`: dst = src, element for element."""
    np.copyto(dst, src)


def _shared(starts: Sequence[float], alone: Sequence[float],
             contention: float) -> list[float]:
    """When each stream ends if it starts at `starts[i]` and needs `alone[i]` seconds on its
    own, every running stream going at 1 / (1 + contention x (n - 1)) of its speed while n
    run (the simulator's test-only contention model)."""
    left = list(alone)
    ends: list[float | None] = [None] * len(alone)
    clock = min(starts)
    while any(end is None for end in ends):
        running = [i for i, end in enumerate(ends) if end is None and starts[i] <= clock]
        rate = 1.0 / (1.0 + contention * (len(running) - 1)) if running else 0.0
        pending = [starts[i] for i, end in enumerate(ends) if end is None and starts[i] > clock]
        step = min([left[i] / rate for i in running] + [p - clock for p in pending])
        for i in running:
            if left[i] / rate <= step * (1 + 1e-12):
                left[i], ends[i] = 0.0, clock + step
            else:
                left[i] -= step * rate
        clock += step
    return [end for end in ends if end is not None]


@dataclass(frozen=True)
class Launch:
    """A kernel launch inside a sample: the kernel, its device and stream (`id`), and its
    grid (`blocks`; None: the kernel's own)."""

    kernel: str
    device: int
    stream: int
    blocks: int | None


@dataclass(frozen=True)
class SampleRecord:
    """One `time_sample` as the case issued it, kept where a test asks
    (`SimBackend(record=True)`): each stream's operations, warm-up included (what the host
    enqueues while the gate holds), and the kernels launched on them, which a GPU runs at
    once."""

    ops: tuple[int, ...]
    launches: tuple[Launch, ...]


class SimDeviceArray(np.ndarray):
    """A NumPy array that remembers which simulated device it lives on."""

    device_index: int

    def __array_finalize__(self, obj: Any) -> None:
        self.device_index = getattr(obj, "device_index", -1)


class SimStream:
    def __init__(self, device: int) -> None:
        self.device_id = device


class SimBackend:
    name = "simulated"
    placement_failed = False  # the simulator places host memory wherever NumPy does
    sample_scale = SIM_SAMPLE_SCALE

    def __init__(self, devices: int | None = None, memory_bytes: int = SIM_MEMORY_BYTES,
                 start_skew_s: float = 0.0, contention: float | None = None,
                 op_seconds: Callable[[Work], float] | None = None,
                 gpus: Sequence[DescribedGpu] | None = None, record: bool = False) -> None:
        """`devices` simulated GPUs (default 2; four or eight prove the pattern cases'
        expansion), or one for each of `gpus`: GPUs described in a file (a machine shape,
        `bwprof.described`), simulated with their name, SM count, compute capability, copy
        engines and NVML metadata (`metadata`: MIG mode, NVLink-C2C, peer access, NUMA node)
        but `memory_bytes` of memory, a simulated L2 and no theoretical peak, so sizes stay
        small (see `UNSIMULATED_METADATA`); `start_skew_s`: each stream of a sample starts
        this much later than the one before it on the simulated clock (a gate that did not
        release every stream at once), so tests prove an aggregate on one clock is never
        inflated by it.

        Test-only timing models (simulated rows are never figures, so none of this reaches
        one): `contention`, where given, runs a sample's streams at once on the simulated
        clock, each at 1 / (1 + contention x (n - 1)) of its own speed while n of them run
        (streams sharing a link), instead of one after another; `op_seconds` gives one
        operation's time alone on a stream for a work (default: the CPU time it took), so a
        test can make one stream slower than another. `record`: keep every sample's
        `SampleRecord` in `recorded`, so a test sees what one sample enqueues and launches."""
        self.recorded: list[SampleRecord] | None = [] if record else None
        self._launches: list[Launch] | None = None
        self.gpus = tuple(gpus) if gpus is not None else None
        if self.gpus is not None and devices is not None and devices != len(self.gpus):
            raise ValueError(f"{devices} simulated devices asked for {len(self.gpus)} "
                             "described GPUs")
        self.devices = (len(self.gpus) if self.gpus is not None
                        else SIM_DEVICES if devices is None else devices)
        self.start_skew_s = start_skew_s
        self.contention = contention
        self.op_seconds = op_seconds
        self.memory_bytes = memory_bytes
        self._used = [0] * self.devices
        self.deadline_s = 0.0  # the simulator never waits on a GPU: nothing to bound
        self.wedged: dict[int, str] = {}  # a test may mark a GPU as stopped for the executor

    def device_count(self) -> int:
        return self.devices

    def properties(self, device: int) -> DeviceProperties:
        generic = DeviceProperties(
            index=device, name="simulated GPU", pci_bus_id=None,
            total_memory_bytes=self.memory_bytes, l2_bytes=SIM_L2_BYTES, multiprocessors=4,
            compute_capability=(9, 0), async_engines=2, memory_bus_width_bits=None,
            memory_clock_khz=None,
        )
        if self.gpus is None:
            return generic
        # The described GPU's identity and shape; this process's memory, L2 and no PCI
        # address (this machine's sysfs says nothing of it) nor memory clock (no HBM peak).
        described = self.gpus[device].properties
        return replace(generic, name=described.name,
                       multiprocessors=described.multiprocessors,
                       compute_capability=described.compute_capability,
                       async_engines=described.async_engines)

    def metadata(self, properties: DeviceProperties) -> dict[str, object]:
        """NVML's view of a simulated device (`devices.describe`'s metadata): a described
        GPU's, less what `UNSIMULATED_METADATA` names; nothing for a generic one."""
        if self.gpus is None:
            return {}
        return {key: value for key, value in self.gpus[properties.index].metadata.items()
                if key not in UNSIMULATED_METADATA}

    def free_memory(self, device: int) -> int:
        return self.memory_bytes - self._used[device]

    def _release(self, device: int, nbytes: int) -> None:
        self._used[device] -= nbytes

    def device_array(self, device: int, nbytes: int) -> Any:
        if nbytes > self.free_memory(device):
            raise OutOfMemory(f"gpu{device}: {nbytes} bytes requested, "
                              f"{self.free_memory(device)} free (simulated)")
        array = np.zeros(nbytes, dtype=np.uint8).view(SimDeviceArray)
        array.device_index = device
        self._used[device] += nbytes
        weakref.finalize(array, self._release, device, nbytes)
        return array

    def host_array(self, nbytes: int, pinned: bool, cpus: frozenset[int] | None = None) -> Any:
        if pinned:
            return np.zeros(nbytes, dtype=np.uint8)
        # Pageable memory as the CUDA backend takes it: fresh private anonymous pages.
        array = np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS),
                              dtype=np.uint8)
        array.fill(0)
        return array

    def kernel_view(self, array: Any) -> Any:
        return array.view(np.float64)

    def chase_view(self, array: Any, device: int) -> Any:
        return np.asarray(array).view(np.uint64)

    def new_stream(self, device: int) -> SimStream:
        return SimStream(device)

    def copy(self, dst: Any, src: Any, nbytes: int, stream: Any) -> None:
        np.copyto(np.asarray(dst)[:nbytes], np.asarray(src)[:nbytes])

    def launch(self, kernel: str, stream: Any, *args: Any, blocks: int | None = None) -> None:
        if self._launches is not None:
            self._launches.append(Launch(kernel, int(stream.device_id), id(stream), blocks))
        arrays = [np.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        if kernel == "chase":
            chain, state, steps = arrays
            _chase(chain, state, int(steps))
        elif kernel == "load":
            _load(*arrays)
        elif kernel == "sm_copy":
            _sm_copy(*arrays)
        elif kernel == "init":
            host_stream.fill(*arrays)
        elif kernel == "dot":
            a, b, partial = arrays
            partial[:] = 0.0
            partial[0] = host_stream.stream_dot(a, b, b, 0.0)
        elif kernel == "hold":
            return
        elif kernel == "compute":
            _compute(*arrays)
        elif kernel in ("fma_fp32", "fma_fp64"):
            out, iterations, scale, step = arrays
            _fma(out, iterations, scale, step, single=kernel == "fma_fp32")
        else:
            a, b, c, scalar = arrays
            host_stream.KERNELS[kernel].run(a, b, c, float(scalar))

    def gemm(self, stream: Any, dtype: str, n: int, a: Any, b: Any, c: Any) -> None:
        """The product through NumPy's BLAS (fp16 and bf16 computed in fp32, as cuBLAS
        accumulates them, and rounded to their storage)."""
        size = n * n * matrices.itemsize(dtype)
        left = matrices.decode(np.asarray(a)[:size], dtype).reshape(n, n)
        right = matrices.decode(np.asarray(b)[:size], dtype).reshape(n, n)
        product = matrices.encode(left @ right, dtype)
        np.asarray(c)[:size] = product.view(np.uint8).reshape(-1)

    def gemm_library(self, device: int) -> str:
        return f"NumPy {np.__version__} matmul (simulated cuBLAS)"

    def zero(self, array: Any, nbytes: int) -> None:
        np.asarray(array)[:nbytes] = 0

    def upload(self, dst: Any, values: Any, offset: int = 0) -> None:
        data = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
        np.asarray(dst)[offset : offset + data.size] = data

    def download(self, src: Any, nbytes: int, offset: int = 0, out: Any = None) -> Any:
        data = np.asarray(src)[offset : offset + nbytes]
        if out is None:
            return np.array(data)
        out[:nbytes] = data
        return out

    def time_sample(self, works: Sequence[Work], gate: bool, hold_us: int) -> Sample:
        if self.recorded is None:
            return self._time_sample(works)
        self._launches = []
        try:
            return self._time_sample(works)
        finally:
            self.recorded.append(SampleRecord(tuple(w.warmup + w.ops for w in works),
                                              tuple(self._launches)))
            self._launches = None

    def _time_sample(self, works: Sequence[Work]) -> Sample:
        for work in works:  # the warm-ups, untimed, before any timed part (as on a GPU)
            for _ in range(work.warmup):
                work.enqueue()
        alone = []  # each stream's timed part, run alone
        for work in works:
            begin = time.perf_counter()
            for _ in range(work.ops):
                work.enqueue()
            took = max(time.perf_counter() - begin, 1e-9)
            alone.append(took if self.op_seconds is None else work.ops * self.op_seconds(work))
        if self.contention is None:
            starts, ends, clock = [], [], 0.0
            for index, took in enumerate(alone):  # one stream after another: no overlap
                clock += self.start_skew_s if index else 0.0
                starts.append(clock)
                clock += took
                ends.append(clock)
        else:
            starts = [index * self.start_skew_s for index in range(len(alone))]
            ends = _shared(starts, alone, self.contention)
        seconds = [end - start for start, end in zip(starts, ends, strict=True)]
        # One clock, as the CUDA backend's final event gives: first start to last end.
        return Sample(tuple(seconds), tuple(starts), tuple(ends), covered=True,
                      total_s=max(ends) - min(starts))

    def enable_peer_access(self, device: int, peer: int) -> bool:
        """True, except between described GPUs whose metadata says `p2p_supported: false`
        (PCIe GPUs without P2P, a MIG slice), as the driver refuses it there."""
        if self.gpus is None:
            return True
        return all(bool(self.gpus[index].metadata.get("p2p_supported", True))
                   for index in (device, peer))

    def release(self) -> None:
        pass
