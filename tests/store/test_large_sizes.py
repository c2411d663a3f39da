"""Sizes and byte counts past 2^32 through the data path: a row written, results.csv read back,
the summary and its table. Host STREAM arrays reach hundreds of GiB on a terabyte host (over
2^32 float64 elements), transfers 4 GiB and beyond; the plan's largest host array is 2^60
bytes (3 arrays' worth, 3 x 2^60 bytes a Triad operation, still under int64's 2^63)."""

from __future__ import annotations

import pandas as pd
import pytest

from bwprof.analysis.summary import build_summary
from bwprof.coerce import integer
from bwprof.render.terminal import summary_grid
from bwprof.schema.table import read_results, rows_from_frame
from bwprof.store.export import RunWriter
from bwprof.units import GiB, MiB, format_bytes
from tests.store.test_export import make_row

HOST_ARRAY = 300 * GiB + MiB
"""A 1.5 TiB host's default-sized array is whole MiB: 300 GiB, 40 Gi float64 elements."""
ROWS = [
    # (case, size_bytes, bytes_per_op)
    ("ddr_triad", HOST_ARRAY, 3 * HOST_ARRAY),
    ("ddr_copy", 2**60, 2 * 2**60),  # the plan's largest host array
    ("ddr_add", 2**60, 3 * 2**60),
    ("h2d_pinned", 2**32, 2**32),  # the full preset's 4 GiB transfer
    ("d2d_copy", 2**32 + 8, 2 * (2**32 + 8)),
    ("d2h_pinned", 2**62, 2**62),
    ("ddr_scale", 2**31 - 8, 2 * (2**31 - 8)),
]


def _row(case: str, size: int, nbytes: int):
    gpu = not case.startswith("ddr_")
    return make_row(case=case, size_bytes=size, bytes_per_op=nbytes,
                    byte_convention="copy" if case.startswith(("h2d", "d2h")) else "traffic",
                    backend="cuda" if gpu else "host", device="gpu0" if gpu else "cpu",
                    memory={"h2d": "pinned", "d2h": "pinned", "d2d": "hbm"}.get(case[:3], "ddr"),
                    direction={"h2d": "h2d", "d2h": "d2h"}.get(case[:3], "within"),
                    threads=None if gpu else 2, time_median_s=2.0, time_min_s=1.0,
                    gbps_median=nbytes / 2.0 / 1e9, gbps_best=nbytes / 1.0 / 1e9)


@pytest.fixture
def large(tmp_path) -> pd.DataFrame:
    """results.csv of ROWS and a skipped row without a size (the integer columns then hold a
    missing value beside the large ones), read back."""
    writer = RunWriter(tmp_path)
    for case, size, nbytes in ROWS:
        writer.add(_row(case, size, nbytes), [1.0, 2.0])
    writer.add(make_row(case="hbm_triad", status="skipped", size_bytes=None, bytes_per_op=None,
                        gbps_best=None, gbps_median=None, time_median_s=None, time_min_s=None,
                        backend="cuda", device="gpu0", memory="hbm"), [])
    writer.close()
    return read_results(tmp_path / "results.csv")


def test_sizes_and_byte_counts_read_back_exactly(large):
    assert str(large["size_bytes"].dtype) == "Int64" and str(large["bytes_per_op"].dtype) == "Int64"
    measured = large.iloc[:len(ROWS)]
    assert [int(v) for v in measured["size_bytes"]] == [size for _, size, _ in ROWS]
    assert [int(v) for v in measured["bytes_per_op"]] == [n for *_, n in ROWS]
    assert large["size_bytes"].isna().tolist() == [False] * len(ROWS) + [True]
    rows = rows_from_frame(large)
    assert [(r.size_bytes, r.bytes_per_op) for r in rows[:len(ROWS)]] == \
        [(size, n) for _, size, n in ROWS]
    assert all(type(r.size_bytes) is int for r in rows[:len(ROWS)])
    assert [integer(v) for v in measured["size_bytes"]] == [size for _, size, _ in ROWS]


def test_the_summary_and_its_table_keep_sizes_past_2_32(large):
    summary = build_summary(large)
    shown = {row["case"]: row for _, row in summary.iterrows() if row["status"] == "ok"}
    assert int(shown["ddr_triad"]["size_bytes"]) == HOST_ARRAY
    assert int(shown["h2d_pinned"]["size_bytes"]) == 2**32
    assert int(shown["d2h_pinned"]["size_bytes"]) == 2**62
    assert shown["d2h_pinned"]["gbps"] == pytest.approx(2**62 / 2.0 / 1e9)  # the median
    _, cells = summary_grid(summary)
    sizes = {cell.get("size") for _, cell in cells}
    assert {"300.0 GiB", "4 GiB", "4294967296 GiB"} <= sizes, sizes


@pytest.mark.parametrize(("nbytes", "text"), [
    (2**31, "2 GiB"), (2**32, "4 GiB"), (2**32 + 2**29, "4.5 GiB"), (300 * GiB, "300 GiB"),
    (HOST_ARRAY, "300.0 GiB"), (2**40, "1024 GiB"), (2**60, "1073741824 GiB"),
    (2**62, "4294967296 GiB"),
])
def test_sizes_past_2_32_are_spelt_in_gib(nbytes, text):
    assert format_bytes(nbytes) == text
