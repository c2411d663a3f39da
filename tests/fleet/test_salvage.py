"""A fleet job that ended before rank 0's merge (a rank died: mpirun ends every rank; or
mpirun itself was stopped) leaves RUN holding only ranks/: `bwprof report RUN` says so and how
to read or merge it, and `bwprof salvage RUN` (or, as scripts written before it call it,
`python -m bwprof.fleet.salvage RUN`) merges it (issue 37)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import bwprof
from bwprof.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_OUTPUT, EXIT_USAGE, BwprofError
from bwprof.fleet import run as fleet_run
from bwprof.fleet.salvage import main
from bwprof.store.runlock import LOCK_FILE
from tests.fleet.test_merge import FLEET_OPTIONS, _FakeFleet

MERGED = ("system.json", "results.csv", "results.parquet", "timings.csv", "samples.csv",
          "findings.csv", "summary.csv", "columns.csv", "timelines.json")


def _unmerged(monkeypatch, tmp_path, rank_1_final: bool):
    """RUN of a 2-rank job that ended before rank 0's merge: rank 0's folder as a run of one
    rank leaves it, rank 1's a copy of it, final or (cut short) not; no merged files."""
    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: _FakeFleet(0, 1)))
    monkeypatch.setattr(fleet_run, "import_mpi",
                        lambda: SimpleNamespace(Get_library_version=lambda: "fake MPI"))
    out = tmp_path / "run"
    fleet_run.run_fleet(out=out, timeout_s=7.0, command_line=(
        "bwprof", "run", "--mpi-timeout", "7", "--out", str(out)), **FLEET_OPTIONS)
    for name in MERGED:
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "report", ignore_errors=True)
    ranks = out / "ranks"
    shutil.copytree(ranks / "rank-0000", ranks / "rank-0001")
    for rank in (0, 1):  # one job's: rank 0 gave every rank its run id
        _edit_system(out, rank, run_id=_rank_system(out, 0)["run_id"].replace("-mpi1", "-mpi2"),
                     mpi_rank=rank)
    if not rank_1_final:
        _edit_system(out, 1, finished_utc=None)
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, "ranks"]  # the premise
    return out


def _rank_system(out, rank: int) -> dict:
    return json.loads((out / "ranks" / f"rank-{rank:04d}" / "system.json").read_text())


def _edit_system(out, rank: int, **changes) -> None:
    """Change fields of rank `rank`'s own system.json."""
    system = _rank_system(out, rank)
    system.update(changes)
    (out / "ranks" / f"rank-{rank:04d}" / "system.json").write_text(json.dumps(system))


# Catches (issue 37): `bwprof report RUN` on such a folder said only "not a bwprof run
# folder (no system.json)", though every rank's rows were in it
@pytest.mark.parametrize("rank_1_final", [True, False])
def test_an_unmerged_fleet_folder_is_named_and_merged_afterwards(monkeypatch, tmp_path, capsys,
                                                                  rank_1_final):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final)
    with pytest.raises(BwprofError) as refused:
        bwprof.load(out)  # what report, accept and compare read
    assert str(refused.value) == (
        f"{out} is a fleet job's folder that was never merged (the job ended before rank "
        f"0's merge: a rank died, or mpirun was stopped); each rank's rows are in "
        f"{out / 'ranks'}/rank-NNNN, which `bwprof report` reads one at a time; `bwprof "
        f"salvage {out}` merges them into it")
    capsys.readouterr()
    assert main([str(out)]) == EXIT_OK
    fate = "ok" if rank_1_final else "missing"
    assert capsys.readouterr().out == (
        f"merged 2 rank folder(s) into {out}, a job of 2 rank(s): "
        f"{'2 ok' if rank_1_final else '1 ok, 1 missing (rank 1)'}; `bwprof report "
        f"{out}` reads it\n")
    run = bwprof.load(out)
    assert run.meta.mpi.size == 2 and run.meta.mpi.timeout_s == 7.0
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [(0, "ok"), (1, fate)]
    own = pd.read_csv(out / "ranks" / "rank-0000" / "results.csv")
    for rank in (0, 1):  # every row each rank finished
        merged = run.results[(run.results["rank"] == rank) & (run.results["case"] != "rank")]
        assert list(merged["case"]) == list(own["case"]) == ["ddr_triad"]
        assert list(merged["gbps_best"]) == list(own["gbps_best"])
    errors = list(run.results[run.results["status"] == "error"]["note"])
    assert errors == ([] if rank_1_final else [
        "rank 1's folder was not final when the job ended (killed, stopped or hung); its 1 "
        "finished row(s) are kept"])
    assert main([str(out)]) == EXIT_USAGE  # merged already: said, nothing rewritten
    assert "is merged already" in capsys.readouterr().err


def test_salvage_refuses_what_is_no_unmerged_fleet_folder(tmp_path, capsys):
    assert main([]) == EXIT_USAGE
    (tmp_path / "plain").mkdir()
    assert main([str(tmp_path / "plain")]) == EXIT_USAGE
    assert capsys.readouterr().err.endswith(
        "holds no ranks/rank-NNNN folder: not a fleet job's folder; pass the --out of a "
        "fleet run\n")


# Catches: a job that ended mid-merge (a rank killed while rank 0 merged) left RUN reading as
# a run stopped without finishing, its first system.json naming no rank's fate and only the
# rows merged so far; salvage refused it as merged already
def test_a_merge_cut_short_is_done_again_whole(monkeypatch, tmp_path, capsys):
    from bwprof.fleet.merge import MergeStream, RankName
    from bwprof.fleet.run import read_rank_folder

    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    rank_0 = read_rank_folder(out, 0)
    assert rank_0 is not None and rank_0.meta is not None
    partial = MergeStream(out, rank_0.meta.run_id, {0: RankName.of(rank_0)}, 2, 7.0)
    partial.add(rank_0)  # rank 0's rows merged, then the job ended
    partial.abandon()
    cut = bwprof.load(out)
    assert cut.meta.state == "incomplete"  # the premise: it reads as stopped
    # what to do, said where report says its state
    assert cut.state_text.endswith(f"`bwprof salvage {out}` merges them again)")
    capsys.readouterr()
    assert main([str(out)]) == EXIT_OK
    assert "the merge rank 0 began, cut short, is done again whole" in capsys.readouterr().out
    run = bwprof.load(out)
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [(0, "ok"), (1, "ok")]
    assert list(run.results["rank"]) == [0, 1]  # each rank's row once


def _merged_files(out) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name != "ranks" and p.name != LOCK_FILE)


# Catches (issue 37): the job's size was the run id's '-mpiN' as written: two folders whose
# run id ended -mpi300000 made salvage write 299,998 missing rows (99 s, 2.1 GB, exit 0),
# and -mpi9999999 ran out of memory
@pytest.mark.parametrize("claimed", [300_000, 9_999_999])
def test_a_run_id_claiming_a_huge_job_over_few_folders_is_refused(monkeypatch, tmp_path, capsys,
                                                                  claimed):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    run_id = _rank_system(out, 0)["run_id"].replace("-mpi2", f"-mpi{claimed}")
    for rank in (0, 1):
        _edit_system(out, rank, run_id=run_id)
    capsys.readouterr()
    started = time.monotonic()
    assert main([str(out)]) == EXIT_USAGE
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"says {claimed:,} rank(s)" in err
    if claimed == 300_000:
        assert err.endswith(f"confirm the job's size with `bwprof salvage --ranks 300000 "
                            f"{out}` (each rank without a folder is merged as missing)\n")
    else:
        assert "more than 1,000,000, no fleet's size" in err
    assert _merged_files(out) == []  # nothing written


# Catches: the size was never held against the folders themselves
def test_folders_that_disagree_on_the_job_are_refused(monkeypatch, tmp_path, capsys):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    _edit_system(out, 1, run_id="other-20260101T000000Z-mpi2")
    assert main([str(out)]) == EXIT_USAGE
    assert "are of different jobs" in capsys.readouterr().err
    _edit_system(out, 1, run_id=_rank_system(out, 0)["run_id"], mpi_rank=5)
    assert main([str(out)]) == EXIT_USAGE
    assert "system.json says it is rank 5: not this job's folder" in capsys.readouterr().err
    _edit_system(out, 1, mpi_rank=1)
    shutil.copytree(out / "ranks" / "rank-0001", out / "ranks" / "rank-0002")
    _edit_system(out, 2, mpi_rank=2)
    assert main([str(out)]) == EXIT_USAGE  # rank 2 of a job of 2 ranks
    assert "rank-0002 is past the job's last rank" in capsys.readouterr().err
    shutil.rmtree(out / "ranks" / "rank-0002")
    assert main(["--ranks", "3", str(out)]) == EXIT_USAGE
    assert "--ranks 3 disagrees with the ranks' folders" in capsys.readouterr().err
    assert _merged_files(out) == []


# Catches: a node-local RUN holds its node's ranks only: a real job far larger than its folders
# merges once --ranks confirms its size, and the closing line counts the fates (it named every
# rank: ~200 kB for 10,870 ranks)
def test_ranks_confirms_a_large_job_and_the_line_counts_fates(monkeypatch, tmp_path, capsys):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=False)
    run_id = _rank_system(out, 0)["run_id"].replace("-mpi2", "-mpi2000")
    for rank in (0, 1):
        _edit_system(out, rank, run_id=run_id)
    assert main([str(out)]) == EXIT_USAGE
    assert "--ranks 2000" in capsys.readouterr().err
    assert main(["--ranks=2000", str(out)]) == EXIT_OK
    line = capsys.readouterr().out
    assert line == (f"merged 2 rank folder(s) into {out}, a job of 2,000 rank(s): 1 ok, 1,999 "
                    f"missing (ranks 1, 2, 3, 4, 5 and 1,994 more); `bwprof report {out}` "
                    f"reads it\n")
    run = bwprof.load(out)
    assert run.meta.mpi.size == 2000 and len(run.meta.mpi.ranks) == 2000


@pytest.mark.parametrize("argv", [["--ranks"], ["--ranks", "x", "RUN"], ["--ranks=0", "RUN"],
                                  ["--ranks", "2000000", "RUN"], ["RUN", "--ranks", "2"]])
def test_a_bad_ranks_option_is_the_usage(argv, capsys):
    assert main(argv) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("usage: python -m bwprof.fleet.salvage [--ranks N]")


# Catches (issue 37): any OSError was exit 2, though a RUN that cannot be written is exit 3 in
# the project's table (docs/command-line.md)
def test_a_run_that_cannot_be_written_is_exit_3(monkeypatch, tmp_path, capsys):
    from tests.faults import read_only_folder, writable_again

    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    read_only_folder(out / "ranks")  # where the merge's lock is made
    try:
        assert main([str(out)]) == EXIT_OUTPUT
    finally:
        writable_again(out / "ranks")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: cannot write {out / 'ranks' / fleet_run.MERGE_LOCK}: Read-only file system")
    assert _merged_files(out) == []
    assert main([str(out)]) == EXIT_OK  # writable again: merged


def test_a_link_planted_as_the_merge_lock_is_refused(monkeypatch, tmp_path, capsys):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    (tmp_path / "elsewhere").write_text("keep\n")
    (out / "ranks" / fleet_run.MERGE_LOCK).symlink_to(tmp_path / "elsewhere")
    assert main([str(out)]) == EXIT_USAGE
    assert "is a link or not a regular file" in capsys.readouterr().err
    assert (tmp_path / "elsewhere").read_text() == "keep\n"


def _stop_after_rank_0(monkeypatch) -> Callable[[], None]:
    """Ctrl-C as the merge has just taken rank 0's rows; what it returns undoes that."""
    from bwprof.fleet.merge import MergeStream

    real_add = MergeStream.add

    def add_then_stop(self, report):
        real_add(self, report)
        if report.rank == 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(MergeStream, "add", add_then_stop)
    return lambda: monkeypatch.setattr(MergeStream, "add", real_add)


# Catches (issue 37): Ctrl-C while salvage merged was a traceback
def test_an_interrupt_mid_merge_is_130_and_the_next_try_merges_whole(monkeypatch, tmp_path,
                                                                     capsys):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    go_on = _stop_after_rank_0(monkeypatch)
    capsys.readouterr()
    try:
        code: object = main([str(out)])
    except KeyboardInterrupt:  # the old code's traceback (which would end pytest itself)
        code = "KeyboardInterrupt raised"
    assert code == EXIT_INTERRUPTED
    assert capsys.readouterr().err == (
        f"interrupted: {out} is not merged (the ranks' folders are untouched); run it again "
        f"to merge it\n")
    go_on()
    assert main([str(out)]) == EXIT_OK
    assert "done again whole" in capsys.readouterr().out
    run = bwprof.load(out)
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [(0, "ok"), (1, "ok")]


@pytest.mark.parametrize("command_words", [["bwprof", "salvage"], ["bwprof.fleet.salvage"]],
                         ids=["subcommand", "module"])
def test_a_stop_signal_to_the_command_is_one_line_and_130(monkeypatch, tmp_path, command_words):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    command = subprocess.Popen([sys.executable, "-m", *command_words, str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 30
    while not _catches(command.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.01)  # until its handlers are in: then it loads pandas and merges (s)
    command.send_signal(signal.SIGTERM)
    stdout, stderr = command.communicate(timeout=60)
    assert (command.returncode, stdout) == (EXIT_INTERRUPTED, "")
    assert stderr.count("\n") == 1 and stderr.startswith("interrupted (SIGTERM)"), stderr


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (/proc's SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines()
                 if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) >> (signum - 1) & 1)


# Catches (issue 37): the fate of a rank read from its folder was worded three times (rank 0
# for a late rank, a rank merging in rank 0's place, salvage); one rule now
@pytest.mark.parametrize(("interrupted", "stopped_by", "finished", "said", "lost", "fate"), [
    (True, "SIGTERM", True, None, False, ("interrupted", "SIGTERM")),
    (True, None, False, None, False, ("interrupted", "interrupted")),
    (True, "error: boom", True, None, False, ("error", "error: boom")),
    (True, "output error: full", True, "SIGINT", True, ("error", "output error: full")),
    (False, None, False, "SIGHUP", True, ("interrupted", "SIGHUP")),
    (False, None, False, None, False, ("missing", None)),
    (False, None, True, None, True, ("missing", None)),
    (False, None, True, None, False, ("as its rows say", None)),
])
def test_one_rule_gives_a_rank_its_fate_from_its_folder(monkeypatch, tmp_path, interrupted,
                                                         stopped_by, finished, said, lost, fate):
    from dataclasses import replace

    from bwprof.fleet.run import fate_from_folder, read_rank_folder

    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    report = read_rank_folder(out, 1)
    report.meta = replace(report.meta, interrupted=interrupted, stopped_by=stopped_by,
                          finished_utc=report.meta.finished_utc if finished else None)
    missing = fate_from_folder(report, lambda rank: said if rank == 1 else None, lost=lost)
    got = (("error", report.error) if report.error else
           ("interrupted", report.interrupted) if report.interrupted else
           ("missing", None) if report.missing else ("as its rows say", None))
    assert got == fate and missing == (fate[0] == "missing")


# -- `bwprof salvage`: the subcommand, the module command's behaviour behind the CLI's guard --
# Catches (issue 37): the merge was a module command only (`python -m bwprof.fleet.salvage`),
# absent from `bwprof --help` and the documented command list, though the one-line refusals
# of report, accept and compare sent users to it


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from bwprof.cli import main as cli_main

    code = cli_main(argv)
    said = capsys.readouterr()
    return code, said.out, said.err


@pytest.mark.parametrize("rank_1_final", [True, False])
def test_bwprof_salvage_merges_an_unmerged_folder(monkeypatch, tmp_path, capsys, rank_1_final):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final)
    capsys.readouterr()
    code, said, err = _cli(["salvage", str(out)], capsys)
    assert (code, err) == (EXIT_OK, "")
    assert said == (
        f"merged 2 rank folder(s) into {out}, a job of 2 rank(s): "
        f"{'2 ok' if rank_1_final else '1 ok, 1 missing (rank 1)'}; `bwprof report "
        f"{out}` reads it\n")
    run = bwprof.load(out)
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [
        (0, "ok"), (1, "ok" if rank_1_final else "missing")]
    code, said, err = _cli(["salvage", str(out)], capsys)  # merged already: refused, one line
    assert (code, said, err.count("\n")) == (EXIT_USAGE, "", 1)
    assert err == f"error: {out} is merged already; `bwprof report {out}` reads it\n"


def test_bwprof_salvage_ranks_confirms_a_large_job(monkeypatch, tmp_path, capsys):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    run_id = _rank_system(out, 0)["run_id"].replace("-mpi2", "-mpi2000")
    for rank in (0, 1):
        _edit_system(out, rank, run_id=run_id)
    capsys.readouterr()
    code, said, err = _cli(["salvage", str(out)], capsys)
    assert (code, said) == (EXIT_USAGE, "") and err.count("\n") == 1
    assert f"`bwprof salvage --ranks 2000 {out}`" in err  # the command it names is this one
    code, said, err = _cli(["salvage", str(out), "--ranks", "2000"], capsys)
    assert (code, err) == (EXIT_OK, "")
    assert said.startswith(f"merged 2 rank folder(s) into {out}, a job of 2,000 rank(s): 2 ok, "
                           f"1,998 missing")


@pytest.mark.parametrize("what", ["missing", "file", "plain folder", "relative"])
def test_bwprof_salvage_of_no_fleet_folder_is_one_line_and_2(tmp_path, capsys, monkeypatch,
                                                             what):
    path = tmp_path / "run"
    if what == "file":
        path.write_text("not a folder\n")
    elif what == "plain folder":
        path.mkdir()
    elif what == "relative":
        monkeypatch.chdir(tmp_path)
        path.mkdir()
    argv = ["salvage", "run" if what == "relative" else str(path)]
    code, said, err = _cli(argv, capsys)
    assert (code, said) == (EXIT_USAGE, "")
    why = {"missing": "does not exist", "file": "is not a folder"}.get(
        what, "holds no ranks/rank-NNNN folder")
    assert err == (f"error: {path} {why}: not a fleet job's folder; pass the --out of a fleet "
                   f"run\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if what == "missing" else ["run"])


@pytest.mark.parametrize("argv", [["salvage"], ["salvage", "RUN", "--ranks"],
                                  ["salvage", "--ranks", "x", "RUN"],
                                  ["salvage", "--ranks=0", "RUN"],
                                  ["salvage", "--ranks", "2000000", "RUN"],
                                  ["salvage", "--ranks", "1_000", "RUN"],
                                  ["salvage", "--ranks", "2.5", "RUN"],
                                  ["salvage", "RUN", "OTHER"]])
def test_bwprof_salvage_bad_options_are_one_line_and_2(argv, capsys):
    code, said, err = _cli(argv, capsys)
    assert (code, said, err.count("\n")) == (EXIT_USAGE, "", 1), err
    assert err.startswith("error: ") and "No such command" not in err


def test_bwprof_help_lists_salvage(capsys):
    code, said, _ = _cli(["--help"], capsys)
    assert code == EXIT_OK
    assert re.search(r"salvage +Merge a fleet job's rank folders into RUN", said), said
    code, said, _ = _cli(["salvage", "--help"], capsys)
    assert code == EXIT_OK and "--ranks" in said and "RUN" in said


def test_bwprof_salvage_interrupted_mid_merge_is_130_then_merges_whole(monkeypatch, tmp_path,
                                                                       capsys):
    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    go_on = _stop_after_rank_0(monkeypatch)
    capsys.readouterr()
    code, said, err = _cli(["salvage", str(out)], capsys)
    assert (code, said) == (EXIT_INTERRUPTED, "")
    assert err == (f"interrupted: {out} is not merged (the ranks' folders are untouched); run "
                   f"it again to merge it\n")
    go_on()
    code, said, _ = _cli(["salvage", str(out)], capsys)
    assert code == EXIT_OK and "done again whole" in said


def test_bwprof_salvage_of_a_run_that_cannot_be_written_is_3(monkeypatch, tmp_path, capsys):
    from tests.faults import read_only_folder, writable_again

    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    capsys.readouterr()
    read_only_folder(out / "ranks")
    try:
        code, said, err = _cli(["salvage", str(out)], capsys)
    finally:
        writable_again(out / "ranks")
    assert (code, said, err.count("\n")) == (EXIT_OUTPUT, "", 1)
    assert err.startswith(f"error: cannot write {out / 'ranks' / fleet_run.MERGE_LOCK}: ")


def test_out_of_memory_mid_merge_is_one_line_and_3_by_either_command(monkeypatch, tmp_path,
                                                                     capsys):
    from bwprof.fleet.merge import MergeStream

    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)

    def no_memory(self, report):
        raise MemoryError

    monkeypatch.setattr(MergeStream, "add", no_memory)
    capsys.readouterr()
    line = (f"error: bwprof ran out of memory merging {out} (the ranks' folders are "
            f"untouched); give it more memory and run it again\n")
    assert main([str(out)]) == EXIT_OUTPUT
    assert capsys.readouterr().err == line
    assert _cli(["salvage", str(out)], capsys) == (EXIT_OUTPUT, "", line)
