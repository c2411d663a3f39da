"""Runs a Plan: expands cases into jobs, asks the executors for raw times, derives statistics,
and hands every finished row to the sink at once so an interrupted run keeps what it measured;
a sink that cannot take a row (a full disk) ends the run there.

Executors (host, cuda, simulated, mpi) implement `bwprof.executor.Executor`; the runner owns
the loop, the statistics and the conversion to rows, each figure in its case's metric. A case
that cannot run here becomes a row with a status and a reason; an unexpected exception
becomes an `error` row and the run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

from bwprof import costs, interrupts
from bwprof.casespec import CaseSpec
from bwprof.estimate import PlanEstimate, estimate
from bwprof.estimate import one_line as _one_line
from bwprof.executor import Executor
from bwprof.measurement import Job, Measurement, NotRun
from bwprof.plan import Plan
from bwprof.schema import flags
from bwprof.schema.metrics import BANDWIDTH, get_metric
from bwprof.schema.rows import ResultRow
from bwprof.stats import pct_of_peak, summarize


class RowSink(Protocol):
    def add(self, row: ResultRow, seconds_per_op: Sequence[float]) -> None: ...

    def add_timeline(self, timeline: dict[str, object]) -> None:
        """Per-stream event times of one overlap job, for the timeline plots."""


class TelemetryHook(Protocol):
    """Tags the counter samples with the running job and joins them onto its rows."""

    def job_started(self, job: Job, case: CaseSpec) -> None: ...

    def job_finished(self, job: Job) -> tuple[float, float]: ...

    def annotate(self, row: ResultRow, measurement: Measurement,
                 job_window: tuple[float, float]) -> ResultRow: ...

    def flag_degraded(self, row: ResultRow) -> ResultRow: ...


class ProgressListener(Protocol):
    """What a run tells of its progress. A listener may also have `job_not_run(job, rows)`
    (bwprof's own do; see `takes_not_run`): a job of a case that cannot run here then comes
    to it alone, and `total` counts only the jobs that measure, as the plan line does; a
    listener without it gets such a job as a job that starts and finishes, counted in
    `total`."""

    def start(self, total: int, estimate_s: float | None = None) -> None:
        """`total` jobs are planned, estimated to take `estimate_s` in all."""

    def job_started(self, job: Job, left_s: float | None = None) -> None:
        """`job` starts; the estimate of it and the jobs after it is `left_s`."""

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None: ...


def takes_not_run(listener: object) -> bool:
    """Whether `listener` takes the jobs that cannot run here apart (`job_not_run`). A
    listener that passes events on to another says so of itself (`takes_not_run`): it does
    as the one it wraps, so that both count the same jobs."""
    said = getattr(listener, "takes_not_run", None)
    if isinstance(said, bool):
        return said
    return callable(getattr(listener, "job_not_run", None))


def not_run(listener: ProgressListener, job: Job, rows: Sequence[ResultRow],
            left_s: float | None = None) -> None:
    """Tell `listener` of a job that could not run here (its `rows` say why): through its
    `job_not_run` where it takes them apart, else as a job that started and finished."""
    if takes_not_run(listener):
        cast(Any, listener).job_not_run(job, rows)
        return
    listener.job_started(job, left_s)
    listener.job_finished(job, rows)


class _NoProgress:
    def start(self, total: int, estimate_s: float | None = None) -> None:
        pass

    def job_started(self, job: Job, left_s: float | None = None) -> None:
        pass

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        pass

    def job_not_run(self, job: Job, rows: Sequence[ResultRow]) -> None:
        pass


@dataclass(frozen=True)
class RunContext:
    run_id: str
    host: str
    rank: int | None = None


class Runner:
    def __init__(
        self,
        plan: Plan,
        executors: dict[str, Executor],
        context: RunContext,
        sink: RowSink | None = None,
        progress: ProgressListener | None = None,
        telemetry: TelemetryHook | None = None,
    ) -> None:
        self.plan = plan
        self.executors = executors
        self.context = context
        self.sink = sink
        self.progress = progress or _NoProgress()
        self.telemetry = telemetry
        self.rows: list[ResultRow] = []
        self.timelines: list[dict[str, object]] = []

    def run(self, planned: PlanEstimate | None = None) -> list[ResultRow]:
        """Measure every job of the plan as `bwprof.estimate` expands it (`planned`, where
        the caller estimated it already); KeyboardInterrupt propagates after the last full
        row, and so does an error of the sink (bwprof.errors.OutputError: the run folder
        cannot take a row), at once: measuring on would only lose the figures."""
        planned = planned or estimate(self.plan, self.executors)
        left = planned.seconds - costs.START_S  # started: what is left is jobs and the end
        # Where the listener takes them apart (`job_not_run`), progress counts the jobs
        # that measure, as the plan line does: a case that cannot run here is its row
        # alone, never a step that looks like a measurement.
        apart = takes_not_run(self.progress)
        self.progress.start(planned.measured_jobs if apart else planned.jobs, left)

        for work in planned.work:
            case, executor, unavailable = work.case, work.executor, work.unavailable
            for job, cost in zip(work.jobs, work.costs, strict=True):
                if not (unavailable and apart):
                    self.progress.job_started(job, left)
                left = max(costs.FINISH_S, left - cost.seconds)
                if unavailable:
                    rows = [self._not_run_row(case, job, executor, unavailable)]
                    timings: list[Sequence[float]] = [()]
                    timelines: list[dict[str, object]] = []
                else:
                    rows, timings, timelines = self._run_job(case, job, executor)
                # A row counts once its sink took it: where the sink cannot (a full disk:
                # OutputError), the run stops here and self.rows is what the folder holds.
                # A stop signal waits until both are done, so they never disagree.
                for row, seconds in zip(rows, timings, strict=True):
                    with interrupts.deferred():
                        if self.sink is not None:
                            self.sink.add(row, seconds)
                        self.rows.append(row)
                for timeline in timelines:
                    with interrupts.deferred():
                        if self.sink is not None:
                            self.sink.add_timeline(timeline)
                        self.timelines.append(timeline)
                if unavailable and apart:
                    not_run(self.progress, job, rows)
                else:
                    self.progress.job_finished(job, rows)
        return self.rows

    def _run_job(
        self, case: CaseSpec, job: Job, executor: Executor
    ) -> tuple[list[ResultRow], list[Sequence[float]], list[dict[str, object]]]:
        """Rows of one job, the raw samples behind each, and any timelines it recorded."""
        try:
            if self.telemetry is not None:
                self.telemetry.job_started(job, case)
            try:
                measurements = executor.measure(case, job, self.plan)
            finally:
                window = self.telemetry.job_finished(job) if self.telemetry else (0.0, 0.0)
        except NotRun as exc:
            return [self._not_run_row(case, job, executor, exc)], [()], []
        except Exception as exc:  # recorded as an error row; the run goes on
            row = self._row(case, job, executor.backend, status="error", note=_one_line(exc))
            if self.telemetry is not None:  # the GPU's new errors may be why it failed
                row = self.telemetry.flag_degraded(row)
            return [row], [()], []
        rows = [self._row_of(case, job, executor.backend, m, window) for m in measurements]
        timelines: list[dict[str, object]] = [
            {"run_id": self.context.run_id, "backend": executor.backend, **timeline}
            for m in measurements
            if isinstance(timeline := m.extra.get("timeline"), dict)
        ]
        timings: list[Sequence[float]] = [m.seconds_per_op if row.measured else ()
                                          for row, m in zip(rows, measurements, strict=True)]
        return rows, timings, timelines

    def _row_of(self, case: CaseSpec, job: Job, backend: str, m: Measurement,
                window: tuple[float, float]) -> ResultRow:
        """The row of one measurement, with its counters; one that cannot become a row (a
        flag outside the vocabulary, no work to divide by) is an error row of its own, and
        its job's other rows stand."""
        try:
            row = self._measured_row(case, backend, m)
            if self.telemetry is not None:
                row = self.telemetry.annotate(row, m, window)
        except Exception as exc:
            return replace(self._row(case, job, backend, status="error", note=_one_line(exc)),
                           device=m.device, device_name=m.device_name, memory=m.memory,
                           direction=m.direction, size_bytes=m.size_bytes, phase=m.phase)
        return row

    def _row(self, case: CaseSpec, job: Job, backend: str, *, status: str, note: str) -> ResultRow:
        metric = get_metric(case.metric)
        return ResultRow.bare(
            run_id=self.context.run_id, host=self.context.host, rank=self.context.rank,
            case=case.key, backend=backend, status=status, note=note,
            device=job.device_label, memory=job.memory or case.memory, direction=case.direction,
            size_bytes=job.size_bytes, threads=job.threads, streams=job.streams,
            byte_convention=case.byte_convention, metric=metric.name, unit=metric.unit,
            higher_is_better=metric.higher_is_better, dtype=job.dtype or "",
            flags=frozenset({flags.SIMULATED}) if backend == "simulated" else frozenset(),
        )

    def _not_run_row(
        self, case: CaseSpec, job: Job, executor: Executor, why: NotRun
    ) -> ResultRow:
        return self._row(case, job, executor.backend, status=why.status, note=why.reason)

    def _measured_row(self, case: CaseSpec, backend: str, m: Measurement) -> ResultRow:
        """The row of one measurement: its statistics, and its figure in the case's metric
        from the work of one operation (bandwidth rows also as GB/s columns)."""
        summary = summarize(m.seconds_per_op)
        metric = get_metric(case.metric)
        median = metric.value(m.work, summary.median_s)
        best = metric.value(m.work, summary.min_s)
        bandwidth = metric == BANDWIDTH
        # The copy-convention figure of a copy, beside the case's own convention.
        share = case.copy_share if bandwidth else None
        row_flags = set(m.flags)
        if backend == "simulated":
            row_flags.add(flags.SIMULATED)
        if summary.cv is not None and summary.cv > flags.NOISY_CV:
            row_flags.add(flags.NOISY)
        # A cache's figure is never held against the memory's peak, whichever executor
        # measured it.
        peak = None if row_flags & flags.CACHE_RESIDENT else m.peak
        return ResultRow(
            run_id=self.context.run_id,
            host=self.context.host,
            rank=self.context.rank,
            case=case.key,
            backend=backend,
            device=m.device,
            device_name=m.device_name,
            memory=m.memory,
            direction=m.direction,
            size_bytes=m.size_bytes,
            threads=m.threads,
            streams=m.streams,
            numa_node=m.numa_node,
            repeats=summary.n,
            ops_per_sample=m.ops_per_sample,
            bytes_per_op=m.bytes_per_op,
            byte_convention=case.byte_convention,
            metric=metric.name,
            unit=metric.unit,
            higher_is_better=metric.higher_is_better,
            work_per_op=m.work,
            time_median_s=summary.median_s,
            time_min_s=summary.min_s,
            value_median=median,
            value_best=best,
            gbps_median=median if bandwidth else None,
            gbps_best=best if bandwidth else None,
            cv=summary.cv,
            peak_value=peak,
            peak_gbps=peak if bandwidth else None,
            pct_of_peak=pct_of_peak(best, peak) if metric.higher_is_better else None,
            status="ok" if m.valid else "invalid",
            flags=frozenset(row_flags),
            note=m.note,
            phase=m.phase,
            overlap_efficiency=m.overlap_efficiency,
            page_bytes=m.page_bytes,
            cache_level=m.cache_level,
            load_gbps=m.load_gbps,
            dtype=m.dtype,
            host_others_pct=m.host_others_pct,
            host_steal_pct=m.host_steal_pct,
            copy_gbps_median=None if share is None else share * median,
            copy_gbps_best=None if share is None else share * best,
        )

    def close(self) -> list[str]:
        """Close every executor (`close_executors`)."""
        return close_executors(self.executors)


def close_executors(executors: Mapping[str, Executor]) -> list[str]:
    """Close every executor; a failure (a GPU in a sticky error state) is returned as a line,
    never raised, so the rows already measured still reach their files."""
    problems = []
    for target, executor in executors.items():
        try:
            executor.close()
        except Exception as exc:
            problems.append(f"{target}: {_one_line(exc)}")
    return problems
