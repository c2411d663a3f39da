"""Reading the history store (`bwprof trend`, and `history add` checking what it holds):
the run files as one table, by a pyarrow dataset scan narrowed to the rows a trend may use,
the rows the store's index covers taken from it (`bwprof.store.history_index`). Kept apart
from adding runs (`bwprof.store.history`), which only writes files, so the scan, its notes
and its memory limits are one module's.

A file that cannot be read (damaged, foreign, of another history version, of other column
types) is left out with a note, never the whole store: what a read of one store file
checks is `bwprof.store.history_schema.store_table`. Texts come back cut to `MAX_TEXT`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bwprof.errors import BwprofError, raise_if_no_memory
from bwprof.schema.reading import MAX_TABLE_BYTES, file_size
from bwprof.schema.text import one_line, shown
from bwprof.store.history_index import COMPACT_AFTER, read_index
from bwprof.store.history_schema import (
    COLUMN_NAMES,
    HISTORY_VERSION,
    LATER_COLUMNS,
    SCAN_FILES,
    STORE_OPTION,
    arrow_schema,
    capped,
    capped_text,
    first_line,
    need_pyarrow,
    store_files,
    store_table,
    to_frame,
)


def read_store_file(path: Path) -> pd.DataFrame:
    """One file of the store, checked and read as the store's types (`arrow_schema`), its
    long texts cut (`capped`): BwprofError (one line) where it is not one."""
    frame: pd.DataFrame = capped(store_table(path)).to_pandas()
    return frame


def read_store(store: Path, notes: list[str] | None = None, *, gpu: str | None = None,
               case: str | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The runs of the store as one table (COLUMNS, or only `columns`: the others' pages are
    never read), narrowed by a dataset scan to the rows that may be of `gpu` (a UUID,
    serial, 'host:device' or 'host#box:device': `scan_filter`) and `case`: a superset,
    which `bwprof.analysis.trend.select` narrows exactly. The rows of the run files the
    store's index covers as they are now come from the index (one file), every other run
    file is read from itself (`read_index`). A file that cannot be read is left out with a
    note, as is one of another history version. BwprofError where the store holds no
    readable run."""
    need_pyarrow()
    wanted = [name for name in COLUMN_NAMES if columns is None or name in columns]
    files = store_files(store)
    found: list[str] = []
    frames: list[pd.DataFrame] = []
    where, readable = scan_filter(gpu, case), False
    indexed, covered = read_index(store, files, where, wanted, found)
    if indexed is not None:
        frames.append(indexed)
        readable = True
        files = [path for path in files if path.name not in covered]
    if len(files) >= COMPACT_AFTER:
        found.append(f"{len(files)} run file(s) are outside the store's index and were read "
                     f"one by one; `bwprof history compact --store {shown(store)}` puts them "
                     "in it, for a faster read next time")
    for start in range(0, len(files), SCAN_FILES):  # footers of a few files held at once
        fragments, odd = _fragments(files[start:start + SCAN_FILES], found)
        frames.extend(frame for path in odd if (frame := _read_whole(path, found)) is not None)
        if fragments:
            frames.append(_scan(fragments, where, found, wanted))
        readable |= bool(fragments)
    if notes is not None:
        notes.extend(found)
    if not readable and not frames:
        raise BwprofError(f"{STORE_OPTION} {shown(store)} holds no run"
                          f"{' that can be read' if files else ''}; add runs with "
                          "`bwprof history add RUN_DIR --store DIR`")
    frames = [f for f in frames if not f.empty] or frames[:1]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    frame = frame.loc[:, wanted]
    if notes is not None and {"box", "run_key"} <= set(wanted):
        notes.extend(identity_notes(frame))
    return frame


def scan_filter(gpu: str | None = None, case: str | None = None) -> Any:
    """The pyarrow filter of the rows a trend of `gpu` and `case` may use, or None for all:
    every row whose UUID or serial is `gpu`, or whose host (with its box key, for
    'host#box:device') and device make it, at every ':' and '#' it could be split at (a
    fleet run's device is 'node7:gpu0'); '?' is a missing host or device, as in a subject."""
    import pyarrow.dataset as ds

    def equal(name: str, value: str) -> Any:
        field = ds.field(name)
        return field.is_null() | (field == value) if value == "?" else field == value

    parts = []
    if gpu is not None:
        match = (ds.field("gpu_uuid") == gpu) | (ds.field("gpu_serial") == gpu)
        for cut in (i for i, char in enumerate(gpu) if char == ":"):
            host, device = gpu[:cut], gpu[cut + 1:]
            match |= equal("host", host) & equal("device", device)
            for mark in (i for i, char in enumerate(host) if char == "#"):
                match |= (equal("host", host[:mark]) & (ds.field("box") == host[mark + 1:])
                          & equal("device", device))
        parts.append(match)
    if case is not None:
        parts.append(ds.field("case") == case)
    if not parts:
        return None
    return parts[0] & parts[1] if len(parts) > 1 else parts[0]


def capped_gpu(gpu: str) -> list[str]:
    """The forms a `--gpu` may take in the store's texts as read (`capped`: each of the
    UUID, serial, host, box and device cut on its own to MAX_TEXT), at every ':' and '#'
    it could be split at (as `scan_filter`): the whole first."""
    forms = [capped_text(gpu)]
    for cut in (i for i, char in enumerate(gpu) if char == ":"):
        host, device = gpu[:cut], capped_text(gpu[cut + 1:])
        forms.append(f"{capped_text(host)}:{device}")
        for mark in (i for i, char in enumerate(host) if char == "#"):
            forms.append(f"{capped_text(host[:mark])}#{capped_text(host[mark + 1:])}:{device}")
    return list(dict.fromkeys(forms))


_FILE_NAME = "__filename"
"""The dataset scan's own column: the file each row came from."""


def _fragments(files: Sequence[Path], notes: list[str]) -> tuple[list[Any], list[Path]]:
    """The files a dataset scan can read (their Parquet footers read once and kept), and
    the odd ones, read whole and checked as one file (`read_store_file`): a column missing or
    of another type. A file that is not a regular one within the size limit, or whose footer
    cannot be read, is a note."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    # Pre-buffering reads ahead for large files over a network; a store file is small.
    file_format = ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))
    local = pafs.LocalFileSystem()
    expected = {field.name: field.type for field in arrow_schema()}
    fragments, odd = [], []
    for path in files:
        try:
            file_size(path, MAX_TABLE_BYTES)
            fragment = file_format.make_fragment(str(path), filesystem=local)
            fragment.ensure_complete_metadata()
            physical = fragment.physical_schema
        except BwprofError as exc:
            notes.append(f"left out: {exc}")
            continue
        except Exception as exc:  # pyarrow's own error types for a damaged file: said as one file's
            raise_if_no_memory(exc)
            odd.append(path)
            continue
        types = {field.name: field.type for field in physical}
        if all(types.get(name, expected[name] if name in LATER_COLUMNS else None)
               == kind for name, kind in expected.items()):
            fragments.append(fragment)
        else:
            odd.append(path)
    return fragments, odd


def _read_whole(path: Path, notes: list[str]) -> pd.DataFrame | None:
    """One file read and checked whole (`read_store_file`); None, with a note, where it
    cannot be used."""
    try:
        return read_store_file(path)
    except BwprofError as exc:
        notes.append(f"left out: {exc}")
        return None


def _scan(fragments: list[Any], where: Any, notes: list[str],
          wanted: Sequence[str] = COLUMN_NAMES) -> pd.DataFrame:
    """The rows of `fragments` that `where` keeps, as one frame; a file of another history
    version left out with a note. Where a file's pages are damaged the scan goes file by
    file, so the damaged one is a note, never the whole store."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    schema = arrow_schema()
    columns = [*dict.fromkeys([*wanted, "schema_version"]), _FILE_NAME]
    # Rows of another version pass the filter, so that their file is noted, not skipped.
    other = ds.field("schema_version") != HISTORY_VERSION
    keep = None if where is None else where | other
    try:
        table = ds.FileSystemDataset(fragments, schema, fragments[0].format).to_table(
            columns=columns, filter=keep)
    except MemoryError:  # the entry point's one line, exit 3
        raise
    except Exception as exc:  # a damaged page: find its file
        raise_if_no_memory(exc)
        tables = []
        for fragment in fragments:
            try:
                tables.append(fragment.to_table(schema=schema, columns=columns, filter=keep))
            except Exception as exc:
                raise_if_no_memory(exc)
                why = first_line(exc)
                notes.append(f"left out: cannot read {shown(Path(fragment.path))}: "
                             f"{one_line(why)}")
        table = pa.concat_tables(tables) if tables else schema.empty_table().append_column(
            _FILE_NAME, pa.array([], pa.string()))
    versions = table.column("schema_version")
    bad = pa.compute.fill_null(pa.compute.not_equal(versions, HISTORY_VERSION), False)
    if pa.compute.any(bad).as_py():
        for name in sorted(set(table.filter(bad).column(_FILE_NAME).to_pylist())):
            _read_whole(Path(name), notes)  # says which version, as a file read whole does
        names = table.filter(bad).column(_FILE_NAME).unique()
        table = table.filter(pa.compute.invert(pa.compute.is_in(table.column(_FILE_NAME),
                                                                value_set=names)))
    return to_frame(table.select(list(wanted)))


def identity_notes(frame: pd.DataFrame) -> list[str]:
    """A line where stored runs recorded no machine identity: they are keyed by host name,
    so machines that share one (`vm`, `localhost`) are one series there."""
    bare = frame.loc[frame["box"].isna() | (frame["box"].astype(str) == ""), "run_key"]
    if bare.empty:
        return []
    count = bare.nunique()
    return [f"{count} stored run(s) recorded no machine identity (from a bwprof before it "
            "kept one): their figures are keyed by host name, so machines sharing a host "
            "name are not told apart there"]
