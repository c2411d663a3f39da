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


class _ColdClock:
    """A fake perf_counter: every op advances it 1 ms, the first op of each sample on a stream
    4 ms more (a cold engine, as the first copy behind a gate)."""

    def __init__(self):
        self.now, self.warm = 0.0, set()

    def __call__(self):
        return self.now

    def op(self, stream):
        self.now += 1e-3 if stream in self.warm else 5e-3
        self.warm.add(stream)


# Catches: warm-up ops issued inside the timed part (or not at all)
def test_warm_up_ops_run_untimed_before_every_timed_part(monkeypatch):
    from bwprof.gpu import sim

    clock = _ColdClock()
    monkeypatch.setattr(sim.time, "perf_counter", clock)

    class ColdSim(SimBackend):
        def time_sample(self, works, gate, hold_us):
            clock.warm.clear()  # each sample starts cold behind its gate
            return super().time_sample(works, gate, hold_us)

    backend = ColdSim(devices=1)
    streams = [backend.new_stream(0), backend.new_stream(0)]
    works = [Work(s, (lambda s=s: clock.op(s)), 3) for s in streams]
    cold = backend.time_sample(works, gate=True, hold_us=1)
    assert cold.seconds == pytest.approx((7e-3, 7e-3))  # 5 + 1 + 1: start-up in the figure
    warmed = backend.time_sample([Work(w.stream, w.enqueue, 3, warmup=1) for w in works],
                                 gate=True, hold_us=1)
    assert warmed.seconds == pytest.approx((3e-3, 3e-3))  # 3 x 1 ms: start-up left out
    assert warmed.starts_s[1] == pytest.approx(warmed.ends_s[0])  # still one after another


def test_through_take_samples_the_first_sample_is_the_rest_and_start_up_is_out(monkeypatch):
    from bwprof.gpu import sampling, sim

    clock = _ColdClock()
    monkeypatch.setattr(sim.time, "perf_counter", clock)

    class ColdSim(SimBackend):
        def time_sample(self, works, gate, hold_us):
            clock.warm.clear()
            return super().time_sample(works, gate, hold_us)

    backend = ColdSim(devices=1)
    stream = backend.new_stream(0)

    def works(ops):
        return [Work(stream, lambda: clock.op(stream), ops)]

    sampled = sampling.take_samples(backend, works, samples=5, gate=True)
    assert sampled.per_stream_s[0] == pytest.approx((1e-3,) * 5)  # every sample, the first too
    monkeypatch.setattr(sampling, "WARMUP_OPS", 0)  # as before: no warm-up behind the gate
    before = sampling.take_samples(backend, works, samples=5, gate=True)
    assert before.per_stream_s[0][0] > 1.5e-3  # the start-up sat in every timed sample
