"""`bwprof.run(...)`: the whole measurement as one call, for the CLI and for notebooks.

Validates every option before touching the output folder, records machine metadata, runs the
plan through the executors this machine supports, and writes rows as they finish.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bwprof._version import __version__
from bwprof.cases import CaseSpec
from bwprof.errors import RunInterrupted
from bwprof.plan import make_plan
from bwprof.report.export import RunWriter, prepare_run_dir, write_system_json
from bwprof.report.formats import check_format
from bwprof.report.frames import results_frame
from bwprof.report.outputs import write_report_files
from bwprof.report.runfolder import with_extras
from bwprof.report.schema import FAILED_STATUSES, SCHEMA_VERSION, ResultRow
from bwprof.report.summary import build_summary
from bwprof.runner import Executor, ProgressListener, RunContext, Runner, UnavailableExecutor
from bwprof.system import HostInfo, host_info


@dataclass
class RunResult:
    """What one run produced: the rows as a DataFrame, the metadata, and where they were written."""

    results: pd.DataFrame
    system: dict[str, object]
    rows: list[ResultRow] = field(repr=False)
    run_dir: Path | None = None
    interrupted: bool = False
    summary: pd.DataFrame | None = field(default=None, repr=False)
    """One row per memory path (the columns of summary.csv); see bwprof.report.summary."""
    files: list[Path] = field(default_factory=list)
    """Report files written beside the rows: summary.csv, Parquet copies, plots."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know that did not fail the run (e.g. a plot not drawn)."""

    @property
    def failed(self) -> list[ResultRow]:
        """Rows that make the run exit non-zero: validation failures and unexpected errors."""
        return [row for row in self.rows if row.status in FAILED_STATUSES]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def hostname() -> str:
    return socket.gethostname()


def default_run_dir(hostname: str, started: datetime, root: Path = Path("reports")) -> Path:
    return root / f"{hostname}-{started:%Y%m%dT%H%M%SZ}"


def gpu_executor(
    system: dict[str, object] | None = None, simulate: bool = False,
    host_memory_bytes: int | None = None,
) -> Executor:
    """The executor for GPU cases: real GPUs, the simulated backend when asked for, or a
    `skipped` stand-in where there is no GPU. Records what it found under `system["gpus"]`."""
    from bwprof.gpu import devices as gpu_devices
    from bwprof.gpu.executor import GpuExecutor

    info: dict[str, object]
    executor: Executor
    if simulate:
        from bwprof.gpu.sim import SimBackend

        backend = SimBackend()
        found = gpu_devices.describe(backend)
        info = {"count": len(found), "reason": None, "detail": "simulated backend",
                "simulated": True}
        executor = GpuExecutor(backend, found, host_memory_bytes)
    else:
        from bwprof.gpu.runtime import CudaBackend, probe

        probed = probe()
        info = {"count": probed.count, "reason": probed.reason, "detail": probed.detail}
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
                executor = GpuExecutor(cuda_backend, found, host_memory_bytes)
    info["devices"] = [device.as_dict() for device in found]
    if system is not None:
        system["gpus"] = info
    return executor


def host_executor(host: HostInfo) -> Executor:
    from bwprof.host.ddr import HostExecutor

    return HostExecutor(host.cpu_model)


def case_availability(cases: Sequence[CaseSpec]) -> dict[str, str | None]:
    """Why each case cannot run on this machine (None where it can), without measuring."""
    executors: dict[str, Executor] = {}
    availability: dict[str, str | None] = {}
    for case in cases:
        if case.target not in executors:
            executors[case.target] = (
                gpu_executor() if case.target == "gpu" else host_executor(host_info())
            )
        why = executors[case.target].unavailable_reason(case)
        availability[case.key] = why if why is None or isinstance(why, str) else why.reason
    for executor in executors.values():
        executor.close()
    return availability


def run(
    *,
    cases: str | Sequence[str] | None = None,
    preset: str = "standard",
    repeats: int | None = None,
    threads: str | tuple[int, ...] | None = None,
    size: str | tuple[int, ...] | None = None,
    out: str | Path | None = None,
    progress: ProgressListener | None = None,
    command_line: Sequence[str] | None = None,
    simulate: bool = False,
    plots: bool = True,
    file_format: str = "csv",
) -> RunResult:
    """Measure this machine. Writes a run folder when `out` is given; returns the rows either way.

    With a run folder, a finished run also gets `summary.csv`, the PNG plots (unless `plots`
    is False) and, with `file_format="parquet"`, Parquet copies of its tables.
    Raises BwprofError for bad options (before anything is written) and RunInterrupted, carrying
    the partial RunResult, when interrupted. `simulate` runs the GPU cases on the simulated
    backend (tests only): its rows say `simulated` and are not measurements.
    """
    parquet = check_format(file_format)
    host = host_info()
    plan = make_plan(
        preset=preset,
        cases=cases if cases is None or isinstance(cases, str) else ",".join(cases),
        repeats=repeats,
        threads=threads,
        size=size,
        usable_cpus=host.usable_cpus,
        llc_bytes=host.llc_bytes_total,
        memory_available_bytes=host.memory_available_bytes,
    )
    run_dir = prepare_run_dir(Path(out)) if out is not None else None
    started = utc_now()
    host_name = hostname()
    run_id = f"{host_name}-{started:%Y%m%dT%H%M%SZ}"
    system: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "bwprof_version": __version__,
        "run_id": run_id,
        "command_line": list(command_line if command_line is not None else sys.argv),
        "started_utc": started.isoformat(),
        "finished_utc": None,
        "interrupted": False,
        "plan": plan.as_dict(),
        "host": host.as_dict(),
        "gpus": {"count": None, "reason": "not probed: no GPU case selected", "detail": None},
        "simulated": simulate,
    }
    executors: dict[str, Executor] = {"host": host_executor(host)}
    if plan.gpu_cases:
        executors["gpu"] = gpu_executor(system, simulate, host.memory_available_bytes)

    writer = RunWriter(run_dir) if run_dir is not None else None
    if run_dir is not None:
        write_system_json(run_dir, system)
    runner = Runner(plan, executors, RunContext(run_id, host_name), writer, progress)
    interrupted = False
    try:
        runner.run()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        runner.close()
        system["finished_utc"] = utc_now().isoformat()
        system["interrupted"] = interrupted
        if writer is not None:
            writer.close()
        if run_dir is not None:
            write_system_json(run_dir, system)
    frame = results_frame(runner.rows)
    result = RunResult(frame, system, runner.rows, run_dir, interrupted, build_summary(frame))
    if interrupted:
        raise RunInterrupted(result)
    if run_dir is not None:
        written = write_report_files(with_extras(run_dir, frame, system), result.summary,
                                     run_dir, parquet=parquet, plots=plots)
        result.files, result.notes = written.files, written.notes
    return result
