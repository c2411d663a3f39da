"""`bwprof.run(...)`: the whole measurement as one call, for the CLI and for notebooks.

Validates every option before touching the output folder, records machine metadata, runs the
plan through the executors this machine supports, and writes rows as they finish.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bwprof._version import __version__, git_commit
from bwprof.casespec import CaseSpec
from bwprof.errors import BwprofError, RunInterrupted
from bwprof.executor import Executor, UnavailableExecutor
from bwprof.plan import Plan, make_plan
from bwprof.report.export import RunWriter, prepare_run_dir, write_system_json
from bwprof.report.findings import derive_findings, findings_frame
from bwprof.report.formats import check_format
from bwprof.report.outputs import write_report_files
from bwprof.report.runfolder import RunFolder, load_run, with_extras
from bwprof.report.summary import build_summary
from bwprof.runner import ProgressListener, RunContext, Runner
from bwprof.schema.meta import (
    NOT_PROBED,
    GpusMeta,
    ReadOnlyDict,
    RunMeta,
    TelemetryMeta,
    read_only,
)
from bwprof.schema.rows import FAILED_STATUSES, SCHEMA_VERSION, ResultRow
from bwprof.schema.table import results_frame
from bwprof.system import HostInfo, host_info
from bwprof.telemetry.session import SAMPLE_COLUMNS, TelemetrySession, idle_check

DEFAULT_SAMPLE_INTERVAL_MS = 50
NO_MPI_REASON = "needs an MPI launch of 2 ranks or more: mpirun -n 2 bwprof run --mpi (or srun)"


@dataclass(frozen=True)
class FleetShare:
    """What one MPI rank of a fleet run measures: its rank, its GPUs (CUDA indices; None for
    all), whether it runs the host cases, and the executor of the collective cases."""

    rank: int
    gpus: Sequence[int] | None
    host_cases: bool
    executor: Executor | None = None
    run_id: str | None = None


@dataclass
class RunResult:
    """What one run produced: the rows as a DataFrame, the metadata, and where they were written."""

    results: pd.DataFrame
    meta: RunMeta
    """The run's metadata, typed: what system.json holds (`bwprof.schema.meta`)."""
    rows: list[ResultRow] = field(repr=False)
    run_dir: Path | None = None
    interrupted: bool = False
    timelines: list[dict[str, object]] = field(default_factory=list, repr=False)
    findings: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    """Findings that flag a sick box (severity, device, what, why, evidence)."""
    samples: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    """Every counter sample taken during the run (empty without telemetry)."""
    summary: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    """One row per memory path (the columns of summary.csv); see bwprof.report.summary."""
    files: list[Path] = field(default_factory=list)
    """Report files written beside the rows: summary.csv, Parquet copies, plots."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know that did not fail the run (e.g. a plot not drawn)."""

    @property
    def failed(self) -> list[ResultRow]:
        """Rows that make the run exit non-zero: validation failures and unexpected errors."""
        return [row for row in self.rows if row.status in FAILED_STATUSES]

    @property
    def system(self) -> ReadOnlyDict:
        """system.json as a read-only dict, for code written before `meta`."""
        return read_only(self.meta.as_dict())


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def hostname() -> str:
    return socket.gethostname()


def default_run_dir(hostname: str, started: datetime, root: Path = Path("reports")) -> Path:
    return root / f"{hostname}-{started:%Y%m%dT%H%M%SZ}"


def gpu_executor(
    simulate: bool = False, host_memory_bytes: int | None = None,
    only: Sequence[int] | None = None,
) -> tuple[Executor, GpusMeta]:
    """The executor for GPU cases — real GPUs, the simulated backend when asked for, or a
    `skipped` stand-in where there is no GPU — and what it found, for system.json. `only`
    keeps the GPUs of those CUDA indices (a fleet rank's share of its node)."""
    from bwprof.gpu import devices as gpu_devices
    from bwprof.gpu.executor import GpuExecutor

    info: GpusMeta
    executor: Executor
    gpus: GpuExecutor | None = None
    if simulate:
        from bwprof.gpu.sim import SimBackend

        backend = SimBackend()
        found = gpu_devices.describe(backend)
        info = GpusMeta(count=len(found), reason=None, detail="simulated backend",
                        simulated=True)
        executor = gpus = GpuExecutor(backend, found, host_memory_bytes)
    else:
        from bwprof.gpu.runtime import CudaBackend, hardware_queues, probe

        probed = probe()
        info = GpusMeta(count=probed.count, reason=probed.reason, detail=probed.detail,
                        cuda_device_max_connections=hardware_queues() if probed.count
                        else None)
        if probed.count == 0:
            executor = UnavailableExecutor("cuda", probed.reason or "no CUDA device found")
            found = []
        else:
            try:
                cuda_backend = CudaBackend()
            except RuntimeError as exc:
                executor, found = UnavailableExecutor("cuda", str(exc)), []
            else:
                found = gpu_devices.describe(cuda_backend, gpu_devices.nvml_metadata)
                executor = gpus = GpuExecutor(cuda_backend, found, host_memory_bytes)
    if only is not None and gpus is not None:
        share = (f"this rank holds {', '.join(f'gpu{i}' for i in only)} of its node's "
                 f"{len(found)} GPUs (several ranks on the node)")
        found = [device for device in found if device.index in set(only)]
        info = replace(info, used=tuple(device.index for device in found))
        executor = gpus.sharing(found, share)
    return executor, replace(info, devices=tuple(device.as_meta() for device in found))


def start_telemetry(
    executor: Executor | None, writer: RunWriter | None, enabled: bool, interval_s: float,
) -> tuple[TelemetrySession | None, TelemetryMeta]:
    """Check the GPUs this run measures are idle, then sample them (the session), and say
    for system.json what was done or why not. The idle check runs with telemetry off too: a
    busy GPU gets a finding."""
    from bwprof.gpu.executor import COUNTER_WINDOW_MIN_BYTES, COUNTER_WINDOW_S, GpuExecutor

    off = TelemetryMeta(enabled=False, interval_ms=interval_s * 1000)
    if executor is None:
        return None, replace(off, reason="no GPU case selected")
    if not isinstance(executor, GpuExecutor) or executor.backend != "cuda":
        return None, replace(off, reason=(
            "simulated backend: no hardware to sample" if executor.backend == "simulated"
            else executor.reason if isinstance(executor, UnavailableExecutor) else "no GPU"))
    from bwprof.telemetry import nvml
    from bwprof.telemetry.counters import CounterReader

    if not nvml.available():
        return None, replace(off, reason=f"{nvml.reason()} (so no idle check either)")
    reader = CounterReader(nvml.get_nvml(), [(d.label, d.properties.pci_bus_id)
                                             for d in executor.devices])
    if not reader.labels:
        return None, replace(off, reason="NVML sees none of the CUDA devices (no PCI bus id "
                                         "matched), so no idle check either")
    checked = replace(off, idle_check=idle_check(reader))
    if not enabled:
        reader.close()
        return None, replace(checked,
                             reason="switched off (--no-telemetry); the idle check still ran")
    on_samples = None if writer is None else (
        lambda batch: writer.add_samples(batch, SAMPLE_COLUMNS))
    session = TelemetrySession(reader, interval_s, on_samples)
    executor.counter_window_s = COUNTER_WINDOW_S
    session.start()
    return session, replace(checked, enabled=True, reason=None, devices=tuple(reader.labels),
                            gpm=tuple(reader.gpm_devices()), counter_window_s=COUNTER_WINDOW_S,
                            counter_window_min_bytes=COUNTER_WINDOW_MIN_BYTES)


def host_executor(host: HostInfo) -> Executor:
    from bwprof.host.ddr import HostExecutor, measurable_nodes
    from bwprof.system import host_arrays_get_huge_pages

    return HostExecutor(host.cpu_model, nodes=measurable_nodes(host.numa_nodes),
                        peak_gbps=host.ddr_peak_gbps, llc_bytes=host.llc_bytes_total,
                        huge_pages_expected=host_arrays_get_huge_pages(
                            host.transparent_hugepages, host.numpy_asks_hugepages),
                        cache_source=host.cache_source)


def case_availability(cases: Sequence[CaseSpec]) -> dict[str, str | None]:
    """Why each case cannot run on this machine (None where it can), without measuring."""
    executors: dict[str, Executor] = {}
    availability: dict[str, str | None] = {}
    for case in cases:
        if case.target not in executors:
            executors[case.target] = (
                gpu_executor()[0] if case.target == "gpu"
                else UnavailableExecutor("mpi", NO_MPI_REASON, "waived") if case.target == "mpi"
                else host_executor(host_info())
            )
        why = executors[case.target].unavailable_reason(case)
        availability[case.key] = None if why is None else why.reason
    for executor in executors.values():
        executor.close()
    return availability


def check_options(
    host: HostInfo, *, cases: str | Sequence[str] | None, preset: str, repeats: int | None,
    threads: str | tuple[int, ...] | None, size: str | tuple[int, ...] | None,
    sample_interval_ms: float, file_format: str, fleet: bool = False,
) -> tuple[Plan, bool]:
    """Every option checked against this machine: the Plan and whether Parquet was asked
    for, or BwprofError with one line. Nothing is measured or written (numba is not even
    imported: its NUMBA_NUM_THREADS is checked from the environment where it is not)."""
    from bwprof.coerce import finite_number
    from bwprof.numbaenv import thread_limit

    interval = finite_number(sample_interval_ms, "--sample-interval")
    if not 1 <= interval <= 60_000:
        raise BwprofError(
            f"--sample-interval must be between 1 and 60000 ms, got {interval:g}"
        )
    parquet = check_format(file_format)
    plan = make_plan(
        preset=preset,
        cases=cases if cases is None or isinstance(cases, str) else ",".join(cases),
        repeats=repeats,
        threads=threads,
        size=size,
        usable_cpus=host.usable_cpus,
        llc_bytes=host.llc_bytes_total,
        memory_available_bytes=host.memory_available_bytes,
        fleet=fleet,
        numba_threads=thread_limit(),
    )
    return plan, parquet


def run(
    *,
    cases: str | Sequence[str] | None = None,
    preset: str = "standard",
    repeats: int | None = None,
    threads: str | tuple[int, ...] | None = None,
    size: str | tuple[int, ...] | None = None,
    out: str | Path | None = None,
    unique_out: bool = False,
    progress: ProgressListener | None = None,
    command_line: Sequence[str] | None = None,
    simulate: bool = False,
    plots: bool = True,
    telemetry: bool = True,
    sample_interval_ms: float = DEFAULT_SAMPLE_INTERVAL_MS,
    file_format: str = "csv",
    fleet: FleetShare | None = None,
) -> RunResult:
    """Measure this machine. Writes a run folder when `out` is given; returns the rows either way.

    With a run folder, a finished run also gets `summary.csv`, the PNG plots (unless `plots`
    is False) and, with `file_format="parquet"`, Parquet copies of its tables.
    Raises BwprofError for bad options (before anything is written) and RunInterrupted, carrying
    the partial RunResult, when interrupted. `simulate` runs the GPU cases on the simulated
    backend (tests only): its rows say `simulated` and are not measurements. `telemetry`
    samples the GPUs' counters through NVML every `sample_interval_ms` while GPU cases run
    and joins them to the rows. `unique_out` says `out` is a default name, not the user's:
    where it is taken (two runs in one second), it gets a suffix. `fleet` is one MPI rank's
    share of a fleet run (see bwprof.fleet.run).
    """
    host = host_info()
    plan, parquet = check_options(
        host, cases=cases, preset=preset, repeats=repeats, threads=threads, size=size,
        sample_interval_ms=sample_interval_ms, file_format=file_format,
        fleet=fleet is not None,
    )
    run_dir = prepare_run_dir(Path(out), unique=unique_out) if out is not None else None
    started = utc_now()
    host_name = hostname()
    run_id = (fleet.run_id if fleet is not None and fleet.run_id
              else f"{host_name}-{started:%Y%m%dT%H%M%SZ}")
    meta = RunMeta(
        schema_version=SCHEMA_VERSION,
        bwprof_version=__version__,
        bwprof_commit=git_commit(),
        run_id=run_id,
        command_line=tuple(command_line if command_line is not None else sys.argv),
        started_utc=started.isoformat(),
        plan=plan.as_meta(),
        host=host,
        gpus=GpusMeta(reason=NOT_PROBED),
        simulated=simulate,
        mpi_rank=None if fleet is None else fleet.rank,
    )
    executors: dict[str, Executor] = {
        "host": host_executor(host), "mpi": UnavailableExecutor("mpi", NO_MPI_REASON, "waived")}
    if plan.gpu_cases:
        executors["gpu"], gpus = gpu_executor(simulate, host.memory_available_bytes,
                                              None if fleet is None else fleet.gpus)
        meta = replace(meta, gpus=gpus)
    if fleet is not None:
        if not fleet.host_cases:
            executors["host"] = UnavailableExecutor(
                "host", "host cases run on one rank per node (local rank 0)", "waived")
        if fleet.executor is not None:
            executors["mpi"] = fleet.executor

    writer = RunWriter(run_dir) if run_dir is not None else None
    session, sampled = start_telemetry(executors.get("gpu"), writer, telemetry,
                                       sample_interval_ms / 1000)
    meta = replace(meta, telemetry=sampled)
    if run_dir is not None:
        write_system_json(run_dir, meta)
    context = RunContext(run_id, host_name, None if fleet is None else fleet.rank)
    runner = Runner(plan, executors, context, writer, progress, session)
    interrupted = False
    try:
        runner.run()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if session is not None:
            session.stop()
            sampled = replace(sampled, samples=len(session.samples),
                              errors=tuple(session.sampler.errors),
                              error_count=session.sampler.error_count)
        meta = replace(meta, telemetry=sampled, close_errors=tuple(runner.close()),
                       finished_utc=utc_now().isoformat(), interrupted=interrupted)
        frame = results_frame(runner.rows)
        findings = derive_findings(frame, meta)
        meta = replace(meta, findings=len(findings))
        if writer is not None:
            writer.write_findings(findings_frame(findings))
            writer.close()
        if run_dir is not None:
            write_system_json(run_dir, meta)
    result = RunResult(
        frame, meta, runner.rows, run_dir, interrupted, timelines=runner.timelines,
        findings=findings_frame(findings),
        samples=pd.DataFrame(session.samples if session is not None else [],
                             columns=list(SAMPLE_COLUMNS)),
        summary=build_summary(frame),
    )
    if interrupted:
        raise RunInterrupted(result)
    if run_dir is not None:
        try:
            written = write_report_files(with_extras(run_dir, frame, meta), result.summary,
                                         run_dir, parquet=parquet, plots=plots)
        except KeyboardInterrupt:  # every row is on disk; only the report files are partial
            result.interrupted = True
            result.notes.append("interrupted while writing summary.csv and the plots; "
                                "`bwprof report RUN_DIR` writes them again")
            raise RunInterrupted(result) from None
        result.files, result.notes = written.files, written.notes
    return result


def load(run_dir: str | Path) -> RunFolder:
    """A saved run folder, as `bwprof report` reads it: `.results` (the rows of results.csv,
    integer columns as pandas' nullable Int64), `.meta` (system.json, typed:
    `bwprof.schema.meta.RunMeta`), `.samples` and `.findings` (None where the run has none),
    `.summary` (one row per memory path) and `.notes` (what reading left out). Anything
    wrong with the folder is a BwprofError with one line; nothing is written."""
    return load_run(run_dir)
