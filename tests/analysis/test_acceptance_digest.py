"""A fleet's acceptance counted for its digest (issue 36): per path and case, each GPU once
by its verdict, the worst named, the lowest % of band, why the rest could not be judged;
built from checks that name their node ('node12:gpu0'), as a fleet's judge gives them."""

from __future__ import annotations

from bwprof.analysis.acceptance import (
    FLEET_WORST,
    case_verdicts,
    fleet_digest,
    fleet_gpus,
    more_gpus_than,
)
from bwprof.analysis.judge import CANNOT_JUDGE, ERROR, FAIL, PASS, WARN, Check


def check(node: int, verdict: str, path: str = "hbm", case: str = "hbm_triad",
          pct: float | None = 100.0, device: str = "gpu0", reason: str = "") -> Check:
    """One check of `node` ('node3:gpu0' on box 'node3'); a host's where `device` is 'cpu'."""
    return Check(box=f"node{node}", run_dir="run", device=f"node{node}:{device}",
                 gpu_model="" if device == "cpu" else "NVIDIA H200",
                 part="" if device == "cpu" else "H200", path=path, case=case,
                 verdict=verdict, reason=reason or f"{verdict} reason",
                 value=None if pct is None else 40 * pct, unit="GB/s", pct_of_band=pct)


def test_each_gpu_is_counted_once_by_verdict_and_the_worst_are_named_worst_first():
    checks = [check(n, PASS, pct=100.0 + n / 100) for n in range(30)]
    checks[4] = check(4, WARN, pct=93.0)
    checks[9] = check(9, FAIL, pct=80.0)
    checks[12] = check(12, FAIL, pct=70.0)
    checks[20] = check(20, ERROR, pct=None, reason="bwprof error in hbm_triad: boom")
    checks += [check(3, PASS, pct=99.0)]  # node3 judged twice on the case: counted once
    (hbm,) = case_verdicts(checks)
    assert (hbm.path, hbm.case, hbm.on) == ("hbm", "hbm_triad", "GPUs")
    assert hbm.counts == {FAIL: 2, WARN: 1, PASS: 26, CANNOT_JUDGE: 0, ERROR: 1}
    assert [c.device for c in hbm.worst] == ["node12:gpu0", "node9:gpu0", "node4:gpu0",
                                             "node20:gpu0"]
    assert hbm.bad == 4
    assert hbm.lowest is not None and hbm.lowest.device == "node12:gpu0"
    assert hbm.unjudged is None


def test_a_gpu_with_a_pass_and_a_fail_on_one_case_counts_as_failing():
    (case,) = case_verdicts([check(1, PASS), check(1, FAIL, pct=70.0), check(2, PASS)])
    assert case.counts[FAIL] == 1 and case.counts[PASS] == 1


def test_the_worst_are_at_most_fleet_worst_and_the_rest_are_counted():
    checks = [check(n, FAIL, pct=50.0 + n) for n in range(FLEET_WORST + 7)]
    (case,) = case_verdicts(checks)
    assert len(case.worst) == FLEET_WORST and case.bad == FLEET_WORST + 7
    assert [c.device for c in case.worst] == [f"node{n}:gpu0" for n in range(FLEET_WORST)]


def test_hosts_cases_in_order_and_the_most_common_reason_they_cannot_be_judged():
    checks = []
    for n in range(20):
        checks.append(check(n, CANNOT_JUDGE, "ddr", "ddr_triad", None, "cpu",
                            "no band: no DDR peak" if n != 5 else "no ddr_triad figure"))
        checks.append(check(n, PASS))
    ddr, hbm = case_verdicts(checks)
    assert (ddr.path, ddr.on, hbm.path, hbm.on) == ("ddr", "hosts", "hbm", "GPUs")
    assert ddr.counts[CANNOT_JUDGE] == 20 and ddr.lowest is None
    assert ddr.unjudged == ("no band: no DDR peak", 19, 20)


def test_fleet_gpus_counts_gpus_not_hosts_and_tells_runs_and_boxes_apart():
    checks = [check(n, PASS) for n in range(3)] + [check(0, PASS, device="cpu")]
    assert fleet_gpus(checks) == fleet_digest(checks).gpus == 3
    assert more_gpus_than(checks, 2) and not more_gpus_than(checks, 3)
    bare = [Check(box=f"host{n}", run_dir=run, device="gpu0", gpu_model="H200", part="H200",
                  path="hbm", case="hbm_triad", verdict=PASS, reason="")
            for n in range(2) for run in ("a", "b")]
    assert fleet_gpus(bare) == fleet_digest(bare).gpus == 4  # each box's GPUs named 'gpu0'


def test_each_box_has_the_worst_verdict_of_its_checks_and_the_verdicts_are_told():
    checks = [check(1, PASS), check(1, WARN, "d2d", "d2d_copy"), check(2, PASS),
              check(3, CANNOT_JUDGE, pct=None), check(4, PASS),
              check(4, ERROR, "d2d", "d2d_copy", None)]
    digest = fleet_digest(checks)
    assert digest.boxes == {("run", "node1"): WARN, ("run", "node2"): PASS,
                            ("run", "node3"): CANNOT_JUDGE, ("run", "node4"): PASS}
    assert digest.erred == {("run", "node4")}
    assert digest.told == {PASS: 3, WARN: 1, CANNOT_JUDGE: 1, ERROR: 1}
    assert fleet_digest([]).cases == []
