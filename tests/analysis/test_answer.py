"""The answer first: one overall verdict, the worst path named, bwprof's own errors apart."""

from __future__ import annotations

from bwprof.analysis.answer import answer
from bwprof.analysis.run import Run
from bwprof.saved import load
from tests.conftest import DATA


def _with_hbm_at(share: float) -> Run:
    """The stored H200 run with its hbm_triad figures scaled by `share`."""
    run = load(DATA / "h200-quick")
    results = run.results.copy()
    hbm = results["case"] == "hbm_triad"
    for column in ("value_median", "value_best", "gbps_median", "gbps_best"):
        results.loc[hbm, column] = results.loc[hbm, column] * share
    return Run(run.path, results, run.meta)


def test_a_healthy_h200_passes_and_says_to_keep_it():
    found = answer(load(DATA / "h200-quick"))
    assert found.verdict == "PASS" and found.worst is None
    assert found.line().startswith("verdict: PASS (") and "pass" in found.line()
    assert "bwprof history add reports/x" in found.next_step("reports/x")


def test_a_slow_hbm_fails_and_is_named_first():
    found = answer(_with_hbm_at(0.5))
    assert found.verdict == "FAIL" and found.worst is not None
    assert found.worst.case == "hbm_triad"
    assert found.line().startswith("verdict: FAIL — worst: HBM gpu0 (hbm_triad): ")
    assert "bwprof accept reports/x" in found.next_step("reports/x")


def test_a_simulated_run_is_never_judged():
    found = answer(load(DATA / "sim-a"))
    assert found.simulated and "simulated" in found.line()
    assert "without --simulate" in found.next_step(None)


def test_the_next_step_names_the_page_only_where_one_was_written():
    found = answer(load(DATA / "h200-quick"))
    assert "report.html" not in found.next_step("reports/x")
    assert found.next_step("reports/x", "reports/x/report.html").endswith(
        "; the page: reports/x/report.html")
