"""pandas views of result rows, with stable column order and dtypes."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bwprof.errors import BwprofError
from bwprof.report.schema import (
    CSV_COLUMNS,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    STATUSES,
    TELEMETRY_COLUMNS,
    ResultRow,
)

_INTEGER_COLUMNS = (
    "size_bytes", "threads", "streams", "numa_node", "repeats", "ops_per_sample",
    "bytes_per_rep", "schema_version",
)
_OPTIONAL_INTEGER_COLUMNS = ("rank",)
_FLOAT_COLUMNS = (
    "time_median_s", "time_min_s", "gbps_median", "gbps_best", "cv", "peak_gbps", "pct_of_peak",
    "overlap_efficiency",
)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    for column in TELEMETRY_COLUMNS:
        if column in frame.columns and column != "throttle_reasons":
            frame[column] = _numeric(frame[column], column, "float64")
    if "throttle_reasons" in frame.columns:
        frame["throttle_reasons"] = frame["throttle_reasons"].astype("string").fillna("").astype(
            str)
    for column in _INTEGER_COLUMNS:
        frame[column] = _numeric(frame[column], column, "Int64")
    for column in _OPTIONAL_INTEGER_COLUMNS:
        if column in frame.columns:
            frame[column] = _numeric(frame[column], column, "Int64")
    for column in _FLOAT_COLUMNS:
        frame[column] = _numeric(frame[column], column, "float64")
    for column in ("note", "device", "device_name", "phase"):
        frame[column] = frame[column].astype("string").fillna("").astype(str)
    return frame


def _numeric(values: pd.Series, column: str, dtype: str) -> pd.Series:
    """The column as numbers of `dtype`; a value that is not one (text, 1.5 in an integer
    column, an overflow) is a _Malformed error naming the column."""
    try:
        with warnings.catch_warnings():  # the failed cast also warns; the error says it all
            warnings.simplefilter("ignore", RuntimeWarning)
            return pd.to_numeric(values).astype(dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _Malformed(f"column {column}: {str(exc).splitlines()[0]}") from None


class _Malformed(ValueError):
    """A value of the wrong kind in a column; read_results turns it into a BwprofError."""


def results_frame(rows: Sequence[ResultRow]) -> pd.DataFrame:
    frame = pd.DataFrame([row.as_dict() for row in rows], columns=list(CSV_COLUMNS))
    return _typed(frame)


def read_run_csv(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """A CSV file bwprof wrote row by row, without a last line it did not finish. Every row
    ends with a newline, so a last line without one was cut off (the run was stopped while
    writing it) and may hold a number cut short: it is left out, and `notes` says so."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BwprofError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    if text and not text.endswith("\n"):
        complete, _, _cut = text.rpartition("\n")
        if complete:  # the header at least is whole
            text = complete + "\n"
            if notes is not None:
                notes.append(f"{path.name}: its last line was cut off (the run was stopped "
                              "while writing it) and is left out")
    try:
        return pd.read_csv(io.StringIO(text), keep_default_na=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise BwprofError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None


def read_results(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """Load a results.csv written by bwprof; a file of another shape or schema version is a
    one-line error. Columns beyond the core ones (telemetry joins) are kept, after them."""
    return checked_results(read_run_csv(path, notes), path)


def check_schema_version(frame: pd.DataFrame, path: Path) -> None:
    """BwprofError when the table's schema_version column holds another version."""
    versions = set(pd.to_numeric(frame["schema_version"], errors="coerce").dropna().astype(int))
    if versions - {SCHEMA_VERSION}:
        raise BwprofError(
            f"{path} has schema version {', '.join(map(str, sorted(versions)))}, this bwprof "
            f"reads {SCHEMA_VERSION}; use the bwprof version that wrote it"
        )


def checked_results(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """A results table read from any format, checked for columns, schema version and values."""
    missing = [c for c in RESULT_COLUMNS if c not in frame.columns]
    if missing:
        raise BwprofError(f"{path} is not a bwprof results file (missing {', '.join(missing)})")
    check_schema_version(frame, path)
    extra = [c for c in frame.columns if c not in RESULT_COLUMNS]
    try:
        typed = _typed(frame[[*RESULT_COLUMNS, *extra]].copy())
    except _Malformed as exc:
        raise BwprofError(f"{path} is malformed: {exc}") from None
    status = typed["status"]
    bad = status.isna() | ~status.astype("string").isin(list(STATUSES)).fillna(False)
    if bad.any():
        unknown = sorted(set(status[bad].dropna().astype(str)))
        raise BwprofError(f"{path} is malformed: unknown status "
                          f"{', '.join(unknown) or '(empty)'} {_where(bad, path)}")
    negative = [c for c in NONNEGATIVE_COLUMNS if (typed[c].fillna(0) < 0).any()]
    if negative:
        raise BwprofError(f"{path} is malformed: column {negative[0]} holds a negative value "
                          f"{_where(typed[negative[0]].fillna(0) < 0, path)}")
    infinite = [c for c in NONNEGATIVE_COLUMNS if typed[c].isin([np.inf]).any()]
    if infinite:
        raise BwprofError(f"{path} is malformed: column {infinite[0]} holds an infinite value "
                          f"{_where(typed[infinite[0]].isin([np.inf]), path)}")
    figureless = (status == "ok") & (typed["gbps_best"].isna() | typed["gbps_median"].isna())
    if figureless.any():
        raise BwprofError(f"{path} is malformed: an ok row without its figure (gbps_best, "
                          f"gbps_median) {_where(figureless, path)}")
    return typed


NONNEGATIVE_COLUMNS = (
    "size_bytes", "threads", "streams", "repeats", "ops_per_sample", "bytes_per_rep",
    "time_median_s", "time_min_s", "gbps_median", "gbps_best", "cv", "peak_gbps",
    "pct_of_peak", "overlap_efficiency",
)
"""Sizes, counts, times and rates: a negative one was not written by bwprof."""


def _where(mask: pd.Series, path: Path) -> str:
    """'in row 3' for the first row `mask` marks, with its line where the file is a CSV
    (the header is line 1)."""
    first = int(mask.to_numpy().nonzero()[0][0])
    line = f" (line {first + 2})" if path.suffix == ".csv" else ""
    return f"in row {first + 1}{line}"


def rows_from_frame(frame: pd.DataFrame) -> list[ResultRow]:
    """ResultRows from a results frame, with missing values as None; telemetry columns, where
    the file has them, become the rows' counters."""
    rows = []
    telemetry = [c for c in TELEMETRY_COLUMNS if c in frame.columns]
    optional = [c for c in _OPTIONAL_INTEGER_COLUMNS if c in frame.columns]
    for record in frame[[*RESULT_COLUMNS, *optional, *telemetry]].to_dict("records"):
        values = {k: (None if v is None or (not isinstance(v, str) and pd.isna(v)) else v)
                  for k, v in record.items()}
        values["counters"] = {c: values.pop(c) for c in telemetry}
        for key in optional:
            values[key] = None if values[key] is None else int(values[key])
        for key in ("note", "phase", "device", "device_name"):
            values[key] = values[key] or ""
        for key in _INTEGER_COLUMNS:
            values[key] = None if values[key] is None else int(values[key])
        for key in _FLOAT_COLUMNS:
            values[key] = None if values[key] is None else float(values[key])
        rows.append(ResultRow(**values))
    return rows
