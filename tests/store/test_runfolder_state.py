"""What became of a run, as reading sees it: a run a signal stopped only in its final files,
after every case was measured, holds every row and reads as finished (issue 37)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import bwprof
from bwprof import cli
from bwprof.store.runfolder import AFTER_EVERY_CASE

DATA = Path(__file__).resolve().parents[1] / "data"


def _stopped(tmp_path: Path, stopped_by: str) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(DATA / "host-ddr-v2", folder)  # a measurement (the history keeps those)
    system = json.loads((folder / "system.json").read_text())
    system.update(interrupted=True, stopped_by=stopped_by)
    (folder / "system.json").write_text(json.dumps(system))
    return folder


@pytest.mark.parametrize("signal", ["SIGHUP", "SIGTERM", "KeyboardInterrupt"])
def test_stopped_after_every_case_reads_as_finished(tmp_path: Path, signal: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = bwprof.load(_stopped(tmp_path, f"{signal} {AFTER_EVERY_CASE}"))
    assert run.measured_everything and run.state == "finished" and not run.stop_phrase
    assert run.state_text == f"finished (every case measured; then interrupted by {signal})"
    store = tmp_path / "store"
    assert cli.main(["history", "add", str(run.path), "--store", str(store)]) == 0
    assert "added" in capsys.readouterr().out


def test_stopped_before_the_last_case_stays_interrupted(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    run = bwprof.load(_stopped(tmp_path, "SIGHUP"))
    assert not run.measured_everything and run.state == "interrupted"
    assert run.state_text == "interrupted by SIGHUP"
    # A stop reason that merely mentions the words is not one bwprof wrote at the end.
    odd = bwprof.load(_stopped(tmp_path / "odd", f"output error {AFTER_EVERY_CASE}x"))
    assert odd.state == "interrupted"
    assert cli.main(["history", "add", str(run.path), "--store", str(tmp_path / "s")]) == 2
    capsys.readouterr()
