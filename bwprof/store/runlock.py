"""A run folder belongs to one run: `claim` creates its lock file exclusively (O_EXCL) and
holds an flock on it while the run lives, so a second run given the same --out is refused
and `report`/`compare` can tell a run still going from one that was killed.

The lock file stays in the folder after the run (hidden, a few bytes): its lock, not its
presence, says whether the run is alive.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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
    it (running or not); OSError where the folder cannot be written.

    The lock file is made and locked under a temporary name, then linked into place, so no
    other run can ever see it unlocked (a lock created in place would be, for an instant,
    and a second run could take it then). A folder that holds nothing but the lock of a run
    that died before writing anything (killed in the instant after its claim), and that
    run's debris, is taken over: the flock, which only one process wins, decides between
    two runs taking it at once."""
    path = folder / LOCK_FILE
    temp = folder / f"{LOCK_FILE}.{temporary_suffix()}"
    fd: int | None = os.open(temp, _NEW, 0o644)
    try:
        assert fd is not None
        _lock(fd)
        _say_who(fd)
        try:
            os.link(temp, path)
        except FileExistsError:
            os.close(fd)
            fd = None
            fd = _take_over(folder)
        except OSError:  # a file system without hard links: create in place, then lock
            os.close(fd)
            fd = None
            fd = _create_in_place(folder)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    finally:
        with suppress(OSError):
            temp.unlink()
    return RunLock(folder, fd)


_NEW = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
"""A file bwprof makes under a name of its own: never one that exists, never through a
symlink planted at that name (which would write wherever it points, as root anywhere)."""


def temporary_suffix() -> str:
    """`bwprof-<pid>-<random>.tmp`: the end of every temporary file's name, unique across
    processes and hosts sharing a folder, and what `is_debris` knows them by."""
    return f"bwprof-{os.getpid()}-{secrets.token_hex(4)}.tmp"


def is_debris(name: str) -> bool:
    """Whether a file of this name is what a bwprof run killed mid-write leaves behind (a
    temporary file: `.system.json.bwprof-123-9f0c1a2b.tmp`), never anyone's data."""
    return bool(_DEBRIS.fullmatch(name))


_DEBRIS = re.compile(r"\..+\.bwprof-[0-9]+-[0-9a-f]+\.tmp")


def _lock(fd: int) -> None:
    """flock `fd` for this process; nothing where the file system has no flock (the
    exclusive link or create still makes the claim); BlockingIOError where another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError:
        pass


def _say_who(fd: int) -> None:
    with suppress(OSError):  # the claim is the file; what it says is for people
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(errors="replace"))


def _create_in_place(folder: Path) -> int:
    try:
        fd = os.open(folder / LOCK_FILE, _NEW, 0o644)
    except FileExistsError:
        return _take_over(folder)
    try:
        _lock(fd)
    except BlockingIOError:  # another run took it over in the instant before the lock
        os.close(fd)
        raise _taken(folder, True) from None
    _say_who(fd)
    return fd


def _taken(folder: Path, alive: bool | None) -> FolderTaken:
    return FolderTaken(f"output folder {folder} belongs to another run"
                       f"{' (still running)' if alive else ''}; choose another --out")


def _take_over(folder: Path) -> int:
    """The fd of the lock a dead run left in an otherwise empty `folder` (debris aside), now
    locked by this process; FolderTaken where the run lives or left anything else, or where
    that cannot be told (a file system without flock: a live run's lock looks the same)."""
    fd = _open_lock(folder, os.O_WRONLY)
    if fd is None:
        raise _taken(folder, running(folder))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise _taken(folder, isinstance(exc, BlockingIOError)) from None
    try:  # still the folder's lock: not one a run giving the folder back has just unlinked
        held, named = os.fstat(fd), os.stat(folder / LOCK_FILE, follow_symlinks=False)
        same = (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)
        others = [entry for entry in os.listdir(folder)
                  if entry != LOCK_FILE and not is_debris(entry)]
    except OSError:
        same, others = False, []
    if not same or others:
        os.close(fd)
        raise _taken(folder, False)
    _say_who(fd)
    return fd


def _open_lock(folder: Path, mode: int) -> int | None:
    """The lock file opened without blocking (a FIFO of that name must not hang bwprof) and
    without following a symlink (bwprof would write where it points), or None where it is
    missing or not a regular file."""
    try:
        fd = os.open(folder / LOCK_FILE, mode | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
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


@contextmanager
def waiting_for(path: Path) -> Iterator[None]:
    """Hold an flock on the lock file `path` (made where missing; never a link, a FIFO or
    anything but a regular file), waiting while another process holds it: the ranks of a
    fleet job that each may merge the job's folder in a silent rank 0's place take turns
    (`bwprof.fleet.run`), so one writes it and the others find it written. OSError where the
    file cannot be made or opened; on a file system without flock, no wait."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with suppress(OSError):  # no flock here: the caller's own check decides
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock
