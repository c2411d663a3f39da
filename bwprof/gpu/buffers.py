"""Buffers and streams reused across the sizes of a case, so a sweep allocates (and pins)
memory a handful of times instead of once per size. Sizes grow through a sweep, so a buffer
is replaced by a larger one when needed; the old one is dropped first to keep peak use low.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from bwprof.gpu.backend import GpuBackend
from bwprof.gpu.devices import GpuDevice

PATTERN_PERIOD = (1 << 20) + 7  # not a power of two: an offset bug of 2^k bytes cannot hide
CHUNK = 32 * PATTERN_PERIOD  # bytes moved per step when filling or checking large buffers


@lru_cache(maxsize=1)
def _chunk_pattern() -> np.ndarray:
    block = np.random.default_rng(20261129).integers(0, 256, PATTERN_PERIOD, dtype=np.uint8)
    return np.tile(block, CHUNK // PATTERN_PERIOD)


def _chunks(nbytes: int) -> list[tuple[int, int]]:
    return [(start, min(CHUNK, nbytes - start)) for start in range(0, nbytes, CHUNK)]


def fill_pattern(host: np.ndarray, nbytes: int) -> None:
    """Write the validation pattern into the first `nbytes` of a host buffer."""
    block = _chunk_pattern()
    for start, length in _chunks(nbytes):
        host[start : start + length] = block[:length]


def upload_pattern(backend: GpuBackend, array: Any, nbytes: int) -> None:
    """Write the validation pattern into the first `nbytes` of a device buffer."""
    block = _chunk_pattern()
    for start, length in _chunks(nbytes):
        backend.upload(array, block[:length], offset=start)


def host_mismatches(host: np.ndarray, nbytes: int) -> int:
    """Bytes of a host buffer that differ from the pattern."""
    block = _chunk_pattern()
    return sum(int(np.count_nonzero(host[start : start + length] != block[:length]))
               for start, length in _chunks(nbytes))


def device_mismatches(backend: GpuBackend, array: Any, nbytes: int) -> int:
    """Bytes of a device buffer that differ from the pattern, checked chunk by chunk."""
    block = _chunk_pattern()
    return sum(
        int(np.count_nonzero(backend.download(array, length, offset=start) != block[:length]))
        for start, length in _chunks(nbytes)
    )


class BufferPool:
    def __init__(self, backend: GpuBackend) -> None:
        self.backend = backend
        self._arrays: dict[tuple[object, ...], Any] = {}
        self._streams: dict[tuple[int, int], Any] = {}

    def _get(self, key: tuple[object, ...], nbytes: int, allocate: Any) -> Any:
        current = self._arrays.get(key)
        if current is not None and current.nbytes >= nbytes:
            return current
        self._arrays.pop(key, None)
        del current
        self._arrays[key] = allocate()
        return self._arrays[key]

    def host(self, device: GpuDevice, nbytes: int, pinned: bool, slot: int = 0) -> Any:
        """Host memory for `device`, first-touched on the CPUs of its NUMA node."""
        return self._get(("host", device.index, pinned, slot), nbytes,
                         lambda: self.backend.host_array(nbytes, pinned, device.cpus))

    def device(self, device: int, nbytes: int, slot: int = 0) -> Any:
        return self._get(("device", device, slot), nbytes,
                         lambda: self.backend.device_array(device, nbytes))

    def stream(self, device: int, slot: int = 0) -> Any:
        key = (device, slot)
        if key not in self._streams:
            self._streams[key] = self.backend.new_stream(device)
        return self._streams[key]

    def device_bytes(self, device: int) -> int:
        """Bytes of `device` memory held here, which a job may reuse rather than allocate."""
        return sum(array.nbytes for key, array in self._arrays.items()
                   if key[0] == "device" and key[1] == device)

    def release(self) -> None:
        """Drop every buffer (streams are kept); called when the case changes."""
        self._arrays.clear()
        self.backend.release()
