"""Reading the files of a run folder with bounded effort (the strings they hold are made
safe to print by `bwprof.schema.text`).

Everything `bwprof report`, `bwprof compare` and `bwprof.load` read from a folder comes
through here, so a file that is not what bwprof wrote costs one checked step: never a hang,
a traceback or the machine's memory.

- Only a regular file is opened: a FIFO named results.csv would block the reader forever, a
  device stream forever. `os.lstat` says which before the file is opened, and `fstat` of the
  opened file says it again (the name may change in between).
- A symbolic link is followed only to a regular file outside /proc, /sys and /dev (a
  git-annex or DVC object, a folder assembled by hand), checked again on the opened file;
  any other link is refused (the open says O_NOFOLLOW): a folder is untrusted input, and a
  results.csv planted as a link to /proc/self/environ would be read as this run's. A file
  the user named themselves (a --spec) is read through any link (`follow`).
- A file larger than its kind's bound is refused from its size alone, before it is read;
  a table with a line longer than any row bwprof writes, from a scan in small pieces.
- Bytes that are not UTF-8 are refused, with the offset of the first bad one.
- JSON is measured for depth before the parser sees it: the parser recurses once a level,
  and so does every reader of what it returns.
- Every refusal is a BwprofError of one line naming the file.

The limits, in one place, are the constants below.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bwprof.errors import BwprofError, raise_if_no_memory
from bwprof.schema.text import printable_tree, shown
from bwprof.units import GiB, MiB, format_bytes

MAX_JSON_BYTES = 64 * MiB
"""system.json and timelines.json. One node's system.json is 5-20 kB (NVML's fields for each
GPU); a fleet run's holds every node's, about 20 MB for a thousand 8-GPU nodes."""
MAX_TABLE_BYTES = 1 * GiB
"""results.csv (or .parquet), samples.csv, findings.csv, timings.csv. samples.csv is the
largest: 8 GPUs sampled every 50 ms write about 170 MB an hour, so this holds a working
day of such a run, and still fits a laptop's memory once parsed."""
MAX_TABLE_LINE = 16 * MiB
"""One line of a table: a row bwprof writes is a few kB (a 100,000-character device name or
note at the very most). A longer one is damage, refused from a scan of the file in 1 MiB
pieces before it is read whole: read, decoded and parsed, a 300 MB line took over a GB, so
under a memory limit the file's damage came out as 'out of memory' (exit 3), not as the bad
input it is (exit 2)."""
MAX_TABLE_COLUMNS = 1024
"""bwprof's tables have at most about 60 columns; a header of millions would cost pandas
minutes before any check could run."""
MAX_TABLE_CELLS = 200_000_000
"""Rows × columns of one table (8 bytes a cell parsed: 1.6 GB): a file of empty cells
(`,,,,`) must not turn MAX_TABLE_BYTES into eight times as much memory. A day of samples is
well under it."""
MAX_JSON_DEPTH = 64
"""bwprof's JSON nests 6 levels at most (a GPU's NVML fields in system.json)."""
MAX_INT = 1 << 63
"""Integers of system.json fit in 64 bits (sizes, counts, clocks): a larger one could only
overflow the arithmetic and the float conversions of the report."""
MAX_TIMELINES = 100_000
"""Recorded timelines in one timelines.json: a run records one per overlap case, device and
pipeline configuration (tens); a fleet's merge, those of every node."""
MAX_LANES = 1024
"""Lanes of one timeline: one per CUDA stream (a pipeline uses up to 16)."""
MAX_MESSAGE = 5000
"""A refusal quotes at most this many characters (a path may be 4 kB; a cell or key that a
hostile file makes megabytes long is cut)."""

_KINDS = {
    stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}

# -- bounded reading --------------------------------------------------------------------------


class MissingFile(BwprofError):
    """The file does not exist (an optional file of a run is then simply absent)."""


class Unreadable(BwprofError):
    """The file is there but the system would not read it (permission denied, an I/O
    error): nothing is known of its content, as against a file that was read
    and is not what bwprof wrote."""


def _reason(exc: OSError) -> str:
    return exc.strerror or (str(exc).splitlines() or [type(exc).__name__])[0]


def link_note(path: Path) -> str:
    """' (to TARGET)' for a symbolic link at `path` ('' where it cannot be read): what
    every refusal of a link names."""
    try:
        return f" (to {shown(Path(os.readlink(path)))})"
    except (OSError, ValueError):
        return ""


PSEUDO_FOLDERS = ("/proc", "/sys", "/dev")
"""A link inside a run folder is never followed into these: their files are the kernel's
(a results.csv linked to /proc/self/environ would be read as this run's), not a run's."""


def _pseudo(real: str) -> str | None:
    """The one of PSEUDO_FOLDERS that `real`, a resolved path, lies in (None: none)."""
    return next((top for top in PSEUDO_FOLDERS
                 if real == top or real.startswith(top + "/")), None)


def _refused_link(path: Path, what: str) -> BwprofError:
    return BwprofError(f"cannot read {shown(path)}: it is a symbolic link{link_note(path)}"
                       f"{what}, not a file bwprof wrote; bwprof follows a link inside a "
                       "folder it reads only to a regular file outside /proc, /sys and /dev: "
                       "put the file itself there")


def _linked(path: Path) -> os.stat_result:
    """The stat of the file the symbolic link `path` leads to, where that is a regular file
    outside /proc, /sys and /dev (a git-annex or DVC object, a folder assembled by hand);
    BwprofError naming the link otherwise."""
    try:
        real = os.path.realpath(path, strict=True)
        info = os.stat(real)
    except FileNotFoundError:
        raise _refused_link(path, " to nothing") from None
    except (OSError, ValueError) as exc:  # a loop of links, a name it cannot hold
        reason = _reason(exc) if isinstance(exc, OSError) else str(exc)
        raise _refused_link(path, f" that cannot be followed ({reason})") from None
    top = _pseudo(real)
    if top is not None:
        raise _refused_link(path, f" into {top}")
    kind = stat.S_IFMT(info.st_mode)
    if kind != stat.S_IFREG:
        raise _refused_link(path, f" to {_KINDS.get(kind, 'not a regular file')}")
    return info


def _opened_outside(fd: int, path: Path) -> None:
    """Where a link was followed: the file opened is not one of /proc, /sys or /dev (the
    link may have been changed since it was checked)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: the check before the open stands
        return
    top = _pseudo(real)
    if top is not None:
        raise _refused_link(path, f" into {top}")


def _check(info: os.stat_result, path: Path, limit: int) -> None:
    kind = stat.S_IFMT(info.st_mode)
    if kind == stat.S_IFLNK:
        raise _refused_link(path, "")
    if kind != stat.S_IFREG:
        what = _KINDS.get(kind, "not a regular file")
        raise BwprofError(f"cannot read {shown(path)}: it is {what}, not a file bwprof wrote")
    if info.st_size > limit:
        raise BwprofError(f"{shown(path)} is {format_bytes(info.st_size)}, more than bwprof "
                          f"reads from such a file ({format_bytes(limit)}); it is not one "
                          "bwprof wrote")


def _stat(path: Path, limit: int, follow: bool,
          links: bool = True) -> tuple[os.stat_result, bool]:
    """The stat of `path` checked (`_check`), and whether it is a link followed to it
    (without `links`, a link is refused)."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise MissingFile(f"{shown(path)} does not exist") from None
    except OSError as exc:
        raise_if_no_memory(exc)
        raise Unreadable(f"cannot read {shown(path)}: {_reason(exc)}") from None
    except ValueError as exc:  # a NUL in the name
        raise BwprofError(f"cannot read {shown(path)}: {exc}") from None
    linked = links and not follow and stat.S_ISLNK(info.st_mode)
    if linked:
        info = _linked(path)
    _check(info, path, limit)
    return info, linked


def file_size(path: Path, limit: int, follow: bool = False, links: bool = True) -> int:
    """The size of `path`, a regular file (or a link to one outside /proc, /sys and /dev,
    unless not `links`; with `follow`, a link the user named, to anything) of at most
    `limit` bytes; BwprofError naming it otherwise (MissingFile where it does not exist)."""
    return _stat(path, limit, follow, links)[0].st_size


def read_bytes(path: Path, limit: int, follow: bool = False, to_end: bool = False,
               links: bool = True, max_line: int | None = None) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes, read without following
    it anywhere that could block or stream (see the module's doc); `follow`: a symbolic
    link the user named is followed. Without `to_end`, the file as long as it was when
    opened (a run still appending rows); with it, read to its end whatever its size said
    (a /proc or sysfs file says 0 bytes and has content), still at most `limit`. Without
    `links`, no link is followed (a file bwprof itself wrote there, such as a cached plot).
    With `max_line`, a file with a longer line is refused before it is read whole
    (`_check_lines`)."""
    _info, linked = _stat(path, limit, follow, links)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags if follow or linked else flags | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise MissingFile(f"{shown(path)} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:  # made a link since the lstat
            raise _refused_link(path, "") from None
        raise_if_no_memory(exc)
        raise Unreadable(f"cannot read {shown(path)}: {_reason(exc)}") from None
    try:
        with os.fdopen(fd, "rb") as file:
            if linked:
                _opened_outside(file.fileno(), path)
            info = os.fstat(file.fileno())
            _check(info, path, limit)  # replaced since the stat?
            if max_line is not None:
                _check_lines(file.fileno(), info.st_size, path, max_line)
            if not to_end:
                # The file as it was at fstat: a run still writing appends rows meanwhile,
                # and its last line, if cut, is the CSV reader's to leave out.
                return file.read(info.st_size)
            data = file.read(limit + 1)
            if len(data) > limit:
                raise BwprofError(f"{shown(path)} is more than bwprof reads from such a file "
                                  f"({format_bytes(limit)})")
            return data
    except OSError as exc:
        raise_if_no_memory(exc)
        raise Unreadable(f"cannot read {shown(path)}: {_reason(exc)}") from None


_SCAN = 1 << 20


def _check_lines(fd: int, size: int, path: Path, max_line: int) -> None:
    """BwprofError where a line of the first `size` bytes of the open file `fd` is longer
    than `max_line` bytes, found reading it in 1 MiB pieces (memory: one piece), before the
    caller reads it whole; at memchr's speed, a fraction of what parsing the file costs."""
    piece = bytearray(_SCAN)
    run = lines = offset = 0  # bytes since the last newline; newlines before; where
    with memoryview(piece) as view:
        while offset < size:
            got = os.preadv(fd, [view[:min(_SCAN, size - offset)]], offset)
            if got <= 0:  # shorter than it said (cut meanwhile): the reader sees the rest
                return
            first = piece.find(b"\n", 0, got)
            if run + (got if first < 0 else first) > max_line:
                raise BwprofError(
                    f"{shown(path)} has a line (line {lines + 1}) of more than "
                    f"{format_bytes(max_line)}, longer than any row bwprof writes; it is not "
                    "a table bwprof wrote")
            if first < 0:
                run += got
            else:
                lines += piece.count(b"\n", 0, got)
                run = got - 1 - piece.rfind(b"\n", 0, got)
            offset += got


def utf8_text(data: bytes, path: Path) -> str:
    """`data` decoded as UTF-8 (a byte-order mark, which an editor may add, dropped)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BwprofError(f"{shown(path)} is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                          f"offset {exc.start}); bwprof writes UTF-8: it is damaged or not "
                          "bwprof's") from None


def read_text(path: Path, limit: int, max_line: int | None = MAX_TABLE_LINE) -> str:
    """A UTF-8 text file of at most `limit` bytes, of lines of at most `max_line` bytes (a
    table's: `MAX_TABLE_LINE`), see `read_bytes`."""
    return utf8_text(read_bytes(path, limit, max_line=max_line), path)


_STEP = np.zeros(256, dtype=np.int64)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1
_QUOTE = ord('"')
_CHUNK = 1 << 20
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))
"""Every byte but quotes and brackets: the only ones that change a depth."""


def json_depth(data: bytes, stop_above: int | None = None) -> int:
    """How deep the arrays and objects of JSON text nest (brackets inside strings are not
    counted), without parsing it: linear in its size, vectorised, never recursive. Stops
    counting once past `stop_above`."""
    # Escaped backslashes first, then escaped quotes: what is left of `"` delimits strings
    # (replace works left to right without overlaps, as JSON reads escapes). Then only the
    # quotes and brackets are kept (a tenth of bwprof's JSON): the rest neither opens a
    # level nor a string, and costs the counting below ten times its time.
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    bare = np.frombuffer(data.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    quotes = level = deepest = 0
    for start in range(0, len(bare), _CHUNK):
        part = bare[start:start + _CHUNK]
        seen = np.cumsum(part == _QUOTE) + quotes  # quotes up to here: odd inside a string
        levels = np.cumsum(np.where(seen % 2 == 0, _STEP[part], 0)) + level
        deepest = max(deepest, int(levels.max()))
        quotes, level = int(seen[-1]), int(levels[-1])
        if stop_above is not None and deepest > stop_above:
            break
    return deepest


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not a number JSON allows")


_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


_GC_LOCK = threading.Lock()
_gc_pauses = 0  # gc_paused blocks under way, in every thread
_gc_resume = False  # whether the collector was enabled when the outermost began


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector paused while a fleet's rows or its system.json become Python
    objects (records, ResultRows, a parsed tree of millions of containers): none of them is
    part of a cycle, so reference counting frees them all the same, and each of its full
    collections walked every object made so far (a fifth of a report's CPU at 100,000 rows).
    Resumed after, as it was. Pauses nest, also across threads (compare loads its folders
    two at a time): a count under a lock, so only the outermost pause's end resumes it (one
    thread's end must not resume it under another's), and only where it was enabled when the
    first began (a caller's own gc.disable() is kept). Disabled inside the `try`, so that an
    interrupt right after cannot leave it off."""
    global _gc_pauses, _gc_resume
    counted = False
    try:
        with _GC_LOCK:
            if _gc_pauses == 0:
                _gc_resume = gc.isenabled()
            _gc_pauses += 1
            counted = True
            gc.disable()
        yield
    finally:
        if counted:
            with _GC_LOCK:
                _gc_pauses -= 1
                if _gc_pauses == 0 and _gc_resume:
                    gc.enable()


def settle_young_objects() -> None:
    """Move every object the cyclic collector tracks into its oldest generation, without a
    collection: what a caller just built and keeps (a fleet's typed system.json, some
    300,000 containers, none in a cycle) would otherwise be walked by the next young
    collection and again by the middle one before it got there (0.4 s of a fleet's load,
    freeing nothing). Garbage cycles made meanwhile are still found, by the next full
    collection. `gc.freeze` then `gc.unfreeze` is that move; skipped where the program
    froze objects of its own, which unfreezing would release."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def read_json(path: Path, *, strict: bool = True, limit: int = MAX_JSON_BYTES,
              max_depth: int = MAX_JSON_DEPTH) -> object:
    """A JSON file of at most `limit` bytes nested at most `max_depth` deep, its strings
    `printable`; `strict` refuses NaN and Infinity (system.json never holds them).
    BwprofError naming the file for anything else."""
    data = read_bytes(path, limit)
    if not data or data.isspace():  # what strip() would leave nothing of, without its copy
        raise BwprofError(f"{shown(path)} is empty ({'0 bytes' if not data else 'blank'}): "
                          "there is no JSON in it")
    text = utf8_text(data, path)
    if json_depth(data, stop_above=max_depth) > max_depth:
        raise BwprofError(f"{shown(path)} is malformed: nested too deeply to be bwprof's "
                          f"(more than {max_depth} levels)")
    constant: Callable[[str], object] | None = _not_json if strict else None
    try:
        with gc_paused():
            parsed = json.loads(text, parse_constant=constant)
    except RecursionError:  # not reached within max_depth; kept as a last guard
        raise BwprofError(f"{shown(path)} is malformed: nested too deeply to be bwprof's"
                          ) from None
    except ValueError as exc:  # JSONDecodeError is one; so is an integer of 5,000 digits
        raise BwprofError(f"{shown(path)} is malformed: {str(exc).splitlines()[0]}") from None
    return printable_tree(parsed) if _ESCAPED_SURROGATE.search(data) else parsed
