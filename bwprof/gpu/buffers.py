"""Buffers and streams reused across the sizes of a case, so a sweep allocates (and pins)
memory a handful of times instead of once per size. Sizes grow through a sweep, so a buffer
is replaced by a larger one when needed; the old one is dropped first to keep peak use low.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import lru_cache
from typing import Any

import numpy as np

from bwprof.gpu.backend import GpuBackend
from bwprof.gpu.devices import GpuDevice
from bwprof.host import mempolicy
from bwprof.host.placement import PLACED_SHARE, Pages, backing_pages, node_share

PATTERN_PERIOD = (1 << 20) + 7  # not a power of two: an offset bug of 2^k bytes cannot hide
CHUNK = 32 * PATTERN_PERIOD  # bytes moved per step when filling or checking large buffers


@lru_cache(maxsize=64)
def _period(seed: int) -> np.ndarray:
    """One period (about 1 MiB) of the pattern for `seed`: kept for every path of 8 GPUs."""
    return np.random.default_rng(20261129 + seed).integers(0, 256, PATTERN_PERIOD,
                                                            dtype=np.uint8)


@lru_cache(maxsize=4)
def chunk_pattern(seed: int) -> np.ndarray:
    """CHUNK bytes of the pattern for `seed`; each copy path has its own seed, so a copy that
    read another path's buffer (cross-wired streams) fails validation too. Only the last few
    are kept (32 MiB each): tiling a kept period again is cheap."""
    return np.tile(_period(seed), CHUNK // PATTERN_PERIOD)


def pattern(seed: int, length: int) -> np.ndarray:
    """The first `length` (at most CHUNK) bytes of the pattern for `seed`. Within one period
    it is a view of the kept period: an 8-GPU sweep's small buffers on 56 paths' seeds
    would otherwise tile 32 MiB for each, the four kept chunks never the ones asked for."""
    if length <= PATTERN_PERIOD:
        return _period(seed)[:length]
    return chunk_pattern(seed)[:length]


def count_unequal(a: np.ndarray, b: np.ndarray) -> int:
    """Positions where two equally long byte arrays differ, counted on all cores (Numba,
    compiled on first use: the case table imports this module without a compiler)."""
    from bwprof.gpu.bytecheck import count_unequal_parallel

    return int(count_unequal_parallel(a, b))


def chunks(nbytes: int) -> list[tuple[int, int]]:
    """(offset, length) of the CHUNK-sized pieces a buffer of `nbytes` is checked in."""
    return [(start, min(CHUNK, nbytes - start)) for start in range(0, nbytes, CHUNK)]


def fill_pattern(host: np.ndarray, nbytes: int, seed: int = 0) -> None:
    """Write the validation pattern into the first `nbytes` of a host buffer."""
    for start, length in chunks(nbytes):
        host[start : start + length] = pattern(seed, length)


def upload_pattern(backend: GpuBackend, array: Any, nbytes: int, seed: int = 0) -> None:
    """Write the validation pattern into the first `nbytes` of a device buffer."""
    for start, length in chunks(nbytes):
        backend.upload(array, pattern(seed, length), offset=start)


def host_mismatches(host: np.ndarray, nbytes: int, seed: int = 0) -> int:
    """Bytes of a host buffer that differ from the pattern."""
    return sum(int(count_unequal(host[start : start + length], pattern(seed, length)))
               for start, length in chunks(nbytes))


def device_mismatches(pool: BufferPool, array: Any, nbytes: int, seed: int = 0) -> int:
    """Bytes of a device buffer that differ from the pattern, checked chunk by chunk through
    one reused (pinned) staging buffer."""
    staging, bad = pool.staging(), 0
    try:
        for start, length in chunks(nbytes):
            pool.backend.download(array, length, offset=start, out=staging)
            bad += int(count_unequal(staging[:length], pattern(seed, length)))
    except BaseException:
        # A download that ran out of time may still land later, while this buffer checks
        # another GPU's bytes (a false `invalid`): the next check gets a fresh one.
        pool.drop_staging()
        raise
    return bad


class BufferPool:
    def __init__(self, backend: GpuBackend) -> None:
        self.backend = backend
        self._arrays: dict[tuple[object, ...], Any] = {}
        self._streams: dict[tuple[int, int], Any] = {}
        self._staging: Any = None
        self._off_node: dict[tuple[object, ...], float] = {}
        """Host buffer key -> share of its sampled pages on its GPU's NUMA node, for a buffer
        that landed mostly elsewhere (the node short of free memory)."""
        self._unread: set[tuple[object, ...]] = set()
        """Host buffer keys whose pages could not be located (pinned memory is a driver's
        mapping; move_pages refused by a seccomp filter or a sandbox): placed as asked, as far
        as anyone can tell, but not read back."""
        self._pages: dict[tuple[object, ...], Pages] = {}
        """Host buffer key -> the pages backing it, read from smaps once it was touched."""
        self._overridden: dict[tuple[object, ...], str] = {}
        """Host buffer key -> why its GPU's NUMA node could not be asked for: an inherited
        memory policy (numactl --membind/--interleave) or a cpuset without that node."""

    def _drop(self, key: tuple[object, ...]) -> None:
        self._arrays.pop(key, None)
        self._off_node.pop(key, None)
        self._pages.pop(key, None)
        self._overridden.pop(key, None)
        self._unread.discard(key)

    def _get(self, key: tuple[object, ...], nbytes: int, allocate: Any) -> Any:
        current = self._arrays.get(key)
        if current is not None and current.nbytes >= nbytes:
            return current
        self._drop(key)
        del current
        self._arrays[key] = allocate()
        return self._arrays[key]

    def host(self, device: GpuDevice, nbytes: int, pinned: bool, slot: int = 0) -> Any:
        """Host memory for `device`, allocated under the memory policy MPOL_PREFERRED on its
        NUMA node and first-touched on that node's CPUs; where its pages really landed is
        read back (`off_node_share`). An inherited policy or cpuset that overrides the node
        is left as it is and recorded (`placement_override`)."""
        key = ("host", device.index, pinned, slot)

        def allocate() -> Any:
            with mempolicy.preferred_node(device.numa_node) as placement:
                array = self.backend.host_array(nbytes, pinned, device.cpus)
            if placement.override is not None:
                self._overridden[key] = placement.override
            if device.cpus and device.numa_node is not None and isinstance(array, np.ndarray):
                share = node_share([array], device.numa_node)
                if share is None:
                    self._unread.add(key)
                elif share < PLACED_SHARE:
                    self._off_node[key] = share
            return array

        return self._get(key, nbytes, allocate)

    def off_node_share(self, device: int) -> float | None:
        """The lowest share of pages on its NUMA node among `device`'s host buffers held now,
        where one landed mostly elsewhere; None where all are placed (or none is checked)."""
        shares = [share for key, share in self._off_node.items() if key[1] == device]
        return min(shares) if shares else None

    def host_pages(self, device: int, pinned: bool) -> Pages | None:
        """The pages backing `device`'s pinned (or pageable) host buffers held now, read once
        per buffer after a case has touched it (read at allocation, pages not yet touched
        would not exist); None where it holds none. Buffers on different page sizes (a
        slot's buffer older than another's) give the smallest, the one whose TLB misses
        show."""
        keys = [k for k in self._arrays if k[0] == "host" and k[1] == device and k[2] == pinned
                and isinstance(self._arrays[k], np.ndarray)]
        for key in keys:
            if key not in self._pages:
                self._pages[key] = backing_pages([self._arrays[key]])
        found = [self._pages[k] for k in keys]
        if not found:
            return None
        known = [p for p in found if p.page_bytes is not None]
        if len(known) < len(found):
            return next(p for p in found if p.page_bytes is None)
        return min(known, key=lambda p: (p.page_bytes or 0, p.huge_share or 0.0))

    def placement_override(self, device: int) -> str | None:
        """Why a host buffer held for `device` could not be asked of its NUMA node (an
        inherited memory policy, a cpuset without the node); None where nothing overrode."""
        return next((why for key, why in self._overridden.items() if key[1] == device), None)

    def placement_unread(self, device: int) -> bool:
        """Whether a host buffer held for `device` lies where nobody could read back."""
        return any(key[1] == device for key in self._unread)

    def device(self, device: int, nbytes: int, slot: int = 0) -> Any:
        return self._get(("device", device, slot), nbytes,
                         lambda: self.backend.device_array(device, nbytes))

    def staging(self) -> Any:
        """A CHUNK-sized host buffer (pinned where the backend pins) for validation downloads."""
        if self._staging is None:
            self._staging = self.backend.host_array(CHUNK, pinned=True)
        return self._staging

    def drop_staging(self) -> None:
        """Forget the staging buffer (a timed-out download may still write into it); the
        backend keeps it alive where freeing it would wait on a stalled GPU."""
        self._staging = None

    def stream(self, device: int, slot: int = 0) -> Any:
        key = (device, slot)
        if key not in self._streams:
            self._streams[key] = self.backend.new_stream(device)
        return self._streams[key]

    def device_bytes(self, device: int) -> int:
        """Bytes of `device` memory held here, which a job may reuse rather than allocate."""
        return sum(array.nbytes for key, array in self._arrays.items()
                   if key[0] == "device" and key[1] == device)

    def keep_device_slots(self, device: int, slots: Collection[int]) -> None:
        """Free `device` buffers in slots other than `slots`: a GPU held as a P2P source must not
        also keep its buffer as a target once it plays the other role."""
        for key in [k for k in self._arrays
                    if k[0] == "device" and k[1] == device and k[2] not in slots]:
            self._drop(key)

    def drop_host_except(self, device: int) -> None:
        """Free host buffers held for other GPUs: a sweep over 8 GPUs keeps one GPU's pinned
        memory, not eight."""
        for key in [k for k in self._arrays if k[0] == "host" and k[1] != device]:
            self._drop(key)

    def release(self) -> None:
        """Drop every buffer (streams are kept); called when the case changes."""
        self._arrays.clear()
        self._off_node.clear()
        self._unread.clear()
        self._pages.clear()
        self._overridden.clear()
        self.backend.release()
