"""Output formats of the report tables: CSV always (the primary format); Parquet for the
results by default (`results.parquet`, typed for pandas and DuckDB) and for the other tables
on request (`--format parquet`).

pyarrow is a dependency; an install that lacks it all the same refuses `--format parquet` in
one line before anything is measured or written. Every table carries a `schema_version`
column, whatever its format.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pandas as pd

from bwprof.coerce import integer, number, shorten
from bwprof.errors import BwprofError
from bwprof.schema import textbytes
from bwprof.schema.table import ResultDtype, is_missing
from bwprof.store.atomic import atomic_file

__all__ = ["cell_float", "cell_int", "is_missing", "json_records", "json_table", "plain",
           "row_at"]

FORMATS: tuple[str, ...] = ("csv", "parquet")


def check_format(name: str) -> bool:
    """True when Parquet copies are wanted; BwprofError for an unknown format or no pyarrow."""
    if name not in FORMATS:
        raise BwprofError(f"unknown --format {shorten(name)!r}; choose one of: "
                          f"{', '.join(FORMATS)}")
    if name == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise BwprofError(
                "--format parquet needs pyarrow: python3 -m pip install pyarrow"
            ) from None
    return name == "parquet"


def write_parquet(frame: pd.DataFrame, target: Path,
                  dtypes: Mapping[str, ResultDtype] | None = None,
                  metadata: Mapping[bytes, bytes] | None = None) -> Path:
    """A table as a whole Parquet file (a temporary file renamed over the target), carrying
    in its metadata what each of its columns means (`bwprof.schema.columns`), so the file
    explains itself wherever it is copied. Columns named in `dtypes` are stored as that
    type whatever pandas holds (an all-empty column is still a double, never a null or text
    column DuckDB cannot average); the others as pandas infers them. `metadata`: more
    key-value pairs for the file's schema metadata."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bwprof.schema.columns import PARQUET_METADATA_KEY, meanings_of

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if dtypes:
        table = table.cast(_with_types(table.schema, dtypes))
    meanings = json.dumps(meanings_of(str(c) for c in frame.columns)).encode()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           PARQUET_METADATA_KEY: meanings, **(metadata or {})})
    with atomic_file(target, binary=True) as handle:
        pq.write_table(table, handle)
    return target


def _with_types(schema: Any, dtypes: Mapping[str, ResultDtype]) -> Any:
    """`schema` with each column named in `dtypes` given that type's Arrow type."""
    import pyarrow as pa

    arrow = {"Int64": pa.int64(), "float64": pa.float64(), "boolean": pa.bool_(),
             "string": pa.string()}
    for index, name in enumerate(schema.names):
        if name in dtypes:
            schema = schema.set(index, pa.field(name, arrow[dtypes[name]]))
    return schema


def cell_float(value: object) -> float | None:
    """A table cell as a float, None where it holds no value (pandas' NA too)."""
    if type(value) is float:  # the common cell, told apart without pandas (a fleet's millions)
        return None if value != value else value
    if type(value) is int:  # an Int64 cell (a size): no pd.isna call (a microsecond each)
        return float(value)
    return None if is_missing(value) else number(value)


def cell_int(value: object) -> int | None:
    """A table cell as an int, None where it holds no value (pandas' NA too)."""
    if type(value) is int:  # the common cell, as `cell_float`
        return value
    return None if is_missing(value) else integer(value)


def cell_text(value: object) -> str:
    """A table cell as text, '' where it holds no value (a column an older file lacks, read
    with `.get`, too)."""
    return "" if is_missing(value) else str(value)


def row_at(rows: pd.DataFrame, label: object) -> pd.Series:
    """The row of a frame at an index label (idxmin/idxmax give one)."""
    return rows.loc[cast(Any, label)]


def plain(value: object) -> object:
    """A JSON-ready value: None for NaN and pd.NA, Python numbers for NumPy ones."""
    kind = type(value)
    if kind is float:  # the common cells first, told apart without pandas
        return None if value != value else value
    if kind is int or kind is str:
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, bool)):
        return value
    if is_missing(value):
        return None
    return value.item() if hasattr(value, "item") else value


def json_records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """Rows of a table as JSON-ready dicts, missing cells as null."""
    return [{str(key): plain(value) for key, value in record.items()}
            for record in frame.to_dict("records")]


def json_table(frame: pd.DataFrame) -> list[dict[str, object]]:
    """`json_ready(json_records(frame))`, the rows of a table as strict, printable JSON
    dicts, made a column at a time: a fleet's summary and rows are hundreds of thousands of
    cells, which `to_dict` boxed and `to_json` walked one by one (seconds at a million
    rows). Numbers and flags convert in NumPy, text is escaped only in a column that needs
    it; a column of another type goes cell by cell through the same rules."""
    from bwprof.schema.text import printable

    if not len(frame.columns):
        return [{} for _ in range(len(frame))]
    keys = [printable(str(column)) for column in frame.columns]
    cells = [_json_column(frame.iloc[:, index]) for index in range(len(keys))]
    return [dict(zip(keys, row, strict=True)) for row in zip(*cells, strict=True)]


def _json_column(column: pd.Series) -> list[object]:
    """One column's cells as `json_table` gives them (see `json_records`, `json_ready`)."""
    import numpy as np

    from bwprof.schema.text import json_ready, printable

    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        values = column.to_numpy()
        cells: list[object] = values.tolist()  # Python numbers, as iterating gives them
        if dtype.kind == "f":
            for index in np.flatnonzero(~np.isfinite(values)).tolist():
                cells[index] = None  # NaN, or infinite: not JSON
        return cells
    if textbytes.arrow_stored(dtype):
        return _shared_text(column)
    if isinstance(dtype, (pd.StringDtype, pd.Int64Dtype, pd.BooleanDtype)):
        cells = cast(Any, column).to_numpy(dtype=object, na_value=None).tolist()
        if isinstance(dtype, pd.StringDtype) and not _encodable(cells):
            cells = [None if cell is None else printable(cast(str, cell)) for cell in cells]
        return cells
    from pandas.api.types import is_extension_array_dtype

    boxed = dtype == np.dtype(object) or is_extension_array_dtype(dtype)
    return [json_ready(plain(_box_native(cell) if boxed else cell)) for cell in column]


def _shared_text(column: pd.Series) -> list[object]:
    """An Arrow-stored text column's cells, one Python string per distinct value (None for
    a missing cell): a fleet's columns repeat a few names over millions of rows, which a
    string object per cell made gigabytes of. Every cell is UTF-8 already
    (`textbytes.arrow_stored`): `printable` would leave each as it is."""
    import numpy as np

    codes, distinct = pd.factorize(column, use_na_sentinel=True)
    names = np.array([*distinct.tolist(), None], dtype=object)  # code -1: the last, None
    return cast(list[object], names[codes].tolist())


def _encodable(cells: list[object]) -> bool:
    """Whether every text cell is UTF-8 as it is (then `printable` leaves each alone)."""
    try:
        "".join(cell for cell in cells if cell is not None).encode("utf-8")  # type: ignore[misc]
    except UnicodeEncodeError:
        return False
    return True


def _box_native(cell: object) -> object:
    """A cell as `DataFrame.to_dict` gives it from an object or extension column."""
    from pandas.core.dtypes.cast import maybe_box_native  # type: ignore[attr-defined]

    return maybe_box_native(cell)


def lower_is_better_row(row: pd.Series | Mapping[str, object]) -> bool:
    """Whether a results or summary row's figure is better lower (a latency); a row that
    does not say (a path with no figure) counts as higher is better."""
    value = row["higher_is_better"]
    return not is_missing(value) and not bool(value)
