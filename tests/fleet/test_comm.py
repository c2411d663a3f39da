"""Launch detection and the collective steps' timeouts, with a fake communicator."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from bwprof.errors import BwprofError
from bwprof.fleet import comm as comm_module
from bwprof.fleet.comm import (
    HEARTBEAT_TAG,
    STOPPING_TAG,
    Fleet,
    FleetTimeout,
    PeerStopped,
    import_mpi,
    launched_by_mpi,
    rank_from_environment,
)
from tests.fleet.helpers import gives_up


def test_launch_detection():
    assert launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "4"})
    assert launched_by_mpi({"PMI_SIZE": "2"})
    assert not launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "1"})
    assert not launched_by_mpi({})
    # Slurm sets SLURM_NTASKS in an allocation too; only a task started by srun has a PROCID
    # and a step (see the tests of srun below).
    assert not launched_by_mpi({"SLURM_NTASKS": "8"})
    assert launched_by_mpi({"SLURM_NTASKS": "8", "SLURM_PROCID": "3", "SLURM_STEP_ID": "0"})
    assert rank_from_environment({"OMPI_COMM_WORLD_RANK": "3"}) == 3
    assert rank_from_environment({"SLURM_PROCID": "0"}) == 0
    assert rank_from_environment({}) is None


@pytest.mark.parametrize("value", ["²", "9" * 5000, "abc", "-2", " 2", ""])
def test_a_launcher_variable_that_is_no_count_is_no_launch_and_no_rank(value):
    """'²' passes str.isdigit but not int(), 5000 digits pass neither int(): either was a
    traceback before the first line of a run."""
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        assert not launched_by_mpi({name: value})
    assert not launched_by_mpi({"SLURM_NTASKS": value, "SLURM_PROCID": "0"})
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        assert rank_from_environment({name: value}) is None


SRUN_TASK = {  # what srun sets in task 5 of `srun --nodes=2 --ntasks-per-node=4` (no mpirun)
    "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "8", "SLURM_NPROCS": "8", "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0", "SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "2",
}
BATCH_SCRIPT = {  # what the batch script of that allocation sees: task 0 of no srun step
    "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "8", "SLURM_NPROCS": "8", "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
}
LAUNCHERS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
             "PMI_SIZE", "PMI_RANK", "PMIX_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def _slurm(monkeypatch, variables):
    """This process as Slurm would start it: `variables` set, every other launcher's gone."""
    for name in [*LAUNCHERS, *(n for n in os.environ if n.startswith("SLURM_"))]:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("plugin", [{}, {"PMI_RANK": "5", "PMI_SIZE": "8"},  # --mpi=pmi2
                                    {"PMIX_RANK": "5"}])  # --mpi=pmix
def test_a_task_srun_started_is_a_launch_and_knows_its_rank(monkeypatch, plugin):
    _slurm(monkeypatch, {**SRUN_TASK, **plugin})
    assert launched_by_mpi() and rank_from_environment() == 5


# Catches: `bwprof run` in a batch script taken for rank 0 of an 8-rank fleet (the batch step
# has SLURM_NTASKS of the allocation and SLURM_PROCID=0, but no srun step)
def test_the_batch_script_itself_is_no_launch(monkeypatch):
    _slurm(monkeypatch, BATCH_SCRIPT)
    assert not launched_by_mpi()
    assert rank_from_environment() == 0  # a lone process: rank 0 of nothing, harmless
    _slurm(monkeypatch, {**BATCH_SCRIPT, "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_ID": "0"})
    assert not launched_by_mpi()  # `srun -n 1 bwprof run`: one task, no fleet


def test_under_srun_a_ranks_place_on_its_node_comes_from_mpi(monkeypatch):
    """The local rank (and so the GPU a rank takes) is MPI's own count of the ranks sharing
    the node's memory, the same as SLURM_LOCALID, with no OMPI_COMM_WORLD_LOCAL_RANK."""
    from bwprof.gpushare import gpu_share

    _slurm(monkeypatch, SRUN_TASK)

    class Node:  # the two ranks of node 1 sharing its memory: world ranks 4-7
        def Get_rank(self):
            return int(os.environ["SLURM_LOCALID"])

        def Get_size(self):
            return 4

    class World:
        def Get_rank(self):
            return 5

        def Get_size(self):
            return 8

        def Split_type(self, kind, key):
            assert kind == "shared" and key == 5
            return Node()

    fake = type("MPI", (), {"COMM_WORLD": World(), "COMM_TYPE_SHARED": "shared",
                            "Get_processor_name": staticmethod(lambda: "node1"),
                            "Query_thread": staticmethod(lambda: 3), "THREAD_SERIALIZED": 2,
                            "Is_initialized": staticmethod(lambda: True)})
    monkeypatch.setattr(comm_module, "import_mpi", lambda: fake)
    fleet = Fleet.join(60.0)
    assert (fleet.rank, fleet.size, fleet.local_rank, fleet.local_size) == (5, 8, 1, 4)
    assert gpu_share(fleet.local_rank, fleet.local_size, 4) == [1]  # SLURM_LOCALID's GPU
    assert gpu_share(fleet.local_rank, fleet.local_size, 1) == [0]  # --gpus-per-task=1


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
    """Rank 0 of a 3-rank job where only rank 1 ever sends (one message, which matches any
    tag but the heartbeats'); nothing completes otherwise."""

    def __init__(self):
        self.inbox = {1: ["from one"]}
        self.aborted = None
        self.sent = []

    def iprobe(self, source, tag):
        return tag != HEARTBEAT_TAG and bool(self.inbox.get(source))

    def recv(self, source, tag):
        return self.inbox[source].pop(0)

    def isend(self, value, dest, tag):
        self.sent.append((dest, tag))
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
    worker.join(timeout=120)  # a guard: it gives up in 0.05 s
    assert not worker.is_alive(), "gather did not give up on rank 2"
    assert outcome == [{0: "mine", 1: "from one"}]


# Catches: a receive without its deadline
def test_a_receive_from_a_silent_rank_times_out(monkeypatch):
    from bwprof.fleet import comm as comm_module
    from bwprof.fleet.comm import Fleet
    from tests.fleet.test_comm import FakeComm

    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    receiver = Fleet(FakeComm(), rank=2, size=3, local_rank=0, local_size=1, host="n",
                     timeout_s=0.05)
    outcome = gives_up(lambda: receiver.bcast(None, "the plan"), guard_s=120)
    assert outcome == ["rank 2 waited 0.05 s for the plan from rank 0, silent all that time"]


class BeatingComm(FakeComm):
    """A peer that measures for 0.2 s, sending heartbeats all along, then sends its value;
    a message the fake sends is taken at once."""

    def __init__(self, peer, ready_after_s=0.2):
        super().__init__()
        self.peer, self.ready = peer, time.monotonic() + ready_after_s
        self.inbox = {peer: ["late value"]}

    def iprobe(self, source, tag):
        if source != self.peer:
            return False
        if tag == HEARTBEAT_TAG:
            return time.monotonic() < self.ready
        return time.monotonic() >= self.ready and bool(self.inbox[source])

    def recv(self, source, tag):
        return None if tag == HEARTBEAT_TAG else self.inbox[source].pop(0)

    def send(self, value, dest, tag):  # after the go-ahead: rank 0 is receiving
        self.sent.append((dest, tag))

    def isend(self, value, dest, tag):
        self.sent.append((dest, tag))
        ready = self.ready

        class Delivered(Request):  # taken once the peer is done measuring
            def test(self):
                return time.monotonic() >= ready, None

        return Delivered(False)


# Catches: a rank that finished early gives up on one still measuring (and sending
# heartbeats) after timeout_s, though nothing hangs
@pytest.mark.parametrize("rank", [0, 1], ids=["rank 0 gathers", "rank 1 sends"])
def test_heartbeats_keep_a_wait_alive_past_its_timeout(monkeypatch, rank):
    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    peer = 1 if rank == 0 else 0
    fleet = Fleet(BeatingComm(peer), rank=rank, size=2, local_rank=0, local_size=1,
                  host="n", timeout_s=0.05)
    assert fleet.gather("mine", "results") == ({0: "mine", 1: "late value"} if rank == 0
                                               else None)
    receiver = Fleet(BeatingComm(0), rank=1, size=2, local_rank=0, local_size=1, host="n",
                     timeout_s=0.05)
    assert receiver.bcast(None, "the plan") == "late value"


def test_heartbeats_go_to_the_ranks_that_may_wait():
    root = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="n",
                 timeout_s=1)
    root.heartbeat()
    assert root.comm.sent == [(1, HEARTBEAT_TAG), (2, HEARTBEAT_TAG)]
    other = Fleet(FakeComm(), rank=2, size=3, local_rank=0, local_size=1, host="n",
                  timeout_s=1)
    other.heartbeat()
    other.heartbeat()  # the first, not yet taken, is kept until it completes
    assert other.comm.sent == [(0, HEARTBEAT_TAG)] * 2 and len(other._beats) == 2


# Catches: rank 0 sending N-1 beats at every job (O(N^2) messages over net_p2p's O(N) jobs)
def test_rank_0_beats_to_every_rank_at_most_once_a_second(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(comm_module, "time", type("Clock", (), {
        "monotonic": staticmethod(lambda: now[0]), "sleep": staticmethod(time.sleep)}))
    root = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="n",
                 timeout_s=60)
    for _ in range(5):  # five jobs within the second
        root.heartbeat()
        now[0] += 0.1
    assert root.comm.sent == [(1, HEARTBEAT_TAG), (2, HEARTBEAT_TAG)]
    now[0] += 1.0
    root.heartbeat()
    assert len(root.comm.sent) == 4
    quick = Fleet(FakeComm(), rank=0, size=2, local_rank=0, local_size=1, host="n",
                  timeout_s=2)  # a short timeout: a beat every tenth of it
    quick.heartbeat()
    now[0] += 0.21
    quick.heartbeat()
    assert len(quick.comm.sent) == 2


# Catches: a rank that gave up on rank 0 with its (large) results still posted as a send,
# which rank 0, coming later to receive them, read from freed memory and crashed
def test_a_rank_sends_its_results_only_after_rank_0_says_go():
    fleet = Fleet(FakeComm(), rank=1, size=3, local_rank=0, local_size=1, host="n",
                  timeout_s=0.05)
    with pytest.raises(FleetTimeout, match=r"rank 1 waited 0\.05 s for results from rank 0"):
        fleet.gather("a large report", "results")
    assert fleet.comm.sent == []  # nothing posted: nothing owed after giving up
    root = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="n",
                 timeout_s=0.05)
    assert root.gather("mine", "results") == {0: "mine", 1: "from one"}
    assert [dest for dest, tag in root.comm.sent if tag != HEARTBEAT_TAG] == [1, 2]  # go


# Catches: a stopped rank cost the job a full timeout at every later step (SIGSTOP of rank 0
# under --mpi-timeout 20: 126 s), each wait starting its own timeout on the same silent rank
def test_a_rank_given_up_on_once_is_given_up_on_at_once_after(monkeypatch):
    monkeypatch.setattr(comm_module, "POLL_S", 0.001)
    receiver = Fleet(FakeComm(), rank=2, size=3, local_rank=0, local_size=1, host="n",
                     timeout_s=0.05)
    with pytest.raises(FleetTimeout, match="silent all that time"):
        receiver.bcast(None, "the plan")
    conductor = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="node0",
                      timeout_s=0.05)
    assert conductor.gather("mine", "names") == {0: "mine", 1: "from one"}  # 2: silent
    receiver.timeout_s = conductor.timeout_s = 3600.0  # a second wait for them: none
    outcome: list = []

    def later_steps():
        try:
            receiver.bcast(None, "the merged folder")
        except FleetTimeout as exc:
            outcome.append(str(exc))
        conductor.comm.inbox[1] = ["again"]
        outcome.append(conductor.gather("mine", "results"))

    worker = threading.Thread(target=later_steps, daemon=True)
    worker.start()
    worker.join(timeout=30)  # a guard: neither step waits
    assert not worker.is_alive(), "a rank silent before was waited for again"
    assert outcome == [
        "rank 2 gave up at once on the merged folder from rank 0: it went silent earlier "
        "(rank 2 waited 0.05 s for the plan from rank 0, silent all that time)",
        {0: "mine", 1: "again"}]
    assert receiver.silent(1) is None and conductor.silent(2) and not conductor.silent(1)


# Catches (issue 37): a rank signalled with the others but still finishing when rank 0 stopped
# waiting (0.2 s) was named `missing`: nothing told rank 0 that the signal had reached it;
# and, told to rank 0 alone, a net_p2p pair of two other ranks waited out the timeout
def test_a_rank_tells_every_rank_once_that_a_stop_signal_came_and_never_raises():
    rank_1 = Fleet(FakeComm(), rank=1, size=3, local_rank=0, local_size=1, host="n",
                   timeout_s=0.05)
    rank_1.announce_stop("SIGTERM")
    rank_1.announce_stop("SIGINT")  # a second signal: said once
    assert rank_1.comm.sent == [(0, STOPPING_TAG), (2, STOPPING_TAG)]
    peers = Fleet(FakeComm(), rank=3, size=8, local_rank=0, local_size=1, host="n",
                  timeout_s=0.05, listeners=frozenset({2, 3, 6}))  # its net_p2p peers
    peers.announce_stop("SIGTERM")  # rank 0 and the peers only: not N^2 words in all
    assert peers.comm.sent == [(0, STOPPING_TAG), (2, STOPPING_TAG), (6, STOPPING_TAG)]
    root = Fleet(FakeComm(), rank=0, size=3, local_rank=0, local_size=1, host="n",
                 timeout_s=0.05)
    root.announce_stop("SIGTERM")  # rank 0 tells no one
    assert root.comm.sent == []
    assert root.stopped_ranks() == {1: "from one"}  # the word rank 1 sent, taken
    assert root.stopped_ranks() == {1: "from one"}  # and kept: the merge asks again
    broken = Fleet(FakeComm(), rank=2, size=3, local_rank=0, local_size=1, host="n",
                   timeout_s=0.05)
    broken.comm.isend = lambda *args, **kwargs: 1 / 0  # from a signal handler: no raise
    broken.announce_stop("SIGTERM")


class StoppedComm(FakeComm):
    """Rank 0 of a 2-rank job whose rank 1 sent only its word that a stop signal came."""

    def __init__(self):
        super().__init__()
        self.inbox = {1: ["SIGTERM"]}

    def iprobe(self, source, tag):
        return tag == STOPPING_TAG and bool(self.inbox.get(source))


# Catches (issue 37): SIGTERM to rank 1 alone mid net_p2p: rank 0 waited the whole
# --mpi-timeout for it in net_p2p, then said it 'did not report' and failed itself
def test_rank_0_measuring_gives_up_at_once_on_a_rank_that_announced_a_stop():
    root = Fleet(StoppedComm(), rank=0, size=2, local_rank=0, local_size=1, host="n",
                 timeout_s=30)
    started = time.monotonic()
    with root.sparing_stopped(), pytest.raises(PeerStopped) as raised:
        root.wait(Request(False), "the window to arrive", 1)
    assert time.monotonic() - started < 5  # not the 30 s timeout
    assert (raised.value.peer, raised.value.signal_name) == (1, "SIGTERM")
    assert "rank 1 was stopped by SIGTERM" in str(raised.value)
    assert root.stopped_ranks() == {1: "SIGTERM"}  # still known to the merge
    assert root.silent(1) is None  # its report is still received, not given up on
    root.timeout_s = 0.05  # outside a measurement (the last steps) it is waited for
    with pytest.raises(FleetTimeout) as timed_out:
        root.wait(Request(False), "the merged folder", 1)
    assert not isinstance(timed_out.value, PeerStopped)
