"""The numbers the CUDA kernels and the code that checks their results share, importable
without Numba (the case table and the checks load this; only launching needs the kernels)."""

from __future__ import annotations

from typing import TypeVar

import numpy as np

Start = TypeVar("Start", float, np.ndarray)

DOT_BLOCKS = 1024
"""Blocks of the dot kernel: it writes one partial sum per block, summed on the host."""
COMPUTE_SCALE = 1.0
COMPUTE_STEP = 2.0**-20
COMPUTE_MAX_ITERATIONS = (1 << 20) - 1
"""Inputs of 1.0 stay in [1, 2) up to here, where every step of 2^-20 is exact."""


def compute_gold(start: Start, iterations: int) -> Start:
    """What `compute` leaves in y for an input `start` (exact for start in [1, 2)); an
    array of inputs gives the array of results."""
    return start + iterations * COMPUTE_STEP


STATE_POSITION = 0
"""Slot of the latency state array holding the chase's device address (where the next
sample starts: every sample continues where the last one ended). The chain's layout, one
node per 128-byte line holding the next line's address, is `bwprof.gpu.latency`'s."""
STATE_GENERATION = 1
"""Slot counting finished chase launches: the load kernel stops once it moves past the
generation it was launched with (the chase's stop flag)."""
STATE_LOAD_BYTES = 2
"""Slot accumulating bytes the load kernel moved (one atomic add per block)."""
STATE_SLOTS = 4
LOAD_UNROLL = 4
"""Elements a load-kernel thread copies per iteration (four loads in flight before the
stores), so a partial grid still keeps enough reads in flight."""
LOAD_BYTES_PER_ELEMENT = 16
"""Bytes a load kernel element moves: one 8-byte read and one 8-byte write (traffic)."""


SM_COPY_UNROLL = 4
"""8-byte elements an SM copy thread loads before it stores any of them: four loads in flight
per thread (32 B), so a full grid keeps 64 KiB of reads in flight per SM, beyond what a PCIe,
C2C or NVLink round trip (1-2 us) or HBM needs. One load a thread left HBM copies at 78% of
peak on an H200; two took them to 87% (`kernels.PAIRED`)."""
SM_COPY_THREADS = 256
SM_COPY_BLOCKS_PER_SM = 8
"""Blocks per SM of an SM copy's grid: 8 x 256 threads is every thread an SM can hold (2048
on Hopper), so a copy over a link fills the GPU as nvbandwidth's SM copies do."""
SM_COPY_ELEMENT_BYTES = 8


def sm_copy_resident(multiprocessors: int) -> int:
    """SM copy blocks the GPU holds at once: SM_COPY_BLOCKS_PER_SM on every SM."""
    return SM_COPY_BLOCKS_PER_SM * max(1, multiprocessors)


def sm_copy_blocks(elements: int, multiprocessors: int, grids: int = 1) -> int:
    """The SM copy's grid: its share of the resident blocks (`sm_copy_resident`) when
    `grids` SM copies run at once on the GPU (one_to_all's, one a peer), so every grid's
    blocks are resident together and the copies run at once (a full grid each would take
    every slot, the next grid starting as the first retires); fewer where the copy is too
    small to give each thread its SM_COPY_UNROLL elements (at least one block)."""
    per_block = SM_COPY_THREADS * SM_COPY_UNROLL
    needed = -(-elements // per_block)
    share = sm_copy_resident(multiprocessors) // max(1, grids)
    return max(1, min(needed, share))


FMA_CHAINS = 8
"""Independent FMA chains a thread of `fma_fp32`/`fma_fp64` keeps: enough instruction-level
parallelism to hide the FMA pipeline's latency (about 4 cycles) at any occupancy."""
FMA_UNROLL = 32
"""FMA steps of each chain in one trip of the FMA kernels' loop, written as a fixed-count
inner loop that the compiler unrolls: 8 chains x 32 = 256 FMA a trip against the trip's
counter, test and branch (3 PTX instructions, about 5 SASS with the 64-bit counter), so the
loop is over 98% FMA. Re-testing the counter every 8 FMA left at most 60% of issue slots to
FFMA (fp32 read ~40% under its peak). The kernels' `iterations` counts trips."""
FMA_ITERATIONS = 128
"""Trips of the unrolled block per launch (the kernels' `iterations`): 128 x FMA_UNROLL = 4096
FMA steps of each chain, 2 x 8 x 4096 FLOP a thread, ~0.3 ms a launch on an H200 in fp32 with
every SM full, so launch overhead is under 1%."""
FMA_START_STEP = 2.0**-4
"""Chain j starts at 1 + j x FMA_START_STEP (distinct starts: the compiler cannot merge the
chains); with scale 1 and step 2^-20 every value stays an exact binary fraction below 2."""
FMA_BLOCKS_PER_SM = 8
"""Blocks of 256 threads per SM in fma_gpu's grid: 2048 threads, a full Hopper SM."""


def fma_steps(iterations: int) -> int:
    """FMA steps each chain of a thread does in a launch of `iterations` trips."""
    return iterations * FMA_UNROLL


def fma_gold(iterations: int) -> float:
    """What each thread of the FMA kernels stores after `iterations` trips: the sum of its
    chains' final values, each exact (start + steps x COMPUTE_STEP, below 2), the sum exact
    in float64."""
    return float(sum(1.0 + j * FMA_START_STEP + fma_steps(iterations) * COMPUTE_STEP
                     for j in range(FMA_CHAINS)))


def fma_flop(threads: int, iterations: int) -> float:
    """FLOP of one FMA launch of `iterations` trips: two per fused multiply-add executed
    (chains x steps a thread), the FMAs the kernel's loop runs, no more."""
    return 2.0 * FMA_CHAINS * threads * fma_steps(iterations)
