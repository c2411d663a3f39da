"""The one contract every executor implements (host, GPU, fleet network), so the runner and
the API never reach past it.

An executor expands a case into jobs and measures each job into raw `Measurement`s; the
runner owns the loop, statistics and rows. What cannot run here is a `NotRun` — returned by
`unavailable_reason` for a whole case up front, or raised by a job — never an error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from bwprof import costs
from bwprof.casespec import CaseSpec
from bwprof.costs import Cost
from bwprof.measurement import Job, Measurement, NotRun
from bwprof.plan import Plan


class Executor(ABC):
    backend: str
    """The label its rows carry: host, cuda, simulated, mpi."""
    collective: bool = False
    """Its cases run in step on every MPI rank, so the runner runs them before any other: a
    rank failing later in its own cases cannot leave its peers waiting."""

    def unavailable_reason(self, case: CaseSpec) -> NotRun | None:
        """Why `case` cannot run here at all (one row says so), or None."""
        return None

    @abstractmethod
    def jobs(self, case: CaseSpec, plan: Plan) -> list[Job]:
        """The jobs `case` expands into on this machine, in the order they run."""

    @abstractmethod
    def measure(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        """Raw times of one job's rows; raises NotRun for a job that cannot run here."""

    def cost(self, case: CaseSpec, job: Job, plan: Plan, previous: Job | None) -> Cost:
        """What `job` is expected to take (`bwprof.costs`), `previous` the job this executor
        runs just before it (None for its first): for --dry-run, the ETA and --budget."""
        return Cost(costs.HOST_JOB_S)

    def opening_cost(self, plan: Plan) -> Cost:
        """What starting to measure costs once, beside the jobs: compiling kernels, opening
        GPUs."""
        return Cost(0.0)

    def close(self) -> None:  # noqa: B027 - most executors hold nothing to release
        """Release what the executor holds (buffers, devices); called once, at the end."""


class UnavailableExecutor(Executor):
    """Stands in for a backend this machine lacks: every case becomes one row with the
    reason, `skipped` (could not run here) or `waived` (does not apply here)."""

    def __init__(self, backend: str, reason: str, status: str = "skipped") -> None:
        self.backend = backend
        self.reason = reason
        self.status = status

    def unavailable_reason(self, case: CaseSpec) -> NotRun:
        return NotRun(self.status, self.reason)

    def jobs(self, case: CaseSpec, plan: Plan) -> list[Job]:
        return []

    def cost(self, case: CaseSpec, job: Job, plan: Plan, previous: Job | None) -> Cost:
        return Cost(0.0)

    def measure(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        raise NotRun(self.status, self.reason)
