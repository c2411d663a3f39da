"""Whole files written so that a reader sees the old file or the new one, never a torn one:
a temporary file in the same folder, flushed to the disk, renamed over its target.

Every file bwprof writes whole goes through here (system.json, findings.csv, summary.csv,
compare.csv, timelines.json, Parquet copies, plots); a write that fails is an OutputError of
one line (`bwprof.errors.write_failure`) and leaves no temporary file.
"""

from __future__ import annotations

import csv
import errno
import functools
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from bwprof.errors import write_failure
from bwprof.schema import textbytes
from bwprof.schema.cells import spreadsheet_frame
from bwprof.store.runlock import temporary_suffix

_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
"""A folder opened to be the folder of *at() calls. O_PATH: a folder that may be written
but not listed (mode 0300) can still be one."""

_held: ContextVar[tuple[Path, int] | None] = ContextVar("bwprof_held_folder", default=None)


@contextmanager
def held_folder(folder: Path, follow: bool = True) -> Iterator[int]:
    """`folder` opened once for the block (without `follow`, never through a link at its
    name: OSError ELOOP): every `atomic_file` and `publish_new` of a file directly in it,
    whoever calls them within the block, writes into this very folder, whatever its path
    names meanwhile (a folder swapped for a link mid-report is never written through)."""
    fd = os.open(folder, _FOLDER_FLAGS if follow else _FOLDER_FLAGS | os.O_NOFOLLOW)
    token = _held.set((folder, fd))
    try:
        yield fd
    finally:
        _held.reset(token)
        os.close(fd)


def _folder(target: Path, folder: int | None) -> tuple[int, bool]:
    """The folder `target` goes in, open, and whether this call opened it (to close): the
    one given, the one held (`held_folder`), or its path opened now. The temporary file is
    made and renamed inside this very folder, whatever its path names by the time of the
    rename (a link put in place of a folder meanwhile is never written through)."""
    if folder is not None:
        return folder, False
    held = _held.get()
    if held is not None and held[0] == target.parent:
        return held[1], False
    return os.open(target.parent, _FOLDER_FLAGS), True


def no_follow_opener(folder: int | None = None, mode: int = 0o644,
                     extra: int = 0) -> Callable[[str, int], int]:
    """An `opener` for open() that never goes through a link at the file's name (O_NOFOLLOW,
    and `extra` flags); with `folder`, the name is taken inside that open folder (the open
    folder, not whatever the path names by now). New files get `mode` (umask applies)."""
    def opener(path: str, flags: int) -> int:
        if folder is None:
            return os.open(path, flags | os.O_NOFOLLOW | extra, mode)
        return os.open(os.path.basename(path), flags | os.O_NOFOLLOW | extra, mode,
                       dir_fd=folder)

    return opener


@contextmanager
def atomic_file(target: Path, binary: bool = False, kept: Path | None = None,
                folder: int | None = None) -> Iterator[IO[Any]]:
    """An open temporary file beside `target` that replaces it when the block ends: the
    target is never torn, and a block that fails (OSError: OutputError; an interrupt) leaves
    the old target, or none, and no temporary file. A symbolic link at `target` is
    replaced, never written through. Writers get the open file, never the path: pandas and
    matplotlib would expand a leading `~` of a string themselves. `folder`: the open folder
    `target` goes in (else the one held by `held_folder`, else its path's)."""
    temp = f".{target.name}.{temporary_suffix()}"
    into: int | None = None
    mine = made = False
    try:
        into, mine = _folder(target, folder)
        new = no_follow_opener(into)
        handle: IO[Any]
        with (open(target.parent / temp, "xb", opener=new) if binary
              else open(target.parent / temp, "x", newline="", encoding="utf-8",
                        opener=new)) as handle:
            made = True
            yield handle
            handle.flush()
            os.fsync(handle.fileno())  # a full disk can show first here (delayed allocation)
        os.replace(temp, target.name, src_dir_fd=into, dst_dir_fd=into)
        made = False
    except BaseException as exc:
        if isinstance(exc, OSError):
            raise write_failure(target, exc, kept) from None
        raise
    finally:
        _release(temp, into, mine, made)


def _release(temp: str, into: int | None, mine: bool, made: bool) -> None:
    """Remove the temporary file where it is left, and close a folder this call opened."""
    if into is not None:
        if made:
            with suppress(OSError):
                os.unlink(temp, dir_fd=into)
        if mine:
            os.close(into)


def write_json_atomic(target: Path, payload: object, strict: bool = False,
                      kept: Path | None = None) -> Path:
    """Write JSON through a temp file and a rename, so the file is never half-written.
    `strict`: the payload is plain JSON already (no NaN, nothing to turn into a string)."""
    text = (json.dumps(payload, indent=2, allow_nan=False) if strict
            else json.dumps(payload, indent=2, default=str))
    with atomic_file(target, kept=kept) as handle:
        handle.write(text + "\n")
    return target


def write_csv_atomic(frame: Any, target: Path, kept: Path | None = None) -> Path:
    """A table (DataFrame) as a whole CSV file, its text cells safe in a spreadsheet: the
    bytes of pandas' `to_csv(index=False)`, made a column at a time where it can
    (`write_csv`)."""
    with atomic_file(target, kept=kept) as handle:
        write_csv(spreadsheet_frame(frame), handle)
    return target


def write_csv(frame: pd.DataFrame, handle: IO[str]) -> None:
    """`frame.to_csv(handle, index=False)`, byte for byte. pandas formats and writes a cell
    at a time (NumPy's float to text, Python's csv writer): seconds for a fleet's summary of
    four million cells. Here a chunk of rows at a time, each column becomes its cells' text
    at once (Arrow), quoted as the csv writer quotes (a cell holding the comma, the quote
    or the line end, in quotes, its quotes doubled; a column none of whose bytes is one of
    these is never searched), and the rows are joined at once. A row with a carriage return,
    which Python versions quote differently, goes through the csv writer itself. A table
    with another kind of column, a single column or labels that are not text, or an install
    without pyarrow, is written by pandas itself."""
    columns = _csv_columns(frame)
    if columns is None:
        frame.to_csv(handle, index=False)
        return
    import pyarrow.compute as pc

    csv.writer(handle, lineterminator=os.linesep).writerow(list(frame.columns))
    line = io.StringIO()
    writer = csv.writer(line, lineterminator=os.linesep)  # pandas' dialect: the default
    # Which text columns may hold a cell to quote, or a carriage return: asked of each
    # column's bytes once (a fleet's text columns mostly hold neither), not of every chunk.
    quote = [column.holds_any(_QUOTE_BYTES) for column in columns]
    carriage = [column.holds_any(b"\r") for column in columns]
    for start in range(0, len(frame), _CSV_CHUNK):
        raw = [column.cells(start, _CSV_CHUNK) for column in columns]
        with_cr = [column for column, odd in zip(raw, carriage, strict=True) if odd]
        cells = [_quoted(column) if quoting else column
                 for column, quoting in zip(raw, quote, strict=True)]
        lines = pc.binary_join_element_wise(*cells, _large(","),
                                            null_handling="replace").to_pylist()
        odd = _carriage_rows(with_cr, len(raw[0]))
        if odd:
            records = [pc.take(column, odd).to_pylist() for column in raw]
            for row, record in zip(odd, zip(*records, strict=True), strict=True):
                line.seek(0)
                line.truncate()
                writer.writerow(record)
                lines[row] = line.getvalue()[:-len(os.linesep)]
        handle.write(os.linesep.join(lines) + os.linesep)


_CSV_CHUNK = 1 << 16
"""Rows joined into one write: tens of MB of text at most, not the whole file's."""


@dataclass(frozen=True)
class _CsvColumn:
    """A column to write: a text column as its whole Arrow text (mostly the column's own
    data, not a copy), a number or flag column as its values, made text a chunk at a time
    (a fleet's table of numbers as text at once: hundreds of MB more at its peak)."""

    text: Any | None
    values: pd.Series | None = None

    def cells(self, start: int, length: int) -> Any:
        """The cells of rows `start` to `start + length` as CSV text (Arrow large_string)."""
        if self.text is not None:
            return self.text.slice(start, length)
        assert self.values is not None
        return _number_text(self.values.iloc[start:start + length])

    def holds_any(self, characters: bytes) -> bool:
        """Whether a cell may hold one of `characters` (numbers and flags never do)."""
        return self.text is not None and textbytes.holds_any(self.text, characters)


def _csv_columns(frame: pd.DataFrame) -> list[_CsvColumn] | None:
    """Each column of `frame` to write as CSV text (`_CsvColumn`); None where one is of a
    kind this does not make (`_text_cells`, `_number_text`), the table has fewer than two
    columns (a lone empty cell is written '""') or a label that is not text, or there is no
    pyarrow."""
    if frame.shape[1] < 2 or not all(isinstance(label, str) for label in frame.columns):
        return None
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    columns = []
    for position in range(frame.shape[1]):
        values = frame.iloc[:, position]
        if _is_text(values.dtype):
            text = _text_cells(values)
            if text is None:
                return None
            columns.append(_CsvColumn(text))
        elif _is_number(values.dtype):
            columns.append(_CsvColumn(None, values))
        else:
            return None
    return columns


def _is_text(dtype: Any) -> bool:
    return isinstance(dtype, pd.StringDtype) or pd.api.types.is_object_dtype(dtype)


def _is_number(dtype: Any) -> bool:
    """Whether `_number_text` makes a column of `dtype`: floats, integers and flags."""
    return (dtype == np.float64 or dtype == np.int64 or dtype == np.bool_
            or isinstance(dtype, (pd.Int64Dtype, pd.BooleanDtype)))


def _text_cells(values: pd.Series) -> Any:
    """A text column's cells as the text pandas hands the csv writer, an Arrow large_string
    array (null for an empty cell); None where it holds numbers or other objects too."""
    import pyarrow as pa

    text = pa.large_string()
    if isinstance(values.dtype, pd.StringDtype):
        return pa.array(values, from_pandas=True).cast(text)  # Arrow's own where it is
    if pd.api.types.infer_dtype(values, skipna=True) not in ("string", "empty"):
        return None  # numbers or other objects among the text: as pandas writes them
    return pa.array(values.to_numpy(dtype=object), type=text, from_pandas=True)


def _number_text(values: pd.Series) -> Any:
    """A number or flag column's cells (`_is_number`) as the text pandas hands the csv
    writer, an Arrow large_string array (null for an empty cell)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dtype = values.dtype
    text = pa.large_string()
    if dtype == np.float64:
        return _float_text(values.to_numpy())
    if dtype == np.int64 or isinstance(dtype, pd.Int64Dtype):  # str(int): the digits
        return pa.array(values, type=pa.int64(), from_pandas=True).cast(text)
    flags = pa.array(values, type=pa.bool_(), from_pandas=True)
    return pc.take(pa.array(["False", "True"], type=text), flags.cast(pa.int8()))


_QUOTED = "[" + re.escape(',"' + os.linesep) + "]"
"""A cell the csv writer (QUOTE_MINIMAL) puts in quotes: it holds the delimiter, the
quote or a character of the line end."""
_QUOTE_BYTES = (',"' + os.linesep).encode()


def _quoted(column: Any) -> Any:
    """`column`'s cells as the csv writer writes them: in quotes, with each quote doubled,
    where one holds a character of `_QUOTED`; as they are otherwise."""
    import pyarrow.compute as pc

    marked = pc.match_substring_regex(column, _QUOTED)
    if not pc.any(marked).as_py():
        return column
    doubled = pc.replace_substring(column, '"', '""')
    quoted = pc.binary_join_element_wise(_large('"'), doubled, _large('"'), _large(""))
    return pc.if_else(marked, quoted, column)


def _carriage_rows(columns: list[Any], rows: int) -> list[int]:
    """The rows (positions) with a carriage return in a cell of the text `columns`: Python's
    csv writer quotes such a cell in some versions and not in others, so those rows go
    through it."""
    import pyarrow.compute as pc

    found = np.zeros(rows, dtype=bool)
    for column in columns:
        found |= pc.match_substring(column, "\r").fill_null(False).to_numpy(
            zero_copy_only=False)
    return [int(row) for row in np.flatnonzero(found)]


def _float_text(values: np.ndarray) -> Any:
    """Floats as pandas writes them: NumPy's text (Python's repr: the shortest digits that
    read back exactly, '100.0', '1e-05', '1e+16'), null for NaN. Arrow writes the same
    digits in another layout; between 1e-4 and 1e10 only a whole number differs ('100'),
    so there Arrow's text, given its '.0', is taken where it reads back as the very value
    and Arrow's layout is the one known (`_arrow_layout`); every other cell gets NumPy's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    numbers = pa.array(values, from_pandas=True)  # NaN: null, an empty cell
    present = ~np.isnan(values)
    if not _arrow_layout():
        return pc.replace_with_mask(numbers.cast(pa.large_string()), pa.array(present),
                                    pa.array(values[present].astype(str),
                                             type=pa.large_string()))
    text = numbers.cast(pa.large_string())
    with np.errstate(invalid="ignore"):
        size = np.abs(values)
        ranged = ((size >= 1e-4) & (size < 1e10)) | (values == 0)
        whole = ranged & (np.floor(values) == values)  # Arrow's '100', Python's '100.0'
    if whole.any():
        mask = pa.array(whole)
        text = pc.replace_with_mask(text, mask, pc.binary_join_element_wise(
            pc.filter(text, mask), _large(".0"), _large("")))
    back = pc.cast(pc.if_else(pa.array(ranged), text, _large("0")), pa.float64())
    exact = pc.equal(back, numbers).fill_null(False).to_numpy(zero_copy_only=False)
    own = present & ~(ranged & exact)
    if not own.any():
        return text
    return pc.replace_with_mask(text, pa.array(own),
                                pa.array(values[own].astype(str), type=pa.large_string()))


def _large(text: str) -> Any:
    """`text` as an Arrow scalar of the type every column's text has here."""
    import pyarrow as pa

    return pa.scalar(text, pa.large_string())


_PROBES = (0.0, -0.0, 1.0, -1.0, 100.0, 0.1, 0.5, 1e-4, 0.00012345, 2.5e-4, 1234.5678,
           82.3248487012298, 1258291200.0, 9999999999.999998, 123456789.123, -7.25e9,
           0.30000000000000004, 1 / 3, 2 / 3, 5e-4, 1e9)


@functools.lru_cache(maxsize=1)
def _arrow_layout() -> bool:
    """Whether this pyarrow writes floats between 1e-4 and 1e10 as `_float_text` expects
    (NumPy's text less a whole number's '.0'): checked once on values of every layout,
    else NumPy's text is used for every cell."""
    import pyarrow as pa

    probes = np.array(_PROBES)
    arrow = pa.array(probes).cast(pa.string()).to_pylist()
    return all((mine if "." in mine else mine + ".0") == theirs
               for mine, theirs in zip(arrow, probes.astype(str).tolist(), strict=True))


MAX_SVG_BYTES = 1 << 20
"""A figure whose SVG would be larger than this (thousands of points) is kept as PNG."""


@dataclass(frozen=True)
class Picture:
    """A figure rendered in memory, for a page to embed: SVG where it is small enough."""

    name: str
    """The name of the PNG file written beside it (bandwidth_vs_size.png)."""
    mime: str
    """image/svg+xml or image/png."""
    data: bytes


_pictures: ContextVar[list[Picture] | None] = ContextVar("bwprof_pictures", default=None)


@contextmanager
def captured_figures() -> Iterator[list[Picture]]:
    """Within the block, every figure `save_figure` writes is also rendered in memory and
    appended to the list this yields (the HTML report embeds them), whoever draws it."""
    pictures: list[Picture] = []
    token = _pictures.set(pictures)
    try:
        yield pictures
    finally:
        _pictures.reset(token)


def _picture(figure: Any, name: str, png: bytes, options: dict[str, Any]) -> Picture:
    import matplotlib

    buffer = io.BytesIO()
    engine = figure.get_layout_engine()
    figure.set_layout_engine("none")  # the PNG just drawn laid it out: the page's is the same
    try:
        with matplotlib.rc_context({"svg.hashsalt": "bwprof"}):  # the same ids every time
            figure.savefig(buffer, format="svg", metadata={"Date": None},
                           **{k: v for k, v in options.items() if k != "dpi"})
    finally:
        figure.set_layout_engine(engine)
    svg = buffer.getvalue()
    if len(svg) <= MAX_SVG_BYTES:
        return Picture(name, "image/svg+xml", svg)
    return Picture(name, "image/png", png)


def save_figure(figure: Any, target: Path, **options: Any) -> Path:
    """A matplotlib figure as a whole PNG file (and, inside `captured_figures`, in memory)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", **options)
    png = buffer.getvalue()
    with atomic_file(target, binary=True) as handle:
        handle.write(png)
    pictures = _pictures.get()
    if pictures is not None:
        pictures.append(_picture(figure, target.name, png, options))
    return target


def publish_new(target: Path, write: Any, kept: Path | None = None,
                option: str = "--out", folder: int | None = None) -> bool:
    """Write a whole new binary file at `target` unless one is there already: `write(handle)`
    fills a temporary file beside it, flushed to the disk, then hard-linked into place, which
    never replaces a file (two writers of one name: the first wins, the second's file is
    dropped). True where this call made the file, False where `target` was there. A file
    system without hard links gets a rename where the name is free (a writer racing
    another there can then replace the other's file). A write that fails is an OutputError
    of one line naming `option`, and leaves no temporary file. `folder`: as `atomic_file`'s."""
    temp = f".{target.name}.{temporary_suffix()}"
    into: int | None = None
    mine = made = False
    try:
        into, mine = _folder(target, folder)
        with open(target.parent / temp, "xb", opener=no_follow_opener(into)) as handle:
            made = True
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, target.name, src_dir_fd=into, dst_dir_fd=into,
                    follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            try:
                os.lstat(target.name, dir_fd=into)
                return False
            except FileNotFoundError:
                pass
            os.replace(temp, target.name, src_dir_fd=into, dst_dir_fd=into)
            made = False
        return True
    except OSError as exc:
        raise write_failure(target, exc, kept, option=option) from None
    finally:
        _release(temp, into, mine, made)


_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK,
             errno.ENOSYS}
"""What link(2) answers on a file system that has no hard links (FAT, some FUSE and SMB
mounts), as against a real failure (ENOSPC, EACCES, EIO)."""
