"""A run folder belongs to one run: `claim` creates its lock file exclusively (O_EXCL) and
holds an flock on it while the run lives, so a second run given the same --out is refused
and `report`/`compare` can tell a run still going from one that was killed.

The lock file stays in the folder after the run (hidden, a few bytes): its lock, not its
presence, says whether the run is alive.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
from contextlib import suppress
from pathlib import Path

from bwprof.errors import BwprofError

LOCK_FILE = ".bwprof.lock"


class FolderTaken(BwprofError):
    """Another run claimed this folder first."""


class RunLock:
    """The claim on one run folder; `release()` (or process exit) lets it go."""

    def __init__(self, folder: Path, fd: int) -> None:
        self.folder = folder
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def claim(folder: Path) -> RunLock:
    """Claim `folder` (which exists) for this process; FolderTaken where another run has
    it (running or not). A folder that holds nothing but the lock of a run that died before
    writing anything (killed in the instant after its claim) is taken over: the flock, which
    only one process can win, decides between two runs taking it at once."""
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        fd = _take_over(folder)
    with suppress(OSError):  # a file system without flock: the exclusive create still holds
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with suppress(OSError):  # the claim is the file; what it says is for people
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(errors="replace"))
    return RunLock(folder, fd)


def _taken(folder: Path, alive: bool | None) -> FolderTaken:
    return FolderTaken(f"output folder {folder} belongs to another run"
                       f"{' (still running)' if alive else ''}; choose another --out")


def _take_over(folder: Path) -> int:
    """The fd of the lock a dead run left in an otherwise empty `folder`, now locked by
    this process; FolderTaken where the run lives or left anything else."""
    fd = _open_lock(folder, os.O_WRONLY)
    if fd is None:
        raise _taken(folder, running(folder))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise _taken(folder, True) from None
    try:
        others = [entry for entry in os.listdir(folder) if entry != LOCK_FILE]
    except OSError:
        others = ["?"]
    if others:
        os.close(fd)
        raise _taken(folder, False)
    return fd


def _open_lock(folder: Path, mode: int) -> int | None:
    """The lock file opened without blocking (a FIFO of that name must not hang bwprof),
    or None where it is missing or not a regular file."""
    try:
        fd = os.open(folder / LOCK_FILE, mode | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def running(folder: Path) -> bool | None:
    """True while the run that claimed `folder` lives, False once it ended (finished, killed
    or crashed), None where that cannot be told (no lock file: an older bwprof, a merged
    fleet folder; or a file system without flock)."""
    fd = _open_lock(folder, os.O_RDONLY)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False
