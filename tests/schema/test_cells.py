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
