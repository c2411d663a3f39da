"""The summary's text cells (`_Table.shared_cells`, issue 36): the same values as
`_Table.cells`, each distinct text one object, so a fleet's summary of a hundred thousand
rows holds a few hundred strings, not one per row and column."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bwprof.analysis.summary import _Table


def _same(got: list[object], expected: list[object]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert type(a) is type(b)
        assert (isinstance(a, float) and math.isnan(a) and math.isnan(b)) or a == b


def test_shared_cells_are_the_cells_each_distinct_text_once():
    frame = pd.DataFrame({
        "case": pd.Series(["hbm_triad", "ddr_triad", None, "hbm_triad", ""] * 200, dtype="str"),
        "size_bytes": pd.array([1, None, 3, 1, 2] * 200, dtype="Int64"),
        "mixed": pd.Series([1, 1.0, True, "1", None] * 200, dtype=object),
    })
    table = _Table(frame)
    rows = np.array([4, 0, 2, 3, 1, 0, 999, 500, 2])
    for column in ("case", "size_bytes", "mixed", "absent"):
        _same(table.shared_cells(column, rows), table.cells(column, rows))
    every = table.shared_cells("case", np.arange(len(frame)))
    _same(every, table.cells("case", np.arange(len(frame))))
    assert len({id(cell) for cell in every}) == 4  # hbm_triad, ddr_triad, NaN, ""
    assert table.shared_cells("case", np.zeros(0, dtype=np.int64)) == []


def test_forgotten_codes_are_let_go_and_made_again_the_same():
    frame = pd.DataFrame({"case": pd.Series(["a", "b", None, "a"] * 50, dtype="str"),
                          "dtype": pd.Series(["fp32", None, "", "fp32"] * 50, dtype="str")})
    table = _Table(frame)
    case_codes, dtype_codes = table.codes("case").copy(), table.codes("dtype").copy()
    table.forget_codes(keep=("dtype",))
    assert set(table._codes) == {"dtype"}
    assert table.codes("case").tolist() == case_codes.tolist()
    assert table.codes("dtype").tolist() == dtype_codes.tolist()
