"""The counter reader against NVML scenarios: an H200 with GPM, a device that supports
little, a missing library, and a GPU that falls off the bus mid-run."""

from __future__ import annotations

import logging

import pynvml
import pytest

from bwprof.telemetry.counters import COUNTER_FIELDS, CounterReader, throttle_names
from bwprof.telemetry.nvml import Nvml
from tests.telemetry.fakes import counter_pynvml, fake_pynvml, raises

BUS_A, BUS_B = "00000000:1B:00.0", "00000000:9A:00.0"


class Ticks:
    """A clock that advances `step` seconds per call."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 100.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def reader_for(gpus, clock=None, **extra):
    fake = counter_pynvml(gpus, **extra)
    return CounterReader(Nvml(fake), [("gpu0", "0000:1B:00.0"), ("gpu1", "0000:9A:00.0")],
                         clock=clock or Ticks(0.2))


def test_h200_counters_with_units_and_gpm_rates_from_the_second_read():
    reader = reader_for({BUS_A: {"gpm": True}})
    assert reader.labels == ["gpu0"] and reader.gpm_devices() == ["gpu0"]
    first, = reader.read()
    assert set(first) == {"device", "read_s", *COUNTER_FIELDS}
    assert first["sm_clock_mhz"] == 1980 and first["mem_clock_mhz"] == 3201
    assert first["power_w"] == 655.0  # instantaneous, not the 1-second average (650 W)
    assert first["temperature_c"] == 61
    assert first["pcie_rx_mibps"] == pytest.approx(52_000_000 / 1024)
    assert (first["pcie_gen"], first["pcie_width"]) == (5, 16)
    assert first["dram_bw_util_pct"] is None  # GPM needs two samples
    second, = reader.read()
    assert second["dram_bw_util_pct"] == 85.0 and second["gpm_pcie_rx_mibps"] == 50_000.0
    assert second["gpm_interval_s"] == pytest.approx(0.2)
    assert second["read_s"] == pytest.approx(first["read_s"] + 0.2)
    reader.close()


def test_gpm_samples_are_never_taken_under_100_ms_apart():
    reader = reader_for({BUS_A: {"gpm": True}}, clock=Ticks(0.04))  # a 40 ms sampler
    readings = [reader.read()[0] for _ in range(7)]
    # GPM samples at 0, 120 and 240 ms: rates on the 4th and 7th reads, over 120 ms each.
    assert [r["gpm_interval_s"] is not None for r in readings] == [
        False, False, False, True, False, False, True]
    assert readings[3]["gpm_interval_s"] == pytest.approx(0.12)
    assert readings[3]["dram_bw_util_pct"] == 85.0 and readings[4]["dram_bw_util_pct"] is None
    assert all(r["sm_clock_mhz"] == 1980 for r in readings)  # the other counters every read
    reader.close()


def test_gpm_buffers_are_freed_when_a_gpu_is_lost_and_gpm_given_up():
    reader = reader_for({BUS_A: {"gpm": True, "lost_after": 0}})
    fake = reader.nvml._module
    for _ in range(10):
        reading, = reader.read()
        assert reading["dram_bw_util_pct"] is None
    reader.close()
    # One good sample, then three failed fills (each buffer freed again), then GPM given up.
    assert fake.gpm_buffers["allocated"] == fake.gpm_buffers["freed"] == 4
    assert reader.gpm_devices() == []


def test_a_library_version_mismatch_reads_as_none():
    mismatch = raises(pynvml.NVMLLibraryMismatchError)
    reader = reader_for({BUS_A: {}}, nvmlDeviceGetPowerUsage=mismatch,
                        nvmlDeviceGetFieldValues=mismatch)
    reading, = reader.read()
    assert reading["power_w"] is None and reading["sm_clock_mhz"] == 1980


def test_a_device_that_supports_little_reads_as_none_without_raising():
    not_supported = raises(pynvml.NVMLError_NotSupported)
    reader = reader_for({BUS_A: {}}, nvmlDeviceGetPowerUsage=not_supported,
                        nvmlDeviceGetFieldValues=not_supported,
                        nvmlDeviceGetPcieThroughput=not_supported,
                        nvmlDeviceGetCurrentClocksEventReasons=not_supported,
                        nvmlGpmQueryDeviceSupport=not_supported)
    reading, = reader.read()
    assert reading["power_w"] is None and reading["pcie_rx_mibps"] is None
    assert reading["throttle_reasons"] is None and reading["throttle_names"] == ""
    assert reading["dram_bw_util_pct"] is None and reader.gpm_devices() == []


def test_a_gpu_lost_mid_run_gives_none_not_an_exception(caplog):
    reader = reader_for({BUS_A: {}, BUS_B: {"lost_after": 1}})
    healthy, lost = reader.read()
    assert lost["sm_clock_mhz"] == 1980
    with caplog.at_level(logging.WARNING, logger="bwprof.nvml"):
        for _ in range(3):
            healthy, lost = reader.read()
    assert healthy["sm_clock_mhz"] == 1980
    assert all(lost[name] is None for name in ("sm_clock_mhz", "power_w", "pcie_gen"))
    # One warning, naming the GPU: not one per NVML function, none for the healthy GPU.
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["gpu1: NVML says the GPU is lost (fallen off the bus?); its counters "
                        "read as empty from now on"]


def test_without_the_library_there_is_nothing_to_read():
    fake = fake_pynvml(nvmlInit=raises(pynvml.NVMLError_LibraryNotFound))
    reader = CounterReader(Nvml(fake), [("gpu0", "0000:1B:00.0")])
    assert reader.labels == [] and reader.read() == []


def test_throttle_names():
    assert throttle_names(0x1 | 0x4 | 0x40) == "sw_power_cap|hw_thermal"
    assert throttle_names(0x1 | 0x4, include_benign=True) == "gpu_idle|sw_power_cap"
    assert throttle_names(0) == "" and throttle_names(None) == ""
    assert throttle_names(0x200 | 0x400) == "board_limit|reliability"
    # Every reason that lowers clocks is named; idle, sync boost, display are not.
    assert throttle_names(0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x200 | 0x400) == (
        "sw_power_cap|hw_slowdown|sw_thermal|hw_thermal|hw_power_brake|board_limit|reliability")
    assert throttle_names(0x1 | 0x10 | 0x100) == ""
    # Clocks held at application clocks are kept: set below the default they hold every
    # figure down (the findings judge them against system.json's application clocks).
    assert throttle_names(0x1 | 0x2 | 0x10 | 0x100) == "applications_clocks"
    # A reason newer than the table is shown, not dropped (so it still makes a finding).
    assert throttle_names(0x1 | 0x800 | 0x4000) == "0x800|0x4000"


def test_power_falls_back_to_the_average_once_instant_power_is_refused():
    reader = reader_for({BUS_A: {}}, nvmlDeviceGetFieldValues=raises(pynvml.NVMLError_NotSupported))
    assert [r["power_w"] for r in reader.read() + reader.read()] == [650.0, 650.0]
    fake = reader.nvml.module
    assert [name for name, _ in fake.calls].count("nvmlDeviceGetFieldValues") == 1


def test_temperature_falls_back_to_the_versioned_call():
    reader = reader_for({BUS_A: {}},
                        nvmlDeviceGetTemperature=raises(pynvml.NVMLError_FunctionNotFound),
                        nvmlDeviceGetTemperatureV=lambda h, sensor: 58)
    assert reader.read()[0]["temperature_c"] == 58


def test_gpus_are_read_at_once_not_in_turn():
    import threading

    from tests.telemetry.fakes import counter_functions

    buses = [f"00000000:{n:02X}:00.0" for n in (0x1B, 0x43, 0x9A, 0xC1)]
    # Each GPU's PCIe call waits for all four: read in turn, the first would wait in vain.
    together = threading.Barrier(len(buses), timeout=120)  # a guard: in turn, it never fills
    pcie = counter_functions({bus: {} for bus in buses})["nvmlDeviceGetPcieThroughput"]

    def throughput_after_the_others(handle, counter):
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            together.wait()
        return pcie(handle, counter)

    fake = counter_pynvml({bus: {} for bus in buses},
                          nvmlDeviceGetPcieThroughput=throughput_after_the_others)
    reader = CounterReader(Nvml(fake), [(f"gpu{i}", bus.replace("00000000", "0000"))
                                        for i, bus in enumerate(buses)])
    readings = reader.read()
    assert [r["device"] for r in readings] == ["gpu0", "gpu1", "gpu2", "gpu3"]  # order kept
    assert all(r["pcie_rx_mibps"] is not None for r in readings)
    reader.close()


def test_a_failing_read_on_one_gpu_is_raised_to_the_caller():
    def broken(handle):
        raise RuntimeError("driver fell over")

    reader = reader_for({BUS_A: {}, BUS_B: {}}, nvmlDeviceGetUtilizationRates=broken)
    with pytest.raises(RuntimeError, match="driver fell over"):
        reader.read()


def test_a_read_stuck_in_the_driver_does_not_keep_the_process_from_exiting():
    """As when a GPU falls off the bus: the sampler gives up on its thread after 5 s and bwprof
    must still exit (Python joins a ThreadPoolExecutor's threads at exit, forever here)."""
    import subprocess
    import sys

    probe = """
import threading
from bwprof.telemetry.counters import CounterReader
from bwprof.telemetry.nvml import Nvml
from tests.telemetry.fakes import counter_pynvml

def stuck(handle):
    threading.Event().wait()

fake = counter_pynvml({"00000000:1B:00.0": {}, "00000000:9A:00.0": {}},
                      nvmlDeviceGetUtilizationRates=stuck)
reader = CounterReader(Nvml(fake), [("gpu0", "0000:1B:00.0"), ("gpu1", "0000:9A:00.0")])
threading.Thread(target=reader.read, daemon=True).start()
threading.Event().wait(0.5)
print("exiting")
"""
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2])  # for `tests.`
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr


def test_close_never_frees_gpm_buffers_a_read_still_uses():
    """Ctrl-C in `bwprof monitor` interrupts the caller, not the reading threads: close()
    waits for them and, for one still inside a GPM call, keeps its buffers."""
    import threading

    from tests.telemetry.fakes import counter_functions

    gpus = {BUS_A: {"gpm": True}, BUS_B: {"gpm": True}}
    real_get = counter_functions(gpus)["nvmlGpmSampleGet"]
    inside, release = threading.Event(), threading.Event()

    def slow_second_get(handle, sample):
        if reader.nvml._module.gpm_buffers["allocated"] > 2:  # the second round of reads
            inside.set()
            release.wait(120)  # a guard: the test releases it
        return real_get(handle, sample)

    reader = reader_for(gpus, nvmlGpmSampleGet=slow_second_get)
    buffers = reader.nvml._module.gpm_buffers
    reader.read()
    outcome = []

    def interrupted_read():
        try:
            reader.read()
        except RuntimeError as error:  # a GPU thread that reached NVML after close()
            outcome.append(error)

    interrupted = threading.Thread(target=interrupted_read, daemon=True)
    interrupted.start()
    assert inside.wait(120)
    reader.close(timeout_s=0.2)
    assert buffers["freed"] == 0  # a GPM call is still running: nothing freed under it
    release.set()
    interrupted.join(120)
    assert not interrupted.is_alive()
    reader.close()
    assert buffers["allocated"] == buffers["freed"] >= 3  # each buffer freed, once
    with pytest.raises(RuntimeError, match="closed"):  # a closed reader reads nothing
        reader.read()


def test_gpus_on_nvlink_c2c_are_known_to_the_reader():
    from types import SimpleNamespace

    c2c = reader_for({BUS_A: {}, BUS_B: {}},
                     nvmlDeviceGetC2cModeInfoV1=lambda h: SimpleNamespace(isC2cEnabled=1))
    assert c2c.c2c_devices() == ["gpu0", "gpu1"]
    assert reader_for({BUS_A: {}, BUS_B: {}}).c2c_devices() == []  # no C2C query: PCIe
