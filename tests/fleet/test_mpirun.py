"""A real 2-rank job on this machine: `mpirun -n 2 --oversubscribe`, host cases and net_p2p;
and net_p2p's pairs on 4 ranks, at one tiny size (tests/fleet/netp2p_ranks.py).

Marked `mpi`: it needs Open MPI (mpirun) and mpi4py. Without them it skips, unless
BWPROF_REQUIRE_MPI=1 (set by CI, which installs both), where a missing MPI is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import env_without_cudasim

pytestmark = pytest.mark.mpi

HANG_TIMEOUT_S = 60
"""--mpi-timeout of the hang tests' jobs. Heartbeats come only at a job's start and end, so a
healthy rank is silent for as long as a job, or its start-up, takes, and this timeout must
outlast the longest such stretch on a loaded machine, not only on a quiet one. The longest
is the first net_p2p job's validation on the receiver, while the sender waits: Numba loads
its parallel byte compare from the disk cache (1-9 s beside the whole suite and four busy
loops on two cores, where 5 s made rank 0 report its own error for that job) or, in a fresh
clone, compiles it (23 s there: so `_warm_numba_cache` compiles it first). Every other wait
there stayed under 3 s. The hung rank, by contrast, stays silent for good: a long timeout
costs only idle waiting, beside the healthy jobs."""
HEALTHY_TIMEOUT_S = 600
"""--mpi-timeout of the jobs where no rank hangs: only a guard, so no load can trip it."""
JOB_LIMIT_S = 1200
"""How long the test waits for an mpirun job before it kills it (a guard against a hang
of the job itself), beyond any --mpi-timeout it was given."""


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


def _mpirun_args(out, *extra, cases="ddr_triad,net_p2p", quiet=True) -> dict:
    # Each job's session folder under its own test folder: jobs started at the same moment
    # (the hang tests') raced to make the shared /tmp/ompi.HOST.UID, and the loser failed
    # at once ("A call to mkdir was unable to create the desired directory: File exists").
    env = {**env_without_cudasim(), "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1",
           "OMPI_MCA_orte_tmpdir_base": str(Path(out).parent)}
    return dict(
        args=["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "bwprof", "run",
              "--cases", cases, "--preset", "quick", "--size", "4MiB",
              "--repeats", "3", *(["--quiet"] if quiet else []), "--no-plots",
              "--mpi-timeout", str(HEALTHY_TIMEOUT_S), "--out", str(out), *extra],
        text=True, env=env,
    )


def _mpirun(out, *extra, **options) -> subprocess.CompletedProcess:
    return subprocess.run(**_mpirun_args(out, *extra, **options), capture_output=True,
                          timeout=JOB_LIMIT_S)


class _Job:
    """An mpirun job left running while other tests run; its output goes to files (a pipe
    nobody reads could fill and stall it)."""

    def __init__(self, folder, *extra, env: dict[str, str] | None = None,
                 args: list[str] | None = None, **options) -> None:
        """`extra` and `options` as `_mpirun_args`'; `args`: another command line (run in
        the repository), in place of `bwprof run`'s."""
        self.folder, self.out = folder, folder / "fleet"
        job = _mpirun_args(self.out, *extra, **options)
        job["env"].update(env or {})
        if args is not None:
            job.update(args=args, cwd=Path(__file__).parents[2])
        with open(folder / "stdout", "w") as stdout, open(folder / "stderr", "w") as stderr:
            self._process = subprocess.Popen(**job, stdout=stdout, stderr=stderr)

    def finish(self, timeout_s: float = JOB_LIMIT_S) -> subprocess.CompletedProcess:
        try:
            self._process.wait(timeout=timeout_s)
        finally:
            self.close()
        return subprocess.CompletedProcess(self._process.args, self._process.returncode,
                                           (self.folder / "stdout").read_text(),
                                           (self.folder / "stderr").read_text())

    def running(self, deadline: float) -> bool:
        """Whether the job is still running, before `deadline` (a test waiting on one of
        its steps stops waiting once it ended)."""
        return self._process.poll() is None and time.monotonic() < deadline

    def close(self) -> None:
        if self._process.poll() is None:  # timed out, or never waited for: take it down
            self._process.kill()
            self._process.wait()


def _warm_numba_cache() -> None:
    """Compile net_p2p's validation into Numba's disk cache, as the receiving rank calls it,
    so that the ranks only load it (see HANG_TIMEOUT_S)."""
    from bwprof.gpu.buffers import fill_pattern, host_mismatches

    buffer = np.zeros(1 << 16, dtype=np.uint8)
    fill_pattern(buffer, buffer.size)
    assert host_mismatches(buffer, buffer.size) == 0


@pytest.fixture(scope="module", autouse=True)
def _hung_jobs_started(request, tmp_path_factory):
    """The hang tests' two jobs ({hung rank: job}), started with this module's first test
    when a hang test is selected. Each job spends most of its time idle, waiting out its
    timeout (HANG_TIMEOUT_S, which no healthy silence on a loaded machine comes near), so
    they run together and beside the healthy jobs of the tests before them."""
    selected = request.session.items
    if not any("hung_jobs" in getattr(item, "fixturenames", ()) for item in selected):
        yield {}
        return
    _mpi_or_skip()
    _warm_numba_cache()
    jobs: dict[int, _Job] = {}
    try:
        for rank in (1, 0):
            jobs[rank] = _Job(tmp_path_factory.mktemp(f"hang-rank-{rank}"),
                              "--hang-rank", str(rank), "--mpi-timeout", str(HANG_TIMEOUT_S))
        yield jobs
    finally:
        for job in jobs.values():
            job.close()


SILENT_TIMEOUT_S = 20
"""--mpi-timeout of the job whose rank 0 goes silent before its merge: the others wait that
long for it (idle, beside the other tests' jobs). Its only case is ddr_triad, measured on
rank 0 alone: no silence of a healthy rank 0 there comes near it."""


@pytest.fixture(scope="module", autouse=True)
def _waiting_jobs_started(request, tmp_path_factory):
    """Jobs that mostly wait, started with this module's first test where a test of theirs
    is selected, so that they run beside the other tests' jobs ({fixture: _Job}):
    `silent_rank_0_job`, whose rank 0 is stopped (SIGSTOP) before its merge, and
    `stopped_pair_job`, 3 ranks of net_p2p, one stopped mid-job."""
    selected = {name for item in request.session.items
                for name in getattr(item, "fixturenames", ())}
    wanted = {"silent_rank_0_job", "stopped_pair_job"} & selected
    if not wanted:
        yield {}
        return
    _mpi_or_skip()
    jobs: dict[str, _Job] = {}
    stopper = None
    try:
        if "stopped_pair_job" in wanted:
            jobs["stopped_pair_job"] = _Job(
                tmp_path_factory.mktemp("stopped-pair"), args=[
                    "mpirun", "-n", "3", "--oversubscribe", sys.executable, "-m",
                    "tests.fleet.netp2p_ranks", "seed-3", "--stop", "1:2"])
        if "silent_rank_0_job" in wanted:
            job = jobs["silent_rank_0_job"] = _Job(
                tmp_path_factory.mktemp("silent-rank-0"), "--mpi-timeout",
                str(SILENT_TIMEOUT_S), cases="ddr_triad",
                env={"BWPROF_FLEET_TEST_DELAY": f"0:{JOB_LIMIT_S}"})
            stopper = threading.Thread(target=_stop_rank_0_before_its_merge, args=(job,),
                                       daemon=True)
            stopper.start()
        yield jobs
    finally:
        for job in jobs.values():
            job.close()
        if stopper is not None:
            stopper.join(timeout=5)


def _stop_rank_0_before_its_merge(job: _Job) -> None:
    """SIGSTOP to rank 0 once it has measured, written its folder and waits before its
    last steps (the test hook's cue): stopped before its merge began."""
    deadline = time.monotonic() + JOB_LIMIT_S
    cue = "test hook: rank 0 waits"
    while job.running(deadline):
        with contextlib.suppress(OSError):
            if cue in (job.folder / "stderr").read_text():
                with contextlib.suppress(AssertionError, OSError):
                    os.kill(_rank_pid(job._process.pid, 0), signal.SIGSTOP)
                return
        time.sleep(0.1)


@pytest.fixture(scope="module")
def silent_rank_0_job(_waiting_jobs_started) -> tuple:
    job = _waiting_jobs_started["silent_rank_0_job"]
    return job.out, job.finish()


@pytest.fixture(scope="module")
def stopped_pair_job(_waiting_jobs_started) -> dict:
    done = _waiting_jobs_started["stopped_pair_job"].finish()
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hung_jobs(_hung_jobs_started) -> dict[int, tuple]:
    """{hung rank: (run folder, finished job)}."""
    return {rank: (job.out, job.finish()) for rank, job in _hung_jobs_started.items()}


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
    # 2 ranks: the ring both ways is every pair; each at the quick preset's 4 sizes
    assert len(net) == 8 and set(net["device"]) == {"rank0->rank1", "rank1->rank0"}
    assert (net["gbps_best"] > 0).all()
    assert net["note"].str.contains("pair: ring (ring (each rank to its neighbour and back: "
                                    "2 pairs) + 0 sampled pairs", regex=False).all()
    assert "net_p2p: ring (each rank to its neighbour and back: 2 pairs)" in done.stderr
    system = json.loads((out / "system.json").read_text())
    assert [r["status"] for r in system["mpi"]["ranks"]] == ["ok", "ok"]
    # Every executor closes through the one contract: no rank records a failed close (the
    # network executor had no close() and every fleet run said so).
    assert "close_errors" not in system
    for rank in (0, 1):
        kept = json.loads((out / "ranks" / f"rank-{rank:04d}" / "system.json").read_text())
        assert "close_errors" not in kept, kept["close_errors"]
    assert (out / "summary.csv").is_file() and (out / "findings.csv").is_file()
    for rank in (0, 1):  # every rank also kept its own rows as it went
        assert (out / "ranks" / f"rank-{rank:04d}" / "results.csv").is_file()


def test_a_failing_rank_leaves_the_others_rows_and_an_error_row(tmp_path):
    _mpi_or_skip()
    out = tmp_path / "fleet"
    done = _mpirun(out, "--fail-rank", "1", "--all-pairs")  # --all-pairs: reaches net_p2p
    assert done.returncode != 0
    results = pd.read_csv(out / "results.csv")
    net = results[(results["case"] == "net_p2p") & (results["status"] == "ok")]
    assert set(net["device"]) == {"rank0->rank1", "rank1->rank0"}
    assert net["note"].str.contains("pair: all pairs (every ordered pair of the 2 ranks "
                                    "(--all-pairs): 2)", regex=False).all()
    assert (results[results["rank"] == 0]["status"] == "ok").any()
    errors = results[results["status"] == "error"]
    assert list(errors["rank"]) == [1]
    assert "rank 1" in errors["note"].iloc[0] and "failure injected" in errors["note"].iloc[0]
    ranks = json.loads((out / "system.json").read_text())["mpi"]["ranks"]
    assert [r["status"] for r in ranks] == ["ok", "failed"]


def _pairs_on_ranks(tmp_path, *extra) -> dict:
    """net_p2p's jobs on 4 ranks of this machine (tests/fleet/netp2p_ranks.py): rank 0's
    JSON of the pairs chosen and every rank's rows."""
    env = {**_mpirun_args(tmp_path / "fleet")["env"]}
    done = subprocess.run(
        ["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m",
         "tests.fleet.netp2p_ranks", "seed-4", *extra], text=True, env=env,
        capture_output=True, timeout=JOB_LIMIT_S, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_four_ranks_measure_the_ring_and_samples_and_all_12_pairs_when_asked(tmp_path):
    """4 ranks of one node: the ring both ways (8 pairs) and each rank's samples: its one
    peer left, so the 12; every row made by its sender, valid, saying why."""
    _mpi_or_skip()
    from bwprof.fleet.pairs import select_pairs

    default = _pairs_on_ranks(tmp_path)
    expected = select_pairs(["h"] * 4, "seed-4")  # one node: its name changes nothing
    assert [tuple(p) for p in default["pairs"]] == list(expected.pairs)
    assert default["reasons"].count("ring") == 8 and default["reasons"].count("sampled") == 4
    rows = default["rows"]
    assert sorted((r["sender"], r["receiver"]) for r in rows) == sorted(expected.pairs)
    assert all(r["made_by"] == r["sender"] and r["valid"] for r in rows)
    assert all(r["note"].startswith("64 message(s) in flight per sample; pair: ") for r in rows)
    assert "ring (each rank to its neighbour and back: 8 pairs) + 4 sampled" in default["note"]
    every = _pairs_on_ranks(tmp_path, "--all-pairs")
    assert len(every["rows"]) == 12 and set(every["reasons"]) == {"all pairs"}
    assert {(r["sender"], r["receiver"]) for r in every["rows"]} == {
        (s, r) for s in range(4) for r in range(4) if s != r}


# Catches (issue 37): only rank 0 heard a rank's stop signal, so in a job of 3 ranks the other
# end of a pair with the signalled rank waited for it up to --mpi-timeout (an error row)
def test_three_ranks_the_other_end_of_a_pair_stops_waiting_for_a_signalled_rank(
        stopped_pair_job):
    """Rank 1 of 3 is stopped in its first job with rank 2 (1->2), both ends given the
    go-ahead: rank 2 hears its word and leaves the job at once, not after the 60 s timeout
    (tests/fleet/netp2p_ranks.py); its later job to rank 1 is `skipped`, saying why, and
    the pairs without rank 1 are measured."""
    from tests.fleet.netp2p_ranks import TIMEOUT_S

    done = stopped_pair_job
    outcomes = {(o["rank"], tuple(o["pair"])): o for o in done["outcomes"]}
    waited = outcomes[(2, (1, 2))]
    assert waited["outcome"] == "0 row(s)" and waited["seconds"] < TIMEOUT_S / 2, waited
    assert outcomes[(2, (2, 1))]["outcome"] == (
        "skipped: not measured: rank 1 was stopped by SIGTERM")
    assert outcomes[(0, (1, 2))]["outcome"] == "0 row(s)"  # rank 0: no error of its own
    measured = {(r["sender"], r["receiver"]) for r in done["rows"]}
    assert {(2, 0), (0, 2), (0, 1), (1, 0)} <= measured and (2, 1) not in measured


def test_a_budget_one_rank_must_trim_for_gives_every_rank_the_same_plan(tmp_path):
    """--budget between the two ranks' estimates (rank 0 runs the host case, rank 1 only
    net_p2p): rank 0 trims, rank 1 alone would not; every rank must run the same net_p2p
    jobs (repeats), or the pair waits on itself (rank 1 aborted here before the fix)."""
    _mpi_or_skip()
    plans = {}
    for name, extra in (("free", ()), ("budget", None)):
        if extra is None:
            asked = [plans["free"][rank]["estimate_s"] for rank in (0, 1)]
            assert asked[0] > asked[1], asked  # the premise: rank 0 costs more
            extra = ("--budget", f"{(asked[0] + asked[1]) / 2:.1f}")
        out = tmp_path / name
        done = _mpirun(out, "--simulate", "--repeats", "6", *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        plans[name] = [json.loads((out / "ranks" / f"rank-{rank:04d}" / "system.json")
                                  .read_text())["plan"] for rank in (0, 1)]
    first, second = plans["budget"]
    assert first["dropped"] and first["repeats"] < 6  # rank 0's own fit trims
    assert (first["repeats"], first["transfer_sizes"]) == (
        second["repeats"], second["transfer_sizes"])
    results = pd.read_csv(tmp_path / "budget" / "results.csv")
    net = results[(results["case"] == "net_p2p") & (results["status"] == "ok")]
    assert set(net["device"]) == {"rank0->rank1", "rank1->rank0"}


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
    assert f"rank(s) 1 did not report within {HANG_TIMEOUT_S} s" in done.stderr
    results = pd.read_csv(out / "results.csv")
    assert (results[results["rank"] == 0]["status"] == "ok").any()
    errors = results[results["status"] == "error"]
    assert list(errors["rank"]) == [1]
    assert f"did not report within {HANG_TIMEOUT_S} s (hung or died)" in errors["note"].iloc[0]
    ranks = json.loads((out / "system.json").read_text())["mpi"]["ranks"]
    assert [r["status"] for r in ranks] == ["ok", "missing"]


def test_a_hung_rank_0_is_named_by_the_others_and_the_job_ends(hung_jobs):
    """Rank 0 hangs after net_p2p: rank 1, waiting for its go-ahead, hears nothing for the
    timeout, says so in one line and ends the job; its own rows stay in its folder (of
    net_p2p, those it sent: rank1->rank0, the ring's way back)."""
    out, done = hung_jobs[0]
    assert done.returncode != 0
    # The first of the last steps: the streamed merge gathers every rank's name first.
    assert (f"rank 1 waited {HANG_TIMEOUT_S} s for every rank's name from rank 0, silent all "
            f"that time: rank 0 hangs") in done.stderr
    kept = pd.read_csv(out / "ranks" / "rank-0001" / "results.csv")
    assert list(kept["case"]) == ["net_p2p"] * 5 + ["ddr_triad"]  # 4 sizes, GPU buffers
    assert set(kept[kept["case"] == "net_p2p"]["device"]) == {"rank1->rank0"}
    assert list(kept[kept["case"] == "ddr_triad"]["status"]) == ["waived"]  # local rank 0 only


def _rank_0_measured(job: _Job) -> float:
    """Wait until rank 0 has written its last file of its own (findings.csv) or the job
    ended; the deadline (JOB_LIMIT_S from now) the caller's later waits keep to."""
    finished = job.out / "ranks" / "rank-0000" / "findings.csv"  # rank 0's last step
    deadline = time.monotonic() + JOB_LIMIT_S
    while not finished.is_file() and job.running(deadline):
        time.sleep(0.2)
    return deadline


def _rank_pid(mpirun_pid: int, rank: int) -> int:
    """The process of `rank` among mpirun's children (its launcher environment says which)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == mpirun_pid and f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(stat.parent.name)
    raise AssertionError(f"no rank {rank} under mpirun {mpirun_pid}")


# Catches (issue 37): an interrupted rank left the job at once (mpirun then killed rank 0),
# with no merged folder, and nothing said which rank was stopped
def test_a_rank_stopped_by_sigterm_is_named_and_the_job_exits_130(tmp_path):
    """Rank 1 hangs at its first job; rank 0 finishes and waits for it; SIGTERM to rank 1
    alone: it reports as interrupted, rank 0 writes the merged folder, every rank exits 130
    (so does mpirun, on the ranks' codes)."""
    _mpi_or_skip()
    job = _Job(tmp_path, "--hang-rank", "1")
    try:
        finished = job.out / "ranks" / "rank-0000" / "findings.csv"  # rank 0's last step
        deadline = time.monotonic() + JOB_LIMIT_S
        while not finished.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # into its gather, waiting for rank 1
        os.kill(_rank_pid(job._process.pid, 1), signal.SIGTERM)
        done = job.finish(timeout_s=HANG_TIMEOUT_S)
    finally:
        job.close()
    assert done.returncode == 130, done.stdout + done.stderr
    assert re.search(rf"interrupted: kept \d+ finished row\(s\) in {re.escape(str(job.out))}\n",
                     done.stderr), done.stderr
    assert "Traceback" not in done.stderr
    system = json.loads((job.out / "system.json").read_text())
    assert system["interrupted"] is True and system["stopped_by"] == "SIGTERM (rank(s) 1)"
    assert [(r["status"], r["error"]) for r in system["mpi"]["ranks"]] == [
        ("ok", None), ("interrupted", "SIGTERM")]
    results = pd.read_csv(job.out / "results.csv")
    assert (results[results["rank"] == 0]["status"] == "ok").any()  # rank 0's rows kept


def _end_job(process: subprocess.Popen) -> None:
    """Take down an mpirun job that did not end by itself: its ranks (a stopped one too),
    then mpirun."""
    if process.poll() is not None:
        return
    for rank in range(2):
        with contextlib.suppress(AssertionError, OSError):
            os.kill(_rank_pid(process.pid, rank), signal.SIGKILL)
    process.kill()
    process.wait()


# Catches (issue 37): a rank 0 stopped (SIGSTOP) before MPI started held the other ranks in
# MPI_Init for good, --mpi-timeout or not (mpi4py's MPI_Init holds Python's lock while it
# waits for every rank: no deadline could run)
def test_a_rank_0_stopped_before_mpi_starts_ends_the_job_within_the_timeout(tmp_path):
    """Rank 0 stops itself before Python starts (so before MPI_Init, deterministically):
    rank 1 gives up after --mpi-timeout with one line, and the job ends with exit 1 (a
    rank waiting in vain for rank 0, docs/fleet.md), nothing measured, nothing written."""
    _mpi_or_skip()
    out = tmp_path / "fleet"
    job = _mpirun_args(out, "--simulate", "--mpi-timeout", "5", cases="ddr_triad")
    args = job.pop("args")
    launch = args.index(sys.executable)
    stop_rank_0 = 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then kill -STOP $$; fi; exec "$@"'
    args[launch:launch] = ["sh", "-c", stop_rank_0, "rank"]
    started = time.monotonic()
    process = subprocess.Popen(args, **job, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        _end_job(process)
        process.communicate()
        pytest.fail("the job never ended: rank 1 waits for the stopped rank 0 for good")
    finally:
        _end_job(process)
    assert time.monotonic() - started < 60, stderr
    assert process.returncode == 1, stdout + stderr
    assert ("error: rank 1 waited 5 s for MPI to start (every rank must join it: one was "
            "stopped, hung or died before it did); nothing was measured; ending the "
            "job") in stderr
    assert "Traceback" not in stderr
    assert not out.exists()


# Catches (issue 37): with every rank signalled directly (pkill, a batch system), a rank still
# finishing 0.2 s after rank 0's signal was merged as `missing`, every row it had finished
# left out of the merged folder (they stayed in ranks/rank-0001 only)
def test_a_rank_slow_to_finish_after_every_rank_is_signalled_keeps_its_rows_and_fate(
        tmp_path):
    """Rank 1 hangs at its first local job; rank 0 finishes and waits for it. SIGTERM to
    rank 1, then (once its folder says so) to rank 0; rank 1 takes 8 s more to finish (a
    test hook), far past the 0.2 s rank 0 waits after a signal: rank 0 reads what rank 1
    wrote in its folder, names it interrupted, keeps its rows, and the job exits 130."""
    _mpi_or_skip()
    job = _Job(tmp_path, "--hang-rank", "1", env={"BWPROF_FLEET_TEST_DELAY": "1:8"})
    try:
        deadline = _rank_0_measured(job)
        os.kill(_rank_pid(job._process.pid, 1), signal.SIGTERM)
        system = job.out / "ranks" / "rank-0001" / "system.json"
        while job.running(deadline):  # rank 1 has written its interrupted folder
            with contextlib.suppress(OSError, ValueError):
                if json.loads(system.read_text()).get("interrupted"):
                    break
            time.sleep(0.1)
        os.kill(_rank_pid(job._process.pid, 0), signal.SIGTERM)
        done = job.finish(timeout_s=HANG_TIMEOUT_S)
    finally:
        job.close()
    assert done.returncode == 130, done.stdout + done.stderr
    assert ("rank(s) 1 did not report within 600 s (or 0.2 s after a stop signal): merged "
            "the finished rows of rank(s) 1 from their own folders") in done.stderr
    assert "Traceback" not in done.stderr
    system = json.loads((job.out / "system.json").read_text())
    assert system["interrupted"] is True and system["stopped_by"].startswith("SIGTERM")
    assert [(r["status"], r.get("error")) for r in system["mpi"]["ranks"]] == [
        ("interrupted", "SIGTERM"), ("interrupted", "SIGTERM")]
    results = pd.read_csv(job.out / "results.csv")
    own = pd.read_csv(job.out / "ranks" / "rank-0001" / "results.csv")
    assert len(own) > 0 and (own["status"] == "ok").any()  # its net_p2p rows
    merged = results[results["rank"] == 1]
    assert list(merged["case"]) == list(own["case"])  # every row it finished, no error row
    assert list(merged["gbps_best"].fillna(-1)) == list(own["gbps_best"].fillna(-1))
    assert (results[results["rank"] == 0]["status"] == "ok").any()


# Catches (issue 37): with every rank signalled at once, a rank whose stuck call returned late
# (its folder not final when rank 0 stopped waiting, 0.2 s after its own signal) was named
# `missing`, not `interrupted`, its finished rows left out of the merge
def test_every_rank_signalled_at_once_names_a_rank_still_finishing_interrupted(tmp_path):
    """Rank 1 hangs at its first local job; rank 0 finishes and waits for it. SIGTERM to
    rank 1, then to rank 0 as soon as rank 1's handler has run (the test hook's cue on
    stderr: on a loaded machine a rank may not run at all in the 0.2 s rank 0 waits);
    rank 1's stuck call returns 8 s after its signal (the hook), its folder not final
    meanwhile. Its signal handler told rank 0 the signal came, so rank 0 names it
    interrupted and merges its finished rows from its folder."""
    _mpi_or_skip()
    job = _Job(tmp_path, "--hang-rank", "1", env={"BWPROF_FLEET_TEST_DELAY": "1:8:job"})
    try:
        deadline = _rank_0_measured(job)
        time.sleep(1)  # into its gather, waiting for rank 1
        rank_0 = _rank_pid(job._process.pid, 0)
        os.kill(_rank_pid(job._process.pid, 1), signal.SIGTERM)
        cue = "test hook: rank 1 waits 8 s (job)"  # its handler ran: it told rank 0
        while cue not in (tmp_path / "stderr").read_text() and job.running(deadline):
            time.sleep(0.05)
        os.kill(rank_0, signal.SIGTERM)
        done = job.finish(timeout_s=HANG_TIMEOUT_S)
    finally:
        job.close()
    assert done.returncode == 130, done.stdout + done.stderr
    assert "merged the finished rows of rank(s) 1 from their own folders" in done.stderr
    assert "Traceback" not in done.stderr
    system = json.loads((job.out / "system.json").read_text())
    assert [(r["status"], r.get("error")) for r in system["mpi"]["ranks"]] == [
        ("interrupted", "SIGTERM"), ("interrupted", "SIGTERM")]
    kept = json.loads((job.out / "ranks" / "rank-0001" / "system.json").read_text())
    assert not kept["interrupted"]  # the premise: its folder did not say it yet
    results = pd.read_csv(job.out / "results.csv")
    own = pd.read_csv(job.out / "ranks" / "rank-0001" / "results.csv")
    assert (own["status"] == "ok").any()  # its net_p2p rows
    merged = results[results["rank"] == 1]
    assert list(merged["case"]) == list(own["case"])  # every row it finished, no error row
    assert (results[results["rank"] == 0]["status"] == "ok").any()


# Catches (issue 37): a rank 0 stopped (SIGSTOP) before its merge began left the job's folder
# with only ranks/ and its lock: `bwprof report RUN` refused it (no system.json)
def test_a_rank_0_stopped_before_its_merge_leaves_a_merged_folder_naming_it(
        silent_rank_0_job):
    """Rank 0 measures, writes its folder, and is stopped before its last steps: rank 1
    waits --mpi-timeout for it, merges the ranks' folders into RUN in its place (rank 0
    `missing`, every row it finished kept), says so in one line and ends the job: exit 1,
    as a rank lost (docs/fleet.md)."""
    import bwprof

    out, done = silent_rank_0_job
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"error: rank 1 waited {SILENT_TIMEOUT_S} s for every rank's name from rank 0, "
            f"silent all that time: rank 0 hangs, was stopped or died before its merge; "
            f"rank 1 merged the ranks' folders into {out} in its place (rank 0 `missing`, "
            f"its 1 finished row(s) kept); ending the job") in done.stderr
    assert "Traceback" not in done.stderr
    run = bwprof.load(out)  # what `bwprof report RUN` reads
    assert run.meta.state == "finished"
    assert [(r.rank, r.status) for r in run.meta.mpi.ranks] == [(0, "missing"), (1, "ok")]
    own = pd.read_csv(out / "ranks" / "rank-0000" / "results.csv")
    results = run.results
    kept = results[(results["rank"] == 0) & (results["case"] != "rank")]
    assert list(kept["status"]) == list(own["status"]) == ["ok"]  # its ddr_triad row
    assert list(kept["gbps_best"]) == list(own["gbps_best"])
    (error,) = results[results["status"] == "error"]["note"]
    assert error.startswith(f"rank 0 went silent for {SILENT_TIMEOUT_S} s before its merge")
