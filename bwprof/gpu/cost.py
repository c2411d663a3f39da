"""What a GPU job costs before it runs (`bwprof.costs`): the timed samplings it takes, its
buffers filled and checked on the host, and their memory, on the GPUs it uses.

A case declares which model fits it (`GpuCase.cost`; `sampled` where it says nothing) and
how many timed samplings a job takes (`GpuCase.phases`). Rates come from the device's
theoretical peaks where its description has them, at EFFICIENCY of them, else from the slow
machine `bwprof.costs` assumes. No GPU library is imported: the catalogue loads this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bwprof import costs
from bwprof.costs import Cost
from bwprof.gpu import sampling
from bwprof.gpu.devices import GpuDevice
from bwprof.measurement import Job
from bwprof.peaks import GEMM_UNIT, compute_peak_tflops

if TYPE_CHECKING:
    from bwprof.gpu.cases import GpuCase, Planner
    from bwprof.plan import Plan

EFFICIENCY = 0.7
"""The share of a theoretical peak a copy or kernel is assumed to reach."""
SM_CLOCK_MHZ = 1000.0
"""The SM clock a compute ceiling is assumed at (every data-center part boosts above it)."""
LINK_NS_PER_NODE = 15.0
"""Host work per chase node (one 128-byte line): its link computed (`Cycle.next_lines`: 2 GiB
of host chain, 32 Mi lines, took 0.33 s), laid out and uploaded."""
GPU_CACHE_LATENCY_NS = 300.0
"""A chase load that hits a GPU cache (L1 about 30 cycles, L2 about 250), rounded up."""
HOST_LINK_LATENCY_NS = 2000.0
"""A chase load from pinned host memory: a PCIe round trip, about 1-2 us (NVLink-C2C's is
shorter), taken at the top so the estimate is not short."""


def involved(case: GpuCase, planner: Planner, job: Job) -> list[GpuDevice]:
    """The GPUs a job uses (`GpuCase.gpus`: its own, its pair, or every one), its own
    first."""
    by_index = {d.index: d for d in planner.devices}
    return [by_index[i] for i in case.gpus(job, list(by_index)) if i in by_index]


def path_gbps(case: GpuCase, device: GpuDevice | None) -> float:
    """The rate one operation of the case moves its bytes at, GB/s, assumed."""
    def peak(value: float | None, fallback: float) -> float:
        return EFFICIENCY * value if value else fallback

    if case.memory == "pageable":
        return costs.PAGEABLE_GBPS
    if case.memory == "pinned":
        return peak(device.peak_pcie_gbps if device else None, costs.PINNED_GBPS)
    if case.direction in ("p2p", "both"):
        return peak(device.peak_nvlink_gbps if device else None, costs.PEER_GBPS)
    return peak(device.peak_hbm_gbps if device else None, costs.HBM_GBPS)


def samplings(op_s: float, repeats: int) -> float:
    """Seconds of one sampling (`sampling.take_samples`): a warm-up sample and `repeats`
    timed ones, each of K operations (about TARGET_SAMPLE_S, at most MAX_OPS) behind its
    untimed warm-up operations and the gate."""
    op_s = max(op_s, 1e-9)
    ops = max(1, min(sampling.MAX_OPS, math.ceil(sampling.TARGET_SAMPLE_S / op_s)))
    warmup = min(sampling.WARMUP_OPS, max(1, math.ceil(sampling.WARMUP_S / op_s)))
    return (repeats + 1) * ((ops + warmup) * op_s + costs.GPU_SAMPLE_OVERHEAD_S)


def _checked(case: GpuCase, job: Job, devices: Sequence[GpuDevice]) -> Cost:
    """The job's buffers, filled, moved and checked on the host, and their memory."""
    footprint = case.needs(case, job)
    # Each GPU the job is placed on holds its footprint (a pair both; an every-GPU job each
    # one); a pattern job's footprint (one_to_all's) is already all its peers' buffers.
    count = len([i for i in (job.device, job.peer) if i is not None]) or max(1, len(devices))
    handled = (footprint.device_bytes + footprint.host_bytes) * count
    return Cost(costs.GPU_JOB_S + handled / (costs.GPU_VALIDATE_GBPS * 1e9),
                host_bytes=footprint.host_bytes * count, device_bytes=footprint.device_bytes)


def sampled(case: GpuCase, job: Job, planner: Planner, plan: Plan) -> Cost:
    """A copy or STREAM kernel timed by `take_samples`, `case.phases` times: each operation
    moves the case's bytes at the path's rate; a GPU copying to several peers at once
    (`Job.streams`) shares its link among them."""
    devices = involved(case, planner, job)
    size = job.size_bytes or 0
    shared = job.streams if job.device is not None and job.streams else 1
    op_s = case.bytes_per_op(size) * shared / (path_gbps(case, devices[0] if devices
                                                         else None) * 1e9)
    checked = _checked(case, job, devices)
    return Cost(checked.seconds + case.phases * samplings(op_s, plan.repeats),
                checked.host_bytes, checked.device_bytes)


def chase(case: GpuCase, job: Job, planner: Planner, plan: Plan) -> Cost:
    """A latency chase (`bwprof.gpu.latency`): the chain linked on the host and copied in,
    the probe and the warm-up (a lap, at most WARM_CAP_S), then `case.phases` rows of
    `repeats` samples of about TARGET_SAMPLE_S. A chase through host memory (lat_h2d) pays
    a link round trip a load (HOST_LINK_LATENCY_NS), and its in-order headline chain's
    probe and lap as well as the random set's."""
    from bwprof.gpu import latency

    devices = involved(case, planner, job)
    size = job.size_bytes or 0
    nodes = size // latency.NODE_BYTES
    reach = devices[-1] if devices else None
    in_cache = reach is not None and size <= reach.properties.l2_bytes
    over_link = case.memory == "pinned"
    ns = (HOST_LINK_LATENCY_NS if over_link else GPU_CACHE_LATENCY_NS if in_cache
          else costs.GPU_DRAM_LATENCY_NS)
    chains = [nodes, latency.H2D_STRIDE_BYTES // latency.NODE_BYTES] if over_link else [nodes]
    build = sum(chains) * LINK_NS_PER_NODE * 1e-9
    warm = sum(min(n * ns * 1e-9, latency.WARM_CAP_S) + 2 * latency.PROBE_STEPS * ns * 1e-9
               for n in chains)
    timed = case.phases * plan.repeats * (latency.TARGET_SAMPLE_S + costs.GPU_SAMPLE_OVERHEAD_S)
    footprint = case.needs(case, job)  # the links are the host work: no buffer to check
    return Cost(costs.GPU_JOB_S + build + warm + timed, footprint.host_bytes,
                footprint.device_bytes)


def gemm(case: GpuCase, job: Job, planner: Planner, plan: Plan) -> Cost:
    """A matrix multiply per sample at the device's dense ceiling for the dtype (at
    SM_CLOCK_MHZ and EFFICIENCY), its inputs drawn on the host and checked."""
    from bwprof.gpu import matrices

    devices = involved(case, planner, job)
    dtype = job.dtype or "fp64"
    n = math.isqrt((job.size_bytes or 0) // matrices.itemsize(dtype))
    device = devices[0] if devices else None
    peak = (compute_peak_tflops(device.properties.compute_capability,
                                device.properties.multiprocessors, SM_CLOCK_MHZ,
                                GEMM_UNIT.get(dtype, dtype)) if device else None)
    rate = (EFFICIENCY * peak if peak else costs.GPU_TFLOPS) * 1e12
    inputs_s = 2 * n * n * 1e-8  # drawn and cast on the host, about 10 ns an element
    checked = _checked(case, job, devices)
    return Cost(checked.seconds + inputs_s + samplings(2.0 * n ** 3 / rate, plan.repeats),
                checked.host_bytes, checked.device_bytes)
