"""A run folder is claimed by one run; its lock says whether that run still lives."""

from __future__ import annotations

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


def test_a_claim_is_refused_after_its_run_ended_too(tmp_path):
    runlock.claim(tmp_path).release()
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
