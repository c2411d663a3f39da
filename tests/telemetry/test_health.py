"""A GPU that gets worse during a run: the health watch's reads, polls and report."""

from __future__ import annotations

from bwprof.schema.meta import GpuHealth, MemoryHealth, TelemetryMeta, health_changes
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
    fake.gpu_config[BUSES[0]]["ecc"]["corrected_aggregate"] = 9  # read at the end only
    assert watch.poll() == frozenset()
    ecc = [args for name, args in fake.calls[asked:] if name == "nvmlDeviceGetTotalEccErrors"]
    assert len(ecc) == 2 * 2  # corrected and uncorrected volatile, on each of two GPUs
    gpu0, _ = watch.finish()
    assert gpu0.changes() == {"ecc_corrected_aggregate": 2}
