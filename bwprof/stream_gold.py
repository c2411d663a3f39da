"""STREAM's expected values, shared by the host and the GPU STREAM cases: start values, the
scalar, and each kernel's replay on scalars (the way BabelStream validates), so every element
of a, b and c can be checked after timing. Pure Python and NumPy: no compiler behind it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

SCALAR = 3.0
INIT_A, INIT_B, INIT_C = 1.0, 2.0, 0.5
"""Distinct, exactly representable start values: every kernel changes what it writes."""

Replay = Callable[[float, float, float], tuple[float, float, float, float | None]]
Counter = Callable[[np.ndarray, float, float], int]
"""(array, expected, relative tolerance) -> elements outside the tolerance."""


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


REPLAYS: dict[str, Replay] = {
    "copy": _replay_copy, "scale": _replay_scale, "add": _replay_add, "triad": _replay_triad,
    "dot": _replay_dot,
}
"""(a, b, c) -> (a, b, c, per-element dot term or None) after one launch of each kernel."""
WRITES: dict[str, str | None] = {"copy": "c", "scale": "b", "add": "c", "triad": "a",
                                 "dot": None}
"""The array each kernel writes (dot returns its result instead)."""

ELEMENT_TOLERANCE = 1e-12
DOT_TOLERANCE = 1e-9
CHUNK_ELEMENTS = 1 << 22


def gold(replay: Replay, runs: int) -> tuple[float, float, float, float | None]:
    """Expected (a, b, c, per-element dot term) after `runs` launches from the start values."""
    a, b, c, term = INIT_A, INIT_B, INIT_C, None
    for _ in range(runs):
        a, b, c, term = replay(a, b, c)
    return a, b, c, term


def count_mismatches(x: np.ndarray, expected: float, tolerance: float) -> int:
    """Elements further than `tolerance` (relative) from `expected`, in chunks so a large
    array needs no temporary of its own size (the host's parallel kernel does it faster)."""
    limit = tolerance * max(abs(expected), 1.0)
    bad = 0
    for start in range(0, x.size, CHUNK_ELEMENTS):
        part = x[start : start + CHUNK_ELEMENTS]
        bad += int(np.count_nonzero(~(np.abs(part - expected) <= limit)))
    return bad


def check(replay: Replay, runs: int, a: np.ndarray, b: np.ndarray, c: np.ndarray,
          dot: object = None, count: Counter = count_mismatches) -> str:
    """Empty when every element of a, b, c (and the dot result) matches the gold values after
    `runs` launches, else what went wrong."""
    gold_a, gold_b, gold_c, term = gold(replay, runs)
    problems = []
    for label, array, expected in (("a", a, gold_a), ("b", b, gold_b), ("c", c, gold_c)):
        bad = int(count(array, expected, ELEMENT_TOLERANCE))
        if bad:
            problems.append(f"{bad} of {array.size} elements of {label} != {expected}")
    if term is not None:
        expected_dot = term * a.size
        if not isinstance(dot, float) or not abs(dot - expected_dot) <= DOT_TOLERANCE * abs(
            expected_dot
        ):
            problems.append(f"dot = {dot} != {expected_dot}")
    return "; ".join(problems)
