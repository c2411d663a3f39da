"""The history store's layout and row schema: the names that adding runs
(`bwprof.store.history`), reading the store (`bwprof.store.history_read`) and its index
(`bwprof.store.history_index`) all use, kept below the three so that none of them imports
another for a constant, and one store file is read and checked in one place.

Layout: `STORE/run-<run_id>-<key>.parquet`, one file per run, each holding one row per
headline figure of the run's summary (`bwprof.analysis.summary`), with the run's, the
machine's (`box`: the box key of `bwprof.system.machine_identity`, empty for a run from
before it) and the GPU's identity on every row (`COLUMNS`). `<key>` is the first 16 hex
digits of the SHA-256 of the run's identity (its `run_id`; a run without one: its folder's
name and start time), so the same run always lands on the same name, and `<run_id>` is that
id cut to the characters a file name can always hold, for people. Every file has the same
column types (`arrow_schema`), so `pandas.read_parquet(STORE)` and DuckDB's
`read_parquet('STORE/run-*.parquet')` read the store as one table.
"""

from __future__ import annotations

import errno
import hashlib
import os
from contextlib import suppress
from io import BytesIO
from pathlib import Path
from typing import Any

import pandas as pd

from bwprof.errors import BwprofError, raise_if_no_memory, write_failure
from bwprof.schema.reading import MAX_TABLE_BYTES, read_bytes
from bwprof.schema.text import one_line, shown
from bwprof.store.runlock import is_debris

HISTORY_VERSION = 1
"""The store's own format version, in every row's `schema_version`."""
FILE_PREFIX = "run-"
FILE_SUFFIX = ".parquet"
STORE_OPTION = "--store"
PYARROW_ADVICE = "python3 -m pip install pyarrow"

# (column, Arrow type): the store's columns, in order. "timestamp" is microseconds, UTC.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_key", "string"), ("run_id", "string"), ("started_utc", "timestamp"),
    ("finished_utc", "timestamp"), ("host", "string"), ("box", "string"),
    ("bwprof_version", "string"),
    ("bwprof_commit", "string"), ("driver_version", "string"),
    ("cuda_driver_version", "string"), ("path", "string"), ("case", "string"),
    ("device", "string"), ("device_name", "string"), ("gpu_uuid", "string"),
    ("gpu_serial", "string"), ("memory", "string"), ("direction", "string"),
    ("size_bytes", "int64"), ("metric", "string"), ("unit", "string"),
    ("higher_is_better", "bool"), ("value", "float64"), ("value_median", "float64"),
    ("cv", "float64"), ("flags", "string"), ("status", "string"),
    ("results_sha256", "string"), ("source", "string"), ("added_utc", "timestamp"),
    ("schema_version", "int64"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _kind in COLUMNS)
LATER_COLUMNS: tuple[str, ...] = ("box",)
"""Columns a file stored by an earlier bwprof lacks: read as empty (the run is keyed by its
host name, as it was then)."""


def need_pyarrow() -> None:
    """BwprofError of one line where pyarrow (the store's Parquet) is not installed."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise BwprofError("the history store is Parquet and needs pyarrow: "
                          f"{PYARROW_ADVICE}") from None


def arrow_schema() -> Any:
    """The pyarrow schema every file of the store is written with."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
             "bool": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in COLUMNS])


# -- the store's files ------------------------------------------------------------------------


def inside_store(path: Path, store: Path) -> bool:
    """Whether `path` is the store folder or lies within it, links resolved (a folder made
    there would be read by pandas as part of the store)."""
    try:
        where, home = path.resolve(), store.resolve()
    except (OSError, RuntimeError):  # a loop of links: not a folder anything is written to
        return False
    return where == home or home in where.parents


def store_files(store: Path) -> list[Path]:
    """The run files of the store, sorted by name; BwprofError where the store is not a
    readable folder. Temporary files of writers still at work are never among them."""
    try:
        names = os.listdir(store)
    except FileNotFoundError:
        raise BwprofError(f"{STORE_OPTION} {shown(store)} does not exist; make a store with "
                          "`bwprof history add RUN_DIR --store DIR`") from None
    except NotADirectoryError:
        raise BwprofError(f"{STORE_OPTION} {shown(store)} is not a folder") from None
    except OSError as exc:
        raise BwprofError(f"cannot read {STORE_OPTION} {shown(store)}: "
                          f"{exc.strerror or exc}") from None
    return [store / name for name in sorted(names)
            if name.startswith(FILE_PREFIX) and name.endswith(FILE_SUFFIX)
            and not is_debris(name)]

# -- one store file, read and checked (by adding, reading and the index alike) ----------------


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (pyarrow's run to several), or its type's name
    where it says nothing."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


class OtherVersion(BwprofError):
    """A store file of another history version: read by the bwprof that wrote it."""


def store_table(path: Path, data: bytes | None = None) -> Any:
    """One file of the store (its bytes `data`, where read already) as a pyarrow table of
    the store's columns and types: a file whose columns cannot be read as those types (a
    damaged or hand-made file) is a BwprofError (one line), never a column of other values
    that would break what reads the store; OtherVersion for another history version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if data is None:
        data = read_bytes(path, MAX_TABLE_BYTES)
    try:
        table = pq.read_table(BytesIO(data))
    except MemoryError:  # the entry point's one line, exit 3
        raise
    except Exception as exc:  # pyarrow's own error types for a damaged file
        raise_if_no_memory(exc)
        why = first_line(exc)
        raise BwprofError(f"cannot read {shown(path)}: {one_line(why)}") from None
    names = table.column_names
    missing = [name for name in COLUMN_NAMES if name not in names and name not in LATER_COLUMNS]
    if missing:
        raise BwprofError(f"{shown(path)} is not a bwprof history file (missing "
                          f"{', '.join(missing[:5])})")
    try:
        versions = set(pa.compute.cast(table.column("schema_version"), pa.int64())
                       .unique().drop_null().to_pylist())
    except Exception as exc:  # not whole numbers: said below, as a column of another type
        raise_if_no_memory(exc)
        versions = set()
    if versions - {HISTORY_VERSION}:
        raise OtherVersion(f"{shown(path)} is of history version "
                           f"{', '.join(str(v) for v in sorted(versions))}; this bwprof reads "
                           f"version {HISTORY_VERSION}")
    schema = arrow_schema()
    try:
        for name in LATER_COLUMNS:
            if name not in names:
                table = table.append_column(name, pa.nulls(table.num_rows, pa.string()))
        table = table.select(list(COLUMN_NAMES)).cast(schema)
    except MemoryError:  # the entry point's one line, exit 3
        raise
    except Exception as exc:  # a column of values the store's type cannot hold, or named twice
        raise_if_no_memory(exc)
        odd = [f"{field.name} ({field.type})" for field in table.schema
               if field.name in schema.names and field.type != schema.field(field.name).type]
        raise BwprofError(f"{shown(path)} is not a bwprof history file: "
                          f"{', '.join(odd[:5]) or 'its columns'} cannot be read as the "
                          "store's types") from None
    return table

# -- long texts cut as they are read ----------------------------------------------------------

MAX_TEXT = 200
"""The most characters of one text a store read gives (a GPU name, host, case...): bwprof
writes far shorter ones, and a hand-made or hostile file of 100,000-character names must not
make a trend's lines and plots take minutes."""


def capped_text(text: str) -> str:
    """`text` cut to about MAX_TEXT characters, its length and a digest of the whole kept, so
    two long names that share a beginning stay two."""
    if len(text) <= MAX_TEXT:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{text[:MAX_TEXT - 40]}... ({len(text)} characters, {digest})"


def capped(table: Any) -> Any:
    """`table` with every text longer than MAX_TEXT cut (`capped_text`); the columns within
    it untouched (one length scan each)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for index, field in enumerate(table.schema):
        if not pa.types.is_string(field.type) or not table.num_rows:
            continue
        column = table.column(index)
        if (pc.max(pc.utf8_length(column)).as_py() or 0) <= MAX_TEXT:
            continue
        values = [None if v is None else capped_text(v) for v in column.to_pylist()]
        table = table.set_column(index, field, pa.array(values, pa.string()))
    return table


# -- shared by reading and the index ----------------------------------------------------------


def to_frame(table: Any) -> pd.DataFrame:
    """The scanned rows as pandas, long texts cut (`capped`): the one place the store's
    scanned rows are materialised."""
    frame: pd.DataFrame = capped(table).to_pandas()
    return frame


SCAN_FILES = 1000
"""Files scanned at once: their footers are kept for the scan, so a store of 10,000 runs
is read a thousand files at a time, and its memory does not grow with the store; `compact`
merges the tables it reads as often."""


def open_lock(path: Path) -> int:
    """A lock file of the store opened to be flocked: made 0o666 (the umask applies), so
    every user of a store shared by several can take it; where opening it for writing is
    refused (EACCES: another user's file of mode 0644), opened read-only, as flock needs no
    more (on local file systems). OutputError (exit 3) where it cannot be opened at all."""
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, os.O_CREAT | os.O_RDWR | flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.EACCES:
            with suppress(OSError):
                return os.open(path, os.O_RDONLY | flags)
        raise write_failure(path, exc, option=STORE_OPTION) from None
