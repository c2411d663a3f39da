"""A run's telemetry following its jobs: tagged samples, and no reads through host jobs."""

from __future__ import annotations

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
