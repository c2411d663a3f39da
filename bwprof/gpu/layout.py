"""What a GPU case's declaration and its expand and needs functions (`bwprof.gpu.cases`) share
with the run functions: buffer slots, phase counts, sizes and dtypes swept, a job's memory
footprint. Plain data here, so the catalogue imports no measuring module (the contract
`layers` in pyproject.toml); those modules import it from here."""

from __future__ import annotations

from dataclasses import dataclass

from bwprof.gpu.kernel_params import STATE_SLOTS
from bwprof.units import MiB


@dataclass(frozen=True)
class Footprint:
    """Bytes a job allocates: on each GPU it uses, and in host memory for each of them."""

    device_bytes: int
    host_bytes: int = 0


DEVICE_MEMORY_SHARE = 0.9
"""A job may take at most this share of a GPU's free memory (the rest is the driver's)."""

ONE_WAY_PAIR_SLOTS = ((0,), (1,))
BOTH_WAYS_PAIR_SLOTS = ((0, 3), (1, 2))
"""Device buffer slots a pair job uses on (its first GPU, its second): a path from slot s reads
slot s on its source and writes slot s + 1 on its target; both ways at once, the way back
starts at slot 2. A GPU is source in one pair and target in the next, so the executor drops the
slots of its other role before each pair: it never holds more than the job needs."""

CHAIN_SLOT, STATE_SLOT, LOAD_SRC_SLOT, LOAD_DST_SLOT = 0, 1, 2, 3
"""A latency chase's device buffers: the chain, the state, the load kernel's two arrays."""
LATENCY_PAIR_SLOTS = ((STATE_SLOT,), (CHAIN_SLOT,))
"""lat_p2p: the chasing GPU holds the state, the peer the chain."""

LOAD_FRACTIONS = (0.0, 1 / 8, 1 / 4, 1 / 2, 1.0)
"""lat_gpu_loaded's intensities: the share of (all SMs but one) whose worth of blocks the
load kernel launches; 0 is the chase alone."""

MEMCPY_DIRECTIONS = ("h2d", "d2h", "within")
"""lat_memcpy's copies, one phase each."""

H2D_STRIDE_BYTES = 2 * MiB
"""lat_h2d's headline chain: nvbandwidth's host_device_latency_sm buffer (2 MiB of pinned
host memory, a node every 128 bytes, walked in address order): its pages stay in the GPU's
TLB, so a load is the link's round trip."""

CHAIN_ELEMENT_BYTES = 8
"""A link: one uint64 device address at the start of its node; the rest of the node is 0."""
STATE_BYTES = STATE_SLOTS * CHAIN_ELEMENT_BYTES
"""A chase's state array on the GPU (position, generation, ...)."""
MEMCPY_BYTES = 16
"""lat_memcpy's copy: one int4, as cuda-samples' p2pBandwidthLatencyTest times its latency
matrix (`numElems = 4; // perform 1-int4 transfer`)."""

ELEMENT_BYTES = 8
"""The HBM STREAM kernels' element: float64."""
PIPELINE_STREAMS = (1, 2, 4)
"""pipeline_chunked's stream counts."""

GEMM_DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16")
"""What `gemm_gpu` measures, in order: tf32 is fp32 storage with tensor cores allowed to round
the inputs to TF32 (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32)."""
GEMM_SIZES: dict[str, tuple[int, ...]] = {
    "quick": (256, 1024, 4096),
    "standard": (1024, 2048, 4096, 8192, 16384),
    "full": (512, 1024, 2048, 4096, 8192, 16384, 32768),
}
"""Matrix orders by preset, the most a sweep tries: sizes that do not fit in the device's
memory share are left out, and a sweep stops earlier where its figure plateaus
(`bwprof.gpu.compute.PLATEAU_RISE`). cuBLAS on an H100/H200 plateaus by 8192 for every dtype."""
FMA_DTYPES: tuple[str, ...] = ("fp32", "fp64")
"""What `fma_gpu` measures."""
