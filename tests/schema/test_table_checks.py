"""checked_results' value and metric checks made columnar (issue 36): each damage, and each
mix of damages, is refused in the same words, naming the same column and row, as the
frame-wide checks they replaced (kept below as the reference)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import bwprof
from bwprof.errors import BwprofError
from bwprof.schema import table
from bwprof.schema.flags import unknown_flags
from bwprof.schema.metrics import METRICS
from bwprof.schema.rows import STATUSES

DATA = Path(__file__).resolve().parents[1] / "data"
PATH = Path("run/results.csv")


def _reference_values(typed: pd.DataFrame, path: Path, figure: tuple[str, str]) -> None:
    """`_check_values` as it was: one frame-wide array of the numeric columns."""
    status = typed["status"]
    bad = status.isna() | ~status.astype("string").isin(list(STATUSES)).fillna(False)
    if bad.any():
        unknown = sorted(set(status[bad].dropna().astype(str)))
        raise BwprofError(f"{path} is malformed: unknown status "
                          f"{', '.join(unknown) or '(empty)'} {table._where(bad, path)}")
    present = [c for c in (*table.NONNEGATIVE_COLUMNS, "bytes_per_rep") if c in typed.columns]
    values = typed[present].to_numpy(dtype="float64", na_value=0.0)
    for what, bad_cells in (("a negative", values < 0), ("an infinite", np.isposinf(values))):
        if bad_cells.any():
            first = int(bad_cells.any(axis=0).nonzero()[0][0])
            row = int(bad_cells[:, first].nonzero()[0][0])
            raise BwprofError(f"{path} is malformed: column {present[first]} holds {what} "
                              f"value {table._at(row, path)}")
    best, median = figure
    figureless = (status == "ok") & (typed[best].isna() | typed[median].isna())
    if figureless.any():
        raise BwprofError(f"{path} is malformed: an ok row without its figure ({best}, "
                          f"{median}) {table._where(figureless, path)}")


def _reference_metrics(typed: pd.DataFrame, path: Path) -> None:
    """`_check_metrics` as it was: pandas' map of the metric column."""
    status, metric, unit, higher, flag_cells = (
        typed[c] for c in ("status", "metric", "unit", "higher_is_better", "flags"))
    known = metric.isin(list(METRICS))
    unknown = status.isin(["ok", "invalid"]) & ~known
    if unknown.any():
        row = table._first(unknown)
        name = metric.iloc[row]
        raise BwprofError(f"{path} is malformed: unknown metric {name or '(empty)'!r} "
                          f"{table._at(row, path)}; known: {', '.join(METRICS)}")
    own_unit = metric.map({name: m.unit for name, m in METRICS.items()})
    wrong_unit = known & (unit != own_unit)
    if wrong_unit.any():
        row = table._first(wrong_unit)
        name = metric.iloc[row]
        raise BwprofError(f"{path} is malformed: unit {unit.iloc[row]!r} for metric {name!r} "
                          f"(it is {METRICS[name].unit!r}) {table._at(row, path)}")
    own_direction = metric.map({name: m.higher_is_better for name, m in METRICS.items()})
    said = higher.astype("boolean")
    contradicts = known & (said.isna() | (said.fillna(False).astype(bool)
                                          != own_direction.fillna(False).astype(bool)))
    if contradicts.any():
        raise BwprofError(f"{path} is malformed: higher_is_better contradicts the metric "
                          f"{table._at(table._first(contradicts), path)}")
    odd = {cell for cell in flag_cells.unique() if unknown_flags(cell)}
    if odd:
        row = table._first(flag_cells.isin(list(odd)))
        raise BwprofError(f"{path} is malformed: unknown flag(s) "
                          f"{', '.join(unknown_flags(flag_cells.iloc[row]))} "
                          f"{table._at(row, path)}")


def _outcome(check, *args: object) -> str | None:
    try:
        check(*args)
    except BwprofError as exc:
        return str(exc)
    return None


DAMAGES = {
    "status": ["weird", None, "", "OK"],
    "metric": ["zz", "", "latency", "throughput"],
    "unit": ["MB/s", "", "ns"],
    "higher_is_better": [pd.NA, True, False],
    "flags": ["nope", "", "partial"],
}
NUMBERS = [-1, -0.5, np.inf, -np.inf, np.nan, 0]


def _damaged(base: pd.DataFrame, rng: random.Random) -> pd.DataFrame:
    frame = base.copy()
    for _ in range(rng.randint(1, 4)):
        row = rng.randrange(len(frame))
        if rng.random() < 0.6:
            column = rng.choice([c for c in table.NONNEGATIVE_COLUMNS if c in frame.columns])
            value = rng.choice(NUMBERS)
            if frame[column].dtype == "Int64":  # whole numbers or missing only
                value = (pd.NA if value != value or value in (np.inf, 0)
                         else -3 if value < 0 else int(value))
            frame.loc[row, column] = value
        else:
            column = rng.choice(list(DAMAGES))
            frame[column] = frame[column].astype(object)
            frame.loc[row, column] = rng.choice(DAMAGES[column])
            frame[column] = (frame[column].astype("boolean") if column == "higher_is_better"
                             else frame[column].astype(str).where(frame[column].notna()))
    return frame


@pytest.mark.parametrize("source", ["sim-a", "h200-quick"])
def test_each_damage_is_refused_as_the_frame_wide_checks_refused_it(source):
    base = bwprof.load(DATA / source).results
    rng = random.Random(36)
    refused = 0
    for case in range(300):
        frame = _damaged(base, rng)
        for ours, theirs, args in (
                (table._check_values, _reference_values,
                 (frame, PATH, ("value_best", "value_median"))),
                (table._check_metrics, _reference_metrics, (frame, PATH))):
            expected = _outcome(theirs, *args)
            assert _outcome(ours, *args) == expected, (case, ours.__name__)
            refused += expected is not None
    assert refused > 200  # the damages reach the checks


def test_a_negative_cell_is_named_before_an_infinite_one_in_an_earlier_column():
    frame = bwprof.load(DATA / "sim-a").results.copy()
    frame.loc[9, "size_bytes"] = 10**18  # fine
    frame.loc[3, "time_median_s"] = np.inf
    frame.loc[7, "gbps_best"] = -1.0
    frame.loc[2, "value_best"] = -2.0
    with pytest.raises(BwprofError, match=r"column value_best holds a negative value in row 3"):
        table._check_values(frame, PATH, ("value_best", "value_median"))
