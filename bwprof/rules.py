"""Measurement rules that planning and the cases share (a neutral module: the case catalogue
imports the cases, and planning imports the catalogue)."""

from __future__ import annotations

CACHE_MULTIPLE = 4
"""STREAM's rule: each array (or a chase's working set) at least 4x the last-level cache for
a memory figure."""
HOST_MEMORY_SHARE = 0.6
"""Never take more than this share of available memory for host buffers."""
FIRST_WORKING_SET_BYTES = 4 << 10
"""A latency sweep's first working set: one page."""


def next_power_of_two(n: int) -> int:
    """The smallest power of two at least `n` (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def working_sets(end_bytes: int, factor: int,
                 first_bytes: int = FIRST_WORKING_SET_BYTES) -> list[int]:
    """A latency sweep through the caches: from `first_bytes` by `factor` up to the first
    size at least `end_bytes` (CACHE_MULTIPLE x the last cache), host and GPU alike."""
    sizes = [first_bytes]
    while sizes[-1] < end_bytes:
        sizes.append(sizes[-1] * factor)
    return sizes
