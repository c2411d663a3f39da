from __future__ import annotations

import collections
import itertools
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from bwprof.cases import get_case
from bwprof.fleet import comm as comm_module
from bwprof.fleet import netp2p
from bwprof.fleet.comm import HEARTBEAT_TAG, STOPPING_TAG, Fleet, FleetTimeout
from bwprof.fleet.netp2p import NetP2PExecutor, cuda_aware_mpi, window_for
from bwprof.gpu.sim import SimBackend
from bwprof.measurement import NotRun
from bwprof.plan import make_plan
from bwprof.units import MiB

PLAN = make_plan(cases="net_p2p", preset="quick", repeats=2, usable_cpus=1, llc_bytes=None,
                 memory_available_bytes=None)


def _executor(rank=0, size=3, gpus=(0, 0, 0), aware=(False, "test")):
    fleet = Fleet(None, rank, size, 0, 1, f"node{rank}", 1.0)
    return NetP2PExecutor(fleet, list(gpus), aware, hosts=[f"node{r}" for r in range(size)])


def test_window_keeps_about_64_mib_in_flight():
    assert window_for(64 << 10) == 64
    assert window_for(16 * MiB) == 4
    assert window_for(1 << 30) == 1


def test_jobs_go_over_the_selected_pairs_and_are_tagged_alike_everywhere():
    case = get_case("net_p2p")
    jobs = _executor().jobs(case, PLAN)
    host = [j for j in jobs if j.memory == "host"]
    ring = [(0, 1), (1, 0), (1, 2), (2, 1), (2, 0), (0, 2)]  # 3 ranks: the ring is every pair
    assert list(dict.fromkeys(j.ranks for j in host)) == ring
    assert [j.size_bytes for j in host if j.ranks == (0, 1)] == list(PLAN.transfer_sizes)
    assert [(j.ranks, j.memory) for j in jobs if j.memory == "hbm"] == [
        (pair, "hbm") for pair in ring]
    assert host[0].device_label == "rank0->rank1"
    sender, other = _executor(rank=0), _executor(rank=2)
    sender.jobs(case, PLAN)
    other.jobs(case, PLAN)
    assert other._tags == sender._tags  # the same list on every rank: the same tags
    assert len(set(other._tags.values())) == len(jobs)


def test_one_rank_is_waived_and_ranks_outside_a_pair_make_no_row():
    case = get_case("net_p2p")
    assert _executor(size=1).unavailable_reason(case).status == "waived"
    executor = _executor(rank=2)
    (job, *_) = executor.jobs(case, PLAN)
    assert job.ranks == (0, 1) and executor.measure(case, job, PLAN) == []


def test_gpu_buffers_are_waived_with_the_reason():
    case = get_case("net_p2p")
    executor = _executor(rank=0, gpus=(1, 0, 1), aware=(True, "test"))
    gpu_jobs = [j for j in executor.jobs(case, PLAN) if j.memory == "hbm"]
    with pytest.raises(NotRun, match=r"rank\(s\) 1 have no GPU"):
        executor.measure(case, gpu_jobs[0], PLAN)
    receiver = _executor(rank=1, gpus=(1, 0, 1), aware=(True, "test"))
    receiver.jobs(case, PLAN)
    assert receiver.measure(case, gpu_jobs[0], PLAN) == []
    plain = _executor(rank=0)
    (from_0_to_2,) = [j for j in gpu_jobs if j.ranks == (0, 2)]
    with pytest.raises(NotRun, match="not CUDA-aware"):
        plain.measure(case, from_0_to_2, PLAN)


def test_cuda_awareness(monkeypatch):
    monkeypatch.setenv(netp2p.CUDA_AWARE_ENV, "1")
    assert cuda_aware_mpi("Open MPI v4.1.4") == (True, "BWPROF_MPI_CUDA_AWARE=1")
    monkeypatch.delenv(netp2p.CUDA_AWARE_ENV)
    assert cuda_aware_mpi("MPICH 4.2")[0] is False
    monkeypatch.setattr(netp2p.shutil, "which", lambda name: "/usr/bin/ompi_info")

    class Done:
        stdout = "mca:mpi:base:param:mpi_built_with_cuda_support:value:true\n"

    monkeypatch.setattr(netp2p.subprocess, "run", lambda *a, **k: Done())
    assert cuda_aware_mpi("Open MPI v5.0.3") == (True, "ompi_info: built with CUDA support")


class Loopback:
    """Two ranks' MPI point-to-point calls in one process: a FIFO per (source, dest, tag), as
    MPI's non-overtaking rule keeps messages of one pair and tag in order. Buffers (Isend)
    are copied as bytes, so a GPU array of the simulated backend travels like a CUDA-aware
    library would move it; `damage` flips a byte of every buffer message."""

    def __init__(self, damage=False):
        self.queues = collections.defaultdict(collections.deque)
        self.lock = threading.Lock()
        self.damage = damage

    def comm(self, rank):
        loop = self

        class Done:
            def test(self):
                return True, None

        class Receive:
            def __init__(self, key, into=None):
                self.key, self.into = key, into

            def test(self):
                with loop.lock:
                    if not loop.queues[self.key]:
                        return False, None
                    message = loop.queues[self.key].popleft()
                if self.into is None:
                    return True, message
                np.asarray(self.into).view(np.uint8)[:] = message
                return True, None

        def send(value, dest, tag):
            with loop.lock:
                loop.queues[(rank, dest, tag)].append(value)
            return Done()

        def send_buffer(buffer, dest, tag):
            data = np.array(np.asarray(buffer).view(np.uint8), copy=True)
            if loop.damage:
                data[-1] ^= 0xFF
            return send(data, dest, tag)

        def iprobe(source, tag):
            with loop.lock:
                return bool(loop.queues[(source, rank, tag)])

        def recv(source, tag):
            with loop.lock:
                return loop.queues[(source, rank, tag)].popleft()

        return type("Comm", (), {
            "isend": staticmethod(send), "Isend": staticmethod(send_buffer),
            "iprobe": staticmethod(iprobe), "recv": staticmethod(recv),
            "irecv": staticmethod(lambda source, tag: Receive((source, rank, tag))),
            "Irecv": staticmethod(lambda buffer, source, tag: Receive((source, rank, tag),
                                                                      buffer)),
        })()


class BrokenGpu(SimBackend):
    """A GPU whose allocations fail with something other than out of memory."""

    def device_array(self, device, nbytes):
        raise RuntimeError("cudaErrorLaunchFailure")


EXCHANGE_TIMEOUT_S = 120.0
"""The loopback ranks' MPI timeout: a guard only. A rank is silent to its peer while it
computes (the receiver's first validation loads or compiles Numba's byte compare: seconds on
a loaded machine), and no test here passes by a wait running out: one that should not wait
shows it in what each end returned (a FleetTimeout, or the sender's 'did not take part')."""


class SteppedClock:
    """The clock of bwprof.fleet.comm in a test: real time plus the steps the test takes, so
    a wait can last several timeouts at no cost, and only where the test says. `naps`
    counts comm's sleeps, one a poll of a waiting rank."""

    def __init__(self):
        self.offset = 0.0
        self.naps = 0

    def monotonic(self):
        return time.monotonic() + self.offset

    def sleep(self, seconds):
        self.naps += 1
        time.sleep(seconds)


def _busy_elsewhere(fleet, loop, clock, timeouts, receiver_done):
    """Rank 0 busy with earlier pairs for `timeouts` of rank 1's timeouts on `clock`, beating
    at every job as a run does: each beat is taken by the waiting receiver before the clock
    moves on, by half a timeout, so no stretch the receiver sees between two beats is a
    timeout long, however late either thread runs; the last beat leaves it a whole one.
    A receiver that polled twice without taking a beat does not listen for them: the clock
    moves on all the same (and it gives up, as it would in a run)."""
    for step in range(2 * timeouts + 1):
        if step:
            clock.offset += fleet.timeout_s / 2
        fleet.heartbeat()
        naps, guard = clock.naps, time.monotonic() + EXCHANGE_TIMEOUT_S
        while not receiver_done() and clock.naps < naps + 2:
            with loop.lock:
                if not loop.queues[(0, 1, HEARTBEAT_TAG)]:
                    break
            assert time.monotonic() < guard, "rank 1 neither waited for rank 0 nor ended"
            time.sleep(0.001)
        if receiver_done():  # it gave up on rank 0: the outcomes say so
            return


def _gpu_buffer_exchange(damage=False, memory=(1 << 30, 1 << 30), broken=None,
                         hosts=("node0", "node1"), timeout_s=EXCHANGE_TIMEOUT_S,
                         busy_clock=None, busy_timeouts=0):
    """Rank 0 sends to rank 1 from GPU buffers of the simulated backend, over a loopback:
    what each rank's measure returned or raised. `memory`: each rank's simulated GPU;
    `broken`: the rank whose GPU fails every allocation; `busy_clock`, `busy_timeouts`:
    rank 0 starts that many of rank 1's timeouts late on that clock (see _busy_elsewhere)."""
    plan = replace(PLAN, transfer_sizes=(64 << 10, 1 * MiB))  # GPU buffers: the largest
    loop, case = Loopback(damage), get_case("net_p2p")
    executors = [NetP2PExecutor(Fleet(loop.comm(rank), rank, 2, 0, 1, f"node{rank}",
                                      timeout_s),
                                [1, 1], (True, "test"),
                                gpu=((BrokenGpu if rank == broken else SimBackend)(
                                    devices=1, memory_bytes=memory[rank]), 0),
                                hosts=list(hosts)) for rank in (0, 1)]
    jobs, _same = [executor.jobs(case, plan) for executor in executors]  # both know the tags
    (job,) = [j for j in jobs if j.memory == "hbm" and j.ranks == (0, 1)]
    outcomes: list = [None, None]

    def measure(rank):
        if rank == 0 and busy_timeouts:  # busy elsewhere (earlier jobs), beating as a run does
            _busy_elsewhere(executors[0].fleet, loop, busy_clock, busy_timeouts,
                            lambda: outcomes[1] is not None)
            if outcomes[1] is not None:
                return  # rank 1 gave up on it: nothing left to send to
        try:
            outcomes[rank] = executors[rank].measure(case, job, plan)
        except (NotRun, RuntimeError, FleetTimeout) as exc:
            outcomes[rank] = exc

    receiver = threading.Thread(target=measure, args=(1,))
    receiver.start()
    measure(0)
    receiver.join(timeout=3 * timeout_s)
    assert not receiver.is_alive()
    return outcomes


def _waited_for_nothing(outcome) -> bool:
    """Whether an end's outcome is that of a wait that ran out: the receiver's FleetTimeout,
    the sender's error naming the peer that did not take part."""
    return isinstance(outcome, FleetTimeout) or "did not take part" in str(outcome)


def _gpu_buffer_rows(damage=False):
    rows, received = _gpu_buffer_exchange(damage)
    assert received == []  # only the sender makes a row
    return rows


def test_gpu_buffers_travel_and_are_validated_on_the_receivers_gpu():
    (row,) = _gpu_buffer_rows()
    assert row.valid and row.memory == "hbm" and row.device_name == "node0 -> node1"
    assert row.size_bytes == 1 * MiB
    assert len(row.seconds_per_op) == PLAN.repeats
    (damaged,) = _gpu_buffer_rows(damage=True)
    assert not damaged.valid
    assert damaged.note.startswith("validation failed: 1 of ")
    assert "not the network" not in row.note


# Catches: a rank waiting for its pair's turn gives up on rank 0, busy with earlier pairs
# and beating all along, after --mpi-timeout (the later ranks of a big fleet all did)
def test_a_pair_waits_past_its_timeout_while_its_peer_beats(monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(comm_module, "time", clock)
    sent, received = _gpu_buffer_exchange(busy_clock=clock, busy_timeouts=3)
    assert received == [], received  # not a FleetTimeout: it waited as long as rank 0 beat
    assert clock.offset == 3 * EXCHANGE_TIMEOUT_S  # for three of its timeouts
    (row,) = sent
    assert row.valid


# Catches: two ranks of one node measured over shared memory, shown as the network's figure
def test_a_pair_on_one_node_says_it_is_not_the_network():
    (row,), _received = _gpu_buffer_exchange(hosts=("vm", "vm"))
    assert row.device_name == "vm -> vm"
    assert "both ranks on vm: MPI's path within a node (shared memory), not the network" in (
        row.note)


@pytest.mark.parametrize("short", [0, 1])
def test_a_rank_out_of_gpu_memory_skips_the_job_at_once_on_both_ends(short):
    """The window (16 x 1 MiB) does not fit on one rank: neither end waits for the other's
    messages (a wait for them would end only in its timeout, which neither end reached)."""
    memory = [1 << 30, 1 << 30]
    memory[short] = 4 * MiB
    sent, received = _gpu_buffer_exchange(memory=tuple(memory))
    assert not _waited_for_nothing(sent) and not _waited_for_nothing(received)
    assert isinstance(sent, NotRun) and sent.status == "skipped"
    assert f"do not fit: rank {short}: gpu0:" in str(sent)
    assert received == []


def test_a_rank_whose_gpu_fails_tells_its_peer_and_both_report_at_once():
    sent, received = _gpu_buffer_exchange(broken=1)
    assert not _waited_for_nothing(sent) and not _waited_for_nothing(received)
    assert isinstance(received, RuntimeError) and "cudaErrorLaunchFailure" in str(received)
    assert isinstance(sent, RuntimeError) and not isinstance(sent, NotRun)
    assert str(sent) == ("the receiver could not set up its buffers: rank 1: RuntimeError: "
                         "cudaErrorLaunchFailure")
    sent, received = _gpu_buffer_exchange(broken=0)
    assert str(sent) == "cudaErrorLaunchFailure" and received == []


def _host_buffer_exchange(loop, clock=None, sizes=(1 * MiB,)):
    """Rank 0 sends host buffers to rank 1 over `loop`: the sender's rows."""
    from bwprof.cases import get_case
    from bwprof.fleet.comm import Fleet
    from bwprof.fleet.netp2p import NetP2PExecutor
    from tests.fleet.test_netp2p import PLAN

    plan = replace(PLAN, transfer_sizes=sizes)
    case = get_case("net_p2p")
    executors = [NetP2PExecutor(Fleet(loop.comm(rank), rank, 2, 0, 1, f"node{rank}",
                                      10.0),
                                [0, 0], (False, "test"), hosts=["node0", "node1"],
                                **({"clock": clock} if clock and rank == 0 else {}))
                 for rank in (0, 1)]
    jobs, _same = [executor.jobs(case, plan) for executor in executors]
    (job,) = [j for j in jobs if j.memory == "host" and j.ranks == (0, 1)]
    received = []
    receiver = threading.Thread(
        target=lambda: received.append(executors[1].measure(case, job, plan)))
    receiver.start()
    rows = executors[0].measure(case, job, plan)
    receiver.join(timeout=30)
    assert not receiver.is_alive() and received == [[]]
    return rows


# Catches: a sample's time is the whole window's, not per message
def test_each_sample_is_the_windows_time_over_its_messages():
    from bwprof.fleet.netp2p import window_for
    from tests.fleet.test_netp2p import PLAN, Loopback

    ticks = itertools.count()  # every window takes one second on this clock
    (row,) = _host_buffer_exchange(Loopback(), clock=lambda: float(next(ticks)))
    window = window_for(1 * MiB)
    assert row.ops_per_sample == window == 64
    assert row.seconds_per_op == pytest.approx((1.0 / window,) * PLAN.repeats)
    assert row.valid


# Catches: the receiver validates the first message of its last window instead
# of the last
def test_a_damaged_last_message_is_caught():
    from bwprof.fleet.netp2p import window_for
    from tests.fleet.test_netp2p import Loopback

    window = window_for(1 * MiB)

    class DamagesTheLastOfEachWindow(Loopback):
        def comm(self, rank):
            inner = super().comm(rank)
            if rank != 0:
                return inner
            sent = itertools.count()
            plain = inner.Isend

            def send_buffer(buffer, dest, tag):
                data = np.array(np.asarray(buffer).view(np.uint8), copy=True)
                if next(sent) % window == window - 1:
                    data[0] ^= 0xFF
                return plain(data, dest, tag)

            inner.Isend = send_buffer
            return inner

    (row,) = _host_buffer_exchange(DamagesTheLastOfEachWindow())
    assert not row.valid
    assert row.note.startswith(f"validation failed: 1 of {MiB} bytes differ at rank 1")


def _fleet_of(loop, size, timeout_s=EXCHANGE_TIMEOUT_S, hosts=None):
    hosts = hosts or [f"node{r}" for r in range(size)]
    return [NetP2PExecutor(Fleet(loop.comm(rank), rank, size, 0, 1, hosts[rank], timeout_s),
                           [0] * size, (False, "test"), hosts=list(hosts), seed="run-x")
            for rank in range(size)]


def _run_ranks(executors, plan, ranks=None):
    """Every job of net_p2p on each of `ranks` (default: all), one thread a rank, as the
    runner runs them: {rank: [rows or the exception, per job]}."""
    case = get_case("net_p2p")
    jobs, *_same = [executor.jobs(case, plan) for executor in executors]  # every tag
    outcomes: dict[int, list] = {}

    def run(rank):
        outcomes[rank] = []
        for job in jobs:
            try:
                outcomes[rank].append(executors[rank].measure(case, job, plan))
            except (NotRun, RuntimeError, FleetTimeout) as exc:
                outcomes[rank].append(exc)

    threads = [threading.Thread(target=run, args=(rank,))
               for rank in (range(len(executors)) if ranks is None else ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=4 * EXCHANGE_TIMEOUT_S)
        assert not thread.is_alive()
    return jobs, outcomes


def test_four_ranks_measure_the_ring_and_samples_each_row_saying_why():
    plan = replace(PLAN, transfer_sizes=(64 << 10,))
    executors = _fleet_of(Loopback(), 4)
    jobs, outcomes = _run_ranks(executors, plan)
    chosen = executors[0].pairs
    rows = {}  # the sender's row of each host-buffer job
    for index, job in enumerate(jobs):
        sent = outcomes[job.ranks[0]][index]
        if job.memory == "host" and isinstance(sent, list) and sent:
            (rows[job.ranks],) = sent
    assert set(rows) == set(chosen.pairs) and len(rows) == 12  # 4 ranks: the ring is 8
    for (sender, receiver), row in rows.items():
        assert row.valid and row.device_name == f"node{sender} -> node{receiver}"
        why = dict(zip(chosen.pairs, chosen.reasons, strict=True))[(sender, receiver)]
        assert f"pair: {why} (ring (each rank to its neighbour and back: 8 pairs) + " in row.note
    for rank, got in outcomes.items():  # a rank makes rows only of the pairs it sends on
        for job, outcome in zip(jobs, got, strict=True):
            if isinstance(outcome, list) and outcome:
                assert job.ranks[0] == rank


# Catches: two pairs measured at once (both on the network while one is timed), and a rank
# waiting for its turn on a peer that sends no heartbeat (a false timeout in a large fleet)
def test_a_pair_waits_for_rank_0s_go_ahead():
    loop = Loopback()
    executors = _fleet_of(loop, 4, timeout_s=0.5)
    plan = replace(PLAN, transfer_sizes=(64 << 10,))
    case = get_case("net_p2p")
    (job,) = [j for j in executors[1].jobs(case, plan) if j.ranks == (1, 2)
              and j.memory == "host"]
    for executor in executors:
        executor.jobs(case, plan)
    outcomes: dict[int, object] = {}

    def run(rank):
        try:
            outcomes[rank] = executors[rank].measure(case, job, plan)
        except (RuntimeError, FleetTimeout) as exc:
            outcomes[rank] = exc

    ends = [threading.Thread(target=run, args=(rank,)) for rank in (1, 2)]  # rank 0 silent
    for thread in ends:
        thread.start()
    for thread in ends:
        thread.join(timeout=EXCHANGE_TIMEOUT_S)
    assert all("its turn in net_p2p from rank 0" in str(outcomes[r]) for r in (1, 2))
    assert not any(loop.queues[(1, 2, tag)] or loop.queues[(2, 1, tag)]
                   for tag in range(1000, 1000 + 8 * 100))  # neither end sent a thing
    assert executors[3].measure(case, job, plan) == []  # not its pair, not rank 0: nothing


def test_a_rank_tells_its_stop_to_rank_0_and_its_net_p2p_peers_only():
    executor = _executor(rank=5, size=40, gpus=(0,) * 40)
    peers = {rank for pair in executor.pairs.pairs if 5 in pair for rank in pair} - {5}
    assert 2 <= len(peers) <= 10  # the ring's two neighbours and a few sampled: O(1)
    assert executor.fleet.listeners == peers | {5}


def test_net_p2p_costs_every_rank_each_job_and_holds_memory_only_on_its_ends():
    plan = replace(PLAN, transfer_sizes=(64 << 10, 1 * MiB))
    case = get_case("net_p2p")
    executors = [_executor(rank=r, size=8, gpus=(0,) * 8) for r in (0, 5)]
    jobs = executors[0].jobs(case, plan)
    assert len(jobs) == 32 * 3  # 32 pairs at 2 sizes and over GPU buffers: O(N), not 56
    job = next(j for j in jobs if j.ranks == (0, 1) and j.size_bytes == 1 * MiB)
    mine, other = (executor.cost(case, job, plan, None) for executor in executors)
    assert mine.seconds == other.seconds > 0  # one pair at a time: every rank waits for it
    assert mine.host_bytes == window_for(1 * MiB) * MiB and other.host_bytes == 0
    hbm = next(j for j in jobs if j.memory == "hbm")  # not CUDA-aware: waived, costs nothing
    assert executors[0].cost(case, hbm, plan, None).seconds == 0


# Catches: a stopped rank (SIGSTOP) cost a full timeout at every net_p2p job with it, on
# every rank that waited for it (126 s for a job of --mpi-timeout 20); and a rank waiting for
# a stopped peer taken for a silent one by rank 0 (it beats to rank 0 while it waits)
def test_a_stopped_rank_costs_one_timeout_and_its_later_jobs_fail_at_once():
    loop = Loopback()
    executors = _fleet_of(loop, 3, timeout_s=1.0)
    plan = replace(PLAN, transfer_sizes=(64 << 10,))
    started = time.monotonic()
    jobs, outcomes = _run_ranks(executors, plan, ranks=(0, 1))  # rank 2 stopped
    took = time.monotonic() - started
    index = {job.ranks: i for i, job in enumerate(jobs) if job.memory == "host"}
    assert [job.ranks for job in jobs if job.memory == "host"][2:] == [(1, 2), (2, 1), (2, 0),
                                                                      (0, 2)]
    assert outcomes[0][index[(1, 2)]] == []  # rank 1 waited for rank 2, beating: not lost
    assert "rank 1 is lost" not in repr(outcomes)
    assert "waited 1 s for the end of the job rank2->rank1 from rank 2" in str(
        outcomes[0][index[(2, 1)]])  # rank 0's one timeout on rank 2
    assert "from rank 2: it went silent earlier" in str(outcomes[1][index[(2, 1)]])
    for pair in ((2, 0), (0, 2)):  # rank 0 fails them at once, in their rows
        outcome = outcomes[0][index[pair]]
        assert isinstance(outcome, RuntimeError), outcome
        assert str(outcome).startswith("not measured: rank 2 is lost: rank 0 waited 1 s")
    assert took < 3.5, took  # one timeout each of ranks 1 and 0 on rank 2, not four


class _StoppedMidWindow:
    """A communicator whose 'ready' arrives and whose window never leaves: a stop signal
    (KeyboardInterrupt) comes while the sender waits for its first message to go."""

    def __init__(self):
        self.window = []

    def irecv(self, source, tag):
        return type("Ready", (), {"test": lambda self: (True, None)})()

    def Isend(self, buffer, dest, tag):
        def test(_self):
            raise KeyboardInterrupt

        request = type("Pending", (), {"test": test, "buffer": buffer})()
        self.window.append(request)
        return request


# Catches: a window of 16 MiB messages dropped on SIGTERM (its buffers freed while MPI
# still sent them): the sending rank died of SIGSEGV and the job left no merged folder
def test_a_stop_signal_mid_window_keeps_the_windows_requests_and_buffers():
    comm = _StoppedMidWindow()
    executor = NetP2PExecutor(Fleet(comm, 0, 2, 0, 1, "node0", 60.0), [0, 0], (False, "t"))
    buffers = [np.zeros(64, dtype=np.uint8) for _ in range(3)]
    job = executor.jobs(get_case("net_p2p"), PLAN)[0]
    with pytest.raises(KeyboardInterrupt):
        executor._send(1, buffers, job, 2, 1000)
    assert len(comm.window) == 3
    assert all(any(kept is request for kept in executor.fleet._pending)
               for request in comm.window)


# Catches (issue 37): SIGTERM to rank 1 alone mid net_p2p: rank 0 waited the whole
# --mpi-timeout in its job with rank 1, then made an `error` row (its own fate `failed`)
def test_rank_0_stops_waiting_for_a_rank_that_announced_a_stop_and_fails_nothing():
    loop = Loopback()
    executors = _fleet_of(loop, 2, timeout_s=30.0)
    plan = replace(PLAN, transfer_sizes=(64 << 10, 1 * MiB))

    def announce():  # rank 1 is signalled while rank 0 waits for it in the first job
        time.sleep(0.3)
        with loop.lock:
            loop.queues[(1, 0, STOPPING_TAG)].append("SIGTERM")

    threading.Thread(target=announce, daemon=True).start()
    started = time.monotonic()
    jobs, outcomes = _run_ranks(executors, plan, ranks=(0,))
    assert time.monotonic() - started < 10  # not the 30 s timeout
    host = [(job.ranks, outcomes[0][i]) for i, job in enumerate(jobs) if job.memory == "host"]
    assert [ranks for ranks, _ in host] == [(0, 1)] * 2 + [(1, 0)] * 2
    for ranks, outcome in host:
        if ranks == (1, 0):  # the stopped rank was the sender: its row, not rank 0's
            assert outcome == []
            continue
        assert isinstance(outcome, NotRun) and outcome.status == "skipped", outcome
        assert "rank 1 was stopped by SIGTERM" in outcome.reason
    assert "stopped waiting for the buffers" in host[0][1].reason  # mid-job: at once
    assert executors[0].fleet.silent(1) is None  # its report is still waited for


# Catches (issue 37): in a job of 3 ranks or more, only rank 0 heard a rank's stop signal:
# the other end of its pair, given the go-ahead before rank 0 heard it, waited for it up to
# --mpi-timeout and made an `error` row ("did not take part")
@pytest.mark.parametrize("ranks", [(2, 1), (1, 2)])
def test_the_other_end_of_a_pair_stops_waiting_for_a_rank_that_announced_a_stop(ranks):
    """Rank 1 of 3 never takes part in the job between it and rank 2 (stopped), and says
    so 0.3 s after both others are in it (rank 0 gave both the go-ahead): rank 2 gives it
    up at once; as the sender its row is `skipped`, as the receiver it makes none; rank 0
    gets its 'done' as always (or gives up on the stopped sender), and no one fails."""
    loop = Loopback()
    executors = _fleet_of(loop, 3, timeout_s=30.0)
    plan = replace(PLAN, transfer_sizes=(64 << 10,))
    case = get_case("net_p2p")
    for executor in executors:
        (job,) = [j for j in executor.jobs(case, plan) if j.ranks == ranks
                  and j.memory == "host"]
    outcomes: dict[int, object] = {}

    def run(rank):
        try:
            outcomes[rank] = executors[rank].measure(case, job, plan)
        except (NotRun, RuntimeError, FleetTimeout) as exc:
            outcomes[rank] = exc

    def announce():  # rank 1's signal handler, once rank 2 waits for it in their job
        guard = time.monotonic() + EXCHANGE_TIMEOUT_S
        while not any(loop.queues[(2, 1, tag)] for tag in range(1000, 1000 + 8 * 100)):
            assert time.monotonic() < guard
            time.sleep(0.01)
        time.sleep(0.3)
        with loop.lock:
            for rank in (0, 2):
                loop.queues[(1, rank, STOPPING_TAG)].append("SIGTERM")

    threads = [threading.Thread(target=run, args=(rank,)) for rank in (0, 2)]
    threads.append(threading.Thread(target=announce, daemon=True))
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads[:2]:
        thread.join(timeout=EXCHANGE_TIMEOUT_S)
        assert not thread.is_alive()
    assert time.monotonic() - started < 10  # not the 30 s timeout
    assert outcomes[0] == []  # rank 0, not an end: the sender's row says it
    if ranks == (2, 1):
        assert isinstance(outcomes[2], NotRun) and outcomes[2].status == "skipped"
        assert "rank 1 was stopped by SIGTERM" in outcomes[2].reason
        assert "rank 2 stopped waiting for the buffers" in outcomes[2].reason
    else:
        assert outcomes[2] == []  # the stopped rank was the sender: its row, not rank 2's
    assert executors[2].fleet.silent(1) is None and executors[0].fleet.silent(2) is None
