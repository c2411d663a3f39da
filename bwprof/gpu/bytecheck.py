"""The parallel byte compare behind copy validation (Numba), kept apart so importing the
buffer code does not import Numba."""

from __future__ import annotations

from numba import njit, prange


@njit(parallel=True, cache=True)
def count_unequal_parallel(a, b):  # pragma: no cover - compiled
    """Positions where two equally long byte arrays differ, counted on all cores."""
    bad = 0
    for i in prange(a.size):
        if a[i] != b[i]:
            bad += 1
    return bad
