"""`bwprof.run(...)`: the whole measurement as one call, for the CLI and for notebooks.

Validates every option before touching the output folder, then claims it (one folder, one
run), records machine metadata, runs the plan through the executors this machine supports,
and writes rows as they finish. Whatever stops the run (an interrupt, a full disk, a bug),
the end-of-run steps still run, each whole, and the final system.json says what stopped it.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from bwprof import availability, interrupts
from bwprof._version import __version__, git_commit
from bwprof.analysis.findings import Finding, derive_findings, findings_frame
from bwprof.analysis.run import Run
from bwprof.casespec import CaseSpec
from bwprof.described import DescribedMachine
from bwprof.errors import BwprofError, OutputError, RunInterrupted
from bwprof.estimate import PlanEstimate
from bwprof.executor import Executor, UnavailableExecutor
from bwprof.measurement import Job
from bwprof.paths import user_path
from bwprof.plan import Plan, make_plan
from bwprof.render.outputs import HTML_FILE, write_report_files
from bwprof.runner import ProgressListener, RunContext, Runner, close_executors
from bwprof.schema.meta import (
    AFTER_EVERY_CASE,
    NOT_PROBED,
    GpusMeta,
    RunMeta,
    TelemetryMeta,
)
from bwprof.schema.rows import FAILED_STATUSES, SCHEMA_VERSION, ResultRow
from bwprof.schema.table import results_frame
from bwprof.schema.text import printable
from bwprof.store.export import (
    LOCK_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    SYSTEM_FILE,
    TIMINGS_FILE,
    RunFolderClaim,
    RunWriter,
    prepare_run_dir,
    safe_name,
    write_system_json,
)
from bwprof.store.formats import check_format
from bwprof.system import HostInfo, host_info, with_gpus
from bwprof.telemetry.session import SAMPLE_COLUMNS, TelemetrySession, idle_check

if TYPE_CHECKING:
    from bwprof.gpu.ptx import KernelPtx
    from bwprof.telemetry.counters import CounterReader

DEFAULT_SAMPLE_INTERVAL_MS = 50
NO_MPI_REASON = availability.NO_MPI_REASON


@dataclass(frozen=True)
class FleetShare:
    """What one MPI rank of a fleet run measures: its rank, its GPUs (CUDA indices; None for
    all), whether it runs the host cases, and the executor of the collective cases."""

    rank: int
    gpus: Sequence[int] | None
    host_cases: bool
    executor: Executor | None = None
    run_id: str | None = None
    agree_budget: Callable[[float, tuple[int, ...]], tuple[int, ...] | None] | None = None
    """Given this rank's estimate as asked and the --budget steps it took, the steps every
    rank takes (collective: each rank with a budget calls it once); None: its own."""


@dataclass(eq=False)
class RunResult(Run):
    """What one run produced: the Run (`.results`, `.meta`, `.rows`, `.samples`,
    `.findings`, and derived once `.summary`, `.checks`, `.ceilings`: what `bwprof.load` of
    its folder gives), and what measuring it left besides: where it was written, whether it
    was interrupted, the overlap timelines and the report files."""

    interrupted: bool = False
    files: list[Path] = field(default_factory=list)
    """Report files written beside the rows: summary.csv, Parquet copies, plots."""

    @property
    def run_dir(self) -> Path | None:
        """The run folder (None for a run measured without one)."""
        return self.path

    @property
    def failed(self) -> list[ResultRow]:
        """Rows that make the run exit non-zero: validation failures and unexpected errors."""
        return [row for row in self.rows if row.status in FAILED_STATUSES]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def hostname() -> str:
    """This machine's name, its bytes that are not UTF-8 escaped (`\\xff`): every row and
    the run's folder name carry it, and an encoder must never refuse them."""
    return printable(socket.gethostname())


def default_run_dir(hostname: str, started: datetime, root: Path = Path("reports")) -> Path:
    """reports/<host>-<UTC time>, the host name made a safe file name (it is the machine's:
    it may hold a `/`, spaces or be too long)."""
    return root / f"{safe_name(hostname)}-{started:%Y%m%dT%H%M%SZ}"


def gpu_executor(
    simulate: bool = False, host_memory_bytes: int | None = None,
    only: Sequence[int] | None = None, host: HostInfo | None = None,
    machine: DescribedMachine | None = None,
) -> tuple[Executor, GpusMeta]:
    """The executor for GPU cases — real GPUs, the simulated backend when asked for, or a
    `skipped` stand-in where there is no GPU — and what it found, for system.json. `only`
    keeps the GPUs of those CUDA indices (a fleet rank's share of its node); `host` gives
    the pageable copies the host's last-level cache and THP mode."""
    from bwprof.gpu import devices as gpu_devices
    from bwprof.gpu.executor import GpuExecutor, HostCache

    cache = HostCache() if host is None else HostCache(
        host.llc_bytes_total, host.cache_source, host.transparent_hugepages)

    info: GpusMeta
    executor: Executor
    gpus: GpuExecutor | None = None
    if machine is not None:  # planning for a machine described in a file
        from bwprof.gpu.described import DescribedBackend

        described = DescribedBackend(machine.gpus)
        found = gpu_devices.describe(described, described.metadata)
        info = GpusMeta(count=len(found), reason=None if found else "none described",
                        detail=f"described in {machine.name}")
        executor = (GpuExecutor(described, found, host_memory_bytes, host_cache=cache)
                    if found else UnavailableExecutor("cuda", "no GPU described"))
    elif simulate:
        from bwprof.gpu.sim import SimBackend

        backend = SimBackend()  # tests may give it a machine shape's GPUs
        found = gpu_devices.describe(backend, backend.metadata)
        info = GpusMeta(count=len(found), reason=None, detail="simulated backend",
                        simulated=True)
        executor = gpus = GpuExecutor(backend, found, host_memory_bytes, host_cache=cache)
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
                executor = gpus = GpuExecutor(cuda_backend, found, host_memory_bytes,
                                              host_cache=cache)
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


def host_executor(host: HostInfo, cpus: frozenset[int] | None = None) -> Executor:
    """The host cases' executor; `cpus`: the CPUs the process may use (default: this
    process's, read by the executor; a described machine's)."""
    from bwprof.host.ddr import HostExecutor
    from bwprof.host.facts import measurable_nodes
    from bwprof.system import host_arrays_get_huge_pages

    return HostExecutor(host.cpu_model, nodes=measurable_nodes(host.numa_nodes, cpus),
                        cpus=cpus,
                        peak_gbps=host.ddr_peak_gbps, llc_bytes=host.llc_bytes_total,
                        huge_pages_expected=host_arrays_get_huge_pages(
                            host.transparent_hugepages, host.numpy_asks_hugepages),
                        cache_source=host.cache_source, caches=host.caches,
                        memory_available_bytes=host.memory_available_bytes,
                        memory_total_bytes=host.memory_total_bytes)


def case_availability(cases: Sequence[CaseSpec]) -> dict[str, str | None]:
    """Why each case cannot run on this machine (None where it can), without measuring
    (`bwprof.availability`: from cheap facts where they settle it)."""
    return availability.case_availability(cases)


def machine_info() -> tuple[HostInfo, GpusMeta]:
    """What `bwprof info` shows: the host, and the GPUs where a driver is present."""
    host = host_info()  # before any CUDA context, as a run reads it
    executor, gpus = gpu_executor()
    executor.close()
    return host, gpus


def compile_kernels(cc: str | None = None) -> tuple[tuple[int, int], list[KernelPtx]]:
    """Every CUDA kernel compiled to PTX for compute capability `cc` ('9.0'; default: this
    GPU's, else 9.0), no GPU needed: the target and each kernel's result."""
    from bwprof.gpu import ptx

    target = ptx.parse_cc(cc) if cc is not None else ptx.default_cc()
    if cc is not None:
        ptx.check_supported(target)
    return target, ptx.compile_all(target)


@dataclass
class Monitor:
    """A live view's reader of every GPU's counters, checked and ready (`open_monitor`)."""

    reader: CounterReader
    csv_path: Path | None
    created_csv: bool
    """Whether `csv_path` was made by this monitor (removed again if never written)."""


def open_monitor(interval_ms: float, count: int | None = None,
                 csv: str | Path | None = None) -> Monitor:
    """Check `bwprof monitor`'s options and open NVML: BwprofError (one line) for an
    interval outside 1 ms to 60 s, a count below 1, no NVML or no GPU, or a `csv` file of a
    run folder; OutputError where `csv` cannot be made."""
    from bwprof.errors import write_failure
    from bwprof.telemetry import nvml
    from bwprof.telemetry.counters import CounterReader

    if not 1 <= interval_ms <= 60_000:
        raise BwprofError(f"--interval must be between 1 and 60000 ms, got {interval_ms:g}")
    if count is not None and count < 1:
        raise BwprofError(f"--count must be at least 1, got {count}")
    csv_path = user_path(csv, "--csv") if csv is not None else None
    if not nvml.available():
        raise BwprofError(f"nothing to monitor: {nvml.reason()}")
    existed = csv_path is not None and os.path.lexists(csv_path)
    if csv_path is not None:
        if existed and _in_a_run_folder(csv_path):
            raise BwprofError(f"--csv {csv_path} is a file of a bwprof run folder; monitor "
                              "would replace it: choose another --csv")
        try:
            csv_path.parent.mkdir(parents=True, exist_ok=True)
            csv_path.touch()
        except OSError as exc:
            raise write_failure(csv_path, exc, option="--csv") from None
    reader = CounterReader.every_gpu(nvml.get_nvml())
    if not reader.labels:
        raise BwprofError("nothing to monitor: NVML sees no GPU")
    return Monitor(reader, csv_path, csv_path is not None and not existed)


def _in_a_run_folder(path: Path) -> bool:
    """Whether `path` lies in a folder bwprof run wrote (system.json or its lock beside it)."""
    return any(os.path.lexists(path.parent / name) for name in (SYSTEM_FILE, LOCK_FILE))


def check_options(
    host: HostInfo, *, cases: str | Sequence[str] | None, preset: str, repeats: int | None,
    threads: str | tuple[int, ...] | None, size: str | tuple[int, ...] | None,
    sample_interval_ms: float, file_format: str, fleet: bool = False,
    budget_s: float | None = None, described: bool = False,
) -> tuple[Plan, bool]:
    """Every option checked against this machine: the Plan and whether Parquet was asked
    for, or BwprofError with one line. Nothing is measured or written (numba is not even
    imported: its NUMBA_NUM_THREADS is checked from the environment where it is not).
    `described`: `host` is a machine described in a file, where this process's numba
    thread limit does not apply."""
    from bwprof.coerce import comma_list, finite_number
    from bwprof.numbaenv import thread_limit

    if budget_s is not None:
        budget = finite_number(budget_s, "--budget")
        if not MIN_BUDGET_S <= budget <= MAX_BUDGET_S:
            raise BwprofError(f"--budget must be from {MIN_BUDGET_S} to {MAX_BUDGET_S} "
                              f"seconds (a week), got {budget:g}")
    interval = finite_number(sample_interval_ms, "--sample-interval")
    if not 1 <= interval <= 60_000:
        raise BwprofError(
            f"--sample-interval must be between 1 and 60000 ms, got {interval:g}"
        )
    parquet = check_format(file_format)
    plan = make_plan(
        preset=preset,
        cases=comma_list(cases, "--cases", "ddr_triad,h2d_"),
        repeats=repeats,
        threads=threads,
        size=size,
        usable_cpus=host.usable_cpus,
        llc_bytes=host.llc_bytes_total,
        memory_available_bytes=host.memory_available_bytes,
        fleet=fleet,
        numba_threads=None if described else thread_limit(),
        memory_total_bytes=host.memory_total_bytes,
    )
    return plan, parquet


MIN_BUDGET_S = 1
MAX_BUDGET_S = 7 * 24 * 3600


@dataclass
class PlannedRun:
    """What `bwprof run` would do, measuring nothing (`--dry-run`): the plan fitted to its
    budget, its jobs and their estimated cost, and the machine it is for."""

    plan: Plan
    estimate: PlanEstimate
    host: HostInfo
    gpus: GpusMeta
    described: str | None = None
    """The name of the machine's description, where it is not this machine."""
    notes: list[str] = field(default_factory=list)

    def table(self) -> list[dict[str, object]]:
        """One record per case, in the order they would run: its jobs, the sizes and the
        devices or nodes they cover, the estimated seconds and memory; or, for a case that
        cannot run here, its status and reason."""
        records: list[dict[str, object]] = []
        for planned in self.estimate.work:
            jobs = planned.jobs
            sizes = sorted({j.size_bytes for j in jobs if j.size_bytes is not None})
            records.append({
                "case": planned.case.key,
                "jobs": 0 if planned.unavailable else len(jobs),
                "sizes": tuple(sizes),
                "over": _over(jobs),
                "seconds": planned.seconds,
                "host_bytes": max((c.host_bytes for c in planned.costs), default=0),
                "device_bytes": max((c.device_bytes for c in planned.costs), default=0),
                "status": planned.unavailable.status if planned.unavailable else "planned",
                "reason": planned.unavailable.reason if planned.unavailable else "",
            })
        return records


def _over(jobs: Sequence[Job]) -> str:
    """What a case's jobs run on: '8 GPUs', '56 pairs', '8x8 NUMA nodes', '' (the host)."""
    pairs = {(j.device, j.peer) for j in jobs if j.peer is not None}
    devices = {j.device for j in jobs if j.device is not None}
    numa = {(j.numa_node, j.memory_node) for j in jobs if j.numa_node is not None}
    if pairs:
        return f"{len(pairs)} pair(s)"
    if devices:
        return f"{len(devices)} GPU(s)"
    if any(j.memory_node is not None for j in jobs):
        return f"{len({n for n, _ in numa})}x{len({m for _, m in numa})} NUMA nodes"
    if numa:
        return f"host, {len(numa)} NUMA node(s)"
    return ""


def plan_run(
    *,
    cases: str | Sequence[str] | None = None,
    preset: str = "standard",
    repeats: int | None = None,
    threads: str | tuple[int, ...] | None = None,
    size: str | tuple[int, ...] | None = None,
    budget_s: float | None = None,
    simulate: bool = False,
    telemetry: bool = True,
    machine: str | Path | DescribedMachine | None = None,
    plots: bool = True,
) -> PlannedRun:
    """The run `run` would measure with these options, on this machine or on one described
    in a file (`bwprof.described`: a shape, or an earlier run's system.json), and what it
    would cost; nothing is measured or written. GPUs are opened to read their properties
    and free memory (a described machine's are its file's); counter windows are planned
    where NVML could sample (on a described machine: always)."""
    from bwprof.budget import fit
    from bwprof.described import load_machine
    from bwprof.gpu.executor import COUNTER_WINDOW_S, GpuExecutor

    described = (load_machine(user_path(machine, "--machine"))
                 if isinstance(machine, (str, Path)) else machine)
    host = described.host if described is not None else host_info()
    plan, _ = check_options(host, cases=cases, preset=preset, repeats=repeats,
                            threads=threads, size=size,
                            sample_interval_ms=DEFAULT_SAMPLE_INTERVAL_MS, file_format="csv",
                            budget_s=budget_s, described=described is not None)
    executors: dict[str, Executor] = {
        "host": host_executor(host, described.cpus if described else None),
        "mpi": UnavailableExecutor("mpi", NO_MPI_REASON, "waived"),
    }
    try:
        gpus = GpusMeta(reason=NOT_PROBED)
        if plan.gpu_cases:
            executors["gpu"], gpus = gpu_executor(simulate, host.memory_available_bytes,
                                                  host=host, machine=described)
        gpu = executors.get("gpu")
        if telemetry and isinstance(gpu, GpuExecutor) and (
                described is not None or _nvml_present()) and gpu.backend != "simulated":
            gpu.counter_window_s = COUNTER_WINDOW_S
        fitted = fit(plan, executors, budget_s, plots)
    finally:
        close_executors(executors)
    return PlannedRun(fitted.plan, fitted.estimate, host, gpus,
                      described.name if described is not None else None, list(fitted.notes))


def _nvml_present() -> bool:
    from bwprof.telemetry import nvml

    return nvml.available()


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
    budget_s: float | None = None,
    on_plan: Callable[[list[str]], None] | None = None,
) -> RunResult:
    """Measure this machine. Writes a run folder when `out` is given; returns the rows either way.

    With a run folder, a finished run also gets `summary.csv`, `results.parquet` (the rows,
    typed), the PNG plots and `report.html` (unless `plots` is False) and, with
    `file_format="parquet"`, Parquet copies of its other tables. `out` may start with `~`;
    every file goes under that one folder, which this run claims: a folder another run
    has, or one holding anything, is refused.
    Raises BwprofError for bad options (before anything is written), OutputError when the
    run folder cannot take a row or a file (the rows before are kept, system.json says what
    stopped the run) and RunInterrupted, carrying the partial RunResult, when interrupted.
    `simulate` runs the GPU cases on the simulated
    backend (tests only): its rows say `simulated` and are not measurements. `telemetry`
    samples the GPUs' counters through NVML every `sample_interval_ms` while GPU cases run
    and joins them to the rows. `unique_out` says `out` is a default name, not the user's:
    where it is taken (two runs in one second), it gets a suffix. `fleet` is one MPI rank's
    share of a fleet run (see bwprof.fleet.run). `budget_s` scales the plan down until the
    planner's estimate fits (`bwprof.budget`); `on_plan` is told the plan's cost, and what
    the budget dropped, in lines, before the first measurement.
    """
    out_path = user_path(out, "out") if out is not None else None
    host = host_info()
    plan, parquet = check_options(
        host, cases=cases, preset=preset, repeats=repeats, threads=threads, size=size,
        sample_interval_ms=sample_interval_ms, file_format=file_format,
        fleet=fleet is not None, budget_s=budget_s,
    )
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
    state = _Run(meta)
    return _measure_and_finish(state, out_path, unique_out, plan, host, RunContext(
        run_id, host_name, None if fleet is None else fleet.rank), parquet=parquet,
        plots=plots, progress=progress, simulate=simulate, telemetry=telemetry,
        interval_s=sample_interval_ms / 1000, fleet=fleet, budget_s=budget_s,
        on_plan=on_plan)


def plan_words(estimate: PlanEstimate, plan: Plan, memory_total_bytes: int | None) -> list[str]:
    """The plan's cost in a line or two, said before a run measures: its jobs, its estimated
    time, its peak memory, and what --budget dropped."""
    from bwprof.units import clock, format_bytes

    share = (f" ({estimate.peak_host_bytes / memory_total_bytes:.0%} of RAM)"
             if memory_total_bytes else "")
    device = (f", GPU {format_bytes(estimate.peak_device_bytes)}"
              if estimate.peak_device_bytes else "")
    not_run = (f" ({estimate.cases_not_run} case(s) cannot run here)"
               if estimate.cases_not_run else "")
    lines = [f"plan: {estimate.measured_jobs} job(s){not_run}, about "
             f"{clock(round(estimate.seconds))} by the planner's estimate; peak memory host "
             f"{format_bytes(estimate.peak_host_bytes)}{share}{device} (bwprof run --dry-run "
             "shows each case)"]
    if plan.budget_s is not None and plan.dropped:
        lines.append(f"--budget {plan.budget_s:g} s: dropped " + "; ".join(plan.dropped))
    return lines


def _measure_and_finish(state: _Run, out_path: Path | None, unique_out: bool, plan: Plan,
                        host: HostInfo, context: RunContext, *, parquet: bool, plots: bool,
                        **measuring: Any) -> RunResult:
    """Claim, measure and finish `state`'s run, taking up the end-of-run steps again where
    a stop signal landed between two of them, or came out of `interrupts.handling()` as it
    let go (a Ctrl-C held through the call's last step): the next try marks the run
    interrupted in its system.json and raises RunInterrupted with the rows, as any signal
    during the run does, never a bare KeyboardInterrupt beside a folder that says finished.
    Only a signal once the folder is let go (every file written and whole) is the caller's."""
    try:
        for _ in range(FINISH_TRIES):
            try:
                with interrupts.handling():  # Ctrl-C held in the steps, in a notebook too
                    if not state.started:
                        state.start(out_path, unique_out, plan, host, context, plots=plots,
                                    **measuring)
                    result = state.finish(parquet=parquet, plots=plots)
                    with interrupts.deferred():
                        state.release()
                return result
            except RunInterrupted:
                raise
            except KeyboardInterrupt:  # between two steps: the next try does the rest
                if out_path is not None and state.run_dir is None:
                    raise  # before the folder was claimed, or the claim was undone
                state.interrupt()
        raise KeyboardInterrupt("interrupted again and again while finishing the run")
    finally:
        state.release()


FINISH_TRIES = 5
"""How often `run` takes up its end-of-run steps again after a stop signal between two."""


class _Run:
    """One run's state from its claimed folder to its final system.json.

    The end-of-run steps (`finish`) are each whole (held from stop signals) and each done
    whatever stopped the run (an interrupt, a full disk, a bug), once: a signal that lands
    between two steps makes `run` call `finish` again, which does the steps left. So the
    folder holds a system.json from its claim on, and an interrupted run or a full disk
    still leaves every row and a system.json that says what stopped it."""

    def __init__(self, meta: RunMeta) -> None:
        self.meta = meta
        self.started = False
        self.claim: RunFolderClaim | None = None
        self.run_dir: Path | None = None
        self.executors: dict[str, Executor] = {}
        self.writer: RunWriter | None = None
        self.session: TelemetrySession | None = None
        self.runner: Runner | None = None
        self.interrupted = False
        """The measurement was cut short by a stop signal."""
        self.measured = False
        """The runner went through the whole plan: what goes wrong after it (an interrupt
        or a full disk while writing the report files) costs only those files."""
        self.finishing_interrupted = False
        self.final_written = False
        self.report_failure: OutputError | None = None
        self.stopped_by: str | None = None
        self.failure: OutputError | None = None
        self.error: BaseException | None = None
        self.notes: list[str] = []
        self.findings: list[Finding] = []
        self.result: RunResult | None = None
        self._samples: list[dict[str, object]] = []
        self._done: set[str] = set()
        self._frame: tuple[int, pd.DataFrame] | None = None

    @property
    def stopped(self) -> bool:
        """Something stopped the run, and its final system.json says so (`interrupted`):
        a stop signal after the last measurement too, since the command then exits 130."""
        return (self.interrupted or self.finishing_interrupted or self.failure is not None
                or self.error is not None)

    @property
    def rows(self) -> list[ResultRow]:
        return self.runner.rows if self.runner is not None else []

    def interrupt(self, name: str | None = None) -> None:
        """A stop signal (`name`, else the first received): it cuts the measurement short,
        or, once every case was measured, the final files. Either way the command exits 130
        and the final system.json says the run was interrupted, and by what (docs/method.md:
        'system.json marked interrupted'); every row measured is kept, and `stopped_by` and
        a note say where every case was ('SIGHUP after every case was measured')."""
        signal_name = name or interrupts.received() or "KeyboardInterrupt"
        if not self.measured:
            self.interrupted = True
            self.stopped_by = self.stopped_by or signal_name
        elif not self.finishing_interrupted:
            self.finishing_interrupted = True
            self.stopped_by = self.stopped_by or f"{signal_name} {AFTER_EVERY_CASE}"
            self.notes.append("note: every case was measured; the signal came while the "
                              "final files were written: summary.csv and the plots may be "
                              "missing; `bwprof report RUN_DIR` writes them again")

    def fail(self, exc: OutputError) -> None:
        """The run folder could not take a file: the run ends, and says so."""
        if self.failure is None:
            self.failure = exc
            self.stopped_by = self.stopped_by or f"output error: {exc}"

    def release(self) -> None:
        """At the very end, whatever happened: the row files closed (again: closing twice is
        harmless, and a close an interrupt cut short is done here) and the folder let go."""
        if self.writer is not None:
            with suppress(OSError, OutputError):
                self.writer.close()
        if self.claim is not None:
            self.claim.release()

    def start(self, out: Path | None, unique: bool, plan: Plan, host: HostInfo,
              context: RunContext, **measuring: Any) -> None:
        """Claim the run folder (with its first system.json), then measure."""
        self.started = True
        if out is not None:
            self._claim(out, unique)
        if not self.stopped:
            self._measure(plan, host, context, **measuring)

    def _claim(self, out: Path, unique: bool) -> None:
        """Claim the folder and write its first system.json as one step that a stop signal
        does not tear: the folder then holds a system.json, or nothing of bwprof's (a
        signal held until the step's end stops the run before it measures)."""
        try:
            with interrupts.deferred():
                self.claim = prepare_run_dir(out, unique=unique)
                write_system_json(self.claim.folder, self.meta, rows_kept=False)
                self.run_dir = self.claim.folder
        except KeyboardInterrupt:
            if self.run_dir is None:
                self._abandon()
                raise
            self.interrupt()
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        if self.claim is not None:
            self.claim.abandon()
            self.claim = None

    def _open_writer(self) -> None:
        """The row files; where the folder cannot take even their headers (a full disk),
        the folder is given back as it was found: nothing was measured, and a folder
        holding only a system.json would be neither a run nor free for the next one."""
        assert self.run_dir is not None
        try:
            self.writer = RunWriter(self.run_dir)
        except OutputError:
            self._undo_folder()
            raise

    def _undo_folder(self) -> None:
        """Take back everything this run wrote before its first row, and its claim (held
        from stop signals: half undone, the folder would be neither a run nor free)."""
        with interrupts.deferred():
            self._undo_folder_now()

    def _undo_folder_now(self) -> None:
        if self.session is not None:  # its thread would write samples.csv again
            self.session.stop()
            self.session = None
        if self.writer is not None:
            with suppress(OSError, OutputError):
                self.writer.close()
            self.writer = None
        if self.run_dir is not None:
            for name in (RESULTS_FILE, TIMINGS_FILE, SAMPLES_FILE, SYSTEM_FILE):
                with suppress(OSError):
                    (self.run_dir / name).unlink()
        self._abandon()
        self.run_dir = None

    def _measure(self, plan: Plan, host: HostInfo, context: RunContext, *,
                 progress: ProgressListener | None, simulate: bool, telemetry: bool,
                 interval_s: float, fleet: FleetShare | None, budget_s: float | None,
                 on_plan: Callable[[list[str]], None] | None, plots: bool) -> None:
        """Open the executors, the writer and the telemetry, fit the plan to its budget and
        run it; what stops it (an interrupt, a full disk, a bug) is kept for `finish`."""
        from bwprof.budget import fit, follow

        try:
            self.executors["host"] = host_executor(host)
            self.executors["mpi"] = UnavailableExecutor("mpi", NO_MPI_REASON, "waived")
            if plan.gpu_cases:
                self.executors["gpu"], gpus = gpu_executor(
                    simulate, host.memory_available_bytes, None if fleet is None else fleet.gpus,
                    host)
                self.meta = replace(self.meta, gpus=gpus, host=(
                    with_gpus(self.meta.host, gpus) if self.meta.host is not None else None))
            if fleet is not None:
                if not fleet.host_cases:
                    self.executors["host"] = UnavailableExecutor(
                        "host", "host cases run on one rank per node (local rank 0)", "waived")
                if fleet.executor is not None:
                    self.executors["mpi"] = fleet.executor
            if self.run_dir is not None:
                self._open_writer()
            self.session, sampled = start_telemetry(self.executors.get("gpu"), self.writer,
                                                    telemetry, interval_s)
            self.meta = replace(self.meta, telemetry=sampled)
            # The counter windows are known now.
            fitted = fit(plan, self.executors, budget_s, bool(self.run_dir) and plots)
            if budget_s is not None and fleet is not None and fleet.agree_budget is not None:
                steps = fleet.agree_budget(fitted.asked_s, fitted.steps)
                if steps is not None and steps != fitted.steps:
                    fitted = follow(plan, self.executors, budget_s, steps,
                                    bool(self.run_dir) and plots)
            plan = fitted.plan
            self.meta = replace(self.meta, plan=replace(
                plan.as_meta(), estimate_s=round(fitted.estimate.seconds, 1)))
            self.notes += fitted.notes
            if on_plan is not None:
                on_plan(plan_words(fitted.estimate, plan, host.memory_total_bytes)
                        + list(fitted.notes))
            if self.run_dir is not None:
                try:
                    write_system_json(self.run_dir, self.meta, rows_kept=False)
                except OutputError:
                    self._undo_folder()
                    raise
            self.runner = Runner(plan, self.executors, context, self.writer, progress,
                                 self.session)
            self.runner.run(fitted.estimate)
            self.measured = True
        except KeyboardInterrupt:
            self.interrupt()
        except OutputError as exc:
            self.fail(exc)
        except BaseException as exc:  # a bug: the rows are kept, then it goes on up
            self.error = exc
            self.stopped_by = f"error: {type(exc).__name__}: {exc}".replace("\n", " ")

    # the end-of-run steps ----------------------------------------------------------------

    def _step(self, name: str, step: Callable[[], None]) -> None:
        """One end-of-run step, once, held from stop signals; an interrupt in it (or held
        until its end) marks the run interrupted and the next step runs. A signal that
        lands just before the hold begins leaves the step undone: it is tried again."""
        for _attempt in range(FINISH_TRIES):
            if name in self._done:
                return
            try:
                with interrupts.deferred():
                    self._done.add(name)  # held: a signal before this line leaves it undone
                    step()
            except KeyboardInterrupt:
                self.interrupt()
            except OutputError as exc:
                self.fail(exc)
            except Exception as exc:  # a bug: the steps after it still run, then it goes up
                if self.error is None:
                    self.error = exc
                    self.stopped_by = self.stopped_by or (
                        f"error: {type(exc).__name__}: {exc}".replace("\n", " "))

    def _stop_telemetry(self) -> None:
        if self.session is None or self.meta.telemetry is None:
            return
        session = self.session
        session.stop()
        self._samples = session.samples
        self.meta = replace(self.meta, telemetry=replace(
            self.meta.telemetry, samples=len(session.samples),
            errors=tuple(session.sampler.errors), error_count=session.sampler.error_count,
            health=session.health_report()))

    def _close_executors(self) -> None:
        """Every executor opened, whether or not the runner got to use them."""
        self.meta = replace(self.meta, close_errors=tuple(close_executors(self.executors)))

    def _rows_frame(self) -> pd.DataFrame:
        """The rows as a frame, built once for the findings and the result (rows are only
        ever appended: a count that moved on builds it again)."""
        if self._frame is None or self._frame[0] != len(self.rows):
            self._frame = (len(self.rows), results_frame(self.rows))
        return self._frame[1]

    def _write_findings(self) -> None:
        self.findings = derive_findings(self._rows_frame(), self._final_meta())
        if self.writer is None:
            return
        try:
            self.writer.write_findings(findings_frame(self.findings))
        except OutputError as exc:
            self.notes.append(f"findings.csv not written: {exc}")

    def _close_writer(self) -> None:
        if self.writer is not None:
            self.writer.close()
            if self.writer.samples_error is not None:
                self.notes.append(f"counter samples stopped being written to samples.csv "
                                  f"({self.writer.samples_error}); the rows keep their "
                                  "counters")

    def _make_result(self) -> None:
        self.result = RunResult(
            self.run_dir, self._rows_frame(), self.meta,
            samples=(pd.DataFrame(self._samples, columns=list(SAMPLE_COLUMNS))
                     if self._samples else None),  # as a folder without samples.csv reads
            findings=findings_frame(self.findings), measured_rows=list(self.rows),
            timelines=list(self.runner.timelines) if self.runner is not None else [],
        )

    def _report_files(self, parquet: bool, plots: bool) -> None:
        """summary.csv, the plots, report.html and the Parquet copies of a run that measured
        everything and whose final system.json is written, from that final metadata: the
        page says the run finished, and when, as `bwprof report --html` on the folder does.
        Not held from signals (plots take seconds): an interrupt stops them (`bwprof report`
        writes them again) and the run ends interrupted (`_settle`)."""
        if "report" in self._done:
            return
        self._done.add("report")
        if (self.run_dir is None or self.result is None or self.stopped
                or not self.final_written
                or self.finishing_interrupted):  # after Ctrl-C, no seconds of plotting
            return
        result = self.result
        # The final metadata (the page says the run finished, and when); setting it forgets
        # anything derived from the metadata before (`Run.__setattr__`).
        result.meta = self.meta
        try:
            written = write_report_files(result, self.run_dir, parquet=parquet, plots=plots,
                                         html=plots)
        except KeyboardInterrupt:
            self.interrupt()
        except OutputError as exc:  # the run is whole; only its report files are not
            self.report_failure = exc
            self.notes.append(f"summary.csv and the plots not all written: {exc}")
        except BwprofError as exc:  # a file of the run that cannot be read back
            self.notes.append(f"summary.csv and the plots not written: {exc}")
        else:
            result.files = written.files
            self.notes += written.notes

    def _final_meta(self) -> RunMeta:
        return replace(self.meta, finished_utc=utc_now().isoformat(),
                       interrupted=self.stopped, stopped_by=self.stopped_by,
                       findings=len(self.findings))

    def _write_final_system_json(self) -> None:
        self.meta = self._final_meta()
        if self.run_dir is None:
            self.final_written = True  # nothing to write
            return
        if self.stopped and "report" in self._done:  # a signal cut the report files short
            with suppress(OSError):  # a page drawn from the metadata that said 'finished'
                (self.run_dir / HTML_FILE).unlink()
        try:
            write_system_json(self.run_dir, self.meta)
            self.final_written = True
        except OutputError as exc:  # the system.json written before stays, whole
            self.fail(exc)
            self.meta = self._final_meta()

    def _settle(self) -> None:
        """The final system.json again where it no longer says what stopped the run: a
        signal that came after it was written, or that is held (`interrupts.lost()`: it
        landed in a step that then failed, or in an import) and would otherwise be raised
        only once the run had returned, beside a folder that says it finished."""
        held = interrupts.take_held()
        if held is not None:
            self.interrupt(held)
        if not self.final_written or self.meta.interrupted != self.stopped:
            self._done.discard("system.json")
            self._step("system.json", self._write_final_system_json)

    def finish(self, parquet: bool, plots: bool) -> RunResult:
        """The end-of-run steps, in this order whatever stopped the run: stop telemetry,
        close the executors, findings.csv, close the row files, then the final system.json,
        after every step that can stop the run, so that it says whether anything before
        stopped it; last the report files (only for a run that measured everything and whose
        final system.json is written), drawn from that final metadata, so the run's own
        report.html says it finished; a full disk while writing them costs only them. A stop
        signal at any step, the report files' included, makes the run end interrupted: the
        final system.json is written again to say so (`_settle`), and a report.html that
        said 'finished' is removed, so the folder agrees with exit 130. Raises what stopped
        the run:
        OutputError, RunInterrupted (with the result), or the bug. A run stopped before its
        row files existed (a signal while the executors started) gives its folder back: a
        system.json alone would be neither a run `report` reads nor a folder free again."""
        if self.run_dir is not None and self.writer is None:
            self._undo_folder()
        self._step("telemetry", self._stop_telemetry)
        self._step("executors", self._close_executors)
        self._step("findings", self._write_findings)
        self._step("writer", self._close_writer)
        self._step("result", self._make_result)
        self._step("system.json", self._write_final_system_json)
        self._settle()  # a signal came while writing it
        self._report_files(parquet, plots)
        self._settle()  # a signal came while writing them, or was held through them
        if self.result is None:  # its step was interrupted: make it now
            self._make_result()
        result = self.result
        assert result is not None
        result.meta, result.notes = self.meta, self.notes
        result.interrupted = self.interrupted or self.finishing_interrupted
        if self.failure is not None:
            raise self.failure
        if self.error is not None:
            raise self.error
        if result.interrupted:
            raise RunInterrupted(result)
        if self.report_failure is not None:
            raise self.report_failure
        return result


def load(run_dir: str | Path) -> Run:
    """A saved run folder as one Run, as `bwprof report` reads it (`bwprof.saved.load`)."""
    from bwprof.saved import load as load_saved

    return load_saved(run_dir)
