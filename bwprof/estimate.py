"""What a plan will do on this machine, and what it will cost, before anything is measured.

The runner measures exactly the work `expand` lists (the same jobs in the same order), so the
estimate of `bwprof run --dry-run`, the ETA of the progress line and the fitting of
`--budget` are all of the run that follows. Each job's cost comes from its executor
(`Executor.cost`: the case's own cost function, from the speeds `bwprof.costs` assumes);
what a run pays once (starting, compiling kernels, opening GPUs, the report at the end) is
added apart.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, replace

from bwprof import costs
from bwprof.casespec import CaseSpec
from bwprof.costs import Cost
from bwprof.executor import Executor
from bwprof.measurement import Job, NotRun
from bwprof.plan import Plan


@dataclass(frozen=True)
class Planned:
    """One case's work on this machine: its jobs and what each costs, or why it cannot run
    (then one job stands for its one row)."""

    case: CaseSpec
    executor: Executor
    unavailable: NotRun | None
    jobs: tuple[Job, ...]
    costs: tuple[Cost, ...]

    @property
    def seconds(self) -> float:
        return sum(cost.seconds for cost in self.costs)


@dataclass(frozen=True)
class PlanEstimate:
    """The work of a plan, in the order it runs, and what it costs."""

    work: tuple[Planned, ...]
    once: Cost
    """What the run pays once beside its jobs: starting before the first and the report
    after the last (what an executor pays before its first job, compiling kernels and
    opening GPUs, is in that job's cost)."""

    @property
    def jobs(self) -> int:
        """Every job the runner goes through: one a case that cannot run here (its row)."""
        return sum(len(planned.jobs) for planned in self.work)

    @property
    def measured_jobs(self) -> int:
        """The jobs that measure something."""
        return sum(len(planned.jobs) for planned in self.work if not planned.unavailable)

    @property
    def cases_not_run(self) -> int:
        return sum(1 for planned in self.work if planned.unavailable)

    @property
    def job_costs(self) -> list[Cost]:
        return [cost for planned in self.work for cost in planned.costs]

    @property
    def seconds(self) -> float:
        return self.once.seconds + sum(planned.seconds for planned in self.work)

    @property
    def peak_host_bytes(self) -> int:
        """The process's memory at its largest: its own, and the largest job's buffers (a
        case's buffers are let go before the next case's are taken)."""
        jobs = max((cost.host_bytes for cost in self.job_costs), default=0)
        return costs.PROCESS_BYTES + max(jobs, self.once.host_bytes)

    @property
    def peak_device_bytes(self) -> int:
        """Device memory of the GPU holding most, at the job taking most."""
        return max((cost.device_bytes for cost in self.job_costs), default=0)


def expand(plan: Plan, executors: Mapping[str, Executor]) -> list[Planned]:
    """Every case of the plan as the jobs its executor expands it into, collective cases
    (every MPI rank in step) first, so a rank failing later in its own measurements cannot
    leave its peers waiting for it. A case that cannot run here is one job with the reason;
    an executor that fails to expand a case (a GPU that cannot be opened) makes it one
    `error` job."""
    work: list[Planned] = []
    ordered = sorted(plan.cases, key=lambda c: not executors[c.target].collective)
    previous: dict[int, Job | None] = {}
    for case in ordered:
        executor = executors[case.target]
        try:
            unavailable = executor.unavailable_reason(case)
            jobs = [Job(case.key)] if unavailable else executor.jobs(case, plan)
        except Exception as exc:  # e.g. a GPU that cannot be opened: one error row
            unavailable = NotRun("error", one_line(exc))
            jobs = [Job(case.key)]
        job_costs = []
        for job in jobs:
            job_costs.append(Cost(0.0) if unavailable else _cost(
                executor, case, job, plan, previous.get(id(executor))))
            if not unavailable:
                previous[id(executor)] = job
        work.append(Planned(case, executor, unavailable, tuple(jobs), tuple(job_costs)))
    return work


def _cost(executor: Executor, case: CaseSpec, job: Job, plan: Plan,
          previous: Job | None) -> Cost:
    """A job's cost; an estimate that fails is no reason to fail a run: the bare minimum."""
    try:
        return executor.cost(case, job, plan, previous)
    except Exception:
        return Cost(costs.HOST_JOB_S)


def estimate(plan: Plan, executors: Mapping[str, Executor],
             work: list[Planned] | None = None, plots: bool = True) -> PlanEstimate:
    """The plan's work (`expand`, unless given) and what the run costs in all (`plots`: the
    run draws its plots and report.html at the end)."""
    work = expand(plan, executors) if work is None else work
    opened: set[int] = set()
    charged = []
    for planned in work:
        executor = planned.executor
        if planned.unavailable or not planned.jobs or id(executor) in opened:
            charged.append(planned)
            continue
        opened.add(id(executor))
        try:
            opening = executor.opening_cost(plan)
        except Exception:  # an estimate never fails a run
            opening = Cost(0.0)
        first = planned.costs[0]
        charged.append(replace(planned, costs=(Cost(first.seconds + opening.seconds,
                                                     max(first.host_bytes, opening.host_bytes),
                                                     first.device_bytes),
                                                *planned.costs[1:])))
    return PlanEstimate(tuple(charged), Cost(costs.START_S + costs.FINISH_S
                                             + (costs.PLOTS_S if plots else 0.0)))


def one_line(exc: BaseException) -> str:
    """The exception as a row's note; with BWPROF_DEBUG=1 also its traceback on stderr, so an
    API difference met on a GPU machine shows its file and line, not only its message."""
    if os.environ.get("BWPROF_DEBUG") == "1":
        traceback.print_exception(exc, file=sys.stderr)
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")
