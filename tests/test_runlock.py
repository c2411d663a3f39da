"""A run folder is claimed by one run; its lock says whether that run still lives."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bwprof import runlock


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
             "from bwprof import runlock; print(runlock.running(Path(sys.argv[1])))",
             str(tmp_path)]
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout == "True\n"
    lock.release()
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_killed_run_leaves_a_lock_nobody_holds(tmp_path):
    child = subprocess.run(
        [sys.executable, "-c", "import os, sys; from pathlib import Path; "
         "from bwprof import runlock; runlock.claim(Path(sys.argv[1])); "
         "os.kill(os.getpid(), 9)", str(tmp_path)])
    assert child.returncode == -9
    assert runlock.running(tmp_path) is False


def test_the_lock_of_a_run_killed_before_it_wrote_anything_is_taken_over(tmp_path):
    child = subprocess.run(
        [sys.executable, "-c", "import os, sys; from pathlib import Path; "
         "from bwprof import runlock; runlock.claim(Path(sys.argv[1])); "
         "os.kill(os.getpid(), 9)", str(tmp_path)])
    assert child.returncode == -9
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
    import time

    real_link = os.link

    def slow_link(source, target):
        if threading.current_thread().name == "first":
            time.sleep(0.3)  # preempted just before the lock is published
        real_link(source, target)

    monkeypatch.setattr(os, "link", slow_link)
    outcomes: dict[str, object] = {}

    def take(name: str) -> None:
        try:
            outcomes[name] = runlock.claim(tmp_path)
        except runlock.FolderTaken as exc:
            outcomes[name] = exc

    first = threading.Thread(target=take, args=("first",), name="first")
    first.start()
    time.sleep(0.1)
    take("second")
    first.join()
    claimed = [v for v in outcomes.values() if isinstance(v, runlock.RunLock)]
    assert len(claimed) == 1, outcomes
    assert isinstance(outcomes["first"], runlock.FolderTaken)
    assert "still running" in str(outcomes["first"])
    claimed[0].release()
    assert sorted(os.listdir(tmp_path)) == [runlock.LOCK_FILE]  # no temporary file left


def test_debris_of_a_killed_run_does_not_bar_its_folder(tmp_path):
    runlock.claim(tmp_path).release()
    (tmp_path / ".system.json.4242.tmp").write_text("{")
    (tmp_path / f"{runlock.LOCK_FILE}.4242-77.tmp").write_text("")
    runlock.claim(tmp_path).release()
    assert runlock.is_debris(".system.json.4242.tmp")
    assert not runlock.is_debris("system.json") and not runlock.is_debris(".hidden.tmp")


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
