"""A fake `pynvml` built on the real module's errors and constants, and an H200 scenario."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml

H200_BUS_ID = "00000000:1B:00.0"  # NVML's spelling of CUDA's "0000:1B:00.0"


def fake_pynvml(**functions: Any) -> SimpleNamespace:
    """A pynvml stand-in: the real NVMLError classes and NVML_* constants, given functions."""
    names = {k: v for k, v in vars(pynvml).items() if k.startswith(("NVMLError", "NVML_"))}
    calls: list[tuple[str, tuple[object, ...]]] = []
    fake = SimpleNamespace(**names, calls=calls)

    def recorded(name: str, fn: Any) -> Any:
        def wrapper(*args: object) -> object:
            calls.append((name, args))
            return fn(*args)
        return wrapper

    defaults = {"nvmlInit": lambda: None, "nvmlShutdown": lambda: None}
    for name, fn in {**defaults, **functions}.items():
        setattr(fake, name, recorded(name, fn))
    return fake


def raises(error: type[Exception]) -> Any:
    def fn(*_args: object) -> object:
        raise error()
    return fn


def h200_functions() -> dict[str, Any]:
    """One H200 SXM on a Gen5 x16 slot with 18 NVLink 4 links, CPUs 0-31,64-95 on node 1."""
    mem, sm = pynvml.NVML_CLOCK_MEM, pynvml.NVML_CLOCK_SM

    def handle_by_bus(bus_id: str) -> str:
        if bus_id != H200_BUS_ID:
            raise pynvml.NVMLError_NotFound()
        return "h200"

    def handle_by_index(index: int) -> str:
        if index != 0:
            raise pynvml.NVMLError_InvalidArgument()
        return "h200"

    def nvlink_state(_handle: str, link: int) -> int:
        if link >= 18:
            raise pynvml.NVMLError_InvalidArgument()
        return pynvml.NVML_FEATURE_ENABLED

    def cpu_affinity(_handle: str, words: int) -> list[int]:
        return ([0xFFFFFFFF, 0xFFFFFFFF] + [0] * words)[: max(words, 2)]

    return {
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": handle_by_index,
        "nvmlDeviceGetHandleByPciBusId": handle_by_bus,
        "nvmlDeviceGetName": lambda h: "NVIDIA H200",
        "nvmlDeviceGetUUID": lambda h: "GPU-12345678-1234-1234-1234-123456789abc",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=H200_BUS_ID.encode()),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=150754820096, free=0, used=0),
        "nvmlDeviceGetMemoryBusWidth": lambda h: 6144,
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: {mem: 3201, sm: 1980}[kind],
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetNumaNodeId": raises(pynvml.NVMLError_NotSupported),
        "nvmlDeviceGetMemoryAffinity": lambda h, words, scope: [0b10] + [0] * (words - 1),
        "nvmlDeviceGetCpuAffinity": cpu_affinity,
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 12040,
        "nvmlSystemGetCudaDriverVersion": lambda: 12040,
        "nvmlDeviceGetVbiosVersion": lambda h: b"96.00.89.00.01",
        "nvmlDeviceGetEccMode": lambda h: [1, 1],
        "nvmlDeviceGetPowerManagementLimit": lambda h: 700000,
        "nvmlDeviceGetNvLinkState": nvlink_state,
        "nvmlDeviceGetNvLinkVersion": lambda h, link: pynvml.NVML_NVLINK_VERSION_4_0,
        # An HGX board: every link goes to an NVSwitch.
        "nvmlDeviceGetNvLinkRemoteDeviceType": (
            lambda h, link: pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        ),
    }
