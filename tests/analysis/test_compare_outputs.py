"""`compare` gives the same rows, order, texts and JSON as the per-row compare_runs it
replaced (issue 36): expectations captured from it by `tests/analysis/compare_cases.py`
for the stored folders and a pair of damaged figures (zero, -0.0, subnormal, NaN, a CV of
1e155, duplicated, on one side only)."""

import json
from pathlib import Path

import pytest

from tests.analysis.compare_cases import DATA, PAIRS, compact, degenerate_pair, snapshot

EXPECTED = Path(__file__).resolve().parent / "compare_expected"


def _check(name: str, got: dict[str, object]) -> None:
    expected = json.loads((EXPECTED / f"{name}.json").read_text())
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        if key.startswith("rows_"):
            mine = got[key]
            assert isinstance(mine, dict)
            assert mine["dtypes"] == value["dtypes"], key
            assert mine["index"] == value["index"], key
            for column, cells in value["columns"].items():
                assert mine["columns"][column] == cells, (key, column)
        assert got[key] == value, key


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_stored_pairs_compare_as_before(name):
    a, b = PAIRS[name]
    _check(name, compact(snapshot(DATA / a, DATA / b)))


def test_damaged_figures_compare_as_before(tmp_path):
    a, b = degenerate_pair(tmp_path)
    _check("degenerate", compact(snapshot(a, b)))
