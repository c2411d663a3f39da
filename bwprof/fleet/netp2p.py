"""`net_p2p`: MPI point-to-point bandwidth between ranks, over host buffers and, where the MPI
library is CUDA-aware, over GPU buffers.

Which pairs: O(N) of them by default, a ring both ways plus a few sampled pairs per rank
(`bwprof.fleet.pairs`); every ordered pair with `--all-pairs`. Each row's note says why its
pair was measured.

One pair at a time: rank 0 conducts. It tells both ends of a job to start and, unless it
sends itself, waits for the sender to say the job is done before it starts the next, so no
two pairs share the network while one is timed, and a rank waiting for its turn waits for
rank 0, whose heartbeats (at every job) keep it waiting as long as the fleet works.

Each sample, in the manner of OSU's bandwidth test: the receiver posts a window of receives
and says it is ready; the sender starts its clock, sends the window, and stops the clock when
the receiver's acknowledgement arrives (so the figure counts delivered bytes). After the last
sample, outside any timing, the receiver checks the last message against the pattern and
sends the count of wrong bytes. Only the sender makes a row; other ranks take no part.

Before a job both ends tell each other whether their buffers could be set up, so a rank out
of memory (the job is `skipped`) or failing otherwise (an `error` row) does not leave its peer
waiting, until the MPI timeout, for messages that never come.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

import numpy as np

from bwprof import costs
from bwprof.casespec import CaseSpec
from bwprof.costs import Cost
from bwprof.executor import Executor
from bwprof.fleet.comm import Fleet, FleetTimeout, PeerStopped
from bwprof.fleet.pairs import select_pairs
from bwprof.gpu.backend import GpuBackend, OutOfMemory
from bwprof.gpu.buffers import (
    BufferPool,
    device_mismatches,
    fill_pattern,
    host_mismatches,
    upload_pattern,
)
from bwprof.measurement import Job, Measurement, NotRun
from bwprof.plan import Plan
from bwprof.units import format_bytes

TARGET_SAMPLE_BYTES = 64 << 20
MAX_WINDOW = 64
CUDA_AWARE_ENV = "BWPROF_MPI_CUDA_AWARE"
FIRST_TAG, TAGS_PER_JOB, TAG_CYCLE = 1000, 8, 3000
"""A job's messages use tags FIRST_TAG + TAGS_PER_JOB * (index % TAG_CYCLE) + 0..6: below
32767, the least MPI_TAG_UB the standard allows, however many jobs a large fleet has (jobs
run one at a time, so two jobs TAG_CYCLE apart never have messages in flight together)."""
GO, DONE = 5, 6
"""Tag offsets of rank 0's go-ahead to both ends of a job and of the sender's 'done'."""


def window_for(size: int) -> int:
    """Messages in flight per sample: enough for ~64 MiB, at most 64 (OSU's window)."""
    return max(1, min(MAX_WINDOW, TARGET_SAMPLE_BYTES // max(size, 1)))


def cuda_aware_mpi(library_version: str) -> tuple[bool, str]:
    """Whether the MPI library moves GPU buffers itself, and how that was decided.

    BWPROF_MPI_CUDA_AWARE=1/0 overrides; Open MPI says so through ompi_info; anything else
    is taken as not CUDA-aware (the GPU-buffer rows are then waived, not guessed)."""
    forced = os.environ.get(CUDA_AWARE_ENV)
    if forced in ("0", "1"):
        return forced == "1", f"{CUDA_AWARE_ENV}={forced}"
    if "Open MPI" in library_version and shutil.which("ompi_info"):
        try:
            out = subprocess.run(["ompi_info", "--parsable", "--all"], capture_output=True,
                                 text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return False, "ompi_info did not answer"
        aware = "mpi_built_with_cuda_support:value:true" in out
        return aware, "ompi_info: built " + ("with" if aware else "without") + " CUDA support"
    return False, "could not tell whether this MPI library is CUDA-aware"


def _ranks(job: Job) -> tuple[int, int]:
    """The sending and receiving rank of a net_p2p job (every job of the case has them)."""
    assert job.ranks is not None, f"{job.case} job without its ranks"
    return job.ranks


class NetP2PExecutor(Executor):
    """Runs net_p2p jobs; a collective case, so the runner runs it before every other."""

    backend = "mpi"
    collective = True

    def __init__(self, fleet: Fleet, gpu_counts: list[int], cuda_aware: tuple[bool, str],
                 gpu: tuple[GpuBackend, int] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 hosts: list[str] | None = None, seed: str = "",
                 all_pairs: bool = False, groups: Mapping[str, str] | None = None) -> None:
        """`gpu_counts`: GPUs each rank uses, in rank order; `gpu`: this rank's GPU backend
        and device index, for GPU-buffer jobs (None without a GPU); `hosts`: each rank's
        node, for the rows' names and the ring's order; `seed` (the run's id), `all_pairs`
        and `groups` (node -> switch or rack): which pairs, see `bwprof.fleet.pairs`."""
        self.fleet = fleet
        self.gpu_counts = gpu_counts
        self.hosts = hosts or [f"rank {r}" for r in range(fleet.size)]
        self.pairs = select_pairs(self.hosts, seed, all_pairs=all_pairs, groups=groups)
        fleet.listeners = frozenset(  # who waits for this rank: told of its stop signal
            rank for pair in self.pairs.pairs if fleet.rank in pair for rank in pair)
        self._why = dict(zip(self.pairs.pairs, self.pairs.reasons, strict=True))
        self.cuda_aware, self.cuda_reason = cuda_aware
        self.gpu = gpu
        self.pool = BufferPool(gpu[0]) if gpu is not None else None
        self.clock = clock
        self._tags: dict[Job, int] = {}

    def unavailable_reason(self, case: CaseSpec) -> NotRun | None:
        if self.fleet.size < 2:
            return NotRun("waived", "needs an MPI job of 2 ranks or more")
        return None

    def close(self) -> None:
        """Free the GPU buffers of the GPU-buffer jobs (the network has nothing to close)."""
        if self.pool is not None:
            self.pool.release()

    def jobs(self, case: CaseSpec, plan: Plan) -> list[Job]:
        """Each selected pair over host buffers at every transfer size, then each over GPU
        buffers at the largest: O(N) jobs by default (`bwprof.fleet.pairs`)."""
        pairs = self.pairs.pairs if self.fleet.size > 1 else ()
        jobs = [Job(case.key, size_bytes=size, ranks=pair, memory="host")
                for pair in pairs for size in plan.transfer_sizes]
        jobs += [Job(case.key, size_bytes=max(plan.transfer_sizes), ranks=pair,
                     memory="hbm") for pair in pairs]
        # Every rank computes the same list, so a job's index is a tag both ends agree on.
        self._tags = {job: FIRST_TAG + TAGS_PER_JOB * (index % TAG_CYCLE)
                      for index, job in enumerate(jobs)}
        return jobs

    def cost(self, case: CaseSpec, job: Job, plan: Plan, previous: Job | None) -> Cost:
        """Every rank waits for every job (one pair at a time), so each costs every rank its
        samples' bytes at the assumed network speed; the two ends hold its window. A
        GPU-buffer job known to be waived costs nothing."""
        if job.memory == "hbm" and self._gpu_reason(job):
            return Cost(0.0)
        size = job.size_bytes or 0
        window = window_for(size)
        seconds = (costs.NET_JOB_S + (plan.repeats + 1)
                   * (window * size / (costs.NET_GBPS * 1e9) + costs.NET_ROUND_TRIP_S))
        mine = self.fleet.rank in (job.ranks or ())
        held = window * size if mine else 0
        return Cost(seconds, host_bytes=held if job.memory != "hbm" else 0,
                    device_bytes=held if job.memory == "hbm" else 0)

    def _gpu_reason(self, job: Job) -> str | None:
        if not self.cuda_aware:
            return f"GPU buffers: the MPI library is not CUDA-aware ({self.cuda_reason})"
        sender, receiver = _ranks(job)
        without = [r for r in (sender, receiver) if not self.gpu_counts[r]]
        if without:
            return f"GPU buffers: rank(s) {', '.join(map(str, without))} have no GPU"
        return None

    def measure(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        assert job.ranks is not None and job.size_bytes is not None
        sender = job.ranks[0]
        reason = self._gpu_reason(job) if job.memory == "hbm" else None
        if reason:  # known alike on every rank: nobody sends anything for this job
            if self.fleet.rank == sender:
                raise NotRun("waived", reason)
            return []
        with self.fleet.sparing_stopped():  # no rank waits for one that was stopped
            try:
                return self._conduct(case, job, plan)
            except PeerStopped as exc:  # the rank waited for left its measurement
                if exc.peer == sender:  # the row was the sender's, which a signal stopped
                    return []
                if self.fleet.rank == sender:
                    raise NotRun("skipped", f"not measured: {exc}") from None
                return []  # the sender's row says it (after its own wait for the receiver)

    def _conduct(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        """`measure` for a job this rank may take part in: rank 0 starts it (or tells the
        ends it cannot run), the ends measure, the sender tells rank 0 it is done."""
        assert job.ranks is not None
        sender, receiver = job.ranks
        tag = self._tags[job]
        me, comm = self.fleet.rank, self.fleet.comm
        # Why the job cannot run: a str where an end went silent before (an error), a
        # ("skipped", why) where an end announced a stop signal (no failure of the job's).
        lost: str | tuple[str, str] | None = None
        if me == 0:  # the conductor: both ends start now, the next job once this one is done
            ends = sorted({sender, receiver} - {0})
            lost = next((f"rank {end} is lost: {self.fleet.silent(end)}" for end in ends
                         if self.fleet.silent(end)), None) or next(
                (("skipped", f"rank {end} was stopped by {self.fleet.stop_said(end)}")
                 for end in ends if self.fleet.stop_said(end)), None)
            for end in ends:  # a live end is told, so it does not wait for the lost one
                if not self.fleet.silent(end) and not self.fleet.stop_said(end):
                    self.fleet.wait(comm.isend(lost, dest=end, tag=tag + GO),
                                    "the go-ahead to leave", end)
        elif me in job.ranks:
            lost = self.fleet.wait(comm.irecv(source=0, tag=tag + GO), "its turn in net_p2p",
                                   0)
        if isinstance(lost, tuple):  # an end was stopped: its sender's row, if any, skipped
            if me == sender:
                raise NotRun("skipped", f"not measured: {lost[1]}")
            return []
        if lost:  # failed at once, no wait: the sender's row says why (rank 0's, if lost)
            if me == sender or (me == 0 and self.fleet.silent(sender)):
                raise RuntimeError(f"not measured: {lost}")
            return []
        try:
            measured = self._take_part(case, job, plan, tag)
        except PeerStopped:  # the other end was stopped: this end's job still ends
            with suppress(PeerStopped):  # rank 0 waits for no 'done' of a stopped sender
                self._finish(job, tag)  # a live sender's 'done': rank 0 waits for it
            raise
        except FleetTimeout:
            raise  # a peer went silent: the ends that wait for 'done' gave up on it already
        except Exception:
            self._finish(job, tag)
            raise
        self._finish(job, tag)
        return measured

    def _finish(self, job: Job, tag: int) -> None:
        """The sender tells rank 0 its job is done (whatever its outcome); rank 0 waits for
        that before it starts the next job."""
        assert job.ranks is not None
        sender, receiver = job.ranks
        me, comm = self.fleet.rank, self.fleet.comm
        if me == sender and me != 0:
            self.fleet.wait(comm.isend(True, dest=0, tag=tag + DONE), "'done' to leave", 0)
        elif me == 0 and sender != 0:
            try:
                self.fleet.wait(comm.irecv(source=sender, tag=tag + DONE),
                                f"the end of the job rank{sender}->rank{receiver}", sender)
            except PeerStopped:
                raise
            except FleetTimeout as exc:
                if me != receiver:  # rank 0's own part had no row: this error row says it
                    raise RuntimeError(f"{exc}: rank {sender} (the sender) did not finish "
                                       f"its job") from None
                raise

    def _take_part(self, case: CaseSpec, job: Job, plan: Plan,
                   tag: int) -> list[Measurement]:
        """This rank's end of a job, once rank 0 said go: the sender's row, or nothing."""
        assert job.ranks is not None and job.size_bytes is not None
        sender, receiver = job.ranks
        if self.fleet.rank not in job.ranks:
            return []  # not this rank's pair: it makes no row
        try:
            buffers = self._agree_on_buffers(job, tag)
            if buffers is None:
                return []
            if self.fleet.rank == receiver:
                self._receive(sender, buffers, job, plan.repeats, tag)
                return []
            seconds, wrong = self._send(receiver, buffers, job, plan.repeats, tag)
        except PeerStopped:
            raise  # `measure` says what it means for the row
        except FleetTimeout as exc:
            if self.fleet.rank == sender:
                raise RuntimeError(f"{exc}: rank {receiver} did not take part") from None
            raise
        window = len(buffers)
        hosts = f"{self.hosts[sender]} -> {self.hosts[receiver]}"
        notes = [f"validation failed: {wrong} of {job.size_bytes} bytes differ at rank "
                 f"{receiver}" if wrong else "", f"{window} message(s) in flight per sample",
                 f"pair: {self._why.get(job.ranks, 'asked for')} ({self.pairs.note})"]
        if self.hosts[sender] == self.hosts[receiver]:  # ranks of one node: no network between
            notes.append(f"both ranks on {self.hosts[sender]}: MPI's path within a node "
                         f"(shared memory), not the network")
        return [Measurement(
            seconds_per_op=tuple(seconds), bytes_per_op=job.size_bytes,
            size_bytes=job.size_bytes, device=job.device_label, device_name=hosts,
            direction=case.direction, memory=job.memory or "host", valid=not wrong,
            note="; ".join(n for n in notes if n), ops_per_sample=window,
        )]

    def _agree_on_buffers(self, job: Job, tag: int) -> list[Any] | None:
        """Allocate this end's buffers and trade the outcome with the other end.

        Both ends send before they receive, so neither waits on the other. Out of memory on
        either end makes the job `skipped` on the sender (the receiver returns None: it
        makes no row); any other failure is raised, after the peer has been told, on the
        end where it happened and named in the sender's error row."""
        sender, receiver = _ranks(job)
        peer = receiver if self.fleet.rank == sender else sender
        mine: tuple[str, str] | None = None  # (kind, reason) of this end's failure
        error: Exception | None = None
        try:
            buffers = self._buffers(job)
        except (OutOfMemory, MemoryError) as exc:
            buffers, mine = None, ("memory", f"rank {self.fleet.rank}: "
                                             f"{str(exc) or 'out of memory'}")
        except Exception as exc:  # told to the peer first, so it does not wait for nothing
            buffers, error = None, exc
            mine = ("error", f"rank {self.fleet.rank}: {type(exc).__name__}: {exc}")
        comm = self.fleet.comm
        sent = comm.isend(mine, dest=peer, tag=tag + 4)
        try:
            theirs = self.fleet.wait(comm.irecv(source=peer, tag=tag + 4), "the buffers", peer)
        except BaseException:  # a stopped or silent peer: MPI may still read `sent`
            self.fleet.keep([sent])
            raise
        self.fleet.wait(sent, "the buffers to be reported", peer)
        if mine is None and theirs is None:
            return buffers
        buffers = None  # released before the next job allocates
        if error is not None:
            raise error
        if self.fleet.rank != sender:
            return None
        if theirs is not None and theirs[0] == "error":
            raise RuntimeError(f"the receiver could not set up its buffers: {theirs[1]}")
        reasons = "; ".join(failure[1] for failure in (mine, theirs) if failure is not None)
        raise NotRun("skipped", f"{format_bytes(job.size_bytes or 0)} x "
                                f"{window_for(job.size_bytes or 0)} message(s) do not fit: "
                                f"{reasons}")

    def _buffers(self, job: Job) -> list[Any]:
        size = job.size_bytes or 0
        count = window_for(size)
        if job.memory == "hbm" and self.gpu is not None:
            backend, device = self.gpu
            return [backend.device_array(device, size) for _ in range(count)]
        return [np.zeros(size, dtype=np.uint8) for _ in range(count)]

    def _fill(self, buffer: Any) -> None:
        if isinstance(buffer, np.ndarray):
            fill_pattern(buffer, buffer.size)
        else:
            upload_pattern(self._gpu_backend(), buffer, buffer.nbytes)

    def _clear(self, buffer: Any) -> None:
        if isinstance(buffer, np.ndarray):
            buffer[:] = 0
        else:
            self._gpu_backend().zero(buffer, buffer.nbytes)

    def _mismatches(self, buffer: Any) -> int:
        if isinstance(buffer, np.ndarray):
            return host_mismatches(buffer, buffer.size)
        assert self.pool is not None, "a device buffer without this rank's GPU"
        return device_mismatches(self.pool, buffer, buffer.nbytes)

    def _gpu_backend(self) -> GpuBackend:
        """The backend of this rank's GPU: only GPU-buffer jobs, which need one, ask."""
        assert self.gpu is not None, "a device buffer without this rank's GPU"
        return self.gpu[0]

    def _send(self, receiver: int, buffers: list[Any], job: Job, repeats: int,
              tag: int) -> tuple[list[float], int]:
        comm = self.fleet.comm
        for buffer in buffers:
            self._fill(buffer)
        seconds = []
        for sample in range(repeats + 1):  # sample 0 warms up the connection
            self.fleet.wait(comm.irecv(source=receiver, tag=tag), "ready", receiver)
            start = self.clock()
            requests = [comm.Isend(buffer, dest=receiver, tag=tag + 1) for buffer in buffers]
            try:
                for request in requests:
                    self.fleet.wait(request, "the window to leave", receiver)
            except BaseException:  # a stop signal or a timeout: the window stays referenced
                self.fleet.keep(requests)
                raise
            self.fleet.wait(comm.irecv(source=receiver, tag=tag + 2), "the ack", receiver)
            if sample:  # per message: the window's time over the messages in it
                seconds.append((self.clock() - start) / len(buffers))
        wrong = self.fleet.wait(comm.irecv(source=receiver, tag=tag + 3), "the validation",
                               receiver)
        return seconds, int(wrong)

    def _receive(self, sender: int, buffers: list[Any], job: Job, repeats: int,
                 tag: int) -> None:
        comm = self.fleet.comm
        for _ in range(repeats + 1):
            for buffer in buffers:
                self._clear(buffer)
            requests = [comm.Irecv(buffer, source=sender, tag=tag + 1) for buffer in buffers]
            try:
                self.fleet.wait(comm.isend(True, dest=sender, tag=tag), "ready to leave",
                                sender)
                for request in requests:
                    self.fleet.wait(request, "the window to arrive", sender)
            except BaseException:  # MPI may still write into these buffers: keep them
                self.fleet.keep(requests)
                raise
            self.fleet.wait(comm.isend(True, dest=sender, tag=tag + 2), "the ack to leave", sender)
        wrong = self._mismatches(buffers[-1])  # after timing: the last message of the last window
        self.fleet.wait(comm.isend(wrong, dest=sender, tag=tag + 3), "the validation to leave",
                        sender)
