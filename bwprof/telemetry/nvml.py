"""The one place bwprof talks to NVML (through nvidia-ml-py's `pynvml`).

Every call goes through `Nvml.query`, which returns a default instead of raising when a
function is unsupported on this GPU, missing from this driver or from this pynvml, or refused
for lack of permission: unsupported is not an error, it is a field recorded as None. Without a
driver NVML is simply off, with a one-line reason for the report.

Devices are looked up by PCI bus id, because CUDA's device order can differ from NVML's
(CUDA_DEVICE_ORDER=FASTEST_FIRST by default, and CUDA_VISIBLE_DEVICES renumbers).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from bwprof.cpulist import format_cpu_list
from bwprof.pci import SYS_PCI_DEVICES, parse_pci_bus_id
from bwprof.peaks import hbm_peak_gbps, nvlink_peak_gbps, pcie_peak_gbps

log = logging.getLogger("bwprof.nvml")


# nvmlDeviceGetNvLinkVersion returns the nvmlNvlinkVersion_t enum, not the version number
# (A100 answers 5 = NVLINK_VERSION_3_1). Map each NVML_NVLINK_VERSION_* value to its major version.
NVLINK_VERSION_FROM_ENUM: dict[int, int] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

# Fallbacks for constants, used only if an old pynvml lacks them (values from nvml.h).
_CONSTANT_DEFAULTS: dict[str, int] = {
    "NVML_CLOCK_GRAPHICS": 0,
    "NVML_CLOCK_SM": 1,
    "NVML_CLOCK_MEM": 2,
    "NVML_FEATURE_ENABLED": 1,
    "NVML_NVLINK_MAX_LINKS": 18,
    "NVML_AFFINITY_SCOPE_NODE": 0,
    "NVML_NVLINK_DEVICE_TYPE_SWITCH": 2,
    "NVML_FI_DEV_NVLINK_LINK_COUNT": 91,
    "NVML_FI_DEV_POWER_INSTANT": 186,
    "NVML_PCIE_UTIL_TX_BYTES": 0,
    "NVML_PCIE_UTIL_RX_BYTES": 1,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_DEVICE_MIG_ENABLE": 1,
    "NVML_CC_SYSTEM_FEATURE_ENABLED": 1,
    "NVML_FI_DEV_C2C_LINK_COUNT": 170,
    "NVML_FI_DEV_C2C_LINK_GET_MAX_BW": 172,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "NVML_AGGREGATE_ECC": 1,
    "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS": 0,
    "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR": 1,
    "nvmlEventTypeXidCriticalError": 0x8,
}

MAX_EVENTS_PER_DRAIN = 64
"""Events read from one event set per drain: a GPU raising Xids in a storm must not keep the
run in NVML; the ones left stay queued for the next drain."""

# c_nvmlValue_t's member for each nvmlValueType_t (NVML_VALUE_TYPE_DOUBLE = 0, ...).
_FIELD_VALUE_MEMBERS: dict[int, str] = {
    0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal",
}

_INIT_REASONS: tuple[tuple[str, str], ...] = (
    ("NVMLError_LibraryNotFound", "NVIDIA driver library not found (libnvidia-ml.so.1)"),
    ("NVMLError_DriverNotLoaded", "NVIDIA driver not loaded"),
    ("NVMLError_NoPermission", "no permission to use the NVIDIA driver"),
)

# (function name, error kind) pairs already logged: each once per process, so a link that
# does not exist (InvalidArgument) does not hide a later, different error from the same call.
_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()

def set_bits(words: Iterable[int], bits_per_word: int = 64) -> list[int]:
    """Indices of the set bits in NVML's bitmask arrays (word 0 holds bits 0-63)."""
    return [
        index * bits_per_word + bit
        for index, word in enumerate(words)
        for bit in range(bits_per_word)
        if (int(word) >> bit) & 1
    ]


def cpu_list_from_mask_words(words: Iterable[int], bits_per_word: int = 64) -> str:
    """Turn affinity bitmask words (word 0 holds CPUs 0-63) into a list like '0-31,64-95'.

    The same spelling Linux uses in cpulist files, so it can be compared or passed to taskset.
    """
    return format_cpu_list(set_bits(words, bits_per_word))


def cuda_version_string(version: int | None) -> str | None:
    """NVML's CUDA driver version integer (12040) as '12.4'."""
    if not version or version <= 0:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


def _text(value: object) -> object:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _count(value: object) -> int | None:
    """A counter NVML gave (an int, never negative), else None."""
    return int(value) if isinstance(value, int) and value >= 0 else None


def _nonnegative(value: object) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


class Nvml:
    """Lazily initialised NVML session; safe to use when there is no driver at all.

    `module` replaces `pynvml` (tests pass a fake); `sysfs_pci_root` replaces
    /sys/bus/pci/devices for the NUMA fallback.
    """

    def __init__(
        self, module: Any = None, *, sysfs_pci_root: Path = SYS_PCI_DEVICES
    ) -> None:
        self._module = module
        self._sysfs_pci_root = sysfs_pci_root
        self._lock = threading.Lock()
        self._tried = False
        self._initialised = False
        self.reason: str | None = None
        self._lost: set[int] = set()  # id() of handles NVML called lost (fallen off the bus)

    # -- session -------------------------------------------------------------------------------

    def available(self) -> bool:
        """Initialise NVML on first use; False (with `reason` set) when it cannot be used."""
        with self._lock:
            if not self._tried:
                self._tried = True
                self.reason = self._init()
                self._initialised = self.reason is None
                if self.reason:
                    log.info(self.reason)
            return self._initialised

    def _init(self) -> str | None:
        if self._module is None:
            try:
                with warnings.catch_warnings():
                    # The deprecated `pynvml` shim package warns on import; nvidia-ml-py does not.
                    warnings.simplefilter("ignore", FutureWarning)
                    self._module = importlib.import_module("pynvml")
            except ImportError:
                return "NVML unavailable: nvidia-ml-py is not installed (import pynvml failed)"
        base = getattr(self._module, "NVMLError", None)
        try:
            self._module.nvmlInit()
        except Exception as err:  # classified below; anything else is re-raised
            if base is None or not isinstance(err, (base, OSError)):
                raise
            for name, text in _INIT_REASONS:
                cls = getattr(self._module, name, None)
                if cls is not None and isinstance(err, cls):
                    return f"NVML unavailable: {text}"
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            return f"NVML unavailable: {detail}"
        return None

    def shutdown(self) -> None:
        """Release NVML if this object initialised it; a later call initialises it again."""
        with self._lock:
            if self._initialised:
                try:
                    self._module.nvmlShutdown()
                except self._module.NVMLError as err:
                    log.info("nvmlShutdown failed: %s", err)
            self._initialised = False
            self._tried = False

    @property
    def module(self) -> ModuleType | Any:
        """The pynvml module in use (None before the first `available()`)."""
        return self._module

    def constant(self, name: str) -> int:
        """An NVML constant from pynvml, falling back to nvml.h's value for old pynvml."""
        value = getattr(self._module, name, None)
        return int(_CONSTANT_DEFAULTS[name] if value is None else value)

    # -- the one query function ----------------------------------------------------------------

    def query(self, function_name: str, *args: object, default: Any = None,
              unsupported: set[tuple[object, ...]] | None = None) -> Any:
        """Call `pynvml.<function_name>(*args)`; `default` when NVML cannot answer.

        Unsupported, missing (older driver or pynvml), refused and unknown errors all give
        `default`; each function name is logged once per process at INFO on logger
        "bwprof.nvml". Bytes results are decoded to str. With `unsupported` (one GPU's set,
        kept by the caller), a call that answered NotSupported is remembered there by its
        name and arguments after the handle, and not made again.
        """
        key = (function_name, *args[1:])
        if unsupported is not None and key in unsupported:
            return default
        if not self.available():
            return default
        try:
            function = getattr(self._module, function_name)
        except AttributeError:
            self._report(function_name, "not in this pynvml", "missing", default)
            return default
        try:
            result = function(*args)
        except self._errors as err:
            kind = type(err).__name__
            if kind == "NVMLError_GpuIsLost" and args:
                self._lost.add(id(args[0]))
            if kind == "NVMLError_NotSupported" and unsupported is not None:
                unsupported.add(key)
            if kind != "NVMLError_Timeout":  # an event wait that found no event: no failure
                self._report(function_name, str(err) or kind, kind, default)
            return default
        return _text(result)

    def is_lost(self, handle: Any) -> bool:
        """Whether NVML answered GpuIsLost for this handle: the GPU fell off the bus."""
        return id(handle) in self._lost

    @property
    def _errors(self) -> tuple[type[BaseException], ...]:
        """What an NVML call raises when it cannot answer: NVMLError, and the plain Exception
        pynvml raises for an unversioned function the driver's library does not match."""
        mismatch = getattr(self._module, "NVMLLibraryMismatchError", None)
        return (self._module.NVMLError, *([mismatch] if mismatch else []))

    @staticmethod
    def _report(function_name: str, why: str, kind: str, default: object) -> None:
        with _reported_lock:
            if (function_name, kind) in _reported:
                return
            _reported.add((function_name, kind))
        log.info("NVML %s unavailable here (%s); recording %r", function_name, why, default)

    # -- devices -------------------------------------------------------------------------------

    def gpu_count(self) -> int:
        """GPUs NVML sees (all of them, regardless of CUDA_VISIBLE_DEVICES); 0 without NVML."""
        return int(self.query("nvmlDeviceGetCount", default=0) or 0)

    def handle_by_index(self, index: int) -> Any:
        """NVML handle by NVML's index (which need not match CUDA's); None if unavailable."""
        return self.query("nvmlDeviceGetHandleByIndex", index)

    def handle_by_pci_bus_id(self, bus_id: str) -> Any:
        """NVML handle for the GPU at a PCI bus id as CUDA reports it ('0000:1B:00.0').

        Raises ValueError for text that is not a bus id; None when NVML has no such device.
        """
        address = parse_pci_bus_id(bus_id)
        return self.query("nvmlDeviceGetHandleByPciBusId", address.nvml())

    def other_processes(self, handle: Any) -> list[int] | None:
        """PIDs of compute processes on the GPU other than this one (None where unknown)."""
        processes = self.query("nvmlDeviceGetComputeRunningProcesses", handle)
        if processes is None:
            return None
        return [int(p.pid) for p in processes if int(getattr(p, "pid", -1)) != os.getpid()]

    def gpm_supported(self, handle: Any) -> bool:
        """GPM (Hopper and newer) gives DRAM bandwidth and PCIe/NVLink rates per interval."""
        support = self.query("nvmlGpmQueryDeviceSupport", handle)
        return bool(getattr(support, "isSupportedDevice", 0))

    def gpm_sample(self, handle: Any, sample: Any = None) -> Any:
        """Fill (allocating on first use) a GPM sample buffer; None where GPM cannot. A buffer
        allocated here is freed again when the fill fails; one passed in stays the caller's."""
        fresh = sample is None
        if fresh:
            sample = self.query("nvmlGpmSampleAlloc")
            if sample is None:
                return None
        filled = self.query("nvmlGpmSampleGet", handle, sample)
        if filled is None and fresh:
            self.query("nvmlGpmSampleFree", sample)
        return filled

    def gpm_metrics(self, before: Any, after: Any, metric_ids: Iterable[int]) -> dict[int, float]:
        """GPM metrics over the interval between two samples; metrics NVML refused are left out."""
        module = self._module
        ids = list(metric_ids)
        request = module.c_nvmlGpmMetricsGet_t()
        request.version = module.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(ids)
        request.sample1, request.sample2 = before, after
        for index, metric in enumerate(ids):
            request.metrics[index].metricId = metric
        answer = self.query("nvmlGpmMetricsGet", request)
        if answer is None:
            return {}
        success = getattr(module, "NVML_SUCCESS", 0)
        return {metric: float(answer.metrics[i].value) for i, metric in enumerate(ids)
                if answer.metrics[i].nvmlReturn == success}

    def field_values(self, handle: Any, field_ids: Iterable[int]) -> dict[int, float]:
        """NVML field values (nvmlDeviceGetFieldValues) by field id; ids refused are left out."""
        ids = list(field_ids)
        answer = self.query("nvmlDeviceGetFieldValues", handle, ids)
        if answer is None:
            return {}
        success = getattr(self._module, "NVML_SUCCESS", 0)
        values = {}
        for index, field in enumerate(ids):
            member = _FIELD_VALUE_MEMBERS.get(int(answer[index].valueType))
            if answer[index].nvmlReturn == success and member is not None:
                values[field] = float(getattr(answer[index].value, member))
        return values

    # -- health: memory errors and critical events ----------------------------------------------

    def memory_health(self, handle: Any, aggregate: bool = True,
                      unsupported: set[tuple[object, ...]] | None = None,
                      ) -> dict[str, int | bool | None]:
        """The GPU memory's error and repair counts now: ECC errors (corrected and
        uncorrected, volatile since the driver loaded and, with `aggregate`, over the
        board's life), rows remapped (Ampere and newer) or, where the GPU has no row
        remapper, pages retired (Volta and older) and whether a remap or retirement waits
        for a reset. None for each count NVML does not give (ECC off, a GeForce:
        NotSupported is normal) or was not asked for. `unsupported`: this GPU's calls that
        answered NotSupported (see `query`), skipped and added to."""
        def q(function_name: str, *args: object) -> Any:
            return self.query(function_name, *args, unsupported=unsupported)

        counts: dict[str, int | bool | None] = {}
        for kind, error_type in (("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                                 ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")):
            for span, counter in (("volatile", "NVML_VOLATILE_ECC"),
                                  ("aggregate", "NVML_AGGREGATE_ECC")):
                counts[f"ecc_{kind}_{span}"] = _count(q(
                    "nvmlDeviceGetTotalEccErrors", handle, self.constant(error_type),
                    self.constant(counter))) if aggregate or span == "volatile" else None
        remapped = q("nvmlDeviceGetRemappedRows", handle)  # (corr, unc, pending, failure)
        rows = tuple(remapped) if isinstance(remapped, (tuple, list)) else ()
        counts.update({
            "remapped_rows_corrected": _count(rows[0]) if len(rows) == 4 else None,
            "remapped_rows_uncorrected": _count(rows[1]) if len(rows) == 4 else None,
            "remap_pending": bool(rows[2]) if len(rows) == 4 else None,
            "remap_failure": bool(rows[3]) if len(rows) == 4 else None,
        })
        retired: dict[str, int | bool | None] = dict.fromkeys(
            ("retired_pages_single_bit", "retired_pages_double_bit", "retired_pages_pending"))
        if len(rows) != 4:  # page retirement: the parts before the row remapper
            for key, cause in (
                    ("retired_pages_single_bit",
                     "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
                    ("retired_pages_double_bit",
                     "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR")):
                pages = q("nvmlDeviceGetRetiredPages", handle, self.constant(cause))
                retired[key] = None if pages is None else len(pages)
            pending = q("nvmlDeviceGetRetiredPagesPendingStatus", handle)
            retired["retired_pages_pending"] = None if pending is None else (
                int(pending) == self.constant("NVML_FEATURE_ENABLED"))
        counts.update(retired)
        return counts

    def xid_event_set(self, handle: Any) -> Any:
        """An event set that queues this GPU's critical Xid events from now on (drain it
        with `xid_events`, free it with `free_event_set`); None where the GPU or the driver
        cannot (MIG, a vGPU, no permission)."""
        wanted = self.constant("nvmlEventTypeXidCriticalError")
        supported = self.query("nvmlDeviceGetSupportedEventTypes", handle)
        if supported is not None and not int(supported) & wanted:
            return None
        event_set = self.query("nvmlEventSetCreate")
        if event_set is None:
            return None
        if self.query("nvmlDeviceRegisterEvents", handle, wanted, event_set,
                      default=False) is False:
            self.free_event_set(event_set)
            return None
        return event_set

    def xid_events(self, event_set: Any) -> list[int]:
        """The Xid numbers queued in an event set since the last drain (a 0 ms wait each:
        NVML's Timeout means none is left); at most MAX_EVENTS_PER_DRAIN per call."""
        wanted = self.constant("nvmlEventTypeXidCriticalError")
        xids: list[int] = []
        for _ in range(MAX_EVENTS_PER_DRAIN):
            event = self.query("nvmlEventSetWait", event_set, 0)
            if event is None:
                break
            if int(getattr(event, "eventType", 0)) & wanted:
                xids.append(int(getattr(event, "eventData", 0)))
        return xids

    def free_event_set(self, event_set: Any) -> None:
        self.query("nvmlEventSetFree", event_set)

    def applications_clocks(self, handle: Any, default: bool = False,
                            ) -> tuple[int | None, int | None]:
        """The graphics and memory application clocks in force (MHz; the clocks the GPU runs
        at under load, set with `nvidia-smi -ac MEM,GRAPHICS`), or with `default` the
        board's default ones (what `nvidia-smi -rac` restores); None where NVML does not
        say. Application clocks are per graphics and memory clock: the SM clock is asked
        only where the graphics one is not given."""
        function = ("nvmlDeviceGetDefaultApplicationsClock" if default
                    else "nvmlDeviceGetApplicationsClock")
        graphics = self.query(function, handle, self.constant("NVML_CLOCK_GRAPHICS"))
        if graphics is None:
            graphics = self.query(function, handle, self.constant("NVML_CLOCK_SM"))
        return graphics, self.query(function, handle, self.constant("NVML_CLOCK_MEM"))

    def c2c_enabled(self, handle: Any) -> bool | None:
        """Whether the GPU reaches host memory over NVLink-C2C (Grace Hopper and later)
        rather than PCIe; None where NVML cannot say (older drivers: PCIe boards)."""
        info = self.query("nvmlDeviceGetC2cModeInfoV1", handle)
        return None if info is None else bool(getattr(info, "isC2cEnabled", 0))

    def c2c_peak(self, handle: Any) -> tuple[int | None, float | None]:
        """NVLink-C2C's links and each one's maximum (GB/s, from NVML's MB/s: one direction,
        as `nvidia-smi c2c -s` lists them), from the C2C field values; None for each the
        driver does not give."""
        count_field = self.constant("NVML_FI_DEV_C2C_LINK_COUNT")
        speed_field = self.constant("NVML_FI_DEV_C2C_LINK_GET_MAX_BW")
        values = self.field_values(handle, [count_field, speed_field])
        count, speed = values.get(count_field), values.get(speed_field)
        return (int(count) if count and count > 0 else None,
                speed / 1000 if speed and speed > 0 else None)

    def mig(self, handle: Any) -> tuple[bool | None, list[dict[str, object]] | None]:
        """Whether the GPU is in MIG mode (None where NVML cannot say) and, in MIG mode, its
        slices (MIG devices): each one's uuid, GPU and compute instance ids, SMs and
        memory; None where they cannot be listed."""
        modes = self.query("nvmlDeviceGetMigMode", handle)
        if not modes:
            return None, None
        enabled = int(modes[0]) == self.constant("NVML_DEVICE_MIG_ENABLE")
        if not enabled:
            return False, None
        count = self.query("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not count:
            return True, None
        slices: list[dict[str, object]] = []
        for index in range(int(count)):
            # NotFound for an index no slice holds: later ones may still be there.
            mig = self.query("nvmlDeviceGetMigDeviceHandleByIndex", handle, index)
            if mig is None:
                continue
            attributes = self.query("nvmlDeviceGetAttributes", mig)
            memory = self.query("nvmlDeviceGetMemoryInfo", mig)
            slices.append({
                "uuid": self.query("nvmlDeviceGetUUID", mig),
                "gpu_instance_id": self.query("nvmlDeviceGetGpuInstanceId", mig),
                "compute_instance_id": self.query("nvmlDeviceGetComputeInstanceId", mig),
                "multiprocessors": getattr(attributes, "multiprocessorCount", None),
                "memory_total_bytes": getattr(memory, "total", None),
            })
        return True, slices

    def cc_mode(self) -> bool | None:
        """Whether confidential computing is on for the system (host-device copies then go
        through encrypted bounce buffers); None where NVML cannot say."""
        state = self.query("nvmlSystemGetConfComputeState")
        feature = getattr(state, "ccFeature", None)
        return None if feature is None else (
            int(feature) == self.constant("NVML_CC_SYSTEM_FEATURE_ENABLED"))

    def device_metadata(self, handle: Any) -> dict[str, object]:
        """Static facts about one GPU, units in the key names; None where NVML cannot say."""
        q = self.query
        pci = q("nvmlDeviceGetPciInfo", handle)
        pci_bus_id = None
        if pci is not None:
            try:
                pci_bus_id = parse_pci_bus_id(str(_text(pci.busId))).cuda()
            except (AttributeError, ValueError):
                pci_bus_id = None
        memory = q("nvmlDeviceGetMemoryInfo", handle)

        mem_clock = q("nvmlDeviceGetMaxClockInfo", handle, self.constant("NVML_CLOCK_MEM"))
        bus_width = q("nvmlDeviceGetMemoryBusWidth", handle)
        gen_max = q("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle)
        gen_max_system = q("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        if gen_max is None:
            gen_max = gen_max_system
        width_max = q("nvmlDeviceGetMaxPcieLinkWidth", handle)

        cuda_version = q("nvmlSystemGetCudaDriverVersion_v2")
        if cuda_version is None:
            cuda_version = q("nvmlSystemGetCudaDriverVersion")
        ecc = q("nvmlDeviceGetEccMode", handle)
        power_mw = q("nvmlDeviceGetEnforcedPowerLimit", handle)  # what is in force
        if power_mw is None:
            power_mw = q("nvmlDeviceGetPowerManagementLimit", handle)
        links_up, links, nvlink_version, nvlink_remotes = self._nvlink(handle)
        c2c = self.c2c_enabled(handle)
        c2c_links, c2c_link_gbps = self.c2c_peak(handle) if c2c else (None, None)
        mig_mode, mig_slices = self.mig(handle)
        cc_mode = self.cc_mode()
        cc_memory = q("nvmlDeviceGetConfComputeMemSizeInfo", handle) if cc_mode else None
        app_graphics_mhz, app_mem_mhz = self.applications_clocks(handle)
        default_graphics_mhz, default_mem_mhz = self.applications_clocks(handle, default=True)

        return {
            "name": q("nvmlDeviceGetName", handle),
            "uuid": q("nvmlDeviceGetUUID", handle),
            # The board's serial, as on its label (boards with an inforom: data-centre
            # parts; a GeForce answers NotSupported): what `bwprof history` keys a board by
            # beside the UUID. An empty answer is none.
            "serial": q("nvmlDeviceGetSerial", handle) or None,
            "pci_bus_id": pci_bus_id,
            "memory_total_bytes": getattr(memory, "total", None),
            "memory_bus_width_bits": bus_width,
            "memory_clock_max_mhz": mem_clock,
            "sm_clock_max_mhz": q(
                "nvmlDeviceGetMaxClockInfo", handle, self.constant("NVML_CLOCK_SM")
            ),
            # The clocks in force under load and the board's defaults: many healthy parts
            # ship a default below the maximum (A100 1095 of 1410 MHz); below the default
            # (`nvidia-smi -ac`) they hold every figure down, and the findings say so.
            "applications_clock_graphics_mhz": app_graphics_mhz,
            "applications_clock_mem_mhz": app_mem_mhz,
            "default_applications_clock_graphics_mhz": default_graphics_mhz,
            "default_applications_clock_mem_mhz": default_mem_mhz,
            "pcie_gen_current": q("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            "pcie_gen_max": gen_max,
            "pcie_gen_max_system": gen_max_system,
            "pcie_width_current": q("nvmlDeviceGetCurrPcieLinkWidth", handle),
            "pcie_width_max": width_max,
            "numa_node": self._numa_node(handle, pci_bus_id),
            "gpu_numa_node": _nonnegative(q("nvmlDeviceGetNumaNodeId", handle)),
            "cpu_affinity": self._cpu_affinity(handle),
            "driver_version": q("nvmlSystemGetDriverVersion"),
            "cuda_driver_version": cuda_version_string(cuda_version),
            "vbios_version": q("nvmlDeviceGetVbiosVersion", handle),
            "ecc_mode_current": (
                None if not ecc else ecc[0] == self.constant("NVML_FEATURE_ENABLED")
            ),
            "power_limit_w": None if power_mw is None else power_mw / 1000,
            "nvlink_links_up": links_up,
            "nvlink_links": links,
            "nvlink_version": nvlink_version,
            "nvlink_remotes": nvlink_remotes,
            "c2c_enabled": c2c,
            "c2c_links": c2c_links,
            "c2c_link_max_gbps": c2c_link_gbps,
            # Host copies over NVLink-C2C: its links' maxima summed (one direction), where
            # the driver gives both fields; nothing claimed otherwise.
            "peak_c2c_gbps": (c2c_links * c2c_link_gbps if c2c_links and c2c_link_gbps
                              else None),
            "mig_mode": mig_mode,
            "mig_slices": mig_slices,
            "cc_mode": cc_mode,
            "cc_protected_memory_bytes": (
                None if cc_memory is None
                else getattr(cc_memory, "protectedMemSizeKib", 0) * 1024 or None),
            # A MIG slice has a share of the memory bandwidth, not the whole GPU's: no
            # whole-GPU peak is held against it.
            "peak_hbm_gbps": None if mig_mode else hbm_peak_gbps(mem_clock, bus_width),
            # The link's maximum: the GPU's and the slot's generation, whichever is lower.
            # Host copies over NVLink-C2C do not use PCIe, so its peak would not apply.
            "peak_pcie_gbps": None if c2c else pcie_peak_gbps(gen_max_system or gen_max,
                                                              width_max),
            # Every link the GPU has, up or not: a link down is a fault the figure must show
            # against the whole part, never a smaller peak that hides it.
            "peak_nvlink_gbps": nvlink_peak_gbps(nvlink_version, links),
        }

    def _nvlink(self, handle: Any) -> tuple[int, int, int | None, list[str | None]]:
        """Active links, the links the GPU has (up or down: every one whose state NVML
        reports), the major NVLink version of the first active one (None without NVLink),
        and what each active link reaches: a GPU's bus id, "switch" (NVSwitch) or None."""
        enabled = self.constant("NVML_FEATURE_ENABLED")
        count_field = self.constant("NVML_FI_DEV_NVLINK_LINK_COUNT")
        count = self.field_values(handle, [count_field]).get(count_field)
        # The links this GPU has; else every link pynvml knows of (36 now: an H200 has 18).
        bound = int(count) if count is not None else self.constant("NVML_NVLINK_MAX_LINKS")
        active, present = [], 0
        for link in range(bound):
            # NotSupported or InvalidArgument: no such link here; later ones may still be up.
            state = self.query("nvmlDeviceGetNvLinkState", handle, link)
            present += state is not None
            if state == enabled:
                active.append(link)
        if not active:
            return 0, present, None, []
        raw = self.query("nvmlDeviceGetNvLinkVersion", handle, active[0])
        version = NVLINK_VERSION_FROM_ENUM.get(raw) if raw is not None else None
        return (len(active), present, version,
                [self._nvlink_remote(handle, link) for link in active])

    def _nvlink_remote(self, handle: Any, link: int) -> str | None:
        """Which device a link reaches, so a GPU pair's P2P peak counts only its own links."""
        kind = self.query("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if kind == self.constant("NVML_NVLINK_DEVICE_TYPE_SWITCH"):
            return "switch"
        pci = self.query("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        try:
            return parse_pci_bus_id(str(_text(pci.busId))).cuda() if pci is not None else None
        except (AttributeError, ValueError):
            return None

    def _numa_node(self, handle: Any, pci_bus_id: str | None) -> int | None:
        """The host NUMA node nearest the GPU: NVML's memory affinity, else sysfs.

        Not nvmlDeviceGetNumaNodeId: that is the GPU memory's own node on coherent platforms
        (Grace Hopper), kept as `gpu_numa_node`.
        """
        words = self.query(
            "nvmlDeviceGetMemoryAffinity", handle, 1, self.constant("NVML_AFFINITY_SCOPE_NODE")
        )
        if words is not None:
            nodes = set_bits(list(words))
            if len(nodes) == 1:
                return nodes[0]
        if pci_bus_id is None:
            return None
        path = self._sysfs_pci_root / parse_pci_bus_id(pci_bus_id).sysfs() / "numa_node"
        try:
            return _nonnegative(int(path.read_text().strip()))
        except (OSError, ValueError):
            return None

    def _cpu_affinity(self, handle: Any) -> str | None:
        words_needed = max(1, ((os.cpu_count() or 1) + 63) // 64)
        words = self.query("nvmlDeviceGetCpuAffinity", handle, words_needed)
        if words is None:
            return None
        return cpu_list_from_mask_words(list(words)) or None


_default: Nvml | None = None
_default_lock = threading.Lock()


def get_nvml() -> Nvml:
    """The process-wide NVML session that the rest of bwprof shares."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Nvml()
        return _default


def available() -> bool:
    return get_nvml().available()


def reason() -> str | None:
    """Why NVML is off (None when it works or was not tried yet)."""
    nvml = get_nvml()
    nvml.available()
    return nvml.reason


def query(function_name: str, *args: object, default: Any = None) -> Any:
    return get_nvml().query(function_name, *args, default=default)


def shutdown() -> None:
    get_nvml().shutdown()


def gpu_count() -> int:
    return get_nvml().gpu_count()


def handle_by_index(index: int) -> Any:
    return get_nvml().handle_by_index(index)


def handle_by_pci_bus_id(bus_id: str) -> Any:
    return get_nvml().handle_by_pci_bus_id(bus_id)


def device_metadata(handle: Any) -> dict[str, object]:
    return get_nvml().device_metadata(handle)
