"""`bwprof compare`: the same figures across runs and boxes, against the first run.

Rows align by case, size, device, device model and direction (and thread count, overlap or
load phase and page size where they apply), in two scopes: `summary` (the headline figures
of each run's summary: DDR, HBM, host↔device, GPU↔GPU, overlap efficiency, latency) and
`row` (every measured row of results.csv). Rows of different device models never align: an
H100's figure against an H200's is not a change of one machine, so each shows in its own
line, and the machine warnings say why. The first run is the baseline; every other run gets
the change in % against it and whether the change is beyond noise (`noise_pct`, see
`noise_pct`).
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pandas as pd

from bwprof.analysis.figures import ratio
from bwprof.analysis.run import Run
from bwprof.coerce import integer, number, optional_integer, optional_number, shorten
from bwprof.errors import BwprofError
from bwprof.schema.meta import HostInfo, RunMeta
from bwprof.schema.metrics import EFFICIENCY, get_metric
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.text import json_ready, one_line, printable
from bwprof.store.formats import cell_float, cell_int, cell_text, is_missing
from bwprof.store.runfolder import RunFolder, state_warning

COMPARE_FILE = "compare.csv"
NOISE_FLOOR = 0.01
"""Below 1% a change is never called beyond noise: the samples of one run do not see what
varies between runs (boost clocks, page placement, which copy engine is picked)."""

KEY_COLUMNS: tuple[str, ...] = (
    "scope", "path", "case", "size_bytes", "device", "device_name", "memory", "direction",
    "threads", "streams", "phase", "dtype", "page_bytes", "metric",
)
"""What aligns a figure: rows of one case differing only by overlap or load phase
(`load_0`, `load_100`), by the arithmetic of a compute row (gemm_gpu's fp32 and tf32 share a
size, fma_gpu's fp32 and fp64 too) or by the page size a latency chase ran on are different
figures."""
COMPARE_COLUMNS: tuple[str, ...] = (
    "figure_id", *KEY_COLUMNS, "unit", "higher_is_better", "run", "run_dir", "run_id",
    "baseline", "backend", "status", "value", "cv", "repeats", "baseline_value", "change_pct",
    "noise_pct", "beyond_noise", "regressed_pct", "schema_version",
)
"""`change_pct` is the plain change of the value; `regressed_pct` the same change signed so
that positive is worse whichever way the metric is better (a latency that rose by 10%, a
bandwidth that fell by 10%: both 10)."""


# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom (math.inf: 1.96).
_T_975: dict[float, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980,
    math.inf: 1.960,
}


def t_critical(degrees_of_freedom: float) -> float:
    """The 95% two-sided critical value of Student's t, for any degrees of freedom of at
    least 1 (Welch's are fractional): linear in 1/df between the table's entries, the usual
    interpolation; t is convex in 1/df, so the chord errs on the large, safe side."""
    freedom = max(degrees_of_freedom, 1.0)
    entries = sorted(_T_975)
    upper = next(k for k in entries if k >= freedom)
    if upper == freedom:
        return _T_975[upper]
    lower = entries[entries.index(upper) - 1]
    share = (1 / lower - 1 / freedom) / (1 / lower - 1 / upper)  # 0 at lower, 1 at upper
    return _T_975[lower] + share * (_T_975[upper] - _T_975[lower])


def noise_pct(cv_a: float | None, n_a: int | None, cv_b: float | None,
              n_b: int | None) -> float | None:
    """The change (in %) two figures may differ by through sampling noise alone.

    Each figure's relative standard error is taken as cv/√n (n kept samples, cv their
    coefficient of variation); the two are independent, so the difference has
    √(cv_a²/n_a + cv_b²/n_b). A change beyond t times that is beyond noise, with t as in
    Welch's t-test at 95% (Welch-Satterthwaite degrees of freedom: about 2 with many samples,
    4.3 or more with two each, whose CVs say little), never below NOISE_FLOOR. The figures
    are best samples, not means, so this is a guide to sampling noise rather than an exact
    test. Unknown (None) where a row lacks a CV or has fewer than two samples.
    """
    if cv_a is None or cv_b is None or not n_a or not n_b or n_a < 2 or n_b < 2:
        return None
    try:
        var_a, var_b = cv_a**2 / n_a, cv_b**2 / n_b
        spread = var_a + var_b
        weights = var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1)
        freedom = spread**2 / weights if weights > 0 else math.inf
        if not math.isfinite(spread) or math.isnan(freedom):
            return None
        noise = 100 * max(t_critical(freedom) * math.sqrt(spread), NOISE_FLOOR)
    except (OverflowError, ZeroDivisionError):
        return None  # a CV of 1e155 or more (a damaged row): its noise is unknown, not raised
    return noise if math.isfinite(noise) else None


def parse_fail_below(text: str) -> float:
    """'10', '10%' or '2.5' -> 10.0 / 2.5; anything else (or outside 0..100) a one-line error."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*%?\s*", text)
    value = float(match.group(1)) if match else None
    if value is None or not 0 < value <= 100:
        raise BwprofError(
            f"--fail-below expects a percentage above 0 and at most 100, e.g. 10 or 2.5, "
            f"got {shorten(text)!r}"
        )
    return value


_num, _int = cell_float, cell_int


def _higher(value: object, metric: object) -> bool:
    """Which way the figure is better: as the row says, else as its metric is (a latency
    row that lost its direction must still count a rise as a regression)."""
    if not is_missing(value):
        return bool(value)
    try:
        return get_metric(str(metric)).higher_is_better
    except ValueError:
        return True


def _columns(frame: pd.DataFrame, names: tuple[str, ...]) -> list[list[object]]:
    """Each of `names` as a list of its cells (None for a column the frame lacks): read once
    a column, not once a row (`iterrows` built a Series for every row, minutes for a
    fleet's million rows)."""
    return [_cells(frame[name]) if name in frame.columns else [None] * len(frame)
            for name in names]


def _cells(column: pd.Series) -> list[object]:
    """A column's cells, a nullable column's missing ones as None, not pd.NA: each read
    then tells them apart without pandas (`cell_int`, `is_missing`)."""
    values = column.tolist()
    if getattr(column.dtype, "na_value", None) is pd.NA:
        return [None if value is pd.NA else value for value in values]
    return values


_SUMMARY_CELLS = ("path", "case", "size_bytes", "device", "device_name", "memory",
                  "direction", "metric", "unit", "higher_is_better", "backend", "status",
                  "value", "cv", "repeats")
_ROW_CELLS = ("case", "size_bytes", "device", "device_name", "memory", "direction", "threads",
              "streams", "phase", "dtype", "page_bytes", "metric", "unit", "higher_is_better",
              "backend", "status", "value_best", "overlap_efficiency", "cv", "repeats")


def _figures(run: RunFolder, summary: pd.DataFrame) -> list[dict[str, object]]:
    """The run's figures, keyed: its summary rows, then every measured row of results.csv,
    each in its own metric and unit (an overlap row also gives its efficiency)."""
    figures: list[dict[str, object]] = []
    for (path, case, size, device, device_name, memory, direction, metric, unit, higher,
         backend, status, value, cv, repeats) in zip(*_columns(summary, _SUMMARY_CELLS),
                                                     strict=True):
        if _num(value) is None:
            continue
        figures.append({
            "scope": "summary", "path": path, "case": case,
            "size_bytes": _int(size), "device": device,
            "device_name": device_name, "memory": memory,
            "direction": direction, "threads": None, "streams": None,
            "phase": "concurrent" if path == "overlap" else "", "dtype": "",
            "page_bytes": None,
            "metric": metric, "unit": unit,
            "higher_is_better": _higher(higher, metric),
            "backend": backend, "status": status, "value": _num(value),
            "cv": _num(cv), "repeats": _int(repeats),
        })
    measured = run.results[run.results["status"].isin(["ok", "invalid"])]
    for (case, size, device, device_name, memory, direction, threads, streams, phase, dtype,
         page_bytes, metric, unit, higher, backend, status, best, efficiency, cv,
         repeats) in zip(*_columns(measured, _ROW_CELLS), strict=True):
        metrics = [(metric, unit, _higher(higher, metric), best)]
        if _num(efficiency) is not None:
            metrics.append((EFFICIENCY.name, EFFICIENCY.unit, EFFICIENCY.higher_is_better,
                            efficiency))
        for metric_name, metric_unit, better, value in metrics:
            if _num(value) is None:
                continue
            figures.append({
                "scope": "row", "path": "", "case": case,
                "size_bytes": _int(size), "device": device,
                "device_name": device_name, "memory": memory,
                "direction": direction, "threads": _int(threads),
                "streams": _int(streams), "phase": phase,
                "dtype": cell_text(dtype),
                "page_bytes": _int(page_bytes), "metric": metric_name,
                "unit": metric_unit, "higher_is_better": better,
                "backend": backend, "status": status, "value": _num(value),
                "cv": _num(cv), "repeats": _int(repeats),
            })
    return figures


def _key(figure: dict[str, object]) -> tuple[object, ...]:
    return tuple(figure[c] for c in KEY_COLUMNS)


def run_labels(count: int) -> list[str]:
    """A, B, ... Z, then R27, R28, ...: short column headers for the runs."""
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(count)]


@dataclass
class Regression:
    run: str
    figure: str
    """'' when the baseline itself has no headline figure to hold the others against."""
    change_pct: float | None
    """None when the figure is missing from the later run."""
    simulated: bool
    why: str = ""
    """Why the figure (or every figure of the baseline) is missing, from the run's own rows."""
    higher_is_better: bool = True
    """A bandwidth fell, or (False) a latency rose."""


@dataclass
class Comparison:
    runs: list[RunFolder]
    labels: list[str]
    rows: pd.DataFrame
    warnings: list[str]
    summaries: list[pd.DataFrame]
    """Each run's summary (build_summary), as aligned and as asked why a figure is missing."""
    state_warnings: list[str] = field(default_factory=list)
    """The warnings (also in `warnings`) about runs that did not finish: a person must see
    them, so the terminal gives them on stderr."""

    def regressions(self, fail_below: float) -> list[Regression]:
        """Headline figures of later runs that got more than `fail_below` % worse than the
        baseline's (fell, or rose where lower is better: a latency), and headline figures of
        the baseline that a later run lacks. A baseline without any headline figure fails
        too: acceptance against nothing is no acceptance."""
        summary = self.rows[self.rows["scope"] == "summary"]
        if not (summary["baseline"] & summary["value"].notna()).any():
            return [Regression(self.labels[0], "", None, False,
                               _why_empty(self.runs[0], self.summaries[0]))]
        found = []
        runs = dict(zip(self.labels, zip(self.runs, self.summaries, strict=True), strict=True))
        for _, row in summary[~summary["baseline"]].iterrows():
            if _num(row["baseline_value"]) is None:
                continue
            change, worse = _num(row["change_pct"]), _num(row["regressed_pct"])
            if worse is not None and worse <= fail_below:
                continue
            if change is None and _num(row["value"]) is not None:
                continue
            found.append(Regression(
                str(row["run"]), describe(row), change,
                row["backend"] == "simulated" or self._baseline_simulated(row),
                why_missing(*runs[str(row["run"])], row) if change is None else "",
                _higher(row["higher_is_better"], row["metric"]),
            ))
        return found

    def _baseline_simulated(self, row: pd.Series) -> bool:
        base = self.rows[self.rows["baseline"] & (self.rows["figure_id"] == row["figure_id"])]
        return bool((base["backend"] == "simulated").any())


def why_missing(run: RunFolder, summary: pd.DataFrame, figure: pd.Series) -> str:
    """Why `run` (whose summary is `summary`) has no figure for a headline figure of the
    baseline, from its own rows."""
    from bwprof.units import format_bytes

    results = run.results
    mine = results[(results["case"] == figure["case"]) & (results["device"] == figure["device"])]
    unnamed = mine["device_name"].fillna("") == ""  # skipped rows name no device model
    same = mine["device_name"] == (figure["device_name"] or "")
    same_model = mine[same]
    if (~unnamed).any() and same_model.empty:
        models = ", ".join(sorted(set(mine.loc[~unnamed, "device_name"].astype(str))))
        return f"measured on {models}, which does not align with it"
    failed = mine[(mine["status"] != "ok") & (unnamed | same)]
    if len(failed):
        first = failed.iloc[0]
        return f"{first['status']} in this run: {first['note']}"
    sizes = sorted({int(s) for s in same_model["size_bytes"].dropna()})
    if sizes and not is_missing(figure["size_bytes"]) and int(figure["size_bytes"]) not in sizes:
        return (f"measured at {', '.join(format_bytes(s) for s in sizes)} only: figures align "
                "at the same size, so compare runs made with the same --preset and --size")
    path = summary[(summary["path"] == figure["path"]) & summary["value"].isna()]
    if len(path) and path.iloc[0]["status"] != "absent":
        return f"{path.iloc[0]['status']}: {path.iloc[0]['note']}"
    return f"not measured in this run{_stopped(run)}"


def _stopped(run: RunFolder) -> str:
    """' (the run was interrupted by SIGHUP)', ' (the run is still running)'... after a
    figure a run lacks: a run that did not finish lacks what it did not reach."""
    return f" (the run {run.stop_phrase})" if run.stop_phrase else ""


def _why_empty(run: RunFolder, summary: pd.DataFrame) -> str:
    """Why a baseline has no headline figure at all, in a few words."""
    interrupted = _stopped(run)
    if run.results.empty:
        return "it has no rows" + interrupted
    reasons = [f"{row['path']}: {row['status']}" for _, row in summary.iterrows()
               if row["status"] != "absent"]
    return ("; ".join(reasons) or "none of its cases gives a headline figure") + interrupted


def describe(row: pd.Series) -> str:
    """'hbm_triad gpu0 (NVIDIA H200) 256 MiB' for messages."""
    from bwprof.units import format_bytes

    parts = [str(row["case"]), str(row["device"])]
    if row["device_name"]:
        parts.append(f"({row['device_name']})")
    if not is_missing(row["size_bytes"]):
        parts.append(format_bytes(int(row["size_bytes"])))
    if row["metric"] == EFFICIENCY.name:
        parts.append("overlap efficiency")
    elif row["metric"] != "bandwidth":
        parts.append(str(row["metric"]))
    return " ".join(parts)


def _machine(meta: RunMeta) -> dict[str, str]:
    """What must match for figures to be comparable, as short strings; 'unknown' where a
    run predates the record (or, for the commit, did not run from a git checkout)."""
    gpus = meta.gpus
    host = meta.host

    def distinct(key: str) -> str:
        return ", ".join(gpus.metadata_values(key)) or "unknown"

    return {
        "GPU model": ", ".join(f"{n}× {name}" for name, n in gpus.model_counts().items())
        or "no GPU",
        "driver": distinct("driver_version") if gpus.devices else "no GPU",
        "CUDA": distinct("cuda_driver_version") if gpus.devices else "no GPU",
        "CPU": host.cpu_model if host is not None else "unknown",
        # A 2-thread VM and a 16-thread server of one CPU model are not one machine's DDR.
        "CPU threads": _threads(host),
        # The host arrays' page size moves DDR figures by several percent.
        "transparent huge pages": (host.transparent_hugepages if host is not None else None)
        or "unknown",
        # gVisor passes host memory and GPU calls through its own kernel.
        "sandbox": (host.sandbox or "none") if host is not None and host.recorded("sandbox")
        else "unknown",
        "bwprof version": meta.bwprof_version or "unknown",
        # The same version number from two checkouts may be different code.
        "bwprof commit": meta.bwprof_commit or "unknown",
        "backend": "GPU rows simulated" if meta.simulated else "GPU rows measured",
    }


IDENTITY_SOURCES = ("machine_id", "dmi_uuid", "dmi_serial", "gpu_uuids")


def _other_machine(base: HostInfo | None, mine: HostInfo | None, base_label: str,
                   label: str) -> str | None:
    """'machine differs: ...' where a source both runs' identities read differs (host names
    repeat: `vm`, `localhost`), naming any they share (an image cloned with its machine-id;
    a box whose GPUs were swapped); None where one predates the record, nothing both read
    can tell, or all they read agrees. GPUs agree where they share one UUID."""
    if base is None or mine is None or base.identity is None or mine.identity is None:
        return None
    same: list[str] = []
    clash: list[str] = []
    for name in IDENTITY_SOURCES:
        x, y = getattr(base.identity, name), getattr(mine.identity, name)
        if not x or not y:
            continue
        agree = bool(set(x) & set(y)) if name == "gpu_uuids" else x == y
        (same if agree else clash).append(name)
    if not clash:
        return None
    why = f"other {', '.join(clash)}" + (f", same {', '.join(same)}" if same else "")
    return (f"machine differs: {base_label} {base.box_label}; {label} {mine.box_label} "
            f"({why})")


def _threads(host: HostInfo | None) -> str:
    """The host's logical CPUs, and how many the run could use where fewer."""
    if host is None:
        return "unknown"
    usable = (f" ({host.usable_cpus} usable)" if host.usable_cpus != host.logical_cpus
              else "")
    return f"{host.logical_cpus}{usable}"


def machine_warnings(runs: Sequence[RunFolder], labels: Sequence[str]) -> list[str]:
    """One line per attribute where a run's machine differs from the baseline's; where some
    runs recorded a machine identity and others did not, a line saying those are told
    apart by host name only."""
    base = _machine(runs[0].meta)
    lines = []
    for run, label in zip(runs[1:], labels[1:], strict=True):
        if (line := _other_machine(runs[0].meta.host, run.meta.host, labels[0], label)):
            lines.append(line)
    known = [bool(run.meta.host is not None and run.meta.host.box) for run in runs]
    if any(known) and not all(known):
        bare = ", ".join(label for label, has in zip(labels, known, strict=True) if not has)
        lines.append(f"machine unknown for run(s) {bare}: recorded no machine identity (a "
                     "bwprof before it did), so told apart by host name only")
    for run, label in zip(runs[1:], labels[1:], strict=True):
        mine = _machine(run.meta)
        for what, value in mine.items():
            gpu_detail = what in ("driver", "CUDA", "backend")
            if gpu_detail and "no GPU" in (value, base["GPU model"], mine["GPU model"]):
                continue  # the GPU model line already says one side has no GPU
            if what in ("transparent huge pages", "sandbox", "bwprof commit") and "unknown" in (
                    value, base[what]):
                continue  # a run from before bwprof recorded it, or not from a checkout
            if value != base[what]:
                lines.append(f"{what} differs: {labels[0]} {base[what]}; {label} {value}")
    return lines


BY_CHOICES = ("node", "model")


def by_model(figures: list[dict[str, object]]) -> list[dict[str, object]]:
    """One figure per GPU (or CPU) model instead of per device: the median over the devices
    of that model — for fleets whose nodes differ between runs, or to compare models."""
    groups: dict[tuple[object, ...], list[dict[str, object]]] = {}
    for figure in figures:
        collapsed = {**figure, "device": f"median of {figure['device_name']}"}
        groups.setdefault(_key(collapsed), []).append(figure)
    out = []
    for members in groups.values():
        values = [number(m["value"]) for m in members]
        cvs = [number(m["cv"]) for m in members if m["cv"] is not None]
        repeats = [integer(m["repeats"]) for m in members if m["repeats"] is not None]
        out.append({**members[0], "device": f"median of {members[0]['device_name']}",
                    "value": statistics.median(values),
                    "cv": statistics.median(cvs) if cvs else None,
                    "repeats": min(repeats) if repeats else None,
                    "status": "ok" if all(m["status"] == "ok" for m in members)
                    else "invalid"})
    return out


def compare_runs(runs: Sequence[RunFolder], by: str = "node") -> Comparison:
    """Align the figures of two or more runs; the first is the baseline. `by` = "node" keeps
    every device (fleet runs name theirs node:gpuN); "model" compares per device model."""
    if len(runs) < 2:
        raise BwprofError("compare needs at least two run folders; the first is the baseline")
    if by not in BY_CHOICES:
        raise BwprofError(f"--by must be one of {', '.join(BY_CHOICES)}, got {shorten(by)!r}")
    labels = run_labels(len(runs))
    collapse = by_model if by == "model" else (lambda figures: figures)
    summaries = [Run.of(run).summary for run in runs]
    per_run = [{_key(f): f for f in collapse(_figures(run, summary))}
               for run, summary in zip(runs, summaries, strict=True)]
    keys = sorted(dict.fromkeys(k for figures in per_run for k in figures),
                  key=lambda k: k[0] != "summary")  # stable: summary first, then run order
    records = []
    for figure_id, key in enumerate(keys):
        base = per_run[0].get(key)
        for index, (run, label, figures) in enumerate(zip(runs, labels, per_run, strict=True)):
            mine = figures.get(key)
            record: dict[str, object] = {"figure_id": figure_id,
                                         **dict(zip(KEY_COLUMNS, key, strict=True))}
            record.update(
                unit=(mine or base or {}).get("unit"),
                higher_is_better=(mine or base or {}).get("higher_is_better"),
                run=label, run_dir=printable(str(run.path)) if run.path is not None else "",
                run_id=run.run_id,
                baseline=index == 0,
                backend=mine["backend"] if mine else None,
                status=mine["status"] if mine else "absent",
                value=mine["value"] if mine else None, cv=mine["cv"] if mine else None,
                repeats=mine["repeats"] if mine else None,
                baseline_value=base["value"] if base else None,
                change_pct=None, noise_pct=None, beyond_noise=None, regressed_pct=None,
                schema_version=SCHEMA_VERSION,
            )
            # A zero, negative-zero or subnormal baseline (a damaged row): no change in %,
            # shown "—" as for a missing figure, never a ZeroDivisionError or infinity.
            if index and base and mine and (quotient := ratio(
                    number(mine["value"]), number(base["value"]))) is not None:
                change = 100 * (quotient - 1)
                noise = noise_pct(optional_number(base["cv"]),
                                  optional_integer(base["repeats"]),
                                  optional_number(mine["cv"]), optional_integer(mine["repeats"]))
                record.update(change_pct=change, noise_pct=noise,
                              beyond_noise=None if noise is None else abs(change) > noise,
                              regressed_pct=-change if base["higher_is_better"] else change)
            records.append(record)
    frame = pd.DataFrame(records, columns=list(COMPARE_COLUMNS))
    for column in ("figure_id", "size_bytes", "threads", "streams", "repeats", "schema_version"):
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    for column in ("value", "cv", "baseline_value", "change_pct", "noise_pct"):
        frame[column] = pd.to_numeric(frame[column]).astype("float64")
    for column in ("beyond_noise", "higher_is_better"):
        frame[column] = frame[column].astype("boolean")
    frame["regressed_pct"] = pd.to_numeric(frame["regressed_pct"]).astype("float64")
    states = [line for run, label in zip(runs, labels, strict=True)
              for line in [state_warning(run, f"run {label}", "figures it has not reached yet "
                                         "are absent" if run.running
                                         else "figures it did not reach are absent")] if line]
    notes = [f"run {label}: {one_line(note)}" for run, label in zip(runs, labels, strict=True)
             for note in run.notes]
    return Comparison(list(runs), labels, frame,
                      machine_warnings(runs, labels) + same_run_warnings(runs, labels)
                      + states + notes, summaries, states)


def _identity(path: Path | None) -> object:
    """What makes two paths one folder: its device and inode (a symlink, `..` or another
    spelling lead to the same), or the absolute path where it cannot be looked at; a run
    with no folder is no folder another run has."""
    if path is None:
        return object()
    try:
        info = os.stat(path)
    except OSError:
        return os.path.abspath(path)
    return (info.st_dev, info.st_ino)


def same_run_warnings(runs: Sequence[RunFolder], labels: Sequence[str]) -> list[str]:
    """One line per run that is an earlier run again: the same folder given twice, or a
    copy of one run (the same run_id) in another folder. Their figures are the same rows,
    so their changes say nothing about the machine."""
    lines = []
    folders: dict[object, str] = {}
    ids: dict[str, str] = {}
    for run, label in zip(runs, labels, strict=True):
        identity = _identity(run.path)
        if identity in folders:
            lines.append(f"runs {folders[identity]} and {label} are the same folder "
                         f"({run.label}): their figures are the same rows")
        elif run.meta.run_id and run.meta.run_id in ids:
            lines.append(f"runs {ids[run.meta.run_id]} and {label} are the same run "
                         f"({one_line(run.meta.run_id)}) in two folders: their figures are "
                         "the same measurement")
        folders.setdefault(identity, label)
        if run.meta.run_id:
            ids.setdefault(run.meta.run_id, label)
    return lines


def regression_lines(regressions: Sequence[Regression], fail_below: float) -> list[str]:
    """One line per headline figure that fails `--fail-below`; simulated changes stay unsaid."""
    lines = []
    for found in regressions:
        if not found.figure:
            lines.append(f"below --fail-below: baseline {found.run} has no headline figure to "
                         f"hold the other runs against ({found.why})")
            continue
        moved = "fell" if found.higher_is_better else "rose"
        if found.change_pct is None:
            what = f"is missing ({found.why or 'not measured or failed'})"
        elif found.simulated:
            what = f"{moved} more than {fail_below:g}% (simulated rows, not a measurement)"
        else:
            what = f"{moved} {abs(found.change_pct):.1f}% (more than {fail_below:g}%)"
        lines.append(f"below --fail-below: run {found.run}: {found.figure} {what}")
    return lines


def run_lines(comparison: Comparison) -> list[str]:
    """'A (baseline) = DIR: run_id, machine' for each run."""
    from bwprof.store.runfolder import machine_line

    lines = []
    for index, (run, label) in enumerate(zip(comparison.runs, comparison.labels, strict=True)):
        role = " (baseline)" if index == 0 else ""
        simulated = ", simulated GPU rows" if run.simulated else ""
        state = ("" if run.state == "finished" else f", {run.state_text}"
                 if run.state == "interrupted" else f", incomplete: {run.state_text}")
        lines.append(f"{label}{role} = {run.label}: {one_line(run.run_id)}, "
                     f"{machine_line(run.meta)}, bwprof {one_line(run.meta.bwprof_text)}"
                     f"{simulated}{state}")
    return lines


def comparison_json(comparison: Comparison, fail_below: float | None,
                    regressions: Sequence[Regression]) -> dict[str, object]:
    """The comparison for scripts: each run with its `state` ('finished', 'interrupted',
    'incomplete'), `state_detail` and `stopped_by`; every warning; the aligned rows. Strict
    JSON, every string printable (`json_ready`). Data only: the face that prints it also says
    `comparison.state_warnings` on stderr (analysis never prints)."""
    from dataclasses import asdict

    from bwprof.store.formats import json_records

    out = {
        "schema_version": SCHEMA_VERSION,
        "baseline": comparison.labels[0],
        "runs": [{"label": label, "path": str(run.path), "run_id": run.run_id,
                  "host": run.host, "simulated": run.simulated,
                  "bwprof_version": run.meta.bwprof_version,
                  "bwprof_commit": run.meta.bwprof_commit,
                  "state": run.state, "state_detail": run.state_text,
                  "stopped_by": run.meta.stopped_by}
                 for run, label in zip(comparison.runs, comparison.labels, strict=True)],
        "warnings": comparison.warnings,
        "rows": json_records(comparison.rows),
        "fail_below": fail_below,
        "regressions": [asdict(found) for found in regressions],
    }
    return cast(dict[str, object], json_ready(out))
