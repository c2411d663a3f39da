"""results.csv as a table: result rows as a pandas frame with stable column order and
dtypes, and the reading of a saved table with every check it must pass (columns, schema
version, kinds and signs of values, metrics, flags), version 1 upgraded on the way. Part of
the data model: the report layer and the fleet merge both read tables through it."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import pandas as pd

from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.schema.cells import frame_from_spreadsheet
from bwprof.schema.flags import split_flags, unknown_flags
from bwprof.schema.metrics import METRICS
from bwprof.schema.reading import (
    MAX_TABLE_BYTES,
    MAX_TABLE_CELLS,
    MAX_TABLE_COLUMNS,
    gc_paused,
    read_text,
)
from bwprof.schema.rows import (
    ADDED_COLUMNS,
    CSV_COLUMNS,
    OPTIONAL_COLUMNS,
    READABLE_VERSIONS,
    RESULT_COLUMNS,
    STATUSES,
    TELEMETRY_COLUMNS,
    ResultRow,
    unreadable_version,
)
from bwprof.schema.text import shown
from bwprof.schema.upgrade import V1_RESULT_COLUMNS, upgrade_results_v1

_INTEGER_COLUMNS = (
    "size_bytes", "threads", "streams", "numa_node", "repeats", "ops_per_sample",
    "bytes_per_op", "schema_version",
)
_OPTIONAL_INTEGER_COLUMNS = ("rank", "page_bytes")
_FLOAT_COLUMNS = (
    "work_per_op", "time_median_s", "time_min_s", "value_median", "value_best", "gbps_median",
    "gbps_best", "cv", "peak_value", "peak_gbps", "pct_of_peak", "overlap_efficiency",
    "load_gbps", "copy_gbps_median", "copy_gbps_best", "host_others_pct", "host_steal_pct",
)
_TEXT_COLUMNS = ("case", "note", "device", "device_name", "phase", "metric", "unit", "flags",
                 "cache_level", "dtype")


_NUMERIC: dict[str, Literal["Int64", "float64"]] = {
    **{c: "float64" for c in TELEMETRY_COLUMNS if c != "throttle_reasons"},
    **{c: "Int64" for c in (*_INTEGER_COLUMNS, *_OPTIONAL_INTEGER_COLUMNS, "bytes_per_rep")},
    **{c: "float64" for c in _FLOAT_COLUMNS},
}
"""Each numeric column's dtype once typed (the rest: text, and higher_is_better boolean)."""
_TEXT_TYPED = ("throttle_reasons", *_TEXT_COLUMNS)
_TEXT = pd.Series([""]).astype("string").fillna("").astype(str).dtype
"""What a text column becomes once typed: Python strings (object) before pandas 3, its
`str` dtype from pandas 3 on."""

ResultDtype = Literal["Int64", "float64", "boolean", "string"]
RESULT_DTYPES: dict[str, ResultDtype] = {
    c: _NUMERIC.get(c, "boolean" if c == "higher_is_better" else "string") for c in CSV_COLUMNS}
"""Each column of results.csv (in file order) and the type reading it gives: `Int64`
(nullable integers: a skipped row's empty size stays an integer column), `float64` (empty as
NaN, even where every row is empty), `boolean` (nullable) or `string` (text). What
results.parquet holds (`typed_results`) and docs/columns.md states; the one type table."""


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Every known column present, as its type (a version-1 table lacks some). A column
    already of its type is left as it is: a version-1 table is typed twice on its way in
    (as read, and upgraded), and each conversion costs pandas' per-column overhead however
    few its rows."""
    dtypes = frame.dtypes.to_dict()  # one look: each frame[column] builds a Series
    for column, dtype in _NUMERIC.items():
        if column in dtypes and dtypes[column] != dtype:
            frame[column] = _numeric(frame[column], column, dtype)
    text = [c for c in _TEXT_TYPED if c in dtypes]
    complete = _complete_text(frame, [c for c in text if dtypes[c] == _TEXT])
    for column in text:
        if column not in complete:
            frame[column] = frame[column].astype("string").fillna("").astype(str)
    if "higher_is_better" in dtypes and dtypes["higher_is_better"] != "boolean":
        frame["higher_is_better"] = _boolean(frame["higher_is_better"])
    return frame


def _complete_text(frame: pd.DataFrame, columns: list[str]) -> set[str]:
    """Those of `columns` (each of the _TEXT dtype) that hold text in every cell: what a
    text column holds once typed."""
    if not columns:
        return set()
    if pd.api.types.is_object_dtype(_TEXT):
        return {c for c in columns
                if pd.api.types.infer_dtype(frame[c], skipna=False) in ("string", "empty")}
    missing = frame[columns].isna().any()  # one operation for every column
    return {c for c in columns if not missing[c]}


def _boolean(values: pd.Series) -> pd.Series:
    """True/False as written (or read back as text), missing as NA; anything else malformed."""
    words = {"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False}
    def one(value: object) -> object:
        if value is None or value is pd.NA or (isinstance(value, float) and value != value):
            return pd.NA
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        text = str(value).strip().lower()
        if text in words:
            return words[text]
        raise _Malformed(f"column higher_is_better: {value!r} is not True or False")
    if pd.api.types.is_bool_dtype(values.dtype):  # every cell True or False already
        return values.astype("boolean")
    # Each distinct value read once (a million rows hold two or three), then looked up.
    words_of = {value: one(value) for value in values.unique() if not is_missing(value)}
    return values.map(words_of).astype("boolean")


def is_missing(value: object) -> bool:
    """True for None, NaN and pd.NA (a cell with no value), never raising on other types."""
    try:
        return value is None or bool(pd.isna(cast(Any, value)))
    except (TypeError, ValueError):
        return False


def _numeric(values: pd.Series, column: str, dtype: Literal["Int64", "float64"]) -> pd.Series:
    """The column as numbers of `dtype`; a value that is not one (text, 1.5 in an integer
    column, an overflow) is a _Malformed error naming the column."""
    try:
        # The failed cast also warns (NumPy's 'invalid value encountered in cast'); the error
        # says it all. np.errstate, not warnings.catch_warnings: this runs in two threads at
        # once (compare's loads, results.parquet beside the judging), and catch_warnings'
        # save and restore of the process-wide filters, interleaved, left 'ignore
        # RuntimeWarning' installed for good.
        with np.errstate(all="ignore"):
            if pd.api.types.is_numeric_dtype(values.dtype):
                return values.astype(dtype)  # numbers already: to_numeric would change nothing
            return pd.to_numeric(values).astype(dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        row = _not_int64(values) if dtype == "Int64" else None
        if row is not None:  # pandas' words name no cell ("cannot safely cast", "C long")
            raise _Malformed(f"column {column} holds {shorten(str(values.iloc[row]))}, not a "
                             f"whole number of at most {INT64_MAX}", row) from None
        raise _Malformed(f"column {column}: {str(exc).splitlines()[0]}") from None


INT64_MAX = 2**63 - 1
"""The largest integer an Int64 column holds: a size of 2**63 bytes or more was not written by
bwprof (no memory is that large), and the folder is refused naming the cell."""


def _not_int64(values: pd.Series) -> int | None:
    """The position of the first cell of `values` that is present but no whole number an
    Int64 column can hold (2**63 or more, -2**63 or less, 1.5, text); None where every one is.
    Only where the typing failed: one Python call a cell."""
    for row, cell in enumerate(values.tolist()):
        if is_missing(cell) or (isinstance(cell, str) and not cell.strip()):
            continue
        try:
            whole = _whole(cell)
        except (ValueError, TypeError, OverflowError):
            return row
        if whole is None or not -INT64_MAX - 1 <= whole <= INT64_MAX:
            return row
    return None


def _whole(cell: object) -> int | None:
    """A cell as the whole number it holds, exactly ('9223372036854775807' is no float);
    None for a fraction. Raises for what is no number."""
    if isinstance(cell, (int, np.integer)):
        return int(cell)
    try:
        return int(str(cell).strip())
    except ValueError:
        number = float(cell)  # type: ignore[arg-type]
        return int(number) if number.is_integer() else None


def typed_results(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of a results frame with every column as its RESULT_DTYPES type whatever its
    cells hold, for a typed file (results.parquet): a frame from `results_frame` or
    `read_results` is typed already, one made some other way (a column every row left empty,
    as objects) is not. Text columns bwprof always fills (`run_id`, `case`, `status`, ...)
    keep a missing cell missing; BwprofError where a value is not of its column's type.
    Columns already of their type are shared with `frame`, not duplicated, where pandas
    copies on write (`_copy_on_write`): writing either frame never changes the other."""
    try:
        typed = _typed(frame.copy(deep=not _copy_on_write()))
    except _Malformed as exc:
        raise BwprofError(f"results are malformed: {exc}") from None
    for column in typed.columns:
        if (RESULT_DTYPES.get(str(column)) == "string"
                and not pd.api.types.is_string_dtype(typed[column])):
            typed[column] = typed[column].astype("string").astype(_TEXT)
    return typed


def _copy_on_write() -> bool:
    """Whether pandas copies a frame's data only when it is written (always from pandas 3,
    by option before): a shallow copy then is still a copy, and `typed_results` need not
    duplicate a million rows' columns (seconds of page faults) to type the few that need
    it. Without it a column set on a shallow copy could write into the caller's frame."""
    if int(pd.__version__.split(".", 1)[0]) >= 3:
        return True
    try:
        return pd.get_option("mode.copy_on_write") is True
    except KeyError:  # pd.errors.OptionError (a KeyError): a pandas without the option
        return False


class _Malformed(ValueError):
    """A value of the wrong kind in a column; read_results turns it into a BwprofError,
    naming the row where `row` (its position, from 0) is known."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


def results_frame(rows: Sequence[ResultRow]) -> pd.DataFrame:
    """The rows as a typed frame, each column made as its dtype from the start (typing a
    frame of Python objects afterwards cost two pandas operations a column)."""
    records = [row.as_dict() for row in rows]
    columns = {c: _column([record[c] for record in records], c) for c in CSV_COLUMNS}
    return _typed(pd.DataFrame(columns, columns=list(CSV_COLUMNS)))


def _column(values: list[object], column: str) -> Any:
    """One column of ResultRow values (None where missing) as its typed array."""
    array = cast(Any, pd.array)  # the stubs know no extension dtype given by its name
    if column in _NUMERIC:
        return array(values, dtype=_NUMERIC[column])
    if column in _TEXT_TYPED:
        return array(["" if value is None else str(value) for value in values], dtype=_TEXT)
    if column == "higher_is_better":
        return array(values, dtype="boolean")
    return values if values else np.array([], dtype=object)  # inferred, as from records


class EmptyTable(BwprofError):
    """A CSV file with no header to read: 0 bytes, blank, or a header cut off by a run
    stopped while writing it. `why` says which, for a note."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{shown(path)} {why}")
        self.why = why


def _without_last_record(text: str, columns: int) -> str | None:
    """`text` up to the end of the record before its last one, or None where there is no
    such end (the header is all there is) or the last record is not one row cut short: one
    of more fields than the header's `columns` was not cut, and a line of it after its first
    that holds a whole row's fields says that a quote opened earlier (a damaged file, not a
    torn row), so that leaving it out would lose rows. A newline ends a record only where
    the quotes before it are balanced: inside a quoted cell every quote is doubled, so a
    newline there follows an odd number of them."""
    end = text.rfind("\n", 0, len(text) - 1)
    quotes = text.count('"', 0, end) if end >= 0 else 0
    while end >= 0 and quotes % 2:
        before = text.rfind("\n", 0, end)
        quotes -= text.count('"', before + 1, end)
        end = before
    if end < 0:
        return None
    last = text[end + 1:]
    if any(len(next(csv.reader([line]), [])) >= columns for line in last.split("\n")[1:]):
        return None
    if any(len(record) > columns for record in csv.reader(io.StringIO(last))):
        return None
    return text[:end + 1]


def _parsed(text: str, path: Path) -> pd.DataFrame:
    """`text` parsed as CSV; pandas' own errors (ParserError and the like) go on to the
    caller, which may retry. Parsed from its UTF-8 bytes: pandas' parser reads bytes
    directly, where text it re-encodes chunk by chunk (three times the CPU: seconds for a
    fleet's million rows); the same frame, the same errors."""
    return pd.read_csv(io.BytesIO(text.encode("utf-8")), encoding="utf-8",
                       keep_default_na=True, low_memory=False)


_PANDAS_ERRORS = (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError, OverflowError)


def read_run_csv(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """A CSV file bwprof wrote row by row, read with bounded effort (`bwprof.schema.reading`:
    a regular UTF-8 file within MAX_TABLE_BYTES, columns and cells bounded), without a last
    row it did not finish. Every row ends with a newline, so a last line without one was cut
    off (the run was stopped while writing it) and may hold a number cut short: it is left
    out, and `notes` says so. An older bwprof wrote a note's line breaks as they were, so a
    row cut off inside such a note leaves a quoted cell open that pandas cannot parse: the
    table is then read again without its last record, with the same note, rather than
    refused (one torn row must not cost the rows before it). Text cells that the writer
    escaped for spreadsheets (`bwprof.schema.cells`) come back exactly as they were.
    EmptyTable where no header is left; BwprofError naming the file for anything else."""
    text = read_text(path, MAX_TABLE_BYTES)
    if not text.strip():
        raise EmptyTable(path, "is empty (0 bytes)" if not text else "holds only blank lines")
    cut = not text.endswith("\n")
    if cut:
        complete, _, _cut = text.rpartition("\n")
        if not complete.strip():
            raise EmptyTable(path, "holds only a header cut off while it was written")
        text = complete + "\n"
    header = text[:text.find("\n")]
    columns = header.count(",") + 1  # at least the columns pandas will make of it
    if columns > MAX_TABLE_COLUMNS:
        raise BwprofError(f"{shown(path)} has {columns} columns, more than bwprof reads "
                          f"({MAX_TABLE_COLUMNS}); it is not a table bwprof wrote")
    cells = columns * text.count("\n")
    if cells > MAX_TABLE_CELLS:
        raise BwprofError(f"{shown(path)} has {cells:,} cells, more than bwprof reads "
                          f"({MAX_TABLE_CELLS:,}); it is not a table bwprof wrote")
    try:
        frame = _parsed(text, path)
    except _PANDAS_ERRORS as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        shorter = _without_last_record(text, columns)
        if shorter is None:
            raise BwprofError(f"cannot read {shown(path)}: {why}") from None
        try:
            frame = _parsed(shorter, path)
        except _PANDAS_ERRORS:
            raise BwprofError(f"cannot read {shown(path)}: {why}") from None
        cut = True
    if cut and notes is not None:
        notes.append(f"{path.name}: its last line was cut off (the run was stopped "
                     "while writing it) and is left out")
    if not isinstance(frame.index, pd.RangeIndex):  # pandas made the extra fields an index
        raise BwprofError(f"cannot read {shown(path)}: line 2 has more fields than the header "
                          "names")
    return frame_from_spreadsheet(frame)


def read_results(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """Load a results.csv written by bwprof; a file of another shape or schema version is a
    one-line error. Columns beyond the core ones (telemetry joins) are kept, after them.

    A results.csv without a header (0 bytes, or a header cut off: the disk filled, or the
    run was killed, before its first row) is a run with no rows, as a header alone is, and
    `notes` says why: `report` and `compare` then show an empty run, which is what it is,
    beside the state of the run (`bwprof.store.runfolder`)."""
    try:
        frame = read_run_csv(path, notes)
    except EmptyTable as exc:
        if notes is not None:
            notes.append(f"{path.name} {exc.why}: the run wrote no rows to show")
        frame = pd.DataFrame(columns=list(CSV_COLUMNS))
    return checked_results(frame, path)


def schema_versions(frame: pd.DataFrame, path: Path) -> set[int]:
    """The versions in the table's schema_version column; BwprofError for one this bwprof
    cannot read, or for a table that mixes versions."""
    if "schema_version" not in frame.columns:
        return set()
    # Each distinct cell once (a million rows hold one), then as numbers: what the column
    # as numbers holds, without converting a million cells.
    distinct = pd.Series(frame["schema_version"].unique())
    numbers = pd.to_numeric(distinct, errors="coerce").dropna().astype("float64")
    # Not a whole number of 64 bits ('inf', '1.5', '1e300'): no version; typing the column
    # names the cell (int() of such numbers raised, or wrapped around to -2**63).
    versions = {int(n) for n in numbers.unique()  # each distinct number once, not each row
                if math.isfinite(n) and n.is_integer() and abs(n) < 2**63}
    unreadable = versions - set(READABLE_VERSIONS)
    if unreadable:
        raise BwprofError(unreadable_version(path, ", ".join(map(str, sorted(unreadable)))))
    if len(versions) > 1:
        raise BwprofError(f"{path} is malformed: it mixes schema versions "
                          f"{', '.join(map(str, sorted(versions)))}")
    return versions


def check_schema_version(frame: pd.DataFrame, path: Path) -> None:
    """BwprofError when the table's schema_version column holds a version this bwprof does
    not read."""
    schema_versions(frame, path)


def checked_results(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """A results table read from any format, checked for columns, schema version and values;
    a version-1 table is checked as written (errors name its own columns), then comes back
    as version 2 (`bwprof.schema.upgrade`)."""
    versions = schema_versions(frame, path)
    v1 = versions == {1} or (not versions and "bytes_per_rep" in frame.columns)
    required = V1_RESULT_COLUMNS if v1 else RESULT_COLUMNS
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise BwprofError(f"{path} is not a bwprof results file (missing {', '.join(missing)})")
    extra = [c for c in frame.columns if c not in required]
    try:
        typed = _typed(frame[[*required, *extra]])  # a new frame: the caller's is never changed
    except _Malformed as exc:
        where = f" {_at(exc.row, path)}" if exc.row is not None else ""
        raise BwprofError(f"{path} is malformed: {exc}{where}") from None
    _check_values(typed, path, ("gbps_best", "gbps_median") if v1
                  else ("value_best", "value_median"))
    if v1:
        upgraded = upgrade_results_v1(typed)
        others = [c for c in upgraded.columns if c not in RESULT_COLUMNS]
        typed = _typed(upgraded[[*RESULT_COLUMNS, *others]])
    _check_metrics(typed, path)
    return _gbps_from_values(_with_added_columns(typed))


def _with_added_columns(typed: pd.DataFrame) -> pd.DataFrame:
    """The columns version 2 gained later (`ADDED_COLUMNS`), empty where the file predates
    them, so every reader sees one layout."""
    for column in ADDED_COLUMNS:
        if column not in typed.columns:  # made as its dtype: the rest is typed already
            typed[column] = _column([None] * len(typed), column)
    return typed


def _gbps_from_values(typed: pd.DataFrame) -> pd.DataFrame:
    """A bandwidth row's GB/s columns as its value columns say: version 2's figure is the
    value, so a table written by another tool, or edited, that fills only `value_*` (or
    holds GB/s that disagree) reads the same everywhere the report looks."""
    bandwidth = typed["metric"] == "bandwidth"
    for value, gbps in (("value_best", "gbps_best"), ("value_median", "gbps_median"),
                        ("peak_value", "peak_gbps")):
        if _differ(typed[gbps], typed[value], bandwidth):
            typed[gbps] = typed[gbps].where(~bandwidth, typed[value])
    return typed


def _differ(gbps: pd.Series, value: pd.Series, bandwidth: pd.Series) -> bool:
    """Whether a `bandwidth` row's `gbps` cell is not `value`'s, bit for bit (-0.0 and 0.0,
    and NaNs of other payloads, differ): where none does, the column is kept as it is,
    not written again (a fleet's three columns were 24 MB of new memory for the same
    values). True where either column is not float64, which is then written as ever."""
    if gbps.dtype != np.float64 or value.dtype != np.float64:
        return True
    old, new = gbps.to_numpy().view(np.int64), value.to_numpy().view(np.int64)
    rows = bandwidth.to_numpy(dtype=bool, na_value=False)
    return bool((rows & (old != new)).any())


def _check_values(typed: pd.DataFrame, path: Path, figure: tuple[str, str]) -> None:
    """Known statuses; no negative or infinite size, time or rate; every ok row has its
    figure (the `figure` columns: best and median). Each check is numpy on a column, or on
    a column's distinct cells: a frame-wide array of every such column cost a fleet's
    million rows a second."""
    status = typed["status"]
    bad = _unknown_statuses(status)
    if bad.any():
        unknown = sorted(set(status[bad].dropna().astype(str)))
        raise BwprofError(f"{path} is malformed: unknown status "
                          f"{', '.join(unknown) or '(empty)'} {_where(bad, path)}")
    present = [c for c in (*NONNEGATIVE_COLUMNS, "bytes_per_rep") if c in typed.columns]
    # A missing cell counts as 0, which is neither: NaN compares False as 0 does. The first
    # column in `present` with a negative cell, then with an infinite one, is named.
    for what, bad_of in (("a negative", _negative_cells), ("an infinite", _infinite_cells)):
        for column in present:
            bad_cells = bad_of(typed[column])
            if bad_cells is not None and bad_cells.any():
                raise BwprofError(f"{path} is malformed: column {column} holds {what} value "
                                  f"{_at(int(bad_cells.nonzero()[0][0]), path)}")
    best, median = figure
    figureless = (status == "ok") & (typed[best].isna() | typed[median].isna())
    if figureless.any():
        raise BwprofError(f"{path} is malformed: an ok row without its figure ({best}, "
                          f"{median}) {_where(figureless, path)}")


def _unknown_statuses(status: pd.Series) -> pd.Series:
    """Which cells of `status` are no known status (a missing one neither), each distinct
    cell looked at once, as `astype("string")` spells it."""
    try:
        codes, distinct = _distinct(status)
    except TypeError:  # cells that cannot be told apart by hashing: each one as text
        return status.isna() | ~status.astype("string").isin(list(STATUSES)).fillna(False)
    spelled = pd.Series(distinct, dtype=object).astype("string")  # b"ok" reads as ok
    bad = (spelled.isna() | ~spelled.isin(list(STATUSES)).fillna(False)).to_numpy(dtype=bool)
    return pd.Series(bad[codes], index=status.index)


def _negative_cells(values: pd.Series) -> np.ndarray:
    """Which cells of a numeric column are below 0 (a missing one is not). An Int64 column
    is compared as it is: made float64 first, as other kinds are, a fleet's seven integer
    columns cost 56 MB of new memory and a tenth of a second, for the same answer."""
    if isinstance(values.dtype, pd.Int64Dtype):
        return cast(np.ndarray, (values < 0).to_numpy(dtype=bool, na_value=False))
    return cast(np.ndarray, _as_floats(values) < 0)


def _infinite_cells(values: pd.Series) -> np.ndarray | None:
    """Which cells of a numeric column are +inf; None for an integer column, which holds
    none (its largest value is a finite float)."""
    if pd.api.types.is_integer_dtype(values.dtype):
        return None
    return cast(np.ndarray, np.isposinf(_as_floats(values)))


def _as_floats(values: pd.Series) -> np.ndarray:
    """A numeric column as float64, missing as NaN: a float64 column as it is (no copy),
    any other (Int64, from a CSV) converted, missing as 0."""
    if values.dtype == np.float64:
        return cast(np.ndarray, values.to_numpy())
    return values.to_numpy(dtype="float64", na_value=0.0)


def _distinct(values: pd.Series) -> tuple[np.ndarray, list[Any]]:
    """A column as codes into its distinct cells (a missing cell one of them): what a check
    asks of a cell it asks of each distinct one (a million rows hold a few dozen)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes, list(uniques)


def _check_metrics(typed: pd.DataFrame, path: Path) -> None:
    """Every measured row names a known metric with its own unit and direction; every flag
    is one of the vocabulary. Each check is numpy over codes of a column's distinct cells
    (a loop over the rows, or pandas' `map` of a text column, cost seconds a million
    rows), and the first row it finds is the one named, as checked row by row: every row
    for the first check, then for the next."""
    status, metric, unit, higher, flag_cells = (
        typed[c] for c in ("status", "metric", "unit", "higher_is_better", "flags"))
    codes, names = _distinct(metric)
    metrics = [METRICS.get(name) if isinstance(name, str) else None for name in names]
    known = np.array([m is not None for m in metrics], dtype=bool)[codes]
    unknown = status.isin(["ok", "invalid"]).to_numpy(dtype=bool, na_value=False) & ~known
    if unknown.any():
        row = _first(unknown)
        name = metric.iloc[row]
        raise BwprofError(f"{path} is malformed: unknown metric {name or '(empty)'!r} "
                          f"{_at(row, path)}; known: {', '.join(METRICS)}")
    unit_codes, units = _distinct(unit)
    code_of_unit = {value: code for code, value in enumerate(units) if isinstance(value, str)}
    own_unit = np.array([code_of_unit.get(m.unit, -1) if m is not None else -1
                         for m in metrics], dtype=np.int64)[codes]
    wrong_unit = known & (unit_codes != own_unit)
    if wrong_unit.any():
        row = _first(wrong_unit)
        name = metric.iloc[row]
        raise BwprofError(f"{path} is malformed: unit {unit.iloc[row]!r} for metric {name!r} "
                          f"(it is {METRICS[name].unit!r}) {_at(row, path)}")
    own_direction = np.array([bool(m is not None and m.higher_is_better) for m in metrics],
                             dtype=bool)[codes]
    said = higher.astype("boolean")
    contradicts = known & (said.isna().to_numpy()
                           | (said.to_numpy(dtype=bool, na_value=False) != own_direction))
    if contradicts.any():
        raise BwprofError(f"{path} is malformed: higher_is_better contradicts the metric "
                          f"{_at(_first(contradicts), path)}")
    odd = {cell for cell in flag_cells.unique() if unknown_flags(cell)}  # a few distinct cells
    if odd:
        row = _first(flag_cells.isin(list(odd)))
        raise BwprofError(f"{path} is malformed: unknown flag(s) "
                          f"{', '.join(unknown_flags(flag_cells.iloc[row]))} {_at(row, path)}")


def _first(mask: pd.Series | np.ndarray) -> int:
    """The position (from 0) of the first row `mask` marks."""
    marks = mask if isinstance(mask, np.ndarray) else mask.to_numpy(dtype=bool, na_value=False)
    return int(marks.nonzero()[0][0])


NONNEGATIVE_COLUMNS = (
    "size_bytes", "threads", "streams", "repeats", "ops_per_sample", "bytes_per_op",
    "work_per_op", "time_median_s", "time_min_s", "value_median", "value_best", "gbps_median",
    "gbps_best", "cv", "peak_value", "peak_gbps", "pct_of_peak", "overlap_efficiency",
    "page_bytes", "load_gbps", "copy_gbps_median", "copy_gbps_best", "host_others_pct",
    "host_steal_pct",
)
"""Sizes, counts, times, rates and shares: a negative one was not written by bwprof."""


def _where(mask: pd.Series, path: Path) -> str:
    """'in row 3' for the first row `mask` marks, with its line where the file is a CSV
    (the header is line 1)."""
    return _at(int(mask.to_numpy().nonzero()[0][0]), path)


def _at(row: int, path: Path) -> str:
    """'in row 3' for the row at position `row` (from 0), with its line in a CSV."""
    line = f" (line {row + 2})" if path.suffix == ".csv" else ""
    return f"in row {row + 1}{line}"


def rows_from_frame(frame: pd.DataFrame) -> list[ResultRow]:
    """ResultRows from a results frame, with missing values as None; telemetry columns, where
    the file has them, become the rows' counters. Each column is made Python values once, as
    arrays (missing as None, text's missing as '', numbers as int or float, flags parsed and
    checked once per distinct cell), and what `ResultRow.__post_init__` does to a row (a
    bandwidth row's `value_*` and `gbps_*` fill each other) is done a column at a time; each
    row is then its fields set at once (`_row_maker`): a Python call per cell, or a
    dataclass `__init__` of fifty arguments a row, cost a fleet's report seconds."""
    telemetry = [c for c in TELEMETRY_COLUMNS if c in frame.columns]
    optional = [c for c in OPTIONAL_COLUMNS if c in frame.columns]
    names = [*RESULT_COLUMNS, *optional]
    with gc_paused():
        columns = {c: _row_cells(frame[c], c) for c in names}
        _fill_bandwidth(columns)
        counters = [_row_cells(frame[c], c) for c in telemetry]
        counted = (list(map(dict, map(zip, repeat(telemetry), zip(*counters, strict=True))))
                   if counters else [{} for _ in range(len(frame))])
        return _row_maker(columns, counted)


_ROW_TEXTS = ("note", "phase", "device", "device_name", "metric", "unit", "cache_level")


def _row_cells(values: pd.Series, column: str) -> list[Any]:
    """A column's cells as a ResultRow holds them."""
    if column in _FLOAT_COLUMNS and values.dtype == np.float64:
        floats = values.to_numpy()
        cells = floats.astype(object)  # Python floats
        cells[np.isnan(floats)] = None
        return cast(list[Any], cells.tolist())
    cells = cast(Any, values).to_numpy(dtype=object, na_value=None).tolist()
    if column in _ROW_TEXTS:
        return [value or "" for value in cells]
    if column == "flags":
        parsed = {value: _checked_flags(value) for value in set(cells)}
        return [parsed[value] for value in cells]
    if column == "higher_is_better":
        return [None if value is None else bool(value) for value in cells]
    if column in _INTEGER_COLUMNS or column in _OPTIONAL_INTEGER_COLUMNS:
        return [None if value is None else int(value) for value in cells]
    if column in _FLOAT_COLUMNS:
        return [None if value is None else float(value) for value in cells]
    return cast(list[Any], cells)


def row_codes(values: pd.Series, column: str) -> tuple[np.ndarray, list[Any]]:
    """A column as each row's code into its distinct cells, each cell as a ResultRow holds
    it (`_row_cells`: missing text as '', numbers as int or float, missing as None), one
    code per distinct held cell: grouping or comparing rows on the codes is what doing so
    on ResultRows' fields gives, without a ResultRow (or a Python value) a row. The column
    is read once (pandas' factorize); only its distinct cells become Python values."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    cells = _row_cells(pd.Series(uniques, dtype=values.dtype), column)
    held: dict[Any, int] = {}  # '' and a missing text cell hold the same ''
    own = np.array([held.setdefault(cell, len(held)) for cell in cells], dtype=np.intp)
    return own[np.asarray(codes)], list(held)


def each_distinct(codes: np.ndarray, cells: Sequence[Any],
                  test: Callable[[Any], bool]) -> np.ndarray:
    """`test` of every row's cell, as booleans, called once per distinct cell (`cells`,
    which each row's code in `codes` indexes): a fleet's million rows hold a few thousand
    devices and a handful of flag sets, and a text column's own comparisons cost seconds."""
    return np.array([bool(test(cell)) for cell in cells], dtype=bool)[codes]


def each_cell(values: pd.Series, test: Callable[[Any], bool]) -> np.ndarray:
    """`each_distinct` of a column as pandas holds it (its distinct cells as Python
    values, missing ones included)."""
    codes, cells = pd.factorize(values, use_na_sentinel=False)
    return each_distinct(np.asarray(codes), cells.tolist(), test)


def row_floats(values: pd.Series, column: str) -> np.ndarray:
    """A number column as a ResultRow's field holds it (`_row_cells`), as floats: NaN
    where the row holds None."""
    if values.dtype == np.float64:
        return cast(np.ndarray, values.to_numpy())
    if pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(
            values.dtype):
        return cast(np.ndarray, values.to_numpy(dtype="float64", na_value=np.nan))
    return np.array([np.nan if cell is None else cell for cell in _row_cells(values, column)],
                    dtype="float64")


def _checked_flags(cell: object) -> frozenset[str]:
    """A flags cell's flags, refused as ResultRow refuses an unknown one (ValueError)."""
    from bwprof.schema.flags import join_flags

    flags = split_flags(cell)
    join_flags(flags)
    return flags


def _fill_bandwidth(columns: dict[str, list[Any]]) -> None:
    """`ResultRow.__post_init__` on whole columns: a bandwidth row carries its figures as
    `value_*`/`peak_value` and as `gbps_*`/`peak_gbps`; whichever is given fills the other."""
    from bwprof.schema.metrics import BANDWIDTH

    metric = columns.get("metric")
    if metric is None:  # no metric column: every row is of the default metric, bandwidth
        rows = len(next(iter(columns.values()), []))
        bandwidth = list(range(rows)) if ResultRow.metric == BANDWIDTH.name else []
    else:
        bandwidth = [i for i, name in enumerate(metric) if name == BANDWIDTH.name]
    for value, gbps in (("value_median", "gbps_median"), ("value_best", "gbps_best"),
                        ("peak_value", "peak_gbps")):
        values, rates = columns.get(value), columns.get(gbps)
        if values is None or rates is None:
            continue
        for i in bandwidth:
            if values[i] is None and rates[i] is not None:
                values[i] = rates[i]
            elif rates[i] is None and values[i] is not None:
                rates[i] = values[i]


def _row_maker(columns: dict[str, list[Any]],
               counters: list[dict[str, object]]) -> list[ResultRow]:
    """The ResultRows of `columns` (each a field's values, `__post_init__`'s work done), each
    made by setting its fields at once: what `ResultRow(**fields)` makes, a field the frame
    lacks at its default, without a dataclass `__init__` call a row."""
    from collections.abc import Iterable
    from dataclasses import MISSING, fields

    names: list[str] = []
    cells: list[Iterable[Any]] = []
    for one in fields(ResultRow):
        names.append(one.name)
        if one.name == "counters":
            cells.append(counters)
        elif one.name in columns:
            cells.append(columns[one.name])
        elif one.default is not MISSING:
            cells.append(repeat(one.default))
        elif one.default_factory is not MISSING:
            cells.append(one.default_factory() for _ in counters)
        else:
            raise TypeError(f"ResultRow needs {one.name}, which the frame lacks")
    new, setattr_, rows = object.__new__, object.__setattr__, []
    for values in map(dict, map(zip, repeat(names), zip(*cells, strict=False))):
        row = new(ResultRow)
        setattr_(row, "__dict__", values)  # frozen: its own __setattr__ refuses
        rows.append(row)
    return rows
