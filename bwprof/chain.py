"""The pointer-chasing chains every latency case walks, host and GPU alike.

A chain is one random cycle through the lines (host cache lines, GPU sectors) of a buffer: a
walk from any line visits every line once per lap, and the next address is one no
prefetcher can guess. The case writes the links into its buffer in its own form (host
addresses, GPU element indices) and times the walk; where the walk ended is then checked
against the cycle computed apart from the timed buffer: a chase that skipped, reordered or
lost loads ends elsewhere.

Two ways to make the cycle:

- `Cycle` (the host chase): a keyed bijection of the positions 0..n-1 onto the lines,
  computed, not stored. Position k's line links to position k+1's, so line i's link is
  `line_at(position_of(i) + 1)`: the links are written in address order, one pass with no
  table and no random writes, and where a walk of s loads from position 0 ends is
  `line_at(s mod n)`, O(1). A chain of 2 GiB is linked in well under a second and checked
  without walking it again, whatever its size (a stored permutation costs n random swaps
  to build and n random steps to check: seconds per GiB). The bijection is three rounds of
  an odd multiply and an xor-shift on the smallest power of two >= n (each round
  invertible), cycle-walked down to n where n is not a power of two.
  The GPU chases take their links from it too (`next_lines`), as a table they upload.
- `sattolo_order`: Sattolo's shuffle into a stored cyclic permutation, `order[i]` the line
  that line i points to, with `benchmarks/ref/lat_ref.c`'s random numbers (xorshift64*): the
  yardstick's own chain, which tests use to hold the kernels to a chain made another way.
- `Stride`: line i links to line i + 1, the last back to the first: nvbandwidth's
  `host_device_latency_sm` chain (a small buffer walked in address order, so after the
  first lap its pages stay in the GPU's TLB and every load is the link's round trip alone).

Numba is imported with this module: import it lazily.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

SEED = 0x9E3779B97F4A7C15
"""lat_ref.c's xorshift64* seed; each chain mixes its line count in, so sizes differ."""
MASK64 = (1 << 64) - 1

# -- the computed cycle (host) ----------------------------------------------------------------

ROUNDS = 3
"""Multiply-xorshift rounds of the bijection: two leave consecutive positions' lines with
visible structure in their low bits; three scatter them as a shuffle does."""
_MULTIPLIERS = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
"""Odd 64-bit constants (splitmix64's): invertible multipliers modulo any power of two."""

# Slots of the parameter array the compiled functions read.
P_LINES, P_MASK, P_SHIFT, P_KEY = 0, 1, 2, 3
P_MUL = 4                      # ROUNDS multipliers
P_INV = P_MUL + ROUNDS         # and their inverses modulo 2^64
PARAMS = P_INV + ROUNDS


@njit(inline="always")
def _xorshift_inverse(y, shift, mask):  # pragma: no cover - compiled
    """x from y = x ^ (x >> shift): x = y ^ (y >> shift) ^ (y >> 2 shift) ^ ..."""
    x = y
    t = y >> shift
    while t != np.uint64(0):
        x ^= t
        t >>= shift
    return x & mask


@njit(inline="always")
def _forward(x, params):  # pragma: no cover - compiled
    mask, shift = params[P_MASK], params[P_SHIFT]
    x = (x ^ params[P_KEY]) & mask
    for r in range(ROUNDS):
        x = (x * params[P_MUL + r]) & mask
        x ^= x >> shift
    return x


@njit(inline="always")
def _backward(y, params):  # pragma: no cover - compiled
    mask, shift = params[P_MASK], params[P_SHIFT]
    for r in range(ROUNDS - 1, -1, -1):
        y = _xorshift_inverse(y, shift, mask)
        y = (y * params[P_INV + r]) & mask
    return (y ^ params[P_KEY]) & mask


@njit(inline="always")
def line_at(position, params):  # pragma: no cover - compiled
    """The line at `position` (< n) of the cycle: the bijection, cycle-walked below n."""
    x = _forward(np.uint64(position), params)
    while x >= params[P_LINES]:
        x = _forward(x, params)
    return x


@njit(inline="always")
def position_of(line, params):  # pragma: no cover - compiled
    """The position of `line` (< n) in the cycle: `line_at`'s inverse."""
    x = _backward(np.uint64(line), params)
    while x >= params[P_LINES]:
        x = _backward(x, params)
    return x


@njit(inline="always")
def next_line(line, params):  # pragma: no cover - compiled
    """The line `line` links to: the line at the next position, the last back to the first."""
    position = position_of(line, params) + np.uint64(1)
    if position == params[P_LINES]:
        position = np.uint64(0)
    return line_at(position, params)


@njit(cache=True)
def _lines_at(positions, params):  # pragma: no cover - compiled
    out = np.empty(positions.size, dtype=np.uint64)
    for i in range(positions.size):
        out[i] = line_at(positions[i], params)
    return out


@njit(cache=True)
def _positions_of(lines, params):  # pragma: no cover - compiled
    out = np.empty(lines.size, dtype=np.uint64)
    for i in range(lines.size):
        out[i] = position_of(lines[i], params)
    return out


@njit(cache=True)
def _next_lines(lines, params):  # pragma: no cover - compiled
    out = np.empty(lines.size, dtype=np.uint64)
    for i in range(lines.size):
        out[i] = next_line(lines[i], params)
    return out


@dataclass(frozen=True, eq=False)
class Cycle:
    """A random cycle through `lines` lines, computed from its parameters: nothing stored
    per line. `params` is what the compiled link and check functions read."""

    lines: int
    params: np.ndarray

    @classmethod
    def of(cls, lines: int, seed: int = SEED) -> Cycle:
        if lines < 2:
            raise ValueError(f"a chain needs at least 2 lines, got {lines}")
        bits = (lines - 1).bit_length()
        mask = (1 << bits) - 1
        key = (seed ^ (lines * 0x100000001B3)) & MASK64
        params = np.zeros(PARAMS, dtype=np.uint64)
        params[P_LINES], params[P_MASK] = lines, mask
        params[P_SHIFT] = max(1, (bits + 1) // 2)
        params[P_KEY] = key & mask
        for r, multiplier in enumerate(_MULTIPLIERS):
            params[P_MUL + r] = multiplier
            params[P_INV + r] = pow(multiplier, -1, 1 << 64)
        return cls(lines, params)

    def line_at(self, position: int) -> int:
        """The line at `position` of the cycle (taken modulo the lines: a walk's lap)."""
        positions = np.array([position % self.lines], dtype=np.uint64)
        return int(_lines_at(positions, self.params)[0])

    def lines_at(self, positions: np.ndarray) -> np.ndarray:
        """`line_at` of many positions (each < lines), as uint64."""
        return _lines_at(np.asarray(positions, dtype=np.uint64), self.params)

    def next_lines(self, lines: np.ndarray) -> np.ndarray:
        """The line each of `lines` links to, as uint64."""
        return _next_lines(np.asarray(lines, dtype=np.uint64), self.params)

    def position_of(self, line: int) -> int:
        """Where `line` stands in the cycle (`line_at`'s inverse)."""
        return int(_positions_of(np.array([line], dtype=np.uint64), self.params)[0])

    def ending_line(self, steps: int, start_position: int = 0) -> int:
        """The line a walk of `steps` loads from `start_position` ends on: O(1)."""
        return self.line_at((start_position + steps) % self.lines)


@dataclass(frozen=True)
class Stride:
    """The cycle through `lines` lines in address order (`Cycle`'s interface): a walk from
    position 0 visits line 0, 1, 2, ... and wraps."""

    lines: int

    def __post_init__(self) -> None:
        if self.lines < 2:
            raise ValueError(f"a chain needs at least 2 lines, got {self.lines}")

    def line_at(self, position: int) -> int:
        return position % self.lines

    def next_lines(self, lines: np.ndarray) -> np.ndarray:
        following = np.asarray(lines, dtype=np.uint64) + np.uint64(1)
        return np.where(following == self.lines, np.uint64(0), following).astype(np.uint64)

    def position_of(self, line: int) -> int:
        return line

    def ending_line(self, steps: int, start_position: int = 0) -> int:
        return (start_position + steps) % self.lines


# -- the stored permutation (lat_ref.c's) ------------------------------------------------------


@njit(cache=True)
def _sattolo(lines, seed):  # pragma: no cover - compiled
    order = np.arange(lines, dtype=np.uint64)
    state = seed | np.uint64(1)  # xorshift needs a non-zero state
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
    # Always a uint64: a dispatcher that compiled for int64 first refuses a seed of 2^63 or
    # more ("int too big to convert") instead of compiling again.
    return _sattolo(np.int64(lines), np.uint64((seed ^ (lines * 0x100000001B3)) & MASK64))


def is_one_cycle(order: np.ndarray) -> bool:
    """Whether the permutation is one cycle through every line (what Sattolo's shuffle
    guarantees; checked, so a broken build can never pass for a chase of the whole buffer)."""
    return bool(_cycle_length(order) == order.size)


def ending_line(order: np.ndarray, start: int, steps: int) -> int:
    """The line a walk of `steps` loads from line `start` must end on."""
    return int(_walk(order, np.uint64(start), np.int64(steps % order.size)))
