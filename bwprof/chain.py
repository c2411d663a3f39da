"""The pointer-chasing chain every latency case walks, host and GPU alike.

One random cycle through the lines (host cache lines, GPU sectors) of a buffer: Sattolo's
shuffle makes a cyclic permutation, so a walk from any line visits every line once per lap,
and the next address is one no prefetcher can guess. `order[i]` is the line that line `i`
points to. The case writes those links into its buffer in its own form (host addresses, GPU
element indices) and times the walk; where the walk ended is then checked against the
permutation walked again here, apart from the timed buffer (`ending_line`): a chase that
skipped, reordered or lost loads ends elsewhere.

The random numbers are `../shared/ref/lat_ref.c`'s (xorshift64*), so the yardstick and bwprof
build their chains the same way. Numba is imported with this module: import it lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SEED = 0x9E3779B97F4A7C15
"""lat_ref.c's xorshift64* seed; each chain mixes its line count in, so sizes differ."""


@njit(cache=True)
def _sattolo(lines, seed):  # pragma: no cover - compiled
    order = np.arange(lines, dtype=np.uint64)
    state = np.uint64(seed) | np.uint64(1)  # xorshift needs a non-zero state
    for i in range(lines - 1, 0, -1):
        state ^= state >> np.uint64(12)
        state ^= state << np.uint64(25)
        state ^= state >> np.uint64(27)
        j = (state * np.uint64(2685821657736338717)) % np.uint64(i)  # j < i: Sattolo
        order[i], order[j] = order[j], order[i]
    return order


@njit(cache=True)
def _walk(order, start, steps):  # pragma: no cover - compiled
    line = np.uint64(start)
    for _ in range(steps):
        line = order[line]
    return line


@njit(cache=True)
def _cycle_length(order):  # pragma: no cover - compiled
    """Steps from line 0 back to line 0 (at most len(order) + 1)."""
    line = order[0]
    steps = 1
    while line != 0 and steps <= order.size:
        line = order[line]
        steps += 1
    return steps


def sattolo_order(lines: int, seed: int = SEED) -> np.ndarray:
    """A cyclic permutation of `lines` lines (uint64): line i links to line order[i]."""
    if lines < 2:
        raise ValueError(f"a chain needs at least 2 lines, got {lines}")
    return _sattolo(lines, (seed ^ (lines * 0x100000001B3)) & (2**64 - 1))


def is_one_cycle(order: np.ndarray) -> bool:
    """Whether the permutation is one cycle through every line (what Sattolo's shuffle
    guarantees; checked, so a broken build can never pass for a chase of the whole buffer)."""
    return bool(_cycle_length(order) == order.size)


def ending_line(order: np.ndarray, start: int, steps: int) -> int:
    """The line a walk of `steps` loads from line `start` must end on."""
    return int(_walk(order, start, steps % order.size))
