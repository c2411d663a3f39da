"""Output formats of the report tables: CSV always (the primary format); Parquet for the
results by default (`results.parquet`, typed for pandas and DuckDB) and for the other tables
on request (`--format parquet`).

pyarrow is a dependency; an install that lacks it all the same refuses `--format parquet` in
one line before anything is measured or written. Every table carries a `schema_version`
column, whatever its format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast, overload

import pandas as pd

from bwprof.coerce import integer, number, shorten
from bwprof.errors import BwprofError
from bwprof.schema import textbytes
from bwprof.schema.table import ResultDtype, is_missing
from bwprof.store.atomic import atomic_file

__all__ = ["JsonRows", "cell_float", "cell_int", "is_missing", "json_records", "json_rows",
           "json_table", "plain", "row_at"]

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


def json_rows(frame: pd.DataFrame) -> JsonRows:
    """`json_table(frame)` kept as the frame's columns (`JsonRows`): what a document
    `bwprof.render.jsontext` writes holds, so that a fleet's table is never millions of
    dicts."""
    return JsonRows(frame)


class JsonRows(Sequence[dict[str, object]]):
    """The rows `json_table` gives, made only when read (a row, a slice, iteration, ==):
    2.3M comparison rows as dicts were 19 s and gigabytes before `compare --json` wrote a
    byte. `bwprof.render.jsontext` writes them a column at a time instead (`cell_texts`),
    the same text `json.dumps` gives for the list of dicts."""

    def __init__(self, frame: pd.DataFrame) -> None:
        from bwprof.schema.text import printable

        self.frame = frame.copy(deep=False)  # copy-on-write: what the frame holds now
        self.keys = [printable(str(column)) for column in frame.columns]
        self._distinct: dict[int, tuple[Any, Any]] = {}
        self._kinds: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.frame)

    @overload
    def __getitem__(self, index: int) -> dict[str, object]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, object]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, object] | list[dict[str, object]]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return self.rows(start, max(start, stop))
            return [self[number] for number in range(start, stop, step)]
        number = range(len(self))[index]  # an IndexError past either end, as a list's
        return self.rows(number, number + 1)[0]

    def __iter__(self) -> Iterator[dict[str, object]]:
        for start in range(0, len(self), 4096):
            yield from self.rows(start, min(len(self), start + 4096))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (JsonRows, list)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return f"JsonRows({len(self)} rows, {len(self.keys)} columns)"

    def rows(self, start: int, stop: int) -> list[dict[str, object]]:
        """Rows `start` to `stop` as `json_table` gives them."""
        return json_table(self.frame.iloc[start:stop])

    def columnar(self) -> bool:
        """Whether `cell_texts` can give every column's cells: distinct keys (a dict keeps
        one of two), and each column numbers, flags, text, or cells none of which is a list
        or a dict (those are written indented, over lines)."""
        if not self.keys or len(set(self.keys)) != len(self.keys):
            return False
        for index in range(len(self.keys)):
            if self._kind(index) == "cells":
                cells = _json_column(self.frame.iloc[:, index])
                if any(isinstance(cell, (list, tuple, dict)) for cell in cells):
                    return False
        return True

    def _kind(self, index: int) -> str:
        """How `cell_texts` converts the column (cached: an object column is inferred)."""
        if index not in self._kinds:
            self._kinds[index] = self._infer_kind(index)
        return self._kinds[index]

    def _infer_kind(self, index: int) -> str:
        import numpy as np

        dtype = self.frame.dtypes.iloc[index]
        if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
            return {"b": "flags", "f": "floats"}.get(dtype.kind, "integers")
        if isinstance(dtype, pd.StringDtype) or textbytes.arrow_stored(dtype):
            return "text"
        if dtype == np.dtype(object) and pd.api.types.infer_dtype(
                self.frame.iloc[:, index], skipna=True) in ("string", "empty"):
            return "text"  # text and missing cells alone (`_distinct_texts` is exact there)
        if isinstance(dtype, pd.Int64Dtype):
            return "integers"
        if isinstance(dtype, pd.BooleanDtype):
            return "flags"
        return "cells"

    def cell_texts(self, index: int, start: int, stop: int,
                   encode: Callable[[list[object]], list[str]]) -> Any:
        """Column `index`'s cells of rows `start` to `stop` as JSON text, a pyarrow
        large_string array (64-bit offsets: no size of cell overflows it) without nulls:
        each cell as `encode` (the writer's C encoder, cell by cell) writes `json_table`'s
        cell. Only whole text, whole numbers and flags are converted in Arrow (its decimal
        and true/false are json's); a text column's distinct values are encoded once."""
        import pyarrow as pa

        kind = self._kind(index)
        if kind == "text":
            codes, texts = self._distinct_texts(index, encode)
            return texts.take(pa.array(codes[start:stop]))
        column = self.frame.iloc[start:stop, index]
        if kind == "floats":
            return _float_texts(column.to_numpy(dtype="float64"))
        if kind == "cells":
            return pa.array(encode(_json_column(column)), type=pa.large_string())
        if isinstance(column.dtype, (pd.Int64Dtype, pd.BooleanDtype)):
            values = pa.array(column.array)
        else:  # in the machine's byte order: Arrow refuses a byte-swapped array
            numbers = column.to_numpy()
            values = pa.array(numbers.astype(numbers.dtype.newbyteorder("="), copy=False))
        return values.cast(pa.large_string()).fill_null("null")

    def _distinct_texts(self, index: int, encode: Callable[[list[object]], list[str]]
                        ) -> tuple[Any, Any]:
        """A text column's codes (`pd.factorize`; a missing cell is the last text) and the
        JSON texts of its distinct values and of null, made once per column."""
        import numpy as np
        import pyarrow as pa

        found = self._distinct.get(index)
        if found is None:
            codes, distinct = pd.factorize(self.frame.iloc[:, index], use_na_sentinel=True)
            values = _json_column(pd.Series(distinct, dtype=self.frame.dtypes.iloc[index]))
            codes = np.where(codes < 0, len(values), codes)
            found = self._distinct[index] = (codes, pa.array([*encode(values), "null"],
                                                             type=pa.large_string()))
        return found


def _float_texts(values: Any) -> Any:
    """Each float's JSON text (`float.__repr__`; null where not finite), a pyarrow
    large_string array. Arrow's own text has the same shortest digits as repr, but not
    always its form (no '.0', an exponent from 1e+10 on, none below 1e-4): taken where it
    is in fixed form with a point and repr is too (1e-4 <= |x| < 1e16), repr's elsewhere.
    tests/store/test_json_rows.py holds the two equal over random bit patterns."""

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    arrow = pa.array(values, type=pa.float64()).cast(pa.large_string())
    size = np.abs(values)
    with np.errstate(invalid="ignore"):
        own = ((size >= 1e-4) & (size < 1e16)
               & np.asarray(pc.match_substring(arrow, "."), dtype=bool)
               & ~np.asarray(pc.match_substring(arrow, "e"), dtype=bool))
    other = np.flatnonzero(~own)
    if not len(other):
        return arrow
    texts = [float.__repr__(value) if value - value == 0 else "null"
             for value in values[other].tolist()]
    return pc.replace_with_mask(arrow, pa.array(~own), pa.array(texts, type=pa.large_string()))


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
