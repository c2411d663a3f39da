"""The switches that decide whether GPU code is checked here: the simulator for CPU runs, and
real-GPU tests that skip without a device but fail when a GPU check demands one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import wants_real_gpu
from tests.gpu.conftest import skip_or_fail_without_gpu

NO_DEVICE = SimpleNamespace(count=0, reason="no NVIDIA driver / no CUDA device found")
ONE_DEVICE = SimpleNamespace(count=1, reason=None)


def test_cpu_runs_check_kernel_logic_under_the_simulator():
    """Without `-m gpu` the kernel tests must run on the simulator, not skip."""
    from numba import config

    assert config.ENABLE_CUDASIM


def test_only_a_gpu_selection_asks_for_the_real_device():
    assert wants_real_gpu("gpu") and wants_real_gpu("gpu and not slow")
    assert not wants_real_gpu("") and not wants_real_gpu("not gpu")


def test_without_a_device_gpu_tests_skip_or_fail_when_required(monkeypatch):
    monkeypatch.delenv("BWPROF_REQUIRE_GPU", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no NVIDIA driver"):
        skip_or_fail_without_gpu(False, NO_DEVICE)
    with pytest.raises(pytest.skip.Exception, match="simulator is on"):
        skip_or_fail_without_gpu(True, ONE_DEVICE)
    skip_or_fail_without_gpu(False, ONE_DEVICE)  # a device, no simulator: the test runs
    monkeypatch.setenv("BWPROF_REQUIRE_GPU", "1")
    with pytest.raises(pytest.fail.Exception, match="BWPROF_REQUIRE_GPU=1 but no NVIDIA"):
        skip_or_fail_without_gpu(False, NO_DEVICE)
    with pytest.raises(pytest.fail.Exception, match="simulator is on"):
        skip_or_fail_without_gpu(True, ONE_DEVICE)
