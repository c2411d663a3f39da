"""What the hardware counters say right now, per GPU, through the one NVML layer.

One `read()` returns a dict per GPU with units in the keys: clocks, power, temperature,
utilisation, PCIe throughput (NVML's 20 ms average), the link's current generation and width,
the clock-event (throttle) reasons, and on Hopper and newer the GPM rates over the interval
since the previous GPM sample. A counter the GPU does not support is None; a GPU that falls
off the bus mid-run gives None everywhere, never an exception.

Each reading carries `read_s`, the reader's clock when that GPU's read began (NVML's PCIe
throughput call alone takes about 20 ms per direction, so on a box of eight GPUs the last one
is read well after the first), and `gpm_interval_s`, the span its GPM rates cover.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bwprof.coerce import optional_number
from bwprof.telemetry.nvml import Nvml

log = logging.getLogger("bwprof.nvml")

KIB_PER_MIB = 1024

COUNTER_FIELDS: tuple[str, ...] = (
    "sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "gpu_util_pct",
    "mem_util_pct", "pcie_tx_mibps", "pcie_rx_mibps", "pcie_gen", "pcie_width",
    "throttle_reasons", "throttle_names", "dram_bw_util_pct", "gpm_pcie_tx_mibps",
    "gpm_pcie_rx_mibps", "nvlink_rx_mibps", "nvlink_tx_mibps", "gpm_interval_s",
)

# nvmlClocksEventReason* bits (nvml.h), named as a capacity review would say them.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}
APPLICATIONS_CLOCKS = 0x2
BENIGN_REASONS = 0x1 | 0x10 | 0x100
"""Idle, sync boost and display clocks say nothing about a sick box. Application clocks
(0x2) are not among them: clocks held at an application clock set below the default
(`nvidia-smi -ac`) understate every figure, so the rows keep that reason and the findings
say it (`bwprof.analysis.findings.clock_events`, `applications_clocks_lowered`)."""

# GPM metric ids (nvml.h NVML_GPM_METRIC_*): DRAM bandwidth % of peak; rates in MiB/s.
GPM_METRICS: dict[str, int] = {
    "dram_bw_util_pct": 10,
    "gpm_pcie_tx_mibps": 20,
    "gpm_pcie_rx_mibps": 21,
    "nvlink_rx_mibps": 60,
    "nvlink_tx_mibps": 61,
}
GPM_MIN_INTERVAL_S = 0.1
"""NVIDIA: GPM metrics over samples less than 100 ms apart are invalid on Hopper (DCGM issue
#310), so a read sooner than this after the last GPM sample leaves the GPM fields empty."""
GPM_FAILURES_TO_GIVE_UP = 3


def throttle_names(mask: int | None, include_benign: bool = False) -> str:
    """'sw_power_cap|hw_slowdown' for a reasons bitmask; '' for none, None-safe. Bits newer
    than this table appear as hex ('0x800'), so a reason a newer driver adds is not lost."""
    if not mask:
        mask = 0
    names = [name for bit, name in THROTTLE_REASONS.items()
             if mask & bit and (include_benign or not bit & BENIGN_REASONS)]
    unknown = mask & ~sum(THROTTLE_REASONS)
    names += [hex(1 << bit) for bit in range(unknown.bit_length()) if unknown >> bit & 1]
    return "|".join(names)


@dataclass
class _Gpu:
    label: str
    handle: Any
    gpm: bool
    c2c: bool = False
    instant_power: bool = True  # NVML_FI_DEV_POWER_INSTANT answered (until it first does not)
    lost_said: bool = False  # the warning that NVML lost this GPU was given
    previous: Any = None
    previous_s: float = 0.0
    spare: Any = None
    failures: int = 0


class CounterReader:
    """Reads every GPU's counters through `nvml`; GPUs are matched by PCI bus id."""

    def __init__(self, nvml: Nvml, gpus: Sequence[tuple[str, str | None]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`gpus`: (row label such as 'gpu0', PCI bus id) per CUDA device. `clock` stamps
        each reading; a sampler of these readings must use the same clock."""
        self.nvml = nvml
        self.clock = clock
        self._state = threading.Condition()  # guards the two below
        self._reads_in_nvml = 0  # reading threads inside NVML now
        self._closed = False  # set by close(): a thread starting later reads nothing
        self._gpus = []
        for label, bus_id in gpus:
            handle = nvml.handle_by_pci_bus_id(bus_id) if bus_id else None
            if handle is not None:
                self._gpus.append(_Gpu(label, handle, nvml.gpm_supported(handle),
                                       bool(nvml.c2c_enabled(handle))))

    @classmethod
    def every_gpu(cls, nvml: Nvml) -> CounterReader:
        """Every GPU NVML sees, labelled in NVML's order (for `bwprof monitor`, which needs no
        CUDA); a run instead labels GPUs by CUDA index and matches them by bus id."""
        gpus = []
        for index in range(nvml.gpu_count()):
            pci = nvml.query("nvmlDeviceGetPciInfo", nvml.handle_by_index(index))
            bus = getattr(pci, "busId", None)
            gpus.append((f"gpu{index}", bus.decode() if isinstance(bus, bytes) else bus))
        return cls(nvml, gpus)

    @property
    def labels(self) -> list[str]:
        return [gpu.label for gpu in self._gpus]

    def c2c_devices(self) -> list[str]:
        """GPUs whose host link is NVLink-C2C: their PCIe counters miss host copies."""
        return [gpu.label for gpu in self._gpus if gpu.c2c]

    def hbm_peaks(self) -> dict[str, float | None]:
        """Each GPU's device-memory peak (GB/s), as its metadata in a run gives it: what
        turns GPM's DRAM utilisation into a bandwidth in `bwprof monitor`."""
        peaks = {gpu.label: self.nvml.device_metadata(gpu.handle)["peak_hbm_gbps"]
                 for gpu in self._gpus}
        return {label: optional_number(peak) for label, peak in peaks.items()}

    def gpm_devices(self) -> list[str]:
        """GPUs whose counters include GPM (DRAM bandwidth, PCIe and NVLink rates)."""
        return [gpu.label for gpu in self._gpus if gpu.gpm]

    def handles(self) -> list[tuple[str, Any]]:
        return [(gpu.label, gpu.handle) for gpu in self._gpus]

    def read(self) -> list[dict[str, object]]:
        """Every GPU's reading, in order. GPUs are read at once, one thread each: NVML's PCIe
        throughput call waits about 20 ms per direction, so eight GPUs read in turn would
        stretch a 50 ms tick past 300 ms. The threads are daemons made per read, not a
        ThreadPoolExecutor: Python joins a pool's threads at exit, so a read stuck in the
        driver (a GPU fallen off the bus) would keep bwprof from ever exiting."""
        if self._closed:
            raise RuntimeError("the counter reader is closed")
        if len(self._gpus) < 2:
            return [self._read_one(gpu) for gpu in self._gpus]
        outcomes: list[Any] = [None] * len(self._gpus)

        def read_into(index: int, gpu: _Gpu) -> None:
            with self._state:
                if self._closed:  # its caller was interrupted and the reader closed
                    outcomes[index] = RuntimeError("the counter reader is closed")
                    return
                self._reads_in_nvml += 1
            try:
                outcomes[index] = self._read_one(gpu)
            except BaseException as error:  # raised again in the caller's thread
                outcomes[index] = error
            finally:
                with self._state:
                    self._reads_in_nvml -= 1
                    self._state.notify_all()

        threads = [threading.Thread(target=read_into, args=(index, gpu), daemon=True,
                                    name=f"bwprof-nvml-{gpu.label}")
                   for index, gpu in enumerate(self._gpus)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes

    def _read_one(self, gpu: _Gpu) -> dict[str, object]:
        q, h, nvml = self.nvml.query, gpu.handle, self.nvml
        read_s = self.clock()
        gpm = self._gpm(gpu, read_s)  # first, so its time is close to `read_s`
        utilisation = q("nvmlDeviceGetUtilizationRates", h)
        power_mw = self._power_mw(gpu)
        tx_kib = q("nvmlDeviceGetPcieThroughput", h, nvml.constant("NVML_PCIE_UTIL_TX_BYTES"))
        rx_kib = q("nvmlDeviceGetPcieThroughput", h, nvml.constant("NVML_PCIE_UTIL_RX_BYTES"))
        reasons = q("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = q("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        reading: dict[str, object] = {
            "device": gpu.label,
            "read_s": read_s,
            "sm_clock_mhz": q("nvmlDeviceGetClockInfo", h, nvml.constant("NVML_CLOCK_SM")),
            "mem_clock_mhz": q("nvmlDeviceGetClockInfo", h, nvml.constant("NVML_CLOCK_MEM")),
            "power_w": None if power_mw is None else power_mw / 1000,
            "temperature_c": self._temperature_c(gpu),
            "gpu_util_pct": getattr(utilisation, "gpu", None),
            "mem_util_pct": getattr(utilisation, "memory", None),
            "pcie_tx_mibps": None if tx_kib is None else tx_kib / KIB_PER_MIB,
            "pcie_rx_mibps": None if rx_kib is None else rx_kib / KIB_PER_MIB,
            "pcie_gen": q("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "pcie_width": q("nvmlDeviceGetCurrPcieLinkWidth", h),
            "throttle_reasons": reasons,
            "throttle_names": throttle_names(reasons, include_benign=True),
        }
        reading.update(gpm)
        if nvml.is_lost(h) and not gpu.lost_said:
            gpu.lost_said = True
            log.warning("%s: NVML says the GPU is lost (fallen off the bus?); its counters "
                        "read as empty from now on", gpu.label)
        return reading

    def _power_mw(self, gpu: _Gpu) -> float | None:
        """Instantaneous power where the driver gives it: nvmlDeviceGetPowerUsage is a
        1-second average on Ampere and newer, longer than a counter window, so its maximum
        would not be a peak."""
        if gpu.instant_power:
            field = self.nvml.constant("NVML_FI_DEV_POWER_INSTANT")
            power = self.nvml.field_values(gpu.handle, [field]).get(field)
            if power is not None:
                return power
            gpu.instant_power = False
        return self.nvml.query("nvmlDeviceGetPowerUsage", gpu.handle)

    def _temperature_c(self, gpu: _Gpu) -> int | None:
        """nvmlDeviceGetTemperature, deprecated (gone in CUDA 14's NVML), else its successor."""
        sensor = self.nvml.constant("NVML_TEMPERATURE_GPU")
        value = self.nvml.query("nvmlDeviceGetTemperature", gpu.handle, sensor)
        if value is None:
            value = self.nvml.query("nvmlDeviceGetTemperatureV", gpu.handle, sensor)
        return value

    def close(self, timeout_s: float = 2.0) -> None:
        """Give NVML back the GPM sample buffers, once the last read's threads are done: an
        interrupted caller (Ctrl-C in `bwprof monitor`) may leave them inside a GPM call.
        Threads still reading after `timeout_s` keep their buffers (a leak, not a crash).
        A one-GPU reader reads in its caller's thread: close it from that thread."""
        with self._state:
            self._closed = True  # a reading thread not yet inside NVML stays out
            if not self._state.wait_for(lambda: self._reads_in_nvml == 0, timeout_s):
                return
        for gpu in self._gpus:
            for sample in (gpu.previous, gpu.spare):
                if sample is not None:
                    self.nvml.query("nvmlGpmSampleFree", sample)
            gpu.previous = gpu.spare = None

    def _gpm(self, gpu: _Gpu, now: float) -> dict[str, float | None]:
        """GPM rates over the interval since this GPU's previous GPM sample: None on the
        first, and when that sample is under GPM_MIN_INTERVAL_S old (no new one is taken)."""
        values: dict[str, float | None] = dict.fromkeys([*GPM_METRICS, "gpm_interval_s"])
        if not gpu.gpm or (gpu.previous is not None
                           and now - gpu.previous_s < GPM_MIN_INTERVAL_S):
            return values
        current = self.nvml.gpm_sample(gpu.handle, gpu.spare)
        if current is None:
            gpu.failures += 1
            gpu.gpm = gpu.failures < GPM_FAILURES_TO_GIVE_UP  # a lost GPU, MIG, GPM refused
            return values
        gpu.failures = 0
        if gpu.previous is not None:
            metrics = self.nvml.gpm_metrics(gpu.previous, current, GPM_METRICS.values())
            values.update({name: metrics.get(mid) for name, mid in GPM_METRICS.items()})
            values["gpm_interval_s"] = now - gpu.previous_s
        gpu.spare, gpu.previous = gpu.previous, current  # two buffers, reused in turn
        gpu.previous_s = now
        return values
