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
    it (running or not)."""
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise FolderTaken(f"output folder {folder} belongs to another run"
                          f"{' (still running)' if running(folder) else ''}; "
                          "choose another --out") from None
    with suppress(OSError):  # a file system without flock: the exclusive create still holds
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with suppress(OSError):  # the claim is the file; what it says is for people
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(errors="replace"))
    return RunLock(folder, fd)


def running(folder: Path) -> bool | None:
    """True while the run that claimed `folder` lives, False once it ended (finished, killed
    or crashed), None where that cannot be told (no lock file: an older bwprof, a merged
    fleet folder; or a file system without flock)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
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
