"""STREAM kernels for host memory, compiled by Numba with OpenMP-style parallel loops.

Kernels only compute: they never time, print or count bytes. Compiled code is cached on disk
(`cache=True`) so a second run does not pay the JIT again. Gold values are replayed on scalars,
the way BabelStream validates, so every element can be checked after timing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

SCALAR = 3.0
INIT_A, INIT_B, INIT_C = 1.0, 2.0, 0.5
"""Distinct, exactly representable start values: every kernel changes what it writes."""


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


Scalars = tuple[float, float, float]
Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray, float], object]


@dataclass(frozen=True)
class StreamKernel:
    """A compiled kernel with its scalar replay: (a, b, c) -> (a, b, c, dot or None), and the
    array it writes (None for dot, which returns its result)."""

    name: str
    run: Kernel
    replay: Callable[[float, float, float], tuple[float, float, float, float | None]]
    writes: str | None = None


def _replay_copy(a: float, b: float, c: float) -> tuple[float, float, float, None]:
    return a, b, a, None


def _replay_scale(a: float, b: float, c: float) -> tuple[float, float, float, None]:
    return a, SCALAR * c, c, None


def _replay_add(a: float, b: float, c: float) -> tuple[float, float, float, None]:
    return a, b, a + b, None


def _replay_triad(a: float, b: float, c: float) -> tuple[float, float, float, None]:
    return b + SCALAR * c, b, c, None


def _replay_dot(a: float, b: float, c: float) -> tuple[float, float, float, float]:
    return a, b, c, a * b


KERNELS: dict[str, StreamKernel] = {
    "copy": StreamKernel("copy", stream_copy, _replay_copy, "c"),
    "scale": StreamKernel("scale", stream_scale, _replay_scale, "b"),
    "add": StreamKernel("add", stream_add, _replay_add, "c"),
    "triad": StreamKernel("triad", stream_triad, _replay_triad, "a"),
    "dot": StreamKernel("dot", stream_dot, _replay_dot),
}


def gold(kernel: StreamKernel, runs: int) -> tuple[float, float, float, float | None]:
    """Expected (a, b, c, per-element dot term) after `runs` launches from the initial values."""
    a, b, c, term = INIT_A, INIT_B, INIT_C, None
    for _ in range(runs):
        a, b, c, term = kernel.replay(a, b, c)
    return a, b, c, term


ELEMENT_TOLERANCE = 1e-12
DOT_TOLERANCE = 1e-9


def check(
    kernel: StreamKernel, runs: int, a: np.ndarray, b: np.ndarray, c: np.ndarray,
    dot: object = None,
) -> str:
    """Empty when every element of a, b, c (and the dot result) matches the gold values after
    `runs` launches, else what went wrong. Shared by the host and the GPU STREAM cases."""
    gold_a, gold_b, gold_c, term = gold(kernel, runs)
    problems = []
    for label, array, expected in (("a", a, gold_a), ("b", b, gold_b), ("c", c, gold_c)):
        bad = count_mismatches(array, expected, ELEMENT_TOLERANCE)
        if bad:
            problems.append(f"{bad} of {array.size} elements of {label} != {expected}")
    if term is not None:
        expected_dot = term * a.size
        if not isinstance(dot, float) or not abs(dot - expected_dot) <= DOT_TOLERANCE * abs(
            expected_dot
        ):
            problems.append(f"dot = {dot} != {expected_dot}")
    return "; ".join(problems)


def warm_up() -> None:
    """Compile (or load from the on-disk cache) every kernel outside any timed region."""
    a, b, c = (np.empty(1024) for _ in range(3))
    fill(a, b, c, INIT_A, INIT_B, INIT_C)
    for kernel in KERNELS.values():
        kernel.run(a, b, c, SCALAR)
    count_mismatches(a, 0.0, 1e-12)
