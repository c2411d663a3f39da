"""Stand-ins for CuPy and numba.cuda that enforce the CUDA runtime's cross-device rules.

CudaBackend need not run on a GPU to be checked against the rules its docstring cites: these
fakes record every call, with the device current at the time, and raise RuleBroken where CUDA
would fail or silently misbehave:

- an event is recorded on a stream of the device it was created on (cudaEventRecord);
- elapsed time is taken between two recorded, timing-enabled events of one device
  (cudaEventElapsedTime);
- a kernel is launched on a stream of the current device, on arrays wrapped without a sync;
- peer access is enabled from the current device, once (a second time is CUDA error 704);
- a cuBLAS call runs on CuPy's current stream, whatever `cublas.setStream` said before it
  (CuPy 14's cublas.pyx: every BLAS wrapper, gemmEx too, first calls
  `_setStream(handle)`, i.e. setStream(handle, get_current_stream_ptr())).

A stream may wait on an event of another device (cudaStreamWaitEvent allows it): that is how
one gate holds every GPU.

A GPU can be stalled (`stall(device)`: a wedged GPU), or the link between two (`stall(a, b)`
with `link=True`: peer copies held by ACS or the IOMMU): every copy touching it (crossing
it) and every kernel on it then never finishes, so nothing recorded after
it on that stream completes (cudaEventQuery answers cudaErrorNotReady for ever), nor does
anything queued behind it (a wait on such an event stalls the waiting stream too). What
would hang on a real GPU hangs here: Event.synchronize, and deviceSynchronize or a pool's
free (cudaFree synchronises) of a GPU with a stalled stream, block until `unblock` is set,
then raise RuleBroken; CUDA's current device is per thread, as it is here.

With `copy_ms` set the fake also keeps time as a GPU would, stream by stream: each stream has
its own clock (streams run side by side), a copy takes `copy_ms` (plus `cold_ms` for the first
one after the stream was released by a gate: the copy engine's start-up and first TLB misses),
a kernel `kernel_ms`, the gate's hold kernel its hold; waiting on an event moves a stream's
clock up to the event's time, plus `hop_ms` (an event's completion reaching the waiting
stream: a few microseconds on a GPU). Every stream's own queue is logged in `queues` (its waits,
records, copies and launches, in order). Without `copy_ms`, the clock ticks 1 ms per recorded
event.

Device memory is host memory here (a NumPy buffer whose address is the array's pointer), so
copies move bytes (at once, when issued) and a copy case's validation passes: a run on the
fake is judged by its rows, not failed by its memory.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np

DEVICE_ATTRIBUTES = {"cudaDevAttrL2CacheSize": 38, "cudaDevAttrMultiProcessorCount": 16,
                     "cudaDevAttrAsyncEngineCount": 40, "cudaDevAttrGlobalMemoryBusWidth": 37,
                     "cudaDevAttrMemoryClockRate": 36}
"""The cudaDeviceAttr values CudaBackend reads (the CUDA runtime API's enum)."""


_names = itertools.count()


class RuleBroken(AssertionError):
    """A call CUDA would refuse, or that would time or run the wrong thing."""


class FakeCuda:
    """One fake machine: `devices` GPUs of `memory_bytes` each, and a call log."""

    def __init__(self, devices: int = 2, memory_bytes: int = 1 << 30,
                 pinned_limit_bytes: int = 1 << 30, properties: dict[str, Any] | None = None,
                 attributes: dict[int, int] | None = None, copy_ms: float | None = None,
                 cold_ms: float = 0.0, kernel_ms: float = 1.0, hop_ms: float = 0.0) -> None:
        """`properties`: what getDeviceProperties answers (CUDA 13's CuPy leaves fields out);
        `attributes`: deviceGetAttribute's answers by attribute value (others: an error)."""
        self.properties = properties if properties is not None else {"name": b"fake GPU"}
        self.attributes = attributes or {}
        self.devices = devices
        self.memory_bytes = memory_bytes
        self.pinned_limit_bytes = pinned_limit_bytes
        self._thread = threading.local()  # CUDA's current device is per thread
        self.stalled: set[int] = set()
        self.stalled_links: set[frozenset[int]] = set()
        self.events: dict[int, Event] = {}
        self.unblock = threading.Event()  # set it to let calls hung on a stall go (raising)
        self.current_streams: list[int] = []  # CuPy's stream stack (`with stream:`); 0 = legacy
        self.log: list[tuple[Any, ...]] = []
        self.streams: dict[int, Stream] = {}
        self.clock = itertools.count(1)  # fake GPU time, in ms, one tick per recorded event
        self.gate_done = False  # what Event.done answers for a sync-only event
        self.peers: set[tuple[int, int]] = set()
        self.copy_ms, self.cold_ms, self.kernel_ms = copy_ms, cold_ms, kernel_ms
        self.hop_ms = hop_ms
        self.queues: dict[int, list[tuple[Any, ...]]] = {}  # stream pointer: its queue
        self._pointers = itertools.count(0x10000, 0x1000)
        self.cupy = self._cupy()
        self.numba_cuda = self._numba()

    @property
    def current(self) -> int:
        return int(getattr(self._thread, "device", 0))

    @current.setter
    def current(self, device: int) -> None:
        self._thread.device = device

    def pointer(self) -> int:
        return next(self._pointers)

    @staticmethod
    def move(dst: int, src: int, size: int, stream: Stream) -> None:
        """A copy's bytes, moved when it is issued (never, on a stalled stream)."""
        if not stream.stalled:
            ctypes.memmove(dst, src, size)

    def stall(self, *devices: int, link: bool = False) -> None:
        """From now on, work touching these GPUs (`link`: copies between the two) never
        finishes."""
        if link:
            self.stalled_links.add(frozenset(devices))
        else:
            self.stalled.update(devices)

    def hang_if_stalled(self, what: str, devices: set[int] | None = None) -> None:
        """A call that waits for every stream of `devices` (all of them: None) to drain: it
        hangs where one of them is stalled, as on a GPU."""
        stuck = [s for s in self.streams.values()
                 if s.stalled and (devices is None or s.device_id in devices)]
        if stuck:
            self.log.append(("hung", what, self.current))
            self.unblock.wait(30.0)
            raise RuleBroken(f"{what} waited on a stalled stream: it would hang for ever")

    def _check_device(self, device: int) -> None:
        if not 0 <= device < self.devices:
            raise RuleBroken(f"no device {device}")

    # cupy --------------------------------------------------------------------------------

    def _cupy(self) -> SimpleNamespace:
        fake = self

        class CUDARuntimeError(RuntimeError):
            def __init__(self, status: int) -> None:
                super().__init__(f"cudaError {status}")
                self.status = status

        def memcpy_async(dst: int, src: int, size: int, kind: int, stream: int) -> None:
            fake.log.append(("memcpyAsync", fake.current, fake.streams[stream].device_id, kind,
                             size))
            fake.streams[stream].run("copy", fake.copy_ms)
            fake.move(dst, src, size, fake.streams[stream])

        def memcpy_peer_async(dst: int, dst_device: int, src: int, src_device: int, size: int,
                              stream: int) -> None:
            fake.log.append(("memcpyPeerAsync", fake.current, fake.streams[stream].device_id,
                             dst_device, src_device, size))
            fake.streams[stream].run("copy", fake.copy_ms, {dst_device, src_device})
            fake.move(dst, src, size, fake.streams[stream])

        def enable_peer_access(peer: int) -> None:
            if (fake.current, peer) in fake.peers:
                raise CUDARuntimeError(704)  # cudaErrorPeerAccessAlreadyEnabled
            fake.peers.add((fake.current, peer))

        def pinned_memory(nbytes: int, flags: int) -> SimpleNamespace:
            if flags != runtime.hostAllocPortable:
                raise RuleBroken("pinned host memory for several GPUs must be portable")
            if nbytes > fake.pinned_limit_bytes:
                raise CUDARuntimeError(2)  # cudaErrorMemoryAllocation
            return SimpleNamespace(buffer=np.zeros(nbytes, dtype=np.uint8))

        def attribute(value: int, device: int) -> int:
            fake._check_device(device)
            if value not in fake.attributes:
                raise CUDARuntimeError(1)  # cudaErrorInvalidValue
            return fake.attributes[value]

        def event_query(pointer: int) -> int:
            event = fake.events[pointer]
            return 0 if event.at is None or event.complete else 600  # cudaErrorNotReady

        def device_synchronize() -> None:
            fake.log.append(("deviceSynchronize", fake.current))
            fake.hang_if_stalled("deviceSynchronize", {fake.current})

        def memcpy(dst: int, src: int, size: int, kind: int) -> None:
            fake.hang_if_stalled("cudaMemcpy", {fake.current})  # the legacy stream: syncs
            ctypes.memmove(dst, src, size)

        def memset(pointer: int, value: int, size: int) -> None:
            fake.hang_if_stalled("cudaMemset", {fake.current})
            ctypes.memset(pointer, value, size)

        def free_device_blocks() -> None:
            fake.hang_if_stalled("cudaFree", {fake.current})

        def free_pinned_blocks() -> None:
            fake.hang_if_stalled("cudaFreeHost")

        runtime = SimpleNamespace(
            eventQuery=event_query, getErrorName=lambda status: f"cudaError{status}",
            **DEVICE_ATTRIBUTES,
            getDeviceProperties=lambda device: dict(fake.properties),
            deviceGetAttribute=attribute,
            deviceGetPCIBusId=lambda device: f"0000:{0x1B + device:02X}:00.0",
            memcpyHostToHost=0, memcpyHostToDevice=1, memcpyDeviceToHost=2,
            memcpyDeviceToDevice=3, hostAllocPortable=1, CUDARuntimeError=CUDARuntimeError,
            getDeviceCount=lambda: fake.devices, memcpyAsync=memcpy_async,
            memcpyPeerAsync=memcpy_peer_async, deviceCanAccessPeer=lambda d, p: True,
            deviceEnablePeerAccess=enable_peer_access,
            deviceSynchronize=device_synchronize,
            memGetInfo=lambda: (fake.memory_bytes, fake.memory_bytes),
            memset=memset,
            memcpy=memcpy,
        )
        pool = SimpleNamespace(free_all_blocks=free_device_blocks)
        pinned_pool = SimpleNamespace(free_all_blocks=free_pinned_blocks)

        def gemm_ex(handle: int, *args: Any) -> None:
            # CuPy's wrapper sets the handle's stream to the current stream, then calls cuBLAS.
            stream = fake.current_streams[-1] if fake.current_streams else 0
            fake.log.append(("gemmEx", fake.current, stream, handle, args))
            if stream:
                fake.streams[stream].run("gemm", fake.kernel_ms)

        cublas = SimpleNamespace(
            gemmEx=gemm_ex, getVersion=lambda handle: 130100,
            setStream=lambda handle, stream: fake.log.append(("cublasSetStream", stream)),
            setMathMode=lambda handle, mode: fake.log.append(("cublasSetMathMode", mode)),
        )
        return SimpleNamespace(
            __version__="14.2.0",
            cuda=SimpleNamespace(
                cublas=cublas,
                device=SimpleNamespace(get_cublas_handle=lambda: 0xB1A5 + fake.current),
                Device=lambda device: Device(fake, device), Stream=lambda **kw: Stream(fake, **kw),
                Event=lambda **kw: Event(fake, **kw), get_elapsed_time=fake._elapsed_ms,
                runtime=runtime, PinnedMemory=pinned_memory,
                PinnedMemoryPointer=lambda memory, offset: memory.buffer,
                memory=SimpleNamespace(OutOfMemoryError=MemoryError),
            ),
            empty=lambda nbytes, dtype: fake._device_array(nbytes),
            uint8=np.uint8, float64=np.float64,
            get_default_memory_pool=lambda: pool,
            get_default_pinned_memory_pool=lambda: pinned_pool,
        )

    def _device_array(self, nbytes: int) -> DeviceArray:
        if nbytes > self.memory_bytes:
            raise MemoryError(f"out of memory allocating {nbytes} bytes")
        return DeviceArray(self, self.current, nbytes)

    def _elapsed_ms(self, start: Event, end: Event) -> float:
        if start.device != end.device:
            raise RuleBroken("elapsed time between events of two devices")
        if not (start.timing and end.timing):
            raise RuleBroken("elapsed time of an event created without timing")
        if start.at is None or end.at is None:
            raise RuleBroken("elapsed time of an event never recorded")
        return float(end.at - start.at)

    # numba.cuda ------------------------------------------------------------------------

    def _numba(self) -> SimpleNamespace:
        fake = self

        def as_cuda_array(array: Any, sync: bool = True) -> Any:
            if sync:
                raise RuleBroken("a synchronising view serialises the streams")
            return array

        return SimpleNamespace(
            gpus=[Context(fake, device) for device in range(fake.devices)],
            jit=lambda signature, cache=False: (lambda function: Dispatcher(fake, function)),
            external_stream=lambda pointer: SimpleNamespace(pointer=pointer),
            as_cuda_array=as_cuda_array,
        )


class Device:
    """cupy.cuda.Device: makes its device current inside `with`."""

    def __init__(self, fake: FakeCuda, device: int) -> None:
        fake._check_device(device)
        self.fake, self.id, self.compute_capability = fake, device, "90"

    def __enter__(self) -> Device:
        self.previous, self.fake.current = self.fake.current, self.id
        return self

    def __exit__(self, *_exc: object) -> None:
        self.fake.current = self.previous


class Context(Device):
    """numba.cuda.gpus[i]: the same, for Numba's context stack."""


class Stream:
    def __init__(self, fake: FakeCuda, non_blocking: bool = False) -> None:
        if not non_blocking:
            raise RuleBroken("a blocking stream would wait for the legacy stream")
        self.fake, self.device_id, self.ptr = fake, fake.current, fake.pointer()
        fake.streams[self.ptr] = self
        fake.queues[self.ptr] = []
        self.now = 0.0  # this stream's clock (ms), when the fake keeps time
        self.cold = True  # its next copy pays the start-up (cold_ms)
        self.holding = False  # a hold kernel was queued: the next event recorded releases
        self.stalled = False  # work queued on it never finishes (a stalled GPU)

    def __enter__(self) -> Stream:
        if self.device_id != self.fake.current:  # CuPy's check_stream_device_match
            raise RuleBroken(f"stream of device {self.device_id} made current with device "
                             f"{self.fake.current} current")
        self.fake.current_streams.append(self.ptr)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.fake.current_streams.pop()

    def run(self, what: str, ms: float | None, touches: set[int] | None = None) -> None:
        """Queue work of `ms` on this stream (a copy pays `cold_ms` first when cold); work
        touching a stalled GPU (`touches`, besides the stream's own) stalls the stream."""
        self.fake.queues[self.ptr].append((what,))
        touched = {self.device_id, *(touches or ())}
        if touched & self.fake.stalled or frozenset(touched) in self.fake.stalled_links:
            self.stalled = True
        if ms is None:
            return
        if what == "copy" and self.cold:
            ms += self.fake.cold_ms
        self.cold = self.cold and what != "copy"
        self.now += ms

    def wait_event(self, event: Event) -> None:
        self.fake.log.append(("wait", self.device_id, event.device))  # any device's event
        self.fake.queues[self.ptr].append(("wait", event.name))
        if event.at is not None and self.fake.copy_ms is not None:
            self.now = max(self.now, float(event.at) + self.fake.hop_ms)
        if event.releases:  # released by a gate: the engine starts cold
            self.cold = True
        if not event.complete:  # behind work that never finishes
            self.stalled = True


class Event:
    def __init__(self, fake: FakeCuda, block: bool = False, disable_timing: bool = False,
                 interprocess: bool = False) -> None:
        self.fake, self.device, self.timing = fake, fake.current, not disable_timing
        self.at: float | None = None
        self.name = f"event{next(_names)}"
        self.releases = False  # recorded behind a hold kernel: this event opens a gate
        self.ptr = fake.pointer()
        self.complete = True  # recorded behind nothing stalled
        fake.events[self.ptr] = self

    def record(self, stream: Stream) -> None:
        if stream.device_id != self.device:
            raise RuleBroken(f"event of device {self.device} recorded on a stream of device "
                             f"{stream.device_id}")
        self.fake.queues[stream.ptr].append(("record", self.name))
        self.releases, stream.holding = stream.holding, False
        self.complete = not stream.stalled
        self.at = (next(self.fake.clock) if self.fake.copy_ms is None else stream.now)

    @property
    def done(self) -> bool:
        return self.fake.gate_done and self.complete

    def synchronize(self) -> None:
        if self.at is None:
            raise RuleBroken("waiting for an event never recorded")
        if not self.complete:
            self.fake.unblock.wait(30.0)
            raise RuleBroken("cudaEventSynchronize on work that never finishes: it would "
                             "hang for ever")


class DeviceArray:
    """A cupy.ndarray of bytes: its device, pointer and size."""

    def __init__(self, fake: FakeCuda, device: int, nbytes: int) -> None:
        self.device = Device(fake, device)
        self.memory = np.zeros(nbytes, dtype=np.uint8)
        self.data = SimpleNamespace(ptr=self.memory.ctypes.data)
        self.nbytes = self.size = nbytes

    def view(self, dtype: Any) -> DeviceArray:
        return self


class Dispatcher:
    """A kernel compiled for one signature: launches are logged with the device current."""

    def __init__(self, fake: FakeCuda, function: Any) -> None:
        self.fake, self.name = fake, function.__name__
        self.overloads: dict[str, Any] = {}  # nothing compiled: nothing to load early

    def __getitem__(self, config: tuple[int, int, Any]) -> Any:
        blocks, _threads, stream = config
        owner = self.fake.streams[stream.pointer].device_id
        if blocks < 128:  # as numba-cuda 0.30 words it, highlighted (seen on the H200)
            warnings.warn(f"\x1b[1mGrid size {blocks} will likely result in GPU "
                          "under-utilization due to low occupancy.\x1b[0m", UserWarning,
                          stacklevel=2)

        def launch(*args: object) -> None:
            if owner != self.fake.current:
                raise RuleBroken(f"kernel {self.name} launched on a stream of device {owner} "
                                 f"with device {self.fake.current} current")
            self.fake.log.append(("launch", self.name, self.fake.current, args))
            queue = self.fake.streams[stream.pointer]
            hold = self.name == "hold"
            queue.run(self.name, None if self.fake.copy_ms is None else
                      float(args[0]) / 1e3 if hold else self.fake.kernel_ms)
            queue.holding = hold
        return launch
