"""The CuPy layer's set-up that holds without a GPU (the rest runs in test_on_device.py)."""

import os

import pytest

from bwprof.gpu.runtime import NO_GPU_REASON, import_cupy, probe


def test_kernels_load_eagerly_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("CUDA_MODULE_LOADING", raising=False)
    import_cupy()
    assert os.environ["CUDA_MODULE_LOADING"] == "EAGER"
    monkeypatch.setenv("CUDA_MODULE_LOADING", "LAZY")
    import_cupy()
    assert os.environ["CUDA_MODULE_LOADING"] == "LAZY"


def test_probe_without_a_driver_says_why_in_one_line():
    found = probe()
    if found.count:
        pytest.skip(f"this machine has {found.count} CUDA device(s)")
    assert found.reason.startswith(NO_GPU_REASON) and "\n" not in found.reason
