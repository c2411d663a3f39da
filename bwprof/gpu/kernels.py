"""Numba CUDA kernels, as plain Python functions with their signatures.

Kernels only compute: no timing, no printing, no bandwidth. They are kept undecorated so the
same source can be compiled to PTX without a GPU (`bwprof kernels`), run under Numba's CUDA
simulator in tests, and jitted for the real device by `bwprof.gpu.runtime` on first use.
Every kernel loops over float64 (8-byte) elements with the grid's stride, so any grid is
correct. The STREAM kernels do their first element before the loop, as BabelStream's one element
per thread: the default grid gives each thread one element, and a plain `range` loop would make
every thread first divide to count its trips (LLVM unrolls it: `div` in the PTX), tens of
instructions ahead of the one load that matters. Copy and scale, which read one array, take
four elements a thread instead (`STREAM_UNROLL`, all four loads before any store), in loops
whose tests are comparisons, no division.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from numba import cuda, float32, float64, uint32, uint64

from bwprof.gpu.address import load_u64
from bwprof.gpu.kernel_params import (
    COMPUTE_MAX_ITERATIONS,
    COMPUTE_SCALE,
    COMPUTE_STEP,
    DOT_BLOCKS,
    FMA_UNROLL,
    LOAD_BYTES_PER_ELEMENT,
    LOAD_UNROLL,
    SM_COPY_THREADS,
    SM_COPY_UNROLL,
    STATE_GENERATION,
    STATE_LOAD_BYTES,
    STATE_POSITION,
    compute_gold,
)
from bwprof.gpu.numpy_compat import restore_removed_aliases

__all__ = ["COMPUTE_MAX_ITERATIONS", "COMPUTE_SCALE", "COMPUTE_STEP", "DOT_BLOCKS", "KERNELS",
           "compute_gold", "launch_config"]

restore_removed_aliases()  # before numba-cuda's first compile loads its NumPy overloads

THREADS_PER_BLOCK = 256
STREAM_UNROLL = 4
"""Elements a thread of copy and scale takes per trip, all four loads issued before any store
(`sm_copy`'s depth; `bwprof kernels` shows `4 ld in flight before a st`). With one 8-byte load
a thread (2048 threads an SM) an H200 SM keeps 16 KiB of reads in flight, short of what
HBM3e's latency needs: copy and scale reached 78-79% of peak (tests/data/h200-quick) where
add and triad, two loads a thread, reached 89%; two a thread reached 87%. Four give each
thread 32 B in flight. Only the launch grid reads this: the two kernels are written for four."""
UNROLLED_MIN_BLOCKS = 512
"""Quartering the grid must not leave SMs idle on small (L2-resident) arrays: an unrolled grid
keeps the one-element grid up to this many blocks (four an SM on an H200's 132); there each
thread has one to four elements, taken by the tail loop."""
MAX_BLOCKS = 65535 * 32
HOLD_STEP_NS = 1000


def stream_init(a, b, c, va, vb, vc):
    """Fill the three STREAM arrays on the device (first touch on the GPU)."""
    i = cuda.grid(1)
    n = a.size
    if i < n:
        stride = cuda.gridsize(1)
        while i < n:
            a[i] = va
            b[i] = vb
            c[i] = vc
            i += stride


def stream_copy(a, b, c, scalar):
    """Four elements a thread per trip, a grid stride apart (a warp's loads are 256 contiguous
    bytes), all four loads issued before any store (see `STREAM_UNROLL`); the rest, fewer
    than four a thread, one at a time. With the grid of a small array (one element a thread)
    a thread's first load follows one comparison, as in add and triad."""
    i = cuda.grid(1)
    n = a.size
    stride = cuda.gridsize(1)
    while i + 3 * stride < n:
        a0 = a[i]
        a1 = a[i + stride]
        a2 = a[i + 2 * stride]
        a3 = a[i + 3 * stride]
        c[i] = a0
        c[i + stride] = a1
        c[i + 2 * stride] = a2
        c[i + 3 * stride] = a3
        i += 4 * stride
    if i < n:  # at most three left (i + 3 x stride >= n): no loop, whose count LLVM divides
        c[i] = a[i]
        i += stride
        if i < n:
            c[i] = a[i]
            i += stride
            if i < n:
                c[i] = a[i]


def stream_scale(a, b, c, scalar):
    """As `stream_copy`: four loads of c in flight before the four stores of b."""
    i = cuda.grid(1)
    n = a.size
    stride = cuda.gridsize(1)
    while i + 3 * stride < n:
        c0 = c[i]
        c1 = c[i + stride]
        c2 = c[i + 2 * stride]
        c3 = c[i + 3 * stride]
        b[i] = scalar * c0
        b[i + stride] = scalar * c1
        b[i + 2 * stride] = scalar * c2
        b[i + 3 * stride] = scalar * c3
        i += 4 * stride
    if i < n:  # at most three left (i + 3 x stride >= n): no loop, whose count LLVM divides
        b[i] = scalar * c[i]
        i += stride
        if i < n:
            b[i] = scalar * c[i]
            i += stride
            if i < n:
                b[i] = scalar * c[i]


def stream_add(a, b, c, scalar):
    i = cuda.grid(1)
    n = a.size
    if i < n:
        c[i] = a[i] + b[i]
        stride = cuda.gridsize(1)
        i += stride
        while i < n:
            c[i] = a[i] + b[i]
            i += stride


def stream_triad(a, b, c, scalar):
    i = cuda.grid(1)
    n = a.size
    if i < n:
        a[i] = b[i] + scalar * c[i]
        stride = cuda.gridsize(1)
        i += stride
        while i < n:
            a[i] = b[i] + scalar * c[i]
            i += stride


def stream_dot(a, b, partial):
    """One partial sum of a*b per block; the host adds the partials (as BabelStream does)."""
    cache = cuda.shared.array(THREADS_PER_BLOCK, float64)
    tid = cuda.threadIdx.x
    total = 0.0
    for i in range(cuda.grid(1), a.size, cuda.gridsize(1)):
        total += a[i] * b[i]
    cache[tid] = total
    cuda.syncthreads()
    step = THREADS_PER_BLOCK // 2
    while step > 0:
        if tid < step:
            cache[tid] += cache[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = cache[0]


def compute(x, y, iterations, scale, step):
    """Known work for the overlap cases: `iterations` dependent fused multiply-adds per element.

    With scale = 1 and step = 2^-20 every step is exact, so y = x + iterations * step can be
    checked exactly, and a kernel that skipped work would fail validation.
    """
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        value = x[i]
        for _ in range(iterations):
            value = cuda.fma(value, scale, step)
        y[i] = value


def _fma_chains(real, name, doc):
    """The fma_gpu kernel for one float type (`real`: numba's float32 or float64, a constant
    of the kernel's closure): the same chains and check, on that type's units.

    `iterations` counts trips of a block of FMA_UNROLL steps of every chain: the inner loop
    has a constant count, so the compiler unrolls it into 8 x FMA_UNROLL FMAs, and the trip
    counter is a plain comparison (a `range(iterations)` also selects and clamps the count
    each trip). `bwprof kernels` shows the loop's FMA share."""

    def kernel(out, iterations, scale, step):
        i = cuda.grid(1)
        x0 = real(1.0)
        x1 = real(1.0625)
        x2 = real(1.125)
        x3 = real(1.1875)
        x4 = real(1.25)
        x5 = real(1.3125)
        x6 = real(1.375)
        x7 = real(1.4375)
        trip = 0
        while trip < iterations:
            for _ in range(FMA_UNROLL):
                x0 = cuda.fma(x0, scale, step)
                x1 = cuda.fma(x1, scale, step)
                x2 = cuda.fma(x2, scale, step)
                x3 = cuda.fma(x3, scale, step)
                x4 = cuda.fma(x4, scale, step)
                x5 = cuda.fma(x5, scale, step)
                x6 = cuda.fma(x6, scale, step)
                x7 = cuda.fma(x7, scale, step)
            trip += 1
        if i < out.size:
            out[i] = (float64(x0) + float64(x1) + float64(x2) + float64(x3) + float64(x4)
                      + float64(x5) + float64(x6) + float64(x7))

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = doc
    return kernel


fma_fp32 = _fma_chains(float32, "fma_fp32", """fma_gpu: FMA_CHAINS independent float32 fused
    multiply-add chains per thread, `iterations` x FMA_UNROLL steps each, in registers (no
    memory traffic but one store a thread at the end, so the chains are live). Chain j starts
    at 1 + j/16; with scale 1 (a kernel argument: the compiler cannot fold it into an add)
    and step 2^-20 every step is exact, so the stored sum (in float64) checks every FMA.""")
fma_fp64 = _fma_chains(float64, "fma_fp64", "fma_gpu in float64: as `fma_fp32`, on the FP64 "
                                            "units.")


def hold(steps):
    """Keep the GPU busy for about `steps` microseconds so work queued behind it starts together."""
    if cuda.grid(1) == 0:
        for _ in range(steps):
            cuda.nanosleep(uint32(HOLD_STEP_NS))


def chase(chain, state, steps):
    """One thread walks `steps` links of a pointer-chasing chain: the chain holds device
    addresses, so each step is one global load whose result is the next load's address
    (`address.load_u64`: `ld.global.u64 %rd, [%rd]`, nothing between two dependent loads, as
    `bwprof kernels` shows; an index would add a shift and an add to every step). It starts
    at the address the last launch ended on (state[STATE_POSITION]) and leaves its end
    there; then it bumps the generation, which stops a concurrent `load` kernel. `chain` is
    not indexed: it is passed so the launch holds the buffer the addresses point into."""
    if cuda.grid(1) == 0:
        address = state[STATE_POSITION]
        for _ in range(steps):
            address = load_u64(address)
        state[STATE_POSITION] = address
        cuda.atomic.add(state, STATE_GENERATION, uint64(1))


def load(src, dst, state, generation, max_passes):
    """The concurrent load of lat_gpu_loaded: a STREAM copy dst = src, pass after pass, until
    the chase has finished (state[STATE_GENERATION] is no longer `generation`) or
    `max_passes` passes are done, so it can never spin forever. Each block's thread 0 reads
    the flag atomically before every pass and shares it through shared memory, so a block
    leaves its loop as one; the block adds the bytes it moved (read and written) to
    state[STATE_LOAD_BYTES] once, at the end: what the load achieved is counted, not
    assumed."""
    seen = cuda.shared.array(1, uint64)
    moved = cuda.shared.array(1, uint64)
    tid = cuda.threadIdx.x
    if tid == 0:
        moved[0] = 0
    n = src.size
    stride = cuda.gridsize(1)
    elements = uint64(0)
    for _ in range(max_passes):
        if tid == 0:
            seen[0] = cuda.atomic.add(state, STATE_GENERATION, uint64(0))  # an atomic read
        cuda.syncthreads()
        stop = seen[0] != generation
        cuda.syncthreads()  # all have read it before thread 0 writes it again
        if stop:
            break
        i = cuda.grid(1)
        while i + (LOAD_UNROLL - 1) * stride < n:
            a0 = src[i]
            a1 = src[i + stride]
            a2 = src[i + 2 * stride]
            a3 = src[i + 3 * stride]
            dst[i] = a0
            dst[i + stride] = a1
            dst[i + 2 * stride] = a2
            dst[i + 3 * stride] = a3
            i += LOAD_UNROLL * stride
            elements += uint64(LOAD_UNROLL)
        while i < n:
            dst[i] = src[i]
            i += stride
            elements += uint64(1)
    cuda.atomic.add(moved, 0, elements * uint64(LOAD_BYTES_PER_ELEMENT))
    cuda.syncthreads()
    if tid == 0:
        cuda.atomic.add(state, STATE_LOAD_BYTES, moved[0])


def sm_copy(src, dst):
    """The SM-driven copy (h2d_sm, d2h_sm, d2d_sm, the p2p _sm cases): dst = src over uint64
    elements, which may lie in this GPU's memory, a peer's or pinned host memory mapped into
    the device. Each thread issues SM_COPY_UNROLL (four) 8-byte loads, a grid stride apart
    (every load of a warp is 256 contiguous bytes), before it stores any of them, so a link's
    round trip is covered by the loads in flight; the loop tests a comparison, no division.
    Written for four: `bwprof kernels` counts them."""
    i = cuda.grid(1)
    n = src.size
    stride = cuda.gridsize(1)
    while i + 3 * stride < n:
        a0 = src[i]
        a1 = src[i + stride]
        a2 = src[i + 2 * stride]
        a3 = src[i + 3 * stride]
        dst[i] = a0
        dst[i + stride] = a1
        dst[i + 2 * stride] = a2
        dst[i + 3 * stride] = a3
        i += 4 * stride
    while i < n:
        dst[i] = src[i]
        i += stride


@dataclass(frozen=True)
class KernelSpec:
    name: str
    function: object
    signature: str
    kind: str  # stream | unrolled | dot | init | hold | chase | load | smcopy | fma


ARRAY = "float64[::1]"
KERNELS: dict[str, KernelSpec] = {
    spec.name: spec
    for spec in (
        KernelSpec("init", stream_init,
                   f"void({ARRAY}, {ARRAY}, {ARRAY}, float64, float64, float64)", "init"),
        KernelSpec("copy", stream_copy, f"void({ARRAY}, {ARRAY}, {ARRAY}, float64)",
                   "unrolled"),
        KernelSpec("scale", stream_scale, f"void({ARRAY}, {ARRAY}, {ARRAY}, float64)",
                   "unrolled"),
        KernelSpec("add", stream_add, f"void({ARRAY}, {ARRAY}, {ARRAY}, float64)", "stream"),
        KernelSpec("triad", stream_triad, f"void({ARRAY}, {ARRAY}, {ARRAY}, float64)", "stream"),
        KernelSpec("dot", stream_dot, f"void({ARRAY}, {ARRAY}, {ARRAY})", "dot"),
        KernelSpec("compute", compute, f"void({ARRAY}, {ARRAY}, int64, float64, float64)",
                   "stream"),
        KernelSpec("fma_fp32", fma_fp32, f"void({ARRAY}, int64, float32, float32)", "fma"),
        KernelSpec("fma_fp64", fma_fp64, f"void({ARRAY}, int64, float64, float64)", "fma"),
        KernelSpec("hold", hold, "void(int64)", "hold"),
        KernelSpec("chase", chase, "void(uint64[::1], uint64[::1], int64)", "chase"),
        KernelSpec("load", load,
                   f"void({ARRAY}, {ARRAY}, uint64[::1], uint64, int64)", "load"),
        KernelSpec("sm_copy", sm_copy, "void(uint64[::1], uint64[::1])", "smcopy"),
    )
}


def launch_config(kind: str, elements: int) -> tuple[int, int]:
    """(blocks, threads per block) for a kernel over `elements` items."""
    if kind in ("hold", "chase"):
        return 1, 32
    if kind == "dot":
        return DOT_BLOCKS, THREADS_PER_BLOCK
    if kind == "smcopy":  # the case sets the grid from the SMs (kernel_params.sm_copy_blocks)
        return max(1, min(MAX_BLOCKS, math.ceil(elements / SM_COPY_THREADS / SM_COPY_UNROLL))), \
            SM_COPY_THREADS
    blocks = math.ceil(elements / THREADS_PER_BLOCK)
    if kind == "unrolled":
        blocks = max(math.ceil(elements / STREAM_UNROLL / THREADS_PER_BLOCK),
                     min(blocks, UNROLLED_MIN_BLOCKS))
    return max(1, min(MAX_BLOCKS, blocks)), THREADS_PER_BLOCK
