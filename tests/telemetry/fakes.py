"""A fake `pynvml` built on the real module's errors and constants, and an H200 scenario."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml

H200_BUS_ID = "00000000:1B:00.0"  # NVML's spelling of CUDA's "0000:1B:00.0"


def fake_pynvml(**functions: Any) -> SimpleNamespace:
    """A pynvml stand-in: the real NVMLError classes and NVML_* constants, given functions."""
    names = {k: v for k, v in vars(pynvml).items()
             if k.startswith(("NVMLError", "NVML_", "NVMLLibraryMismatchError"))}
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


def field_values(answers: dict[int, int | float]) -> Any:
    """nvmlDeviceGetFieldValues answering `answers` (field id: value; an int as NVML's
    unsigned int, a float as its double), every other id NotSupported, as the driver does:
    the call succeeds and each value carries its own return code."""
    def get(_handle: object, ids: list[int]) -> Any:
        values = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for value, field in zip(values, ids, strict=True):
            value.fieldId = field
            answer = answers.get(field)
            if answer is None:
                value.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif isinstance(answer, float):
                value.valueType, value.value.dVal = pynvml.NVML_VALUE_TYPE_DOUBLE, answer
                value.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                value.valueType, value.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, answer
                value.nvmlReturn = pynvml.NVML_SUCCESS
        return values
    return get


def h200_functions() -> dict[str, Any]:
    """One H200 SXM on a Gen5 x16 slot with 18 NVLink 4 links, CPUs 0-31,64-95 on node 1."""
    mem, sm, graphics = pynvml.NVML_CLOCK_MEM, pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS

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
        "nvmlDeviceGetSerial": lambda h: b"1654123456789",  # pynvml returns bytes
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=H200_BUS_ID.encode()),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=150754820096, free=0, used=0),
        "nvmlDeviceGetMemoryBusWidth": lambda h: 6016,  # as the H200 in tests/data reports
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: {mem: 3201, sm: 1980}[kind],
        # An H200 ships its application clocks at the maximum: default = in force = max.
        "nvmlDeviceGetApplicationsClock": lambda h, kind: {mem: 3201, graphics: 1980,
                                                           sm: 1980}[kind],
        "nvmlDeviceGetDefaultApplicationsClock": lambda h, kind: {mem: 3201, graphics: 1980,
                                                                  sm: 1980}[kind],
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetNumaNodeId": raises(pynvml.NVMLError_NotSupported),
        "nvmlDeviceGetMemoryAffinity": lambda h, words, scope: [0b10] + [0] * (words - 1),
        "nvmlDeviceGetCpuAffinity": cpu_affinity,
        "nvmlSystemGetDriverVersion": lambda: "580.159.04",
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 13000,
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlDeviceGetVbiosVersion": lambda h: b"96.00.A5.00.1A",
        "nvmlDeviceGetEccMode": lambda h: [1, 1],
        "nvmlDeviceGetPowerManagementLimit": lambda h: 700000,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 690000,  # in force: lower than configured
        # A PCIe-attached H200: the driver has the C2C query and says it does not apply.
        "nvmlDeviceGetC2cModeInfoV1": raises(pynvml.NVMLError_NotSupported),
        "nvmlDeviceGetFieldValues": field_values({pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: 18}),
        "nvmlDeviceGetNvLinkState": nvlink_state,
        "nvmlDeviceGetNvLinkVersion": lambda h, link: pynvml.NVML_NVLINK_VERSION_4_0,
        # An HGX board: every link goes to an NVSwitch.
        "nvmlDeviceGetNvLinkRemoteDeviceType": (
            lambda h, link: pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        ),
    }


ECC_KEYS = {  # nvmlDeviceGetTotalEccErrors's (error type, counter type): the fake's key
    (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): "corrected_volatile",
    (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): "uncorrected_volatile",
    (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC): "corrected_aggregate",
    (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC):
        "uncorrected_aggregate",
}


def health_functions(config: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """NVML's health calls over `config` (handle: that GPU's dict), read live so a test can
    raise a count mid-run. A GPU's dict may hold `ecc` (a dict by ECC_KEYS' names; a name
    left out answers NotSupported),
    `remapped` ([corrected, uncorrected, pending, failure]), `retired` ({cause: [pages]}),
    `retired_pending` (0 or 1), `xids` (Xid numbers queued for its event set: given, it
    supports critical Xid events), `app_clocks` and `default_app_clocks` ({clock type: MHz};
    a clock type left out answers NotSupported); what it lacks answers NotSupported, as a GPU
    with ECC off or without that mechanism does."""
    def supported(gpu: dict[str, Any], key: str) -> Any:
        if key not in gpu:
            raise pynvml.NVMLError_NotSupported()
        return gpu[key]

    def ecc(handle: str, error_type: int, counter_type: int) -> int:
        return int(supported(supported(config[handle], "ecc"),
                             ECC_KEYS[(error_type, counter_type)]))

    def event_types(handle: str) -> int:
        supported(config[handle], "xids")
        return pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeClock

    def register(handle: str, types: int, event_set: dict[str, Any]) -> None:
        supported(config[handle], "xids")
        event_set["handles"].append(handle)
        event_set["types"] = types

    def wait(event_set: dict[str, Any], timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0, "bwprof never waits for an event"
        for handle in event_set["handles"]:
            if config[handle]["xids"]:
                return SimpleNamespace(device=handle, eventData=config[handle]["xids"].pop(0),
                                       eventType=pynvml.nvmlEventTypeXidCriticalError)
        raise pynvml.NVMLError_Timeout()

    event_sets: list[dict[str, Any]] = []

    def create() -> dict[str, Any]:
        event_sets.append({"handles": [], "freed": False})
        return event_sets[-1]

    def free(event_set: dict[str, Any]) -> None:
        event_set["freed"] = True

    return {
        "nvmlDeviceGetTotalEccErrors": ecc,
        "nvmlDeviceGetRemappedRows": lambda h: tuple(supported(config[h], "remapped")),
        "nvmlDeviceGetRetiredPages": lambda h, cause: list(
            supported(config[h], "retired").get(cause, [])),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: supported(
            config[h], "retired_pending"),
        "nvmlDeviceGetSupportedEventTypes": event_types,
        "nvmlEventSetCreate": create,
        "nvmlDeviceRegisterEvents": register,
        "nvmlEventSetWait": wait,
        "nvmlEventSetFree": free,
        "nvmlDeviceGetApplicationsClock": lambda h, kind: supported(
            supported(config[h], "app_clocks"), kind),
        "nvmlDeviceGetDefaultApplicationsClock": lambda h, kind: supported(
            supported(config[h], "default_app_clocks"), kind),
        "event_sets": event_sets,
    }


def counter_functions(gpus: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Live counters for several GPUs, keyed by NVML bus id; each GPU's dict may override
    `curr_gen`, `curr_width`, `reasons`, `gpm`, `lost_after` (reads before it falls off),
    and hold the health of `health_functions`; `gpu_config` gives each GPU's live dict by
    bus id (a test may change one mid-run to raise a count)."""
    handles = {bus: f"h{i}" for i, bus in enumerate(gpus)}
    config = {handles[bus]: {"reads": 0, **values} for bus, values in gpus.items()}
    clock = {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 3201}
    instant_power = field_values({pynvml.NVML_FI_DEV_POWER_INSTANT: 655_000})

    def live(fn: Any) -> Any:
        """Raise GpuIsLost once a GPU has been read `lost_after` times."""
        def wrapper(handle: str, *args: object) -> object:
            gpu = config[handle]
            if gpu.get("lost_after") is not None and gpu["reads"] > gpu["lost_after"]:
                raise pynvml.NVMLError_GpuIsLost()
            return fn(gpu, *args)
        return wrapper

    def by_bus(bus_id: str) -> str:
        if bus_id not in handles:
            raise pynvml.NVMLError_NotFound()
        return handles[bus_id]

    def utilisation(gpu: dict[str, Any]) -> SimpleNamespace:
        gpu["reads"] += 1  # one utilisation read per sample: the sample counter
        return SimpleNamespace(gpu=97, memory=40)

    def gpm_support(handle: str) -> SimpleNamespace:
        return SimpleNamespace(isSupportedDevice=int(config[handle].get("gpm", False)))

    buffers = {"allocated": 0, "freed": 0}  # GPM sample buffers, to catch a leak

    def alloc() -> Any:
        buffers["allocated"] += 1
        return pynvml.c_nvmlGpmSample_t()

    def free(sample: Any) -> None:
        buffers["freed"] += 1

    def gpm_metrics(request: Any) -> Any:
        values = {10: 85.0, 20: 100.0, 21: 50_000.0, 60: 0.0, 61: 0.0}
        for i in range(request.numMetrics):
            request.metrics[i].value = values.get(request.metrics[i].metricId, 0.0)
            request.metrics[i].nvmlReturn = pynvml.NVML_SUCCESS
        return request

    return {
        "nvmlDeviceGetHandleByPciBusId": by_bus,
        "nvmlDeviceGetUtilizationRates": live(utilisation),
        "nvmlDeviceGetClockInfo": live(lambda gpu, kind: clock[kind]),
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: clock[kind],
        "nvmlDeviceGetMemoryBusWidth": lambda h: 6016,
        "nvmlDeviceGetPowerUsage": live(lambda gpu: 650_000),  # a 1-second average
        "nvmlDeviceGetFieldValues": live(
            lambda gpu, ids: instant_power(None, ids)),
        "nvmlDeviceGetTemperature": live(lambda gpu, sensor: 61),
        "nvmlDeviceGetPcieThroughput": live(
            lambda gpu, counter: 52_000_000 if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES
            else 1_000),
        "nvmlDeviceGetCurrPcieLinkGeneration": live(lambda gpu: gpu.get("curr_gen", 5)),
        "nvmlDeviceGetCurrPcieLinkWidth": live(lambda gpu: gpu.get("curr_width", 16)),
        "nvmlDeviceGetCurrentClocksEventReasons": live(lambda gpu: gpu.get("reasons", 0)),
        "nvmlDeviceGetComputeRunningProcesses": live(
            lambda gpu: [SimpleNamespace(pid=p) for p in gpu.get("pids", [])]),
        "nvmlGpmQueryDeviceSupport": gpm_support,
        "nvmlGpmSampleAlloc": alloc,
        "nvmlGpmSampleGet": live(lambda gpu, sample: sample),
        "nvmlGpmSampleFree": free,
        "nvmlGpmMetricsGet": gpm_metrics,
        "gpm_buffers": buffers,
        **health_functions(config),
        "gpu_config": {bus: config[handle] for bus, handle in handles.items()},
    }


def counter_pynvml(gpus: dict[str, dict[str, Any]], **overrides: Any) -> SimpleNamespace:
    """A fake pynvml serving `counter_functions(gpus)`, with the GPM request struct."""
    functions = counter_functions(gpus)
    buffers = functions.pop("gpm_buffers")
    event_sets = functions.pop("event_sets")
    gpu_config = functions.pop("gpu_config")
    fake = fake_pynvml(**{**functions, **overrides})
    fake.gpm_buffers = buffers
    fake.event_sets = event_sets
    fake.gpu_config = gpu_config
    fake.c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t
    return fake
