"""`--budget SECONDS`: the plan scaled down until its estimate fits, saying what it dropped.

The steps are tried in order, what costs the figures least first, each kept only where it
shortens the estimate: the counter windows (the rows keep their counters, fewer samples of
them), the size sweeps on every GPU but the first (the others measured at the largest
size), the latency sweeps by 4x instead of 2x, the GPU pairs as a ring instead of every
ordered pair, the pageable sizes past the transfer sizes, every other transfer size (the
largest kept: the headline figures are measured there; twice), the pipeline's smaller
chunks, and fewer repeats (halved, twice, down to MIN_REPEATS).
Every case still runs. Where even all of them leave the plan over the budget, the smallest
plan runs and the note says by how much it is over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from bwprof.estimate import PlanEstimate, estimate
from bwprof.executor import Executor
from bwprof.plan import Plan
from bwprof.units import format_bytes

MIN_REPEATS = 3
"""Fewest samples a budget may leave a figure: a median and a spread still mean something."""


@dataclass(frozen=True)
class Fitted:
    plan: Plan
    estimate: PlanEstimate
    notes: tuple[str, ...] = ()
    """What the user should know: the budget not met even by the smallest plan."""
    steps: tuple[int, ...] = ()
    """The indices in STEPS of the steps taken, in order: what a fleet's ranks agree on."""
    asked_s: float = 0.0
    """The estimate of the plan as asked, before any step: the fleet's ranks follow the
    steps of the rank whose plan costs most."""


def _no_windows(plan: Plan) -> tuple[Plan, str] | None:
    if not plan.counter_windows:
        return None
    return replace(plan, counter_windows=False), "the counter windows of the large rows"


def _coarse_sweeps(plan: Plan) -> tuple[Plan, str] | None:
    if plan.latency_step == 4 or not any(c.metric == "latency" for c in plan.cases):
        return None
    return replace(plan, latency_step=4), "every other latency working set (4x steps)"


def _first_gpu_sweeps(plan: Plan) -> tuple[Plan, str] | None:
    if plan.sweep_gpus == "first" or not plan.gpu_cases:
        return None
    return (replace(plan, sweep_gpus="first"),
            "size sweeps on every GPU but the first (the others at the largest size)")


def _ring(plan: Plan) -> tuple[Plan, str] | None:
    if plan.pairs == "ring" or not any(c.min_gpus >= 2 for c in plan.cases):
        return None
    return replace(plan, pairs="ring"), "GPU pairs beyond a ring (each GPU to the next, both ways)"


def _past_cache(plan: Plan) -> tuple[Plan, str] | None:
    if not plan.past_host_cache or not plan.gpu_cases:
        return None
    return (replace(plan, past_host_cache=False),
            "pageable sizes past the transfer sizes (to 4x the host's cache)")


def _fewer_sizes(plan: Plan) -> tuple[Plan, str] | None:
    sizes = plan.transfer_sizes
    if len(sizes) < 2:
        return None
    kept = sizes[::-2][::-1]  # every other, counted from the largest, which stays
    gone = sorted(set(sizes) - set(kept))
    return (replace(plan, transfer_sizes=kept),
            f"transfer sizes {', '.join(format_bytes(s) for s in gone)}")


def _one_chunk(plan: Plan) -> tuple[Plan, str] | None:
    chunks = plan.pipeline_chunks
    if len(chunks) < 2:
        return None
    return (replace(plan, pipeline_chunks=chunks[-1:]),
            f"pipeline chunks {', '.join(format_bytes(c) for c in chunks[:-1])}")


def _fewer_repeats(plan: Plan) -> tuple[Plan, str] | None:
    if plan.repeats <= MIN_REPEATS:
        return None
    fewer = max(MIN_REPEATS, plan.repeats // 2)
    return replace(plan, repeats=fewer), f"repeats {plan.repeats} -> {fewer}"


STEPS: tuple[Callable[[Plan], tuple[Plan, str] | None], ...] = (
    _no_windows, _first_gpu_sweeps, _coarse_sweeps, _ring, _past_cache, _fewer_sizes,
    _fewer_sizes, _one_chunk,
    _fewer_repeats, _fewer_repeats,
)


def fit(plan: Plan, executors: Mapping[str, Executor], budget_s: float | None,
        plots: bool = True) -> Fitted:
    """The plan and its estimate; with a budget, scaled down by STEPS until it fits."""
    current = estimate(plan, executors, plots=plots)
    asked = current.seconds
    if budget_s is None or current.seconds <= budget_s:
        return Fitted(replace(plan, budget_s=budget_s), current, asked_s=asked)
    dropped: list[str] = []
    taken: list[int] = []
    for index, step in enumerate(STEPS):
        if current.seconds <= budget_s:
            break
        change = step(plan)
        if change is None:
            continue
        smaller, what = change
        trial = estimate(smaller, executors, plots=plots)
        if trial.seconds < current.seconds:
            dropped.append(f"{what} (-{current.seconds - trial.seconds:.0f} s)")
            taken.append(index)
            plan, current = smaller, trial
    return Fitted(replace(plan, budget_s=budget_s, dropped=tuple(dropped)), current,
                  _over(budget_s, current), tuple(taken), asked)


def follow(plan: Plan, executors: Mapping[str, Executor], budget_s: float,
           steps: Sequence[int], plots: bool = True) -> Fitted:
    """The plan scaled down by exactly these STEPS (another rank's choice): every rank of a
    fleet must run the same net_p2p jobs (sizes, repeats), or the pairs wait on each other
    until --mpi-timeout."""
    current = estimate(plan, executors, plots=plots)
    asked = current.seconds
    dropped: list[str] = []
    for index in steps:
        change = STEPS[index](plan)
        if change is None:
            continue
        smaller, what = change
        trial = estimate(smaller, executors, plots=plots)
        dropped.append(f"{what} (-{max(0.0, current.seconds - trial.seconds):.0f} s)")
        plan, current = smaller, trial
    return Fitted(replace(plan, budget_s=budget_s, dropped=tuple(dropped)), current,
                  _over(budget_s, current), tuple(steps), asked)


def _over(budget_s: float, current: PlanEstimate) -> tuple[str, ...]:
    if current.seconds <= budget_s:
        return ()
    return (f"--budget {budget_s:g} s: the smallest plan is estimated at "
            f"{current.seconds:.0f} s, {current.seconds - budget_s:.0f} s over; it runs "
            "as it is (choose fewer --cases to go under)",)
