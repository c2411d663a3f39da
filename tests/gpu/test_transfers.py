"""The transfer cases through the real runner on the simulated backend, with hand-made
times where a figure is checked: peaks, aggregates, pairs, and sizes that do not fit."""

from dataclasses import replace

import pytest

from bwprof.gpu.backend import OutOfMemory, Sample
from bwprof.gpu.devices import describe
from bwprof.gpu.executor import GpuExecutor
from bwprof.gpu.sim import SimBackend
from bwprof.units import MiB
from tests.gpu.test_executor import _run_executor


def _run_rows(backend, cases, devices=None, host_memory_bytes=8 << 30):
    """Every row of `cases` on `backend` through the real runner (quick preset, 2 repeats)."""
    executor = GpuExecutor(backend, devices or describe(backend),
                           host_memory_bytes=host_memory_bytes)
    return _run_executor(executor, cases)


class ClockedBackend(SimBackend):
    """The simulated backend with hand-made times: every op of a copy stream takes
    `copy_s[device]`, every op of a kernel stream `kernel_s`; streams overlap fully."""

    def __init__(self, copy_s, kernel_s=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.copy_s, self.kernel_s = copy_s, kernel_s

    def copy(self, dst, src, nbytes, stream):
        stream.kind = "copy"
        super().copy(dst, src, nbytes, stream)

    def launch(self, kernel, stream, *args):
        stream.kind = "kernel"
        super().launch(kernel, stream, *args)

    def time_sample(self, works, gate, hold_us):
        for work in works:
            for _ in range(work.ops):
                work.enqueue()
        seconds = tuple(
            work.ops * (self.kernel_s if getattr(work.stream, "kind", "") == "kernel"
                        else self.copy_s[work.stream.device_id])
            for work in works)
        return Sample(seconds, tuple(0.0 for _ in works), seconds, covered=True)


# Catches: bidir_pinned's "both" row gets one direction's peak instead of
# twice it
def test_the_bidirectional_sum_row_is_held_against_twice_the_link_peak():
    backend = SimBackend(devices=1)
    devices = [replace(d, peak_pcie_gbps=1e6) for d in describe(backend)]
    rows = [r for r in _run_rows(backend, "bidir_pinned", devices) if r.status == "ok"]
    assert rows
    peaks = {(r.direction, r.peak_gbps) for r in rows}
    assert peaks == {("h2d", 1e6), ("d2h", 1e6), ("both", 2e6)}


# Catches: the aggregate across GPUs timed by the fastest GPU (min) instead of
# the slowest (max)
def test_an_aggregate_is_timed_by_its_slowest_gpu():
    backend = ClockedBackend({0: 1e-3, 1: 4e-3}, devices=2)
    rows = [r for r in _run_rows(backend, "h2d_all,p2p_bidir")
            if r.status == "ok" and r.size_bytes == MiB]
    by = {(r.case, r.device): r for r in rows}
    assert by[("h2d_all", "gpu0")].time_median_s == pytest.approx(1e-3)
    assert by[("h2d_all", "gpu1")].time_median_s == pytest.approx(4e-3)
    every = by[("h2d_all", "all")]
    assert every.time_median_s == pytest.approx(4e-3)
    assert every.gbps_best == pytest.approx(2 * MiB / 4e-3 / 1e9)
    assert by[("p2p_bidir", "gpu0<->gpu1")].time_median_s == pytest.approx(4e-3)


# Catches: peer access turned on only from source to destination, not back
def test_a_pair_whose_peer_access_is_refused_one_way_is_skipped_with_the_reason():
    class OneWayPeers(SimBackend):
        def enable_peer_access(self, device, peer):
            return device != 1  # gpu1 cannot reach gpu0's memory

    rows = _run_rows(OneWayPeers(devices=2), "p2p_copy")
    forward = [r for r in rows if r.device == "gpu0->gpu1" and r.size_bytes < 256 * MiB]
    assert forward and all(r.status == "skipped" for r in forward)
    assert all(r.note == "peer access is not supported from gpu1 to gpu0" for r in forward)


# Catches: d2d_copy counted as one device buffer instead of two in the fit
# check
def test_d2d_copy_needs_room_for_both_of_its_buffers():
    rows = _run_rows(SimBackend(devices=1, memory_bytes=34 * MiB), "d2d_copy")
    (row,) = [r for r in rows if r.size_bytes == 16 * MiB]
    assert row.status == "skipped"
    assert "16 MiB does not fit: needs 32 MiB on gpu0" in row.note


# Catches: host memory of h2d_all/d2h_all counted for one GPU, not for every
# GPU
def test_every_gpu_at_once_needs_a_host_buffer_per_gpu():
    rows = _run_rows(SimBackend(devices=2), "h2d_all", host_memory_bytes=3 * MiB)
    at_1mib = [r for r in rows if r.size_bytes == MiB]
    assert [(r.status, r.note) for r in at_1mib] == [
        ("skipped", "1 MiB does not fit: needs 2 MiB of host memory")]
    assert {r.status for r in rows if r.size_bytes == 64 << 10} == {"ok"}


# Catches: an allocation that fails (OutOfMemory) becomes an `error` row
# instead of `skipped`
def test_an_allocation_that_fails_is_a_skipped_row_not_an_error():
    class Fragmented(SimBackend):
        """Says it has room, then cannot allocate more than 8 MiB at once."""

        def free_memory(self, device):
            return 1 << 40

        def device_array(self, device, nbytes):
            if nbytes > 8 * MiB:
                raise OutOfMemory(f"gpu{device}: {nbytes} bytes requested (fragmented)")
            return super().device_array(device, nbytes)

    rows = _run_rows(Fragmented(devices=1), "h2d_pinned")
    big = [r for r in rows if r.size_bytes == 16 * MiB]
    assert [r.status for r in big] == ["skipped"]
    assert big[0].note.startswith("16 MiB does not fit: gpu0: 16777216 bytes requested")
    assert {r.status for r in rows if r.size_bytes == MiB} == {"ok"}


class HalfGated(SimBackend):
    """Every second sample's gate did not hold (`covered` False): its streams may have run
    apart, shown here as a sample lasting UNGATED_S on one clock."""

    UNGATED_S = 10.0

    def __init__(self, every=2, **kwargs):
        super().__init__(**kwargs)
        self.every, self.calls = every, 0

    def time_sample(self, works, gate, hold_us):
        sample = super().time_sample(works, gate, hold_us)
        self.calls += 1
        if self.calls % self.every:
            return sample
        return replace(sample, covered=False, total_s=self.UNGATED_S)


# Catches: bidir_pinned's `both` row taking every sample's time on one clock, the samples
# its gate did not cover among them (the other aggregates keep only covered ones)
def test_the_bidirectional_sum_keeps_only_samples_its_gate_covered(monkeypatch):
    from bwprof.gpu import sampling

    monkeypatch.setattr(sampling, "MAX_HOLD_US", sampling.HOLD_US)  # no retake: kept as is
    rows = [r for r in _run_rows(HalfGated(devices=1), "bidir_pinned")
            if r.status == "ok" and r.size_bytes == MiB]
    both = [r for r in rows if r.direction == "both"]
    assert len(both) == 1
    assert both[0].time_median_s < HalfGated.UNGATED_S / 1000 / both[0].ops_per_sample
    assert "started before all work was enqueued" in both[0].note
    never = [r for r in _run_rows(HalfGated(devices=1, every=1), "bidir_pinned")
             if r.status == "ok" and r.size_bytes == MiB]
    assert {r.direction for r in never} == {"h2d", "d2h"}
    assert all("aggregate not reported" in r.note for r in never)
