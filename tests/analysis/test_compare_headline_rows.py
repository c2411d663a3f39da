"""`Comparison.scope_rows("summary")` (issue 36): the headline figures of a comparison made
of the runs' summaries alone, exactly `rows[rows["scope"] == "summary"]` (cells, dtypes,
order), so the terminal of a fleet's compare never makes a row per measured row of each
run; where the summaries alone cannot say a column's type, made from every row instead."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from bwprof import saved
from bwprof.analysis.compare import compare_runs
from bwprof.render.comparison import print_comparison
from tests.analysis.compare_cases import DATA
from tests.render.test_fleet_digest import make_fleet

PAIRS = [("sim-a", "sim-b-slower"), ("sim-a", "sim-c-other-box"), ("host-ddr", "host-ddr-v2"),
         ("h200-quick", "h200-quick"), ("sim-a", "h200-quick"), ("h200-quick", "host-ddr")]


def _headline_both_ways(a: Path, b: Path, by: str) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """The headline rows made of the summaries alone (None: not made so), and as every row's."""
    runs = [saved._load(a, "RUN_DIRS"), saved._load(b, "RUN_DIRS")]
    made = compare_runs(runs, by=by).scope_rows("summary")
    lazy = compare_runs(runs, by=by)
    alone = lazy._alignment.summary_rows() if lazy._alignment is not None else None
    rows = compare_runs(runs, by=by).rows
    whole = rows[(rows["scope"] == "summary").to_numpy(dtype=bool)]
    pd.testing.assert_frame_equal(made.reset_index(drop=True), whole.reset_index(drop=True),
                                  check_exact=True)
    return alone, whole


def _same(alone: pd.DataFrame | None, whole: pd.DataFrame) -> None:
    assert alone is not None
    pd.testing.assert_frame_equal(alone, whole.reset_index(drop=True), check_exact=True)
    assert list(alone.dtypes) == list(whole.dtypes)


@pytest.mark.parametrize("by", ["node", "model"])
@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_headline_rows_of_the_summaries_alone_are_the_rows_summary_scope(a, b, by):
    _same(*_headline_both_ways(DATA / a, DATA / b, by))


def _with_page_sizes(folder: Path, rows: int) -> Path:
    """A copy of h200-quick whose first `rows` ok rows ran on 4 KiB pages (a page_bytes
    column, as a latency chase's rows have)."""
    shutil.copytree(DATA / "h200-quick", folder)
    path = folder / "results.csv"
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields = [*(reader.fieldnames or []), "page_bytes"]
        records = list(reader)
    ok = [record for record in records if record["status"] == "ok"]
    for record in records:
        record["page_bytes"] = "4096" if any(record is mine for mine in ok[:rows]) else ""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(records)
    return folder


@pytest.mark.parametrize("by", ["node", "model"])
def test_page_bytes_of_headline_rows_are_typed_as_the_whole_columns(tmp_path, by):
    """No summary figure has a page size; where a row figure has one, the whole column is
    float64 (NaN on the headline rows), not the object column of Nones they alone infer."""
    paged = _with_page_sizes(tmp_path / "paged", 3)
    alone, whole = _headline_both_ways(DATA / "h200-quick", paged, by)
    assert whole["page_bytes"].dtype == "float64"
    _same(alone, whole)
    alone, whole = _headline_both_ways(DATA / "h200-quick", DATA / "sim-a", by)
    assert whole["page_bytes"].dtype == object
    _same(alone, whole)


def test_a_text_column_the_rows_lack_as_text_makes_the_headline_rows_of_every_row(tmp_path):
    runs = [saved._load(DATA / "sim-a", "RUN_DIRS"), saved._load(DATA / "sim-b-slower",
                                                                 "RUN_DIRS")]
    runs[1].results = runs[1].results.assign(memory=runs[1].results["memory"].astype(object))
    comparison = compare_runs(runs)
    assert comparison._alignment is not None
    assert comparison._alignment.summary_rows() is None  # cannot say: made of every row
    headline = comparison.scope_rows("summary")
    assert comparison._rows is not None
    rows = comparison.rows
    pd.testing.assert_frame_equal(headline, rows[(rows["scope"] == "summary").to_numpy()])


def test_a_fleets_terminal_compare_makes_no_row_per_measured_row(tmp_path):
    a = make_fleet(tmp_path / "a", [1.0] * 21)
    b = make_fleet(tmp_path / "b", [0.98] * 21)
    comparison = compare_runs([saved._load(a, "RUN_DIRS"), saved._load(b, "RUN_DIRS")])
    console = Console(record=True, width=200)
    print_comparison(console, comparison, warn=False)
    comparison.regressions(5.0)
    assert comparison._rows is None  # only the headline figures were made
    text = console.export_text()
    assert "fleet digest" in text
    again = compare_runs([saved._load(a, "RUN_DIRS"), saved._load(b, "RUN_DIRS")])
    again.rows  # noqa: B018 - every row made first: the same terminal
    console = Console(record=True, width=200)
    print_comparison(console, again, warn=False)
    assert console.export_text() == text


def test_figure_keys_are_numbered_as_groupby_numbers_them():
    """`_group_ids` (codes of each key column combined) against groupby(...).ngroup() on
    stacked figures, with missing cells in text and whole-number key columns."""
    from bwprof.analysis.compare import KEY_COLUMNS, _figures, _group_ids, by_model

    frames = []
    for name in ("h200-quick", "sim-a", "host-ddr", "sim-c-other-box"):
        run = saved._load(DATA / name, "RUN_DIRS")
        frames += [_figures(run, run.summary), by_model(_figures(run, run.summary))]
    stacked = pd.concat(frames, ignore_index=True)
    holed = stacked.copy()
    holed.loc[::7, "device"] = None
    holed.loc[::5, "size_bytes"] = pd.NA
    holed.loc[::3, "direction"] = None
    for figures in (stacked, holed):
        expected = figures.groupby(list(KEY_COLUMNS), sort=False, dropna=False).ngroup()
        assert _group_ids(figures).tolist() == expected.tolist()
    assert _group_ids(stacked.iloc[:0]).tolist() == []


@pytest.mark.parametrize("paged", [False, True])
def test_digest_keys_are_numbered_as_groupby_numbers_them(tmp_path, paged):
    """`_key_ids` on the typed comparison rows (page_bytes None or NaN, text NaN)."""
    from bwprof.analysis.compare import DIGEST_KEYS, _key_ids

    later = _with_page_sizes(tmp_path / "paged", 3) if paged else DATA / "sim-a"
    for by in ("node", "model"):
        rows = compare_runs([saved._load(DATA / "h200-quick", "RUN_DIRS"),
                             saved._load(later, "RUN_DIRS")], by=by).rows
        holed = rows.copy()
        holed.loc[::4, "direction"] = None
        for frame in (rows, holed, rows[~rows["baseline"]]):
            names = ["run", *DIGEST_KEYS]
            expected = frame.groupby(names, sort=False, dropna=False).ngroup()
            assert _key_ids(frame, names).tolist() == expected.tolist()
