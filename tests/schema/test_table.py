"""The one table of result column types (`RESULT_DTYPES`): every column of results.csv has
one, `typed_results` gives every column it, and docs/columns.md lists them."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from bwprof.errors import BwprofError
from bwprof.schema.rows import CSV_COLUMNS, ResultRow
from bwprof.schema.table import RESULT_DTYPES, results_frame, typed_results

COLUMNS_DOC = (Path(__file__).parents[2] / "docs" / "columns.md").read_text(encoding="utf-8")


def test_every_column_of_results_csv_has_one_type_in_file_order():
    assert tuple(RESULT_DTYPES) == CSV_COLUMNS
    assert set(RESULT_DTYPES.values()) == {"Int64", "float64", "boolean", "string"}
    for column in ("size_bytes", "threads", "repeats", "page_bytes"):
        assert RESULT_DTYPES[column] == "Int64"
    for column in ("peak_gbps", "pct_of_peak", "gbps_best", "value_median", "counter_ratio"):
        assert RESULT_DTYPES[column] == "float64"


def _documented(kind: str) -> list[str]:
    """The columns docs/columns.md's Types section lists after `kind`, in order."""
    section = COLUMNS_DOC.split("\n### Types\n", 1)[1]
    line = next(line for line in section.splitlines() if line.startswith(kind))
    return re.findall(r"`([a-z_]+)`", line.split(":", 1)[1])


# Catches: a column added or retyped in the table but not in the docs (or the other way)
@pytest.mark.parametrize(("kind", "dtype"), [("integer):", "Int64"), ("Boolean", "boolean"),
                                             ("Text", "string")])
def test_the_documented_types_are_the_table(kind, dtype):
    assert _documented(kind) == [c for c, t in RESULT_DTYPES.items() if t == dtype]


def test_the_rows_bwprof_builds_are_typed_as_the_table_says():
    """`bwprof.run`'s rows in memory (`results_frame`), a skipped row among them."""
    empty = dict.fromkeys(("size_bytes", "threads", "streams", "numa_node", "repeats",
                           "ops_per_sample", "bytes_per_op", "time_median_s", "time_min_s",
                           "gbps_median", "gbps_best", "cv", "peak_gbps", "pct_of_peak"))
    frame = results_frame([ResultRow(
        run_id="r", host="h", case="h2d_pinned", backend="cuda", device="gpu0",
        device_name="", memory="pinned", direction="h2d", byte_convention="copy",
        status="skipped", note="no GPU", higher_is_better=None, **empty)])
    for column, dtype in RESULT_DTYPES.items():
        assert pd.api.types.is_string_dtype(frame[column]) if dtype == "string" else (
            str(frame[column].dtype) == dtype), column


def test_typed_results_types_a_frame_of_objects_and_leaves_the_original():
    frame = pd.DataFrame({"size_bytes": [1024, None], "peak_gbps": [None, None],
                          "higher_is_better": [True, None], "note": ["x", None],
                          "host": [None, None], "extra": ["a", None]}, dtype=object)
    typed = typed_results(frame)
    assert str(typed["size_bytes"].dtype) == "Int64" and typed["size_bytes"].isna().tolist() == [
        False, True]
    assert typed["peak_gbps"].dtype == "float64" and typed["peak_gbps"].isna().all()
    assert str(typed["higher_is_better"].dtype) == "boolean"
    assert typed["note"].tolist() == ["x", ""]  # as a read results.csv gives it
    assert pd.api.types.is_string_dtype(typed["host"]) and typed["host"].isna().all()
    assert typed["extra"].dtype == object  # a column bwprof does not know: as it was
    assert frame["size_bytes"].dtype == object  # a copy


def test_typed_results_refuses_a_value_of_the_wrong_kind():
    with pytest.raises(BwprofError, match=r"^results are malformed: column size_bytes"):
        typed_results(pd.DataFrame({"size_bytes": ["big"]}))


def _stored() -> pd.DataFrame:
    import bwprof

    return bwprof.load(Path(__file__).parents[1] / "data" / "h200-quick").results.copy()


def test_the_checks_of_whole_columns_name_the_first_row_of_the_first_check_that_fails():
    """The metric checks read whole columns at once: each still names the first row it
    finds, and an earlier check's row is named before a later check's (row by row, the
    unknown metric of row 5 was found before the unknown flag of row 2)."""
    from bwprof.schema.table import checked_results

    frame = _stored()
    frame.loc[1, "flags"] = "in_cache|sparkly"
    frame.loc[4, "metric"] = "joy"
    with pytest.raises(BwprofError, match=r"unknown metric 'joy' in row 5 \(line 6\)"):
        checked_results(frame, Path("results.csv"))
    frame.loc[4, "metric"] = frame.loc[3, "metric"]
    frame.loc[6, "unit"] = "furlongs"
    with pytest.raises(BwprofError, match=r"unit 'furlongs' for metric 'bandwidth' \(it is "
                                          r"'GB/s'\) in row 7"):
        checked_results(frame, Path("results.csv"))
    frame.loc[6, "unit"] = "GB/s"
    frame["higher_is_better"] = frame["higher_is_better"].astype(object)
    frame.loc[2, "higher_is_better"] = None
    with pytest.raises(BwprofError, match=r"higher_is_better contradicts the metric in row 3"):
        checked_results(frame, Path("results.csv"))
    frame.loc[2, "higher_is_better"] = "TRUE"  # read back as text: one value of its kind
    with pytest.raises(BwprofError, match=r"unknown flag\(s\) sparkly in row 2"):
        checked_results(frame, Path("results.csv"))
    frame.loc[1, "flags"] = "in_cache"
    assert checked_results(frame, Path("results.csv"))["higher_is_better"].dtype == "boolean"
    frame.loc[2, "higher_is_better"] = "maybe"
    with pytest.raises(BwprofError, match=r"higher_is_better: 'maybe' is not True or False"):
        checked_results(frame, Path("results.csv"))


def test_a_csv_is_parsed_from_its_bytes_as_it_was_from_text(tmp_path):
    """read_run_csv hands pandas the file's UTF-8 bytes (a third of the CPU of handing it
    text): a byte-order mark, CRLF line ends, a quoted line break and text beyond ASCII read
    as they did."""
    import io

    from bwprof.schema.table import read_run_csv

    text = '\ufeffcase,note,n\r\nhbm,"two\nlines",1\r\nddr,é ✓,\r\n'
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode("utf-8"))
    frame = read_run_csv(path)
    expected = pd.read_csv(io.StringIO(text), keep_default_na=True, low_memory=False)
    pd.testing.assert_frame_equal(frame, expected)
    assert list(frame.columns) == ["case", "note", "n"] and frame["note"].tolist() == [
        "two\nlines", "é ✓"]


def test_the_cycle_collector_is_paused_only_while_rows_are_made_and_resumed_as_it_was():
    """gc_paused stops Python's cycle collector while a fleet's rows become objects (none in
    a cycle) and leaves it as it found it, also where the work raises."""
    import gc

    from bwprof.schema.table import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a caller's own pause is kept
    finally:
        gc.enable()


def test_the_cycle_collector_pause_nests_and_only_the_outermost_end_resumes_it():
    """Pauses that overlap (nested, or in two threads, ending in either order) keep the
    collector off until the last ends; one thread's end re-enabled it under another's."""
    import gc
    from contextlib import ExitStack

    from bwprof.schema.table import gc_paused

    assert gc.isenabled()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    first, second = ExitStack(), ExitStack()
    first.enter_context(gc_paused())  # one thread's pause
    second.enter_context(gc_paused())  # another's, begun while the first runs
    first.close()  # the first ends before the second: the second still runs paused
    assert not gc.isenabled()
    second.close()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused(), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused(), gc_paused():
            pass
        assert not gc.isenabled()  # the user's own gc.disable() is kept
    finally:
        gc.enable()


def test_typed_results_shares_typed_columns_and_stays_a_copy():
    """A frame typed already (as `load` gives a fleet's million rows) is not duplicated
    column by column, yet writing the typed frame never changes the caller's."""
    import numpy as np

    frame = _stored()
    best, host = frame.loc[0, "gbps_best"], frame.loc[0, "host"]
    typed = typed_results(frame)
    if int(pd.__version__.split(".")[0]) >= 3:  # copy on write: nothing to duplicate
        assert np.shares_memory(typed["gbps_best"].to_numpy(), frame["gbps_best"].to_numpy())
    typed.loc[0, "gbps_best"] = -1.0
    typed.loc[0, "host"] = "other"
    assert frame.loc[0, "gbps_best"] == best and frame.loc[0, "host"] == host
