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

TEXTS = ["=1+1", "+x", "-", "@SUM(A1)", "\t=x", "\r=x", "=cmd|' /C calc'!A0", "'=x", "''+y",
         "'abc", "abc", "", "-inf", "host-1"]


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
