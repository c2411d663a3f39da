"""`Heartbeat` on a rank other than 0 once rank 0 went silent (issue 37: a rank 0 stopped
with SIGSTOP under --mpi-timeout 20 let the others measure the rest of their plans before
they ended: 86 s on a loaded box instead of one timeout)."""

from __future__ import annotations

import pytest

from bwprof.fleet.comm import FleetTimeout
from bwprof.fleet.run import Heartbeat


class _Fleet:
    def __init__(self, rank: int, silent: dict[int, str]) -> None:
        self.rank, self._silent, self.beats = rank, silent, 0

    def silent(self, peer: int) -> str | None:
        return self._silent.get(peer)

    def heartbeat(self) -> None:
        self.beats += 1


class _Listener:
    def __init__(self) -> None:
        self.started: list[object] = []

    def start(self, total, estimate_s=None) -> None: ...

    def job_started(self, job, left_s=None) -> None:
        self.started.append(job)

    def job_finished(self, job, rows) -> None: ...


# Catches: a rank measuring on after a wait gave up on rank 0 (its next step gives up at
# once anyway), so the job ended after the rest of its plan instead of within the timeout
def test_a_rank_stops_measuring_once_rank_0_went_silent():
    fleet, inner = _Fleet(1, {0: "rank 1 waited 20 s for the window from rank 0"}), _Listener()
    with pytest.raises(FleetTimeout, match="rank 1 stopped measuring: rank 0 went silent "
                                           r"\(rank 1 waited 20 s"):
        Heartbeat(fleet, inner).job_started("job")  # type: ignore[arg-type]
    assert inner.started == []


# Catches: the check stopping rank 0 (it merges what the others send) or a rank whose
# silent peer is not rank 0 (net_p2p skips that peer's jobs; the rest still run)
@pytest.mark.parametrize("rank, silent", [(0, {1: "gone"}), (2, {1: "gone"}), (1, {})])
def test_other_ranks_measure_on_and_beat(rank, silent):
    fleet, inner = _Fleet(rank, silent), _Listener()
    Heartbeat(fleet, inner).job_started("job")  # type: ignore[arg-type]
    assert inner.started == ["job"] and fleet.beats == 1


# Catches: a wrapper that takes not-run jobs apart around a listener that does not (a
# caller's own): the runner then counted only measured jobs in `start` while the inner
# listener was still told of every job, "[2/1 ...]"
@pytest.mark.parametrize("inner_apart", [True, False])
def test_the_fleet_wrappers_count_as_the_listener_they_wrap(inner_apart):
    from bwprof.executor import UnavailableExecutor
    from bwprof.fleet.run import FailAtFirstLocalJob
    from bwprof.plan import make_plan
    from bwprof.runner import RunContext, Runner
    from tests.test_runner import ScriptedExecutor

    class Old:
        def __init__(self) -> None:
            self.events: list[tuple[object, ...]] = []

        def start(self, total, estimate_s=None) -> None:
            self.events.append(("start", total))

        def job_started(self, job, left_s=None) -> None:
            self.events.append(("job", job.case))

        def job_finished(self, job, rows) -> None:
            self.events.append(("done", job.case))

    class Apart(Old):
        def job_not_run(self, job, rows) -> None:
            self.events.append(("not run", job.case))

    plan = make_plan(cases="ddr_copy,h2d_pinned", repeats=2, usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=8 << 30)
    sizes = len(plan.host_array_bytes)
    executors = {"host": ScriptedExecutor(), "gpu": UnavailableExecutor("cuda", "no GPU")}
    inner = Apart() if inner_apart else Old()
    Runner(plan, executors, RunContext("run", "host"),
           progress=Heartbeat(_Fleet(0, {}), inner)).run()  # type: ignore[arg-type]
    measured = [("job", "ddr_copy"), ("done", "ddr_copy")] * sizes
    assert inner.events == (
        [("start", sizes), *measured, ("not run", "h2d_pinned")] if inner_apart
        else [("start", sizes + 1), *measured, ("job", "h2d_pinned"), ("done", "h2d_pinned")])
    for wrapped in (Apart(), Old(), None):
        injector = FailAtFirstLocalJob(wrapped)  # type: ignore[arg-type]
        assert Heartbeat(_Fleet(0, {}), injector).takes_not_run == (  # type: ignore[arg-type]
            not isinstance(wrapped, Old) or isinstance(wrapped, Apart))
