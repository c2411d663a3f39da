"""The numbers the CUDA kernels and the code that checks their results share, importable
without Numba (the case table and the checks load this; only launching needs the kernels)."""

from __future__ import annotations

from typing import TypeVar

import numpy as np

Start = TypeVar("Start", float, np.ndarray)

DOT_BLOCKS = 1024
"""Blocks of the dot kernel: it writes one partial sum per block, summed on the host."""
COMPUTE_SCALE = 1.0
COMPUTE_STEP = 2.0**-20
COMPUTE_MAX_ITERATIONS = (1 << 20) - 1
"""Inputs of 1.0 stay in [1, 2) up to here, where every step of 2^-20 is exact."""


def compute_gold(start: Start, iterations: int) -> Start:
    """What `compute` leaves in y for an input `start` (exact for start in [1, 2)); an
    array of inputs gives the array of results."""
    return start + iterations * COMPUTE_STEP
