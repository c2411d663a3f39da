"""Compiled kernels of the host latency cases: the pointer chase and the memory load that runs
beside it. Kernels only walk and read; they never time or count figures (`latency.py` does).

The chase follows absolute addresses, as `benchmarks/ref/lat_ref.c`'s `p = *p` does: every step
is one load whose address is the previous load's value (`mov (%rax), %rax`). A chain of
element indices would add the scaled-index address mode (`mov (%rcx,%rax,8)`), one cycle more
per load on current x86 cores: 25% of an L1 hit. `load_address` is that bare load; the
addresses it follows are the ones `link` wrote into a buffer this process owns.

Threads that start and stop together poll a flag another thread writes. A plain load of it
could be hoisted out of the polling loop by the compiler (nothing in the loop writes it), so
the flag is read with an acquire load (`load_acquire`), which must be repeated each time.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from bwprof.chain import P_LINES, line_at, position_of
from bwprof.host.latency import LINE_BYTES

LINE_WORDS = LINE_BYTES // 8


@intrinsic
def load_address(typingctx, address):
    """The 8-byte word at `address` (a uint64): one load, nothing else."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load(pointer, align=8)

    return types.uint64(types.uint64), codegen


@intrinsic
def load_acquire(typingctx, array, index):
    """array[index] of an int64 array, read with acquire ordering: never cached in a
    register, so a loop polling it sees another thread's store."""
    if not (isinstance(array, types.Array) and array.dtype == types.int64
            and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]])
        return builder.load_atomic(pointer, "acquire", 8)

    return types.int64(array, index), codegen


@njit(cache=True)
def link(chain, params, base, first):  # pragma: no cover - compiled
    """Each line's first word holds the address of the line it links to in the cycle of
    `params` (`bwprof.chain.Cycle`), computed, no table. The lines of the first `first`
    positions (where the walk starts) are written first, in walk order; then every other
    line, in address order. The lines written last are the ones left in the cache: a walk
    from position 0 meets none of them for its first `first` loads, by when (`first` at
    least the cache's lines) it has pushed them out itself."""
    lines = params[P_LINES]
    stride = np.uint64(LINE_BYTES)
    current = line_at(np.uint64(0), params)
    for p in range(first):
        following = np.uint64(p + 1)
        if following == lines:
            following = np.uint64(0)
        target = line_at(following, params)
        chain[current * np.uint64(LINE_WORDS)] = base + target * stride
        current = target
    for i in range(lines):
        position = position_of(np.uint64(i), params)
        if position < first:
            continue
        position += np.uint64(1)
        if position == lines:
            position = np.uint64(0)
        chain[i * LINE_WORDS] = base + line_at(position, params) * stride


@njit(nogil=True, cache=True)
def chase(start, loads):  # pragma: no cover - compiled
    """Follow the chain for `loads` dependent loads from address `start`; the last address."""
    address = np.uint64(start)
    for _ in range(loads):
        address = load_address(address)
    return address


@njit(nogil=True, cache=True)
def spin(steps, seed):  # pragma: no cover - compiled
    """A dependent floating-point loop that touches no memory: the load's pause. It starts
    from a value the compiler cannot know (`seed`): from a constant it would fold the loop
    away (1.0 is this recurrence's fixed point)."""
    x = seed
    for _ in range(steps):
        x = x * 0.9999999 + 1e-7
    return x


@njit(nogil=True, cache=True)
def read_pass(data, chunk):  # pragma: no cover - compiled
    """Read `data` (int64) once in chunks of `chunk` words, as the load does (its
    calibration). A slice's sum() is NumPy's vectorised reduction: an element loop
    compiles to scalar adds at a third of the bandwidth."""
    total = 0
    for start in range(0, data.size - chunk + 1, chunk):
        total += data[start:start + chunk].sum()
    return total


GO, STOP = 0, 1
"""Slots of the control array: the chase sets GO when it starts and STOP when it ends."""


@njit(nogil=True, cache=True)
def stream_load(data, control, chunk, pause):  # pragma: no cover - compiled
    """Wait for GO (or STOP: the chase gave up), then read `data` chunk by chunk (a pause of
    `pause` spin steps after each) until STOP; the chunks read (their words are summed, so no
    read can be dropped)."""
    while load_acquire(control, GO) == 0 and load_acquire(control, STOP) == 0:
        pass
    chunks = 0
    position = 0
    total = 0
    x = 0.5
    while load_acquire(control, STOP) == 0:
        total += data[position:position + chunk].sum()
        chunks += 1
        position += chunk
        if position + chunk > data.size:
            position = 0
        if pause > 0:
            x = spin(pause, x)
    # Never true: keeps the sums (and with them every read) alive.
    if total == 0x5A5A5A5A5A5A5A5A and x < -1.0:
        chunks = -1
    return chunks
