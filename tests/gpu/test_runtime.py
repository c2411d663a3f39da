"""The CuPy layer's set-up that holds without a GPU (the rest runs in test_on_device.py)."""

import logging
import os
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest

from bwprof.gpu.backend import Work
from bwprof.gpu.runtime import NO_GPU_REASON, probe


def test_probe_without_a_driver_says_why_in_one_line():
    found = probe()
    if found.count:
        pytest.skip(f"this machine has {found.count} CUDA device(s)")
    assert found.reason.startswith(NO_GPU_REASON) and "\n" not in found.reason


def test_cupy_that_cannot_make_its_cache_folder_is_no_gpu_with_the_reason(monkeypatch):
    """CuPy creates ~/.cupy at import: with HOME unwritable (/dev/null, a read-only home)
    the import raised OSError, a traceback in `info` and in any run of a GPU case."""
    from bwprof.gpu import runtime

    def refuse():
        raise NotADirectoryError(20, "Not a directory", "/dev/null/.cupy")

    monkeypatch.setattr(runtime, "import_cupy", refuse)
    found = runtime.probe()
    assert found.count == 0 and "\n" not in found.reason
    assert found.reason == ("CuPy could not start: it cannot create /dev/null/.cupy (Not a "
                            "directory); set CUPY_CACHE_DIR (or HOME) to a writable folder")


def _fresh_queue_request(monkeypatch, value=None, cupy_imported=False):
    """A process in which bwprof has not asked for hardware queues yet; the variable unset
    (or `value`), and restored after the test."""
    from bwprof.gpu import runtime

    monkeypatch.setattr(runtime, "_queues", [])
    monkeypatch.setenv(runtime.MAX_CONNECTIONS_VARIABLE, "x")  # recorded, so restored after
    monkeypatch.delenv(runtime.MAX_CONNECTIONS_VARIABLE)
    if value is not None:
        monkeypatch.setenv(runtime.MAX_CONNECTIONS_VARIABLE, value)
    if cupy_imported:
        monkeypatch.setitem(sys.modules, "cupy", object())
    else:
        monkeypatch.delitem(sys.modules, "cupy", raising=False)
    return runtime


def test_cuda_gets_32_hardware_queues_unless_the_environment_chose(monkeypatch):
    """Streams sharing one of the default 8 queues wait for each other: it would read as poor
    overlap. The value in force when CUDA starts is what is reported."""
    runtime = _fresh_queue_request(monkeypatch)
    runtime.ask_for_hardware_queues()
    assert os.environ[runtime.MAX_CONNECTIONS_VARIABLE] == "32"
    assert runtime.hardware_queues() == 32
    runtime = _fresh_queue_request(monkeypatch, "1")  # a training job's environment
    runtime.ask_for_hardware_queues()
    assert os.environ[runtime.MAX_CONNECTIONS_VARIABLE] == "1"  # the user's choice stands
    assert runtime.hardware_queues() == 1
    os.environ[runtime.MAX_CONNECTIONS_VARIABLE] = "16"  # after CUDA started: too late
    runtime.ask_for_hardware_queues()
    assert runtime.hardware_queues() == 1


@pytest.mark.parametrize("value", ["abc", "0", "-5", "64", "３２", "9" * 5000, ""])
def test_a_queue_setting_outside_cudas_1_to_32_is_unknown_not_a_count(monkeypatch, value):
    """-5 recorded as the queue count would reach the hardware-queue finding as a fact."""
    runtime = _fresh_queue_request(monkeypatch, value)
    runtime.ask_for_hardware_queues()
    assert os.environ[runtime.MAX_CONNECTIONS_VARIABLE] == value  # the user's, untouched
    assert runtime.hardware_queues() is None


def test_hardware_queues_are_unknown_when_cupy_came_first(monkeypatch):
    """A notebook that used CuPy before bwprof may already run CUDA with other queues."""
    runtime = _fresh_queue_request(monkeypatch, cupy_imported=True)
    runtime.ask_for_hardware_queues()
    assert runtime.hardware_queues() is None


def test_system_json_records_the_queues_only_where_there_are_gpus(monkeypatch):
    import bwprof.api as api

    runtime = _fresh_queue_request(monkeypatch, "4")
    runtime.ask_for_hardware_queues()
    monkeypatch.setattr(runtime, "probe", lambda: runtime.GpuProbe(0, NO_GPU_REASON))
    _, gpus = api.gpu_executor()
    assert gpus.cuda_device_max_connections is None
    monkeypatch.setattr(runtime, "probe", lambda: runtime.GpuProbe(1))

    def no_backend():
        raise RuntimeError("NUMBA_ENABLE_CUDASIM is set")

    monkeypatch.setattr(runtime, "CudaBackend", no_backend)
    _, gpus = api.gpu_executor()
    assert gpus.cuda_device_max_connections == 4


def test_a_kernel_is_loaded_into_the_current_context_before_use():
    """numba-cuda's kernels are library kernels (CUkernel): _load asks for the function in
    the current context, which loads it there instead of at the first (gated) launch."""
    from types import SimpleNamespace

    from cuda.bindings import driver as binding

    from bwprof.gpu.runtime import CudaBackend

    asked, bound = [], []
    kernel = SimpleNamespace(handle=0x7F00)
    compiled = SimpleNamespace(
        bind=lambda: bound.append(True),
        _codelibrary=SimpleNamespace(get_cufunc=lambda: SimpleNamespace(kernel=kernel)))
    CudaBackend._load(compiled, get_function=asked.append)
    assert bound == [True]
    assert len(asked) == 1 and isinstance(asked[0], binding.CUkernel)
    assert int(asked[0]) == 0x7F00
    # An older numba-cuda (module functions, no cuda.core kernel): bound, nothing more.
    older = SimpleNamespace(bind=lambda: bound.append(True), _codelibrary=SimpleNamespace(
        get_cufunc=lambda: SimpleNamespace(handle=1)))
    CudaBackend._load(older, get_function=asked.append)
    assert len(bound) == 2 and len(asked) == 1


def test_a_kernel_that_cannot_be_loaded_early_is_a_warning_not_an_error(caplog):
    from types import SimpleNamespace

    from bwprof.gpu.runtime import CudaBackend

    def refuse(kernel):
        raise RuntimeError("CUDA_ERROR_NOT_FOUND")

    compiled = SimpleNamespace(bind=lambda: None, _codelibrary=SimpleNamespace(
        get_cufunc=lambda: SimpleNamespace(kernel=SimpleNamespace(handle=1))))
    CudaBackend._load(compiled, get_function=refuse)
    assert "could not load a kernel" in caplog.text and "CUDA_ERROR_NOT_FOUND" in caplog.text


# -- CudaBackend against a fake that enforces CUDA's cross-device rules ----------------------


def _backend(**machine):
    from bwprof.gpu.runtime import CudaBackend
    from tests.gpu.fake_cuda import FakeCuda

    fake = FakeCuda(**machine)
    return CudaBackend(cupy=fake.cupy, numba_cuda=fake.numba_cuda), fake


def test_a_gated_sample_across_gpus_keeps_each_event_on_its_own_device():
    """One gate on gpu0 holds streams of gpu0 and gpu1; every event is recorded and timed on
    its own device, and the copies are issued with their stream's device current."""
    import numpy as np

    from bwprof.gpu.backend import Work

    backend, fake = _backend(devices=2)
    host = backend.host_array(4096, pinned=True)
    on0, on1 = backend.device_array(0, 4096), backend.device_array(1, 4096)
    s0, s1 = backend.new_stream(0), backend.new_stream(1)
    works = [Work(s0, lambda: backend.copy(on0, host, 4096, s0), 3),
             Work(s1, lambda: backend.copy(on1, on0, 4096, s1), 2)]
    sample = backend.time_sample(works, gate=True, hold_us=2000)

    assert isinstance(host, np.ndarray) and host.nbytes == 4096
    hold = [entry for entry in fake.log if entry[0] == "launch"]
    assert [(name, device, args) for _, name, device, args in hold] == [("hold", 0, (2000,))]
    # The gate (gpu0) on both; both starts behind the barrier event (gpu0's gate stream);
    # gpu0's final event behind gpu1's end.
    assert [e for e in fake.log if e[0] == "wait"] == [("wait", 0, 0), ("wait", 1, 0),
                                                       ("wait", 0, 0), ("wait", 1, 0),
                                                       ("wait", 0, 1)]
    copies = [e for e in fake.log if e[0].startswith("memcpy")]
    assert [e[:3] for e in copies] == [("memcpyAsync", 0, 0)] * 3 + [
        ("memcpyPeerAsync", 1, 1)] * 2
    assert copies[-1][3:] == (1, 0, 4096)  # to gpu1 from gpu0
    assert sample.covered  # the gate had not opened when the last copy was enqueued
    assert sample.starts_s == (0.0, 0.0)  # events of two devices are never subtracted
    assert all(seconds > 0 for seconds in sample.seconds)


def test_streams_of_one_gpu_get_start_times_from_a_common_origin():
    from bwprof.gpu.backend import Work

    backend, fake = _backend(devices=1)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    first, second = backend.new_stream(0), backend.new_stream(0)
    sample = backend.time_sample([Work(first, lambda: backend.copy(a, b, 64, first), 1),
                                  Work(second, lambda: backend.copy(b, a, 64, second), 1)],
                                 gate=False, hold_us=0)
    # The fake clock ticks 1 ms per recorded event: start, end, start, end, final.
    assert sample.starts_s == (0.0, 0.002) and sample.seconds == (0.001, 0.001)
    assert sample.ends_s == (0.001, 0.003) and sample.covered
    assert sample.total_s == pytest.approx(0.004)  # first start (1 ms) to the final (5 ms)
    assert not [e for e in fake.log if e[0] == "launch"]  # no gate asked for
    # No gate, but still one clock: both starts behind the barrier, the final behind both.
    assert _queue(fake, second) == ["wait", "record", "copy", "record"]
    assert _queue(fake, first) == ["wait", "record", "copy", "record", "wait", "record"]


def test_a_gate_that_opened_before_the_enqueue_ended_is_reported():
    from bwprof.gpu.backend import Work

    backend, fake = _backend(devices=1)
    fake.gate_done = True
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    stream = backend.new_stream(0)
    sample = backend.time_sample([Work(stream, lambda: backend.copy(a, b, 64, stream), 1)],
                                 gate=True, hold_us=10)
    assert not sample.covered


@pytest.mark.filterwarnings("ignore:.*Grid size")  # a small array: a small grid
def test_kernels_launch_on_their_streams_device_with_unsynchronised_views():
    backend, fake = _backend(devices=2)
    arrays = [backend.kernel_view(backend.device_array(1, 8 * 1024)) for _ in range(3)]
    backend.launch("triad", backend.new_stream(1), *arrays, 0.4)
    (launch,) = [e for e in fake.log if e[0] == "launch"]
    assert launch[1:3] == ("stream_triad", 1)


def test_a_chase_view_is_the_buffers_own_pointer_as_uint64_for_the_kernels_device():
    """Pinned host memory and a peer's memory are reached through the pointer the host holds
    (unified addressing): the view describes exactly that pointer, unsynchronised, and the
    load kernel takes its grid from the case."""
    import numpy as np

    backend, fake = _backend(devices=2)
    host = np.zeros(4096, dtype=np.uint8)
    view = backend.chase_view(host, 1)
    interface = view.__cuda_array_interface__
    assert interface["data"] == (host.ctypes.data, False)
    assert interface["shape"] == (512,) and interface["typestr"] == "<u8"
    assert view.owner is host  # the view keeps the buffer alive
    peer = backend.device_array(0, 8 * 1024)
    assert backend.chase_view(peer, 1).__cuda_array_interface__["data"][0] == peer.data.ptr
    arrays = [backend.kernel_view(backend.device_array(1, 8 * 1024)) for _ in range(2)]
    backend.launch("load", backend.new_stream(1), *arrays, view, np.uint64(0), 3, blocks=7)
    (launch,) = [e for e in fake.log if e[0] == "launch"]
    assert launch[1:3] == ("load", 1)


def test_peer_access_enabled_twice_is_not_an_error():
    backend, fake = _backend(devices=2)
    assert backend.enable_peer_access(0, 1) and backend.enable_peer_access(0, 1)
    assert fake.peers == {(0, 1)}


def test_memory_that_does_not_fit_is_out_of_memory_not_a_crash():
    from bwprof.gpu.backend import OutOfMemory

    backend, _ = _backend(devices=1, memory_bytes=1 << 20, pinned_limit_bytes=1 << 20)
    with pytest.raises(OutOfMemory, match="gpu0"):
        backend.device_array(0, 2 << 20)
    with pytest.raises(OutOfMemory, match="pinned host memory"):
        backend.host_array(2 << 20, pinned=True)


def test_device_properties_from_cudas_struct_or_from_attributes_where_it_lacks_them(
        caplog):
    """CuPy built for CUDA 13 leaves fields out of getDeviceProperties (CUDA 13 dropped
    memoryClockRate and others from the struct): device attributes and the device's own
    compute capability fill them in."""
    attributes = {38: 60 << 20, 16: 132, 40: 3, 37: 6144, 36: 3_201_000}
    full = {"name": b"NVIDIA H200", "totalGlobalMem": 150 << 30, "l2CacheSize": 50 << 20,
            "multiProcessorCount": 132, "major": 9, "minor": 0}
    backend, _ = _backend(devices=1, properties=full, attributes=attributes)
    props = backend.properties(0)
    assert (props.name, props.pci_bus_id, props.total_memory_bytes) == (
        "NVIDIA H200", "0000:1B:00.0", 150 << 30)
    assert (props.l2_bytes, props.multiprocessors, props.compute_capability) == (
        50 << 20, 132, (9, 0))
    assert (props.async_engines, props.memory_bus_width_bits, props.memory_clock_khz) == (
        3, 6144, 3_201_000)

    backend, _ = _backend(devices=1, properties={"name": b"NVIDIA H200"}, attributes=attributes,
                          memory_bytes=140 << 30)
    props = backend.properties(0)
    assert (props.total_memory_bytes, props.l2_bytes, props.multiprocessors) == (
        140 << 30, 60 << 20, 132)
    assert props.compute_capability == (9, 0)  # from Device.compute_capability, "90"

    backend, _ = _backend(devices=1, properties={"name": b"old GPU"}, attributes={})
    with caplog.at_level(logging.INFO, logger="bwprof.cuda"):
        props = backend.properties(0)  # attributes this CUDA does not know: unknown, no crash
    assert (props.async_engines, props.memory_bus_width_bits, props.memory_clock_khz) == (
        0, None, None)
    said = [r.getMessage() for r in caplog.records if r.name == "bwprof.cuda"]
    assert any(m.startswith("gpu0: cudaDevAttrMemoryClockRate unavailable (") for m in said)


def test_the_fakes_attribute_values_are_cupys():
    import cupy.cuda.runtime as runtime

    from tests.gpu.fake_cuda import DEVICE_ATTRIBUTES

    assert {name: getattr(runtime, name) for name in DEVICE_ATTRIBUTES} == DEVICE_ATTRIBUTES


# Catches: start times taken relative to the first stream's start instead of
# the earliest one
def test_start_times_are_relative_to_the_earliest_start_not_the_first_stream():
    from tests.gpu.test_runtime import _backend

    backend, fake = _backend(devices=1)
    # The second stream starts first: after the barrier (1 ms), events are recorded at 5 and
    # 6 ms (first stream), then at 2 and 4 ms (second stream) on the fake GPU clock; the
    # final event at 9 ms.
    fake.clock = iter([1, 5, 6, 2, 4, 9])
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    first, second = backend.new_stream(0), backend.new_stream(0)
    sample = backend.time_sample([Work(first, lambda: backend.copy(a, b, 64, first), 1),
                                  Work(second, lambda: backend.copy(b, a, 64, second), 1)],
                                 gate=False, hold_us=0)
    assert sample.starts_s == pytest.approx((0.003, 0.0))
    assert sample.ends_s == pytest.approx((0.004, 0.002))
    assert sample.span_s == pytest.approx(0.004)


def test_import_cupy_asks_for_the_queues_first(monkeypatch):
    from bwprof.gpu import runtime
    asked = []
    monkeypatch.setattr(runtime, "ask_for_hardware_queues", lambda: asked.append(1))
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    runtime.import_cupy()
    assert asked == [1]


def test_import_cupy_hides_the_toolkit_path_hint_but_not_a_second_cupy_wheel(
        monkeypatch, tmp_path):
    from bwprof.gpu import runtime
    package = tmp_path / "cupy"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import warnings\n"
        "warnings.warn('CUDA path could not be detected. Set CUDA_PATH')\n"
        "warnings.warn('CuPy may not function correctly because multiple CuPy packages are "
        "installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(runtime, "ask_for_hardware_queues", lambda: None)
    real = sys.modules.pop("cupy", None)
    try:
        with pytest.warns(UserWarning) as caught:
            assert runtime.import_cupy().__file__ == str(package / "__init__.py")
    finally:  # later tests get the real CuPy back, or import it afresh
        sys.modules.pop("cupy", None)
        if real is not None:
            sys.modules["cupy"] = real
    assert [str(w.message) for w in caught] == [
        "CuPy may not function correctly because multiple CuPy packages are installed"]


def test_a_queue_count_that_is_not_a_number_is_unknown(monkeypatch):
    runtime = _fresh_queue_request(monkeypatch, "lots")
    runtime.ask_for_hardware_queues()
    assert runtime.hardware_queues() is None


def test_the_one_block_gate_launches_quietly_and_other_small_grids_still_warn(recwarn):
    """The gate is one block on purpose; numba's warning about that (its message begins with
    an escape code) is kept out of the run's output, and no other kernel's is hidden."""
    backend, _ = _backend(devices=1)
    stream = backend.new_stream(0)
    backend.launch("hold", stream, 100)
    assert [str(w.message) for w in recwarn] == []
    arrays = [backend.kernel_view(backend.device_array(0, 8 * 1024)) for _ in range(3)]
    backend.launch("triad", stream, *arrays, 0.4)
    (warned,) = recwarn
    assert str(warned.message).startswith("\x1b[1mGrid size ")


def _queue(fake, stream):
    """What one stream's queue holds, in order: waits, records, copies, kernels."""
    return [entry[0] for entry in fake.queues[stream.ptr]]


# Catches: warm-up copies queued ahead of the gate (they would run before the others start) or
# after the start event (in the figure)
def test_warm_up_copies_sit_between_the_gate_and_the_start_event():
    backend, fake = _backend(devices=1, copy_ms=1.0, cold_ms=4.0)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    stream = backend.new_stream(0)
    sample = backend.time_sample([Work(stream, lambda: backend.copy(a, b, 64, stream), 3,
                                       warmup=2)], gate=True, hold_us=2000)
    assert _queue(fake, stream) == ["wait", "copy", "copy", "record", "copy", "copy", "copy",
                                    "record"]
    assert sample.seconds == (pytest.approx(3e-3),)  # the cold 4 ms stayed in the warm-up


@pytest.mark.filterwarnings("ignore:.*Grid size")  # a small array: a small grid
def test_behind_the_gate_timed_parts_start_together_after_every_warm_up():
    """A kernel's warm-up (7 ms) outlasts a copy's (1 + 4 ms cold): each stream
    waits for the other's warm-up, so both timed parts start at one instant."""
    backend, fake = _backend(devices=1, copy_ms=1.0, cold_ms=4.0, kernel_ms=7.0)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    copies, kernels = backend.new_stream(0), backend.new_stream(0)
    view = backend.kernel_view(a)
    works = [Work(copies, lambda: backend.copy(a, b, 64, copies), 2, warmup=1),
             Work(kernels, lambda: backend.launch("copy", kernels, view, view, view, 1.0), 1,
                  warmup=1)]
    sample = backend.time_sample(works, gate=True, hold_us=2000)
    assert sample.starts_s == (0.0, 0.0)
    assert sample.seconds == (pytest.approx(2e-3), pytest.approx(7e-3))
    assert _queue(fake, copies)[:4] == ["wait", "copy", "record", "wait"]  # its ready, theirs


def test_without_warm_up_the_queue_is_as_before():
    backend, fake = _backend(devices=1)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    first, second = backend.new_stream(0), backend.new_stream(0)
    backend.time_sample([Work(first, lambda: backend.copy(a, b, 64, first), 1),
                         Work(second, lambda: backend.copy(b, a, 64, second), 1)],
                        gate=True, hold_us=10)
    assert _queue(fake, first) == ["wait", "wait", "record", "copy", "record", "wait",
                                   "record"]
    assert _queue(fake, second) == ["wait", "wait", "record", "copy", "record"]


# Catches: an aggregate taken as total bytes over the longest stream's own time (a stream that
# started late would hide its skew), or a final event that does not wait for every stream
def test_a_sample_of_several_gpus_is_timed_on_one_clock_by_a_final_event():
    """Three GPUs, copies of 1 ms on each; gpu2's stream starts 5 ms late (its start waits on
    an event at 5 ms): every stream's own time is 1-2 ms, the sample on one clock 6 ms."""
    backend, fake = _backend(devices=3, copy_ms=1.0)
    host = backend.host_array(64, pinned=True)
    arrays = [backend.device_array(d, 64) for d in range(3)]
    streams = [backend.new_stream(d) for d in range(3)]
    streams[2].now = 5.0  # a late start: busy with earlier work when the gate opened
    works = [Work(s, lambda s=s, a=a: backend.copy(a, host, 64, s), 1)
             for s, a in zip(streams, arrays, strict=True)]
    sample = backend.time_sample(works, gate=False, hold_us=0)
    assert max(sample.seconds) == pytest.approx(1e-3)
    assert sample.total_s == sample.span_s == pytest.approx(6e-3)
    # The final event is gpu0's, behind the end events of gpu1 and gpu2.
    assert _queue(fake, streams[0])[-3:] == ["wait", "wait", "record"]
    assert [e for e in fake.log if e[0] == "wait"][-2:] == [("wait", 0, 1), ("wait", 0, 2)]


def test_take_samples_on_the_fake_gpu_keeps_the_cold_start_out_of_every_sample(monkeypatch):
    from bwprof.gpu import sampling

    backend, _fake = _backend(devices=1, copy_ms=1.0, cold_ms=4.0)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    stream = backend.new_stream(0)

    def works(ops):
        return [Work(stream, lambda: backend.copy(a, b, 64, stream), ops)]

    sampled = sampling.take_samples(backend, works, samples=5)
    assert sampled.per_stream_s[0] == pytest.approx((1e-3,) * 5)
    monkeypatch.setattr(sampling, "WARMUP_OPS", 0)  # as before the warm-up
    before = sampling.take_samples(backend, works, samples=5)
    # The 4 ms start-up in every sample, spread over its K = 2 copies: 3 ms a copy.
    assert before.ops_per_sample == 2 and before.per_stream_s[0] == pytest.approx((3e-3,) * 5)


GEMM_TYPES = {"fp64": (1, 70), "fp32": (0, 68), "tf32": (0, 77), "fp16": (2, 68),
              "bf16": (14, 68)}
"""(cudaDataType_t, cublasComputeType_t) per dtype: library_types.h and cublas_api.h."""


@pytest.mark.parametrize("dtype", sorted(GEMM_TYPES))
def test_a_gemm_runs_on_the_stream_its_events_time(dtype):
    """CuPy's gemmEx sets the cuBLAS handle's stream to CuPy's current stream before calling
    cuBLAS, so only the timed stream made current puts the multiply between its events; the
    operands go in column-major order (b first: C' = B'A'), with the dtype's types."""
    backend, fake = _backend(devices=2, copy_ms=1.0, kernel_ms=3.0)
    a, b, c = (backend.device_array(1, 64 * 64 * 8) for _ in range(3))
    stream = backend.new_stream(1)
    work = Work(stream, lambda: backend.gemm(stream, dtype, 64, a, b, c), 2)
    sample = backend.time_sample([work], gate=False, hold_us=0)

    calls = [entry for entry in fake.log if entry[0] == "gemmEx"]
    assert [(device, on) for _, device, on, _, _ in calls] == [(1, stream.ptr)] * 2
    assert sample.seconds == (pytest.approx(0.006),)  # both multiplies inside the events
    data, compute = GEMM_TYPES[dtype]
    args = calls[0][4]
    assert args[:5] == (0, 0, 64, 64, 64)  # no transposes, m = n = k
    assert args[6:9] == (b.data.ptr, data, 64) and args[9:12] == (a.data.ptr, data, 64)
    assert args[13:] == (c.data.ptr, data, 64, compute, -1)


# -- the barrier: O(streams) event waits per sample --------------------------------------------


def _waits(fake):
    return sum(1 for entry in fake.log if entry[0] == "wait")


# Catches: every stream waiting on every other stream's warm-up (n(n-1) waits: 3,080 for
# p2p_all_pairs's 56 streams on 8 GPUs, Python issue time inside the gate's hold)
def test_a_sample_of_56_streams_on_8_gpus_waits_o_streams_times_not_their_square():
    backend, fake = _backend(devices=8, memory_bytes=1 << 20)
    arrays = [backend.device_array(d, 64) for d in range(8)]
    works = []
    for writer in range(8):
        for reader in range(8):
            if reader != writer:
                stream = backend.new_stream(writer)
                works.append(Work(stream, lambda s=stream, w=writer, r=reader: backend.copy(
                    arrays[r], arrays[w], 64, s), 2, warmup=1))
    assert len(works) == 56
    before = _waits(fake)
    backend.time_sample(works, gate=True, hold_us=2000)
    waits = _waits(fake) - before
    # The gate (56), the barrier stream on every warm-up (56), every stream on the barrier
    # (56), the final event on the others' ends (55): 223, where n(n-1) made 3,246.
    assert waits == 4 * 56 - 1


def test_behind_the_barrier_every_timed_part_starts_after_the_longest_warm_up():
    """Six streams of one GPU whose warm-ups last 5 to 10 ms: every timed part starts at
    one instant, after the longest, and holds only its own copies."""
    backend, fake = _backend(devices=1, copy_ms=1.0, cold_ms=4.0)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    streams = [backend.new_stream(0) for _ in range(6)]
    works = [Work(s, lambda s=s: backend.copy(a, b, 64, s), 3, warmup=1 + index)
             for index, s in enumerate(streams)]
    sample = backend.time_sample(works, gate=True, hold_us=2000)
    assert sample.starts_s == (0.0,) * 6
    assert sample.seconds == (pytest.approx(3e-3),) * 6
    assert sample.total_s == pytest.approx(3e-3)
    # Every stream, the first too: the gate, its warm-up, its ready event, the barrier, its
    # start; the barrier (the gate stream) waits on all six ready events, then records.
    assert _queue(fake, streams[0])[:5] == ["wait", "copy", "record", "wait", "record"]
    assert _queue(fake, streams[3])[:8] == ["wait", "copy", "copy", "copy", "copy", "record",
                                            "wait", "record"]
    gate = backend._gate_streams[0]
    assert _queue(fake, gate) == ["hold", "record"] + ["wait"] * 6 + ["record"]


# Catches: the first stream recording its start right after the warm-ups while the others
# start one event hop after it (total_s then holds that hop on top of the final's own)
def test_every_stream_starts_one_hop_after_the_barrier_the_first_included():
    """Three streams of one GPU, copies of 1 ms, an event reaching a waiting stream 0.5 ms
    after it completes: all three start together, and the sample on one clock is their
    3 ms and the final event's one hop."""
    backend, _fake = _backend(devices=1, copy_ms=1.0, hop_ms=0.5)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    streams = [backend.new_stream(0) for _ in range(3)]
    works = [Work(s, lambda s=s: backend.copy(a, b, 64, s), 3, warmup=1) for s in streams]
    sample = backend.time_sample(works, gate=True, hold_us=2000)
    assert sample.starts_s == (0.0,) * 3
    assert sample.seconds == (pytest.approx(3e-3),) * 3
    assert sample.total_s == pytest.approx(3.5e-3)


# -- deadlines: no wait on a GPU hangs the run ----------------------------------------------


class _FakeClock:
    """time.monotonic and time.sleep for the backend: sleeping moves the clock on."""

    def __init__(self):
        self.now = 1000.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _stalled_pair_sample(backend, fake, warmup):
    """Four GPUs copying to their neighbour (gpu0 -> gpu1 ...); with the link between gpu2
    and gpu3 stalled, the gpu2 -> gpu3 copy never finishes."""
    arrays = [backend.device_array(d, 64) for d in range(4)]
    streams = [backend.new_stream(d) for d in range(4)]
    works = [Work(s, lambda s=s, d=d: backend.copy(arrays[(d + 1) % 4], arrays[d], 64, s), 2,
                  warmup=warmup) for d, s in enumerate(streams)]
    return works


# Catches: end.synchronize() / final.synchronize() without a deadline (a stalled peer copy
# hangs the run), or a timeout that blames the streams held behind the stall
@pytest.mark.parametrize(("warmup", "held"), [(0, "gpu0: its stream waits"),
                                              (1, "gpu0, gpu1: their streams wait")])
def test_a_copy_that_never_finishes_ends_the_sample_at_its_deadline_naming_it(warmup, held):
    """Without warm-ups only the final event (gpu0) waits behind the stalled copy; with them
    the barrier holds every stream behind it: those GPUs would hang a synchronise too."""
    from bwprof.gpu.runtime import GpuTimeout

    backend, fake = _backend(devices=4, memory_bytes=1 << 20)
    clock = _FakeClock()
    backend._clock, backend._sleep = clock.clock, clock.sleep
    backend.deadline_s = 12.0
    works = _stalled_pair_sample(backend, fake, warmup)
    fake.stall(2, 3, link=True)
    begun = clock.now
    with pytest.raises(GpuTimeout) as raised:
        backend.time_sample(works, gate=True, hold_us=2000)
    assert str(raised.value) == ("gpu2 -> gpu3 copy did not finish within 12 s; gpu2, gpu3 "
                                 f"not used again in this run (nor {held} behind that work)")
    wedged = {0, 2, 3} if warmup == 0 else {0, 1, 2, 3}
    assert set(raised.value.devices) == wedged
    assert 12.0 <= clock.now - begun <= 12.0 + 0.01  # polled up to the deadline, no longer
    assert set(backend.wedged) == wedged
    assert not [e for e in fake.log if e[0] == "hung"]


def test_after_a_timeout_release_skips_the_wedged_gpus_and_keeps_pinned_memory():
    """release() synchronised every GPU it had opened: a wedged one never answers. The
    others are still synchronised and freed; pinned memory (cudaFreeHost synchronises) is
    kept."""
    from bwprof.gpu import runtime

    backend, fake = _backend(devices=4, memory_bytes=1 << 20)
    clock = _FakeClock()
    backend._clock, backend._sleep = clock.clock, clock.sleep
    host = backend.host_array(64, pinned=True)
    works = _stalled_pair_sample(backend, fake, 0)
    fake.stall(2, 3, link=True)
    with pytest.raises(runtime.GpuTimeout):
        backend.time_sample(works, gate=True, hold_us=2000)
    assert any(kept is host for kept in runtime._NEVER_FREED)
    backend.release()
    synced = sorted(e[1] for e in fake.log if e[0] == "deviceSynchronize")
    assert synced == [1]  # gpu0's stream waits behind the stalled copy too
    assert not [e for e in fake.log if e[0] == "hung"]
    runtime._NEVER_FREED.clear()


def test_a_blocking_copy_of_a_gpu_that_stalled_unseen_ends_at_the_deadline():
    """A download (deviceSynchronize, then cudaMemcpy) waits in a helper thread: on a GPU
    whose stream stalled it ends at the deadline with the GPU wedged, instead of hanging;
    the next call to that GPU fails at once."""
    from bwprof.gpu.runtime import GpuTimeout

    backend, fake = _backend(devices=2, memory_bytes=1 << 20)
    backend.deadline_s = 0.05
    array = backend.device_array(1, 64)
    stream = backend.new_stream(1)
    fake.stall(1)
    backend.copy(array, backend.device_array(1, 64), 64, stream)  # never finishes
    try:
        with pytest.raises(GpuTimeout, match=r"^gpu1 -> host download did not finish within "
                                             r"0\.05 s; gpu1 not used again in this run$"):
            backend.download(array, 64)
        assert set(backend.wedged) == {1}
        with pytest.raises(GpuTimeout, match="gpu1 stopped answering earlier in this run"):
            backend.upload(array, np.zeros(8, dtype=np.uint8))
        assert [e[1] for e in fake.log if e[0] == "hung"] == ["deviceSynchronize"]
    finally:
        fake.unblock.set()  # lets the helper thread go


def test_a_gpu_error_is_raised_at_once_not_waited_out():
    """cudaEventQuery answers an error (not 'not ready') for work that failed: the sample
    raises it, naming the work, instead of polling until the deadline."""
    backend, fake = _backend(devices=1)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    stream = backend.new_stream(0)
    fake.cupy.cuda.runtime.eventQuery = lambda pointer: 700  # cudaErrorIllegalAddress
    with pytest.raises(RuntimeError, match=r"^gpu0 -> gpu0 copy failed: cudaError700 \(700\)$"):
        backend.time_sample([Work(stream, lambda: backend.copy(a, b, 64, stream), 1)],
                            gate=False, hold_us=0)


# Catches: pinned host memory made after a GPU wedged freed later in the main thread
# (cudaFreeHost synchronises: it would wait on the stalled GPU for ever)
def test_pinned_memory_made_after_a_wedge_is_never_freed():
    from bwprof.gpu import runtime

    backend, fake = _backend(devices=2, memory_bytes=1 << 20)
    backend.deadline_s = 0.05
    array = backend.device_array(1, 64)
    fake.stall(1)
    backend.copy(array, backend.device_array(1, 64), 64, backend.new_stream(1))
    try:
        with pytest.raises(runtime.GpuTimeout):
            backend.download(array, 64)
        later = backend.host_array(64, pinned=True)
        assert any(kept is later for kept in runtime._NEVER_FREED)
    finally:
        fake.unblock.set()
        runtime._NEVER_FREED.clear()


# Catches: the stream's last work kept as the arrays themselves (a sweep's dropped buffer
# stays alive until the stream's next copy: about 3N bytes held where 2N were planned)
def test_what_a_stream_is_doing_keeps_no_buffer_alive():
    import gc
    import weakref

    backend, _fake = _backend(devices=2, memory_bytes=1 << 20)
    stream = backend.new_stream(0)
    src, dst = backend.device_array(0, 64), backend.device_array(1, 64)
    host = backend.host_array(64, pinned=False)
    backend.copy(dst, src, 64, stream)
    gone = weakref.ref(src)
    del src
    gc.collect()
    assert gone() is None
    assert backend._described(stream) == ("gpu0 -> gpu1 copy", (0, 1))
    backend.copy(host, dst, 64, stream)
    assert backend._described(stream) == ("gpu1 -> host copy", (0, 1))


# Catches: a poll interval that grows to its maximum in one phase and stays there for the
# next (and a maximum of 1 ms: back-to-back counter-window batches left the GPU idle ~5%)
def test_polling_starts_close_again_in_each_phase_and_never_pauses_long():
    from bwprof.gpu import runtime

    backend, fake = _backend(devices=1)
    clock = _FakeClock()
    pauses = []

    def sleep(seconds):
        pauses.append(seconds)
        clock.sleep(seconds)

    backend._clock, backend._sleep = clock.clock, sleep
    answers = {}

    def query(pointer):
        answers[pointer] = answers.get(pointer, 0) + 1
        return 0 if answers[pointer] > 8 else 600  # ready at the ninth poll

    fake.cupy.cuda.runtime.eventQuery = query
    first, second = SimpleNamespace(ptr=1), SimpleNamespace(ptr=2)
    stream = backend.new_stream(0)
    backend._await([[(first, stream)], [(second, stream)]])
    assert len(pauses) == 16
    assert max(pauses) <= runtime.POLL_MAX_S <= 200e-6
    assert pauses[8] == runtime.POLL_FIRST_S  # the second phase starts close again


# Catches: release() giving up on the other GPUs after a sticky error (Xid 13/43: the
# synchronise raises CUDARuntimeError), the error landing in the next case instead
def test_release_goes_on_past_a_gpu_whose_synchronise_raises(caplog):
    backend, fake = _backend(devices=3, memory_bytes=1 << 20)
    for device in range(3):
        backend.device_array(device, 64)
    synchronise = fake.cupy.cuda.runtime.deviceSynchronize

    def failing():
        if fake.current == 1:
            raise fake.cupy.cuda.runtime.CUDARuntimeError(700)
        synchronise()

    fake.cupy.cuda.runtime.deviceSynchronize = failing
    backend.release()  # raises nothing
    assert sorted(e[1] for e in fake.log if e[0] == "deviceSynchronize") == [0, 2]
    assert [r.getMessage() for r in caplog.records if "gpu1 release failed" in r.getMessage()]


# Catches: a wedge of no GPU (the pinned pool's release) saying "; not used again" of nothing
def test_a_stalled_pinned_pool_release_names_the_pool():
    from bwprof.gpu.runtime import GpuTimeout

    backend, _fake = _backend(devices=1)
    with pytest.raises(GpuTimeout, match=r"^pinned host memory release did not finish within "
                                         r"1 s; the pinned host memory pool is kept, not "
                                         r"freed, in this run$"):
        backend._wedge("pinned host memory release did not finish within 1 s", ())


# Catches: a blocking copy bounded by the job's deadline alone (a 1 GiB upload over a link
# trained down to Gen1 x1 takes seconds: taken for a wedge)
def test_a_blocking_copy_gets_its_bytes_at_the_slowest_link_on_top_of_the_deadline():
    """A 100 MB copy that takes 0.2 s under a 0.05 s deadline: its bytes at 0.2 GB/s add
    0.5 s, so it is not a wedge; a call of no bytes that long is."""
    import time

    from bwprof.gpu import runtime

    backend, _fake = _backend(devices=2)
    backend.deadline_s = 0.05
    assert runtime.SLOWEST_COPY_GBPS == 0.2
    assert backend._bounded((0,), "a copy", lambda: time.sleep(0.2) or 7,
                            nbytes=100_000_000) == 7
    assert not backend.wedged
    with pytest.raises(runtime.GpuTimeout, match=r"^a sync did not finish within 0\.05 s"):
        backend._bounded((1,), "a sync", lambda: time.sleep(0.2))


# Catches: a per-stream call count that leaves out the barrier's and the final event's waits
# (STREAM_CALLS 8): the operation ceiling would let a sample's enqueue outrun the gate
@pytest.mark.parametrize("streams", [2, 7])
def test_a_samples_calls_besides_its_operations_are_what_sampling_counts(streams):
    from bwprof.gpu.sampling import SAMPLE_CALLS, STREAM_CALLS

    backend, fake = _backend(devices=1)
    a, b = backend.device_array(0, 64), backend.device_array(0, 64)
    works = []
    for _ in range(streams):
        stream = backend.new_stream(0)
        works.append(Work(stream, lambda s=stream: backend.copy(a, b, 64, s), 2, warmup=1))
    events, waits = len(fake.events), _waits(fake)
    backend.time_sample(works, gate=True, hold_us=2000)
    records = sum(1 for queue in fake.queues.values() for entry in queue
                  if entry[0] == "record")
    calls = (len(fake.events) - events) + records + (_waits(fake) - waits) + 1  # the hold
    # Every stream but the first is waited on by the final event: one call fewer.
    assert calls == streams * STREAM_CALLS + SAMPLE_CALLS - 1
