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
