"""A run's telemetry following its jobs: tagged samples, and no reads through host jobs."""

from __future__ import annotations

import pytest

from bwprof.cases import get_case
from bwprof.measurement import Job
from bwprof.telemetry.sampler import Sampler
from bwprof.telemetry.session import follow_job
from tests.telemetry.test_sampler import FakeTime


# Catches: the sampler reading NVML through the host DDR cases, taking CPU time from their
# STREAM threads (3% of ddr_triad on a 2-core VM, against a 1% bar)
def test_no_reads_through_host_or_network_jobs_and_reads_again_for_gpu_jobs():
    time = FakeTime()
    reads = []

    def read():
        reads.append(time.now)
        return [{"device": "gpu0"}]

    sampler = Sampler(read, 0.05, clock=time.clock)
    for job, expect_reads in [(Job("ddr_triad", 1 << 20, threads=2), 0),
                              (Job("h2d_pinned", 1 << 20, device=0), 3),
                              (Job("net_p2p", 1 << 20, ranks=(0, 1)), 0),
                              (Job("hbm_triad", 1 << 28, device=0), 3)]:
        follow_job(sampler, job, get_case(job.case).target)
        before = len(reads)
        sampler.run(wait=time.wait, max_ticks=3)
        assert len(reads) - before == expect_reads, job.case
    assert {s["case"] for s in sampler.samples} == {"h2d_pinned", "hbm_triad"}


# Catches: a row into one GPU ('all->gpu1', all_to_one) left without counters: the session
# joined only rows whose label starts with 'gpu', and 'all'
def test_a_row_into_one_gpu_gets_that_gpus_counters():
    from types import SimpleNamespace

    from bwprof.measurement import Measurement
    from bwprof.telemetry.session import TelemetrySession
    from tests.report.test_export import make_row

    time = FakeTime()
    reader = SimpleNamespace(read=lambda: [], clock=time.clock, c2c_devices=lambda: [],
                             labels=["gpu0", "gpu1"])
    session = TelemetrySession(reader, interval_s=0.05)
    session.samples.extend({"t_s": 0.1 * k, "device": "gpu1", "gpm_interval_s": 0.1,
                            "nvlink_rx_mibps": 1000.0} for k in range(3, 11))
    measurement = Measurement(seconds_per_op=(1e-3,), bytes_per_op=1 << 20,
                              size_bytes=1 << 20, device="all->gpu1", device_name="x",
                              direction="p2p", memory="hbm", valid=True)
    row = make_row(device="all->gpu1", direction="p2p", memory="hbm")
    counters = session.annotate(row, measurement, (0.0, 1.05)).counters
    assert counters.get("telemetry_samples") == 8
    assert counters.get("nvlink_rx_mibps_mean") == 1000.0
    assert counters.get("counter_gbps") == pytest.approx(1000 * (1 << 20) / 1e9)
