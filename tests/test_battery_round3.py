"""Regressions found by the outside-style fault battery, round 3 (issue 37).

Each test is a defect the battery found on main, kept as a strict xfail until the module
at fault is fixed (then the xfail fails and its marker comes off)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from bwprof.cli import main
from tests.conftest import DATA

HUGE = "1.7976931348623157e308"  # the largest finite float: a finite figure, so it is read


def with_huge_figures(tmp_path: Path) -> Path:
    """A copy of tests/data/h200-quick whose figures are all the largest finite float, as a
    hand-edited or damaged results.csv can hold (finite, so reading takes it)."""
    folder = tmp_path / "huge"
    shutil.copytree(DATA / "h200-quick", folder, ignore=shutil.ignore_patterns("report"))
    path = folder / "results.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields, rows = list(reader.fieldnames or []), list(reader)
    for row in rows:
        for column in ("gbps_median", "gbps_best"):
            if row[column]:
                row[column] = HUGE
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return folder


# Catches: compare's change in % overflowed (100 * (quotient - 1) past any double) for a
# finite 1.8e308 figure against an ordinary baseline: NumPy's RuntimeWarning on stderr,
# '+inf%' on the terminal and 'inf' in compare.csv
def test_compare_a_1e308_figure_against_an_ordinary_baseline(tmp_path, capsys):
    huge = with_huge_figures(tmp_path)
    out = tmp_path / "cmp"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["compare", str(DATA / "h200-quick"), str(huge), "--out", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], \
        [str(w.message) for w in caught]
    assert "inf%" not in text
    with (out / "compare.csv").open(newline="", encoding="utf-8") as handle:
        cells = [cell for row in csv.reader(handle) for cell in row]
    assert not [cell for cell in cells if cell.lower() in ("inf", "-inf", "+inf")]


def _few_files() -> None:
    """In the child, before bwprof starts: at most 8 open files (`ulimit -n 8`)."""
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (8, 8))


# Catches: under `ulimit -n 8` a simulated run measured and wrote every row, then the lazy
# import of render/html.py (api._Run._report_files) failed with EMFILE: an OSError traceback
# and exit 1; now the entry point's one line, exit 3 (out of resources), every row kept
def test_run_under_a_tiny_open_file_limit_ends_in_one_line(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "bwprof", "run", "--simulate", "--size", "1MiB", "--repeats", "2",
         "--threads", "1", "--cases", "ddr_triad", "--quiet", "--out", str(out)],
        capture_output=True, text=True, timeout=300, preexec_fn=_few_files, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 3), done.stderr[-2000:]
    if done.returncode == 3:
        assert [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert (out / "results.csv").stat().st_size > 0


def _rank_pids(out: Path) -> dict[int, int]:
    """The bwprof processes of the job writing `out`, by MPI rank (their environment)."""
    pids = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
            environ = (cmdline.parent / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(out).encode() not in words or words[0].endswith(b"mpirun"):
            continue
        for entry in environ:
            if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
                pids[int(entry.split(b"=", 1)[1])] = int(cmdline.parent.name)
    return pids


@pytest.mark.mpi
def test_sigterm_to_one_rank_mid_run_is_reported_not_waited_for(tmp_path):
    """SIGTERM to rank 1 alone mid net_p2p: rank 0 stops waiting for it in net_p2p the
    moment it announces the signal (it waited the whole --mpi-timeout, then said rank 1
    'did not report' and failed itself), finishes its own cases, and merges rank 1's report
    (interrupted); the job exits 130."""
    if shutil.which("mpirun") is None:
        pytest.skip("needs mpirun")
    pytest.importorskip("mpi4py")
    out = tmp_path / "fleet"
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_orte_tmpdir_base": str(tmp_path)}
    job = subprocess.Popen(
        ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "bwprof", "run",
         "--simulate", "--preset", "quick", "--size", "1MiB", "--repeats", "2", "--threads", "1",
         "--no-plots", "--quiet", "--cases", "ddr_triad,net_p2p,h2d_pinned,hbm_triad,d2h_pinned",
         "--mpi-timeout", "20", "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rows = out / "ranks" / "rank-0001" / "results.csv"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and job.poll() is None:
            if rows.is_file() and len(rows.read_text().splitlines()) > 1:
                break
            time.sleep(0.2)
        os.kill(_rank_pids(out)[1], signal.SIGTERM)
        _, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 130, err[-2000:]
    assert "did not report" not in err, err[-2000:]
    ranks = json.loads((out / "system.json").read_text())["mpi"]["ranks"]
    assert [r["status"] for r in ranks] == ["ok", "interrupted"], ranks
    with open(out / "results.csv", newline="") as merged:
        kept = [row for row in csv.DictReader(merged) if row["device"] == "rank1->rank0"]
    with open(rows, newline="") as own:
        assert len(kept) == len(list(csv.DictReader(own))) > 0  # rank 1's finished rows
