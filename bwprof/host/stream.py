"""STREAM kernels for host memory, compiled by Numba with OpenMP-style parallel loops.

Kernels only compute: they never time, print or count bytes. Compiled code is cached on disk
(`cache=True`) so a second run does not pay the JIT again. Their gold values live in
`bwprof.stream_gold`, shared with the GPU STREAM cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from bwprof import stream_gold
from bwprof.stream_gold import INIT_A, INIT_B, INIT_C, REPLAYS, SCALAR, WRITES, Replay

__all__ = ["INIT_A", "INIT_B", "INIT_C", "KERNELS", "SCALAR", "StreamKernel", "check", "gold"]


@njit(parallel=True, cache=True)
def fill(a, b, c, va, vb, vc):  # pragma: no cover - compiled
    """Parallel first touch: pages land on the NUMA node of the thread that will use them."""
    for i in prange(a.size):
        a[i] = va
        b[i] = vb
        c[i] = vc


@njit(parallel=True, cache=True)
def poison(x):  # pragma: no cover - compiled
    """NaN in every element, in parallel (pages stay where first touch put them)."""
    for i in prange(x.size):
        x[i] = np.nan


@njit(parallel=True, cache=True)
def stream_copy(a, b, c, scalar):  # pragma: no cover - compiled
    # `+ 0.0` keeps this a load/store loop like the other kernels and the C reference. A bare
    # `c[i] = a[i]` becomes a call to the C library's memcpy, whose non-temporal stores skip
    # the write-allocate read every other kernel pays and vary with the glibc version and CPU
    # vendor (measured 1.8x the reference's copy): boxes would differ by their OS image. Without
    # fastmath LLVM may not fold x + 0.0 (it would turn -0.0 into +0.0), so the add stays.
    for i in prange(a.size):
        c[i] = a[i] + 0.0


@njit(parallel=True, cache=True)
def stream_scale(a, b, c, scalar):  # pragma: no cover - compiled
    for i in prange(a.size):
        b[i] = scalar * c[i]


@njit(parallel=True, cache=True)
def stream_add(a, b, c, scalar):  # pragma: no cover - compiled
    for i in prange(a.size):
        c[i] = a[i] + b[i]


@njit(parallel=True, cache=True)
def stream_triad(a, b, c, scalar):  # pragma: no cover - compiled
    for i in prange(a.size):
        a[i] = b[i] + scalar * c[i]


@njit(parallel=True, cache=True)
def stream_dot(a, b, c, scalar):  # pragma: no cover - compiled
    total = 0.0
    for i in prange(a.size):
        total += a[i] * b[i]
    return total


@njit(parallel=True, cache=True)
def count_mismatches(x, expected, tolerance):  # pragma: no cover - compiled
    """Elements further than `tolerance` (relative) from `expected`; checks every element."""
    bad = 0
    limit = tolerance * max(abs(expected), 1.0)
    for i in prange(x.size):
        if not abs(x[i] - expected) <= limit:
            bad += 1
    return bad


Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray, float], object]


@dataclass(frozen=True)
class StreamKernel:
    """A compiled kernel with its scalar replay: (a, b, c) -> (a, b, c, dot or None), and the
    array it writes (None for dot, which returns its result)."""

    name: str
    run: Kernel
    replay: Replay
    writes: str | None = None


_RUN: dict[str, Kernel] = {"copy": stream_copy, "scale": stream_scale, "add": stream_add,
                           "triad": stream_triad, "dot": stream_dot}
KERNELS: dict[str, StreamKernel] = {
    name: StreamKernel(name, _RUN[name], REPLAYS[name], WRITES[name]) for name in _RUN
}


def gold(kernel: StreamKernel, runs: int) -> tuple[float, float, float, float | None]:
    """Expected (a, b, c, per-element dot term) after `runs` launches from the initial values."""
    return stream_gold.gold(kernel.replay, runs)


def check(
    kernel: StreamKernel, runs: int, a: np.ndarray, b: np.ndarray, c: np.ndarray,
    dot: object = None,
) -> str:
    """Empty when every element matches the gold values after `runs` launches (checked on
    every core), else what went wrong."""
    return stream_gold.check(kernel.replay, runs, a, b, c, dot, count=count_mismatches)


def warm_up() -> None:
    """Compile (or load from the on-disk cache) every kernel outside any timed region."""
    a, b, c = (np.empty(1024) for _ in range(3))
    fill(a, b, c, INIT_A, INIT_B, INIT_C)
    for kernel in KERNELS.values():
        kernel.run(a, b, c, SCALAR)
    count_mismatches(a, 0.0, 1e-12)
