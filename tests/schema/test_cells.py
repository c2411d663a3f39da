"""Text that a spreadsheet would run as a formula is written with an apostrophe, read back
exactly."""

from __future__ import annotations

import pandas as pd
import pytest

from bwprof.schema.cells import (
    frame_from_spreadsheet,
    from_spreadsheet,
    spreadsheet_frame,
    spreadsheet_text,
)

TEXTS = ["=1+1", "+x", "-", "@SUM(A1)", "\t=x", "\r=x", "\n=x", "=cmd|' /C calc'!A0", "'=x",
         "''+y", "'abc", "abc", "", "-inf", "host-1"]


@pytest.mark.parametrize("text", TEXTS)
def test_every_text_comes_back_exactly(text):
    assert from_spreadsheet(spreadsheet_text(text)) == text


@pytest.mark.parametrize("text", ["=1+1", "+x", "-", "@SUM(A1)", "\t=x", "'=x", "-inf"])
def test_formula_starts_get_an_apostrophe(text):
    written = spreadsheet_text(text)
    assert isinstance(written, str)
    assert written.startswith("'") and written[1:] == text


@pytest.mark.parametrize("value", ["-1.5", "+3e9", "-.5", "abc", "host-1", 3, -2.0, None])
def test_numbers_and_plain_text_are_left_alone(value):
    assert spreadsheet_text(value) == value


def test_a_frame_round_trips_through_csv(tmp_path):
    frame = pd.DataFrame({"host": ["=evil", "ok", "-"], "value": [-1.5, 2.0, 3.0],
                          "note": ["+1 is fine", None, "@x"]})
    path = tmp_path / "t.csv"
    spreadsheet_frame(frame).to_csv(path, index=False)
    text = path.read_text()
    assert "'=evil" in text and "'+1 is fine" in text and "-1.5" in text
    back = frame_from_spreadsheet(pd.read_csv(path))
    pd.testing.assert_frame_equal(back, frame)


@pytest.mark.parametrize("host", ["\r=cmd|' /C calc'!A0", "box\r=1+1", "a\r\n@x", "\n+y"])
def test_a_carriage_return_in_a_cell_does_not_end_the_row(tmp_path, host):
    """pandas quotes a line feed but not a bare carriage return, where Excel and csv
    readers end the row: the text after it would open a row of its own, unescaped."""
    import csv

    frame = pd.DataFrame({"host": [host], "value": [-1.5]})
    path = tmp_path / "t.csv"
    spreadsheet_frame(frame).to_csv(path, index=False)
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert len(rows) == 2 and rows[1][1] == "-1.5"
    assert not rows[1][0].startswith(("=", "+", "-", "@", "\t", "\r", "\n"))
    back = frame_from_spreadsheet(pd.read_csv(path))
    assert back["host"][0] == host.replace("\r\n", "\n").replace("\r", "\n")
    assert back["value"][0] == -1.5


def _cell_by_cell(frame: pd.DataFrame) -> pd.DataFrame:
    """The rule applied to every text cell one by one: what `spreadsheet_frame` must equal."""
    from bwprof.schema.cells import _frame_cell

    safe = frame.copy()
    for position, dtype in enumerate(frame.dtypes):
        if pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype):
            safe.isetitem(position, frame.iloc[:, position].map(_frame_cell))
    return safe


def _cells(column: pd.Series) -> list[object]:
    """The column's cells, a missing one as None (None or NaN alike: the CSV cell is empty)."""
    return [None if pd.isna(value) else value for value in column.tolist()]


PIECES = ["", "'", "''", "=", "+", "-", "@", "\t", "\r", "\n", "\r\n", "1", ".5", "e9", "a",
          " ", ",", '"', "x=1", "-1.5", "+3e9", "-inf", "host-1"]


@pytest.mark.parametrize("dtype", [object, "string", "str"])
def test_a_column_at_a_time_is_the_rule_cell_by_cell(dtype):
    """Every text cell a spreadsheet could run, or whose carriage return would end the row,
    is found however the column is stored; every other cell, and every other column, is
    left as it was."""
    import itertools
    import random

    texts = ["".join(parts) for parts in itertools.product(PIECES, repeat=2)]
    texts += ["".join(random.Random(seed).choices(PIECES, k=4)) for seed in range(2000)]
    frame = pd.DataFrame({"text": pd.Series(texts, dtype=dtype),
                          "number": [float(i) for i in range(len(texts))]})
    frame.loc[::7, "text"] = None
    # Without a carriage return anywhere, an Arrow column is read at its bytes (`textbytes`).
    plain = [text for text in texts if "\r" not in text]
    no_cr = pd.DataFrame({"text": pd.Series(plain, dtype=dtype).iloc[1:]})  # a view, offset
    no_cr.loc[no_cr.index[::5], "text"] = None
    mixed = pd.DataFrame({"a": pd.Series(["=x", 3, None, -1.5, "ok", b"=raw"], dtype=object),
                          "b": pd.Series([1.5, 2.0, None, 3.0, 4.0, 5.0], dtype=object),
                          "a2": ["\r=1", "-", "'-2", "+3e9", "'@", "\n"]})
    mixed.columns = ["a", "b", "a"]  # repeated names are columns too
    for table in (frame, mixed, no_cr):
        expected = _cell_by_cell(table)
        got = spreadsheet_frame(table)
        assert got.to_csv(index=False) == expected.to_csv(index=False)
        for position in range(table.shape[1]):
            assert _cells(got.iloc[:, position]) == _cells(expected.iloc[:, position])


def test_a_frame_with_nothing_to_escape_is_not_copied():
    frame = pd.DataFrame({"host": ["a", "b"], "value": [1.0, -2.0]})
    assert spreadsheet_frame(frame) is frame
