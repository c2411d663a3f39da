"""Terminal output: the summary table and the lines under it (compare's table:
`bwprof.render.comparison`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from rich import box
from rich.console import Console, Group, JustifyMethod
from rich.table import Table
from rich.text import Text

from bwprof.schema import flags
from bwprof.schema.meta import RunMeta
from bwprof.schema.metrics import EFFICIENCY
from bwprof.schema.rows import FAILED_STATUSES, ResultRow
from bwprof.schema.table import each_cell, each_distinct, gc_paused
from bwprof.schema.text import one_line
from bwprof.store.formats import (
    cell_float,
    cell_int,
    cell_text,
    is_missing,
)
from bwprof.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from bwprof.analysis.run import Run


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


def results_table(rows: Sequence[ResultRow]) -> Table:
    """Headline rows (see `headline_rows`), one line each, in run order, with their flags
    (a cache-resident figure says so beside it)."""
    title = "bwprof results (GB/s = 1e9 bytes/s)"
    table = Table(title=title, title_justify="left", min_width=len(title))
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("case", "left"), ("size", "right"), ("on", "left"), ("best", "right"),
        ("median", "right"), ("unit", "left"), ("CV", "right"), ("% peak", "right"),
        ("status", "left"), ("flags", "left"))
    for column, justify in columns:
        table.add_column(column, justify=justify)
    for row in headline_rows(rows):
        table.add_row(
            row.case,
            _size(row),
            _where(row) + ("" if row.direction in ("within", "h2d", "d2h", "p2p")
                           else f" {row.direction}"),
            _fmt(row.value_best, ".2f"),
            _fmt(row.value_median, ".2f"),
            row.unit,
            _fmt(None if row.cv is None else 100 * row.cv, ".1f") + ("%" if row.cv is not None
                                                                       else ""),
            _fmt(row.pct_of_peak, ".0f"),
            row.status if row.status == "ok" else f"[bold red]{row.status}[/]",
            # What the figure is not (a cache's, noisy, ...): the same words as the file's.
            " ".join(sorted(row.flags - {"simulated"})),
        )
    return table


MAX_REASON_LINES = 5


def not_run_lines(rows: Sequence[ResultRow] | pd.DataFrame) -> list[str]:
    """One line per distinct reason for skipped or waived rows, naming the cases it covers.
    Of ResultRows or a results frame (`report_lines` reads the run's: a fleet waives tens
    of thousands of rows for a few reasons)."""
    return _not_run_lines(_columns_of(rows))


def _not_run_lines(columns: _Columns) -> list[str]:
    import pandas as pd

    if not len(columns.frame):
        return []
    not_run = np.flatnonzero(columns.among("status", ("skipped", "waived")))
    # Each reason's (status and note) cases, each in the order it first appears: one pass
    # of Python over the distinct reasons and cases, not over the rows.
    reasons = columns.group(not_run, ("status", "note"))
    case_codes, cases = columns.codes("case")
    _, first = np.unique(pd.factorize(reasons * len(cases) + case_codes[not_run])[0],
                         return_index=True)
    grouped: dict[tuple[str, str], list[str]] = {}
    for row in not_run[np.sort(first)].tolist():  # each reason's and case's first row
        key = (columns.cell("status", row), columns.cell("note", row))
        case = columns.cell("case", row) or "(no case name)"  # a damaged file's empty name
        said = grouped.setdefault(key, [])
        if case not in said:
            said.append(case)
    lines = []
    for (status, reason), cases in list(grouped.items())[:MAX_REASON_LINES]:
        shown = ", ".join(cases) if len(cases) <= 4 else f"{', '.join(cases[:3])}, ..."
        lines.append(f"{status} {len(cases)} case(s) ({shown}): {reason}")
    if len(grouped) > MAX_REASON_LINES:
        rest = list(grouped)[MAX_REASON_LINES:]
        lines.append(f"... and {len(rest)} more reason(s) for skipped or waived rows; see the "
                     "status and note columns of results.csv")
    return lines


NOT_JUDGED = "the box was not judged on it"


def failure_lines(rows: Sequence[ResultRow]) -> list[str]:
    """A line per row that failed: a figure that failed validation (`invalid: ...`, the
    box's), or bwprof's own exception (`bwprof error in lat_host 1 GiB: ...`), which says
    nothing of the box."""
    lines = []
    for row in rows:
        if row.status not in FAILED_STATUSES:
            continue
        if row.case == "rank":  # a failed fleet rank's row says all in its note
            lines.append(f"{row.status}: {row.note}")
        elif row.status == "error":
            where = " ".join(p for p in (row.case, _where(row), _size(row)) if p)
            lines.append(f"bwprof error in {where}: {one_line(row.note)}; {NOT_JUDGED}")
        else:
            lines.append(f"{row.status}: {row.case} {_where(row)} {_size(row)} - {row.note}")
    return lines


SHOWN_FLAGS: tuple[str, ...] = (flags.NOISY, flags.BUSY_HOST)
"""The flags the summary shows beside a figure: the figure is doubtful (it moved between
samples; other processes took its cores)."""


def busy_lines(rows: Sequence[ResultRow]) -> list[str]:
    """One line naming the host rows measured while other processes (or a hypervisor) took
    their cores (`busy_host`), with the largest shares seen."""
    busy = [r for r in rows if flags.BUSY_HOST in r.flags and r.status in ("ok", "invalid")]
    if not busy:
        return []
    cases = list(dict.fromkeys(r.case for r in busy))
    shown = ", ".join(cases) if len(cases) <= 6 else f"{', '.join(cases[:5])}, ..."
    others = max((r.host_others_pct for r in busy if r.host_others_pct is not None),
                 default=None)
    steal = max((r.host_steal_pct for r in busy if r.host_steal_pct is not None),
                default=None)
    took = (f"other processes took up to {others:.0f}% of the measuring cores' time"
            if others is not None else "other work ran on the measuring cores")
    if steal is not None and steal >= 0.5:
        took += f", the hypervisor stole up to {steal:.0f}%"
    return [f"busy host: {len(busy)} host row(s) measured while {took} ({shown}): their "
            "figures are partly the others', and `bwprof accept` does not judge them; "
            "measure again on a quiet host"]


def overlap_lines(rows: Sequence[ResultRow] | pd.DataFrame) -> list[str]:
    """One line per overlap case and device (efficiency, parts alone and together), and per
    device the pipeline configuration with the best end-to-end throughput. Of ResultRows or
    of a results frame (`report_lines` reads the run's: a fleet's overlap rows are a
    quarter of a million, which as ResultRows cost seconds)."""
    overlap = _OverlapRows(_columns_of(rows))
    return overlap.concurrent_lines() + overlap.pipeline_lines()


def _columns_of(rows: Sequence[ResultRow] | pd.DataFrame) -> _Columns:
    import pandas as pd

    from bwprof.schema.table import results_frame

    return _Columns(rows if isinstance(rows, pd.DataFrame) else results_frame(list(rows)))


class _Columns:
    """A results frame's columns as a ResultRow's fields hold them (`row_codes`,
    `row_floats`), each column read once and kept: the lines select and group a fleet's
    rows on arrays, and make Python values only of the cells they print."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self._codes: dict[str, tuple[np.ndarray, list[Any]]] = {}
        self._floats: dict[str, np.ndarray] = {}

    def codes(self, column: str) -> tuple[np.ndarray, list[Any]]:
        """Each row's code into the column's distinct cells, and those cells."""
        from bwprof.schema.table import row_codes

        if column not in self._codes:
            self._codes[column] = row_codes(self.frame[column], column)
        return self._codes[column]

    def cell(self, column: str, row: int) -> Any:
        """The cell of the row at position `row`, as its ResultRow holds it."""
        codes, cells = self.codes(column)
        return cells[codes[row]]

    def cells(self, column: str, rows: np.ndarray) -> list[Any]:
        """The cells of the rows at `rows` (positions), as their ResultRows hold them."""
        codes, cells = self.codes(column)
        return [cells[code] for code in codes[rows].tolist()]

    def where(self, column: str, test: Callable[[Any], bool]) -> np.ndarray:
        """The rows whose cell passes `test`, called once per distinct cell."""
        return each_distinct(*self.codes(column), test)

    def among(self, column: str, wanted: Sequence[object]) -> np.ndarray:
        return self.where(column, lambda cell: cell in wanted)

    def floats(self, column: str) -> np.ndarray:
        """The column as floats, NaN where a ResultRow holds None; a bandwidth row's
        figure columns as `ResultRow.__post_init__` fills them (`_fill_bandwidth`)."""
        from bwprof.schema.table import row_floats

        if column not in self._floats:
            values = row_floats(self.frame[column], column)
            other = _BANDWIDTH_PAIRS.get(column)
            if other is not None:
                filled = np.isnan(values) & self.where("metric", lambda m: m == "bandwidth")
                if filled.any():
                    values = values.copy()
                    values[filled] = row_floats(self.frame[other], other)[filled]
            self._floats[column] = values
        return self._floats[column]

    def group(self, rows: np.ndarray, columns: Sequence[str]) -> np.ndarray:
        """A group number for each of `rows` (positions): rows of the same cells of
        `columns` share one."""
        import pandas as pd

        key = np.zeros(len(rows), dtype=np.int64)
        for column in columns:
            codes, cells = self.codes(column)
            key = np.asarray(pd.factorize(key * len(cells) + codes[rows])[0], dtype=np.int64)
        return key


_BANDWIDTH_PAIRS = {"value_median": "gbps_median", "gbps_median": "value_median",
                    "value_best": "gbps_best", "gbps_best": "value_best",
                    "peak_value": "peak_gbps", "peak_gbps": "peak_value"}
"""A bandwidth row's figure columns, each filled from the other where it is missing."""
_OVERLAP_PHASES = ("alone", "paired", "concurrent", "pipeline")


def _joined(groups: np.ndarray, texts: list[str]) -> dict[int, str]:
    """Each group's texts (in the order given) joined with ' + '."""
    if not texts:
        return {}
    order = np.argsort(groups, kind="stable")
    ordered = groups[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    stops = [*starts[1:].tolist(), len(ordered)]
    shown = [texts[i] for i in order.tolist()]
    return {int(ordered[start]): " + ".join(shown[start:stop])
            for start, stop in zip(starts.tolist(), stops, strict=True)}


def _firsts(groups: np.ndarray, rows: np.ndarray) -> dict[int, int]:
    """Each group's first row (the rows in run order)."""
    found, first = np.unique(groups, return_index=True)
    return dict(zip(found.tolist(), rows[first].tolist(), strict=True))


class _OverlapRows:
    """The overlap lines' rows of a results frame (ok or invalid, not simulated, of the
    phases alone, paired, concurrent and pipeline), selected and grouped on arrays: a
    concurrent row's parts are the rows of its case, device and size alone (or, where the
    copies ran as a pair both ways, the pair's `both` row and the compute alone)."""

    def __init__(self, columns: _Columns) -> None:
        self.columns = columns
        self.rows = self.kind = self.group = np.zeros(0, dtype=np.int64)
        if not len(columns.frame):  # a frame of no rows may lack the columns too
            return
        wanted = (columns.among("phase", _OVERLAP_PHASES)
                  & columns.among("status", ("ok", "invalid"))
                  & ~columns.where("backend", lambda cell: cell == "simulated"))
        rows = self.rows = np.flatnonzero(wanted)
        phase_codes, phases = columns.codes("phase")
        kinds = np.array([_OVERLAP_PHASES.index(p) if p in _OVERLAP_PHASES else -1
                          for p in phases], dtype=np.int64)
        self.kind = kinds[phase_codes[rows]]
        self.group = columns.group(rows, ("case", "device", "size_bytes"))

    def _of(self, phase: str, direction: str | None = None) -> np.ndarray:
        """Positions within `rows` of the rows of `phase` (and `direction`)."""
        mine = self.kind == _OVERLAP_PHASES.index(phase)
        if direction is not None and len(self.rows):
            mine &= self.columns.where("direction", lambda cell: cell == direction)[self.rows]
        return np.flatnonzero(mine)

    def _parts(self, at: np.ndarray) -> list[str]:
        """'h2d 1.23' of each row at `at`: its direction and time in ms."""
        codes, cells = self.columns.codes("direction")
        ms = 1e3 * np.nan_to_num(self.columns.floats("time_median_s")[self.rows[at]])
        return [f"{cells[code]} {time:.2f}"
                for code, time in zip(codes[self.rows[at]].tolist(), ms.tolist(), strict=True)]

    def concurrent_lines(self) -> list[str]:
        """A line per concurrent row with its efficiency, in run order."""
        if not len(self.rows):
            return []
        columns = self.columns
        efficiency = columns.floats("overlap_efficiency")[self.rows]
        concurrent = self._of("concurrent")
        concurrent = concurrent[~np.isnan(efficiency[concurrent])]
        if not len(concurrent):
            return []
        alone = self._of("alone")
        alone_parts = _joined(self.group[alone], self._parts(alone))
        pair, compute = self._of("paired", "both"), self._of("alone", "compute")
        both = np.concatenate([pair, compute])  # the pair's rows first, as before
        pair_parts = _joined(self.group[both], self._parts(both))
        paired = set(self.group[pair].tolist())
        rows = self.rows[concurrent]
        together = 1e3 * np.nan_to_num(columns.floats("time_median_s")[rows])
        lines = []
        for case, device, status, group, shown, ms in zip(
                *(columns.cells(c, rows) for c in ("case", "device", "status")),
                self.group[concurrent].tolist(), efficiency[concurrent].tolist(),
                together.tolist(), strict=True):
            parts = pair_parts[group] if group in paired else alone_parts.get(group, "")
            lines.append(
                f"{case} {device}: overlap efficiency {shown:.2f} (alone {parts} ms, together "
                f"{ms:.2f} ms per op)" + ("" if status == "ok" else f" [{status}]"))
        return lines

    def best_pipelines(self) -> np.ndarray:
        """Per device (in the order each first has a pipeline row), the position of its
        pipeline row of the most GB/s, the first of them on a tie."""
        from bwprof.analysis.figures import pick_per_group

        if not len(self.rows):
            return np.zeros(0, dtype=np.int64)
        gbps = self.columns.floats("gbps_median")[self.rows]
        pipeline = self._of("pipeline")
        pipeline = pipeline[~np.isnan(gbps[pipeline]) & (gbps[pipeline] != 0)]
        if not len(pipeline):
            return np.zeros(0, dtype=np.int64)
        import pandas as pd

        codes = self.columns.codes("device")[0][self.rows[pipeline]]
        devices, uniques = pd.factorize(codes)  # in the order each first appears
        best = pick_per_group(np.asarray(devices), len(uniques), np.zeros(len(pipeline)),
                              gbps[pipeline])
        return self.rows[pipeline[best]]

    @cached_property
    def _first_paired(self) -> dict[int, int]:
        """Each group's first paired row (either direction): the copies in and out."""
        paired = self._of("paired")
        return _firsts(self.group[paired], self.rows[paired])

    @cached_property
    def _first_h2d(self) -> dict[int, int]:
        """Each group's first H2D copy alone."""
        alone = self._of("alone", "h2d")
        return _firsts(self.group[alone], self.rows[alone])

    def pipeline_lines(self) -> list[str]:
        """Per device, the line of its best pipeline row (`best_pipelines`): its
        configuration and GB/s against the copies in and out at once (the link both ways:
        what a pipeline that hid its kernel could reach), or, for runs before that
        reference, against the H2D copy alone."""
        from bwprof.analysis.figures import ratio

        best = self.best_pipelines()
        if not len(best):
            return []
        columns = self.columns
        gbps = columns.floats("gbps_median")
        first_paired, first_h2d = self._first_paired, self._first_h2d

        def figure(row: int | None) -> float | None:  # None: no such row, or no figure
            value = None if row is None else float(gbps[row])
            return None if value is None or value != value else value

        lines = []
        groups = self.group[np.searchsorted(self.rows, best)].tolist()
        for group, device, streams, size, best_gbps in zip(
                groups, *(columns.cells(c, best) for c in ("device", "streams", "size_bytes")),
                gbps[best].tolist(), strict=True):
            both_ways, copy = first_paired.get(group), first_h2d.get(group)
            # ratio: None (no comparison) against 0 or 5e-324 GB/s (a damaged row), never inf
            in_out = ratio(best_gbps, figure(both_ways)) if both_ways is not None else None
            over_copy = ratio(best_gbps, figure(copy)) if copy is not None else None
            versus = (f", {in_out:.2f} of the copies in and out at once" if in_out is not None
                      else f", {over_copy:.2f}x the H2D copy alone" if over_copy is not None
                      else "")
            lines.append(f"pipeline_chunked {device}: best {streams} stream(s) x "
                         f"{_size_of(size)} chunks, {best_gbps:.2f} GB/s in + out{versus}")
        return lines


def _size_of(size: int | None) -> str:
    return format_bytes(size) if size else ""


def loaded_latency_lines(rows: Sequence[ResultRow]) -> list[str]:
    """One line per loaded-latency case and device: the latency idle (`load_0`) and under
    each intensity of the concurrent streaming load, with the bandwidth that load achieved
    (`load_gbps`). Each latency is its row's median, as every figure is. Simulated rows are
    never figures."""
    from bwprof.analysis.figures import ratio
    from bwprof.analysis.summary import load_percent

    loaded = [r for r in rows if r.metric == "latency" and load_percent(r.phase) is not None
              and r.status == "ok" and r.value_median is not None and r.backend != "simulated"]
    lines = []
    by_device: dict[tuple[str, str], list[ResultRow]] = {}
    for r in loaded:  # grouped in one pass, in the order each first appears
        by_device.setdefault((r.case, r.device), []).append(r)
    for (case, device), group in by_device.items():
        mine = sorted(group, key=lambda r: (load_percent(r.phase) or 0, r.size_bytes or 0))
        parts = []
        for row in mine:
            percent = load_percent(row.phase)
            ns = f"{_gbps(row.value_median or 0.0)} ns"
            if percent == 0:
                parts.append(f"{ns} idle")
                continue
            load = f" ({_gbps(row.load_gbps)} GB/s)" if row.load_gbps is not None else ""
            parts.append(f"{ns} at {percent}%{load}")
        idle = next((r.value_median for r in mine if load_percent(r.phase) == 0), None)
        heaviest = mine[-1]
        times = (ratio(heaviest.value_median or 0.0, idle) if load_percent(heaviest.phase)
                 else None)  # None against an idle latency of 0 or 5e-324 ns
        factor = f"; {times:.1f}× idle at the heaviest load" if times is not None else ""
        others = "cores" if mine[0].backend == "host" else "SMs"
        lines.append(f"{case} {device} ({_size(mine[0])}): latency idle and under a "
                     f"streaming load on the other {others} (the GB/s that load achieved): "
                     f"{', '.join(parts)}{factor}")
    return lines


def simulated_lines(rows: Sequence[ResultRow]) -> list[str]:
    count = sum(1 for row in rows if row.backend == "simulated" and row.status in ("ok",
                                                                                 "invalid"))
    if not count:
        return []
    return [f"simulated {count} GPU row(s): the CPU stand-in backend ran them to check the "
            "bookkeeping; they are not measurements and are not shown as figures"]


def telemetry_line(meta: RunMeta) -> str | None:
    """One line on the counters: how many samples, or why telemetry was off."""
    state = meta.telemetry
    if state is None or meta.gpus.count is None:  # no GPU case: no GPU was even probed
        return None
    if state.enabled:
        return (f"telemetry: {state.samples or 0} counter sample(s) every "
                f"{state.interval_ms or 0:g} ms, joined to every GPU row"
                + (f"; GPM on {', '.join(state.gpm)}" if state.gpm else ""))
    return f"telemetry off: {state.reason}"


def ddr_peak_line(summary: pd.DataFrame, meta: RunMeta) -> str | None:
    """Why the DDR figure has no peak beside it (SMBIOS unreadable, channels unclear)."""
    ddr = summary[(summary["path"] == "ddr") & summary["gbps"].notna()]
    if ddr.empty or ddr["peak_gbps"].notna().any():
        return None
    why = meta.host.ddr_peak_note if meta.host is not None else None
    return f"DDR peak unknown: {why}" if why else None


def sandbox_line(meta: RunMeta) -> str | None:
    """Where the run was measured inside a sandbox such as gVisor, which sits between bwprof
    and the host: say so beside its figures, which compare with runs in the same sandbox."""
    name = meta.host.sandbox if meta.host is not None else None
    if not name:
        return None
    return (f"measured inside a {name} sandbox: host memory and GPU calls pass through its "
            "kernel and its CPU affinity is a stub, so host placement is unconfirmed; compare "
            "with runs in the same sandbox")


def finding_lines(findings: Any) -> list[str]:
    """One line per finding: severity, device, what, evidence."""
    if findings is None or len(findings) == 0:
        return []
    lines = []
    for finding in findings.to_dict("records"):
        def text(key: str, finding: dict = finding) -> str:
            value = finding.get(key)
            return "" if value is None or value != value else str(value)  # NaN != NaN

        evidence = f" ({text('evidence')})" if text("evidence") else ""
        lines.append(f"{text('severity')}: {text('device')}: {text('what')}{evidence}")
    return lines


def _gbps(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def figure_cell(value: object, backend: object, unit: str = "GB/s") -> str:
    """A figure for the terminal in its unit (an efficiency as overlap %), and never a
    simulated number."""
    if is_missing(value):
        return ""
    if backend == "simulated":
        return "simulated"
    number = cell_float(value) or 0.0  # not missing: checked above
    if unit == EFFICIENCY.unit:
        return f"{100 * number:.0f}% overlap"
    return f"{_gbps(number)} {unit}"


def device_words(row: pd.Series | Mapping[str, Any]) -> str:
    where = str(row["device"])
    if not is_missing(row["threads"]):
        where += f", {int(row['threads'])} thr"
    return where


def size_cell(value: object) -> str:
    size = cell_int(value)
    return "" if size is None else format_bytes(size)


SummaryGrid = tuple[list[tuple[str, int]], list[tuple[str, dict[str, str]]]]
"""The summary as text cells: the columns shown (heading, least width) and per row its path's
label and a cell per column."""


def summary_grid(summary: pd.DataFrame) -> SummaryGrid:
    """The cells of the summary table (the terminal's and the HTML report's): one row per
    figure with peaks, % of peak and the HBM ratios; a copy counted as traffic (`d2d_copy`)
    also in `copied`, its bytes copied once (`copy_gbps`), the figure to hold against
    nvbandwidth's. Columns empty for every row are left out. Simulated figures are never
    shown as numbers."""
    from bwprof.analysis.summary import PATH_LABELS

    # Each row as iterrows gave it (the frame's values as objects) but read once, without a
    # Series a row: a fleet's summary has ten thousand rows and more.
    names = [str(name) for name in summary.columns]
    every = [dict(zip(names, values, strict=True)) for values in summary.values]
    keep = [not is_missing(r["value"]) or r["status"] != "absent" for r in every]
    shown = summary[keep]
    shown_rows = [row for row, kept in zip(every, keep, strict=True) if kept]
    not_simulated = (shown["backend"] != "simulated").to_numpy(dtype=bool)
    measured = shown[not_simulated]
    # One figure column: headed GB/s while every figure is one (or an efficiency), else
    # `value`, each figure of another unit saying its unit.
    units = set(shown.loc[shown["value"].notna(), "unit"]) - {"GB/s", EFFICIENCY.unit}
    value_column = "value" if units else "GB/s"
    # A copy counted as traffic (d2d_copy) also as bytes copied once, nvbandwidth's figure.
    copied = (shown["copy_gbps"].notna() & shown["gbps"].notna()
              & (shown["copy_gbps"] < shown["gbps"] * (1 - 1e-9)))
    optional = {
        "copied": bool((copied & (shown["backend"] != "simulated")).any()),
        "peak (%)": shown["peak_value"].notna().any(),
        "HBM÷DDR": measured["hbm_over_ddr"].notna().any(),
        "HBM÷PCIe": measured["hbm_over_pcie"].notna().any(),
        "flags": any(_shown_flags(row) for row, real in zip(shown_rows, not_simulated,
                                                            strict=True) if real),
        "status": (shown["status"] != "ok").any(),
    }
    columns = [("figure", 12), ("size", 7), (value_column, 9), ("copied", 6), ("peak (%)", 6),
               ("CV", 5), ("flags", 5),
               ("HBM÷DDR", 7), ("HBM÷PCIe", 8), ("status", 6)]
    columns = [(c, width) for c, width in columns if optional.get(c, True)]
    # A case whose rows on one device differ by direction only (lat_memcpy's h2d, d2h and
    # within) names the direction, or its rows would read alike.
    directions = shown.groupby(["path", "case", "device"], sort=False)["direction"].nunique()
    several = {key for key, count in directions.items() if count > 1}
    rows: list[tuple[str, dict[str, str]]] = []
    for index, row in zip(shown.index, shown_rows, strict=True):
        simulated = row["backend"] == "simulated"

        def derived(value: object, spec: str, suffix: str, simulated: bool = simulated) -> str:
            return "" if is_missing(value) or simulated else format(value, spec) + suffix

        figure = figure_cell(row["value"], row["backend"], str(row["unit"] or "GB/s"))
        figure = figure.replace(" overlap", " eff.").removesuffix(" GB/s")
        peak = ("" if is_missing(row["peak_value"]) or row["path"] == "overlap"
                else _gbps(float(row["peak_value"])))
        if peak and not simulated and not is_missing(row["pct_of_peak"]):
            peak += f" ({row['pct_of_peak']:.0f}%)"
        cv = (None if is_missing(row["cv"]) or is_missing(row["repeats"]) or int(row["repeats"]) < 2
              else 100 * float(row["cv"]))
        cells = {
            "figure": " ".join(p for p in (
                str(row["case"]),
                str(row["direction"]) if (row["path"], row["case"], row["device"]) in several
                else "",
                device_words(row) if row["device"] else "",
                cell_text(row.get("dtype"))) if p),
            "size": size_cell(row["size_bytes"]),
            value_column: figure,
            "copied": derived(_gbps(float(row["copy_gbps"])) if copied[index] else None, "s", ""),
            "peak (%)": peak,
            "CV": derived(cv, ".1f", "%"),
            "flags": "" if simulated else _shown_flags(row),
            "HBM÷DDR": derived(row["hbm_over_ddr"], ".1f", "×"),
            "HBM÷PCIe": derived(row["hbm_over_pcie"], ".1f", "×"),
            "status": str(row["status"]),
        }
        rows.append((PATH_LABELS.get(str(row["path"]), str(row["path"])),
                     {c: cells[c] for c, _ in columns}))
    return columns, rows


def _shown_flags(row: pd.Series | Mapping[str, Any]) -> str:
    """The summary row's flags that make its figure doubtful (`SHOWN_FLAGS`), as the file
    spells them."""
    present = flags.split_flags(row.get("flags"))
    return " ".join(flag for flag in SHOWN_FLAGS if flag in present)


def path_table(summary: pd.DataFrame, title: str = "") -> Table:
    """The summary (`summary_grid`: one group of rows per memory path) as a rich table whose
    every cell may wrap, so the table fits an 80-column terminal."""
    columns, rows = summary_grid(summary)
    heading = f"bwprof summary{': ' + title if title else ''} (GB/s = 1e9 bytes/s)"
    # At least as wide as its title (within the console), so the title does not wrap.
    table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True, min_width=len(heading))
    for column, width in columns:
        left = column in ("figure", "flags", "status")
        table.add_column(column, justify="left" if left else "right", overflow="fold",
                         min_width=width)
    path = None
    for label, cells in rows:
        if label != path:
            path = label
            table.add_row(Text(label, style="bold"))
        status = cells.get("status")
        shown: list[str | Text] = list(cells.values())
        if status is not None:
            shown[-1] = Text(status, style="" if status == "ok"
                             else "bold red" if status in FAILED_STATUSES else "yellow")
        table.add_row(*shown)
    return table


FLEET_DIGEST_GPUS = 16
"""Above this many GPUs in a run's summary the terminal shows the fleet digest
(`fleet_digest_table`), not a row per GPU: a thousand boxes' rows are tens of thousands of
lines nobody reads, and drawing them was most of `bwprof report`'s CPU."""
FLEET_WORST = 5
"""The most GPUs a digest names as worst, per path."""
FLEET_LINES = 5
"""The most per-GPU lines of a kind the digest keeps where it has no summary of its own."""
ALL_GPUS_LINE = ("every GPU's figures are in summary.csv (written by `bwprof report`) and in "
                 "`bwprof report --json`; `bwprof report --all-gpus` shows them here")


def summary_gpus(summary: pd.DataFrame) -> int:
    """How many GPUs the summary covers: distinct devices of its GPU rows (not the host's,
    not a GPU pair's)."""
    import pandas as pd

    # Each distinct device tested once (a fleet's summary has a hundred thousand rows).
    codes, devices = pd.factorize(summary["device"].fillna("").astype(str))
    names = devices.tolist()
    gpu_device = np.array([name != "" and "->" not in name and not _is_box(name)
                           for name in names], dtype=bool)
    gpu = gpu_device[codes] & (summary["backend"].fillna("").astype(str) != "host").to_numpy(
        dtype=bool)
    return len(np.unique(codes[gpu]))


def _is_box(device: str) -> bool:
    """Whether `device` is a row of every GPU of a box at once (an `_all` case on `all` or
    `node3:all`): a box, not a GPU."""
    return device == "all" or device.endswith(":all")


def is_fleet(summary: pd.DataFrame) -> bool:
    """Whether the terminal shows the fleet digest (more than `FLEET_DIGEST_GPUS` GPUs)."""
    return summary_gpus(summary) > FLEET_DIGEST_GPUS


_DIGEST_KEYS = ["path", "case", "direction", "unit", "dtype"]


def _digest_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's measured figures (not simulated) with the keys a digest groups them by
    and each figure's `score`: its median's share (below 1: worse than the median of its
    path, whichever way the figure is better)."""
    shown = summary[summary["value"].notna() & (summary["backend"] != "simulated")]
    frame = shown[["path", "case", "direction", "unit", "device", "backend", "value"]].copy()
    frame["dtype"] = (shown["dtype"].fillna("").astype(str) if "dtype" in shown.columns
                      else "")
    for key in ("path", "case", "direction", "unit", "device", "backend"):
        frame[key] = frame[key].fillna("").astype(str)
    frame["value"] = frame["value"].astype(float)
    median = frame.groupby(_DIGEST_KEYS, sort=False)["value"].transform("median")
    lower = shown["higher_is_better"].fillna(True).astype(bool).eq(False)
    # A latency is worse higher; a figure of 0 against its median has score 0 (the worst).
    with_median = frame["value"] / median.where(median != 0)
    against = median / frame["value"].where(frame["value"] != 0)
    frame["pct"] = 100 * with_median
    frame["score"] = with_median.where(~lower, against.fillna(float("inf")))
    return frame


def fleet_digest(summary: pd.DataFrame, checks: Sequence[Any] = ()) -> pd.DataFrame:
    """One row per path and case of a fleet's summary (in its order): how many devices have
    a figure (`count`), its `median`, the `lowest` and `highest` figure with their devices,
    how many of the case's verdicts (`run.checks`) are below their band (`below`: WARN or
    FAIL; None where no verdict was given) and the `worst` devices (at most `FLEET_WORST`,
    worse than the median, worst first: device, figure, % of the median). Column
    operations only, grouped on one number a row (`_key_groups`): a fleet's summary has a
    hundred thousand rows, and grouping on five text columns read each of them per
    operation."""
    import pandas as pd

    frame = _digest_frame(summary)
    # The summary's rows that are not absent, keyed as the figures are, after them: a
    # group number below `count` is a digest row's (numbered in the order each appears).
    present = summary[summary["status"] != "absent"]
    keyed = [pd.concat([frame[k], present[k].fillna("").astype(str) if k in present.columns
                        else pd.Series("", index=present.index)], ignore_index=True)
             for k in _DIGEST_KEYS]
    groups = _key_groups(keyed)
    group, others = groups[:len(frame)], groups[len(frame):]
    count = int(group.max()) + 1 if len(group) else 0
    positions = np.arange(len(frame))
    first = np.full(count, -1, dtype=np.int64)
    first[group[::-1]] = positions[::-1]
    digest = frame[_DIGEST_KEYS].iloc[first].reset_index(drop=True)
    values = frame["value"].to_numpy(dtype="float64")
    by = pd.Series(values).groupby(group)  # group numbers in order: the digest's order
    digest["count"] = by.count().to_numpy()
    digest["median"] = by.median().to_numpy()
    digest["lowest"] = by.min().to_numpy()
    digest["highest"] = by.max().to_numpy()
    sizes = np.bincount(group, minlength=count)

    def every(mask: np.ndarray) -> np.ndarray:
        """Groups whose every row `mask` marks."""
        return np.bincount(group, weights=mask, minlength=count) == sizes

    device_codes, devices = pd.factorize(frame["device"])
    names = devices.tolist()
    boxes = np.array([_is_box(name) for name in names], dtype=bool)[device_codes]
    pairs = np.array(["->" in name for name in names], dtype=bool)[device_codes]
    on = np.where(every(frame["backend"].eq("host").to_numpy(dtype=bool)), "hosts", "GPUs")
    on = np.where(every(boxes), "boxes", on)
    digest["on"] = np.where(every(pairs), "pairs", on).astype(object)
    # Out of how many: the path's rows in the run (simulated, failed, no figure), and for a
    # GPU's path every GPU of the fleet (a GPU whose case raised has no summary row). The
    # count is said as 'of' these where some have no figure (the lines below say why).
    rows = np.bincount(others[others < count], minlength=count)
    on_gpus = (digest["on"] == "GPUs").to_numpy(dtype=bool)
    digest["rows"] = np.where(on_gpus, np.maximum(rows, summary_gpus(summary)), rows)
    device = frame["device"].to_numpy(dtype=object)
    lowest = np.lexsort((positions, values, group))  # per group its lowest, first on a tie
    highest = np.lexsort((positions, -values, group))
    starts = np.searchsorted(group[lowest], np.arange(count))
    digest["lowest_on"] = device[lowest[starts]]
    digest["highest_on"] = device[highest[starts]]
    score, pct = frame["score"].to_numpy(dtype="float64"), frame["pct"].to_numpy(dtype="float64")
    worse = np.flatnonzero(score < 1)
    worse = worse[np.argsort(score[worse], kind="stable")]  # worst first, then run order
    worse = worse[np.argsort(group[worse], kind="stable")]  # by group, each worst first
    listed: list[list[tuple[str, float, float]]] = [[] for _ in range(count)]
    for row, mine in zip(worse.tolist(), group[worse].tolist(), strict=True):
        if len(listed[mine]) < FLEET_WORST:
            listed[mine].append((device[row], float(values[row]), float(pct[row])))
    digest["worst"] = listed
    # Verdicts per case: a check judges a GPU's case (its headline size and direction), not
    # each of the case's summary rows, so they are counted per case, each GPU once.
    judged: dict[str, int] = defaultdict(int)
    below: dict[str, int] = defaultdict(int)
    for check in checks:
        if check.verdict in ("PASS", "WARN", "FAIL"):
            judged[check.case] += 1
            below[check.case] += check.verdict in ("WARN", "FAIL")
    digest["below"] = pd.array([below[c] if judged.get(c) else None for c in digest["case"]],
                               dtype="Int64")
    return digest


def _key_groups(columns: Sequence[pd.Series]) -> np.ndarray:
    """A number for each row of `columns` (equal-length): rows of the same cells in every
    column share one, numbered in the order each first appears."""
    import pandas as pd

    key = np.zeros(len(columns[0]) if columns else 0, dtype=np.int64)
    for column in columns:
        codes, cells = pd.factorize(column, use_na_sentinel=False)
        key = np.asarray(pd.factorize(key * max(len(cells), 1) + codes)[0], dtype=np.int64)
    return key


def _digest_figure(value: float, unit: str) -> str:
    if unit == EFFICIENCY.unit:
        return f"{value:.2f}"
    return _gbps(value)


def fleet_digest_table(summary: pd.DataFrame, checks: Sequence[Any] = (),
                       title: str = "") -> Table:
    """The fleet digest (`fleet_digest`) as a table: a row per path and case with its
    count, median, lowest and highest figure (naming the device) and how many are below
    their band."""
    from bwprof.analysis.summary import PATH_LABELS

    digest = fleet_digest(summary, checks)
    gpus = summary_gpus(summary)
    heading = (f"bwprof fleet digest{': ' + title if title else ''} ({gpus} GPUs; "
               "GB/s = 1e9 bytes/s)")
    table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True, min_width=len(heading))
    for column, justify in (("figure", "left"), ("on", "right"), ("median", "right"),
                            ("lowest", "right"), ("highest", "right"),
                            ("below band", "right")):
        table.add_column(column, justify=cast("JustifyMethod", justify), overflow="fold")
    path = None
    # A case measured in several directions (lat_memcpy's h2d, d2h and within) names each.
    several = set(digest.loc[digest.duplicated(["path", "case"], keep=False), "case"])
    for row in digest.to_dict("records"):
        label = PATH_LABELS.get(row["path"], row["path"])
        if label != path:
            path = label
            table.add_row(Text(label, style="bold"))
        unit = row["unit"]
        shown_unit = "" if unit in ("GB/s", EFFICIENCY.unit) else f" {unit}"
        figure = " ".join(p for p in (row["case"], row["direction"] if row["case"] in several
                                      else "", row["dtype"]) if p)
        below = row["below"]
        table.add_row(
            figure,
            (f"{row['count']} of {row['rows']} {row['on']}" if row["rows"] > row["count"]
             else f"{row['count']} {row['on']}"),
            _digest_figure(row["median"], unit) + shown_unit,
            f"{_digest_figure(row['lowest'], unit)} {row['lowest_on']}",
            f"{_digest_figure(row['highest'], unit)} {row['highest_on']}",
            "" if is_missing(below) else str(below))
    return table


def fleet_worst_lines(summary: pd.DataFrame, checks: Sequence[Any] = ()) -> list[str]:
    """Per path of the digest, the worst devices (at most `FLEET_WORST`, worse than the
    median): device, figure and % of the median."""
    lines = []
    for row in fleet_digest(summary, checks).to_dict("records"):
        if not row["worst"]:
            continue
        unit = row["unit"]
        shown = ", ".join(f"{device} {_digest_figure(value, unit)} ({pct:.0f}%)"
                          for device, value, pct in row["worst"])
        what = " ".join(p for p in (row["case"], row["direction"], row["dtype"]) if p)
        lines.append(f"worst {what} ({unit}, % of the median): {shown}")
    return lines


def fleet_overlap_lines(summary: pd.DataFrame,
                        rows: Sequence[ResultRow] | pd.DataFrame) -> list[str]:
    """The overlap lines of a fleet: per overlap case, how many GPUs, the median and the
    lowest efficiency (naming the GPU); per pipeline case the same of each GPU's best
    configuration. Not one line per GPU. `rows`: ResultRows or the run's results frame."""
    return _fleet_overlap_lines(summary, _OverlapRows(_columns_of(rows)))


def _fleet_overlap_lines(summary: pd.DataFrame, pipelines: _OverlapRows) -> list[str]:
    lines = []
    frame = _digest_frame(summary)
    overlap = frame[(frame["path"] == "overlap") & (frame["unit"] == EFFICIENCY.unit)]
    for case, group in overlap.groupby("case", sort=False):
        low = group["value"].idxmin()
        lines.append(f"{case}: overlap efficiency on {len(group)} GPUs: median "
                     f"{group['value'].median():.2f}, lowest {group.at[low, 'value']:.2f} "
                     f"({group.at[low, 'device']})")
    best = pipelines.best_pipelines()  # each GPU's best configuration, as overlap_lines picks
    if len(best):
        import statistics

        columns = pipelines.columns
        figures = columns.floats("gbps_median")[best].tolist()
        low = int(np.argmin(figures))  # the first of the lowest, in the GPUs' order
        configs: dict[str, int] = defaultdict(int)
        for streams, size in zip(columns.cells("streams", best),
                                 columns.cells("size_bytes", best), strict=True):
            configs[f"{streams} stream(s) x {_size_of(size)} chunks"] += 1
        common, many = max(configs.items(), key=lambda item: item[1])
        lines.append(f"pipeline_chunked on {len(best)} GPUs: best configuration's GB/s in + "
                     f"out median {statistics.median(figures):.2f}, lowest "
                     f"{figures[low]:.2f} ({columns.cell('device', int(best[low]))}); most often "
                     f"best: {common} (on {many} GPUs)")
    return lines


def capped_lines(lines: list[str], kind: str) -> list[str]:
    """At most `FLEET_LINES` of a kind of per-GPU line, and how many more there are."""
    if len(lines) <= FLEET_LINES:
        return lines
    return [*lines[:FLEET_LINES], f"... and {len(lines) - FLEET_LINES} more {kind} line(s), "
                                  "one per GPU: --all-gpus or --json"]


def _cells(frame: pd.DataFrame, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of `frame` as dicts of `columns`, each column read once: iterrows boxed a
    Series a row (seconds for a fleet's summary of ten thousand GPUs)."""
    values = [frame[column].tolist() for column in columns]
    return [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]


def _truthy(values: pd.Series) -> np.ndarray:
    """Which cells are true as Python tests them (`if cell`), each distinct cell tested
    once."""
    return each_cell(values, bool)


def summary_notes(summary: pd.DataFrame, fleet: bool = False) -> list[str]:
    """The notes of the summary rows under the table: why paths have no figure (one line per
    reason), which P2P pair is the slowest, where the best DDR figure came from. With
    `fleet`, a note that repeats across devices is said once, with '(on N GPUs)'."""
    from bwprof.analysis.summary import PATH_LABELS, has_figure

    lines: list[str] = []
    missing: dict[tuple[str, str], list[str]] = defaultdict(list)
    # Only a row with a note or without a figure says something here: a fleet's summary
    # has a hundred thousand rows, a few of them such.
    said_of = summary[_truthy(summary["note"]) | summary["value"].isna().to_numpy(bool)]
    cells = _cells(said_of, ("path", "status", "note", "case", "value", "backend"))
    if fleet:
        said: dict[str, list[Any]] = {}  # a note's line: [how many devices, all hosts]
        for row in cells:
            if row["note"] and has_figure(row):
                label = PATH_LABELS.get(str(row["path"]), str(row["path"]))
                seen = said.setdefault(f"{label} {row['case']}: {row['note']}", [0, True])
                seen[0] += 1
                seen[1] = seen[1] and row["backend"] == "host"
        lines = [line if count == 1 else f"{line} (on {count} {'hosts' if hosts else 'GPUs'})"
                 for line, (count, hosts) in said.items()]
        cells = [row for row in cells if not (row["note"] and has_figure(row))]
    for row in cells:
        label = PATH_LABELS.get(str(row["path"]), str(row["path"]))
        if not has_figure(row):
            if row["status"] in ("skipped", "waived"):
                continue  # said once, with the cases it covers, by not_run_lines
            reason = "" if row["status"] == "absent" else str(row["note"])
            missing[(str(row["status"]), reason)].append(label)
        elif row["note"]:
            lines.append(f"{label} {row['case']}: {row['note']}")
    for (status, reason), labels in missing.items():
        if status == "absent":
            lines.append(f"not in this run: {', '.join(labels)} (none of their cases ran: not "
                         "selected, or the run stopped first)")
        else:
            lines.append(f"no figure for {', '.join(labels)}: {status}: {reason}")
    return lines


def peak_lines(summary: pd.DataFrame) -> list[str]:
    """Each peak the summary's `% of peak` reads, once per path, with its source: the one
    peak `bwprof accept` shows too."""
    from bwprof.analysis.summary import PATH_LABELS

    if "peak_source" not in summary.columns:
        return []
    shown = summary[summary["peak_value"].notna() & (summary["peak_source"] != "")
                    & summary["value"].notna()]
    # Each distinct peak once before its cells are read: a fleet's are a few among a
    # hundred thousand rows (the first of each kept, so the order is the same).
    shown = shown.drop_duplicates(["path", "peak_value", "unit", "peak_source"])
    said = dict.fromkeys(
        (PATH_LABELS.get(str(r["path"]), str(r["path"])), float(r["peak_value"]),
         str(r["unit"]), str(r["peak_source"]))
        for r in _cells(shown, ("path", "peak_value", "unit", "peak_source")))
    parts = [f"{label} {_gbps(peak)} {unit} ({source})" for label, peak, unit, source in said]
    return [f"peaks (% of peak): {'; '.join(parts)}"] if parts else []


def print_warnings(lines: Sequence[str]) -> None:
    """'warning: ...' lines on stderr, where a person sees them whatever stdout is piped to
    (a run that did not finish: its figures are not a finished run's)."""
    import typer

    for line in lines:
        typer.echo(f"warning: {one_line(line)}", err=True)


def print_lines(console: Console, lines: Sequence[str], style: str = "") -> None:
    for line in lines:
        console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)


LINE_STYLES = {"failed": "bold red", "findings": "yellow", "busy": "yellow"}


def report_lines(run: Run, fleet: bool = False) -> dict[str, list[str]]:
    """Every line the report says under the summary table, by kind and in order: the
    summary's notes, the HBM/DDR sentence, each peak and its source, the roofline, the
    HBM/DDR latency sentence and the latency under load, the DDR peak, a sandbox, the
    overlap lines, then what was simulated, measured on a busy host, not run, or failed (a
    figure that failed validation, or bwprof's own error), the state of telemetry and the
    findings. One source for the terminal, `--json` and the page, so scripts see what
    people see. With `fleet` (the terminal's digest of more than `FLEET_DIGEST_GPUS`
    GPUs), the per-GPU lines become a line per case (`fleet_overlap_lines`), repeated
    notes are said once, and the worst GPUs of each path follow the notes."""
    from bwprof.analysis.roofline import roofline_lines
    from bwprof.analysis.summary import headline_sentence, latency_sentence

    summary, meta = run.summary, run.meta
    # The overlap and not-run lines read the frame's columns (a fleet's overlap rows are a
    # quarter of a million, its waived rows tens of thousands); each other kind reads the
    # few rows it can say something of, as ResultRows (`Run.line_rows`), sorted out in one
    # pass (each function filters again as before).
    phased: list[ResultRow] = []
    failed: list[ResultRow] = []
    simulated: list[ResultRow] = []
    busy: list[ResultRow] = []
    for row in run.line_rows:
        if row.phase:
            phased.append(row)
        if row.status in FAILED_STATUSES:
            failed.append(row)
        if row.backend == "simulated":
            simulated.append(row)
        if flags.BUSY_HOST in row.flags:
            busy.append(row)
    telemetry = telemetry_line(meta)
    # Off because no GPU could be used: the skipped GPU rows already say why, in one line.
    show_telemetry = not (meta.telemetry is not None and not meta.telemetry.enabled
                          and not meta.gpus.devices)
    columns = _Columns(run.results)  # each column read once for every kind of line
    overlap = _OverlapRows(columns)
    digested: dict[str, list[str]] = {}
    if fleet:
        digested = {
            "summary_notes": summary_notes(summary, fleet=True),
            "worst": fleet_worst_lines(summary, run.checks),
            "overlap": _fleet_overlap_lines(summary, overlap),
            "loaded_latency": capped_lines(loaded_latency_lines(phased), "latency under load"),
        }
    return {
        "summary_notes": digested["summary_notes"] if fleet else summary_notes(summary),
        **({"worst": digested["worst"]} if fleet else {}),
        "headline": [headline_sentence(summary)],
        "peaks": peak_lines(summary),
        "roofline": roofline_lines(run.ceilings) if len(run.results) else [],
        "latency": [line for line in [latency_sentence(summary)] if line]
        + (digested["loaded_latency"] if fleet else loaded_latency_lines(phased)),
        "ddr_peak": [line for line in [ddr_peak_line(summary, meta)] if line],
        "sandbox": [line for line in [sandbox_line(meta)] if line],
        "overlap": digested["overlap"] if fleet else overlap.concurrent_lines()
        + overlap.pipeline_lines(),
        "simulated": simulated_lines(simulated),
        "busy": busy_lines(busy),
        "not_run": _not_run_lines(columns),
        "failed": failure_lines(failed),
        "telemetry": [telemetry] if telemetry and show_telemetry else [],
        "findings": [f"finding {line}" for line in finding_lines(run.findings)],
    }


def print_report(console: Console, run: Run, title: str = "", show_rows: bool = False,
                 all_gpus: bool = False) -> None:
    """The end of `bwprof run` and the body of `bwprof report`: the summary table (under
    `title`), the GPU×GPU matrix where GPUs copied to each other, then `report_lines`.
    Where the summary covers more than `FLEET_DIGEST_GPUS` GPUs (and not `all_gpus`), the
    fleet digest instead: a row per path, the worst GPUs, a line per overlap case, and
    where every GPU's figures are."""
    # A fleet's tables are rich's objects by the million, none in a cycle: the collector's
    # full passes over them were a sixth of the CPU (as `gc_paused` says).
    with gc_paused():
        if show_rows and headline_rows(run.rows):
            console.print(results_table(run.rows))
        fleet = not all_gpus and is_fleet(run.summary)
        if fleet:
            console.print(fleet_digest_table(run.summary, run.checks, title))
            print_lines(console, [ALL_GPUS_LINE])
        else:
            console.print(path_table(run.summary, title))
            matrix = p2p_matrix_table(run.results)
            if matrix is not None:
                console.print(matrix)
        for kind, lines in report_lines(run, fleet=fleet).items():
            print_lines(console, lines, style=LINE_STYLES.get(kind, ""))


VERDICT_STYLES = {"PASS": "bold green", "WARN": "bold yellow", "FAIL": "bold red",
                  "CANNOT_JUDGE": "bold"}
"""The overall verdict's line styled by the verdict (`bwprof.analysis.judge.VERDICTS`)."""


def shell_word(path: str | None) -> str | None:
    """A run folder as one word of the command the next step names (quoted where it holds
    a space or another character the shell reads), so it can be pasted as it is."""
    import shlex

    return None if path is None else shlex.quote(one_line(path))


def print_answer(console: Console, run: Run, run_dir: str | None,
                 next_step: bool = True, page: Path | None = None) -> None:
    """The box's overall verdict in one line (`bwprof.analysis.answer`), styled by it, and
    with `next_step` what to do now (`run_dir` as the user typed it; `page` the report.html
    written for it, where one was): the answer a person looks for first, at the top of
    `bwprof report` and the end of `bwprof run`."""
    from bwprof.analysis.answer import answer

    found = answer(run)
    console.print(found.line(), style=VERDICT_STYLES.get(found.verdict, ""), markup=False,
                  highlight=False, soft_wrap=True)
    if next_step:
        shown_page = shell_word(str(page)) if page is not None else None
        print_lines(console, [found.next_step(shell_word(run_dir), shown_page)])


def page_written(files: Sequence[Path]) -> Path | None:
    """The report.html among the files a command wrote; None where it wrote none."""
    from bwprof.render.outputs import HTML_FILE  # outputs draws the page through this module

    return next((path for path in files if path.name == HTML_FILE), None)


NOT_A_PAIR = "-"
"""A matrix cell with no figure: a GPU with itself, or a pair not measured."""
SIMULATED_CELL = "sim"
"""A matrix cell of a simulated row: never a number (the caption says what it means)."""


def p2p_matrix_table(results: pd.DataFrame) -> Group | None:
    """GPU→GPU copy bandwidth as nvbandwidth prints it: rows the source GPU, columns the
    destination, each cell p2p_copy's median GB/s at the size the matrix was measured at
    (`bwprof.analysis.summary.p2p_matrix_rows`, as p2p_heatmap.png), `-` on the diagonal and
    where a pair was not measured. Simulated figures are never numbers. None where fewer
    than two GPUs copied to each other."""
    from bwprof.analysis.figures import column
    from bwprof.analysis.summary import p2p_matrix_rows

    figure = column("value")
    rows = p2p_matrix_rows(results)
    rows = rows[rows[figure].notna() & rows["device"].astype(str).str.contains("->")]
    if rows.empty:
        return None
    cells: dict[tuple[str, str], str] = {}
    for _, row in rows.iterrows():
        source, _, target = str(row["device"]).partition("->")
        cells[(source, target)] = (SIMULATED_CELL if row["backend"] == "simulated"
                                   else _gbps(cell_float(row[figure]) or 0.0))
    names = sorted({name for pair in cells for name in pair}, key=lambda g: (len(g), g))
    size = size_cell(rows["size_bytes"].iloc[0])
    heading = (f"GPU→GPU copy, GB/s median (p2p_copy{', ' + size if size else ''}): "
               "from the row's GPU to the column's")
    caption = f"{NOT_A_PAIR}: the GPU itself, or a pair not measured"
    if SIMULATED_CELL in cells.values():
        caption += (f"; {SIMULATED_CELL}: simulated, the CPU stand-in backend's row, not a "
                    "measurement")
    # The heading and caption as lines of their own: a table as wide as its title would
    # spread two GPUs' columns across the terminal.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("from\\to", justify="left")
    for name in names:
        table.add_column(name, justify="right", overflow="fold")
    for source in names:
        table.add_row(source, *(NOT_A_PAIR if source == target
                                else cells.get((source, target), NOT_A_PAIR)
                                for target in names))
    return Group(Text(heading, style="italic"), table, Text(caption))
