"""A table written a column at a time (`write_csv`) is byte for byte what pandas'
`to_csv(index=False)` writes: every kind of column bwprof's tables hold, every cell the
csv writer quotes, every float layout."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from bwprof.store import atomic
from bwprof.store.atomic import write_csv

TEXTS = ["plain", "", "a,b", 'say "hi"', '"', ",", "line\nbreak", "cr\rhere", "crlf\r\nx",
         " spaced ", "'=x", "ünïcode", None]
FLOATS = [0.0, -0.0, 1.0, 100.0, 0.1, 1e-4, 9.5e-05, 1e-05, 2.5e-07, 1e10, 9999999999.999998,
          1e15, 1e16, 1.2345678901234568e17, 82.3248487012298, -7.25e9, np.inf, -np.inf,
          np.nan, 5e-324, 1.7976931348623157e308, 1 / 3]


def _table(rows: int) -> pd.DataFrame:
    pick = np.arange(rows)
    texts = [TEXTS[i % len(TEXTS)] for i in pick]
    return pd.DataFrame({
        "object": pd.Series(texts, dtype=object),
        "string": pd.Series(texts, dtype="string"),
        "str": pd.Series(texts, dtype="str"),
        "float": [FLOATS[i % len(FLOATS)] for i in pick],
        "Int64": pd.array([None if i % 5 == 0 else i * 10**12 - 7 for i in pick], "Int64"),
        "int64": pick - 3,
        "boolean": pd.array([None if i % 3 == 0 else bool(i % 2) for i in pick], "boolean"),
        "bool": pick % 2 == 0,
        "empty": pd.Series([None] * rows, dtype=object),
        "missing": pd.Series([[None, np.nan, pd.NA, "x"][i % 4] for i in pick], dtype=object),
        "quoted,label": 1.5,
    })


def _pandas(frame: pd.DataFrame) -> str:
    handle = io.StringIO()
    frame.to_csv(handle, index=False)
    return handle.getvalue()


def _mine(frame: pd.DataFrame) -> str:
    handle = io.StringIO()
    write_csv(frame, handle)
    return handle.getvalue()


@pytest.mark.parametrize("chunk", [1 << 16, 7])
def test_every_kind_of_column_and_cell_is_written_as_pandas_writes_it(monkeypatch, chunk):
    monkeypatch.setattr(atomic, "_CSV_CHUNK", chunk)
    frame = _table(200)
    assert atomic._csv_columns(frame) is not None  # made a column at a time, not by pandas
    assert _mine(frame) == _pandas(frame)
    assert _mine(frame.head(0)) == _pandas(frame.head(0))


def test_floats_of_every_layout_read_as_numpy_writes_them(monkeypatch):
    """Random bit patterns (every exponent), values about the edges of Arrow's part (1e-4,
    1e10), and the same again where Arrow's layout is not the one known: NumPy's text for
    every cell."""
    rng = np.random.default_rng(36)
    values = np.concatenate([
        rng.integers(0, 2**64, 2_000, dtype=np.uint64).view(np.float64),
        rng.uniform(-1, 1, 50_000) * 10.0 ** rng.integers(-7, 13, 50_000),
        np.round(rng.uniform(0, 1e5, 20_000), 2), np.arange(-500.0, 500.0),
        np.nextafter(np.full(50, 1e-4), 0), np.nextafter(np.full(50, 1e10), 0),
        np.array(FLOATS)])
    frame = pd.DataFrame({"a": values, "b": values[::-1].copy()})
    assert _mine(frame) == _pandas(frame)
    monkeypatch.setattr(atomic, "_arrow_layout", lambda: False)
    assert _mine(frame) == _pandas(frame)


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"only": ["", "x"]}),  # a lone empty cell is written '""'
    pd.DataFrame({0: [1.0], 1: ["x"]}),  # labels that are not text
    pd.DataFrame({"mixed": pd.Series(["x", 1.5, 2], dtype=object), "b": 1}),
    pd.DataFrame({"when": pd.to_datetime(["2026-01-02"]), "b": 1}),
    pd.DataFrame({"kind": pd.Categorical(["a", "b"]), "b": 1}),
    pd.DataFrame({"small": np.array([0.1, 2.5], dtype=np.float32), "b": 1}),
], ids=["one-column", "int-labels", "mixed-objects", "datetime", "category", "float32"])
def test_a_table_of_another_kind_is_written_by_pandas(frame):
    assert atomic._csv_columns(frame) is None
    assert _mine(frame) == _pandas(frame)
