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

    skip_or_fail_without_gpu(config.ENABLE_CUDASIM, probe())
    return 0


def skip_or_fail_without_gpu(simulator_on: bool, found: object) -> None:
    """Skip a real-GPU test without a device; fail instead under BWPROF_REQUIRE_GPU=1 (the
    GPU check script), so a run where every GPU test skipped cannot pass as a success."""
    import os

    reason = None
    if simulator_on:
        reason = "the Numba CUDA simulator is on; run real-GPU tests with: pytest -m gpu"
    elif found.count == 0:  # type: ignore[attr-defined]
        reason = found.reason or "no CUDA device"  # type: ignore[attr-defined]
    if reason is None:
        return
    if os.environ.get("BWPROF_REQUIRE_GPU") == "1":
        pytest.fail(f"BWPROF_REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)
