"""A run folder is claimed by one run; its lock says whether that run still lives."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bwprof.store import runlock


def test_a_second_claim_is_refused_while_the_first_holds_it(tmp_path):
    lock = runlock.claim(tmp_path)
    try:
        with pytest.raises(runlock.FolderTaken, match="still running"):
            runlock.claim(tmp_path)
    finally:
        lock.release()


def test_a_claim_is_refused_after_its_run_ended_and_left_its_files(tmp_path):
    runlock.claim(tmp_path).release()
    (tmp_path / "results.csv").write_text("case\n")
    with pytest.raises(runlock.FolderTaken, match="another run"):
        runlock.claim(tmp_path)


def test_running_tells_a_live_run_from_one_that_ended(tmp_path):
    assert runlock.running(tmp_path) is None  # no lock file: cannot tell
    lock = runlock.claim(tmp_path)
    probe = [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from bwprof.store import runlock; print(runlock.running(Path(sys.argv[1])))",
             str(tmp_path)]
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout == "True\n"
    lock.release()
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout == "False\n"


def _killed_right_after_its_claim(folder):
    """A run (a child process) that claims `folder` and is killed with SIGKILL at once."""
    child = subprocess.run(
        [sys.executable, "-c", "import os, sys; from pathlib import Path; "
         "from bwprof.store import runlock; runlock.claim(Path(sys.argv[1])); "
         "os.kill(os.getpid(), 9)", str(folder)])
    assert child.returncode == -9


def test_a_killed_run_leaves_a_lock_nobody_holds(tmp_path):
    _killed_right_after_its_claim(tmp_path)
    assert runlock.running(tmp_path) is False


def test_the_lock_of_a_run_killed_before_it_wrote_anything_is_taken_over(tmp_path):
    _killed_right_after_its_claim(tmp_path)
    lock = runlock.claim(tmp_path)
    try:
        assert runlock.running(tmp_path) is True
        with pytest.raises(runlock.FolderTaken, match="still running"):
            runlock.claim(tmp_path)
    finally:
        lock.release()


def test_a_fifo_named_like_the_lock_neither_blocks_nor_counts_as_a_run(tmp_path):
    os.mkfifo(tmp_path / runlock.LOCK_FILE)
    assert runlock.running(tmp_path) is None
    with pytest.raises(runlock.FolderTaken):
        runlock.claim(tmp_path)


# Catches: the lock was created in place and locked an instant later; a second run that
# looked in that instant took the unheld lock over, and both ran in one folder
def test_a_lock_is_never_seen_unlocked_while_it_is_being_claimed(tmp_path, monkeypatch):
    import threading

    real_link = os.link
    published, looked = threading.Event(), threading.Event()

    def slow_after_link(source, target):
        real_link(source, target)
        if threading.current_thread().name == "first":
            published.set()  # preempted just after the lock is published,
            looked.wait(120)  # until the second run has looked (a guard, should it hang)

    monkeypatch.setattr(os, "link", slow_after_link)
    outcomes: dict[str, object] = {}

    def take(name: str) -> None:
        try:
            outcomes[name] = runlock.claim(tmp_path)
        except runlock.FolderTaken as exc:
            outcomes[name] = exc

    first = threading.Thread(target=take, args=("first",), name="first")
    first.start()
    try:
        assert published.wait(120), "the first claim never published its lock"
        take("second")  # sees the published lock: it must already be held
    finally:
        looked.set()
        first.join()
    assert isinstance(outcomes["first"], runlock.RunLock), outcomes
    assert isinstance(outcomes["second"], runlock.FolderTaken)
    assert "still running" in str(outcomes["second"])
    outcomes["first"].release()
    assert sorted(os.listdir(tmp_path)) == [runlock.LOCK_FILE]  # no temporary file left


# Catches (the second review): giving a folder back let the lock go before unlinking it, so
# a run taking it over in between held a lock on a deleted file, and a third run claimed
# the folder too
def test_a_folder_given_back_cannot_be_taken_over_through_its_vanishing_lock(tmp_path):
    from bwprof.store.export import prepare_run_dir

    folder = tmp_path / "run"
    folder.mkdir()  # the user's folder: giving it back leaves it
    claim = prepare_run_dir(folder)
    second: list[runlock.RunLock] = []
    release = claim.lock.release

    def and_another_run_claims_at_once() -> None:
        release()
        second.append(runlock.claim(folder))  # the instant the flock is let go

    claim.lock.release = and_another_run_claims_at_once  # type: ignore[method-assign]
    claim.abandon()
    (taken,) = second
    assert (folder / runlock.LOCK_FILE).is_file()  # its lock was not unlinked under it
    assert runlock.running(folder) is True
    with pytest.raises(runlock.FolderTaken, match="still running"):
        runlock.claim(folder)
    taken.release()


def test_a_lock_replaced_under_a_taker_is_not_taken_over(tmp_path, monkeypatch):
    runlock.claim(tmp_path).release()  # a dead run's lone lock
    real_flock = runlock.fcntl.flock

    def replaced_meanwhile(fd, operation):
        real_flock(fd, operation)
        os.replace(tmp_path / "other", tmp_path / runlock.LOCK_FILE)  # another run's, now

    (tmp_path / "other").write_text("")
    monkeypatch.setattr(runlock.fcntl, "flock", replaced_meanwhile)
    with pytest.raises(runlock.FolderTaken):
        runlock._take_over(tmp_path)


# Catches (the second review): without flock (NFS mounted nolock), a live run's lone lock
# was taken over as a dead one's
def test_without_flock_a_lock_is_never_taken_over(tmp_path, monkeypatch):
    import errno

    lock = runlock.claim(tmp_path)

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(runlock.fcntl, "flock", no_locks)
    with pytest.raises(runlock.FolderTaken):
        runlock.claim(tmp_path)
    lock.release()


# Catches (the second review): a symlink planted as the lock made bwprof truncate and write
# the file it points at (as root, any file)
def test_a_symlink_named_like_the_lock_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious data\n")
    (tmp_path / "run").mkdir()
    os.symlink(victim, tmp_path / "run" / runlock.LOCK_FILE)
    with pytest.raises(runlock.FolderTaken):
        runlock.claim(tmp_path / "run")
    assert victim.read_text() == "precious data\n"
    assert runlock.running(tmp_path / "run") is None


def test_debris_of_a_killed_run_does_not_bar_its_folder(tmp_path):
    runlock.claim(tmp_path).release()
    (tmp_path / ".system.json.bwprof-4242-9f0c1a2b.tmp").write_text("{")
    (tmp_path / f"{runlock.LOCK_FILE}.bwprof-4242-00ff00ff.tmp").write_text("")
    runlock.claim(tmp_path).release()
    assert runlock.is_debris(f".summary.csv.{runlock.temporary_suffix()}")
    for name in ("system.json", ".hidden.tmp", ".notes.2024.tmp", ".x.4242.tmp"):
        assert not runlock.is_debris(name)  # a user's file is never debris


def test_a_folder_without_hard_links_is_still_claimed_once(tmp_path, monkeypatch):
    def no_links(source, target):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    lock = runlock.claim(tmp_path)
    try:
        with pytest.raises(runlock.FolderTaken, match="still running"):
            runlock.claim(tmp_path)
        assert sorted(os.listdir(tmp_path)) == [runlock.LOCK_FILE]
    finally:
        lock.release()
