"""`bwprof list` says what can run here; inside an MPI launch, what `bwprof run` there would
do, said once (issue 36)."""

import importlib.util
import os
import subprocess
import sys

from bwprof import api, availability
from bwprof.cases import CASES

LAUNCH = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}


def _list(rank: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI", "SLURM_", "MPI_", "NUMBA_"))}
    env.update(LAUNCH, OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_RANK=str(rank % 2))
    return subprocess.run([sys.executable, "-m", "bwprof", "list"], capture_output=True,
                          text=True, timeout=120, env=env)


# Catches: every rank of `mpirun -n 4 bwprof list` printed the table, each saying the MPI
# cases need an MPI launch (the one they were in)
def test_list_in_an_mpi_launch_is_said_once_and_runs_the_mpi_cases():
    quiet = _list(1)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    done = _list(0)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    net = next(line for line in lines if line.startswith("net_p2p "))
    if importlib.util.find_spec("mpi4py") is not None:
        assert " yes " in net
    else:
        mark = next(word for word in net.split() if word.startswith("no"))
        assert f"{mark}: {availability.NO_MPI4PY_REASON}" in lines
    assert availability.NO_MPI_REASON not in done.stdout
    assert lines[-1].startswith("here: rank 0 of an MPI launch of 4 ranks")


def test_outside_a_launch_the_mpi_cases_need_one():
    found = availability.case_availability(CASES)
    assert found["net_p2p"] == availability.NO_MPI_REASON
    assert availability.case_availability(CASES, ranks=1)["net_p2p"] == availability.NO_MPI_REASON


# Catches: `bwprof list` on a rank sharing its node ignored the share: it offered the cases
# that need every GPU of the node, which the fleet run waives on that rank
def test_a_rank_sharing_its_node_holds_one_gpu_as_a_fleet_rank_does(monkeypatch):
    monkeypatch.setattr(availability, "has_nvidia_driver", lambda: True)
    monkeypatch.setattr(availability, "_gpu_count", lambda: 2)  # the simulated backend's
    monkeypatch.setattr(availability, "_gpu_executor",
                        lambda only: api.gpu_executor(simulate=True, only=only)[0])
    whole = availability.case_availability(CASES, ranks=2, local=(0, 1))  # one rank a node
    assert whole["p2p_copy"] is None and whole["hbm_triad"] is None
    shared = availability.case_availability(CASES, ranks=4, local=(1, 2))
    assert shared["hbm_triad"] is None
    assert "this rank holds gpu1 of its node's 2 GPUs" in (shared["p2p_copy"] or "")
