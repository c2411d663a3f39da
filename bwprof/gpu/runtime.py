"""The one module that talks to CuPy: devices, buffers, streams, events, copies and peers.

CuPy imports without a GPU, but creating streams, events or arrays without a driver raises
and can leave noise behind, so nothing here touches CuPy before `probe()` says a device
exists. Numba kernels are launched on CuPy's streams through `numba.cuda.external_stream`,
on arrays wrapped with `as_cuda_array(..., sync=False)`: Numba's default would synchronise on
the array's stream at every launch and silently serialise streams (and a raw CuPy array
passed to a Numba kernel goes through DLPack, which makes the kernel's stream wait on CuPy's
current stream). CuPy (runtime API) and Numba (driver API) share each device's primary
context, so pointers, streams and events cross between them freely.

CUDA rules this module follows (CUDA runtime API reference):
- an event must be recorded on a stream of the context (device) it was created in, so events
  are created with their device current; `cudaStreamWaitEvent` may wait on an event of
  another device, which is how one gate holds streams on every GPU;
- `cudaEventElapsedTime` is only taken between events of one device;
- a pageable `cudaMemcpyAsync` is synchronous for the host: host-to-device returns once the
  data is staged, device-to-host only once the copy is done (after the work queued before it
  on the stream), so pageable copies are never issued behind a gate;
- streams reach a device through `CUDA_DEVICE_MAX_CONNECTIONS` hardware queues (default 8);
  streams sharing a queue wait for each other, which would read as poor overlap, and a run
  opens about 8 per device (more with several GPUs), so bwprof asks for 32 (the most) before
  CUDA starts, unless the environment already sets it.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar, cast

import numpy as np

from bwprof.cpulist import cpu_affinity
from bwprof.deadline import call_within
from bwprof.gpu.backend import DeviceProperties, OutOfMemory, Sample, Work

# bwprof.gpu.kernels (numba.cuda, about a second of imports) loads where a kernel is compiled
# or launched, not with this module: `list`, `info` and a run without a GPU only probe.

NO_GPU_REASON = "no NVIDIA driver / no CUDA device found"
_log = logging.getLogger("bwprof.cuda")

# cudaDataType_t (library_types.h), cublasComputeType_t (cublas_api.h) and the cuBLAS
# constants gemmEx takes: stable since CUDA 11.0; read from CuPy's modules where it exports
# them, these numbers otherwise.
_CUDA_DATA_TYPES = {"fp64": ("CUDA_R_64F", 1), "fp32": ("CUDA_R_32F", 0),
                    "tf32": ("CUDA_R_32F", 0), "fp16": ("CUDA_R_16F", 2),
                    "bf16": ("CUDA_R_16BF", 14)}
_CUBLAS_COMPUTE = {"fp64": ("CUBLAS_COMPUTE_64F", 70), "fp32": ("CUBLAS_COMPUTE_32F", 68),
                   "tf32": ("CUBLAS_COMPUTE_32F_FAST_TF32", 77),
                   "fp16": ("CUBLAS_COMPUTE_32F", 68), "bf16": ("CUBLAS_COMPUTE_32F", 68)}
"""fp16 and bf16 accumulate in fp32 (as frameworks run them); fp32 is plain SGEMM, tf32 the
same storage with tensor cores allowed to round the inputs to TF32."""
CUBLAS_OP_N = 0
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_DEFAULT_MATH = 0
"""No TF32 unless the compute type asks for it (CUPY_TF32 or cupy's own setting aside)."""

# cudaError_t values (stable across CUDA 11-13; CuPy 14 no longer exports the `error*` aliases).
CUDA_ERROR_MEMORY_ALLOCATION = 2
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600
"""What cudaEventQuery answers for an event whose work is done, and one still pending."""

DEFAULT_DEADLINE_S = 60.0
"""How long one wait on a GPU may last where no job sized it (`deadline_s`; the executor
sets it per job from the plan: `bwprof.gpu.job.wait_deadline_s`)."""
POLL_FIRST_S = 20e-6
POLL_MAX_S = 150e-6
"""An event is polled (cudaEventQuery) at intervals doubling from POLL_FIRST_S up to
POLL_MAX_S, the pause starting again at POLL_FIRST_S for each phase of a sample: the host
learns of the end of a sample at most 150 us late (the events, not the host, time it), so
back-to-back batches (a counter window's 20 ms) leave the GPU idle under 1% of the time."""
SLOWEST_COPY_GBPS = 0.2
"""The slowest rate a blocking copy (upload, download) is allowed before its GPU is taken as
wedged: a link trained down to Gen1 x1 (0.25 GB/s) still moves its bytes in time; such a
copy's deadline is the job's deadline plus its bytes at this rate."""

_NEVER_FREED: list[Any] = []
"""Pinned host buffers held for the life of the process once a GPU stopped answering:
cudaFreeHost synchronises, and a stalled copy may still read them. CuPy frees nothing at
interpreter exit, so these are left to the operating system."""

STOPPED_GPUS: set[int] = set()
"""CUDA indices of the GPUs that stopped answering in this process (any runtime): the
process then ends without CUDA's teardown, which would wait for them (`bwprof.entry`)."""

_T = TypeVar("_T")


class GpuTimeout(RuntimeError):
    """A GPU did not finish its work within the deadline: `devices` (CUDA indices) are taken
    as wedged and are neither used nor synchronised again in this run."""

    def __init__(self, message: str, devices: Sequence[int]) -> None:
        super().__init__(message)
        self.devices = tuple(devices)


MAX_CONNECTIONS_VARIABLE = "CUDA_DEVICE_MAX_CONNECTIONS"
MAX_CONNECTIONS = "32"
_queues: list[int | None] = []
"""The hardware queue count CUDA was started with, once known (empty until then)."""


def ask_for_hardware_queues() -> None:
    """Ask CUDA for 32 hardware queues per GPU unless the environment chose. It must come
    before CUDA starts in this process: the first CuPy import, or MPI's start (a CUDA-aware
    MPI may start CUDA). What is in force then is what `hardware_queues()` reports; unknown
    when CuPy was already imported (someone may have started CUDA before bwprof asked)."""
    if _queues:
        return
    cupy_before = "cupy" in sys.modules
    os.environ.setdefault(MAX_CONNECTIONS_VARIABLE, MAX_CONNECTIONS)
    _queues.append(None if cupy_before else queues_setting(os.environ[MAX_CONNECTIONS_VARIABLE]))


def queues_setting(value: str) -> int | None:
    """The queue count a CUDA_DEVICE_MAX_CONNECTIONS value sets: CUDA documents 1 to 32 in
    ASCII digits; what it does with anything else (abc, 0, -5, 64, '３２') is not known, so
    it is recorded as unknown rather than as a count a finding would judge."""
    match = re.fullmatch(r"\s*([0-9]{1,2})\s*", value)
    count = int(match.group(1)) if match else None
    return count if count is not None and 1 <= count <= 32 else None


def hardware_queues() -> int | None:
    """CUDA_DEVICE_MAX_CONNECTIONS as in force when CUDA started here; None where unknown."""
    return _queues[0] if _queues else None


def import_cupy() -> ModuleType:
    """Import whichever CuPy wheel is installed (cupy-cuda12x, cupy-cuda13x, ...), having asked
    for the hardware queues first."""
    ask_for_hardware_queues()
    with warnings.catch_warnings():
        # Only the toolkit-path hint is noise (CuPy's wheels carry their libraries). Its warning
        # that several CuPy wheels are installed, e.g. `pip install` adding cupy-cuda12x beside
        # a CUDA 13 machine's cupy-cuda13x, must reach the user: the two share one folder.
        warnings.filterwarnings("ignore", message="CUDA path could not be detected")
        import cupy

    return cupy


@dataclass(frozen=True)
class GpuProbe:
    """How many CUDA devices this process sees, and if none, why (one line) and the raw cause."""

    count: int
    reason: str | None = None
    detail: str | None = None


def probe() -> GpuProbe:
    """Count CUDA devices without raising and without leaving CuPy objects behind."""
    try:
        cupy = import_cupy()
    except ImportError as exc:
        return GpuProbe(0, f"{NO_GPU_REASON} (CuPy is not installed)", str(exc))
    except OSError as exc:  # CuPy makes its kernel cache (~/.cupy) at import: HOME unwritable
        where = f" {exc.filename}" if exc.filename else ""
        return GpuProbe(0, f"CuPy could not start: it cannot create{where} "
                           f"({exc.strerror or exc}); set CUPY_CACHE_DIR (or HOME) to a "
                           "writable folder", f"{type(exc).__name__}: {exc}")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver; anything else alike
        return GpuProbe(0, NO_GPU_REASON, f"{type(exc).__name__}: {exc}")
    if count == 0:
        return GpuProbe(0, NO_GPU_REASON, "cudaGetDeviceCount returned 0")
    return GpuProbe(count)


class _ChaseBuffer:
    """A chase buffer's memory (device, peer or pinned host) as a CUDA array of uint64 for
    Numba; it holds the array that owns the memory."""

    def __init__(self, owner: Any, pointer: int, elements: int) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = {
            "shape": (elements,), "strides": None, "typestr": "<u8",
            "data": (pointer, False), "version": 3, "stream": None,
        }


class CudaBackend:
    """Real GPUs through CuPy (memory, streams, events, copies) and Numba CUDA (kernels)."""

    name = "cuda"
    sample_scale = 1.0

    def __init__(self, cupy: Any = None, numba_cuda: Any = None) -> None:
        """`cupy` and `numba_cuda` stand in for the real modules in tests (a fake that
        enforces CUDA's cross-device rules, tests/gpu/fake_cuda.py)."""
        if numba_cuda is None:
            from numba import config

            if getattr(config, "ENABLE_CUDASIM", 0):  # set from the environment at import
                raise RuntimeError("NUMBA_ENABLE_CUDASIM is set: unset it to measure a real GPU")
            from numba import cuda as numba_cuda
        self.cp = cupy if cupy is not None else import_cupy()
        self.nb = numba_cuda
        self._kernels: dict[str, Any] = {}
        self._ready: set[int] = set()
        self._numba_streams: dict[tuple[int, int], Any] = {}
        self._gate_streams: dict[int, Any] = {}
        self._used: set[int] = set()  # devices this backend opened; release() touches no other
        self.placement_failed = False  # CPU affinity was refused: host memory lies anywhere
        self.deadline_s = DEFAULT_DEADLINE_S
        """How long one wait on a GPU may last (a sample's events, a blocking copy, a
        synchronise) before its GPU is taken as wedged; set per job by the executor."""
        self.wedged: dict[int, str] = {}
        """GPUs that did not finish work within the deadline, with why: no call reaches
        them again (a synchronise would hang), so later jobs on them are skipped."""
        self._doing: dict[int, tuple[str | int, ...]] = {}
        """Each stream's last enqueued work (by stream pointer), to name what stalled: its
        kind and labels or device indices, no arrays; kept raw (formatting costs issue time
        inside the gate) and cleared by release()."""
        self._pinned: list[weakref.ref[Any]] = []  # pinned buffers made, kept if a GPU wedges
        self._clock: Callable[[], float] = time.monotonic  # a fake clock in tests
        self._sleep: Callable[[float], None] = time.sleep

    # devices ---------------------------------------------------------------------------

    def device_count(self) -> int:
        return int(self.cp.cuda.runtime.getDeviceCount())

    def properties(self, device: int) -> DeviceProperties:
        rt = self.cp.cuda.runtime

        def attribute(name: str) -> int | None:
            try:
                return int(rt.deviceGetAttribute(getattr(rt, name), device))
            except Exception as exc:  # attribute unknown to this CuPy / retired in this CUDA
                # Said for each device and name (describe asks once): a missing bus width or
                # clock means no HBM peak from CUDA.
                _log.info("gpu%d: %s unavailable (%s: %s)", device, name,
                          type(exc).__name__, exc)
                return None

        # cudaGetDeviceProperties still carries these fields under CUDA 13 (which dropped
        # clockRate, memoryClockRate, ... from the struct); device attributes back them up.
        props = rt.getDeviceProperties(device)
        name = props.get("name", b"")
        try:
            bus_id = rt.deviceGetPCIBusId(device)
        except Exception:
            bus_id = None
        total = props.get("totalGlobalMem")
        if total is None:
            with self.cp.cuda.Device(device):
                total = rt.memGetInfo()[1]
        if "major" in props and "minor" in props:
            cc = (int(props["major"]), int(props["minor"]))
        else:  # Device.compute_capability is "90" for 9.0, "100" for 10.0
            text = self.cp.cuda.Device(device).compute_capability
            cc = (int(text[:-1]), int(text[-1]))
        return DeviceProperties(
            index=device,
            name=name.decode() if isinstance(name, bytes) else str(name),
            pci_bus_id=bus_id,
            total_memory_bytes=int(total),
            l2_bytes=int(props.get("l2CacheSize") or attribute("cudaDevAttrL2CacheSize") or 0),
            multiprocessors=int(props.get("multiProcessorCount")
                                or attribute("cudaDevAttrMultiProcessorCount") or 0),
            compute_capability=cc,
            async_engines=attribute("cudaDevAttrAsyncEngineCount") or 0,
            memory_bus_width_bits=attribute("cudaDevAttrGlobalMemoryBusWidth"),
            # kHz; read as an attribute because CUDA 13 removed it from cudaDeviceProp.
            memory_clock_khz=attribute("cudaDevAttrMemoryClockRate"),
        )

    def free_memory(self, device: int) -> int:
        """Free bytes on `device` once its pool's cached blocks are freed; 0 for a GPU that
        stopped answering, without a CUDA call (the pool's cudaFree would synchronise it and
        never return). The free runs bounded by the deadline like every blocking call."""
        if device in self.wedged:
            return 0
        self._used.add(device)

        def free() -> int:
            with self.cp.cuda.Device(device):
                self.cp.get_default_memory_pool().free_all_blocks()  # this device's pool only
                return int(self.cp.cuda.runtime.memGetInfo()[0])

        return self._bounded((device,), f"gpu{device} free memory (pool free)", free)

    # memory ----------------------------------------------------------------------------

    def device_array(self, device: int, nbytes: int) -> Any:
        self._used.add(device)
        with self.cp.cuda.Device(device):
            try:
                return self.cp.empty(nbytes, dtype=self.cp.uint8)
            except self.cp.cuda.memory.OutOfMemoryError as exc:
                raise OutOfMemory(f"gpu{device}: {exc}") from None

    def host_array(self, nbytes: int, pinned: bool, cpus: frozenset[int] | None = None) -> Any:
        rt = self.cp.cuda.runtime
        with cpu_affinity(cpus) as placed:
            if cpus and not placed:
                self.placement_failed = True
            if pinned:
                # cudaHostAlloc memory is usable by every device under UVA whatever the flags;
                # Portable says so explicitly (as CuPy's own pinned allocator does), for
                # h2d_all/d2h_all where one process copies from it to several GPUs.
                try:
                    memory = self.cp.cuda.PinnedMemory(nbytes, rt.hostAllocPortable)
                except rt.CUDARuntimeError as exc:
                    if getattr(exc, "status", None) != CUDA_ERROR_MEMORY_ALLOCATION:
                        raise
                    raise OutOfMemory(f"pinned host memory: {exc}") from None
                # The array keeps the pointer (its buffer's owner) alive, and the pointer keeps
                # `memory`, whose finaliser calls cudaFreeHost (as cupyx.empty_pinned does).
                pointer = self.cp.cuda.PinnedMemoryPointer(memory, 0)
                array = np.ndarray((nbytes,), dtype=np.uint8, buffer=pointer)
                if self.wedged:  # a stalled GPU's teardown: cudaFreeHost would synchronise
                    _NEVER_FREED.append(array)
                else:
                    self._pinned = [ref for ref in self._pinned if ref() is not None]
                    self._pinned.append(weakref.ref(array))
            else:
                # Fresh anonymous pages (not recycled heap pages already placed elsewhere),
                # so the first touch below decides their NUMA node. Private, as malloc's
                # are: mmap(-1)'s default is shared (shmem), whose huge pages follow
                # shmem_enabled rather than the THP mode ordinary memory gets.
                array = np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE
                                                | mmap.MAP_ANONYMOUS), dtype=np.uint8)
            # Pageable pages are placed by this first touch, on the chosen CPUs; pinned ones
            # were placed by cudaHostAlloc above, under the same affinity. The pool reads back
            # where they landed.
            array.fill(0)
        return array

    def kernel_view(self, array: Any) -> Any:
        device = int(array.device.id)
        self._prepare(device)
        # With the array's device current, so Numba's view belongs to that device's context.
        with self.cp.cuda.Device(device):
            return self.nb.as_cuda_array(array.view(self.cp.float64), sync=False)

    # streams, copies and kernels -------------------------------------------------------

    def new_stream(self, device: int) -> Any:
        self._used.add(device)
        with self.cp.cuda.Device(device):
            return self.cp.cuda.Stream(non_blocking=True)  # device_id = this device

    @staticmethod
    def _pointer(array: Any) -> int:
        if isinstance(array, np.ndarray):
            return int(array.ctypes.data)
        return int(array.data.ptr)

    def copy(self, dst: Any, src: Any, nbytes: int, stream: Any) -> None:
        rt = self.cp.cuda.runtime
        dst_host, src_host = isinstance(dst, np.ndarray), isinstance(src, np.ndarray)
        # The ends' devices only (-1: host), never the arrays: holding them here would keep
        # a dropped sweep buffer alive until the stream's next work.
        self._doing[stream.ptr] = ("copy", -1 if dst_host else int(dst.device.id),
                                   -1 if src_host else int(src.device.id))
        if not dst_host and not src_host and dst.device.id != src.device.id:
            # memcpyPeerAsync(dst, dstDevice, src, srcDevice, size, stream)
            rt.memcpyPeerAsync(self._pointer(dst), dst.device.id, self._pointer(src),
                               src.device.id, nbytes, stream.ptr)
            return
        kind = (rt.memcpyHostToDevice if src_host and not dst_host
                else rt.memcpyDeviceToHost if dst_host and not src_host
                else rt.memcpyDeviceToDevice if not dst_host
                else rt.memcpyHostToHost)
        # memcpyAsync(dst, src, size, kind, stream)
        rt.memcpyAsync(self._pointer(dst), self._pointer(src), nbytes, kind, stream.ptr)

    def _kernel(self, name: str) -> Any:
        """The kernel compiled eagerly for its one signature (call with a device current)."""
        if name not in self._kernels:
            from bwprof.gpu.kernels import KERNELS

            spec = KERNELS[name]
            self._kernels[name] = self.nb.jit(spec.signature, cache=True)(spec.function)
        return self._kernels[name]

    def _prepare(self, device: int) -> None:
        """Compile every kernel and load it on `device` before anything is timed, so neither
        JIT compilation nor module loading lands inside a warm-up sample (which would make
        the ops-per-sample estimate collapse to 1)."""
        from bwprof.gpu.kernels import KERNELS

        self._used.add(device)
        if device in self._ready:
            return
        with self.nb.gpus[device]:
            for name in KERNELS:
                for compiled in self._kernel(name).overloads.values():
                    self._load(compiled)
        self._ready.add(device)

    @staticmethod
    def _load(compiled: Any, get_function: Any = None) -> None:
        """Load a compiled kernel into the current context now. numba-cuda 0.30 links kernels
        through the library API (a context-free CUkernel), which CUDA 12.2+'s default lazy
        loading puts into a context only at first use; at a first launch behind the gate that
        load may synchronise the context, stalling the enqueue inside the warm-up sample that
        sets the operations per sample. Asking for the kernel's function in this context
        (cuKernelGetFunction) loads it here, without changing the process's loading mode."""
        bind = getattr(compiled, "bind", None)  # numba-cuda's _Kernel.bind
        if bind is None:
            return
        bind()  # the library (or, in older numba-cuda, the module) for this context
        try:
            from cuda.bindings import driver as binding

            kernel = compiled._codelibrary.get_cufunc().kernel  # cuda.core's Kernel
        except (ImportError, AttributeError):  # an older numba-cuda: cuModule functions
            return
        if get_function is None:  # numba-cuda's checked wrapper: raises on a CUDA error
            from numba.cuda.cudadrv.driver import driver

            get_function = driver.cuKernelGetFunction
        try:
            get_function(binding.CUkernel(int(kernel.handle)))
        except Exception as exc:  # loading early only spares the warm-up: never fatal
            _log.warning("could not load a kernel into the context ahead of its first "
                         "launch (%s: %s); its first launch will load it", type(exc).__name__,
                         exc)

    def _numba_stream(self, stream: Any) -> Any:
        key = (int(stream.device_id), int(stream.ptr))
        if key not in self._numba_streams:
            self._numba_streams[key] = self.nb.external_stream(int(stream.ptr))
        return self._numba_streams[key]

    def chase_view(self, array: Any, device: int) -> Any:
        # Under unified addressing a pinned host allocation (cudaHostAlloc, whatever its
        # flags) and a peer's device allocation are reached from a kernel through the very
        # pointer the host holds (CUDA runtime API, "Unified Addressing"), so the view is
        # that pointer described as a CUDA array; Numba's from_cuda_array_interface takes
        # it as given. The view is made with the kernel's device current, and keeps `array`
        # alive through its owner.
        self._prepare(device)
        pointer, nbytes = self._pointer(array), int(array.nbytes)
        with self.cp.cuda.Device(device):
            return self.nb.as_cuda_array(_ChaseBuffer(array, pointer, nbytes // 8), sync=False)

    def launch(self, kernel: str, stream: Any, *args: Any, blocks: int | None = None) -> None:
        from bwprof.gpu.kernels import KERNELS, launch_config

        spec = KERNELS[kernel]
        elements = args[0].size if spec.kind != "hold" else 1
        grid, threads = launch_config(spec.kind, elements)
        grid = blocks or grid
        device = int(stream.device_id)
        self._prepare(device)
        self._doing[stream.ptr] = ("kernel", kernel)
        with self.nb.gpus[device]:
            compiled, numba_stream = self._kernel(kernel), self._numba_stream(stream)
            # Small grids on purpose (an SM copy of a small transfer: one block): no warning.
            if spec.kind in ("hold", "chase", "load", "smcopy"):
                with warnings.catch_warnings():
                    # Numba highlights its message: it starts with an escape code, not "Grid"
                    warnings.filterwarnings("ignore", message=r".*Grid size \d+ will")
                    configured = compiled[grid, threads, numba_stream]
            else:
                configured = compiled[grid, threads, numba_stream]
            configured(*args)

    def _cublas(self) -> Any:
        return self.cp.cuda.cublas

    def gemm(self, stream: Any, dtype: str, n: int, a: Any, b: Any, c: Any) -> None:
        """cublasGemmEx on raw buffers, with the handle CuPy keeps for the device: cuBLAS is
        column-major, so b is passed first: column-major C = B'A' is row-major C = A B."""
        cublas, rt = self._cublas(), self.cp.cuda.runtime
        data_name, data_value = _CUDA_DATA_TYPES[dtype]
        compute_name, compute_value = _CUBLAS_COMPUTE[dtype]
        data = int(getattr(rt, data_name, data_value))
        compute = int(getattr(cublas, compute_name, compute_value))
        scale = np.float64 if dtype == "fp64" else np.float32
        alpha, beta = np.ones(1, dtype=scale), np.zeros(1, dtype=scale)
        device = int(stream.device_id)
        self._doing[stream.ptr] = ("gemm", dtype)
        # `stream` current: CuPy's gemmEx sets the handle's stream to CuPy's current stream
        # before it calls cuBLAS (cublas.pyx: `_setStream(handle)`), undoing any setStream
        # made before it; with the legacy stream current the multiply would run outside the
        # events on `stream` (a non-blocking stream does not wait for it) and time nothing.
        with self.cp.cuda.Device(device), stream:
            handle = self.cp.cuda.device.get_cublas_handle()
            cublas.setMathMode(handle, CUBLAS_DEFAULT_MATH)
            # gemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
            #        beta, C, Ctype, ldc, computeType, algo); alpha and beta on the host.
            cublas.gemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, int(alpha.ctypes.data),
                          self._pointer(b), data, n, self._pointer(a), data, n,
                          int(beta.ctypes.data), self._pointer(c), data, n, compute,
                          CUBLAS_GEMM_DEFAULT)

    def gemm_library(self, device: int) -> str:
        cublas = self._cublas()
        with self.cp.cuda.Device(device):
            version = int(cublas.getVersion(self.cp.cuda.device.get_cublas_handle()))
        # cublasGetVersion: major * 10000 + minor * 100 + patch from cuBLAS 11
        return (f"cuBLAS {version // 10000}.{version // 100 % 100}.{version % 100} "
                f"(cublasGemmEx through CuPy {self.cp.__version__})")

    def zero(self, array: Any, nbytes: int) -> None:
        rt = self.cp.cuda.runtime
        device = int(array.device.id)

        def zero() -> None:
            with self.cp.cuda.Device(device):
                rt.deviceSynchronize()
                rt.memset(self._pointer(array), 0, nbytes)  # no CuPy kernel (and no NVRTC)
                rt.deviceSynchronize()

        self._bounded((device,), f"gpu{device} memset", zero, nbytes=nbytes)

    def upload(self, dst: Any, values: Any, offset: int = 0) -> None:
        rt = self.cp.cuda.runtime
        host = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
        if offset + host.size > dst.nbytes:
            raise ValueError(f"upload of {host.size} bytes at {offset} overruns {dst.nbytes}")
        device = int(dst.device.id)

        def upload() -> None:
            with self.cp.cuda.Device(device):
                # cudaMemcpy runs on the legacy stream, which does not wait for non-blocking
                # ones.
                rt.deviceSynchronize()
                rt.memcpy(self._pointer(dst) + offset, int(host.ctypes.data), host.size,
                          rt.memcpyHostToDevice)
                rt.deviceSynchronize()

        self._bounded((device,), f"host -> gpu{device} upload", upload, nbytes=host.size)

    def download(self, src: Any, nbytes: int, offset: int = 0, out: Any = None) -> Any:
        rt = self.cp.cuda.runtime
        if offset + nbytes > src.nbytes:
            raise ValueError(f"download of {nbytes} bytes at {offset} overruns {src.nbytes}")
        if out is None:
            out = np.empty(nbytes, dtype=np.uint8)
        elif out.nbytes < nbytes:
            raise ValueError(f"download of {nbytes} bytes into {out.nbytes}")
        device = int(src.device.id)

        def download() -> None:
            with self.cp.cuda.Device(device):
                rt.deviceSynchronize()
                rt.memcpy(int(out.ctypes.data), self._pointer(src) + offset, nbytes,
                          rt.memcpyDeviceToHost)

        self._bounded((device,), f"gpu{device} -> host download", download, nbytes=nbytes)
        return out

    # timing ----------------------------------------------------------------------------

    def _gate_stream(self, device: int) -> Any:
        if device not in self._gate_streams:
            self._gate_streams[device] = self.new_stream(device)
        return self._gate_streams[device]

    def _event(self, device: int, timing: bool = True) -> Any:
        # Event(block=False, disable_timing=False, interprocess=False): timing is on by default.
        with self.cp.cuda.Device(device):
            return self.cp.cuda.Event(disable_timing=not timing)

    def time_sample(self, works: Sequence[Work], gate: bool, hold_us: int) -> Sample:
        devices = [int(w.stream.device_id) for w in works]
        released = None
        # The sample's events in the order they complete (gate, warm-ups, ends, final), each
        # with its stream: a wait that runs out names the earliest phase still pending, i.e.
        # the work that stalled rather than the streams held behind it.
        phases: list[list[tuple[Any, Any]]] = []
        if gate:
            # One hold kernel on the first device; every stream, on any device, waits for it.
            gate_stream = self._gate_stream(devices[0])
            self.launch("hold", gate_stream, hold_us)
            released = self._event(devices[0], timing=False)  # a sync-only event
            with self.cp.cuda.Device(devices[0]):
                released.record(gate_stream)
            phases.append([(released, gate_stream)])
        # Behind the gate, each stream's untimed warm-up first (nvbandwidth's order: spin
        # kernel, warm-up copies, start event), each ending in a sync-only event.
        warmed = []
        for work, device in zip(works, devices, strict=True):
            with self.cp.cuda.Device(device):
                if released is not None:
                    work.stream.wait_event(released)
                for _ in range(work.warmup):
                    work.enqueue()
                if work.warmup and len(works) > 1:
                    ready = self._event(device, timing=False)
                    ready.record(work.stream)
                    warmed.append((work.stream, ready))
        phases.append([(ready, stream) for stream, ready in warmed])
        barrier = None
        if len(works) > 1:
            # Warm-ups differ in length (a kernel's, a copy's, two copies sharing the link),
            # so the timed parts start behind a barrier: the gate stream of the first device
            # waits for every stream's warm-up (any device's event will do) and records a
            # sync-only event, on which every stream, the first included, waits before its
            # start event. Every start is one event hop from the barrier (none is a hop
            # earlier, which on another GPU would put that hop into total_s), with 2n event
            # waits instead of n(n-1) (3,080 for 56 streams: Python issue time inside the
            # gate's hold).
            barrier_stream = self._gate_stream(devices[0])
            with self.cp.cuda.Device(devices[0]):
                for _stream, ready in warmed:
                    barrier_stream.wait_event(ready)
                barrier = self._event(devices[0], timing=False)
                barrier.record(barrier_stream)
            phases.append([(barrier, barrier_stream)])
        starts: list[Any] = []
        ends: list[Any] = []
        for work, device in zip(works, devices, strict=True):
            with self.cp.cuda.Device(device):
                if barrier is not None:
                    work.stream.wait_event(barrier)
                start, end = self._event(device), self._event(device)
                start.record(work.stream)
                for _ in range(work.ops):
                    work.enqueue()
                end.record(work.stream)
            starts.append(start)
            ends.append(end)
        phases.append([(end, work.stream) for end, work in zip(ends, works, strict=True)])
        final = ends[0]
        if len(works) > 1:
            # One clock for the whole sample: the first stream waits for every other
            # stream's end event, then records the final event (on its own device).
            with self.cp.cuda.Device(devices[0]):
                for end in ends[1:]:
                    works[0].stream.wait_event(end)
                final = self._event(devices[0])
                final.record(works[0].stream)
            phases.append([(final, works[0].stream)])
        # Still pending now = nothing behind the gate has started: enqueue is out of the figure.
        covered = released is None or not released.done
        self._await(phases)
        seconds = tuple(self._elapsed_s(device, s, e)
                        for device, s, e in zip(devices, starts, ends, strict=True))
        total_s = self._elapsed_s(devices[0], starts[0], final)
        if len(set(devices)) == 1:
            first = starts[0]
            offsets = [self._elapsed_s(devices[0], first, s) for s in starts]
            origin = min(offsets)
            start_s = tuple(o - origin for o in offsets)
            end_s = tuple(o + d for o, d in zip(start_s, seconds, strict=True))
        else:  # events of different devices cannot be subtracted
            start_s, end_s = tuple(0.0 for _ in works), seconds
        return Sample(seconds, start_s, end_s, covered, total_s=total_s)

    # deadlines -------------------------------------------------------------------------

    def _await(self, phases: Sequence[Sequence[tuple[Any, Any]]]) -> None:
        """Wait for every event of `phases` (each an (event, stream) list, in the order they
        complete) by polling cudaEventQuery, never longer than `deadline_s` in all:
        cudaEventSynchronize has no deadline, and a peer copy stalled by ACS or the IOMMU,
        or a wedged GPU, would hang the run in it. Past the deadline the work of the
        earliest phase still pending is named, its GPUs taken as wedged (GpuTimeout)."""
        rt = self.cp.cuda.runtime
        deadline = self._clock() + self.deadline_s
        for phase in phases:
            pause = POLL_FIRST_S  # each phase may end soon after the last: poll close again
            pending = list(phase)
            while pending:
                still = []
                for event, stream in pending:
                    status = int(rt.eventQuery(event.ptr))
                    if status == CUDA_ERROR_NOT_READY:
                        still.append((event, stream))
                    elif status != CUDA_SUCCESS:  # a sticky error: the work failed
                        label, _ = self._described(stream)
                        raise RuntimeError(f"{label} failed: {_error_name(rt, status)}")
                pending = still
                if not pending:
                    break
                if self._clock() >= deadline:
                    self._timed_out([stream for _, stream in pending], phases)
                self._sleep(pause)
                pause = min(2 * pause, POLL_MAX_S)

    def _described(self, stream: Any) -> tuple[str, tuple[int, ...]]:
        """What `stream` was last given to do, in words ('gpu3 -> gpu5 copy'), and the GPUs
        that work touches."""
        device = int(stream.device_id)
        doing = self._doing.get(int(stream.ptr))
        if doing is None:
            return f"gpu{device} stream", (device,)
        if doing[0] == "copy":
            ends = [int(e) for e in doing[1:]]  # device indices, -1 for the host
            dst, src = ("host" if e < 0 else f"gpu{e}" for e in ends)
            involved = {device, *(e for e in ends if e >= 0)}
            return f"{src} -> {dst} copy", tuple(sorted(involved))
        if doing[0] == "kernel" and doing[1] == "hold":
            return f"gpu{device} gate (hold kernel)", (device,)
        return f"gpu{device} {doing[1]} {doing[0]}", (device,)

    def _timed_out(self, stalled: Sequence[Any],
                   phases: Sequence[Sequence[tuple[Any, Any]]]) -> None:
        """Wedge the GPUs of the `stalled` streams' work, and those of every stream of the
        sample still held behind it (a wait on its event never ends: a synchronise of that
        GPU would hang too), naming the stalled work."""
        labels: list[str] = []
        devices: set[int] = set()
        for stream in stalled:
            label, involved = self._described(stream)
            if label not in labels:
                labels.append(label)
            devices.update(involved)
        rt = self.cp.cuda.runtime
        held = {int(stream.device_id) for phase in phases for event, stream in phase
                if int(rt.eventQuery(event.ptr)) != CUDA_SUCCESS} - devices
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3
                                         else "")
        self._wedge(f"{shown} did not finish within {self.deadline_s:.3g} s", devices, held)

    def _wedge(self, what: str, devices: set[int] | Sequence[int],
               held: set[int] | None = None) -> None:
        """Take `devices` (and `held`, GPUs whose streams wait behind them) as wedged for the
        rest of the run and raise GpuTimeout saying so. Pinned buffers are kept from here on
        (freeing them would synchronise)."""
        names = ", ".join(f"gpu{d}" for d in sorted(devices))
        # No GPU named: the pinned pool's release (cudaFreeHost) stalled behind some GPU.
        message = (f"{what}; {names} not used again in this run" if names else
                   f"{what}; the pinned host memory pool is kept, not freed, in this run")
        if held:
            others = ", ".join(f"gpu{d}" for d in sorted(held))
            waits = "its stream waits" if len(held) == 1 else "their streams wait"
            message += f" (nor {others}: {waits} behind that work)"
        for device in {*devices, *(held or ())}:
            self.wedged.setdefault(device, what)
            STOPPED_GPUS.add(device)
        _NEVER_FREED.extend(array for ref in self._pinned if (array := ref()) is not None)
        self._pinned.clear()
        raise GpuTimeout(message, sorted({*devices, *(held or ())}))

    def _bounded(self, devices: Sequence[int], what: str, call: Callable[[], _T],
                 nbytes: int = 0) -> _T:
        """Run a blocking CUDA call (deviceSynchronize, cudaMemcpy, a pool's cudaFree) in a
        helper thread and wait for it at most `deadline_s`, plus `nbytes` (a blocking
        copy's) at SLOWEST_COPY_GBPS; past it the call is left blocked in its daemon thread
        and `devices` are wedged (GpuTimeout). A GPU wedged already is not called at all.
        The call makes its own device current: CUDA's current device is per thread."""
        gone = [d for d in devices if d in self.wedged]
        if gone:
            raise GpuTimeout(f"gpu{gone[0]} stopped answering earlier in this run "
                             f"({self.wedged[gone[0]]}): not used again", gone)
        limit = self.deadline_s + nbytes / (SLOWEST_COPY_GBPS * 1e9)
        stuck, value = call_within(call, limit, f"bwprof {what}")
        if stuck is not None:
            self._wedge(f"{what} did not finish within {limit:.3g} s", devices)
        return cast(_T, value)

    def _elapsed_s(self, device: int, start: Any, end: Any) -> float:
        with self.cp.cuda.Device(device):
            return float(self.cp.cuda.get_elapsed_time(start, end)) / 1e3  # ms -> s

    def enable_peer_access(self, device: int, peer: int) -> bool:
        rt = self.cp.cuda.runtime
        if not rt.deviceCanAccessPeer(device, peer):
            return False
        with self.cp.cuda.Device(device):
            try:
                rt.deviceEnablePeerAccess(peer)
            except rt.CUDARuntimeError as exc:  # CuPy clears the sticky last error itself
                already = (getattr(exc, "status", None) == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                           or "PeerAccessAlreadyEnabled" in str(exc))
                if not already:
                    raise
        return True

    def release(self) -> None:
        """Synchronise and free each GPU's cached memory, never longer than the deadline a
        GPU: a wedged GPU is skipped (its synchronise would never return, nor would the
        cudaFree of its pool), and with any GPU wedged pinned memory is kept (cudaFreeHost
        synchronises too); a GPU found stalled here is wedged from now on, said in the log,
        and the rest are still released, as they are after any other error (a sticky Xid 13
        or 43 makes deviceSynchronize raise CUDARuntimeError): one log line each."""
        self._doing.clear()
        # Each device has its own pool: free_all_blocks() frees the current device's only.
        # Devices never opened are left alone: `bwprof list` and `info` create no context.
        for device in sorted(self._used - set(self.wedged)):
            def free(device: int = device) -> None:
                with self.cp.cuda.Device(device):
                    self.cp.cuda.runtime.deviceSynchronize()
                    self.cp.get_default_memory_pool().free_all_blocks()

            try:
                self._bounded((device,), f"gpu{device} release (synchronise and free)", free)
            except GpuTimeout as exc:
                _log.warning("%s", exc)
            except Exception as exc:  # a sticky error: this GPU fails, the others still free
                _log.warning("gpu%d release failed (%s: %s); the other GPUs are still "
                             "released", device, type(exc).__name__, exc)
        if self.wedged:
            _log.info("pinned host memory kept: %s may still be using it",
                      ", ".join(f"gpu{d}" for d in sorted(self.wedged)))
            return
        try:
            self._bounded((), "pinned host memory release",
                          self.cp.get_default_pinned_memory_pool().free_all_blocks)
        except Exception as exc:  # GpuTimeout, or a sticky error met by cudaFreeHost
            _log.warning("%s: %s", type(exc).__name__, exc)


def _error_name(rt: Any, status: int) -> str:
    """A CUDA error's name and number ('cudaErrorIllegalAddress (700)')."""
    try:
        name = rt.getErrorName(status)
    except Exception:  # not in this CuPy, or not a known status
        return f"CUDA error {status}"
    return f"{name.decode() if isinstance(name, bytes) else name} ({status})"
