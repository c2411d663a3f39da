"""`--budget`: the plan scaled down until its estimate fits, each step saying what it took
and what it saved; a plan that fits is left alone; one that cannot fit runs its smallest
form and says by how much it is over."""

from __future__ import annotations

import re

import pytest

from bwprof import api
from bwprof.budget import MIN_REPEATS
from bwprof.errors import BwprofError
from tests.shapes import shape


def _planned(name, budget, preset="standard", **options):
    return api.plan_run(machine=shape(name), preset=preset, budget_s=budget, **options)


def test_a_plan_over_its_budget_drops_steps_until_it_fits_and_says_which():
    unbounded = _planned("hgx-8xh200", None)
    fitted = _planned("hgx-8xh200", 600)
    assert unbounded.estimate.seconds > 600 >= fitted.estimate.seconds
    assert fitted.plan.budget_s == 600 and fitted.plan.dropped and not fitted.notes
    for step in fitted.plan.dropped:  # each says what went and what it saved
        assert re.search(r"\(-\d+ s\)$", step), step
    assert fitted.estimate.jobs < unbounded.estimate.jobs
    # Every case still runs: a budget thins sweeps, it drops no case.
    assert {w.case.key for w in fitted.estimate.work} == {
        w.case.key for w in unbounded.estimate.work}


def test_a_plan_within_its_budget_is_left_as_it_is():
    fitted = _planned("dev-vm-2core", 3600)
    assert fitted.plan.dropped == () and fitted.notes == []
    assert fitted.estimate.jobs == _planned("dev-vm-2core", None).estimate.jobs


def test_a_budget_nothing_can_meet_runs_the_smallest_plan_and_says_how_far_over():
    fitted = _planned("epyc-2s-128c-8numa", 5)
    assert fitted.plan.repeats == MIN_REPEATS
    (note,) = fitted.notes
    assert note.startswith("--budget 5 s: the smallest plan is estimated at ")
    assert "over; it runs as it is" in note


@pytest.mark.parametrize("budget", [0, -1, 0.5, float("nan"), float("inf"), 1e9])
def test_a_budget_out_of_range_is_one_line(budget):
    with pytest.raises(BwprofError, match=r"^--budget "):
        _planned("dev-vm-2core", budget)


def test_a_fleet_rank_runs_the_steps_its_fleet_agreed_on(tmp_path):
    """In a fleet every rank takes the steps of the rank whose plan costs most (net_p2p's
    jobs must match across ranks); a rank whose own plan fitted follows them all the same."""
    from bwprof.budget import STEPS, _fewer_repeats, _fewer_sizes

    agreed = (STEPS.index(_fewer_sizes), STEPS.index(_fewer_repeats))
    votes = []

    def agree(asked_s, steps):
        votes.append((asked_s, steps))
        return agreed

    share = api.FleetShare(0, None, True, None, "test-run", agree)
    result = api.run(out=tmp_path / "run", cases="ddr_triad", preset="quick", repeats=6,
                     size="4MiB", simulate=True, telemetry=False, plots=False,
                     budget_s=3600, fleet=share)
    ((asked_s, own_steps),) = votes
    assert asked_s > 0 and own_steps == ()  # its own plan fitted: it took no step
    plan = result.meta.plan
    assert plan.transfer_sizes == (2**20, 256 * 2**20)  # quick's 4 sizes, every other
    assert plan.repeats == 3
    assert len(plan.dropped) == 2


def test_fit_records_the_steps_it_took_and_following_them_gives_the_same_plan():
    from bwprof.budget import fit, follow

    machine = shape("epyc-2s-128c-8numa")
    planned = api.plan_run(machine=machine, preset="standard", cases="ddr_triad,lat_host")
    executors = {"host": api.host_executor(machine.host, machine.cpus)}
    budget = planned.estimate.seconds / 3
    fitted = fit(planned.plan, executors, budget, plots=True)
    assert fitted.steps and fitted.asked_s == pytest.approx(planned.estimate.seconds)
    followed = follow(planned.plan, executors, budget, fitted.steps, plots=True)
    assert followed.plan == fitted.plan
    assert followed.estimate.seconds == pytest.approx(fitted.estimate.seconds)
