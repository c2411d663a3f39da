"""Standard streams that never raise: what bwprof prints is a courtesy, its files are the
record, so a closed, broken, full or narrow-charset stdout must not turn a good run into a
traceback or change its exit code.

`install()` runs first thing in the process (before typer, rich or pandas load):

- a descriptor 0, 1 or 2 the caller closed (`bwprof run >&-`) is reopened on /dev/null, so no
  file bwprof opens later (results.csv) is given fd 1, where a C library or a child process
  writing to "stdout" would corrupt it;
- sys.stdout and sys.stderr become `GuardedStream`s. A broken pipe (`| head -1`) drops the
  rest of the output silently; any other write error (ENOSPC on /dev/full, EIO, EBADF) is said
  once on stderr. Either way the descriptor is pointed at /dev/null, so the interpreter's
  flush at exit is quiet too;
- characters the stream's encoding cannot hold never raise: an ASCII terminal gets a
  replacement ('.' for '·', '?' otherwise), and a file name Python decoded with
  surrogateescape (a non-UTF-8 folder name from argv) is written back as its original bytes.

click's `echo` and rich's Console both write to `sys.stdout`/`sys.stderr` as they are at
each call, so the guard covers them. A GuardedStream deliberately has no `.buffer`: click,
seeing an ASCII stream, would otherwise write around it to the raw buffer.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable, Iterable
from typing import IO

from bwprof import interrupts

ERRORS = "bwprof.terminal"
"""Name of the codec error handler every guarded stream encodes with."""

ASCII_SPELLING = {"·": ".", "×": "x", "→": "->", "←": "<-", "—": "-", "–": "-", "≥": ">=",
                  "≤": "<=", "±": "+/-", "µ": "u", "…": "...", "≈": "~", "°": " deg"}
"""ASCII stand-ins for the non-ASCII characters bwprof's own text uses."""


def _replace_unencodable(exc: UnicodeError) -> tuple[bytes, int]:
    """Codec error handler: surrogate-escaped bytes back as those bytes (not on an ASCII
    stream, which asked for 7 bits), bwprof's own symbols in ASCII, anything else '?'."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    ascii_only = codecs.lookup(exc.encoding).name == "ascii"
    out = bytearray()
    for char in exc.object[exc.start:exc.end]:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF and not ascii_only:
            out.append(code - 0xDC00)
        else:
            out += ASCII_SPELLING.get(char, "?").encode("ascii")
    return bytes(out), exc.end


codecs.register_error(ERRORS, _replace_unencodable)


def _point_at_devnull(fd: int) -> None:
    """Make `fd` a descriptor of /dev/null (reopen a closed one, or replace a broken one)."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    if null != fd:
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
        os.close(null)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def reopen_closed_descriptors(fds: Iterable[int] = (0, 1, 2)) -> list[int]:
    """Put /dev/null on each of `fds` that is closed; the ones reopened."""
    reopened = []
    for fd in fds:
        if not _is_open(fd):
            _point_at_devnull(fd)
            reopened.append(fd)
    return reopened


class GuardedStream(io.TextIOBase):
    """A text stream over `inner` whose write and flush never raise OSError: after the first
    failure the rest is dropped (and `on_error`, given the failure, may say so once)."""

    def __init__(self, inner: IO[str],
                 on_error: Callable[[OSError], None] | None = None) -> None:
        super().__init__()
        self._inner = inner
        self._on_error = on_error
        self.dropped = False
        """True once a write failed: everything after it went nowhere."""

    @property
    def inner(self) -> IO[str]:
        return self._inner

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    @property
    def name(self) -> object:
        return getattr(self._inner, "name", "<guarded>")

    @property
    def line_buffering(self) -> bool:
        return bool(getattr(self._inner, "line_buffering", False))

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def isatty(self) -> bool:
        if self.dropped:
            return False
        try:
            return bool(self._inner.isatty())
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._inner.fileno()

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # what click probes with, to tell text from binary
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self.dropped:
            return len(text)
        try:
            self._inner.write(text)
        except OSError as exc:
            self._fail(exc)
        except ValueError:  # the inner stream was closed under us
            self.dropped = True
        return len(text)

    def flush(self) -> None:
        if self.dropped:
            return
        try:
            self._inner.flush()
        except OSError as exc:
            self._fail(exc)
        except ValueError:
            self.dropped = True

    def close(self) -> None:
        """Flush only: the descriptor belongs to the process, not to whoever closes us."""
        self.flush()

    def abandon(self) -> None:
        """Drop what is still buffered and everything after: the command was interrupted,
        and its exit must not wait on a stalled terminal or an unread pipe."""
        self.dropped = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            _point_at_devnull(self._inner.fileno())

    def _fail(self, exc: OSError) -> None:
        self.dropped = True
        with contextlib.suppress(OSError, ValueError, AttributeError):  # UnsupportedOperation
            _point_at_devnull(self._inner.fileno())  # so the exit-time flush is quiet
        if exc.errno != errno.EPIPE and self._on_error is not None:
            self._on_error(exc)


def _stdout_failed(exc: OSError) -> None:
    reason = exc.strerror or type(exc).__name__
    print(f"warning: stdout could not be written ({reason}); the rest of what bwprof prints "
          f"there is dropped, the files it writes (a run folder) are not affected",
          file=sys.stderr, flush=True)


def _guard(stream: IO[str] | None, fd: int,
           on_error: Callable[[OSError], None] | None) -> GuardedStream:
    if isinstance(stream, GuardedStream):
        return stream
    if stream is None:  # the descriptor was closed when Python started: now /dev/null
        stream = open(fd, "w", encoding="utf-8", errors=ERRORS,  # noqa: SIM115
                      closefd=False)
    elif isinstance(stream, io.TextIOWrapper):
        with contextlib.suppress(OSError, ValueError):
            stream.reconfigure(errors=ERRORS)
    return GuardedStream(stream, on_error)


def install() -> None:
    """Reopen closed standard descriptors on /dev/null and guard sys.stdout and sys.stderr
    (idempotent). A stop signal meanwhile is held until both are done: raised inside
    TextIOWrapper.reconfigure (its new encoder's __init__ is Python code), it left stderr
    unable to write, and the interrupted run exited 130 without its line."""
    with interrupts.deferred():
        reopen_closed_descriptors()
        sys.stderr = _guard(sys.stderr, 2, None)
        sys.stdout = _guard(sys.stdout, 1, _stdout_failed)


def flush() -> None:
    """Flush both streams (never raises: they are guarded, or None)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def abandon_stdout() -> None:
    """After an interrupt: stdout's pending output is dropped (a guarded stdout only)."""
    if isinstance(sys.stdout, GuardedStream):
        sys.stdout.abandon()
