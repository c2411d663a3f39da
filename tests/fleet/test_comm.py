"""Launch detection and the collective steps' timeouts, with a fake communicator."""

from __future__ import annotations

import sys
import threading

import pytest

from bwprof.errors import BwprofError
from bwprof.fleet import comm as comm_module
from bwprof.fleet.comm import (
    Fleet,
    FleetTimeout,
    import_mpi,
    launched_by_mpi,
    rank_from_environment,
)


def test_launch_detection():
    assert launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "4"})
    assert launched_by_mpi({"PMI_SIZE": "2"})
    assert not launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "1"})
    assert not launched_by_mpi({})
    # Slurm sets SLURM_NTASKS in an allocation too; only a task started by srun has a PROCID.
    assert not launched_by_mpi({"SLURM_NTASKS": "8"})
    assert launched_by_mpi({"SLURM_NTASKS": "8", "SLURM_PROCID": "3"})
    assert rank_from_environment({"OMPI_COMM_WORLD_RANK": "3"}) == 3
    assert rank_from_environment({"SLURM_PROCID": "0"}) == 0
    assert rank_from_environment({}) is None


def test_without_mpi4py_the_error_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(BwprofError, match=r"srun\) needs mpi4py .*pip install 'bwprof\[mpi\]'"):
        import_mpi()


class Request:
    def __init__(self, done, value=None):
        self.done, self.value = done, value

    def test(self):
        return self.done, self.value


class FakeComm:
    """Rank 0 of a 3-rank job where only rank 1 ever sends; nothing completes otherwise."""

    def __init__(self):
        self.inbox = {1: ["from one"]}
        self.aborted = None

    def iprobe(self, source, tag):
        return bool(self.inbox.get(source))

    def recv(self, source, tag):
        return self.inbox[source].pop(0)

    def isend(self, value, dest, tag):
        return Request(False)

    def Ibarrier(self):
        return Request(False)

    def Abort(self, code):
        self.aborted = code


@pytest.fixture
def fleet(monkeypatch):
    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    return Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="node0",
                 timeout_s=0.05)


def test_gather_keeps_who_reported_and_gives_up_on_the_rest(fleet):
    assert fleet.gather("mine", "results") == {0: "mine", 1: "from one"}


def test_a_step_that_never_completes_times_out_with_a_clear_message(fleet):
    with pytest.raises(FleetTimeout, match=r"rank 0 waited 0\.05 s for every rank to reach x"):
        fleet.wait(fleet.comm.Ibarrier(), "every rank to reach x")
    with pytest.raises(FleetTimeout, match=r"rank 0 waited 0\.05 s for the plan"):
        fleet.bcast("plan", "the plan")
    receiver = Fleet(FakeComm(), rank=2, size=3, local_rank=0, local_size=1, host="n",
                     timeout_s=0.05)
    with pytest.raises(FleetTimeout, match="from rank 0"):
        receiver.bcast(None, "the plan")
    fleet.abort(1)
    assert fleet.comm.aborted == 1


# Catches: gather without its deadline
def test_gather_gives_up_on_a_silent_rank_within_its_timeout(monkeypatch):
    from bwprof.fleet import comm as comm_module
    from bwprof.fleet.comm import Fleet
    from tests.fleet.test_comm import FakeComm

    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    fleet = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="node0",
                  timeout_s=0.05)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(fleet.gather("mine", "results")),
                              daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "gather did not give up on rank 2"
    assert outcome == [{0: "mine", 1: "from one"}]


# Catches: a receive without its deadline
def test_a_receive_from_a_silent_rank_times_out(monkeypatch):
    from bwprof.fleet import comm as comm_module
    from bwprof.fleet.comm import Fleet, FleetTimeout
    from tests.fleet.test_comm import FakeComm

    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    receiver = Fleet(FakeComm(), rank=2, size=3, local_rank=0, local_size=1, host="n",
                     timeout_s=0.05)
    outcome = []

    def receive():
        try:
            receiver.bcast(None, "the plan")
        except FleetTimeout as exc:
            outcome.append(str(exc))

    worker = threading.Thread(target=receive, daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "the receive never timed out"
    assert outcome == ["rank 2 waited 0.05 s for the plan from rank 0"]
