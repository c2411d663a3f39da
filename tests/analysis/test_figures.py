"""One figure and one peak per path, whatever the output: the rule each path declares
(`bwprof.casespec.PATHS`) picks it (`bwprof.analysis.figures`), and `report`, its HTML page,
`accept`, `compare` and `history`/`trend` all show that one on every stored run folder."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bwprof import saved
from bwprof.analysis import figures
from bwprof.analysis.compare import compare_runs
from bwprof.analysis.judge import judge_run
from bwprof.analysis.spec import Spec
from bwprof.analysis.summary import build_summary
from bwprof.casespec import PATHS, judged_paths, path_of, summary_paths
from bwprof.saved import load
from bwprof.store.history import refusal
from tests.conftest import DATA

FOLDERS = sorted(p.name for p in DATA.iterdir() if (p / "results.csv").exists())


def _row(size: int, median: float, best: float, status: str = "ok",
         flags: str = "") -> dict[str, object]:
    return {"size_bytes": size, "value_median": median, "value_best": best,
            "status": status, "flags": flags}


def test_a_path_is_the_best_median_at_the_largest_size_beyond_the_cache():
    rows = [_row(1 << 20, 900.0, 990.0, flags="in_cache"),  # a cache's: never the figure
            _row(1 << 28, 80.0, 99.0),                      # the best best, a worse median
            _row(1 << 28, 82.0, 84.0),                      # the figure
            _row(1 << 29, 300.0, 300.0, status="invalid"),  # not ok: never the figure
            _row(1 << 27, 95.0, 96.0)]                      # smaller
    picked = figures.pick(rows)
    assert picked is rows[2] and figures.figure(picked) == 82.0
    assert figures.pick(rows, higher_is_better=False) is rows[1]
    assert figures.pick(rows[:1]) is None and figures.pick([rows[3]]) is None


def test_each_path_is_declared_once_with_its_headline_first():
    keys = [p.key for p in PATHS]
    assert len(keys) == len(set(keys))
    cases = [c for p in PATHS for c in p.cases]
    assert len(cases) == len(set(cases))  # no case gives two paths' figures
    assert path_of("hbm").headline == "hbm_triad" and path_of("h2d").headline == "h2d_pinned"
    assert summary_paths()[:4] == ("ddr", "hbm", "h2d", "d2h")
    assert "bidir" in judged_paths() and "compute" not in judged_paths()


def _judged(run) -> list:
    """accept's bandwidth checks of the paths the summary shows too (`bidir` has no summary
    row)."""
    return [c for c in judge_run(run, Spec()) if c.value is not None and c.unit != "ratio"
            and path_of(c.path).section]


@pytest.mark.parametrize("name", FOLDERS)
def test_report_accept_compare_and_history_show_one_figure_and_one_peak(name, tmp_path):
    run = load(DATA / name)
    summary = build_summary(run.results)
    figured = summary[summary["value"].notna()]
    assert len(figured)
    # accept: the same figure and the same peak (and so the same % of peak) as the summary
    for check in _judged(run):
        mine = figured[(figured["case"] == check.case)
                       & (figured["device"].astype(str).str.endswith(check.device))]
        assert len(mine) == 1, (name, check.case, check.device)
        row = mine.iloc[0]
        assert check.value == pytest.approx(row["value"], rel=1e-12), (name, check.case)
        if not pd.isna(row["peak_value"]):
            assert check.peak == pytest.approx(row["peak_value"], rel=1e-12)
            assert check.peak_source == row["peak_source"] != ""
            assert check.pct_of_peak == pytest.approx(row["pct_of_peak"], rel=1e-9)
    # compare: each summary figure as the summary gives it
    rows = compare_runs([run, run]).rows
    shown = rows[(rows["scope"] == "summary") & (rows["run"] == "A") & rows["value"].notna()]
    for _, row in figured.iterrows():
        theirs = shown[(shown["case"] == row["case"]) & (shown["device"] == row["device"])
                       & (shown["path"] == row["path"])]
        assert len(theirs) >= 1, (name, row["case"], row["device"])
        assert math.isclose(theirs["value"].iloc[0], row["value"], rel_tol=1e-12)
    # history and trend: the point trend follows is the summary's figure (the store keeps
    # finished measurements only: a simulated or unfinished folder is refused, and said)
    if refusal(run) is not None:
        return
    saved.history_add([DATA / name], tmp_path / "store")
    followed = saved.trend(tmp_path / "store", plots=False).rows
    stored = figured[figured["status"] == "ok"]
    assert len(stored)
    for _, row in stored.iterrows():
        point = followed[(followed["case"] == row["case"])
                         & (followed["device"] == row["device"])]
        assert len(point) == 1, (name, row["case"], row["device"])
        assert math.isclose(point["figure"].iloc[0], row["value"], rel_tol=1e-12), (
            name, row["case"])


def test_history_and_the_html_page_carry_the_summary_figure(tmp_path):
    from datetime import datetime, timezone

    from bwprof.render.html import render_html, verdict_rows
    from bwprof.store.history import prepare_run

    run = load(DATA / "h200-quick")
    summary = build_summary(run.results)
    hbm = summary[summary["case"] == "hbm_triad"].iloc[0]
    stored = prepare_run(run, datetime.now(timezone.utc)).rows
    assert stored.loc[stored["case"] == "hbm_triad", "value"].item() == hbm["value"]
    page = render_html(run, verdicts=verdict_rows(run))
    (check,) = [c for c in judge_run(run, Spec()) if c.case == "hbm_triad"]
    assert f"{hbm['value']:.4g} GB/s (median)" in page  # the verdict table's figure
    assert f">{hbm['value']:.0f}<" in page              # the summary table's
    # one peak: the summary's, named with its source; the band's datasheet figure beside it
    assert f"{check.pct_of_peak:.1f}% of the {hbm['peak_value']:.0f} GB/s peak" in page
    assert hbm["peak_source"] == check.peak_source == "NVML: 2 × max memory clock × bus width"
    # ... and the report says which peak it used, once per path
    assert ("peaks (% of peak): HBM 4814 GB/s (NVML: 2 × max memory clock × bus width); "
            "host→device 63.0 GB/s (PCIe") in page


def test_latency_is_one_figure_in_the_summary_and_in_accept(tmp_path):
    """The stored folders hold no latency rows: a written run of every latency case (each
    row's best 2% under its median) stands in for them."""
    from tests.analysis import latency_rows as lat

    run = load(lat.write_run(tmp_path / "run", lat.every_case()))
    summary = build_summary(run.results)
    checks = [c for c in judge_run(run, Spec()) if c.path == "latency" and c.value is not None]
    assert {c.case for c in checks} >= {"lat_host", "lat_gpu"}
    matched = 0
    for check in checks:
        mine = summary[(summary["case"] == check.case) & (summary["device"] == check.device)]
        if len(mine) == 1:  # pair and per-direction cases are shown as their slowest
            assert check.value == pytest.approx(mine["value"].item(), rel=1e-12), check.case
            matched += 1
    assert matched >= 3  # lat_host and each GPU's lat_gpu
