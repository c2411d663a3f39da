"""The overhead benchmark's two modes, with bwprof.run stood in: where NVML works "on" must
be a real run's telemetry (what users pay), without it the sampler thread with a stand-in."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pandas as pd
import pytest

import bwprof
from benchmarks import telemetry_overhead
from bwprof.gpu import runtime
from bwprof.telemetry import nvml


def _fake_run(calls):
    def run(**options):
        calls.append(options)
        rows = [{"case": "ddr_triad", "status": "ok", "size_bytes": 1 << 20, "gbps_median": 10.0},
                {"case": "h2d_pinned", "status": "ok", "size_bytes": 1 << 28, "gbps_median": 50.0}]
        return SimpleNamespace(results=pd.DataFrame(rows))
    return run


@pytest.mark.parametrize("real", [True, False], ids=["nvml", "no-driver"])
def test_on_is_the_real_telemetry_where_nvml_works(monkeypatch, capsys, real):
    calls: list[dict] = []
    samplers: list[object] = []

    class RecordingSampler:
        def __init__(self, read, interval_s):
            samplers.append(read)

        def start(self):
            pass

        def stop(self):
            pass

    monkeypatch.setattr(bwprof, "run", _fake_run(calls))
    monkeypatch.setattr(nvml, "available", lambda: real)
    monkeypatch.setattr(runtime, "probe", lambda: SimpleNamespace(count=1 if real else 0))
    monkeypatch.setattr("bwprof.telemetry.sampler.Sampler", RecordingSampler)
    monkeypatch.setattr(sys, "argv", ["telemetry_overhead.py", "--rounds", "2"])

    assert telemetry_overhead.main() == 0  # the same figure on and off: within the bar
    telemetry = [call["telemetry"] for call in calls]
    assert telemetry == ([False, True, True, False] if real else [False] * 4)
    assert len(samplers) == (0 if real else 2)  # the stand-in only without a driver
    assert all(call["cases"] == ("ddr_triad,h2d_pinned" if real else "ddr_triad")
               for call in calls)
    out = capsys.readouterr().out
    assert ("a real run's telemetry" in out) == real
