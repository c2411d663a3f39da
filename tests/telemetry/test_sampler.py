"""The sampler's schedule and tagging with a fake clock: no threads, no sleeping."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from bwprof.cases import get_case
from bwprof.telemetry.sampler import Sampler
from bwprof.units import MiB


class FakeTime:
    """A clock that only moves when asked: reads cost `read_s`, waits move it forward."""

    def __init__(self, read_s=0.0):
        self.now, self.read_s, self.waits = 100.0, read_s, []

    def clock(self):
        return self.now

    def wait(self, seconds):
        self.waits.append(round(seconds, 9))
        self.now += seconds
        return False


def test_ticks_stay_on_the_schedule_whatever_a_read_costs():
    time = FakeTime()

    def read():
        time.now += 0.012  # each read takes 12 ms of a 50 ms interval
        return [{"device": "gpu0", "power_w": 1.0}]

    sampler = Sampler(read, 0.05, clock=time.clock)
    sampler.run(wait=time.wait, max_ticks=4)
    # Waits shrink by the read's cost, so ticks land on 0, 50, 100, 150 ms: no drift.
    assert time.waits == [0.038] * 4
    assert [round(s["t_s"], 9) for s in sampler.samples] == [0.0, 0.05, 0.1, 0.15]


def test_a_paused_sampler_keeps_ticking_and_reads_nothing():
    time = FakeTime()
    reads = []
    sampler = Sampler(lambda: reads.append(1) or [{"device": "gpu0"}], 0.05, clock=time.clock)
    sampler.paused = True
    sampler.run(wait=time.wait, max_ticks=3)
    assert reads == [] and len(time.waits) == 3  # the ticks go on, without reads
    sampler.paused = False
    sampler.run(wait=time.wait, max_ticks=2)
    assert len(reads) == 2


def test_a_tick_missed_entirely_is_skipped_not_bunched():
    time = FakeTime()
    costs = iter([0.13, 0.0, 0.0])

    def read():
        time.now += next(costs)
        return [{"device": "gpu0"}]

    sampler = Sampler(read, 0.05, clock=time.clock)
    sampler.run(wait=time.wait, max_ticks=3)
    assert [round(s["t_s"], 9) for s in sampler.samples] == [0.0, 0.15, 0.2]


def test_samples_carry_the_job_running_at_that_moment():
    time = FakeTime()
    sampler = Sampler(lambda: [{"device": "gpu0"}, {"device": "gpu1"}], 0.05, clock=time.clock)
    sampler.sample_once()
    sampler.tag("h2d_pinned", 1 << 20, "h2d_pinned 1 MiB gpu0")
    sampler.sample_once()
    sampler.untag()
    sampler.sample_once()
    assert [(s["device"], s["case"], s["size_bytes"]) for s in sampler.samples] == [
        ("gpu0", "", None), ("gpu1", "", None),
        ("gpu0", "h2d_pinned", 1 << 20), ("gpu1", "h2d_pinned", 1 << 20),
        ("gpu0", "", None), ("gpu1", "", None)]


def test_each_gpu_is_timed_when_it_was_read_not_when_the_tick_began():
    time = FakeTime()
    origin = time.clock()
    # Reading eight GPUs takes a while: the reader stamps each one on the sampler's clock.
    sampler = Sampler(lambda: [{"device": "gpu0", "read_s": origin + 0.01},
                               {"device": "gpu7", "read_s": origin + 0.31}, {"device": "x"}],
                      0.05, origin=origin, clock=time.clock)
    batch = sampler.sample_once()
    assert [round(s["t_s"], 9) for s in batch[:2]] == [0.01, 0.31]
    assert batch[2]["t_s"] == 0.0 and "read_s" not in batch[0]  # unstamped: the tick's time


def test_a_reading_taken_before_a_tag_change_during_the_read_keeps_the_old_tag():
    """NVML's PCIe sample makes a read last tens of ms: a job that starts in the middle of
    one owns only the readings taken after it started."""
    time = FakeTime()
    origin = time.clock()
    sampler = Sampler(lambda: None, 0.05, origin=origin, clock=time.clock)

    def read():
        first = time.now
        time.now += 0.02
        sampler.tag("hbm_triad", 1 << 28, "hbm_triad gpu0")  # the job starts mid-read
        time.now += 0.02
        return [{"device": "gpu0", "read_s": first}, {"device": "gpu1", "read_s": time.now},
                {"device": "gpu2"}]  # unstamped: timed by the read's start

    sampler.read = read
    sampler.sample_once()
    time.now += 0.05
    sampler.sample_once()
    assert [(s["device"], s["case"]) for s in sampler.samples] == [
        ("gpu0", ""), ("gpu1", "hbm_triad"), ("gpu2", ""),
        ("gpu0", "hbm_triad"), ("gpu1", "hbm_triad"), ("gpu2", "hbm_triad")]


def test_a_read_spanning_several_tag_changes_gives_each_reading_its_own():
    """Untag and the next job's tag come back to back: a reading taken during the first job
    keeps it, one taken between the two belongs to no job."""
    time = FakeTime()
    origin = time.clock()
    sampler = Sampler(lambda: None, 0.05, origin=origin, clock=time.clock)
    sampler.tag("h2d_pinned", 1 << 20, "h2d_pinned gpu0")

    def read():
        start = time.now
        time.now += 0.01
        sampler.untag()
        time.now += 0.01
        sampler.tag("d2h_pinned", 1 << 20, "d2h_pinned gpu0")
        time.now += 0.01
        return [{"device": "gpu0", "read_s": start + 0.005},
                {"device": "gpu1", "read_s": start + 0.015},
                {"device": "gpu2", "read_s": start + 0.025}]

    sampler.read = read
    sampler.sample_once()
    assert [s["case"] for s in sampler.samples] == ["h2d_pinned", "", "d2h_pinned"]


def test_a_failing_read_is_recorded_and_sampling_goes_on():
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("NVML went away")
        return [{"device": "gpu0"}]

    sampler = Sampler(read, 0.05, clock=FakeTime().clock)
    assert sampler.sample_once() == []
    assert len(sampler.sample_once()) == 1
    assert sampler.errors == ["RuntimeError: NVML went away"]


def test_a_read_failing_every_tick_keeps_the_first_errors_and_counts_them_all():
    from bwprof.telemetry.sampler import MAX_ERRORS_KEPT

    def read():
        raise RuntimeError("GPU is lost")

    sampler = Sampler(read, 0.05, clock=FakeTime().clock)
    for _ in range(MAX_ERRORS_KEPT + 5):
        sampler.sample_once()
    assert len(sampler.errors) == MAX_ERRORS_KEPT
    assert sampler.error_count == MAX_ERRORS_KEPT + 5


def test_the_thread_starts_streams_samples_and_stops():
    batches = []
    got_two = threading.Event()

    def on_samples(batch):
        batches.append(batch)
        if len(batches) >= 2:
            got_two.set()

    sampler = Sampler(lambda: [{"device": "gpu0"}], 0.001, on_samples=on_samples)
    sampler.start()
    assert got_two.wait(timeout=120)  # a guard: 1 ms apart, unless the machine is loaded
    sampler.stop()
    count = len(sampler.samples)
    sampler.stop()  # twice is fine
    assert count >= 2 and len(batches) == count
    with pytest.raises(ValueError, match="interval must be positive"):
        Sampler(lambda: [], 0)


def test_a_failing_writer_is_recorded_not_fatal_and_monitor_keeps_nothing():
    def full_disk(batch):
        raise OSError(28, "No space left on device")

    sampler = Sampler(lambda: [{"device": "gpu0"}], 0.05, clock=FakeTime().clock,
                      on_samples=full_disk)
    assert len(sampler.sample_once()) == 1
    assert sampler.errors == ["writing samples: OSError: [Errno 28] No space left on device"]
    streaming = Sampler(lambda: [{"device": "gpu0"}], 0.05, clock=FakeTime().clock,
                        on_samples=lambda batch: None, keep=False)
    streaming.sample_once()
    assert streaming.samples == []


# Catches: samples after a job finished keep its tag (no untag)
def test_samples_between_jobs_belong_to_no_job():
    from bwprof.measurement import Job
    from bwprof.telemetry.session import TelemetrySession
    from tests.telemetry.test_sampler import FakeTime

    time = FakeTime()
    reader = SimpleNamespace(read=lambda: [{"device": "gpu0"}], clock=time.clock,
                             c2c_devices=lambda: [])
    session = TelemetrySession(reader, interval_s=0.05)
    job = Job("h2d_pinned", size_bytes=MiB, device=0)
    session.job_started(job, get_case("h2d_pinned"))
    time.now += 0.1
    session.sampler.sample_once()
    window = session.job_finished(job)
    time.now += 0.1
    session.sampler.sample_once()
    assert window == pytest.approx((0.0, 0.1))
    assert [(s["case"], s["size_bytes"], s["job"]) for s in session.samples] == [
        ("h2d_pinned", MiB, job.label()), ("", None, "")]


class Clock:
    def __init__(self): self.now = 0.0
    def __call__(self): return self.now


def test_a_reading_before_ten_tag_changes_in_one_read_keeps_the_old_tag():
    from bwprof.telemetry.sampler import Sampler
    clock = Clock()
    s = Sampler(lambda: [], 0.05, origin=0.0, clock=clock)
    def read():
        start = clock.now
        for k in range(10):
            clock.now += 0.001
            s.tag(f"c{k}", k, f"j{k}")
        return [{"device": "gpu0", "read_s": start}]
    s.read = read
    (sample,) = s.sample_once()
    assert sample["case"] == ""


def test_the_tag_history_is_bounded():
    from bwprof.telemetry.sampler import TAGS_KEPT, Sampler
    s = Sampler(lambda: [], 0.05, origin=0.0, clock=Clock())
    for k in range(100):
        s.tag(f"c{k}", k, f"j{k}")
    assert len(s._tags) == TAGS_KEPT

def test_a_reading_older_than_every_kept_tag_gets_the_oldest_kept():
    from bwprof.telemetry.sampler import TAGS_KEPT, Sampler
    clock = Clock()
    s = Sampler(lambda: [], 0.05, origin=0.0, clock=clock)
    def read():
        start = clock.now
        for k in range(TAGS_KEPT + 1):
            clock.now += 0.001
            s.tag(f"c{k}", k, f"j{k}")
        return [{"device": "gpu0", "read_s": start + 0.0015}]  # just after c0: c0 is in force
    s.read = read
    (sample,) = s.sample_once()
    assert sample["case"] == "c1"  # c0 dropped: the oldest kept tag, not the newest
