"""What a job costs before it runs: seconds and memory, from what bwprof assumes of a machine
it has not measured yet. The planner adds them up (`bwprof.estimate`) for `--dry-run`, the
progress line's ETA and `--budget`; each case's declaration says how its jobs cost (a
function beside the one that runs them), from the speeds below.

The speeds are deliberately those of a slow machine (a small VM, 4 KiB pages, a PCIe Gen4
link, a GPU's first contact with a process), so an estimate is what a run takes at most on
a box as it should be, not what it takes on a fast one: a run that takes much longer than
its estimate says something about the box. `benchmarks/plan_estimate.py` holds the host
estimate against a real run of this machine, as a ratio.

Neutral: imports nothing of bwprof, so every case module can use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """One job: seconds, host memory it holds, and device memory on the GPU holding most."""

    seconds: float
    host_bytes: int = 0
    device_bytes: int = 0

    def __add__(self, other: Cost) -> Cost:
        """Two steps one after the other: seconds add, memory is the larger."""
        return Cost(self.seconds + other.seconds, max(self.host_bytes, other.host_bytes),
                    max(self.device_bytes, other.device_bytes))


# -- the host ----------------------------------------------------------------------------------

PROCESS_BYTES = 600 << 20
"""What the bwprof process holds before any buffer: Python, NumPy, pandas, Numba and its
compiled kernels (about 450 MiB resident on the development VM), rounded up."""
START_S = 3.0
"""Starting up: importing pandas and Numba, reading the machine, the first system.json."""
FINISH_S = 1.5
"""The end of a run without plots: findings, summary.csv, the final system.json."""
PLOTS_S = 3.0
"""The plots and report.html at the end (3 s on the development VM for a host run; a run
with GPU rows draws more of them)."""
COMPILE_S = 4.0
"""Numba compiling (or loading from its cache) the kernels of one family the first time a
process runs them: the STREAM kernels, the chase, the load."""
HOST_JOB_S = 0.02
"""Bookkeeping of one host job: its row, the smaps read of its pages, the sink."""

DDR_THREAD_GBPS = 5.0
"""STREAM bandwidth one thread draws from DDR (the development VM's vCPUs draw 10 each)."""
DDR_NODE_GBPS = 50.0
"""The most one NUMA node gives all its threads together (the 16-vCPU H200 box drew 83)."""
FILL_GBPS = 1.0
"""First touch of new host memory by one thread: page faults, about 4 us a 4 KiB page in a
VM."""
POPULATE_GBPS = 2.0
"""A mapping faulted in by the kernel at once (MAP_POPULATE): 2 GiB took 1.2 s in a VM."""

CACHE_LATENCY_NS = {1: 2.0, 2: 6.0, 3: 40.0}
"""A dependent load served by each cache level (a VM's L3 included)."""
DRAM_LATENCY_NS = 300.0
"""A dependent load from DDR through 4 KiB pages: the TLB misses of a nested page walk in a
VM make it 150-600 ns; a bare-metal server takes 80-120."""
LINK_NS = 10.0
"""Writing one line's link (the cycle's bijection, computed per line)."""

HOST_GFLOPS_PER_THREAD = 15.0
"""A BLAS matrix multiply per thread, fp64 (fp32 about twice): an old AVX2 core."""


def ddr_bandwidth_gbps(threads: int, nodes: int) -> float:
    """What `threads` threads spread over `nodes` NUMA nodes draw from DDR, assumed."""
    return min(threads * DDR_THREAD_GBPS, max(1, nodes) * DDR_NODE_GBPS)


def chase_ns(level: str) -> float:
    """The assumed latency of a load from the level holding the working set ('L1', 'L2',
    'L3', 'DDR', '' unknown: DDR)."""
    if level.startswith("L") and level[1:].isdigit():
        return CACHE_LATENCY_NS.get(int(level[1:]), DRAM_LATENCY_NS)
    return DRAM_LATENCY_NS


# -- the network (net_p2p) -------------------------------------------------------------------

NET_GBPS = 3.0
"""An MPI message between nodes: 25 GbE gives about 3 GB/s (InfiniBand NDR 50, shared memory
between two ranks of one node several times that)."""
NET_ROUND_TRIP_S = 0.0005
"""The ready and acknowledgement messages of one sample, and its window's posting."""
NET_JOB_S = 0.05
"""One net_p2p job beside its samples: rank 0's go-ahead, the two ends' buffers, the
validation after the last sample, the sender's row."""


# -- GPUs --------------------------------------------------------------------------------------

GPU_OPEN_S = 3.0
"""Opening the GPUs: CUDA's context, CuPy's first kernels, Numba's CUDA JIT of the kernels
a run launches (a first contact with a GPU process pays this once, more on many GPUs; the
H200 box's quick run opened its GPU in about a second)."""
GPU_OPEN_PER_DEVICE_S = 0.5
GPU_JOB_S = 0.03
"""Bookkeeping of one GPU job: buffers from the pool, its row, the telemetry join."""
GPU_SAMPLE_OVERHEAD_S = 0.004
"""Per timed sample beside its work: the gate's hold (2 ms), enqueue, events, the sync."""
GPU_VALIDATE_GBPS = 6.0
"""Host-side work per byte a job's buffers hold (filled, uploaded, downloaded, compared), in
GB/s: an H200 box set up and checked three 256 MiB STREAM arrays (and their host copies)
in about 0.25 s."""

PINNED_GBPS = 20.0
"""A pinned copy over the host link (PCIe Gen4 x16 gives 25; Gen5 50)."""
PAGEABLE_GBPS = 8.0
"""A pageable copy, staged through the driver's pinned buffers (an H200 box: 8.5-17)."""
HBM_GBPS = 800.0
"""A device-memory copy or STREAM kernel (an L40S's GDDR6 gives 800, an H200's HBM 4,000)."""
PEER_GBPS = 20.0
"""A GPU-to-GPU copy over PCIe (NVLink gives ten to twenty times more)."""
GPU_TFLOPS = 10.0
"""A GPU's matrix multiply or FMA ceiling, any dtype: a low figure, so no sweep is cut short
by the estimate."""
GPU_DRAM_LATENCY_NS = 800.0
"""A dependent load of one GPU thread from HBM, or host memory over PCIe (1-2 us), assumed."""
