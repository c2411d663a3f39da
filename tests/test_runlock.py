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
