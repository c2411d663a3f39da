"""Host cases through the real HostExecutor and Runner, on a machine described small (its
last-level cache as the test says), so the chases and multiplies are real but short."""

from __future__ import annotations

import os

from bwprof.host.ddr import HostExecutor
from bwprof.plan import make_plan
from bwprof.runner import RunContext, Runner
from bwprof.schema.rows import ResultRow

CPUS = frozenset(os.sched_getaffinity(0))
MEMORY = 8 << 30


def run_host_cases(cases: str, *, llc_bytes: int, threads: str | None = None,
                   preset: str = "quick", size: str | None = None,
                   **executor: object) -> list[ResultRow]:
    """The rows of `cases`, 2 samples each, on a host with `llc_bytes` of last-level cache;
    `executor` adds what the HostExecutor is told (caches, nodes, cpus: this process's
    CPUs unless given)."""
    plan = make_plan(preset=preset, cases=cases, repeats=2, threads=threads, size=size,
                     usable_cpus=len(CPUS), llc_bytes=llc_bytes, memory_available_bytes=MEMORY)
    options: dict[str, object] = {"cpus": CPUS, **executor}
    host = HostExecutor("test CPU", llc_bytes=llc_bytes, memory_available_bytes=MEMORY,
                        **options)  # type: ignore[arg-type]  # by keyword, as HostExecutor takes
    runner = Runner(plan, {"host": host}, RunContext("run", "host"))
    try:
        return runner.run()
    finally:
        runner.close()
