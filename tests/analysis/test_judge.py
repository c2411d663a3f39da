"""The verdict line: what failed and why, in the words a reviewer acts on."""

from __future__ import annotations

from bwprof.analysis.bands import Band
from bwprof.analysis.judge import Check, pct_of_band, verdict_line


def check(path: str, case: str, verdict: str, value: float, warn: float, reason: str,
          device: str = "gpu0") -> Check:
    return Check(box="vm", run_dir="r", device=device, gpu_model="NVIDIA H200", part="H200",
                 path=path, case=case, verdict=verdict, reason=reason, value=value,
                 warn=warn, fail=warn * 0.9, expected=warn / 0.95, reference=warn / 0.8,
                 pct_of_band=100 * value * 0.95 / warn, pct_of_peak=80 * value / warn)


def test_cases_of_one_path_are_told_apart():
    """Four overlap cases warning read as one path four times over."""
    line = verdict_line("vm", [
        check("overlap", "overlap_h2d_compute", "WARN", 0.99, 1.0, "0.990 (median)"),
        check("overlap", "overlap_bidir_compute", "WARN", 0.95, 1.0, "0.950 (median)")])
    assert "WARN overlap_h2d_compute gpu0 " in line
    assert "WARN overlap_bidir_compute gpu0 " in line


def test_a_fault_that_fails_a_passing_figure_is_named_not_its_percentage():
    fault = "link trained at Gen5 x8 under load, below its Gen5 x16 maximum"
    line = verdict_line("vm", [
        check("h2d", "h2d_pinned", "FAIL", 55.5, 53.1, f"{fault}; 55.5 GB/s (median)"),
        check("hbm", "hbm_triad", "FAIL", 3000, 3942, "3000 GB/s (median); below 3528")])
    assert f"FAIL H2D gpu0 {fault}" in line
    assert "FAIL HBM gpu0 72% of band" in line  # a figure's own failure keeps its figure


# -- bwprof's own errors, and a busy host --------------------------------------------------

OVERFLOW = ("bwprof error in lat_host (2 GiB), and 1 more row(s): OverflowError: int too big "
            "to convert; the box was not judged on it")


def error_check(case: str = "lat_host", reason: str = OVERFLOW) -> Check:
    return Check(box="vm", run_dir="r", device="cpu", gpu_model="", part="", path="latency",
                 case=case, verdict="ERROR", reason=reason)


def test_bwprofs_own_error_is_named_in_the_line_and_never_decides_the_boxs_verdict():
    """The issue's run: lat_host raised; HBM passed. The box passes, and the line says the
    error was bwprof's and what the box was not judged on."""
    line = verdict_line("vm", [
        check("hbm", "hbm_triad", "PASS", 4300, 3942, "4300 GB/s (median)"), error_check()])
    assert line.startswith("vm: PASS — 2 checks: 1 pass, 1 error")
    assert line.endswith("; bwprof error in lat_host: OverflowError: int too big to convert; "
                         "the box was not judged on it")
    assert verdict_line("vm", [error_check()]).startswith("vm: CANNOT JUDGE — 1 checks: 1 error")
    several = verdict_line("vm", [error_check(), error_check("lat_host_loaded")])
    assert several.endswith("bwprof error in lat_host, lat_host_loaded: OverflowError: int too "
                            "big to convert; the box was not judged on them")


def test_the_error_clause_survives_a_long_line_whose_failures_are_cut():
    """Many failures fill the 160 columns: they are cut, the error is still said."""
    failing = [check("hbm", "hbm_triad", "FAIL", 3000, 3942, "3000 GB/s (median); below",
                     device=f"gpu{i}") for i in range(8)]
    long_error = error_check(reason="bwprof error in lat_host: OverflowError: " + "x" * 200
                             + "; the box was not judged on it")
    line = verdict_line("vm", [*failing, long_error])
    assert len(line) <= 160 and line.startswith("vm: FAIL")
    assert "… (--json); bwprof error in lat_host: OverflowError: xxx" in line
    assert line.endswith("…; the box was not judged on it")


def test_a_path_not_judged_because_the_host_was_busy_says_so():
    busy = Check(box="vm", run_dir="r", device="cpu", gpu_model="", part="", path="ddr",
                 case="ddr_triad", verdict="CANNOT_JUDGE", busy=True,
                 reason="busy: other processes took 63% of the measuring cores' time ...")
    line = verdict_line("vm", [check("hbm", "hbm_triad", "PASS", 4300, 3942, "ok"), busy])
    assert line == "vm: PASS — 2 checks: 1 pass, 1 cannot judge (DDR busy)"


# -- what a failing figure's words say (issue 35) ------------------------------------------

def spec_check(verdict: str, value: float, unit: str = "GB/s") -> Check:
    """H200 HBM against a spec's FAIL line at 95% of its 4800 peak: above the 4150 a healthy
    part reaches (BabelStream's Triad), so a failing figure is still over 100% of band."""
    return Check(box="vm", run_dir="r", device="gpu0", gpu_model="NVIDIA H200", part="H200",
                 path="hbm", case="hbm_triad", verdict=verdict, reason="", value=value,
                 unit=unit, reference=4800, expected=4150, warn=4560, fail=4560,
                 pct_of_band=100 * value / 4150, pct_of_peak=100 * value / 4800)


# Catches: "FAIL HBM gpu0 104% of band": a % of band above 100 beside a FAIL.
def test_a_spec_line_above_the_healthy_figure_is_named_not_a_pct_of_band_over_100():
    line = verdict_line("vm", [spec_check("FAIL", 4302)])
    assert "% of band" not in line
    assert "FAIL HBM gpu0 4302 GB/s, below the FAIL line at 4560 GB/s (95% of peak)" in line


def test_a_latency_names_the_line_it_rose_above():
    lat = Check(box="vm", run_dir="r", device="cpu", gpu_model="", part="", path="latency",
                case="lat_host", verdict="FAIL", reason="900 ns (median); above 200 ns",
                value=900, unit="ns", expected=130, warn=130, fail=200,
                higher_is_better=False)
    line = verdict_line("vm", [lat])
    assert "FAIL lat_host cpu 900 ns, above the FAIL line at 200 ns" in line


# Catches: `%band` 11.3 on a latency row (expected over the figure: a latency 9x its line
# read as 11% of band): a lower-is-better figure has no % of band.
def test_a_latency_has_no_pct_of_band_and_a_rate_has_the_expected_figures():
    ceiling = Band("latency", "ns", 100.0, 100.0, 150.0, "spec file", None, False)
    assert pct_of_band(ceiling, 885.0) is None
    rate = Band("hbm", "GB/s", 4150.0, 3942.5, 3527.5, "test", 4800.0)
    assert pct_of_band(rate, 4150.0) == 100.0
    assert pct_of_band(rate, 2075.0) == 50.0


# -- a fleet's boxes: each judged on its own rows ---------------------------------------------

def _fleet(names: list[str]):
    """The stored H200 run's rows as a fleet run of `names` (devices `name:gpu0`, as the
    merge names them), the last box's HBM figure halved."""
    from dataclasses import replace
    from pathlib import Path

    import pandas as pd

    import bwprof
    from bwprof.schema.meta import NodeMeta

    base = bwprof.load(Path(__file__).resolve().parents[1] / "data" / "h200-quick")
    parts = []
    for name in names:
        part = base.results.copy()
        part["device"] = name + ":" + part["device"].astype(str)
        parts.append(part)
    results = pd.concat(parts, ignore_index=True)
    last = results.index[-len(base.results):]
    hbm = results.index.isin(last) & (results["case"] == "hbm_triad")
    results.loc[hbm, "value_median"] = results.loc[hbm, "value_median"] / 2
    node = NodeMeta(host=base.meta.host, gpus=base.meta.gpus, telemetry=base.meta.telemetry)
    meta = replace(base.meta, nodes={name: node for name in names})
    return replace(base, results=results, meta=meta)


def test_each_box_of_a_fleet_is_judged_on_its_own_rows_as_when_it_filtered_them():
    """The rows are split by box in one pass (`_rows_by_prefix`); the checks are those each
    box got by filtering the whole table for its prefix ('n1:' is not 'n10:'), including
    for names with a ':' of their own, which the split leaves to the filter."""
    from bwprof.analysis import judge
    from bwprof.analysis.spec import Spec
    from bwprof.analysis.summary import row_records

    for names in (["n1", "n10", "n2"], ["a:1", "a", "a:10"]):
        run = _fleet(names)
        checks = judge.judge_run(run, Spec())
        by_filter = []
        for box in judge._boxes(run):
            one = judge._Judge(run, box, Spec())
            by_filter += one.host_checks()
            for gpu in box.gpus.devices:
                by_filter += one.gpu_checks(gpu)
        assert checks == by_filter
        hbm = [c.verdict for c in checks if c.path == "hbm"]
        assert hbm[:-1] == ["PASS"] * (len(names) - 1) and hbm[-1] == "FAIL"
    records = row_records(_fleet(["n1", "n10"]).results, judge._READ)
    split = judge._rows_by_prefix(records, judge._boxes(_fleet(["n1"])))
    assert split is not None and set(split) == {"n1:", "n10:"}
    assert all(row["device"].startswith(prefix) for prefix, rows in split.items() for row in rows)
    assert sum(map(len, split.values())) == len(records)


# Catches: a fleet's judging that works out each GPU's spec section and bands again (a
# regular-expression search per part, an override merge, a band's source formatted), the
# cost that grew with the fleet's GPUs (issue 36).
def test_a_fleets_models_are_looked_up_once_not_once_per_gpu(monkeypatch):
    from bwprof.analysis import judge
    from bwprof.analysis.spec import Spec

    calls: dict[str, int] = {"model_key": 0, "override": 0}
    for name in calls:
        original = getattr(Spec, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Spec, name, counted)
    names = [f"n{i}" for i in range(12)]
    checks = judge.judge_run(_fleet(names), Spec())
    assert len(checks) > 12 * 8  # every box judged
    assert calls["model_key"] <= 1  # one model's name
    assert calls["override"] <= len(judge.gpu_paths()) + 2  # each path once (p2p, overlap)


# -- rows no check reads: left out before any row becomes a dict ----------------------------

def _variants():
    """The stored H200 run, and versions of it whose smaller sizes matter to a check: a
    link that trained low on a small transfer only (the link check reads every size), a
    figure row without a size beside the largest size, which raised (`_largest_size` reads
    the size-less one as larger), a median no number (`best_of` reads it in place), a tie
    at the largest size, a simulated and a cache-resident row at the largest size, rows
    that raised or were invalid beside the figure."""
    from dataclasses import replace
    from pathlib import Path

    import bwprof

    base = bwprof.load(Path(__file__).resolve().parents[1] / "data" / "h200-quick")
    rows = base.results

    def changed(mask, **values):
        frame = rows.copy()
        for column, value in values.items():
            frame.loc[mask, column] = value
        return replace(base, results=frame)

    h2d, d2d = rows["case"] == "h2d_pinned", rows["case"] == "d2d_copy"
    small = rows["size_bytes"] == 65536
    largest = rows["size_bytes"] == rows.loc[h2d, "size_bytes"].max()  # every sweep's
    yield "as stored", base
    yield "low link on a small size", changed(h2d & small, pcie_gen_min=3.0)
    yield "low width on a small size", changed(
        (rows["case"] == "bidir_pinned") & small, pcie_width_min=4.0, telemetry_samples=2.0)
    no_size = changed(h2d & small, size_bytes=None)
    frame = no_size.results
    frame.loc[h2d & largest, ["status", "note"]] = ["error", "E: x"]
    yield "a figure without a size and an error at the largest", no_size
    yield "an infinite median", changed(d2d & ~largest, value_median=float("inf"))
    top = int(rows.loc[h2d, "size_bytes"].max())
    text = changed(h2d & ~small, size_bytes=top)  # three rows at the largest size
    frame = text.results
    frame["value_median"] = frame["value_median"].astype(object)
    frame.loc[h2d & (rows["size_bytes"] == 1048576), "value_median"] = 50.0
    frame.loc[h2d & (rows["size_bytes"] == 16777216), "value_median"] = "nan"
    yield "a median that is no number between two", text
    tie = changed(h2d & (rows["size_bytes"] == 16777216), size_bytes=top,
                  value_median=float(rows.loc[h2d & largest, "value_median"].iloc[0]))
    yield "a tie at the largest size", tie
    yield "simulated at the largest size", changed(h2d & largest, flags="simulated")
    yield "invalid on a small size", changed(h2d & small, status="invalid", note="bad")
    yield "raised on a small size", changed(h2d & small, status="error", note="E: x")
    yield "raised at the largest size", changed(h2d & largest, status="error", note="E: x")
    yield "a cache's transfer trained low", changed(
        h2d & small, flags="in_cache", pcie_gen_min=3.0, telemetry_samples=2.0)
    yield "cache-resident at the largest size", changed(d2d & largest, flags="in_cache")


# Catches: a row left out that a check reads (the link check's telemetry of a small
# transfer, a size-less figure `_unusable` holds an error against, a tie's first row),
# which changed a verdict where the golden runs have no such rows (issue 36).
def test_rows_left_out_before_judging_change_no_check(monkeypatch):
    import numpy as np

    from bwprof.analysis import judge
    from bwprof.analysis.spec import Spec

    dropped = {}
    for name, run in _variants():
        pruned = judge.judge_run(run, Spec())
        unread = judge._unread_figure_rows
        dropped[name] = int(unread(run.results, np.zeros(len(run.results), dtype=bool)).sum())
        with monkeypatch.context() as patch:
            patch.setattr(judge, "_unread_figure_rows",
                          lambda columns, *_: np.zeros(len(columns), dtype=bool))
            whole = judge.judge_run(run, Spec())
        assert pruned == whole, name
    assert dropped["as stored"] >= 12  # the smaller sizes of each transfer sweep
    assert dropped["low link on a small size"] < dropped["as stored"]
    assert any("link trained at Gen3" in c.reason for c in
               judge.judge_run(dict(_variants())["low link on a small size"], Spec()))
