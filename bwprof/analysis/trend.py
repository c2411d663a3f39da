"""Trends of the history store: each GPU's headline figures over time against the fleet's
range, and the GPUs that fell below their own history.

A series is one figure of one subject: a GPU (by its UUID; where a run recorded none, its
box and device label, e.g. `vm#3f2a9c1b7d4e:gpu0`; the host's own figures, DDR, by
`vm#3f2a9c1b7d4e:cpu`) and one case, path and metric, dated by the run's start (UTC).
Each point is the figure's **median** over its samples (`value_median`, the row's `value`
where it has none): best-of-N hides the intermittent drops a trend is there to catch. The
box key (`bwprof.system.machine_identity`) tells apart machines that share a host name; a
run stored before bwprof recorded one is keyed by host name (`vm:cpu`), as it was. Only
rows of status `ok` with a figure count.

**Falling.** A series with at least two runs is compared latest against the median of
all its earlier runs; it fell where the latest is lower by more than the threshold, in
percent of that median (higher-is-better figures), or higher by more than it (a latency:
a rise is its fall). Ties in time are broken by run_id.

The fleet's range of a model and case is the 10th to 90th percentile of its stored figures
(min to max with fewer than ten) **without the points under test** (each judged series'
latest run: a drop must not widen the range that should show it):
`bwprof.render.trendplot` shades it behind each subject's line, with each series' threshold
(`Judged.limit`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bwprof.analysis.figures import ratio
from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.schema.meta import BOX_MARK
from bwprof.schema.text import one_line

FLEET_BAND = (0.10, 0.90)
MIN_FOR_PERCENTILES = 10
"""With fewer figures than this, the band is the fleet's min to max."""


def subject_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's subject: its GPU's UUID, else 'host#box:device' (the machine's box key,
    so two machines sharing a host name are two subjects), else, for a run that recorded no
    machine identity, 'host:device'."""
    host = frame["host"].fillna("?").astype(str)
    box = frame["box"] if "box" in frame.columns else pd.Series(None, index=frame.index)
    known = box.notna() & (box.astype(str) != "")
    host = host.where(~known, host + BOX_MARK + box.astype(str))
    fallback = host + ":" + frame["device"].fillna("?").astype(str)
    uuid = frame["gpu_uuid"]
    return uuid.where(uuid.notna() & (uuid.astype(str) != ""), fallback).astype(str)


def figures(store_rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a trend uses (ok, with a figure), with `subject`, `figure` and a
    lower-is-better flag, in time order."""
    rows = store_rows[(store_rows["status"] == "ok")
                      & (store_rows["value_median"].notna() | store_rows["value"].notna())].copy()
    rows["subject"] = subject_of(rows)
    rows["figure"] = rows["value_median"].where(rows["value_median"].notna(), rows["value"])
    rows["lower_is_better"] = rows["higher_is_better"].eq(False)
    rows["device_name"] = rows["device_name"].fillna("?")
    return rows.sort_values(["started_utc", "run_id"], kind="stable")


def select(rows: pd.DataFrame, gpu: str | None = None, case: str | None = None) -> pd.DataFrame:
    """`figures` narrowed to a GPU (its UUID, serial or 'host:device') and a case key;
    BwprofError (one line) where the store has no such GPU or case."""
    if gpu is not None:
        serial = rows["gpu_serial"]
        match = (rows["subject"] == gpu) | (serial.notna() & (serial.astype(str) == gpu))
        if not match.any():  # 'host:device' of a machine that recorded its box key
            plain = (rows["host"].fillna("?").astype(str) + ":"
                     + rows["device"].fillna("?").astype(str)) == gpu
            boxes = sorted(set(rows.loc[plain, "subject"]))
            if len(boxes) > 1:
                raise BwprofError(f"--gpu {one_line(shorten(gpu))!r} names {len(boxes)} machines "
                                  f"that share a host name: give one of {', '.join(boxes)}")
            match = plain
        if not match.any():
            known = sorted(set(rows["subject"]))
            shown = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
            raise BwprofError(f"--gpu {one_line(shorten(gpu))!r} is in no stored figure; the store "
                              f"holds: {shown or 'nothing'}")
        rows = rows[match]
    if case is not None:
        if not (rows["case"] == case).any():
            known = sorted(set(rows["case"]))
            raise BwprofError(f"--case {one_line(shorten(case))!r} has no stored figure"
                              f"{' of that GPU' if gpu else ''}; cases there: "
                              f"{', '.join(known) or 'none'}")
        rows = rows[rows["case"] == case]
    return rows


SERIES_KEYS = ["subject", "case", "path", "metric", "device", "device_name"]
"""What makes one series: the model is part of it, so a host name two machines share (a
generic `vm`, `localhost`) never holds one machine's DDR against another's CPU."""


@dataclass(frozen=True)
class Fall:
    """A subject whose latest figure fell below the median of its earlier ones."""

    subject: str
    case: str
    path: str
    host: str
    device: str
    device_name: str
    unit: str
    lower_is_better: bool
    latest: float
    latest_run: str
    latest_date: pd.Timestamp
    earlier_median: float
    earlier_runs: int
    fell_pct: float

    def line(self, threshold: float) -> str:
        way = "above" if self.lower_is_better else "below"
        who = self.subject if self.subject.endswith(f":{self.device}") else (
            f"{self.subject} ({self.host} {self.device})")
        return (f"FELL {self.case} {one_line(who)}, {one_line(self.device_name)}: "
                f"{self.latest:.4g} {self.unit} on {self.latest_date:%Y-%m-%d %H:%M} UTC "
                f"(run {one_line(self.latest_run)}) is {self.fell_pct:.1f}% {way} its median "
                f"of {self.earlier_median:.4g} {self.unit} over {self.earlier_runs} earlier "
                f"run(s) (threshold {threshold:g}%)")


def runs_of(series: pd.DataFrame) -> pd.DataFrame:
    """One series' points, one per run (a run stored twice counts once), in time order."""
    return series.drop_duplicates("run_key", keep="last")


@dataclass(frozen=True)
class Judged:
    """One series judged: its latest point against the median of its earlier ones. `limit`
    is the figure past which the latest fell: the earlier median less the threshold (plus
    it, for a lower-is-better figure)."""

    latest: pd.Series
    earlier: pd.DataFrame
    median: float
    limit: float
    fell_pct: float
    fell: bool


def judge(series: pd.DataFrame, threshold: float) -> Judged | None:
    """The latest run of one series (`figures` rows of one SERIES_KEYS group) against the
    median of its earlier runs; None with fewer than two runs or an earlier median of 0."""
    series = runs_of(series)
    if len(series) < 2:
        return None
    latest, earlier = series.iloc[-1], series.iloc[:-1]
    median = float(earlier["figure"].median())
    quotient = ratio(float(latest["figure"]), median)
    if quotient is None:  # an earlier median of 0, or one so small the change overflows
        return None
    lower = bool(latest["lower_is_better"])
    change = (quotient - 1) * 100
    fell = change if lower else -change
    limit = median * (1 + threshold / 100 if lower else 1 - threshold / 100)
    return Judged(latest, earlier, median, limit, fell, fell > threshold)


def _latest_runs(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """`rows` one point per run of each series (`runs_of`, every series at once), with each
    point's series number (in SERIES_KEYS order, as `groupby` sorts them) and a mask of the
    points `judge` holds against their earlier ones: each series' latest, where it has
    earlier runs. Whole columns, no Python per series: a store of 10,000 runs has thousands
    of series."""
    points = rows.drop_duplicates([*SERIES_KEYS, "run_key"], keep="last")
    groups = points.groupby(SERIES_KEYS, sort=True, dropna=False)
    number = groups.ngroup()
    runs = groups["run_key"].transform("size")
    latest = (groups.cumcount() == runs - 1) & (runs >= 2)
    return points, number, latest


def falls(rows: pd.DataFrame, threshold: float) -> list[Fall]:
    """Every series (SERIES_KEYS) whose latest figure fell by more than `threshold` percent
    below the median of its earlier ones (above it, for a lower-is-better figure): `judge`'s
    rule, every series at once."""
    points, number, latest = _latest_runs(rows)
    if not latest.any():
        return []
    median = points.loc[~latest, "figure"].groupby(number[~latest]).median()
    judged = points[latest].assign(_number=number[latest])
    earlier = judged["_number"].map(median).astype(float)
    change = (judged["figure"].astype(float) / earlier - 1) * 100
    lower = judged["lower_is_better"].astype(bool)
    fell = change.where(lower, -change)
    keep = (earlier != 0) & np.isfinite(change) & (fell > threshold)  # as judge's ratio
    sizes = number.value_counts()
    found = []
    for index in judged.index[keep.to_numpy()]:  # only the series that fell
        latest_row = judged.loc[index]
        found.append(Fall(
            str(latest_row["subject"]), str(latest_row["case"]), str(latest_row["path"]),
            str(latest_row["host"]), str(latest_row["device"]),
            str(latest_row["device_name"]), str(latest_row["unit"]), bool(lower[index]),
            float(latest_row["figure"]), str(latest_row["run_id"]),
            pd.Timestamp(latest_row["started_utc"]), float(earlier[index]),
            int(sizes[latest_row["_number"]]) - 1, float(fell[index])))
    order = judged.loc[keep.to_numpy(), "_number"].to_numpy().argsort(kind="stable")
    return [found[i] for i in order]


POINT_KEYS = ["run_key", *SERIES_KEYS]
"""What names one point of one series."""


def under_test(rows: pd.DataFrame) -> pd.DataFrame:
    """The points `falls` judges: the latest run of each series of `rows` that has earlier
    runs to be held against."""
    points, _number, latest = _latest_runs(rows)
    return points[latest]


def without_tested(fleet: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """`fleet` less the points under test of `rows` (every stored row of those runs and
    series), so the fleet's range a point is drawn against was not made by that point."""
    tested = under_test(rows)
    if tested.empty:
        return fleet
    keys = pd.MultiIndex.from_frame(fleet[POINT_KEYS].astype(str))
    return fleet[~keys.isin(pd.MultiIndex.from_frame(tested[POINT_KEYS].astype(str)))]


def fleet_band(values: pd.Series) -> tuple[float, float, float]:
    """(low, median, high) of a model's figures: the 10th and 90th percentiles, or min and
    max with fewer than MIN_FOR_PERCENTILES."""
    if len(values) < MIN_FOR_PERCENTILES:
        return float(values.min()), float(values.median()), float(values.max())
    low, high = FLEET_BAND
    return (float(values.quantile(low)), float(values.median()), float(values.quantile(high)))
