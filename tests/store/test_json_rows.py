"""`json_rows`, a table kept as its columns until `jsontext` writes it a column at a time
(issue 36: compare --json of 2.3M rows), reads and writes as the list of dicts `json_table`
gives: the same rows, and byte for byte the text `json.dumps(..., indent=2)` gives."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from bwprof.render import jsontext
from bwprof.render.jsontext import json_text
from bwprof.store.formats import JsonRows, _float_texts, json_rows, json_table
from tests.store.test_json_table import _frames


def _columnar_frame() -> pd.DataFrame:
    """Every kind of column `cell_texts` converts without a cell-by-cell walk."""
    python_text = pd.StringDtype("python")
    floats = [1.5, math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e16, 9999999999999998.0,
              1e-4, 9.999e-5, 100.0, 1.7976931348623157e308, 4302.123456789, -2.5e-7]
    count = len(floats)
    return pd.DataFrame({
        "f": floats,
        "f32": np.array([*floats[:-3], 0.1, 3.0, 2.5e-7], dtype=np.float32),
        "i": np.arange(count, dtype=np.int64) - 5,
        "u": np.full(count, 2**64 - 1, dtype=np.uint64),
        "big-endian": np.arange(count, dtype=">i8"),
        "b": [True, False] * (count // 2),
        "I": pd.array([None, 2**62, -1, *range(count - 3)], dtype="Int64"),
        "B": pd.array([True, None, False] * (count // 3) + [None] * (count % 3),
                      dtype="boolean"),
        "s": pd.array(["gpu0", None, "tab\there", "é", "\u2028", "", "\"q\"", "\\"]
                      + ["gpu0"] * (count - 8), dtype="str"),
        "arrow": pd.array(["x", None] * (count // 2), dtype="string[pyarrow]"),
        "p": pd.array(["ok", "bad\udc80", None, "\x00"] + ["ok"] * (count - 4),
                      dtype=python_text),
        "o": pd.Series(["a", None, math.nan, pd.NA, "name\udcff"] + ["a"] * (count - 5),
                       dtype=object),
        "none": pd.Series([None] * count, dtype=object),
        "mixed": pd.Series([1, 1.0, True, "1", None, np.int64(2), 2.5] * (count // 7),
                           dtype=object),
        "\u00e9 key \"q\"": np.arange(count) * 0.1,
    })


def _document(table: object) -> dict[str, object]:
    return {"a": 1, "nested": {"t": [table, 2]}, "rows": table, "z": []}


def _expected(frame: pd.DataFrame, indent: int = 2, ensure_ascii: bool = True) -> str:
    return json.dumps(_document(json_table(frame)), indent=indent, ensure_ascii=ensure_ascii)


# Catches: a row or key written otherwise than dumps writes the list of dicts (a float in
# Arrow's form, '1' for '1.0', an NA that is not null, a key not escaped, a wrong
# indentation at a slice boundary or at a nested level, the first row's comma)
@pytest.mark.parametrize("rows_at_a_time", [1, 3, 8192])
def test_a_columnar_table_is_written_as_dumps_writes_its_rows(monkeypatch, rows_at_a_time):
    monkeypatch.setattr(jsontext, "COLUMN_ROWS", rows_at_a_time)
    frame = _columnar_frame()
    table = json_rows(frame)
    assert table.columnar()
    assert json_text(_document(table)) == _expected(frame)
    assert json_text(_document(table), indent=0) == _expected(frame, indent=0)


def test_the_columnar_writer_is_the_one_taken(monkeypatch):
    """A table of known columns is written by column, never made into the rows' dicts."""
    def refused(self: JsonRows, start: int, stop: int) -> list[dict[str, object]]:
        raise AssertionError("rows made")

    monkeypatch.setattr(JsonRows, "rows", refused)
    frame = _columnar_frame()
    assert json_text({"rows": json_rows(frame)}) == json.dumps(
        {"rows": json_table(frame)}, indent=2)


@pytest.mark.filterwarnings("ignore:DataFrame columns are not unique")
@pytest.mark.parametrize("name", list(_frames()))
def test_every_table_reads_and_writes_as_its_list_of_dicts(monkeypatch, name):
    monkeypatch.setattr(jsontext, "COLUMN_ROWS", 2)
    frame = _frames()[name]
    table, rows = json_rows(frame), json_table(frame)
    assert table == rows and list(table) == rows and len(table) == len(rows)
    assert table[1:4] == rows[1:4] and table[::-2] == rows[::-2]
    if rows:
        assert table[-1] == rows[-1] and table[0] == rows[0]
    with pytest.raises(IndexError):
        table[len(rows)]
    assert json_text(_document(table)) == _expected(frame)
    assert json_text(_document(table), ensure_ascii=False) == _expected(frame,
                                                                        ensure_ascii=False)


def test_without_the_c_encoder_a_table_is_its_rows(monkeypatch):
    monkeypatch.setattr(jsontext, "_MAKE_ENCODER", None)
    frame = _columnar_frame()
    assert json_text(_document(json_rows(frame))) == _expected(frame)


# Catches: Arrow's float text taken where it is not repr's (an exponent, a missing '.0',
# fixed form below 1e-4), as a pyarrow upgrade could change it
def test_float_texts_are_repr_over_random_bit_patterns():
    rng = np.random.default_rng(36)
    patterns = rng.integers(0, 2**64, 200_000, dtype=np.uint64).view(np.float64)
    scaled = rng.standard_normal(100_000) * 10.0 ** rng.integers(-8, 20, 100_000)
    decimals = np.round(rng.standard_normal(50_000) * 1e4, 3)
    values = np.concatenate([patterns, scaled, decimals, decimals / 7, np.arange(1000.0)])
    expected = [repr(value) if math.isfinite(value) else "null" for value in values.tolist()]
    assert _float_texts(values).to_pylist() == expected


def test_a_table_is_the_frame_as_it_was_when_made():
    """As the list of dicts it stands for was: a change to the frame after the document was
    made (a cell, a new column) is not in it, however often it is written."""
    frame = pd.DataFrame({"s": ["a", "b"], "x": [1.5, 2.5]})
    table, rows = json_rows(frame), json_table(frame)
    first = json_text({"t": table})
    frame.loc[0, "s"] = "changed"
    frame.loc[1, "x"] = 9.0
    frame["new"] = 1
    assert table == rows and json_text({"t": table}) == first == json.dumps({"t": rows},
                                                                            indent=2)
