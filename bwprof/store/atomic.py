"""Whole files written so that a reader sees the old file or the new one, never a torn one:
a temporary file in the same folder, flushed to the disk, renamed over its target.

Every file bwprof writes whole goes through here (system.json, findings.csv, summary.csv,
compare.csv, timelines.json, Parquet copies, plots); a write that fails is an OutputError of
one line (`bwprof.errors.write_failure`) and leaves no temporary file.
"""

from __future__ import annotations

import errno
import io
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bwprof.errors import write_failure
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
    """A table (DataFrame) as a whole CSV file, its text cells safe in a spreadsheet."""
    with atomic_file(target, kept=kept) as handle:
        spreadsheet_frame(frame).to_csv(handle, index=False)
    return target


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
