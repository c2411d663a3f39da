"""A GPU that gets worse during a run: the health watch's reads, polls and report."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

import pynvml

from bwprof.schema.meta import (
    GpuHealth,
    MemoryHealth,
    TelemetryMeta,
    degrades,
    health_changes,
    xid_kind,
)
from bwprof.telemetry.health import HealthWatch, gpus_of
from bwprof.telemetry.nvml import Nvml
from tests.telemetry.fakes import counter_pynvml

BUSES = ("00000000:1B:00.0", "00000000:1C:00.0")
ECC = {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 7,
       "uncorrected_aggregate": 0}


def _watch(**second: object) -> tuple[HealthWatch, object]:
    fake = counter_pynvml({BUSES[0]: {"ecc": dict(ECC), "remapped": [0, 0, 0, 0], "xids": []},
                           BUSES[1]: {"ecc": dict(ECC), "remapped": [0, 0, 0, 0], "xids": [],
                                      **second}})
    nvml = Nvml(fake)
    handles = [(f"gpu{i}", nvml.handle_by_pci_bus_id(bus)) for i, bus in enumerate(BUSES)]
    return HealthWatch(nvml, handles), fake


def test_a_poll_names_the_gpus_whose_counts_rose_since_the_last_one():
    watch, fake = _watch()
    assert watch.poll() == frozenset()
    fake.gpu_config[BUSES[1]]["ecc"]["uncorrected_volatile"] = 3
    fake.gpu_config[BUSES[1]]["ecc"]["uncorrected_aggregate"] = 3
    assert watch.poll() == {"gpu1"}
    assert watch.poll() == frozenset()  # no newer change
    fake.gpu_config[BUSES[0]]["remapped"] = [0, 1, 1, 0]  # a remap, pending a reset
    assert watch.poll() == {"gpu0"}
    fake.gpu_config[BUSES[0]]["xids"].append(79)  # fallen off the bus
    assert watch.poll() == {"gpu0"}


def test_the_report_holds_the_counts_before_and_after_and_the_xids():
    watch, fake = _watch()
    fake.gpu_config[BUSES[1]]["ecc"]["uncorrected_volatile"] = 3
    fake.gpu_config[BUSES[1]]["xids"].extend([48, 63])
    watch.flagged("gpu1")
    report = watch.finish()
    assert [h.device for h in report] == ["gpu0", "gpu1"]
    gpu0, gpu1 = report
    assert gpu0.changes() == {} and gpu0.xid_events == ()
    assert gpu1.before is not None and gpu1.before.ecc_uncorrected_volatile == 0
    assert gpu1.after is not None and gpu1.after.ecc_uncorrected_volatile == 3
    assert gpu1.after.ecc_corrected_aggregate == 7
    assert gpu1.changes() == {"ecc_uncorrected_volatile": 3}
    assert gpu1.xid_events == (48, 63) and gpu1.flagged_rows == 1
    # Once: the event sets are freed, and a later call answers the same.
    assert all(s["freed"] for s in fake.event_sets) and len(fake.event_sets) == 2
    assert watch.finish() is report
    # system.json keeps it all, and reads it back.
    meta = TelemetryMeta(enabled=True, health=report)
    assert TelemetryMeta.from_dict(meta.as_dict()).health == report


def test_a_gpu_that_gives_no_health_is_recorded_as_unknown_never_as_a_change():
    fake = counter_pynvml({BUSES[0]: {}})  # ECC off, no remapper, no Xid events
    nvml = Nvml(fake)
    watch = HealthWatch(nvml, [("gpu0", nvml.handle_by_pci_bus_id(BUSES[0]))])
    assert watch.poll() == frozenset()
    (health,) = watch.finish()
    assert health.before == MemoryHealth() and health.after == MemoryHealth()
    assert health.xid_events is None and health.changes() == {}


def test_changes_count_only_rises_and_states_that_turned_on():
    before = MemoryHealth(ecc_corrected_volatile=4, remap_pending=False, remap_failure=False,
                          remapped_rows_corrected=None)
    after = MemoryHealth(ecc_corrected_volatile=2, remap_pending=True, remap_failure=False,
                         remapped_rows_corrected=5)  # a driver reload resets volatile counts
    assert health_changes(before, after) == {"remap_pending": 1}
    assert GpuHealth("gpu0", before, None).changes() == {}


def test_a_rows_gpus_are_read_from_its_device_label():
    every = ["gpu0", "gpu1", "gpu2"]
    assert gpus_of("gpu1", every) == {"gpu1"}
    assert gpus_of("gpu0->gpu2", every) == {"gpu0", "gpu2"}
    assert gpus_of("gpu0<->gpu1", every) == {"gpu0", "gpu1"}
    assert gpus_of("all", every) == set(every)
    assert gpus_of("all->gpu1", every) == set(every)
    assert gpus_of("cpu", every) == set() and gpus_of("numa0", every) == set()


def test_a_poll_around_a_job_reads_the_volatile_counts_only_and_keeps_the_aggregate_ones():
    watch, fake = _watch()
    asked = len(fake.calls)
    fake.gpu_config[BUSES[0]]["ecc"]["uncorrected_aggregate"] = 2  # read at the end only
    assert watch.poll() == frozenset()
    ecc = [args for name, args in fake.calls[asked:] if name == "nvmlDeviceGetTotalEccErrors"]
    assert len(ecc) == 2 * 2  # corrected and uncorrected volatile, on each of two GPUs
    gpu0, _ = watch.finish()
    assert gpu0.after is not None and gpu0.after.ecc_uncorrected_aggregate == 2


# Catches: a rise of the aggregate ECC count (the InfoROM, written lazily) reported as new
# errors during the run while the volatile count, known at both ends, did not rise
def test_the_aggregate_count_speaks_only_where_the_volatile_one_was_not_read():
    watch, fake = _watch()
    fake.gpu_config[BUSES[0]]["ecc"]["uncorrected_aggregate"] = 2  # errors from before
    gpu0, _ = watch.finish()
    assert gpu0.changes() == {}
    before = MemoryHealth(ecc_uncorrected_volatile=None, ecc_uncorrected_aggregate=0)
    after = MemoryHealth(ecc_uncorrected_volatile=None, ecc_uncorrected_aggregate=2)
    assert health_changes(before, after) == {"ecc_uncorrected_aggregate": 2}
    after = replace(after, ecc_uncorrected_volatile=0)  # read at one end only: aggregate
    assert health_changes(before, after) == {"ecc_uncorrected_aggregate": 2}
    both = MemoryHealth(ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0)
    assert health_changes(both, replace(both, ecc_uncorrected_aggregate=2)) == {}
    assert health_changes(both, MemoryHealth(ecc_uncorrected_volatile=1,
                                             ecc_uncorrected_aggregate=1)) == {
        "ecc_uncorrected_volatile": 1}


# Catches: one new corrected ECC error flagging rows gpu_degraded (occasional corrected
# single-bit errors are normal on HBM), and an application's Xid (13, 31, 43, 45: a
# process's own fault) flagging rows as a failing GPU's
def test_corrected_errors_alone_and_application_xids_flag_no_rows():
    watch, fake = _watch()
    gpu1 = fake.gpu_config[BUSES[1]]
    gpu1["ecc"]["corrected_volatile"] = 1
    assert watch.poll() == frozenset()
    gpu1["xids"].extend([13, 31, 43, 45])
    assert watch.poll() == frozenset()
    gpu1["xids"].append(999)  # not in NVIDIA's catalogue as we know it: a warning, flagged
    assert watch.poll() == {"gpu1"}
    gpu1["xids"].append(48)  # double-bit ECC: hardware
    assert watch.poll() == {"gpu1"}
    gpu1["ecc"]["corrected_volatile"] = 2
    gpu1["remapped"] = [1, 0, 0, 0]  # a row remapped for corrected errors: still a change
    assert watch.poll() == {"gpu1"}
    (_, health) = watch.finish()
    assert health.xid_events == (13, 31, 43, 45, 999, 48)
    assert [xid_kind(x) for x in (13, 31, 43, 45, 48, 79, 999)] == [
        "application"] * 4 + ["hardware", "hardware", "unknown"]
    assert not degrades({"ecc_corrected_volatile": 1, "ecc_corrected_aggregate": 1}, [13])
    assert degrades({"ecc_uncorrected_volatile": 1}) and degrades({}, [79])


# Catches: every poll reading all GPUs for a one-GPU job (64 NVML calls a job on 8 GPUs),
# lost GPUs asked again, and calls that answered NotSupported made again at every poll
def test_a_poll_reads_only_the_jobs_gpus_skips_lost_ones_and_stops_asking_the_unsupported():
    fake = counter_pynvml({
        BUSES[0]: {"ecc": {"corrected_volatile": 0, "uncorrected_volatile": 0},
                   "remapped": [0, 0, 0, 0], "xids": []},
        BUSES[1]: {"ecc": dict(ECC), "remapped": [0, 0, 0, 0], "xids": []}})
    nvml = Nvml(fake)
    handles = [(f"gpu{i}", nvml.handle_by_pci_bus_id(bus)) for i, bus in enumerate(BUSES)]
    watch = HealthWatch(nvml, handles)

    asked = len(fake.calls)
    assert watch.poll({"gpu1"}) == frozenset()
    assert _gpus_asked(fake, asked) == {"h1"}
    # gpu0 answered NotSupported for its aggregate counts at the start: not asked again.
    asked = len(fake.calls)
    watch.finish()
    ecc0 = [a for n, a in fake.calls[asked:] if n == "nvmlDeviceGetTotalEccErrors"
            and a[0] == "h0"]
    assert len(ecc0) == 2  # the two volatile counts; the aggregate ones are remembered
    # A GPU NVML called lost is read no more.
    watch, fake = _watch()
    nvml = watch.nvml
    handle1 = nvml.handle_by_pci_bus_id(BUSES[1])
    nvml.query("nvmlDeviceGetUUID", handle1)  # fine: not lost
    fake.nvmlDeviceGetUUID = lambda h: (_ for _ in ()).throw(pynvml.NVMLError_GpuIsLost())
    nvml.query("nvmlDeviceGetUUID", handle1)
    assert nvml.is_lost(handle1)
    asked = len(fake.calls)
    watch.poll()
    assert _gpus_asked(fake, asked) == {"h0"}


def _gpus_asked(fake: object, since: int) -> set[str]:
    """The GPU handles NVML calls were made for since call `since`."""
    return {str(args[0]) for _, args in fake.calls[since:]  # type: ignore[attr-defined]
            if args and args[0] in ("h0", "h1")}


# Catches: health polls on the main thread with no deadline: a lost or wedged GPU's NVML
# call blocking the run forever (the sampler reads on daemon threads for that reason)
def test_a_poll_that_nvml_never_answers_ends_at_its_deadline_and_says_so(caplog):
    watch, fake = _watch()
    watch.deadline_s = 0.2
    release = threading.Event()
    read = fake.nvmlDeviceGetRemappedRows

    def wedged(handle: str) -> object:
        release.wait(30)
        return read(handle)

    fake.nvmlDeviceGetRemappedRows = wedged
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="bwprof.health"):
            assert watch.poll() == frozenset()
            assert watch.poll() == frozenset()  # skipped: the first is still in NVML
            report = watch.finish()  # skipped too: the last reading stands
        assert time.monotonic() - started < 5
        assert "did not answer within 0.2 s" in caplog.text
        assert "still waiting on NVML" in caplog.text
        assert [h.device for h in report] == ["gpu0", "gpu1"]
    finally:
        release.set()
