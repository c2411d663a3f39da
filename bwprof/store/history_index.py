"""The history store's index (issue 36): `STORE/_bwprof-index.parquet`, written by
`bwprof history compact` and by `history add` as runs accrue (`compact`), holds the rows of
the run files it covers, and which files those are (name, size, mtime, inode, SHA-256):
a read of the store (`bwprof.store.history_read`) takes their rows from it and reads only
the other run files, so 10,000 runs are one file read, not 10,000. The run files stay the
store; the index's name begins with `_`, which pandas and pyarrow skip.

Its own module, below reading and beside adding, because it is a cache of the store with
its own format, lock and staleness rules: it reads run files through
`bwprof.store.history_schema` only, never through the store's reader.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bwprof.errors import BwprofError, raise_if_no_memory
from bwprof.schema.reading import MAX_TABLE_BYTES, file_size, read_bytes
from bwprof.schema.text import one_line, shown
from bwprof.store.atomic import atomic_file, no_follow_opener
from bwprof.store.history_schema import (
    HISTORY_VERSION,
    SCAN_FILES,
    arrow_schema,
    first_line,
    need_pyarrow,
    open_lock,
    store_files,
    store_table,
    to_frame,
)

INDEX_FILE = "_bwprof-index.parquet"
"""The store compacted: every covered run file's rows in one Parquet file. Its name begins
with `_`, so pandas and pyarrow, reading the store folder, skip it, as DuckDB's
`run-*.parquet` does: the run files stay the store, the index only a faster way to read it."""
INDEX_VERSION = 1
INDEX_LOCK = ".bwprof-index.lock"
"""Held (flock) while the index is written: one compaction at a time; `history add` skips its
own compaction where another holds it."""
RUN_FILE = "run_file"
"""The index's own column: the name of the run file each row is of."""
_INDEX_KEY = b"bwprof.history.index"
"""The index's Parquet metadata: which run files it covers, each as name, size, mtime
(ns) and inode when read, and its SHA-256."""
COMPACT_AFTER = 200
"""`history add` compacts the store where this many run files or more are not in its index:
a trend reads each of those file by file."""


def _stamp(info: os.stat_result) -> tuple[int, int, int]:
    """What says a run file is the one the index read: a file replaced (a new inode), grown or
    written again (size, mtime) is read from itself."""
    return info.st_size, info.st_mtime_ns, info.st_ino


def _stamps(files: Sequence[Path]) -> dict[str, tuple[int, int, int]]:
    """The stamp of each regular run file (a link or anything else is never covered)."""
    stamps = {}
    for path in files:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            stamps[path.name] = _stamp(info)
    return stamps


def _index_schema() -> Any:
    import pyarrow as pa

    return arrow_schema().append(pa.field(RUN_FILE, pa.string()))


@contextmanager
def _opened_index(store: Path) -> Iterator[tuple[Any, dict[str, list[Any]]] | None]:
    """The store's index (a pyarrow ParquetFile over one open file, so what it covers and
    the rows read are of one index, whatever a compaction renames meanwhile) and what it
    covers (name: [size, mtime_ns, inode, sha256]); None where there is none; BwprofError
    where it cannot be used."""
    import pyarrow.parquet as pq

    path = store / INDEX_FILE
    try:
        reading = no_follow_opener(extra=os.O_NONBLOCK | os.O_CLOEXEC)
        handle = open(path, "rb", opener=reading)  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        raise BwprofError(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    with handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_TABLE_BYTES:
            raise BwprofError(f"{shown(path)} is not a regular file within "
                              f"{MAX_TABLE_BYTES} bytes")
        try:
            index = pq.ParquetFile(handle, pre_buffer=False)
            schema = index.schema_arrow
            covers = json.loads((schema.metadata or {})[_INDEX_KEY])
        except Exception as exc:  # a damaged or foreign file
            raise_if_no_memory(exc)
            why = first_line(exc)
            raise BwprofError(f"cannot read {shown(path)}: {one_line(why)}") from None
        if (not isinstance(covers, dict) or covers.get("version") != INDEX_VERSION
                or covers.get("history_version") != HISTORY_VERSION
                or not isinstance(covers.get("files"), dict)
                or not schema.remove_metadata().equals(_index_schema())):
            raise BwprofError(f"{shown(path)} is not an index this bwprof writes")
        yield index, covers["files"]


def read_index(store: Path, files: Sequence[Path], where: Any, wanted: Sequence[str],
                notes: list[str]) -> tuple[pd.DataFrame | None, set[str]]:
    """The rows of `where` from the store's index, of the run files it covers as they are
    now (name, size, mtime and inode as when it read them), and the names of those files:
    every other run file, and every file where the index cannot be used (a note), is read
    from itself, so no run is read twice and none is left out."""
    import pyarrow.dataset as ds

    again = (f"every run file is read from itself; `bwprof history compact --store "
             f"{shown(store)}` writes the index again")
    try:
        with _opened_index(store) as opened:
            if opened is None:
                return None, set()
            index, covers = opened
            now = _stamps(files)
            covered = {name for name, stamp in now.items()
                       if (cover := covers.get(name)) is not None and tuple(cover[:3]) == stamp}
            if not covered:
                return None, set()
            keep = ds.field(RUN_FILE).isin(sorted(covered))
            try:
                table = index.read(columns=[*wanted, RUN_FILE])
                table = table.filter(keep if where is None else keep & where)
            except MemoryError:  # the entry point's one line, exit 3
                raise
            except Exception as exc:  # damaged pages: the run files say it all
                raise_if_no_memory(exc)
                why = first_line(exc)
                notes.append(f"cannot read {shown(store / INDEX_FILE)}: {one_line(why)}: "
                             f"{again}")
                return None, set()
    except BwprofError as exc:
        notes.append(f"{exc}: {again}")
        return None, set()
    return to_frame(table.select(list(wanted))), covered


def _utf8(name: str) -> bool:
    """Whether a file name is text (not bytes a file system took, held as surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kept_from_index(store: Path, now: dict[str, tuple[int, int, int]]
                     ) -> tuple[list[Any], dict[str, list[Any]]]:
    """The old index's rows and covers of the run files it covers as they are now."""
    import pyarrow as pa
    import pyarrow.compute as pc

    with _opened_index(store) as opened:
        if opened is None:
            return [], {}
        index, old = opened
        kept = sorted(name for name, stamp in now.items()
                      if (cover := old.get(name)) is not None and tuple(cover[:3]) == stamp)
        if not kept:
            return [], {}
        try:
            table = index.read()
        except MemoryError:  # the entry point's one line, exit 3
            raise
        except Exception as exc:  # damaged pages: every file is read again
            raise_if_no_memory(exc)
            why = first_line(exc)
            raise BwprofError(f"cannot read {shown(store / INDEX_FILE)}: "
                              f"{one_line(why)}") from None
        rows = table.filter(pc.is_in(table.column(RUN_FILE),
                                     value_set=pa.array(kept, pa.string())))
        return [rows], {name: old[name] for name in kept}


@dataclass(frozen=True)
class Compacted:
    """What `compact` did: the index, the run files it covers, those read for it now, and
    the files it leaves out (each a note, read from itself by `trend` as before)."""

    target: Path
    covered: int
    read: int
    notes: list[str]


def uncovered(store: Path) -> int:
    """How many run files of the store its index does not cover (all, without an index)."""
    files = store_files(store)
    try:
        with _opened_index(store) as opened:
            covers = {} if opened is None else opened[1]
    except BwprofError:
        covers = {}
    return sum(1 for name, stamp in _stamps(files).items()
               if (cover := covers.get(name)) is None or tuple(cover[:3]) != stamp)


def compact(store: Path, *, wait: bool = True) -> Compacted | None:
    """Write the store's index (`INDEX_FILE`): the rows of every run file that can be read,
    those the old index covers as they are now taken from it, the others read (each file
    once, its stamp taken before and after the read: a file that changed meanwhile is left
    to be read from itself). Written whole under a temporary name and renamed over the old
    one, so a reader sees the old index or the new, never a torn one; a run added meanwhile
    is not in it and is read from its file. One compaction at a time (`INDEX_LOCK`); with
    `wait` False, None where another holds it. OutputError (exit 3) where the index cannot
    be written: the store's runs are untouched."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    need_pyarrow()
    store_files(store)  # a store that is not a readable folder: one line
    fd = open_lock(store / INDEX_LOCK)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        files = store_files(store)
        notes: list[str] = []
        covers: dict[str, list[Any]] = {}
        pieces: list[Any] = []
        now = _stamps(files)
        try:
            pieces, covers = _kept_from_index(store, now)
        except BwprofError as exc:
            notes.append(f"{exc}: written anew")
        read = 0
        for path in files:
            if path.name in covers:
                continue
            before = now.get(path.name)
            if not path.name.isascii() and not _utf8(path.name):
                notes.append(f"{shown(path)}: its name is not UTF-8, which the index cannot "
                             "hold: read from itself")
                continue
            try:
                if before is None:
                    file_size(path, MAX_TABLE_BYTES)  # says what it is
                    raise BwprofError(f"{shown(path)} is not a regular file")
                data = read_bytes(path, MAX_TABLE_BYTES)
                table = store_table(path, data)
                after = _stamp(os.lstat(path))
            except OSError as exc:
                notes.append(f"left out: cannot read {shown(path)}: {exc.strerror or exc}")
                continue
            except BwprofError as exc:
                notes.append(f"left out: {exc}")
                continue
            if after != before or len(data) != before[0]:
                notes.append(f"{shown(path)} changed while it was read: read from itself")
                continue
            read += 1
            covers[path.name] = [*before, hashlib.sha256(data).hexdigest()]
            pieces.append(table.append_column(
                RUN_FILE, pa.array([path.name] * table.num_rows, pa.string())))
            if len(pieces) >= SCAN_FILES:  # a table per file holds its own buffers: merged
                pieces = [pa.concat_tables(pieces).combine_chunks()]
        schema = _index_schema()
        table = pa.concat_tables(pieces) if pieces else schema.empty_table()
        table = table.take(pc.sort_indices(table, [(RUN_FILE, "ascending")]))
        payload = {"version": INDEX_VERSION, "history_version": HISTORY_VERSION,
                   "files": covers}
        table = table.replace_schema_metadata({_INDEX_KEY: json.dumps(payload).encode()})
        target = store / INDEX_FILE
        with atomic_file(target, binary=True) as handle:
            pq.write_table(table, handle, row_group_size=ROW_GROUP)
        return Compacted(target, len(covers), read, notes)
    finally:
        os.close(fd)


ROW_GROUP = 64 * 1024
"""Rows per row group of the index: a `--case` or `--gpu` filter skips the groups whose
statistics rule it out."""
