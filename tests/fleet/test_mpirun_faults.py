"""A real 2-rank mpirun job hit mid-run (issue 37, "a fleet job that lost a rank says so"):
a rank SIGKILLed, SIGTERM to mpirun alone, Ctrl-C (SIGINT) to every process of the job.
Each ends in bounded time with the exit code docs/fleet.md gives, every rank's fate named
(by rank 0's merge, or by `bwprof salvage RUN` where the job ended before it) and every row
a rank finished kept, with no traceback.

Each job: `--simulate --hang-rank 1`, cases h2d_pinned and d2h_pinned (simulated GPUs, one
a rank). Rank 1 measures h2d_pinned (its rows in its own folder), then hangs in its first
d2h_pinned job (BWPROF_FLEET_TEST_HANG_AFTER), as a rank in a long measurement does; rank 0
measures both and waits for it (or the other way round, `--hang-rank 0`, where rank 0 is
the one killed). The fault comes once the other rank has written its own last file and
the hung one its first rows: it is mid-run. About 4-8 s a job on a loaded 2-core box.

The mpirun tests are marked `mpi` (see tests/fleet/test_mpirun.py: skipped without Open MPI
and mpi4py unless BWPROF_REQUIRE_MPI=1).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import bwprof
from bwprof.errors import BwprofError
from bwprof.store.runfolder import AFTER_EVERY_CASE, RunFolder
from tests.fleet.test_mpirun import _mpi_or_skip, _mpirun_args, _rank_pid

MPI_TIMEOUT_S = 30
"""--mpi-timeout of the jobs: rank 0 would wait that long for the hung rank 1; the fault
comes long before. No net_p2p: no rank is silent for long while it is healthy."""
ENDS_WITHIN_S = 20
"""How soon after the fault the job must end, within --mpi-timeout (Open MPI ends it in
about 2 s)."""
CUE_LIMIT_S = 300
"""How long the test waits for the ranks to get there (a guard against a stuck start)."""


def _job_hit(tmp_path: Path, fault: Callable[[subprocess.Popen, dict[int, int]], None],
             hung: int = 1) -> tuple[Path, subprocess.CompletedProcess]:
    """Run the job, and once the other rank has measured and the `hung` one is hung mid-run
    (its h2d_pinned rows in its folder) call `fault(mpirun, {rank: pid})`; (RUN, the job,
    which ended within ENDS_WITHIN_S of the fault, without a traceback). mpirun leads a
    process group of its own, as in a terminal."""
    _mpi_or_skip()
    out = tmp_path / "fleet"
    job = _mpirun_args(out, "--simulate", "--hang-rank", str(hung), "--mpi-timeout",
                       str(MPI_TIMEOUT_S), cases="h2d_pinned,d2h_pinned")
    job["env"]["BWPROF_FLEET_TEST_HANG_AFTER"] = "h2d_pinned"
    ranks: dict[int, int] = {}
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        process = subprocess.Popen(**job, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        measured = out / "ranks" / f"rank-{1 - hung:04d}" / "findings.csv"  # its last file
        rows = out / "ranks" / f"rank-{hung:04d}" / "results.csv"
        deadline = time.monotonic() + CUE_LIMIT_S
        while not (measured.is_file() and _lines(rows) > 1) and process.poll() is None:
            assert time.monotonic() < deadline, "the ranks never got that far"
            time.sleep(0.05)
        assert process.poll() is None, (tmp_path / "stderr").read_text()
        ranks = {rank: _rank_pid(process.pid, rank) for rank in (0, 1)}
        fault(process, ranks)
        try:
            process.wait(timeout=ENDS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end within {ENDS_WITHIN_S} s of the fault")
    finally:
        if process.poll() is None:
            for pid in ranks.values():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            process.kill()
            process.wait()
    done = subprocess.CompletedProcess(process.args, process.returncode,
                                       (tmp_path / "stdout").read_text(),
                                       (tmp_path / "stderr").read_text())
    assert "Traceback" not in done.stderr, done.stderr
    return out, done


def _lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def _merged(out: Path) -> tuple[RunFolder, bool]:
    """RUN as `bwprof report` reads it; where the job ended before rank 0's merge, or in
    it, the one line naming `bwprof salvage RUN` is checked and the salvage run first.
    (the run, whether it was salvaged)."""
    from bwprof.fleet.salvage import salvage

    try:
        run = bwprof.load(out)
    except BwprofError as exc:  # RUN holds only ranks/
        assert str(exc).endswith(f"`bwprof salvage {out}` merges them into it"), exc
    else:
        if run.meta.mpi is not None and run.meta.mpi.ranks:
            return run, False
        assert f"`bwprof salvage {out}` merges them again" in run.state_text  # cut short
    line = salvage(out)
    assert line.startswith(f"merged 2 rank folder(s) into {out}, a job of 2 rank(s): "), line
    return bwprof.load(out), True


def _fates(run: RunFolder) -> dict[int, str]:
    assert run.meta.mpi is not None
    return {rank.rank: rank.status for rank in run.meta.mpi.ranks}


SIGNALLED = ("interrupted", "missing")
"""The fate of rank 1, signalled mid-run: `interrupted`, or, where on a loaded machine it
neither said so nor wrote its folder within the 0.2 s rank 0 waits after its own signal,
`missing` with its finished rows kept (docs/fleet.md)."""


def _says_interrupted(run: RunFolder, signal_name: str, salvaged: bool) -> None:
    """Where a rank's fate is `interrupted` (always where rank 0 merged: the signal reached
    it as it waited for rank 1), the merged folder says the job was interrupted, by
    `signal_name`: not finished, not 'after every case was measured' (rank 1 was not)."""
    fates = _fates(run)
    assert salvaged or fates[0] == "interrupted", fates
    if "interrupted" in fates.values():
        assert run.state == "interrupted", run.meta.stopped_by
        assert signal_name in (run.meta.stopped_by or ""), run.meta.stopped_by


def _rows_kept(out: Path, run: RunFolder) -> None:
    """Every row each rank finished (in its own folder) is in the merged folder, and each
    rank measured some; a rank's own rows, not an error row, in the same order."""
    for rank in (0, 1):
        own = pd.read_csv(out / "ranks" / f"rank-{rank:04d}" / "results.csv")
        assert (own["status"] == "ok").any(), rank  # the premise: it measured
        merged = run.results[(run.results["rank"] == rank) & (run.results["case"] != "rank")]
        assert list(merged["case"]) == list(own["case"]), rank
        assert list(merged["size_bytes"].fillna(-1)) == list(own["size_bytes"].fillna(-1))
        assert list(merged["gbps_best"].fillna(-1)) == list(own["gbps_best"].fillna(-1))


def _sigterm_to_mpirun(process: subprocess.Popen, ranks: dict[int, int]) -> None:
    os.kill(process.pid, signal.SIGTERM)


def _ctrl_c_to_the_job(process: subprocess.Popen, ranks: dict[int, int]) -> None:
    """SIGINT to mpirun's process group (a terminal's Ctrl-C) and to each rank: Open MPI
    puts every rank in a process group of its own, so Ctrl-C reaches mpirun alone there;
    here it reaches every process of the job, as where the launcher keeps the ranks in
    its group."""
    os.killpg(process.pid, signal.SIGINT)
    for rank in (1, 0):  # rank 1 first: rank 0 waits for it only 0.2 s after its own
        os.kill(ranks[rank], signal.SIGINT)


# Catches (issue 37): a rank SIGKILLed mid-run left the job's merged folder not saying a rank
# died (exit 0); and a salvaged job whose rank 0 was killed read as "never finalised"
@pytest.mark.mpi
@pytest.mark.parametrize("killed", [1, 0])
def test_a_rank_killed_mid_run_is_named_missing_with_its_rows_kept(tmp_path, killed):
    """SIGKILL to a rank mid-run: mpirun ends the job (exit 137, Open MPI's). Rank 1
    killed: rank 0, signalled by mpirun, merges it from its folder as `missing` (or, loaded,
    too slow for mpirun's SIGKILL a second later, salvage does). Rank 0 killed: RUN holds
    only ranks/, and `bwprof salvage RUN` merges them, rank 0 `missing`, into a final
    folder (every rank's folder read)."""
    out, done = _job_hit(
        tmp_path, lambda mpirun, ranks: os.kill(ranks[killed], signal.SIGKILL), hung=killed)
    assert done.returncode == 137, done.stdout + done.stderr
    run, salvaged = _merged(out)
    assert salvaged or killed == 1
    fates = _fates(run)
    assert fates[killed] == "missing" and fates[1 - killed] in ("ok", "interrupted"), fates
    (error,) = run.results[run.results["status"] == "error"][["rank", "note"]].itertuples(
        index=False)
    assert error.rank == killed and re.search(r"its [1-9]\d* finished row\(s\).* are kept",
                                              error.note), error.note
    assert run.state != "incomplete", run.state_text  # the merge is whole
    _rows_kept(out, run)


# Catches (issue 37): SIGTERM to mpirun alone mid-run left nothing marked interrupted
@pytest.mark.mpi
def test_sigterm_to_mpirun_alone_marks_the_job_interrupted_with_its_rows_kept(tmp_path):
    """mpirun sends the ranks SIGCONT, then SIGTERM a second later, then SIGKILL (Open MPI
    4.1), and exits 1 (its own code, docs/fleet.md): rank 1, mid-run, is `interrupted` by
    SIGTERM (or, loaded, `missing`: SIGNALLED), the merged folder says the job was
    interrupted and keeps every row."""
    out, done = _job_hit(tmp_path, _sigterm_to_mpirun)
    assert done.returncode == 1, done.stdout + done.stderr
    run, salvaged = _merged(out)
    fates = _fates(run)
    assert fates[1] in SIGNALLED and fates[0] in ("ok", "interrupted"), fates
    _says_interrupted(run, "SIGTERM", salvaged)
    _rows_kept(out, run)


# Catches (issue 37): Ctrl-C to the whole job after rows were measured said "before the first
# measurement: nothing was written"; and a Ctrl-C that reached rank 0 as it wrote its own
# final files made the merged folder say "SIGINT after every case was measured" (read as
# finished: history stored it) though rank 1 was stopped mid-run
@pytest.mark.mpi
def test_ctrl_c_to_the_whole_job_keeps_every_row_and_says_it_was_interrupted(tmp_path):
    out, done = _job_hit(tmp_path, _ctrl_c_to_the_job)
    assert done.returncode == 1, done.stdout + done.stderr  # mpirun's, signalled itself
    assert "nothing was written" not in done.stderr, done.stderr
    run, salvaged = _merged(out)
    if not salvaged:  # rank 0 merged: its one line says what it kept, and where
        kept = re.search(rf"interrupted: kept (\d+) finished row\(s\) in "
                         rf"{re.escape(str(out))}\n", done.stderr)
        assert (kept and int(kept[1]) == len(run.results)) or (  # or, rank 1 slow, this
            f"merged the finished rows of rank(s) 1 from their own folders; wrote what the "
            f"others measured to {out}; ending the job") in done.stderr, done.stderr
    fates = _fates(run)
    assert fates[1] in SIGNALLED and fates[0] in ("ok", "interrupted"), fates
    _says_interrupted(run, "SIGINT", salvaged)
    _rows_kept(out, run)


# Catches (issue 37): rank 0's own "SIGINT after every case was measured" (the signal came as
# it wrote its final files) was the merged folder's, read as finished, every case measured,
# though another rank was stopped mid-run
def test_the_merge_says_every_case_was_measured_only_where_every_rank_measured_them(tmp_path):
    from bwprof.fleet.merge import merge
    from tests.fleet.test_merge import _report, _rows

    def rank(number: int, stopped_by: str) -> object:
        report = _report(number, f"node{number}", _rows(f"node{number}", 30.0, number),
                         interrupted="SIGINT")
        report.meta = replace(report.meta, interrupted=True, stopped_by=stopped_by)
        return report

    whole = f"SIGINT {AFTER_EVERY_CASE}"
    lost = rank(1, "SIGINT")  # heard from in no time, its folder not final
    lost.interrupted, lost.missing = None, True
    lost.meta = replace(lost.meta, interrupted=False, stopped_by=None, finished_utc=None)
    for name, second, expected in (("whole", rank(1, whole), whole),
                                   ("cut", rank(1, "SIGINT"), "SIGINT (rank(s) 0, 1)"),
                                   ("lost", lost, "SIGINT (rank(s) 0)")):
        out = tmp_path / name
        out.mkdir()
        merge(out, "fleet-1", {0: rank(0, whole), 1: second}, size=2, timeout_s=60.0,
              options={})
        system = json.loads((out / "system.json").read_text())
        assert system["stopped_by"] == expected, name
        assert bwprof.load(out).state == ("finished" if name == "whole" else "interrupted")
