import numpy as np

from bwprof.gpu import buffers
from bwprof.gpu.buffers import (
    BufferPool,
    device_mismatches,
    fill_pattern,
    host_mismatches,
    upload_pattern,
)
from bwprof.gpu.devices import describe
from bwprof.gpu.sim import SimBackend


def test_pattern_is_non_trivial_and_not_periodic_in_powers_of_two():
    host = np.zeros(3 << 20, dtype=np.uint8)
    fill_pattern(host, host.size)
    assert len(np.unique(host[:4096])) > 200
    assert not np.array_equal(host[: 1 << 20], host[1 << 20 : 2 << 20])
    assert host_mismatches(host, host.size) == 0
    host[12345] ^= 0xFF
    assert host_mismatches(host, host.size) == 1


def test_device_pattern_round_trip_in_chunks(monkeypatch):
    monkeypatch.setattr(buffers, "CHUNK", 3 * buffers.PATTERN_PERIOD)
    buffers.chunk_pattern.cache_clear()
    try:
        backend = SimBackend(memory_bytes=16 << 20)
        pool = BufferPool(backend)
        array = backend.device_array(0, 7 << 20)
        upload_pattern(backend, array, 7 << 20, seed=1)
        assert device_mismatches(pool, array, 7 << 20, seed=1) == 0
        assert device_mismatches(pool, array, 7 << 20, seed=0) > 0  # another path's pattern
        backend.upload(array, np.zeros(3, dtype=np.uint8), offset=5 << 20)
        assert device_mismatches(pool, array, 7 << 20, seed=1) > 0
    finally:
        buffers.chunk_pattern.cache_clear()


def test_pool_reuses_and_grows_buffers():
    backend = SimBackend(devices=1, memory_bytes=8 << 20)
    pool = BufferPool(backend)
    first = pool.device(0, 1 << 20)
    assert pool.device(0, 1 << 19) is first
    grown = pool.device(0, 4 << 20)
    assert grown is not first and grown.nbytes == 4 << 20
    del first
    assert backend.free_memory(0) == 4 << 20  # the old buffer was dropped
    device = describe(backend)[0]
    assert pool.host(device, 100, pinned=True) is pool.host(device, 50, pinned=True)
    assert pool.stream(0) is pool.stream(0)
    pool.release()
    del grown
    assert backend.free_memory(0) == 8 << 20


def test_host_buffers_of_other_gpus_are_dropped():
    backend = SimBackend()
    pool = BufferPool(backend)
    first, second = describe(backend)
    kept = pool.host(second, 64, pinned=True)
    pool.host(first, 64, pinned=True)
    pool.drop_host_except(second.index)
    assert pool.host(second, 64, pinned=True) is kept
    assert [k for k in pool._arrays if k[0] == "host"] == [("host", 1, True, 0)]


def test_device_buffers_outside_the_kept_slots_are_freed():
    backend = SimBackend(devices=2, memory_bytes=8 << 20)
    pool = BufferPool(backend)
    kept = pool.device(0, 1 << 20, slot=3)
    pool.device(0, 1 << 20, slot=1)
    other_gpu = pool.device(1, 1 << 20, slot=1)
    pool.keep_device_slots(0, (0, 3))
    assert pool.device(0, 1 << 20, slot=3) is kept
    assert pool.device(1, 1 << 20, slot=1) is other_gpu  # another GPU's buffers stay
    assert pool.device_bytes(0) == 1 << 20
    assert backend.free_memory(0) == 7 << 20


def test_a_host_buffer_off_its_node_is_reported_until_it_is_replaced(monkeypatch):
    """Host buffers are read back after allocation; only buffers held now count."""
    from dataclasses import replace

    shares = iter([0.3, 1.0, 0.5])
    monkeypatch.setattr(buffers, "node_share", lambda arrays, node: next(shares))
    pool = BufferPool(SimBackend(devices=1))
    device = replace(describe(pool.backend)[0], numa_node=0, cpus=frozenset({0}))
    pool.host(device, 1 << 10, pinned=True)
    assert pool.off_node_share(0) == 0.3
    pool.host(device, 1 << 12, pinned=True)  # grown: a new buffer, placed on the node
    assert pool.off_node_share(0) is None
    pool.host(device, 1 << 10, pinned=False)  # the pageable one landed half elsewhere
    assert pool.off_node_share(0) == 0.5
    pool.release()
    assert pool.off_node_share(0) is None
    monkeypatch.setattr(buffers, "node_share", lambda arrays, node: None)  # not located
    pool.host(device, 1 << 10, pinned=True, slot=1)
    assert pool.placement_unread(0) and pool.off_node_share(0) is None
    assert not pool.placement_unread(1)  # another GPU's buffers are its own
    pool.drop_host_except(1)
    assert not pool.placement_unread(0)
    pool.host(device, 1 << 10, pinned=True, slot=1)
    monkeypatch.setattr(buffers, "node_share", lambda arrays, node: 1.0)
    pool.host(device, 1 << 14, pinned=True, slot=1)  # grown: the new buffer is read back
    assert not pool.placement_unread(0)
    monkeypatch.setattr(buffers, "node_share", lambda arrays, node: None)
    pool.host(device, 1 << 10, pinned=True, slot=2)
    pool.release()
    assert not pool.placement_unread(0)
    unplaced = describe(pool.backend)[0]  # no NUMA node known: nothing to read back
    pool.host(unplaced, 1 << 10, pinned=True)
    assert pool.off_node_share(0) is None and not pool.placement_unread(0)


# Catches: a download that timed out into the shared staging buffer landing later while the
# same buffer checks another GPU's bytes (a false `invalid`)
def test_a_check_whose_download_timed_out_gets_a_fresh_staging_buffer():
    import pytest

    from bwprof.gpu.runtime import CudaBackend, GpuTimeout
    from tests.gpu.fake_cuda import FakeCuda

    fake = FakeCuda(devices=2, memory_bytes=4 << 20)
    backend = CudaBackend(cupy=fake.cupy, numba_cuda=fake.numba_cuda)
    backend.deadline_s = 0.05
    pool = BufferPool(backend)
    stuck = backend.device_array(1, 1 << 20)
    fake.stall(1)
    backend.copy(stuck, backend.device_array(1, 1 << 20), 64, backend.new_stream(1))
    first = pool.staging()
    try:
        with pytest.raises(GpuTimeout):
            device_mismatches(pool, stuck, 1 << 20)
        assert pool.staging() is not first
    finally:
        fake.unblock.set()
