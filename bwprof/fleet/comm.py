"""The MPI layer of fleet runs: launch detection, node-local ranks, and collective steps
with a timeout, so a rank that hangs stops the job with a clear message instead of forever.
A timeout counts from the last sign of life of the rank waited for: ranks send heartbeats as
they measure (rank 0 to every rank, the others to rank 0), so a rank that finished early
waits for one still measuring, however long, and gives up only on one that went silent.

mpi4py is optional (`pip install 'bwprof[mpi]'`) and imported only here, only when asked.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bwprof.errors import EXIT_FAILED, BwprofError

T = TypeVar("T")

POLL_S = 0.01
HEARTBEAT_TAG = 99
STOPPING_TAG = 98
"""A rank's word that a stop signal reached it (`Fleet.announce_stop`), to the ranks that may
wait for it: rank 0 and its net_p2p peers (`Fleet.listeners`, set by the net_p2p executor),
not every rank (every rank only where no executor set them). It and HEARTBEAT_TAG lie below
the tags of the collective steps (from 100) and of net_p2p (from 1000)."""
HURRIED_WAIT_S = 0.2
"""After a stop signal, rank 0 waits this long of silence for a rank's results: Open MPI's
mpirun sends SIGKILL a second after its SIGTERM (odls_base_sigkill_timeout), and the merged
folder must be written before it; a rank stopped with the others sends at once, and one
slower than that is merged from what it wrote in its own folder (`run._salvage`)."""
FANOUT_INTERVAL_S = 1.0
"""Rank 0 beats to every rank at most this often (and at least ten times a timeout): at
every job it would send N-1 messages, O(N^2) over net_p2p's O(N) jobs."""
INSTALL_HINT = ("pip install 'bwprof[mpi]' and an MPI library (e.g. apt install openmpi-bin), "
                "then launch with mpirun or srun")

# Variables the common launchers set in every rank, with the world size they carry: Open MPI's
# mpirun, PMI-1/2 (MPICH's hydra, `srun --mpi=pmi2`), PMIx, Slurm's srun (its step's task
# count), MPICH's local count.
LAUNCH_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS",
                         "SLURM_NTASKS", "MPI_LOCALNRANKS")
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def _count(value: str | None) -> int | None:
    """A launcher's count or rank: ASCII digits only, as launchers write them. str.isdigit
    also takes '²' (which int() refuses, a traceback at start-up) and 5000 digits (which
    int() refuses past 4300); such a value is no launcher's, so it is not a count."""
    return int(value) if value is not None and re.fullmatch(r"[0-9]{1,9}", value) else None


def _slurm_task(name: str, env: Mapping[str, str]) -> bool:
    """Whether a SLURM_* count is that of tasks srun started, this process one of them.

    An allocation sets SLURM_NTASKS in the batch script too, and SLURM_PROCID=0 there (the
    batch step is task 0 of its own step): only srun's step has a step id and a step task
    count (SLURM_NTASKS stands in for it only in a step that lacks it). `bwprof run` in the
    batch script itself is one process, not a fleet; so is `srun -n 1 bwprof run`."""
    if "SLURM_PROCID" not in env:
        return False
    if name == "SLURM_STEP_NUM_TASKS":
        return True
    return "SLURM_STEP_NUM_TASKS" not in env and ("SLURM_STEP_ID" in env
                                                  or "SLURM_STEPID" in env)


def launched_by_mpi(environ: Mapping[str, str] | None = None) -> bool:
    """True when mpirun/srun started this process as one of several ranks."""
    return launch_size(environ) is not None


def launch_size(environ: Mapping[str, str] | None = None) -> int | None:
    """How many ranks mpirun/srun started, this process one of them (2 or more); None
    outside such a launch."""
    env = os.environ if environ is None else environ
    for name in LAUNCH_SIZE_VARIABLES:
        size = _count(env.get(name))
        if size is not None and size > 1:
            if name.startswith("SLURM_") and not _slurm_task(name, env):
                continue
            return size
    return None


LOCAL_VARIABLES = (("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                   ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                   ("PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"), ("PMI_LOCAL_RANK", "PMI_LOCAL_SIZE"))
"""(local rank, ranks on the node) as Open MPI, MPICH's hydra and PMIx set them."""


def _slurm_tasks_per_node(text: str | None, node: int | None) -> int | None:
    """Node `node`'s entry of Slurm's tasks-per-node list ('2(x3),1': three nodes of two
    tasks, then one of one); None where it cannot be read."""
    if text is None or node is None:
        return None
    counts: list[int] = []
    for part in text.split(","):
        found = re.fullmatch(r"([0-9]{1,6})(?:\(x([0-9]{1,6})\))?", part.strip())
        if found is None:
            return None
        counts += [int(found.group(1))] * int(found.group(2) or 1)
        if len(counts) > node:
            return counts[node]
    return None


def local_from_environment(environ: Mapping[str, str] | None = None
                           ) -> tuple[int, int] | None:
    """(this rank's place among the ranks on its node, how many there are) as the launcher
    set them, before MPI is initialised (a fleet run asks MPI itself: COMM_TYPE_SHARED);
    None where no launcher said."""
    env = os.environ if environ is None else environ
    for rank_name, size_name in LOCAL_VARIABLES:
        rank, size = _count(env.get(rank_name)), _count(env.get(size_name))
        if rank is not None and size is not None and rank < size:
            return rank, size
    rank = _count(env.get("SLURM_LOCALID"))
    size = _slurm_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE")
                                 or env.get("SLURM_TASKS_PER_NODE"),
                                 _count(env.get("SLURM_NODEID")))
    if rank is not None and size is not None and rank < size:
        return rank, size
    return None


def rank_from_environment(environ: Mapping[str, str] | None = None) -> int | None:
    """This process's rank as the launcher set it (before MPI is initialised), if any:
    mpirun's, PMI's (`srun --mpi=pmi2`), PMIx's (`srun --mpi=pmix`) or srun's own."""
    env = os.environ if environ is None else environ
    for name in RANK_VARIABLES:
        rank = _count(env.get(name))
        if rank is not None:
            return rank
    return None


FLEET_RUN = "a fleet run (--mpi, or several ranks started by mpirun or srun)"


def import_mpi() -> Any:
    """mpi4py's MPI module, or a one-line BwprofError saying how to get it. MPI is not
    initialised on import (`start_mpi` does it, under a deadline)."""
    try:
        import mpi4py

        if "mpi4py.MPI" not in sys.modules:  # set before its first import, read there
            mpi4py.rc.initialize = False
            mpi4py.rc.finalize = True  # at exit, as when mpi4py initialises it itself
        from mpi4py import MPI
    except ImportError as exc:
        raise BwprofError(f"{FLEET_RUN} needs mpi4py ({exc}); {INSTALL_HINT}") from None
    except RuntimeError as exc:  # mpi4py present, MPI library missing or broken
        raise BwprofError(f"{FLEET_RUN} could not load the MPI library ({exc}); "
                          f"{INSTALL_HINT}") from None
    return MPI


def _init_thread(MPI: Any) -> None:
    """MPI_Init_thread, as mpi4py's import calls it, but through ctypes, which lets go of
    Python's lock while the call blocks: mpi4py holds it, and every rank's MPI_Init waits
    for every other rank (Open MPI's PMIx fence), so with one rank stopped (SIGSTOP) no
    other thread of the others could run, their deadline included. Where the library's
    symbol cannot be found, mpi4py's own call (no deadline while it blocks)."""
    try:
        init = ctypes.CDLL(MPI.__file__).MPI_Init_thread  # found in the libmpi it links
    except (AttributeError, OSError, TypeError):
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
        return
    init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                     ctypes.POINTER(ctypes.c_int)]
    provided = ctypes.c_int()
    code = init(None, None, MPI.THREAD_MULTIPLE, ctypes.byref(provided))
    if code != 0:  # MPI_SUCCESS
        raise BwprofError(f"{FLEET_RUN} could not start MPI (MPI_Init_thread returned "
                          f"{code}); check the MPI library and the launch ({INSTALL_HINT})")


def start_mpi(timeout_s: float, join: Callable[[Any], T]) -> T:
    """`join(MPI)` once MPI is initialised, or this rank ends, with one line and exit code 1,
    after timeout_s: MPI_Init and the first collective (Split_type) wait for every rank
    with no timeout of their own, so a rank stopped or hung before it reached them (say
    SIGSTOP before MPI started) held the others there for good. The deadline is a thread's
    (MPI_Init cannot be timed out), which ends the process: MPI is not up to abort the job,
    and mpirun ends the others when a rank exits with 1."""
    MPI = import_mpi()
    done, lock = threading.Event(), threading.Lock()

    def give_up() -> None:
        if done.wait(timeout_s):
            return
        with lock:
            if done.is_set():
                return
            rank = rank_from_environment()
            who = "this rank" if rank is None else f"rank {rank}"
            line = (f"error: {who} waited {timeout_s:g} s for MPI to start (every rank must "
                    f"join it: one was stopped, hung or died before it did); nothing was "
                    f"measured; ending the job\n")
            with suppress(OSError):
                os.write(2, line.encode())
            os._exit(EXIT_FAILED)

    watchdog = threading.Thread(target=give_up, name="bwprof-mpi-start", daemon=True)
    watchdog.start()
    try:
        if not MPI.Is_initialized():
            _init_thread(MPI)
        return join(MPI)
    finally:
        with lock:
            done.set()


class FleetTimeout(Exception):
    """A collective step did not complete in time: some rank hangs or died."""


class PeerStopped(FleetTimeout):
    """Within `Fleet.sparing_stopped`: the rank waited for said that a stop signal reached it
    (`Fleet.announce_stop`), so it left its measurement and will not answer this step;
    waiting the whole timeout for it stalled the job (on rank 0, its report then came too
    late to be merged; on the other end of a net_p2p pair, the pair's row was an error)."""

    def __init__(self, message: str, peer: int, signal_name: str) -> None:
        super().__init__(message)
        self.peer, self.signal_name = peer, signal_name


@dataclass
class Fleet:
    """This rank's place in the job and the collective steps it takes part in."""

    comm: Any
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    timeout_s: float
    threaded: bool = True
    """The MPI library lets a second thread call it (`beating`)."""
    _tag: int = 100
    _beats: list[Any] = field(default_factory=list)
    _last_fanout: float = float("-inf")
    _pending: list[Any] = field(default_factory=list)
    """Sends given up on: MPI may still read their buffers, so they stay referenced (a
    request dropped while pending frees what MPI then reads: a crash on the receiver)."""
    _silent: dict[int, str] = field(default_factory=dict)
    """Peers given up on (silent a whole timeout), with what this rank waited for then: a
    later step that waits for one gives up at once, so a stopped rank costs the job one
    timeout, not one per step or per net_p2p job."""
    _last_beat: float = float("-inf")
    _announced: list[Any] = field(default_factory=list)
    """`announce_stop`'s send, its own list: it is made from a signal handler, which may
    run while the main thread rebuilds `_beats`."""
    _stopped: dict[int, str] = field(default_factory=dict)
    """The ranks that announced a stop signal, with its name (kept: the words are taken off
    the queue once, and asked for again by the merge)."""
    _sparing: bool = False
    """Within `sparing_stopped`: a wait for a rank that announced a stop gives up at once."""
    listeners: frozenset[int] | None = None
    """The ranks `announce_stop` tells (rank 0 and this rank's net_p2p peers, set by the
    executor: O(1) each by default, not the whole fleet, which made N^2 messages when mpirun
    signals every rank); None: every rank."""

    @classmethod
    def join(cls, timeout_s: float) -> Fleet:
        """This rank's place in the job, once MPI has started on every rank: within
        timeout_s, or the rank ends (`start_mpi`)."""

        def joined(MPI: Any) -> Fleet:
            comm = MPI.COMM_WORLD
            local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
            return cls(comm, comm.Get_rank(), comm.Get_size(), local.Get_rank(),
                       local.Get_size(), MPI.Get_processor_name(), timeout_s,
                       threaded=MPI.Query_thread() >= MPI.THREAD_SERIALIZED)

        return start_mpi(timeout_s, joined)

    def heartbeat(self) -> None:
        """Tell the ranks that may be waiting for this one that it is alive: rank 0 tells
        every rank (at most once per FANOUT_INTERVAL_S), the others tell rank 0 (small
        messages: they leave without a receiver)."""
        self._beats = [beat for beat in self._beats if not beat.test()[0]]
        if self.rank == 0:
            now = time.monotonic()
            if now - self._last_fanout < min(FANOUT_INTERVAL_S, self.timeout_s / 10):
                return
            self._last_fanout = now
        peers = range(1, self.size) if self.rank == 0 else [0]
        self._beats += [self.comm.isend(None, dest=peer, tag=HEARTBEAT_TAG) for peer in peers]

    @contextmanager
    def beating(self) -> Iterator[None]:
        """Heartbeats from a helper thread while this rank works without MPI (rank 0 writing
        the merged folder, while every rank waits for its word that it is written): a long
        merge is not taken for a hang, a stopped rank 0 still is. Without an MPI library
        that lets a second thread call it, no beats (the wait is the timeout's alone)."""
        if not self.threaded:
            yield
            return
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(min(FANOUT_INTERVAL_S, self.timeout_s / 10)):
                self.heartbeat()

        thread = threading.Thread(target=beat, name="bwprof-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _heard_from(self, source: int) -> bool:
        """Whether `source` sent a heartbeat since last asked (taking them off the queue)."""
        heard = False
        while self.comm.iprobe(source=source, tag=HEARTBEAT_TAG):
            self.comm.recv(source=source, tag=HEARTBEAT_TAG)
            heard = True
        return heard

    def _timeout(self, what: str, peer: int | None) -> FleetTimeout:
        """The error of a wait that ran out; `peer` is remembered as silent."""
        silent = "" if peer is None else f" from rank {peer}, silent all that time"
        message = f"rank {self.rank} waited {self.timeout_s:g} s for {what}{silent}"
        if peer is not None:
            self._silent.setdefault(peer, message)
        return FleetTimeout(message)

    def silent(self, peer: int) -> str | None:
        """Why `peer` was given up on (the wait that ran out), or None: it was not."""
        return self._silent.get(peer)

    def _gave_up(self, what: str, peer: int) -> FleetTimeout:
        return FleetTimeout(f"rank {self.rank} gave up at once on {what} from rank {peer}: "
                            f"it went silent earlier ({self._silent[peer]})")

    def _poll(self, ready: Callable[[], tuple[bool, Any]], what: str,
              peer: int | None) -> Any:
        """Poll `ready` until it says done, or FleetTimeout after timeout_s without a
        heartbeat from `peer` (the rank it depends on; without one, timeout_s in all); at
        once where `peer` went silent before. A rank other than 0 that waits for a third
        rank beats to rank 0 meanwhile (rank 0 may wait for it: it is alive, not silent)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            done, value = ready()
            if done:
                return value
            if peer is not None and peer in self._silent:
                raise self._gave_up(what, peer)
            if self._sparing and peer not in (None, self.rank):
                said = self.stop_said(peer)
                if said is not None:
                    raise PeerStopped(f"rank {self.rank} stopped waiting for {what}: rank "
                                      f"{peer} was stopped by {said}", peer, said)
            if peer is not None and self._heard_from(peer):
                deadline = time.monotonic() + self.timeout_s
            if time.monotonic() > deadline:
                raise self._timeout(what, peer)
            if self.rank != 0 and peer not in (None, 0):
                now = time.monotonic()
                if now - self._last_beat >= min(FANOUT_INTERVAL_S, self.timeout_s / 10):
                    self._last_beat = now
                    self.heartbeat()
            time.sleep(POLL_S)

    def wait(self, request: Any, what: str, peer: int | None = None) -> Any:
        """Complete an MPI request (see `_poll` for the timeout)."""
        try:
            return self._poll(request.test, what, peer)
        except BaseException:  # timed out, or a stop signal: MPI may still use its buffer
            self._pending.append(request)
            raise

    def keep(self, requests: list[Any]) -> None:
        """Requests given up on before they completed (a window of buffers when a stop
        signal came): referenced, with the buffers they hold, so MPI never reads or writes
        freed memory (a 16 MiB window dropped on SIGTERM crashed the sending rank)."""
        self._pending += requests

    def bcast(self, value: Any, what: str) -> Any:
        """Rank 0's value on every rank (point-to-point, so a timeout is possible)."""
        tag = self._next_tag()
        if self.rank == 0:
            requests = [(r, self.comm.isend(value, dest=r, tag=tag)) for r in range(1, self.size)]
            self._pending += [request for _, request in requests]
            waited = [(peer, request) for peer, request in requests
                      if peer not in self._silent]  # a silent rank's send stays pending
            for peer, request in waited:
                self.wait(request, what, peer)
            self._pending = [r for r in self._pending if all(r is not q for _, q in waited)]
            return value
        return self._recv(0, tag, what)

    def gather(self, value: Any, what: str,
               hurry: Callable[[], bool] | None = None) -> dict[int, Any] | None:
        """On rank 0: {rank: value} of every rank that sent before it was silent for
        timeout_s (missing ranks absent), or for HURRIED_WAIT_S once `hurry()` says so (a
        stop signal: mpirun kills the job a second after its SIGTERM, and a rank that died
        sends nothing); elsewhere None once rank 0 has the value.
        Rank 0 first gives each rank the go-ahead, and a rank sends only then, while rank 0
        receives: a rank that times out waiting has no send pending (a large one, given up,
        crashed rank 0 when it later came to receive it)."""
        tag = self._next_tag()
        if self.rank != 0:
            self._recv(0, tag, what)  # the go-ahead: iprobe, so nothing is pending meanwhile
            # Rank 0 is receiving now, and beats while it does: a rank 0 stopped mid-gather
            # (SIGSTOP) ends this send within the timeout instead of blocking it for good.
            self.wait(self.comm.isend(value, dest=0, tag=tag), what, 0)
            return None
        self._pending += [self.comm.isend(None, dest=r, tag=tag) for r in range(1, self.size)]
        received = {0: value}
        heard = {source: time.monotonic() for source in range(1, self.size)}
        while heard:
            self.heartbeat()  # the ranks whose sends wait on this one
            for source in sorted(heard):
                patience = HURRIED_WAIT_S if hurry is not None and hurry() else self.timeout_s
                if self.comm.iprobe(source=source, tag=tag):
                    received[source] = self.comm.recv(source=source, tag=tag)
                    del heard[source]
                elif source in self._silent:
                    del heard[source]  # silent before: no second timeout
                elif self._heard_from(source):
                    heard[source] = time.monotonic()
                elif time.monotonic() - heard[source] > patience:
                    del heard[source]  # silent for timeout_s: hung or died
                    if patience == self.timeout_s:
                        self._timeout(what, source)
            time.sleep(POLL_S if heard else 0)
        return received

    STREAM_AHEAD = 4
    """`stream`: ranks given the go-ahead past the one rank 0 waits for (few sends under way
    to rank 0 at once, yet no rank idles while rank 0 writes the one before)."""

    def stream(self, value: Any, what: str, take: Callable[[int, Any], None],
               sources: list[int] | None = None,
               hurry: Callable[[], bool] | None = None) -> list[int] | None:
        """A `gather` that keeps nothing: on rank 0 each rank's value goes to
        `take(rank, value)` as it comes, in rank order (rank 0's own first), so rank 0 holds
        one at a time (a fleet's results, merged as a stream); it returns the ranks that
        sent, elsewhere None. The go-ahead is `gather`'s, given to STREAM_AHEAD ranks past
        the one waited for; the ranks waiting their turn hear rank 0's heartbeats. A rank
        silent for timeout_s once it had the go-ahead is left out. `sources`: the ranks to
        ask (default every one), e.g. those that answered a `gather` just before, so a rank
        already given up on costs no second timeout; `hurry` as `gather`'s."""
        tag = self._next_tag()
        if self.rank != 0:
            self._recv(0, tag, what)  # the go-ahead: nothing is pending meanwhile
            self.wait(self.comm.isend(value, dest=0, tag=tag), what, 0)
            return None
        take(0, value)
        asked = sorted(set(range(1, self.size) if sources is None else sources) - {0}
                       - set(self._silent))  # a rank silent before costs no timeout
        sent, given = [0], 0
        for position, source in enumerate(asked):
            for ahead in asked[given:position + 1 + self.STREAM_AHEAD]:
                self._pending.append(self.comm.isend(None, dest=ahead, tag=tag))
            given = max(given, position + 1 + self.STREAM_AHEAD)
            heard = time.monotonic()
            while not self.comm.iprobe(source=source, tag=tag):
                self.heartbeat()  # the ranks waiting their turn
                if self._heard_from(source):
                    heard = time.monotonic()
                elif time.monotonic() - heard > (HURRIED_WAIT_S if hurry is not None
                                                 and hurry() else self.timeout_s):
                    break  # silent for timeout_s: hung or died
                time.sleep(POLL_S)
            else:
                take(source, self.comm.recv(source=source, tag=tag))
                sent.append(source)
            self.heartbeat()
        return sent

    def _recv(self, source: int, tag: int, what: str) -> Any:
        """Receive once the message is there (probed: nothing is posted while waiting)."""
        self._poll(lambda: (self.comm.iprobe(source=source, tag=tag), None), what, source)
        return self.comm.recv(source=source, tag=tag)

    def announce_stop(self, signal_name: str) -> None:
        """Tell the ranks that may wait for this one (rank 0 and its net_p2p peers, as
        `listeners` names them; else every rank) that a stop signal reached it, once, the
        moment its handler runs (from the signal handler: between two of the main thread's
        steps, never inside an MPI call): a rank still finishing when rank 0 stops waiting
        for it (0.2 s after a signal) is then named `interrupted`, not `missing`
        (`stopped_ranks`), and a rank waiting for it in net_p2p stops waiting at once
        (`sparing_stopped`): the other end of a pair waited up to the timeout when only
        rank 0 was told. Rank 0 tells no one (its own last steps end the job). Never raises
        (an error here would surface wherever the signal landed)."""
        if self.rank == 0 or self._announced:
            return
        told = range(self.size) if self.listeners is None else sorted(self.listeners | {0})
        for peer in told:
            if peer != self.rank:
                with suppress(Exception):
                    self._announced.append(self.comm.isend(signal_name, dest=peer,
                                                           tag=STOPPING_TAG))

    def stopped_ranks(self) -> dict[int, str]:
        """{rank: the signal it said reached it} for the ranks that announced one
        (`announce_stop`) so far, their words taken off the queue."""
        for source in range(self.size):
            if source != self.rank:
                self.stop_said(source)
        return dict(self._stopped)

    def stop_said(self, source: int) -> str | None:
        """The stop signal `source` announced (its word taken off the queue), or None."""
        if source == self.rank:
            return None
        while self.comm.iprobe(source=source, tag=STOPPING_TAG):
            self._stopped[source] = str(self.comm.recv(source=source, tag=STOPPING_TAG))
        return self._stopped.get(source)

    @contextmanager
    def sparing_stopped(self) -> Iterator[None]:
        """Within it, this rank stops waiting for another the moment that one announces a
        stop signal (`PeerStopped`) instead of after the whole timeout: for the waits of a
        measurement (net_p2p), which the stopped rank left. Not for the last steps, which
        a stopped rank still takes (it sends its report): those wait for it as before."""
        sparing, self._sparing = self._sparing, True
        try:
            yield
        finally:
            self._sparing = sparing

    def drain(self) -> None:
        """Take the heartbeats still queued for this rank, before MPI finalises, and forget
        sends that completed."""
        for source in (range(1, self.size) if self.rank == 0 else [0]):
            self._heard_from(source)
        self.stopped_ranks()  # the stop words sent to this rank (rank 0 is told by every
        # rank that was signalled, the others by their net_p2p peers) are taken here
        self._pending = [request for request in self._pending if not request.test()[0]]

    def _next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def abort(self, code: int) -> None:
        """End every rank of the job (used when a rank hangs past the timeout)."""
        self.comm.Abort(code)
