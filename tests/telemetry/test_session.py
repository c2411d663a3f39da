"""A run's telemetry following its jobs: tagged samples, and no reads through host jobs."""

from __future__ import annotations

from dataclasses import fields

import pytest

from bwprof.cases import get_case
from bwprof.casespec import CaseSpec
from bwprof.measurement import Job
from bwprof.telemetry.health import HealthWatch
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
    from tests.store.test_export import make_row

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


# Catches: every health poll around a job reading every GPU, though the job uses one (on
# eight GPUs, 8x the NVML calls of a one-GPU job)
def test_a_jobs_health_polls_read_only_the_gpus_it_uses():
    from bwprof.telemetry.counters import CounterReader
    from bwprof.telemetry.nvml import Nvml
    from bwprof.telemetry.session import TelemetrySession, job_gpus
    from tests.telemetry.fakes import counter_pynvml

    buses = ("00000000:1B:00.0", "00000000:1C:00.0", "00000000:1D:00.0")
    ecc = {"corrected_volatile": 0, "uncorrected_volatile": 0}
    fake = counter_pynvml({bus: {"ecc": dict(ecc), "remapped": [0, 0, 0, 0]} for bus in buses})
    reader = CounterReader(Nvml(fake), [(f"gpu{i}", bus) for i, bus in enumerate(buses)])
    session = TelemetrySession(reader, interval_s=10.0)
    session.health = HealthWatch(reader.nvml, reader.handles())
    every = {"gpu0", "gpu1", "gpu2"}
    for job, expected in [(Job("h2d_pinned", 1 << 20, device=1), {"gpu1"}),
                          (Job("p2p_copy", 1 << 20, device=0, peer=2), {"gpu0", "gpu2"}),
                          (Job("one_to_all", 1 << 20, device=0, streams=2), every),
                          (Job("h2d_all", 1 << 20), every)]:
        case = get_case(job.case)
        assert job_gpus(job, case, ["gpu0", "gpu1", "gpu2"]) == expected, job.case
        plain = CaseSpec(**{f.name: getattr(case, f.name) for f in fields(CaseSpec)})
        assert (job_gpus(job, plain, ["gpu0", "gpu1", "gpu2"]) or every) == expected
        asked = len(fake.calls)
        session.job_started(job, case)
        session.job_finished(job)
        read = {f"gpu{str(args[0])[1:]}" for name, args in fake.calls[asked:]
                if name == "nvmlDeviceGetTotalEccErrors"}
        assert read == expected, job.case
    session.sampler.stop()
