"""A fleet job that ended before rank 0's merge (a rank died: mpirun ends every rank; or
mpirun itself was stopped) leaves RUN holding only ranks/: `bwprof report RUN` says so and how
to read or merge it, and `python -m bwprof.fleet.salvage RUN` merges it (issue 37)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pandas as pd
import pytest

import bwprof
from bwprof.errors import EXIT_OK, EXIT_USAGE, BwprofError
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
    system = json.loads((ranks / "rank-0001" / "system.json").read_text())
    system.update(run_id=system["run_id"].replace("-mpi1", "-mpi2"), mpi_rank=1)
    if not rank_1_final:
        system["finished_utc"] = None
    (ranks / "rank-0001" / "system.json").write_text(json.dumps(system))
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, "ranks"]  # the premise
    return out


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
        f"{out / 'ranks'}/rank-NNNN, which `bwprof report` reads one at a time; `python -m "
        f"bwprof.fleet.salvage {out}` merges them into it")
    capsys.readouterr()
    assert main([str(out)]) == EXIT_OK
    fate = "ok" if rank_1_final else "missing"
    assert capsys.readouterr().out == (
        f"merged 2 rank folder(s) into {out} (rank 0 ok, rank 1 {fate}); `bwprof report "
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
    from bwprof.fleet.run import _read_folder

    out = _unmerged(monkeypatch, tmp_path, rank_1_final=True)
    rank_0 = _read_folder(out, 0)
    assert rank_0 is not None and rank_0.meta is not None
    partial = MergeStream(out, rank_0.meta.run_id, {0: RankName.of(rank_0)}, 2, 7.0)
    partial.add(rank_0)  # rank 0's rows merged, then the job ended
    partial.abandon()
    cut = bwprof.load(out)
    assert cut.meta.state == "incomplete"  # the premise: it reads as stopped
    assert cut.state_text.endswith(f"`python -m bwprof.fleet.salvage {out}` merges them "
                                   "again)")  # what to do, said where report says its state
    capsys.readouterr()
    assert main([str(out)]) == EXIT_OK
    assert "the merge rank 0 began, cut short, is done again whole" in capsys.readouterr().out
    run = bwprof.load(out)
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [(0, "ok"), (1, "ok")]
    assert list(run.results["rank"]) == [0, 1]  # each rank's row once
