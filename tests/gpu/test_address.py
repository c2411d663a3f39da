"""The raw-address load the chase steps with (`bwprof.gpu.address`): under the CUDA simulator
it reads only the arrays registered with `readable`, so a wrong address is an error, not a
read of whatever this process has there (or a segfault of the whole test run)."""

from __future__ import annotations

import numpy as np
import pytest

from bwprof.gpu.address import UnmappedAddress, readable, simulated_load_u64


def _address(array: np.ndarray, word: int = 0) -> int:
    return int(array.__array_interface__["data"][0]) + 8 * word


def test_a_simulated_load_reads_a_registered_array():
    words = np.arange(4, dtype=np.uint64) + np.uint64(7)
    with readable(words):
        assert simulated_load_u64(_address(words, 3)) == 10


def test_a_simulated_load_outside_every_registered_array_raises():
    """A live array that was not registered is refused like a wild address: the load must
    never read memory a test did not hand it (at an unmapped address, the old load killed
    pytest with a segfault)."""
    words = np.arange(4, dtype=np.uint64)
    other = np.arange(4, dtype=np.uint64)
    with pytest.raises(UnmappedAddress, match="not an aligned word"):
        simulated_load_u64(_address(words))
    with readable(other):
        with pytest.raises(IndexError):
            simulated_load_u64(_address(words))
        with pytest.raises(IndexError):  # one past the end, and a word straddling it
            simulated_load_u64(_address(other, 4))
        with pytest.raises(IndexError):
            simulated_load_u64(_address(other) + 4)
        with pytest.raises(IndexError):
            simulated_load_u64(8)  # the null page: was a segfault
    with pytest.raises(IndexError):  # the registration ends with its block
        simulated_load_u64(_address(other))
