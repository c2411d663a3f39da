"""Host cases declared with the function that runs them (latency), as the GPU cases are: key,
description, how the case expands into jobs on this host, why it cannot run here, and the
function that measures one job (`run(HostCaseRun) -> list[Measurement]`).

The DDR STREAM cases (`ddr_*`) are plain `CaseSpec`s run by `HostExecutor`'s own loop; a
new host case with a loop of its own is one entry here and one function
(docs/adding-a-case.md). This module imports no Numba: the catalogue (`bwprof.cases`) stays
cheap to load, and the functions import their compiled kernels when they run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bwprof.casespec import CaseSpec
from bwprof.costs import Cost
from bwprof.lazyref import Refs
from bwprof.measurement import Job, Measurement, NotRun

if TYPE_CHECKING:
    from bwprof.host.facts import HostFacts
    from bwprof.plan import Plan

# The functions the table names, each imported when first called (the catalogue loads no
# measuring code).
gemm = Refs("bwprof.host.gemm")
latency = Refs("bwprof.host.latency")


@dataclass(frozen=True)
class HostCaseRun:
    """What the function of a declared host case gets for one job."""

    case: HostCase
    job: Job
    plan: Plan
    host: HostFacts
    scratch: dict[object, object] = field(default_factory=dict)
    """Kept between the jobs of one case (a chain every load level reuses); emptied when
    the next case starts and when the executor closes."""


Expand = Callable[["HostCase", "HostFacts", "Plan"], list[Job]]
Unavailable = Callable[["HostCase", "HostFacts"], NotRun | None]
Run = Callable[[HostCaseRun], list[Measurement]]
Costs = Callable[[Job, "Plan", "HostFacts", "Job | None"], Cost]
"""What one job costs (`bwprof.costs`), given the job run just before it on the host."""


@dataclass(frozen=True, kw_only=True)
class HostCase(CaseSpec):
    """A host case: the CaseSpec every case has, and how `HostExecutor` runs it."""

    expand: Expand
    run: Run
    cost: Costs
    unavailable: Unavailable | None = None
    """Why the case cannot run on this host at all (one NUMA node, one CPU), or None."""


def _latency(key: str, description: str, *, expand: Expand, run: Run, cost: Costs,
             unavailable: Unavailable | None = None) -> HostCase:
    return HostCase(key=key, description=description, target="host", memory="ddr",
                    direction="within", byte_convention="copy", bytes_factor=1,
                    metric="latency", expand=expand, run=run, cost=cost,
                    unavailable=unavailable)


HOST_CASES: tuple[HostCase, ...] = (
    _latency("lat_host", "host load latency: one thread chasing a random cycle of cache lines, "
             "4 KiB to 4x the last-level cache (L1, L2, L3, DDR)",
             expand=latency.sweep_jobs, run=latency.chase_sweep, cost=latency.sweep_cost),
    _latency("lat_host_numa", "host DDR load latency from the CPUs of each NUMA node to the "
             "memory of each node (a matrix)",
             expand=latency.numa_jobs, run=latency.chase_numa, cost=latency.numa_cost,
             unavailable=latency.numa_unavailable),
    _latency("lat_host_loaded", "host DDR load latency while the other selected cores stream "
             "memory, from idle to full load (latency against achieved bandwidth)",
             expand=latency.loaded_jobs, run=latency.chase_loaded, cost=latency.loaded_cost,
             unavailable=latency.loaded_unavailable),
    HostCase(key="gemm_host", description="host square matrix multiply through NumPy's BLAS "
             "(numpy.matmul), fp64 and fp32, every selected thread and one thread (TFLOP/s)",
             target="host", memory="ddr", direction="within", byte_convention="traffic",
             bytes_factor=3, metric="throughput", expand=gemm.jobs, run=gemm.matmul,
             cost=gemm.cost),
)
