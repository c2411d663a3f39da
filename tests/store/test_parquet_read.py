"""results.parquet read a column at a time (`runfolder._parquet_frame`, issue 36): the frame
`pd.read_parquet` makes (values, dtypes, index, column index, one float block), and a file
of another kind read by `pd.read_parquet` itself."""

from __future__ import annotations

import shutil
from io import BytesIO
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import bwprof
from bwprof.errors import BwprofError
from bwprof.schema.table import RESULT_DTYPES, typed_results
from bwprof.store import runfolder
from bwprof.store.formats import write_parquet

DATA = Path(__file__).resolve().parents[1] / "data"


def _typed(source: str = "sim-a") -> pd.DataFrame:
    return bwprof.load(DATA / source).results


def _with_gaps(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with a missing cell in a column of every kind."""
    frame = frame.copy()
    frame.loc[1, "note"] = np.nan
    frame.loc[2, "size_bytes"] = pd.NA
    frame.loc[3, "higher_is_better"] = pd.NA
    frame.loc[4, "cv"] = np.nan
    return frame


def _written(frame: pd.DataFrame, tmp_path: Path, typed: bool = True,
             row_group_size: int | None = None) -> tuple[object, bytes]:
    target = tmp_path / "results.parquet"
    if typed:
        write_parquet(typed_results(frame), target, RESULT_DTYPES)
    else:
        frame.to_parquet(target)
    if row_group_size is not None:  # several row groups: every column in chunks
        table = pq.read_table(target)
        pq.write_table(table, target, row_group_size=row_group_size)
    data = target.read_bytes()
    return pq.ParquetFile(BytesIO(data)), data


def _same_frame(ours: pd.DataFrame, theirs: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True, check_column_type=True,
                                  check_index_type=True)
    assert ours.columns.dtype == theirs.columns.dtype
    assert type(ours.index) is type(theirs.index)
    assert ours.attrs == theirs.attrs
    assert ([str(b.dtype) for b in ours._mgr.blocks if not b.is_extension]
            == [str(b.dtype) for b in theirs._mgr.blocks if not b.is_extension])


@pytest.mark.parametrize("row_group_size", [None, 7])
@pytest.mark.parametrize("source", ["sim-a", "h200-quick", "host-ddr"])
def test_a_typed_file_reads_as_pandas_reads_it(tmp_path, source, row_group_size):
    parquet = _written(_with_gaps(_typed(source)), tmp_path, row_group_size=row_group_size)
    assert runfolder._plain_columns(parquet[0].schema_arrow) is not None  # type: ignore[attr-defined]
    _same_frame(runfolder._parquet_frame(parquet), pd.read_parquet(BytesIO(parquet[1])))


def test_no_rows_read_as_pandas_reads_them(tmp_path):
    parquet = _written(_typed().iloc[:0], tmp_path)
    _same_frame(runfolder._parquet_frame(parquet), pd.read_parquet(BytesIO(parquet[1])))


@pytest.mark.parametrize("kind", ["untyped", "indexed", "binary"])
def test_a_file_of_another_kind_is_read_by_pandas(tmp_path, kind):
    frame = _typed()
    if kind == "indexed":
        frame = frame.set_index("run_id")
    elif kind == "binary":
        frame["status"] = frame["status"].astype(str).str.encode("utf-8")
    parquet = _written(frame, tmp_path, typed=False)
    assert runfolder._plain_columns(parquet[0].schema_arrow) is None  # type: ignore[attr-defined]
    _same_frame(runfolder._parquet_frame(parquet), pd.read_parquet(BytesIO(parquet[1])))


def _parquet_folder(tmp_path: Path, frame: pd.DataFrame) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(DATA / "sim-a" / "system.json", folder / "system.json")
    write_parquet(typed_results(frame), folder / "results.parquet", RESULT_DTYPES)
    return folder


def test_a_fleet_file_is_never_decoded_whole(tmp_path, monkeypatch):
    """pandas' reader (every column decoded before any is converted) is not used for a file
    bwprof wrote; the rows are the same."""
    folder = _parquet_folder(tmp_path, _typed())
    expected = bwprof.load(folder).results

    def whole(*_args: object, **_kwargs: object) -> pd.DataFrame:
        raise AssertionError("read whole by pd.read_parquet")
    monkeypatch.setattr(pd, "read_parquet", whole)
    pd.testing.assert_frame_equal(bwprof.load(folder).results, expected, check_exact=True)


@pytest.mark.parametrize(("column", "row", "value", "words"), [
    ("size_bytes", 7, -5, "column size_bytes holds a negative value in row 8"),
    ("gbps_best", 9, np.inf, "column gbps_best holds an infinite value in row 10"),
    ("cv", 9, -np.inf, "column cv holds a negative value in row 10"),
    ("status", 3, "weird", "unknown status weird in row 4"),
    ("status", 4, None, "unknown status (empty) in row 5"),
    ("metric", 5, "zz", "unknown metric 'zz' in row 6"),
    ("unit", 6, "MB/s", "unit 'MB/s' for metric 'bandwidth' (it is 'GB/s') in row 7"),
    ("higher_is_better", 8, pd.NA, "higher_is_better contradicts the metric in row 9"),
    ("flags", 2, "nope", "unknown flag(s) nope in row 3"),
])
def test_a_damaged_typed_file_is_refused_naming_its_cell(tmp_path, column, row, value, words):
    frame = _typed()
    frame[column] = frame[column].astype(object)
    frame.loc[row, column] = value
    folder = _parquet_folder(tmp_path, frame)
    with pytest.raises(BwprofError, match=r"results\.parquet is malformed: ") as caught:
        bwprof.load(folder)
    assert words in str(caught.value)


def test_a_status_stored_as_bytes_reads_as_its_text(tmp_path):
    """b'ok' is the status ok (`astype('string')` decodes it), as it always read."""
    frame = _typed()
    frame["status"] = frame["status"].astype(str).str.encode("utf-8")
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(DATA / "sim-a" / "system.json", folder / "system.json")
    frame.to_parquet(folder / "results.parquet")
    assert len(bwprof.load(folder).results) == len(frame)
