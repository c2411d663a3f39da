import numpy as np
import pytest

from bwprof.gpu.backend import OutOfMemory, Work
from bwprof.gpu.sim import SimBackend, SimDeviceArray
from bwprof.host import stream


def test_device_memory_is_accounted_and_freed():
    backend = SimBackend(devices=1, memory_bytes=1 << 20)
    array = backend.device_array(0, 1 << 19)
    assert isinstance(array, SimDeviceArray) and array.device_index == 0
    assert backend.free_memory(0) == 1 << 19
    with pytest.raises(OutOfMemory, match="gpu0"):
        backend.device_array(0, 1 << 20)
    del array
    assert backend.free_memory(0) == 1 << 20


def test_copies_between_host_and_devices():
    backend = SimBackend()
    host = backend.host_array(16, pinned=True)
    host[:] = np.arange(16, dtype=np.uint8)
    d0, d1 = backend.device_array(0, 16), backend.device_array(1, 16)
    backend.copy(d0, host, 16, backend.new_stream(0))
    backend.copy(d1, d0, 8, backend.new_stream(0))
    assert list(backend.download(d1, 8)) == list(range(8))
    backend.zero(d0, 16)
    assert not backend.download(d0, 16).any()
    backend.upload(d0, np.array([7, 7], dtype=np.uint8), offset=4)
    assert list(backend.download(d0, 3, offset=4)) == [7, 7, 0]


def test_kernels_are_the_host_stream_kernels():
    backend = SimBackend()
    views = [backend.kernel_view(backend.device_array(0, 8 * 64)) for _ in range(3)]
    s = backend.new_stream(0)
    backend.launch("init", s, *views, stream.INIT_A, stream.INIT_B, stream.INIT_C)
    backend.launch("triad", s, *views, stream.SCALAR)
    assert stream.check(stream.KERNELS["triad"], 1, *(np.asarray(v) for v in views)) == ""
    partial = backend.kernel_view(backend.device_array(0, 8 * 4))
    backend.launch("dot", s, views[0], views[1], partial)
    assert np.asarray(partial).sum() == pytest.approx(64 * 3.5 * 2.0)
    backend.launch("hold", s, 10)


def test_streams_run_one_after_another():
    backend = SimBackend()
    sample = backend.time_sample(
        [Work(backend.new_stream(0), lambda: None, 2), Work(backend.new_stream(1), lambda: None,
                                                             2)],
        gate=True, hold_us=1,
    )
    assert sample.covered
    assert sample.starts_s[1] == pytest.approx(sample.ends_s[0])
    assert all(s > 0 for s in sample.seconds)
