"""The MPI layer of fleet runs: launch detection, node-local ranks, and collective steps
with a timeout, so a rank that hangs stops the job with a clear message instead of forever.

mpi4py is optional (`pip install 'bwprof[mpi]'`) and imported only here, only when asked.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from bwprof.errors import BwprofError

POLL_S = 0.01
INSTALL_HINT = ("pip install 'bwprof[mpi]' and an MPI library (e.g. apt install openmpi-bin), "
                "then launch with mpirun or srun")

# Variables the common launchers set in every rank, with the world size they carry.
LAUNCH_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS",
                         "MPI_LOCALNRANKS")


def launched_by_mpi(environ: dict[str, str] | None = None) -> bool:
    """True when mpirun/srun started this process as one of several ranks."""
    env = os.environ if environ is None else environ
    for name in LAUNCH_SIZE_VARIABLES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 1:
            return name != "SLURM_NTASKS" or "SLURM_PROCID" in env
    return False


def rank_from_environment(environ: dict[str, str] | None = None) -> int | None:
    """This process's rank as the launcher set it (before MPI is initialised), if any."""
    env = os.environ if environ is None else environ
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if env.get(name, "").isdigit():
            return int(env[name])
    return None


FLEET_RUN = "a fleet run (--mpi, or several ranks started by mpirun or srun)"


def import_mpi() -> Any:
    """mpi4py's MPI module, or a one-line BwprofError saying how to get it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise BwprofError(f"{FLEET_RUN} needs mpi4py ({exc}); {INSTALL_HINT}") from None
    except RuntimeError as exc:  # mpi4py present, MPI library missing or broken
        raise BwprofError(f"{FLEET_RUN} could not load the MPI library ({exc}); "
                          f"{INSTALL_HINT}") from None
    return MPI


class FleetTimeout(Exception):
    """A collective step did not complete in time: some rank hangs or died."""


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
    _tag: int = 100

    @classmethod
    def join(cls, timeout_s: float) -> Fleet:
        MPI = import_mpi()
        comm = MPI.COMM_WORLD
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        return cls(comm, comm.Get_rank(), comm.Get_size(), local.Get_rank(), local.Get_size(),
                   MPI.Get_processor_name(), timeout_s)

    def wait(self, request: Any, what: str) -> Any:
        """Complete an MPI request, or FleetTimeout after timeout_s (a peer hangs or died)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            done, value = request.test()
            if done:
                return value
            if time.monotonic() > deadline:
                raise FleetTimeout(f"rank {self.rank} waited {self.timeout_s:g} s for {what}")
            time.sleep(POLL_S)

    def bcast(self, value: Any, what: str) -> Any:
        """Rank 0's value on every rank (point-to-point, so a timeout is possible)."""
        tag = self._next_tag()
        if self.rank == 0:
            requests = [self.comm.isend(value, dest=r, tag=tag) for r in range(1, self.size)]
            for request in requests:
                self.wait(request, what)
            return value
        return self._recv(0, tag, what)

    def gather(self, value: Any, what: str) -> dict[int, Any] | None:
        """On rank 0: {rank: value} of every rank that sent in time (missing ranks absent);
        elsewhere None once rank 0 has the value."""
        tag = self._next_tag()
        if self.rank != 0:
            self.wait(self.comm.isend(value, dest=0, tag=tag), what)
            return None
        received = {0: value}
        deadline = time.monotonic() + self.timeout_s
        pending = set(range(1, self.size))
        while pending and time.monotonic() < deadline:
            for source in sorted(pending):
                if self.comm.iprobe(source=source, tag=tag):
                    received[source] = self.comm.recv(source=source, tag=tag)
                    pending.discard(source)
            time.sleep(POLL_S if pending else 0)
        return received

    def _recv(self, source: int, tag: int, what: str) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while not self.comm.iprobe(source=source, tag=tag):
            if time.monotonic() > deadline:
                raise FleetTimeout(f"rank {self.rank} waited {self.timeout_s:g} s for {what} "
                                   f"from rank {source}")
            time.sleep(POLL_S)
        return self.comm.recv(source=source, tag=tag)

    def _next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def abort(self, code: int) -> None:
        """End every rank of the job (used when a rank hangs past the timeout)."""
        self.comm.Abort(code)
