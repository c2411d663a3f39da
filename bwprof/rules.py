"""Measurement rules that planning and the cases share (a neutral module: the case catalogue
imports the cases, and planning imports the catalogue)."""

from __future__ import annotations

CACHE_MULTIPLE = 4
"""STREAM's rule: each array (or a chase's working set) at least 4x the last-level cache for
a memory figure."""
HOST_MEMORY_SHARE = 0.6
"""Never take more than this share of available memory for host buffers."""
DEFAULT_MEMORY_SHARE = 0.25
"""Sizes bwprof chooses itself (the STREAM arrays, the latency sweep's end) take at most this
share of the machine's RAM, so a default run leaves a box in service room for its work; a
size the user gives may take up to HOST_MEMORY_SHARE of the available memory."""
FIRST_WORKING_SET_BYTES = 4 << 10
"""A latency sweep's first working set: one page."""


def default_memory_budget(available_bytes: int | None,
                          total_bytes: int | None) -> tuple[int | None, str]:
    """Bytes the buffers of a size bwprof chooses may take (None where memory is not told),
    and how to say that limit: the smaller of DEFAULT_MEMORY_SHARE of the RAM and
    HOST_MEMORY_SHARE of what is available."""
    limits = []
    if total_bytes:
        limits.append((int(DEFAULT_MEMORY_SHARE * total_bytes),
                       f"{DEFAULT_MEMORY_SHARE:.0%} of the RAM"))
    if available_bytes:
        limits.append((int(HOST_MEMORY_SHARE * available_bytes),
                       f"{HOST_MEMORY_SHARE:.0%} of the available memory"))
    if not limits:
        return None, ""
    return min(limits)


def next_power_of_two(n: int) -> int:
    """The smallest power of two at least `n` (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def working_sets(end_bytes: int, factor: int,
                 first_bytes: int = FIRST_WORKING_SET_BYTES) -> list[int]:
    """A latency sweep through the caches: from `first_bytes` by `factor` up to the first
    size at least `end_bytes` (CACHE_MULTIPLE x the last cache), host and GPU alike; the
    last step is cut to the first power of two there, so a 4x sweep does not overshoot a
    1.2 GiB end to 4 GiB (2 GiB is the DRAM point)."""
    sizes = [first_bytes]
    while sizes[-1] < end_bytes:
        sizes.append(min(sizes[-1] * factor, max(next_power_of_two(end_bytes), first_bytes)))
    return sizes
