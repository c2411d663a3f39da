"""Fixtures for GPU code: `cudasim` for kernel logic under Numba's simulator, `real_gpu` for
tests marked `gpu` that need an NVIDIA device and skip themselves without one."""

from __future__ import annotations

import pytest


@pytest.fixture
def cudasim():
    """numba.cuda as the simulator; skips when the process runs with the real CUDA target."""
    from numba import config, cuda

    if not config.ENABLE_CUDASIM:
        pytest.skip("Numba CUDA simulator is not enabled in this process (real-GPU run)")
    return cuda


@pytest.fixture
def real_gpu():
    """Index of a real CUDA device, or skip with the reason there is none."""
    from numba import config

    from bwprof.gpu.runtime import probe

    if config.ENABLE_CUDASIM:
        pytest.skip("the Numba CUDA simulator is on; run real-GPU tests with: pytest -m gpu")
    found = probe()
    if found.count == 0:
        pytest.skip(found.reason or "no CUDA device")
    return 0
