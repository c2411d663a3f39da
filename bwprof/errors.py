"""The project's own exceptions and the exit codes they stand for; the CLI turns them into
one-line messages and those codes (docs/command-line.md's table lists them)."""

from __future__ import annotations

import errno
import shutil
from contextlib import suppress
from pathlib import Path
from typing import Any

from bwprof.units import format_bytes

EXIT_OK = 0
EXIT_FAILED = 1
"""Something measured or checked failed: a figure failed validation or raised (a fleet rank
that failed or hung included), `compare --fail-below` found a regression, `accept` found a
check that fails, `kernels` could not compile a kernel, `monitor` could read nothing. The
table in docs/command-line.md lists each."""
EXIT_USAGE = 2
"""Bad input: an option, a path or a file that is not what bwprof needs; nothing measured."""
EXIT_OUTPUT = 3
"""bwprof could not write its output (disk full, read-only or vanished folder, I/O error), or
memory ran out (while reading a file as well as writing: never EXIT_USAGE, the file is not at
fault), or open files did (`ulimit -n`: EMFILE, ENFILE); every row written before the failure
is kept and readable."""
EXIT_INTERRUPTED = 130
"""Ctrl-C, SIGTERM, SIGHUP or SIGQUIT stopped the command; a run keeps its finished rows."""


class BwprofError(Exception):
    """Bad input or an environment problem the user can fix; the message says what to do."""

    exit_code = EXIT_USAGE


class OutputError(BwprofError):
    """A file bwprof had to write could not be written (ENOSPC, EROFS, EIO...): the message
    names the file and, for a full disk, the space left; exit code EXIT_OUTPUT."""

    exit_code = EXIT_OUTPUT


class WriteFailed(OutputError):
    """A file could not be written: `path` and `reason` ('No space left on device (12 KiB
    free there)') for callers that say it their own way."""

    def __init__(self, message: str, path: Path, reason: str) -> None:
        super().__init__(message)
        self.path, self.reason = path, reason


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):
        with suppress(OSError):
            if folder.is_dir():
                return shutil.disk_usage(folder).free
    return None


def write_failure(path: Path, exc: OSError, kept: Path | None = None,
                  option: str = "--out") -> WriteFailed:
    """The one line for a write of `path` that failed: the file, why, for a full disk the
    space left, and (`kept`, a run folder) that the rows finished before are still there;
    `option` is the one that chose the place."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    advice = f"choose another {option}"
    if exc.errno in OUT_OF_FILES:
        advice = "raise the open-file limit (ulimit -n) and run it again"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = _free_bytes(path.parent)
        reason += f" ({format_bytes(free)} free there)" if free is not None else ""
        advice = f"free some space or choose another {option}"
    elif exc.errno == errno.ENOENT:
        reason += " (its folder was removed)"
    text = f"cannot write {path}: {reason}"
    if kept is not None:
        text += f"; the rows finished before are kept in {kept}"
    return WriteFailed(f"{text}; {advice}", path, reason)


OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)
"""No file descriptor left (`ulimit -n`, the system's table): a resource, like memory."""


def raise_if_no_memory(exc: BaseException) -> None:
    """Re-raise `exc` where it is memory running out (MemoryError, pyarrow's
    ArrowMemoryError, an OSError ENOMEM), as a MemoryError, or file descriptors running out
    (an OSError EMFILE or ENFILE), as it is: never the file's fault, so never a BwprofError
    (exit 2) but the entry point's one line and exit 3, wherever it happened."""
    if isinstance(exc, MemoryError):
        raise exc
    if isinstance(exc, OSError) and exc.errno in OUT_OF_FILES:
        raise exc
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        raise MemoryError(exc.strerror or str(exc)) from exc


class RunInterrupted(KeyboardInterrupt):
    """A stop signal arrived during a run; `result` holds every row finished before it."""

    def __init__(self, result: Any) -> None:
        super().__init__("run interrupted")
        self.result = result
