"""Buffer slots and phase counts that a GPU case's declaration (`bwprof.gpu.cases`) and its
run function both use: plain data here, so the case table is declared without importing
the measuring modules (`bwprof.gpu.transfers`, `bwprof.gpu.latency`), which re-export them."""

from __future__ import annotations

from bwprof.units import MiB

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
