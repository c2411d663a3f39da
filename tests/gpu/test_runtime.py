"""The CuPy layer's set-up that holds without a GPU (the rest runs in test_on_device.py)."""

import pytest

from bwprof.gpu.runtime import NO_GPU_REASON, probe


def test_probe_without_a_driver_says_why_in_one_line():
    found = probe()
    if found.count:
        pytest.skip(f"this machine has {found.count} CUDA device(s)")
    assert found.reason.startswith(NO_GPU_REASON) and "\n" not in found.reason


def test_a_kernel_is_loaded_into_the_current_context_before_use():
    """numba-cuda's kernels are library kernels (CUkernel): _load asks for the function in
    the current context, which loads it there instead of at the first (gated) launch."""
    from types import SimpleNamespace

    from cuda.bindings import driver as binding

    from bwprof.gpu.runtime import CudaBackend

    asked, bound = [], []
    kernel = SimpleNamespace(handle=0x7F00)
    compiled = SimpleNamespace(
        bind=lambda: bound.append(True),
        _codelibrary=SimpleNamespace(get_cufunc=lambda: SimpleNamespace(kernel=kernel)))
    CudaBackend._load(compiled, get_function=asked.append)
    assert bound == [True]
    assert len(asked) == 1 and isinstance(asked[0], binding.CUkernel)
    assert int(asked[0]) == 0x7F00
    # An older numba-cuda (module functions, no cuda.core kernel): bound, nothing more.
    older = SimpleNamespace(bind=lambda: bound.append(True), _codelibrary=SimpleNamespace(
        get_cufunc=lambda: SimpleNamespace(handle=1)))
    CudaBackend._load(older, get_function=asked.append)
    assert len(bound) == 2 and len(asked) == 1


def test_a_kernel_that_cannot_be_loaded_early_is_a_warning_not_an_error(caplog):
    from types import SimpleNamespace

    from bwprof.gpu.runtime import CudaBackend

    def refuse(kernel):
        raise RuntimeError("CUDA_ERROR_NOT_FOUND")

    compiled = SimpleNamespace(bind=lambda: None, _codelibrary=SimpleNamespace(
        get_cufunc=lambda: SimpleNamespace(kernel=SimpleNamespace(handle=1))))
    CudaBackend._load(compiled, get_function=refuse)
    assert "could not load a kernel" in caplog.text and "CUDA_ERROR_NOT_FOUND" in caplog.text
