"""checked_results' GB/s columns of bandwidth rows as their value columns (issue 36): a
column already equal, bit for bit, is kept as it is; any other is written as it was."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd

import bwprof
from bwprof.schema import table

DATA = Path(__file__).resolve().parents[1] / "data"
PAIRS = (("value_best", "gbps_best"), ("value_median", "gbps_median"),
         ("peak_value", "peak_gbps"))


def _reference(typed: pd.DataFrame) -> pd.DataFrame:
    """`_gbps_from_values` as it was: every column written."""
    bandwidth = typed["metric"] == "bandwidth"
    for value, gbps in PAIRS:
        typed[gbps] = typed[gbps].where(~bandwidth, typed[value])
    return typed


def _bits(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame[column].to_numpy().view(np.int64)


def test_each_gbps_column_is_its_value_column_bit_for_bit_on_bandwidth_rows():
    base = bwprof.load(DATA / "h200-quick").results.copy()
    base.loc[:9, "metric"] = "latency"  # rows the columns are left alone on
    rows = base.index[base["metric"] == "bandwidth"]
    other = base.index[base["metric"] != "bandwidth"]
    assert len(rows) and len(other)
    rng = random.Random(36)
    odd_nan = np.array([0x7FF8000000000001], dtype=np.int64).view(np.float64)[0]
    for case in range(200):
        frame = base.copy()
        for _ in range(rng.randint(0, 3)):
            value, gbps = rng.choice(PAIRS)
            row = rng.choice(list(rows) + list(other))
            cell = rng.choice([-0.0, 0.0, np.nan, odd_nan, 1.5, frame.at[row, value]])
            frame.loc[row, rng.choice([value, gbps])] = cell
        ours = table._gbps_from_values(frame.copy())
        theirs = _reference(frame.copy())
        for _, gbps in PAIRS:
            assert (_bits(ours, gbps) == _bits(theirs, gbps)).all(), (case, gbps)


def test_a_column_that_already_agrees_is_not_copied():
    frame = bwprof.load(DATA / "h200-quick").results.copy()
    before = {gbps: frame[gbps].to_numpy() for _, gbps in PAIRS}
    out = table._gbps_from_values(frame)
    for _, gbps in PAIRS:
        assert np.shares_memory(out[gbps].to_numpy(), before[gbps]), gbps
