"""`json_table`, the column-at-a-time JSON of a table (issue 36), gives what the cell-by-cell
`json_ready(json_records(frame))` gives, for every kind of column and cell a table holds."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from bwprof.schema.text import json_ready
from bwprof.store.formats import json_records, json_table


def _reference(frame: pd.DataFrame) -> object:
    return json_ready(json_records(frame))


def _frames() -> dict[str, pd.DataFrame]:
    python_text = pd.StringDtype("python")
    return {
        "numbers": pd.DataFrame({
            "f": [1.5, math.nan, math.inf, -math.inf, -0.0, 5e-324],
            "i": np.arange(6, dtype=np.int64), "u": np.arange(6, dtype=np.uint32),
            "b": [True, False] * 3,
            "I": pd.array([1, None, 3, None, 2**62, -1], dtype="Int64"),
            "B": pd.array([True, None, False, None, True, False], dtype="boolean"),
            "F": pd.array([1.0, None, 2.5, None, 0.0, 1.0], dtype="Float64")}),
        "text": pd.DataFrame({
            "s": pd.array(["a", None, "tab\there", "é", "\u2028", ""], dtype="str"),
            # Arrow-stored, missing as pd.NA, values repeated: one string per distinct value
            "arrow": pd.array(["gpu0", None, "gpu0", "", None, "gpu0"], dtype="string[pyarrow]"),
            "p": pd.array(["ok", "bad\udc80", None, "\x00", "x", "\ud800\udc00"],
                          dtype=python_text),
            "clean": pd.array(["a", "b", None, "c", "d", "e"], dtype=python_text),
            "o": pd.Series(["x", None, 1, 2.5, math.nan, "name\udcff"], dtype=object),
            "o2": pd.Series([np.int64(3), np.float64(math.inf), pd.NA, True, (1, 2), {"k": 1}],
                            dtype=object)}),
        "other": pd.DataFrame({
            "t": pd.to_datetime(["2026-01-01", None, "2026-12-02", None, "2026-01-01",
                                 "2027-01-01"]),
            "c": pd.Categorical(["a", "b", None, "a", "b", "a"]),
            "k": [1 + 2j] * 6}),
        "odd names": pd.DataFrame([[1, 2.0, "x"]], columns=["a\udc80", 7, "a\udc80"]),
        "duplicate names": pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"]),
        "no rows": pd.DataFrame({"a": pd.array([], dtype="Int64"), "b": []}),
        "no columns": pd.DataFrame(index=range(3)),
    }


# Catches: a column kind json_table converts otherwise than the cell-by-cell rules (a NaN
# or an infinity left as a number, an NA that is not null, a surrogate not escaped, a NumPy
# number json cannot write, a key that lost its escape or its order)
@pytest.mark.filterwarnings("ignore:DataFrame columns are not unique")
@pytest.mark.parametrize("name", list(_frames()))
def test_json_table_is_json_records_made_ready(name):
    frame = _frames()[name]
    got, expected = json_table(frame), _reference(frame)
    assert json.dumps(got, allow_nan=False) == json.dumps(expected, allow_nan=False)
    assert got == expected
