"""pandas views of result rows, with stable column order and dtypes."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

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


def read_results(path: Path) -> pd.DataFrame:
    """Load a results.csv written by bwprof; a file of another shape or schema version is a
    one-line error. Columns beyond the core ones (telemetry joins) are kept, after them."""
    try:
        frame = pd.read_csv(path, keep_default_na=True)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise BwprofError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    return checked_results(frame, path)


def check_schema_version(frame: pd.DataFrame, path: Path) -> None:
    """BwprofError when the table's schema_version column holds another version."""
    versions = set(pd.to_numeric(frame["schema_version"], errors="coerce").dropna().astype(int))
    if versions - {SCHEMA_VERSION}:
        raise BwprofError(
            f"{path} has schema version {sorted(versions)}, this bwprof reads "
            f"{SCHEMA_VERSION}; use the bwprof version that wrote it"
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
    unknown = sorted(set(typed["status"].dropna().astype(str)) - set(STATUSES))
    if unknown or typed["status"].isna().any():
        raise BwprofError(f"{path} is malformed: unknown status {', '.join(unknown) or '(empty)'}")
    return typed


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
