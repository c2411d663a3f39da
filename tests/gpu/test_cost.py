"""What a GPU job is estimated to cost (`bwprof.gpu.cost`), on a described H200 box."""

from __future__ import annotations

from bwprof import api, costs
from bwprof.gpu import cost, latency
from tests.shapes import shape


def test_a_host_link_chase_pays_a_round_trip_of_at_least_a_microsecond_a_load():
    """lat_h2d's loads cross PCIe (about 1-2 us each, not HBM's 800 ns): its estimate holds
    at least 1 us for every untimed load of both chains (two probes each, the 2 MiB headline's
    lap, the random set's lap up to its cap) beside the linking and the timed samples."""
    # lat_gpu first: what the run pays once (compiling, opening the GPU) is its first job's.
    planned = api.plan_run(machine=shape("h200-box"), preset="quick", cases="lat_gpu,lat_h2d")
    (work,) = [w for w in planned.estimate.work if w.case.key == "lat_h2d"]
    (job,), (estimated,) = work.jobs, work.costs
    plan = planned.plan
    random_lines = (job.size_bytes or 0) // latency.NODE_BYTES
    stride_lines = latency.H2D_STRIDE_BYTES // latency.NODE_BYTES
    loads_s = 1e-6 * (4 * latency.PROBE_STEPS + stride_lines)
    warm_s = loads_s + min(random_lines * 1e-6, latency.WARM_CAP_S)
    build_s = (random_lines + stride_lines) * cost.LINK_NS_PER_NODE * 1e-9
    timed_s = 2 * plan.repeats * (latency.TARGET_SAMPLE_S + costs.GPU_SAMPLE_OVERHEAD_S)
    assert estimated.seconds >= costs.GPU_JOB_S + build_s + warm_s + timed_s
    assert cost.HOST_LINK_LATENCY_NS >= 1000.0 > costs.GPU_DRAM_LATENCY_NS
