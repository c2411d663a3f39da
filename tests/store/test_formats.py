"""Tests of bwprof.store.formats: the --format option of every command."""

from __future__ import annotations

import pytest

from bwprof.errors import BwprofError
from bwprof.store.formats import check_format


@pytest.mark.parametrize("name", ["", "CSV", "xlsx", "csv,parquet"])
def test_an_unknown_format_names_the_choices(name):
    with pytest.raises(BwprofError, match=r"^unknown --format .*; choose one of: csv, parquet$"):
        check_format(name)


def test_a_format_of_thousands_of_characters_is_a_short_line():
    """The refusal is one readable line, not the 5000 characters given."""
    with pytest.raises(BwprofError) as refused:
        check_format("9" * 5000)
    assert "(5000 characters)" in str(refused.value) and len(str(refused.value)) < 200


# Catches: an all-empty column written as Arrow's null type (or as text), which DuckDB and
# other readers cannot average, where the caller said it holds numbers
def test_write_parquet_stores_the_given_types_whatever_pandas_holds(tmp_path):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bwprof.store.formats import write_parquet

    frame = pd.DataFrame({"peak_gbps": [None, None], "threads": [1, None],
                          "host": [None, None], "other": [None, None]}, dtype=object)
    write_parquet(frame, tmp_path / "t.parquet",
                  {"peak_gbps": "float64", "threads": "Int64", "host": "string"})
    schema = pq.read_schema(tmp_path / "t.parquet")
    assert [schema.field(c).type for c in frame.columns] == [
        pa.float64(), pa.int64(), pa.string(), pa.null()]  # `other`: as pandas gives it
    assert pq.read_table(tmp_path / "t.parquet")["threads"].to_pylist() == [1, None]


def test_a_value_that_is_not_of_its_given_type_is_refused(tmp_path):
    import pandas as pd

    from bwprof.store.formats import write_parquet

    with pytest.raises(ValueError):  # pyarrow's ArrowInvalid; the report layer says it in a line
        write_parquet(pd.DataFrame({"threads": ["many"]}), tmp_path / "t.parquet",
                      {"threads": "Int64"})
    assert list(tmp_path.iterdir()) == []


# Catches: a fast path for int cells (`cell_float`'s, issue 36) that gives another type or
# lets a bool through as a number, where the pandas path gave a float and raised.
def test_cell_float_gives_the_same_floats_on_its_fast_paths():
    import numpy as np
    import pandas as pd

    from bwprof.store.formats import cell_float

    for cell, expected in ((268435456, 268435456.0), (np.int64(7), 7.0), (0, 0.0),
                           (2.5, 2.5), ("3", 3.0)):
        got = cell_float(cell)
        assert got == expected and type(got) is float, cell
    for cell in (None, float("nan"), pd.NA, np.nan):
        assert cell_float(cell) is None
    with pytest.raises(TypeError):
        cell_float(True)
    with pytest.raises(OverflowError):
        cell_float(10 ** 400)
