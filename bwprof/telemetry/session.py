"""Telemetry for one run: the idle check before it, the sampler thread during it, the join
of the counters onto every GPU row as it finishes, and the GPUs' health (memory errors,
repairs, critical Xids) around each GPU job, so a row measured on a GPU that got worse is
flagged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from bwprof.casespec import CaseSpec
from bwprof.measurement import Job, Measurement
from bwprof.schema import flags
from bwprof.schema.meta import GpuHealth, IdleCheck
from bwprof.schema.rows import ResultRow
from bwprof.telemetry.counters import COUNTER_FIELDS, CounterReader
from bwprof.telemetry.health import HealthWatch, gpus_of
from bwprof.telemetry.join import join_every_gpu, join_row, source_device
from bwprof.telemetry.sampler import Sampler

SAMPLE_COLUMNS: tuple[str, ...] = ("t_s", "device", "case", "size_bytes", "job", *COUNTER_FIELDS)
BUSY_UTIL_PCT = 5


def idle_check(reader: CounterReader) -> tuple[IdleCheck, ...]:
    """Before measuring: is anything else using each GPU? (a busy GPU gets a finding)."""
    readings = {r["device"]: r for r in reader.read()}
    report = []
    for label, handle in reader.handles():
        util = readings.get(label, {}).get("gpu_util_pct")
        percent = util if isinstance(util, (int, float)) else None
        others = reader.nvml.other_processes(handle)
        report.append(IdleCheck(
            device=label,
            gpu_util_pct=percent,
            other_processes=None if others is None else tuple(others),
            busy=bool(others) or (percent is not None and percent > BUSY_UTIL_PCT),
        ))
    return tuple(report)


def follow_job(sampler: Sampler, job: Job, target: str) -> None:
    """Tag the samples with the job starting, and read nothing through a job of a case that
    is not a GPU case (`target` host or mpi: DDR, network): the GPU counters say nothing of
    it, and each read takes CPU time from the host's STREAM threads (a 1 ms read every 50 ms
    cost ddr_triad 3% on a 2-core VM, where the bar is 1%)."""
    sampler.tag(job.case, job.size_bytes, job.label())
    sampler.paused = target != "gpu"


def job_gpus(job: Job, case: CaseSpec, labels: Sequence[str]) -> set[str] | None:
    """The GPUs of `labels` a job uses (None: every GPU). A GPU case declares them
    (`GpuCase.gpus`: its GPU and peer, every GPU for `h2d_all` or `one_to_all`); any other
    case: its GPU and peer, every GPU for a job of no one GPU or a whole-node case with no
    peer."""
    declared = getattr(case, "gpus", None)
    if callable(declared):
        indices = [int(label[3:]) for label in labels if label[3:].isdigit()]
        return {f"gpu{index}" for index in declared(job, indices)}
    if job.device is None or (job.peer is None and case.whole_node):
        return None
    return {f"gpu{job.device}", *([] if job.peer is None else [f"gpu{job.peer}"])}


class TelemetrySession:
    """Owns the sampler for a run; the runner tags jobs and has rows annotated through it."""

    def __init__(self, reader: CounterReader, interval_s: float,
                 on_samples: Callable[[Sequence[dict[str, object]]], None] | None = None) -> None:
        self.reader = reader
        self.sampler = Sampler(reader.read, interval_s, clock=reader.clock,
                               on_samples=on_samples)
        self._job_start = 0.0
        self._c2c = set(reader.c2c_devices())
        self.health: HealthWatch | None = None
        self._gpu_job = False
        self._worse: frozenset[str] = frozenset()  # GPUs that got worse during the last job
        self._job_gpus: set[str] | None = None  # the GPUs the last job used (None: all)

    @property
    def samples(self) -> list[dict[str, object]]:
        return self.sampler.samples

    def start(self) -> None:
        """Read the GPUs' health (and open their Xid event sets), then start sampling."""
        self.health = HealthWatch(self.reader.nvml, self.reader.handles())
        self.sampler.start()

    def stop(self) -> None:
        if self.sampler.stop():  # a thread still reading keeps its GPM buffers
            self.reader.close()

    def health_report(self) -> tuple[GpuHealth, ...] | None:
        """Each GPU's health before and after the run (read now, once), for system.json."""
        return None if self.health is None else self.health.finish()

    def job_started(self, job: Job, case: CaseSpec) -> None:
        follow_job(self.sampler, job, case.target)
        # A GPU job's health is read before and after it (a few NVML calls per GPU); a
        # host job's is not, to keep NVML off the CPUs its threads measure.
        self._gpu_job = case.target == "gpu" and self.health is not None
        self._worse = frozenset()
        if self._gpu_job and self.health is not None:
            self._job_gpus = job_gpus(job, case, self.reader.labels)
            # What changed between jobs is the run's, not this job's; only the job's GPUs
            # are read (one GPU's job on eight GPUs: an eighth of the NVML calls).
            self.health.poll(self._job_gpus)
        self._job_start = self.sampler.now()

    def job_finished(self, job: Job) -> tuple[float, float]:
        self.sampler.untag()
        window = self._job_start, self.sampler.now()
        if self._gpu_job and self.health is not None:
            self._worse = self.health.poll(self._job_gpus)
        return window

    def flag_degraded(self, row: ResultRow) -> ResultRow:
        """The row flagged `gpu_degraded` where a GPU it measured got worse during its job
        (an error row too: a GPU that fell off the bus ends its job in one)."""
        worse = gpus_of(row.device, self.reader.labels) & self._worse
        if not worse or self.health is None:
            return row
        for label in sorted(worse):
            self.health.flagged(label)
        return replace(row, flags=frozenset({*row.flags, flags.GPU_DEGRADED}))

    def annotate(self, row: ResultRow, measurement: Measurement,
                 job_window: tuple[float, float]) -> ResultRow:
        """The row with the counters of its GPU during its operations (or its job); an
        every-GPU row (`all`) gets the sum of its GPUs' counter figures against its bytes."""
        row = self.flag_degraded(row)
        if not source_device(row.device).startswith("gpu") and row.device != "all":
            return row
        window = job_window
        if measurement.window_s is not None:
            origin = self.sampler.origin
            window = (measurement.window_s[0] - origin, measurement.window_s[1] - origin)
        window_bytes = (measurement.window_ops * measurement.bytes_per_op
                        if measurement.window_ops else None)
        if row.device == "all":
            return replace(row, counters=join_every_gpu(
                self.samples, devices=self.reader.labels, direction=row.direction,
                memory=row.memory, window=window, window_bytes=window_bytes, c2c=self._c2c))
        counters = join_row(self.samples, device=row.device, direction=row.direction,
                            memory=row.memory, peak_gbps=row.peak_gbps, window=window,
                            window_bytes=window_bytes,
                            host_over_pcie=source_device(row.device) not in self._c2c)
        return replace(row, counters=counters)
