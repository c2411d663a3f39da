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

import itertools
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from bwprof.analysis.run import Run
from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.schema.meta import HostInfo, RunMeta
from bwprof.schema.metrics import EFFICIENCY, get_metric
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.text import json_ready, one_line, printable
from bwprof.store.formats import cell_float, is_missing
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


_num = cell_float


def _higher(value: object, metric: object) -> bool:
    """Which way the figure is better: as the row says, else as its metric is (a latency
    row that lost its direction must still count a rise as a regression)."""
    if not is_missing(value):
        return bool(value)
    return _metric_higher(metric)


def _metric_higher(metric: object) -> bool:
    """Whether `metric`'s figures are better higher (True for a metric bwprof does not know)."""
    try:
        return get_metric(str(metric)).higher_is_better
    except ValueError:
        return True


FIGURE_COLUMNS: tuple[str, ...] = (*KEY_COLUMNS, "unit", "higher_is_better", "backend",
                                   "status", "value", "cv", "repeats")
"""A run's figures as `_figures` gives them, one row a figure."""


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column of `frame` with a plain 0..n-1 index; a column the frame lacks (an older
    file's) as missing cells (None, as the per-row reading gave them)."""
    if name in frame.columns:
        return frame[name].reset_index(drop=True)
    return pd.Series([None] * len(frame), dtype=object)


def _floats(column: pd.Series) -> np.ndarray:
    """A numeric column as float64, missing cells NaN."""
    return pd.to_numeric(column).astype("float64").to_numpy()


def _whole(column: pd.Series) -> pd.Series:
    """A whole-number column as Int64 (missing cells NA); a float cell holding a fraction is
    refused as `coerce.integer` refuses it."""
    if column.dtype == object and column.isna().all():
        return pd.Series(pd.array([None] * len(column), dtype="Int64"))
    return pd.to_numeric(column).astype("Int64").reset_index(drop=True)


def _higher_column(higher: pd.Series, metric: pd.Series) -> np.ndarray:
    """`_higher` for every row at once: the row's own direction, else its metric's."""
    known = higher.notna().to_numpy()
    out = np.empty(len(higher), dtype=bool)
    out[known] = higher[known].astype(bool).to_numpy()
    if not known.all():
        unknown = metric[~known]
        out[~known] = unknown.map({m: _metric_higher(m) for m in unknown.unique()}).to_numpy(
            dtype=bool)
    return out


def _figures(run: RunFolder, summary: pd.DataFrame) -> pd.DataFrame:
    """The run's figures (FIGURE_COLUMNS), keyed: its summary rows, then every measured row
    of results.csv, each in its own metric and unit (an overlap row also gives its
    efficiency, right after its own figure). Whole columns at a time, each taken once: a
    fleet's million rows, not a dict per row."""
    return pd.concat([_summary_figures(summary), _row_figures(run)], ignore_index=True)


def _summary_figures(summary: pd.DataFrame) -> pd.DataFrame:
    """The figures of the run's summary rows (scope `summary`), FIGURE_COLUMNS in order."""
    value = _floats(_column(summary, "value"))
    kept = np.flatnonzero(~np.isnan(value))
    head = pd.DataFrame({name: _column(summary, name).take(kept).reset_index(drop=True)
                         for name in ("path", "case", "device", "device_name", "memory",
                                      "direction", "metric", "unit", "backend", "status")})
    for name in ("size_bytes", "repeats"):
        head[name] = _whole(_column(summary, name).take(kept))
    head["higher_is_better"] = _higher_column(
        _column(summary, "higher_is_better").take(kept).reset_index(drop=True), head["metric"])
    head["value"] = value[kept]
    head["cv"] = _floats(_column(summary, "cv"))[kept]
    head["scope"] = "summary"
    head["threads"] = head["streams"] = head["page_bytes"] = pd.array(
        [None] * len(head), dtype="Int64")
    head["phase"] = np.where(head["path"].to_numpy(dtype=object) == "overlap", "concurrent", "")
    head["dtype"] = ""
    return head[list(FIGURE_COLUMNS)]


ROW_TEXT: tuple[str, ...] = ("case", "device", "device_name", "memory", "direction", "phase",
                             "metric", "unit", "backend", "status")
"""The text columns a run's row figures take from its results as they are."""


def _row_picks(results: pd.DataFrame, best: np.ndarray,
               efficiency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row of `results` each row figure comes from, and whether it is the row's
    overlap efficiency: each measured row's own figure (`best`, its value_best), then its
    `efficiency` (the order the per-row reading gave)."""
    measured = _column(results, "status").isin(["ok", "invalid"]).to_numpy()
    own = np.flatnonzero(measured & ~np.isnan(best))
    overlap = np.flatnonzero(measured & ~np.isnan(efficiency))
    places = np.concatenate([2 * own, 2 * overlap + 1])
    order = np.argsort(places, kind="stable")
    return places[order] // 2, (places[order] % 2 == 1)


def _row_figures(run: RunFolder) -> pd.DataFrame:
    """The figures of every measured row of results.csv (scope `row`), FIGURE_COLUMNS."""
    results = run.results
    best = _floats(_column(results, "value_best"))
    efficiency = _floats(_column(results, "overlap_efficiency"))
    picked, is_efficiency = _row_picks(results, best, efficiency)

    def taken(name: str) -> pd.Series:
        return _column(results, name).take(picked).reset_index(drop=True)

    body = pd.DataFrame({name: taken(name) for name in ROW_TEXT})
    dtype = taken("dtype")
    body["dtype"] = dtype if dtype.dtype == "str" and not dtype.isna().any() else (
        dtype.astype(object).where(dtype.notna(), "").astype(str))
    for name in ("size_bytes", "threads", "streams", "page_bytes", "repeats"):
        body[name] = _whole(taken(name))
    higher = _higher_column(taken("higher_is_better"), body["metric"])
    body["value"] = np.where(is_efficiency, efficiency[picked], best[picked])
    body["cv"] = _floats(_column(results, "cv"))[picked]
    if is_efficiency.any():
        body["metric"] = body["metric"].where(~is_efficiency, EFFICIENCY.name)
        body["unit"] = body["unit"].where(~is_efficiency, EFFICIENCY.unit)
        higher = np.where(is_efficiency, EFFICIENCY.higher_is_better, higher)
    body["higher_is_better"] = higher
    body["scope"], body["path"] = "row", ""
    return body[list(FIGURE_COLUMNS)]


def _squares(values: np.ndarray) -> np.ndarray:
    """x**2 as Python's float power gives it (the C library's pow, which can differ from
    x*x in the last bit), with inf where it overflows (Python raises OverflowError): so
    the columnar noise is the per-row `noise_pct`'s to the last digit.

    x*x is the correctly rounded square, and pow's error is under 0.52 of a unit in the
    last place (glibc's bound; tests/analysis/test_compare_squares.py holds it), so the two
    agree wherever the exact square is less than 0.45 of a unit from x*x (Dekker's exact
    product says how far it is): nine cells in ten. Only the rest (ties within
    reach of pow's error, squares near overflow or subnormal) go through Python's pow:
    a fleet's million CVs were a second of `pow` calls."""
    with np.errstate(all="ignore"):
        square = values * values
        split = 134217729.0 * values  # 2**27 + 1: Veltkamp's split into 26-bit halves
        high = split - (split - values)
        low = values - high
        error = ((high * high - square) + 2 * high * low) + low * low
        magnitude = np.abs(values)
        plain = ((magnitude == 0) | np.isnan(values) | np.isinf(values)
                 | ((magnitude > 2.0**-500) & (magnitude < 2.0**500)
                    & (np.abs(error) < 0.45 * np.spacing(square))))
    odd = np.flatnonzero(~plain)
    if len(odd):
        square[odd] = _python_squares(values[odd])
    return square


def _python_squares(values: np.ndarray) -> np.ndarray:
    """x**2 of each cell through Python's float power, inf where it overflows."""
    cells = values.tolist()
    try:
        return np.array(list(map(pow, cells, itertools.repeat(2))), dtype="float64")
    except OverflowError:
        return np.array([_square(cell) for cell in cells], dtype="float64")


def _square(cell: float) -> float:
    try:
        return cell**2
    except OverflowError:
        return math.inf


def _t_critical_column(freedom: np.ndarray) -> np.ndarray:
    """`t_critical` of each entry, the same arithmetic in the same order."""
    entries = np.array(sorted(_T_975), dtype="float64")
    values = np.array([_T_975[k] for k in sorted(_T_975)], dtype="float64")
    freedom = np.maximum(freedom, 1.0)
    upper = np.minimum(np.searchsorted(entries, freedom, side="left"), len(entries) - 1)
    lower = np.maximum(upper - 1, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = ((1 / entries[lower] - 1 / freedom)
                 / (1 / entries[lower] - 1 / entries[upper]))
        between = values[lower] + share * (values[upper] - values[lower])
    return np.where(entries[upper] == freedom, values[upper], between)


def _noise_column(cv_a: np.ndarray, n_a: np.ndarray, cv_b: np.ndarray,
                  n_b: np.ndarray) -> np.ndarray:
    """`noise_pct` of each entry (n as float64, NaN where missing); NaN where it is None."""
    usable = ~np.isnan(cv_a) & ~np.isnan(cv_b) & (n_a >= 2) & (n_b >= 2)
    out = np.full(len(cv_a), np.nan)
    if not usable.any():
        return out
    cv_a, n_a, cv_b, n_b = cv_a[usable], n_a[usable], cv_b[usable], n_b[usable]
    with np.errstate(all="ignore"):
        square_a, square_b = _squares(cv_a), _squares(cv_b)
        var_a, var_b = square_a / n_a, square_b / n_b
        spread = var_a + var_b
        fourth_a, fourth_b = _squares(var_a), _squares(var_b)
        weights = fourth_a / (n_a - 1) + fourth_b / (n_b - 1)
        spread_squared = _squares(spread)
        freedom = np.where(weights > 0, spread_squared / np.where(weights > 0, weights, 1.0),
                           math.inf)
        # Where Python's ** overflowed, noise_pct answered None.
        overflowed = ~(np.isfinite(square_a) & np.isfinite(square_b) & np.isfinite(fourth_a)
                       & np.isfinite(fourth_b) & (np.isfinite(spread_squared) | ~(weights > 0)))
        bad = overflowed | ~np.isfinite(spread) | np.isnan(freedom)
        noise = 100 * np.maximum(_t_critical_column(np.where(bad, 1.0, freedom))
                                 * np.sqrt(spread), NOISE_FLOOR)
    out[usable] = np.where(bad | ~np.isfinite(noise), np.nan, noise)
    return out


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


class Comparison:
    """The runs (`labels` A, B, ...; the first the baseline), their aligned figures (`rows`,
    COMPARE_COLUMNS), the `warnings`, each run's summary (`summaries`: build_summary's, as
    aligned and as asked why a figure is missing) and the `state_warnings` (also in
    `warnings`) about runs that did not finish: a person must see them, so the terminal
    gives them on stderr.

    `rows` may be given made, or as the `_Alignment` that makes them when first read: a
    fleet's are a row per measured row and run, which the terminal's headline figures
    (`scope_rows("summary")`) do not need."""

    def __init__(self, runs: list[RunFolder], labels: list[str],
                 rows: pd.DataFrame | _Alignment, warnings: list[str],
                 summaries: list[pd.DataFrame], state_warnings: list[str] | None = None
                 ) -> None:
        self.runs = runs
        self.labels = labels
        self.warnings = warnings
        self.summaries = summaries
        self.state_warnings = state_warnings if state_warnings is not None else []
        self._rows = rows if isinstance(rows, pd.DataFrame) else None
        self._alignment = rows if isinstance(rows, _Alignment) else None
        self._summary_rows: pd.DataFrame | None = None

    @property
    def rows(self) -> pd.DataFrame:
        """Every aligned figure of every run, a row each (COMPARE_COLUMNS), made from the
        runs' results when first read: a run's frame changed in place before then gives
        rows of the changed figures (read `rows` first, or compare again)."""
        if self._rows is None:
            assert self._alignment is not None
            self._rows = self._alignment.rows()
        return self._rows

    @rows.setter
    def rows(self, rows: pd.DataFrame) -> None:
        """Rows given (a test's, a caller's own choice of them): what they were made of goes."""
        self._rows, self._alignment, self._summary_rows = rows, None, None

    def scope_rows(self, scope: str) -> pd.DataFrame:
        """`rows[rows["scope"] == scope]`; the headline figures (`summary`) without making
        the rest where they are not made yet."""
        if scope == "summary" and self._rows is None and self._alignment is not None:
            if self._summary_rows is None:
                self._summary_rows = self._alignment.summary_rows()
            if self._summary_rows is not None:
                return self._summary_rows
        rows = self.rows
        return rows[(rows["scope"] == scope).to_numpy(dtype=bool)]

    def regressions(self, fail_below: float) -> list[Regression]:
        """Headline figures of later runs that got more than `fail_below` % worse than the
        baseline's (fell, or rose where lower is better: a latency), and headline figures of
        the baseline that a later run lacks. A baseline without any headline figure fails
        too: acceptance against nothing is no acceptance."""
        summary = self.scope_rows("summary")
        if not (summary["baseline"] & summary["value"].notna()).any():
            return [Regression(self.labels[0], "", None, False,
                               _why_empty(self.runs[0], self.summaries[0]))]
        found = []
        runs = dict(zip(self.labels, zip(self.runs, self.summaries, strict=True), strict=True))
        later = summary[~summary["baseline"] & summary["baseline_value"].notna()]
        worse, change = later["regressed_pct"], later["change_pct"]
        # Within --fail-below, or a figure there whose change cannot be said ("n/a"): not
        # a regression. Picked as columns: a fleet's summary has a row per GPU and path.
        later = later[~((worse.notna() & (worse <= fail_below))
                        | (change.isna() & later["value"].notna()))]
        # The baseline's simulated figures among the headline ones (`later`'s figures).
        base = summary[summary["baseline"]]
        simulated = set(base.loc[base["backend"] == "simulated", "figure_id"].tolist())
        for row in later.to_dict("records"):
            change_pct = _num(row["change_pct"])
            found.append(Regression(
                str(row["run"]), describe(row), change_pct,
                row["backend"] == "simulated" or row["figure_id"] in simulated,
                why_missing(*runs[str(row["run"])], row) if change_pct is None else "",
                _higher(row["higher_is_better"], row["metric"]),
            ))
        return found


def why_missing(run: RunFolder, summary: pd.DataFrame,
                figure: pd.Series | dict[str, Any]) -> str:
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


def describe(row: pd.Series | dict[str, Any]) -> str:
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


def by_model(figures: pd.DataFrame) -> pd.DataFrame:
    """One figure per GPU (or CPU) model instead of per device: the median over the devices
    of that model — for fleets whose nodes differ between runs, or to compare models.
    Each group keeps its first member's other columns and the place of its first member;
    the median is statistics.median's (the middle of the sorted values, or the mean of the
    two middle ones)."""
    collapsed = figures.assign(device="median of " + figures["device_name"].map(str))
    group = _group_ids(collapsed)
    count = int(group.max()) + 1 if len(group) else 0
    first = np.full(count, len(group))
    np.minimum.at(first, group, np.arange(len(group)))
    out = collapsed.take(first).reset_index(drop=True)
    out["value"] = _group_median(group, figures["value"].to_numpy(dtype="float64"), count)
    out["cv"] = _group_median(group, figures["cv"].to_numpy(dtype="float64"), count)
    repeats = figures["repeats"].astype("Int64")
    known = repeats.notna().to_numpy()
    least = np.full(count, np.iinfo(np.int64).max)
    np.minimum.at(least, group[known], repeats[known].to_numpy(dtype="int64"))
    out["repeats"] = pd.array(least, dtype="Int64")
    out.loc[~np.isin(np.arange(count), group[known]), "repeats"] = pd.NA
    not_ok = np.zeros(count, dtype=bool)
    np.logical_or.at(not_ok, group, figures["status"].to_numpy(dtype=object) != "ok")
    out["status"] = np.where(not_ok, "invalid", "ok")
    return out


def _group_median(group: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """statistics.median of each group's values that are not NaN (NaN for a group with
    none): sorted stably, so of equal values (0.0 and -0.0) the same one is the middle."""
    known = ~np.isnan(values)
    group, values = group[known], values[known]
    order = np.lexsort((values, group))
    group, values = group[order], values[order]
    sizes = np.bincount(group, minlength=count)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.full(count, np.nan)
    has = sizes > 0
    middle = starts + sizes // 2
    odd = has & (sizes % 2 == 1)
    even = has & (sizes % 2 == 0)
    out[odd] = values[middle[odd]]
    with np.errstate(over="ignore"):
        out[even] = (values[middle[even] - 1] + values[middle[even]]) / 2
    return out


def _group_ids(figures: pd.DataFrame) -> np.ndarray:
    """Each figure's key as a number, in the order keys first appear (missing cells
    align with missing cells, as None did with None): groupby(KEY_COLUMNS, sort=False,
    dropna=False).ngroup(), made of each column's factorized codes, combined as digits of
    one number (renumbered where the next column's would overflow it), not a groupby over
    fourteen text columns."""
    return _key_ids(figures, KEY_COLUMNS)


def _key_ids(frame: pd.DataFrame, names: Sequence[str]) -> np.ndarray:
    """groupby(names, sort=False, dropna=False).ngroup() of `frame` (`_group_ids`)."""
    if frame.empty:
        return np.zeros(0, dtype=np.int64)
    key = np.zeros(len(frame), dtype=np.int64)
    top = 1  # key < top
    for name in names:
        codes, uniques = pd.factorize(frame[name], use_na_sentinel=False)
        width = max(len(uniques), 1)
        if top * width >= 2**62:
            key, distinct = pd.factorize(key)
            top = max(len(distinct), 1)
        key = key * width + np.asarray(codes, dtype=np.int64)
        top *= width
    return np.asarray(pd.factorize(key)[0], dtype=np.int64)


def _as_inferred(values: pd.Series) -> pd.Series:
    """A column as pandas infers it from a list of its cells (how the per-row records
    became a frame): text as `str`, with the rare all-missing column inferred cell by
    cell."""
    if values.dtype == "str" and values.notna().any():
        return values
    if values.notna().any() and all(isinstance(v, str) for v in values.dropna().unique()):
        return values.astype("str")
    cells = [None if v is pd.NA else v for v in values.astype(object).tolist()]
    return pd.DataFrame({"cells": cells})["cells"]


def compare_runs(runs: Sequence[RunFolder], by: str = "node") -> Comparison:
    """Align the figures of two or more runs; the first is the baseline. `by` = "node" keeps
    every device (fleet runs name theirs node:gpuN); "model" compares per device model.

    The aligned rows are made when first asked for (`Comparison.rows`, `_Alignment`): the
    terminal's headline figures of a fleet need only its summaries' figures
    (`Comparison.scope_rows`), not a row per measured row of each run."""
    if len(runs) < 2:
        raise BwprofError("compare needs at least two run folders; the first is the baseline")
    if by not in BY_CHOICES:
        raise BwprofError(f"--by must be one of {', '.join(BY_CHOICES)}, got {shorten(by)!r}")
    labels = run_labels(len(runs))
    summaries = [Run.of(run).summary for run in runs]
    states = [line for run, label in zip(runs, labels, strict=True)
              for line in [state_warning(run, f"run {label}", "figures it has not reached yet "
                                         "are absent" if run.running
                                         else "figures it did not reach are absent")] if line]
    notes = [f"run {label}: {one_line(note)}" for run, label in zip(runs, labels, strict=True)
             for note in run.notes]
    return Comparison(list(runs), labels, _Alignment(list(runs), labels, summaries, by),
                      machine_warnings(runs, labels) + same_run_warnings(runs, labels)
                      + states + notes, summaries, states)


@dataclass
class _Alignment:
    """The runs' figures aligned (`_aligned`), made when asked for: every figure
    (`rows`), or the headline figures alone (`summary_rows`), those exactly as the
    summary scope of `rows`, made of the summaries' figures."""

    runs: list[RunFolder]
    labels: list[str]
    summaries: list[pd.DataFrame]
    by: str

    def _collapse(self, figures: pd.DataFrame) -> pd.DataFrame:
        return by_model(figures) if self.by == "model" else figures

    def rows(self) -> pd.DataFrame:
        per_run = [self._collapse(_figures(run, summary))
                   for run, summary in zip(self.runs, self.summaries, strict=True)]
        return _aligned(self.runs, self.labels, per_run)

    def summary_rows(self) -> pd.DataFrame | None:
        """`rows()`'s rows of scope `summary`, without the runs' row figures; None where
        these alone cannot say the types `rows()` gives every column (a text column
        empty or not text here, results lacking one as text): ask `rows()`.

        They are the same rows: summary figures are numbered first, in the order their
        keys first appear, and no row figure shares a key (the scope is in it). Each
        column's type is the whole column's (`_typed`): a text column is `str` once any
        cell is text, so one here says it; page_bytes, missing on every summary row, is
        float64 where a row figure has a page size (as pandas infers None and ints)."""
        per_run = [self._collapse(_summary_figures(summary)) for summary in self.summaries]
        if not sum(len(figures) for figures in per_run) or not all(
                set(ROW_TEXT) <= set(run.results.columns)
                and all(run.results[name].dtype == "str" for name in ROW_TEXT)
                for run in self.runs):
            return None
        if not all(figures[name].dtype == "str" for figures in per_run
                   for name in _TEXT_KEYS):
            return None
        frame = _aligned(self.runs, self.labels, per_run,
                         page_float=any(_has_page_sizes(run.results) for run in self.runs))
        if not all(frame[name].dtype == "str" and frame[name].notna().any()
                   for name in _TEXT_COLUMNS):
            return None
        return frame


_TEXT_KEYS: tuple[str, ...] = ("scope", "path", *ROW_TEXT, "dtype")
_TEXT_COLUMNS: tuple[str, ...] = (*_TEXT_KEYS, "run", "run_dir", "run_id")


def _has_page_sizes(results: pd.DataFrame) -> bool:
    """Whether any row figure of these results has a page size (`_row_figures`'s rows)."""
    if "page_bytes" not in results.columns or not results["page_bytes"].notna().any():
        return False
    picked, _ = _row_picks(results, _floats(_column(results, "value_best")),
                           _floats(_column(results, "overlap_efficiency")))
    return bool(results["page_bytes"].notna().to_numpy(dtype=bool)[picked].any())


def _aligned(runs: Sequence[RunFolder], labels: Sequence[str], per_run: list[pd.DataFrame],
             page_float: bool | None = None) -> pd.DataFrame:
    """The comparison rows of the runs' figures (`per_run`, each run's FIGURE_COLUMNS).

    Columns throughout (issue 36: a fleet's million rows in seconds): the runs' figures are
    stacked, each key numbered in the order it first appears (a key a run holds twice keeps
    its first place and its last figure), and every comparison row is taken from them by
    index; change and noise are computed on the aligned columns. `page_float`: page_bytes
    as `_typed` says."""
    stacked = pd.concat(per_run, ignore_index=True)
    owner = np.repeat(np.arange(len(runs)), [len(f) for f in per_run])
    key = _group_ids(stacked)
    count = int(key.max()) + 1 if len(key) else 0
    # Summary figures first, then rows, each in the order the keys first appear.
    first = np.full(count, len(key))
    np.minimum.at(first, key, np.arange(len(key)))
    in_summary = stacked["scope"].to_numpy(dtype=object)[first] == "summary"
    figure_of_key = np.empty(count, dtype=np.int64)
    figure_of_key[np.argsort(~in_summary, kind="stable")] = np.arange(count)
    figure = figure_of_key[key]
    # where[r, f]: the stacked row of run r's figure f (its last, where it has two), or -1.
    where = np.full((len(runs), count), -1)
    where[owner, figure] = np.arange(len(key))  # later rows overwrite: the last one counts
    take = where.T.ravel()  # figure by figure, run by run
    mine = take >= 0
    base = np.repeat(where[0], len(runs))
    has_base = base >= 0
    rows_of_keys = np.repeat(first[np.argsort(figure_of_key)], len(runs))
    either = np.where(mine, take, base)  # the run's own figure, else the baseline's

    def text(name: str, rows: np.ndarray, missing: str | None = None) -> object:
        """Column `name` of the stacked figures at `rows` (-1: missing, or `missing`)."""
        column = stacked[name].astype("str") if missing is not None else stacked[name]
        if missing is not None:
            column = pd.concat([column, pd.Series([missing], dtype="str")], ignore_index=True)
            rows = np.where(rows >= 0, rows, len(stacked))
        return column.array.take(rows, allow_fill=True)

    def numbers(name: str, rows: np.ndarray) -> np.ndarray:
        """A numeric column of the stacked figures at `rows`, NaN where -1."""
        values = stacked[name].to_numpy(dtype="float64", na_value=np.nan)[rows]
        values[rows < 0] = np.nan
        return values

    index = np.tile(np.arange(len(runs)), count)
    columns: dict[str, object] = {"figure_id": np.repeat(np.arange(count), len(runs))}
    for name in KEY_COLUMNS:
        columns[name] = stacked[name].array.take(rows_of_keys)
    higher = stacked["higher_is_better"].to_numpy(dtype=bool)
    higher_known = pd.array(higher[either], dtype="boolean")
    higher_known[either < 0] = pd.NA
    value, base_value = numbers("value", take), numbers("value", base)
    cv = numbers("cv", take)
    repeats = numbers("repeats", take)
    columns.update(
        unit=text("unit", either), higher_is_better=higher_known,
        run=pd.array(labels, dtype="str").take(index),
        run_dir=pd.array([printable(str(run.path)) if run.path is not None else ""
                          for run in runs], dtype="str").take(index),
        run_id=pd.array([run.run_id for run in runs], dtype="str").take(index),
        baseline=index == 0, backend=text("backend", take),
        status=text("status", take, missing="absent"), value=value, cv=cv,
        repeats=stacked["repeats"].astype("Int64").array.take(take, allow_fill=True),
        baseline_value=base_value)
    # A zero, negative-zero or subnormal baseline (a damaged row): no change in %, shown
    # "—" as for a missing figure, never a ZeroDivisionError or infinity (as `ratio`).
    # A change past any double (a finite 1.8e308 figure against an ordinary one) is no
    # change in % either: "—", never inf.
    with np.errstate(all="ignore"):
        quotient = value / np.where(base_value == 0, 1.0, base_value)
        percent = 100 * (quotient - 1)
    changed = (index > 0) & has_base & mine & (base_value != 0) & np.isfinite(percent)
    change = np.where(changed, percent, np.nan)
    noise = np.full(len(index), np.nan)
    noise[changed] = _noise_column(numbers("cv", base)[changed],
                                   numbers("repeats", base)[changed], cv[changed],
                                   repeats[changed])
    beyond = pd.array(np.abs(change) > noise, dtype="boolean")
    beyond[~changed | np.isnan(noise)] = pd.NA
    columns.update(change_pct=change, noise_pct=noise, beyond_noise=beyond,
                   regressed_pct=np.where(changed & higher[np.maximum(base, 0)], -change,
                                          change),
                   schema_version=pd.array(np.full(len(index), SCHEMA_VERSION),
                                           dtype="Int64"))
    frame = pd.DataFrame(columns, copy=False)
    return _typed(frame, page_float)


def _typed(frame: pd.DataFrame, page_float: bool | None = None) -> pd.DataFrame:
    """The comparison's columns in their order and types: whole numbers Int64, figures
    float64, verdicts boolean, text `str`; the others (page_bytes) as pandas infers them
    from their cells, as it did from the per-row records. `page_float` (a part of the rows
    whose page_bytes are all missing): True, float64 NaN, as the whole column's inference
    gives them where other rows have page sizes; False, as this part alone infers them."""
    frame = frame[list(COMPARE_COLUMNS)].reset_index(drop=True)
    for column in ("figure_id", "size_bytes", "threads", "streams", "repeats", "schema_version"):
        if frame[column].dtype != "Int64":
            frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    for column in ("value", "cv", "baseline_value", "change_pct", "noise_pct", "regressed_pct"):
        if frame[column].dtype != "float64":
            frame[column] = pd.to_numeric(frame[column]).astype("float64")
    for column in ("beyond_noise", "higher_is_better"):
        if frame[column].dtype != "boolean":
            frame[column] = frame[column].astype("boolean")
    for column in ("scope", "path", "case", "device", "device_name", "memory", "direction",
                   "phase", "dtype", "metric", "unit", "run", "run_dir", "run_id", "backend",
                   "status", "page_bytes"):
        frame[column] = _as_inferred(frame[column])
    if page_float and frame["page_bytes"].isna().all():
        frame["page_bytes"] = np.full(len(frame), np.nan)
    return frame


DIGEST_WORST = 3
"""The most devices a fleet digest names as worst, per figure and run."""
DIGEST_KEYS: tuple[str, ...] = tuple(key for key in KEY_COLUMNS if key != "device")
"""What makes one figure of a fleet: its key but the device (each GPU's HBM triad at 256 MiB
is one figure measured on ten thousand GPUs)."""


def compare_digest(comparison: Comparison, scope: str = "summary") -> pd.DataFrame:
    """Each later run's figures of `scope` across the fleet's devices, one row per run and
    figure (DIGEST_KEYS, in the order of the comparison): how many devices align
    (`aligned`), how many have a change against the baseline (`compared`; simulated
    figures and missing ones have none), their `median_change` (%), how many changed
    beyond noise for the `worse` and the `better`, how many had no noise band
    (`noise_unknown`), how many are `simulated`, what the devices are (`on`: GPUs, hosts,
    pairs, boxes, devices), and the `worst` devices (at most DIGEST_WORST that got worse, worst
    first: device and change %). Columns only: a fleet's comparison has a row per device
    and figure."""
    frame = comparison.scope_rows(scope)
    baseline = frame["baseline"].to_numpy(dtype=bool)
    simulated_row = frame["backend"].eq("simulated").fillna(False).to_numpy(dtype=bool)
    figure = frame["figure_id"].to_numpy(dtype="int64", na_value=-1)
    base_simulated = np.zeros(int(figure.max()) + 2 if len(figure) else 1, dtype=bool)
    base_simulated[figure[baseline]] = simulated_row[baseline]
    later = frame[~baseline]
    simulated = simulated_row[~baseline] | base_simulated[figure[~baseline]]
    group = _key_ids(later, ["run", *DIGEST_KEYS])
    count = int(group.max()) + 1 if len(group) else 0
    change = later["change_pct"].to_numpy(dtype="float64", na_value=np.nan)
    regressed = later["regressed_pct"].to_numpy(dtype="float64", na_value=np.nan)
    beyond = later["beyond_noise"].astype("boolean")
    known = ~np.isnan(change) & ~simulated
    beyond_noise = known & beyond.fillna(False).to_numpy(dtype=bool)
    device = later["device"].fillna("").astype(str)
    kinds = {"hosts": later["backend"].eq("host").fillna(False).to_numpy(dtype=bool),
             "pairs": device.str.contains("->", regex=False).to_numpy(dtype=bool),
             "boxes": device.str.contains(r"(?:^|:)all$").to_numpy(dtype=bool)}
    first = np.full(count, len(group))
    np.minimum.at(first, group, np.arange(len(group)))
    out = later[["run", *DIGEST_KEYS, "unit", "higher_is_better"]].take(first).reset_index(
        drop=True)

    def counted(which: np.ndarray) -> np.ndarray:
        return np.bincount(group, weights=which, minlength=count).astype("int64")

    out["aligned"] = np.bincount(group, minlength=count).astype("int64")
    out["compared"] = counted(known)
    out["median_change"] = _group_median(group, np.where(known, change, np.nan), count)
    out["worse"] = counted(beyond_noise & (regressed > 0))
    out["better"] = counted(beyond_noise & (regressed < 0))
    out["noise_unknown"] = counted(known & beyond.isna().to_numpy(dtype=bool))
    out["simulated"] = counted(simulated)
    # What the devices are, as `bwprof report`'s digest says it: hosts where any figure is
    # the host's, pairs or boxes where all are, else GPUs.
    on = np.full(count, "GPUs", dtype=object)
    for kind in ("boxes", "pairs"):
        some = counted(kinds[kind])
        on[some > 0] = "devices"  # GPUs and boxes (h2d_all's rows are of both)
        on[some == out["aligned"].to_numpy()] = kind
    on[counted(kinds["hosts"]) > 0] = "hosts"
    out["on"] = on
    # The worst of each figure: those that got worse, most first (ties in table order).
    candidates = np.flatnonzero(known & (regressed > 0))
    order = candidates[np.lexsort((-regressed[candidates], group[candidates]))]
    ranked = group[order]
    starts = np.searchsorted(ranked, ranked, side="left")
    shown = order[np.arange(len(order)) - starts < DIGEST_WORST]
    worst: list[list[tuple[str, float]]] = [[] for _ in range(count)]
    for at, device, changed in zip(group[shown].tolist(),
                                   later["device"].to_numpy(dtype=object)[shown].tolist(),
                                   change[shown].tolist(), strict=True):
        worst[at].append((str(device), changed))
    out["worst"] = worst
    return out


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
    `comparison.state_warnings` on stderr (analysis never prints). The rows stay columns
    (`json_rows`), written a column at a time (`bwprof.render.jsontext`): a fleet's are
    millions of cells."""
    from dataclasses import asdict

    from bwprof.store.formats import json_rows

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
        "rows": [],
        "fail_below": fail_below,
        "regressions": [asdict(found) for found in regressions],
    }
    ready = cast(dict[str, object], json_ready(out))
    ready["rows"] = json_rows(comparison.rows)  # json_ready(json_records(rows)), by column
    return ready
