"""A real 2-rank job on this machine: `mpirun -n 2 --oversubscribe`, host cases and net_p2p.

Marked `mpi`: it needs Open MPI (mpirun) and mpi4py. Without them it skips, unless
BWPROF_REQUIRE_MPI=1 (set by CI, which installs both), where a missing MPI is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import env_without_cudasim

pytestmark = pytest.mark.mpi


def _mpi_or_skip() -> None:
    missing = []
    if shutil.which("mpirun") is None:
        missing.append("mpirun (apt install openmpi-bin)")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        missing.append("mpi4py (pip install 'bwprof[mpi]')")
    if missing:
        message = f"needs {' and '.join(missing)}"
        if os.environ.get("BWPROF_REQUIRE_MPI") == "1":
            pytest.fail(f"BWPROF_REQUIRE_MPI=1 but MPI is missing: {message}")
        pytest.skip(message)


def _start_mpirun(out, *extra, cases="ddr_triad,net_p2p", quiet=True) -> subprocess.Popen:
    env = {**env_without_cudasim(), "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    return subprocess.Popen(
        ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "bwprof", "run",
         "--cases", cases, "--preset", "quick", "--size", "4MiB",
         "--repeats", "3", *(["--quiet"] if quiet else []), "--no-plots", "--mpi-timeout", "120",
         "--out", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def _finish(job: subprocess.Popen, timeout_s: float = 300) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = job.communicate(timeout=timeout_s)
    finally:
        if job.poll() is None:  # timed out (or interrupted): take the ranks down with it
            job.kill()
            job.communicate()
    return subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)


def _mpirun(out, *extra, **options) -> subprocess.CompletedProcess:
    return _finish(_start_mpirun(out, *extra, **options))


@pytest.fixture(scope="module")
def hung_jobs(tmp_path_factory) -> dict[int, tuple]:
    """The hang tests' two jobs, {hung rank: (folder, finished job)}, run at the same time:
    each spends most of its time idle, waiting out the 5 s timeout, so the waits overlap
    (one after the other they took 17 s). Before a rank goes silent no rank waited more
    than 1 s for a peer, even beside four busy loops on this machine's two cores: 5 s is
    far from a false alarm with both jobs at once."""
    _mpi_or_skip()
    outs = {rank: tmp_path_factory.mktemp(f"hang-rank-{rank}") / "fleet" for rank in (1, 0)}
    jobs = {}
    try:
        for rank, out in outs.items():
            jobs[rank] = _start_mpirun(out, "--hang-rank", str(rank), "--mpi-timeout", "5")
        return {rank: (outs[rank], _finish(job)) for rank, job in jobs.items()}
    finally:
        for job in jobs.values():
            if job.poll() is None:
                job.kill()
                job.communicate()


def test_two_ranks_one_merged_folder(tmp_path):
    _mpi_or_skip()
    out = tmp_path / "fleet"
    done = _mpirun(out, quiet=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # Ranks write to mpirun's pseudo-terminals: the summary must still be plain text.
    assert "bwprof summary" in done.stdout and "\x1b[" not in done.stdout + done.stderr
    results = pd.read_csv(out / "results.csv")
    assert set(results["rank"]) == {0, 1}
    ddr = results[results["case"] == "ddr_triad"]
    assert sorted(ddr["status"]) == ["ok", "waived"]  # one rank per node runs host cases
    net = results[(results["case"] == "net_p2p") & (results["status"] == "ok")]
    assert len(net) == 4 and set(net["device"]) == {"rank0->rank1"}
    assert (net["gbps_best"] > 0).all()
    system = json.loads((out / "system.json").read_text())
    assert [r["status"] for r in system["mpi"]["ranks"]] == ["ok", "ok"]
    assert (out / "summary.csv").is_file() and (out / "findings.csv").is_file()
    for rank in (0, 1):  # every rank also kept its own rows as it went
        assert (out / "ranks" / f"rank-{rank:04d}" / "results.csv").is_file()


def test_a_failing_rank_leaves_the_others_rows_and_an_error_row(tmp_path):
    _mpi_or_skip()
    out = tmp_path / "fleet"
    done = _mpirun(out, "--fail-rank", "1")
    assert done.returncode != 0
    results = pd.read_csv(out / "results.csv")
    assert (results[results["rank"] == 0]["status"] == "ok").any()
    errors = results[results["status"] == "error"]
    assert list(errors["rank"]) == [1]
    assert "rank 1" in errors["note"].iloc[0] and "failure injected" in errors["note"].iloc[0]
    ranks = json.loads((out / "system.json").read_text())["mpi"]["ranks"]
    assert [r["status"] for r in ranks] == ["ok", "failed"]


def test_each_rank_on_a_node_takes_its_local_gpu(tmp_path):
    """Two ranks on one node, two simulated GPUs: rank 0 measures gpu0, rank 1 gpu1."""
    _mpi_or_skip()
    out = tmp_path / "fleet"
    done = _mpirun(out, "--simulate", cases="h2d_pinned")
    assert done.returncode == 0, done.stdout + done.stderr
    results = pd.read_csv(out / "results.csv")
    ok = results[results["status"] == "ok"]
    gpus = set(zip(ok["rank"], ok["device"].str.split(":").str[1], strict=True))
    assert gpus == {(0, "gpu0"), (1, "gpu1")}
    assert (ok["backend"] == "simulated").all()


def test_a_hung_rank_ends_the_job_with_the_others_rows_kept(hung_jobs):
    """Rank 1 hangs at its first job (silent: no heartbeat, no result): rank 0 waits out the
    timeout, writes the merged folder with an error row for rank 1, and ends the job."""
    out, done = hung_jobs[1]
    assert done.returncode != 0
    assert "rank(s) 1 did not report within 5 s" in done.stderr
    results = pd.read_csv(out / "results.csv")
    assert (results[results["rank"] == 0]["status"] == "ok").any()
    errors = results[results["status"] == "error"]
    assert list(errors["rank"]) == [1]
    assert "did not report within 5 s (hung or died)" in errors["note"].iloc[0]
    ranks = json.loads((out / "system.json").read_text())["mpi"]["ranks"]
    assert [r["status"] for r in ranks] == ["ok", "missing"]


def test_a_hung_rank_0_is_named_by_the_others_and_the_job_ends(hung_jobs):
    """Rank 0 hangs after net_p2p: rank 1, waiting for its go-ahead, hears nothing for the
    timeout, says so in one line and ends the job; its own rows stay in its folder (net_p2p
    rows are the sender's, rank 0's)."""
    out, done = hung_jobs[0]
    assert done.returncode != 0
    assert ("rank 1 waited 5 s for every rank's results from rank 0, silent all that time: "
            "rank 0 hangs") in done.stderr
    kept = pd.read_csv(out / "ranks" / "rank-0001" / "results.csv")
    assert list(kept["case"]) == ["ddr_triad"]  # waived here (host cases: local rank 0 only)
