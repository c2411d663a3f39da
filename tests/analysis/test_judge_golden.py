"""The judge's checks, field for field, against those captured before it was made fast
(issue 36): `judge_cases.py` builds runs that reach each branch (zero, NaN and missing
figures and peaks, failed and raised rows, overlap cases without their concurrent row, a
busy host, noisy and cache-resident rows, link faults, NVLinks down, unknown models,
NVLink-C2C, latency, fleets) and the captured checks are in judge_golden.json.gz."""

from __future__ import annotations

import gzip
import json

import pytest

from bwprof.analysis import judge
from bwprof.store.runfolder import RunFolder
from tests.analysis import judge_cases


@pytest.fixture(scope="module")
def golden() -> dict[str, list[str]]:
    with gzip.open(judge_cases.GOLDEN, "rt") as file:
        return json.load(file)


@pytest.fixture(scope="module")
def runs() -> dict[str, RunFolder]:
    return judge_cases.runs()


@pytest.mark.parametrize("spec_name", sorted(judge_cases.specs()))
def test_every_check_is_what_it_was(golden, runs, spec_name):
    spec = judge_cases.specs()[spec_name]
    for run_name, run in runs.items():
        key = f"{run_name}/{spec_name}"
        now = judge_cases.serialised(judge.judge_run(run, spec))
        was = golden[key]
        assert len(now) == len(was), key
        for index, (new, old) in enumerate(zip(now, was, strict=True)):
            assert new == old, f"{key}, check {index}"


def test_the_golden_runs_reach_every_verdict_and_kind_of_reason(golden):
    """The captured checks are worth comparing against: every verdict, and the branches
    named in the module's docstring, are among them."""
    checks = [dict(json.loads(line)) for lines in golden.values() for line in lines]
    assert {c["verdict"] for c in checks} == set(judge.CHECK_VERDICTS)
    reasons = " | ".join(c["reason"] for c in checks)
    for words in ("has no concurrent row", "busy: other processes", "noisy (CV",
                  "is cache-resident", "is simulated", "link trained at", "NVLinks up",
                  "(slowest pair)", "NVLink-C2C both ways", "unknown GPU model",
                  "the PCIe link's maximum is unknown", "bwprof error in", "invalid:",
                  "not measured:", "no band: give lat_", "passes at <=", "over a healthy"):
        assert words in reasons, words
