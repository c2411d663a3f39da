"""Terminal output: the progress bar while a run goes, the summary table after it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bwprof.measurement import Job
from bwprof.plan import format_bytes
from bwprof.report.schema import FAILED_STATUSES, ResultRow


class RichProgress:
    """Progress bar on stderr, one step per job, naming the job that runs now."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = None

    def start(self, total: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("starting", total=total)

    def job_started(self, job: Job) -> None:
        self._progress.update(self._task, description=job.label())

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        self._progress.advance(self._task)

    def stop(self) -> None:
        if self._task is not None:
            self._progress.stop()


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _size(row: ResultRow) -> str:
    return format_bytes(row.size_bytes) if row.size_bytes else ""


def _where(row: ResultRow) -> str:
    if row.threads is not None:
        return f"{row.threads} thr"
    return row.device


def headline_rows(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """Measured rows for the table: every host row, and for each GPU case, device and
    direction only the largest size (the whole sweep is in results.csv). Simulated rows are
    never shown as figures."""
    measured = [r for r in rows if r.status in ("ok", "invalid") and r.backend != "simulated"
                and not r.phase]  # overlap rows have their own lines (overlap_lines)
    largest: dict[tuple[str, str, str], int] = {}
    for row in measured:
        key = (row.case, row.device, row.direction)
        largest[key] = max(largest.get(key, 0), row.size_bytes or 0)
    return [
        row for row in measured
        if row.backend == "host" or (row.size_bytes or 0) == largest[(row.case, row.device,
                                                                        row.direction)]
    ]


def summary_table(rows: Sequence[ResultRow]) -> Table:
    """Headline rows (see `headline_rows`), one line each, in run order."""
    table = Table(title="bwprof results (GB/s = 1e9 bytes/s)", title_justify="left")
    for column, justify in (("case", "left"), ("size", "right"), ("on", "left"),
                            ("GB/s best", "right"), ("GB/s median", "right"), ("CV", "right"),
                            ("% peak", "right"), ("status", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in headline_rows(rows):
        table.add_row(
            row.case,
            _size(row),
            _where(row) + ("" if row.direction in ("within", "h2d", "d2h", "p2p")
                           else f" {row.direction}"),
            _fmt(row.gbps_best, ".2f"),
            _fmt(row.gbps_median, ".2f"),
            _fmt(None if row.cv is None else 100 * row.cv, ".1f") + ("%" if row.cv is not None
                                                                       else ""),
            _fmt(row.pct_of_peak, ".0f"),
            row.status if row.status == "ok" else f"[bold red]{row.status}[/]",
        )
    return table


def not_run_lines(rows: Sequence[ResultRow]) -> list[str]:
    """One line per distinct reason for skipped or waived rows, naming the cases it covers."""
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        if row.status in ("skipped", "waived") and row.case not in grouped[(row.status, row.note)]:
            grouped[(row.status, row.note)].append(row.case)
    lines = []
    for (status, reason), cases in grouped.items():
        shown = ", ".join(cases) if len(cases) <= 4 else f"{', '.join(cases[:3])}, ..."
        lines.append(f"{status} {len(cases)} case(s) ({shown}): {reason}")
    return lines


def failure_lines(rows: Sequence[ResultRow]) -> list[str]:
    return [
        f"{row.status}: {row.case} {_where(row)} {_size(row)} - {row.note}"
        for row in rows
        if row.status in FAILED_STATUSES
    ]


def overlap_lines(rows: Sequence[ResultRow]) -> list[str]:
    """One line per overlap case and device (efficiency, parts alone and together), and per
    device the pipeline configuration with the best end-to-end throughput."""
    measured = [r for r in rows if r.phase and r.status in ("ok", "invalid")
                and r.backend != "simulated"]
    lines = []
    for row in measured:
        if row.phase != "concurrent" or row.overlap_efficiency is None:
            continue
        alone = [r for r in measured if (r.case, r.device, r.size_bytes, r.phase)
                 == (row.case, row.device, row.size_bytes, "alone")]
        parts = " + ".join(f"{r.direction} {1e3 * (r.time_median_s or 0):.2f}" for r in alone)
        lines.append(
            f"{row.case} {row.device}: overlap efficiency {row.overlap_efficiency:.2f} "
            f"(alone {parts} ms, together {1e3 * (row.time_median_s or 0):.2f} ms per op)"
            + ("" if row.status == "ok" else f" [{row.status}]")
        )
    pipelines = [r for r in measured if r.phase == "pipeline" and r.gbps_median]
    for device in dict.fromkeys(r.device for r in pipelines):
        best = max((r for r in pipelines if r.device == device), key=lambda r: r.gbps_median)
        copy = next((r for r in measured if (r.case, r.device, r.size_bytes, r.phase,
                                             r.direction) == (best.case, device,
                                                              best.size_bytes, "alone", "h2d")),
                    None)
        versus = (f", {best.gbps_median / copy.gbps_median:.2f}x the H2D copy alone"
                  if copy is not None and copy.gbps_median else "")
        lines.append(f"pipeline_chunked {device}: best {best.streams} stream(s) x "
                     f"{_size(best)} chunks, {best.gbps_median:.2f} GB/s in + out{versus}")
    return lines


def simulated_lines(rows: Sequence[ResultRow]) -> list[str]:
    count = sum(1 for row in rows if row.backend == "simulated" and row.status in ("ok",
                                                                                 "invalid"))
    if not count:
        return []
    return [f"simulated {count} GPU row(s): the CPU stand-in backend ran them to check the "
            "bookkeeping; they are not measurements and are not shown as figures"]


def telemetry_line(system: Mapping[str, object]) -> str | None:
    """One line on the counters: how many samples, or why telemetry was off."""
    state = system.get("telemetry") or {}
    if not isinstance(state, Mapping) or state.get("reason") == "no GPU case selected":
        return None
    if state.get("enabled"):
        gpm = state.get("gpm") or []
        return (f"telemetry: {state.get('samples', 0)} counter sample(s) every "
                f"{state.get('interval_ms', 0):g} ms, joined to every GPU row"
                + (f"; GPM on {', '.join(gpm)}" if gpm else ""))  # type: ignore[arg-type]
    return f"telemetry off: {state.get('reason')}"


def finding_lines(findings: Any) -> list[str]:
    """One line per finding: severity, device, what, evidence."""
    if findings is None or len(findings) == 0:
        return []
    return [f"{f.severity}: {f.device}: {f.what} ({f.evidence})"
            for f in findings.itertuples(index=False)]


def print_summary(console: Console, rows: Sequence[ResultRow],
                  system: Mapping[str, object] | None = None, findings: Any = None) -> None:
    if headline_rows(rows):
        console.print(summary_table(rows))
        if any(row.backend not in ("host", "simulated") for row in headline_rows(rows)):
            console.print("GPU rows show the largest size of each sweep; every size is in "
                          "results.csv", markup=False, highlight=False)
    for line in overlap_lines(rows) + simulated_lines(rows):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in not_run_lines(rows):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in failure_lines(rows):
        console.print(line, style="bold red", markup=False, highlight=False, soft_wrap=True)
    telemetry = telemetry_line(system or {})
    if telemetry:
        console.print(telemetry, markup=False, highlight=False, soft_wrap=True)
    for line in finding_lines(findings):
        console.print(f"finding {line}", style="yellow", markup=False, highlight=False,
                      soft_wrap=True)
