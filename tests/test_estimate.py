"""The planner's estimate on every machine shape (`tests/shapes`): a run of each preset is
estimated within its budget, takes at most a quarter of the RAM, chooses no size that
overflows, and the runner measures exactly the jobs the estimate lists. These hold the
planner's choices on machines this one is not, without timing anything."""

from __future__ import annotations

import pytest

from bwprof import api, costs
from bwprof.costs import Cost
from bwprof.estimate import estimate, expand
from bwprof.executor import UnavailableExecutor
from bwprof.plan import make_plan
from bwprof.rules import DEFAULT_MEMORY_SHARE
from tests.shapes import SHAPES, budgets, shape
from tests.test_runner import ScriptedExecutor

CPU_ONLY_STANDARD_S = 90.0
ONE_H200_QUICK_S = 60.0
EIGHT_GPUS_QUICK_S = 180.0
"""Issue 32's budgets: a default run of a CPU-only box, a quick run on one H200 and on 8."""


def _planned(name: str, preset: str = "standard", **options: object) -> api.PlannedRun:
    return api.plan_run(machine=shape(name), preset=preset, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "preset", "seconds"), budgets())
def test_every_shape_s_run_is_estimated_within_its_budget(name, preset, seconds):
    planned = _planned(name, preset)
    assert planned.estimate.seconds <= seconds, (
        f"{name} {preset}: {planned.estimate.seconds:.0f} s > {seconds:.0f} s")


@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_each_shape_declares_the_issue_s_budgets(path):
    """A CPU-only box: the default run in 90 s; one H200: quick in 60 s; 8 GPUs: quick in
    180 s. The files may ask for more, never for less."""
    machine = shape(path.stem)
    wanted = {}
    if not machine.gpus:
        wanted["standard"] = CPU_ONLY_STANDARD_S
    elif len(machine.gpus) == 1 and machine.gpus[0].properties.name == "NVIDIA H200":
        wanted["quick"] = ONE_H200_QUICK_S
    elif len(machine.gpus) == 8:
        wanted["quick"] = EIGHT_GPUS_QUICK_S
    for preset, seconds in wanted.items():
        assert machine.budgets_s.get(preset, float("inf")) <= seconds, (path.stem, preset)


@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_the_default_run_takes_at_most_a_quarter_of_the_ram(path):
    planned = _planned(path.stem)
    total = planned.host.memory_total_bytes
    assert total and planned.estimate.peak_host_bytes <= DEFAULT_MEMORY_SHARE * total


@pytest.mark.parametrize("preset", ["quick", "standard", "full"])
@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_no_size_the_planner_chooses_overflows(path, preset):
    """Every job's buffer, the bytes of one operation and the memory it takes stay inside
    an int64 and inside the machine: no count wraps at 2^31 or 2^32, none is negative."""
    planned = _planned(path.stem, preset)
    for work in planned.estimate.work:
        for job, cost in zip(work.jobs, work.costs, strict=True):
            size = job.size_bytes or 0
            assert size >= 0 and work.case.bytes_per_op(size) < 2**63, (work.case.key, job)
            assert 0 <= cost.host_bytes <= (planned.host.memory_total_bytes or 2**63)
            if work.unavailable is None and planned.gpus.devices:
                largest = max(d.properties.total_memory_bytes for d in planned.gpus.devices)
                assert 0 <= cost.device_bytes <= largest, (work.case.key, job)
            assert cost.seconds >= 0


def test_eight_gpus_sweep_the_first_and_measure_the_others_at_the_headline_size():
    """The quick preset on an HGX box: the first GPU sweeps every transfer size, the other
    seven copy at the largest; pairs as a ring (16, not 56); overlap on the first GPU."""
    planned = _planned("hgx-8xh200", "quick")
    by_case = {work.case.key: work for work in planned.estimate.work}
    h2d = by_case["h2d_pinned"].jobs
    assert len([j for j in h2d if j.device == 0]) == len(planned.plan.transfer_sizes)
    assert {j.size_bytes for j in h2d if j.device != 0} == {planned.plan.transfer_sizes[-1]}
    assert len({(j.device, j.peer) for j in by_case["p2p_copy"].jobs}) == 16
    assert {j.device for j in by_case["overlap_h2d_compute"].jobs} == {0}
    standard = _planned("hgx-8xh200", "standard")
    pairs = {(j.device, j.peer) for w in standard.estimate.work if w.case.key == "p2p_copy"
             for j in w.jobs}
    assert len(pairs) == 56


def test_the_estimate_lists_the_jobs_the_runner_runs():
    """Same plan, same executors: the runner measures exactly what `expand` listed (the
    progress events name every job, in order), so the dry run and the ETA are of this run."""
    from bwprof.runner import RunContext, Runner

    plan = make_plan(cases="ddr_copy,ddr_triad,h2d_pinned", repeats=2, usable_cpus=2,
                     llc_bytes=None, memory_available_bytes=8 << 30)
    executors = {"host": ScriptedExecutor(), "gpu": UnavailableExecutor("cuda", "no GPU")}
    listed = [job for work in expand(plan, executors) for job in work.jobs]
    seen = []

    class Recorder:
        def start(self, total, estimate_s=None):
            assert total == len(listed)

        def job_started(self, job, left_s=None):
            seen.append(job)

        def job_finished(self, job, rows):
            pass

    Runner(plan, executors, RunContext("run", "host"), progress=Recorder()).run()
    assert seen == listed


def test_an_estimate_that_raises_costs_the_least_and_never_stops_the_run():
    class Broken(ScriptedExecutor):
        def cost(self, case, job, plan, previous):
            raise RuntimeError("no model of this")

    plan = make_plan(cases="ddr_copy", repeats=2, usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=8 << 30)
    planned = estimate(plan, {"host": Broken()})
    assert [c.seconds for c in planned.job_costs] == [costs.HOST_JOB_S]


def test_what_a_run_pays_once_is_charged_to_its_first_job():
    """Compiling kernels and opening GPUs happen when the first job of their executor runs:
    the ETA counts them there, not before the run starts."""
    class Compiles(ScriptedExecutor):
        def opening_cost(self, plan):
            return Cost(7.0)

    plan = make_plan(cases="ddr_copy,ddr_scale", repeats=2, usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=8 << 30)
    first, *rest = estimate(plan, {"host": Compiles()}).job_costs
    assert first.seconds - 7.0 == pytest.approx(rest[0].seconds)
