"""The one module that talks to CuPy.

CuPy imports without a GPU, but creating streams, events or arrays without a driver raises
and can leave noise behind, so nothing here touches CuPy before `device_count()` says a
device exists.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from types import ModuleType

NO_GPU_REASON = "no NVIDIA driver / no CUDA device found"


def import_cupy() -> ModuleType:
    """Import whichever CuPy wheel is installed (cupy-cuda12x, cupy-cuda13x, ...), quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import cupy

    return cupy


@dataclass(frozen=True)
class GpuProbe:
    """How many CUDA devices this process sees, and if none, why (one line) and the raw cause."""

    count: int
    reason: str | None = None
    detail: str | None = None


def probe() -> GpuProbe:
    """Count CUDA devices without raising and without leaving CuPy objects behind."""
    try:
        cupy = import_cupy()
    except ImportError as exc:
        return GpuProbe(0, f"{NO_GPU_REASON} (CuPy is not installed)", str(exc))
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver; anything else alike
        return GpuProbe(0, NO_GPU_REASON, f"{type(exc).__name__}: {exc}")
    if count == 0:
        return GpuProbe(0, NO_GPU_REASON, "cudaGetDeviceCount returned 0")
    return GpuProbe(count)
