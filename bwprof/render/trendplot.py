"""The trend plots of `bwprof trend`: one PNG per case, `trend-<case>.png`, with a panel per
GPU model (device_name) and path: each subject's figure over time as a line, the fleet's
range of that model and case (`bwprof.analysis.trend.fleet_band`, without the points under
test) shaded, its median dashed, and each judged line's threshold dotted. Only a fall is
red: the segment into the latest run that fell and that point, never the line before it,
nor a line that rose (`bwprof.analysis.trend.judge`, as `falls` judges). The time axis
spans the runs with a little room, a day at least: one run is never drawn across years."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from bwprof.analysis.trend import (
    MIN_FOR_PERCENTILES,
    SERIES_KEYS,
    Judged,
    fleet_band,
    judge,
    runs_of,
    without_tested,
)
from bwprof.coerce import shorten
from bwprof.schema.text import one_line
from bwprof.store.atomic import save_figure

MAX_LEGEND = 12
"""Subjects named in a panel's legend (every fallen one, then the first others)."""
PNG_PREFIX = "trend-"
DRAWABLE = 1e100
"""Figures from this on are no memory's (a damaged run's 1e308 GB/s overflowed the tick
steps): left out of the plots, as `bwprof.render.plots.DRAWABLE`; the text keeps them."""
FALL_COLOUR = "firebrick"
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
           "tab:gray", "tab:olive", "tab:cyan")
"""The lines' colours: matplotlib's own without its red, which means a fall here."""
TIME_PAD_SHARE = 0.05
MIN_TIME_PAD = pd.Timedelta(hours=12)
"""The time axis reaches this share of the runs' span beyond the first and last run, and at
least MIN_TIME_PAD: a single run gets a day of axis, not the years matplotlib gives a lone
date."""


def _file_part(case: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", case).strip("._")[:80] or "case"


SHOWN = 60
"""The most characters of a name (model, path, host, case) a plot shows: a store read gives
names of up to 200 (`bwprof.store.history_schema.MAX_TEXT`), and titles and legends of that length
leave the panels no room."""


def _short(text: object) -> str:
    return shorten(one_line(str(text)), SHOWN)


def _label(subject: str, group: pd.DataFrame) -> str:
    first = group.iloc[-1]
    if subject.endswith(f":{first['device']}"):
        return _short(subject)
    return _short(f"{subject[:12]}… ({first['host']} {first['device']})" if len(subject) > 14
                  else f"{subject} ({first['host']} {first['device']})")


PANEL_KEYS = ["device_name", "path", "metric"]


def _times(frame: pd.DataFrame) -> list:
    """Run starts as naive UTC datetimes, which matplotlib's date axis takes."""
    return frame["started_utc"].dt.tz_convert("UTC").dt.tz_localize(None).to_list()


def _time_axis(axis, rows: pd.DataFrame) -> None:
    """The runs' span and a little room each side (MIN_TIME_PAD at least), concise dates."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    times = pd.Series(_times(rows))
    first, last = times.min(), times.max()
    pad = max((last - first) * TIME_PAD_SHARE, MIN_TIME_PAD)
    axis.set_xlim((first - pad).to_pydatetime(), (last + pad).to_pydatetime())
    locator = AutoDateLocator(minticks=3, maxticks=8)
    axis.xaxis.set_major_locator(locator)
    axis.xaxis.set_major_formatter(ConciseDateFormatter(locator))


def _draw_series(axis, points: pd.DataFrame, judged: Judged | None, colour: str,
                 label: str | None) -> None:
    """One series: its line, its threshold (dotted, from its first run to its latest) where
    it was judged, and where it fell, the segment into its latest run and that point red."""
    fell = judged is not None and judged.fell
    times = _times(points)
    axis.plot(times, points["figure"].to_list(), marker="o", markersize=4, linewidth=1.2,
              color=colour, label=(("FELL " if fell else "") + label) if label else None)
    if judged is None:
        return
    if judged.limit > 0:  # a threshold above 100% of a higher-is-better figure: none
        axis.plot([times[0], times[-1]], [judged.limit, judged.limit], linestyle=":",
                  linewidth=1.2, color=FALL_COLOUR if fell else colour)
    if fell:
        way = "above" if judged.latest["lower_is_better"] else "below"
        axis.plot(times[-2:], points["figure"].to_list()[-2:], marker="o", markersize=7,
                  markevery=[1], linewidth=2.6, color=FALL_COLOUR,
                  label=(f"fall: {judged.fell_pct:.1f}% {way} the median of its "
                         f"{len(judged.earlier)} earlier run(s)") if label else None)


def case_figure(case: str, rows: pd.DataFrame, fleet: pd.DataFrame, threshold: float):
    """The trend plot of one case: a panel per (GPU model, path) of the subjects in `rows`,
    each series judged as `falls` judges it with `threshold` (percent), the range drawn from
    every figure of that model in `fleet` (the whole store's rows of the case, whatever
    --gpu chose) less the points under test of `rows`."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    panels = list(rows.groupby(PANEL_KEYS, sort=True, dropna=False))
    figure = Figure(figsize=(10, 3.6 * len(panels) + 0.8), dpi=100, layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    for axis, ((model, path, metric), panel) in zip(axes, panels, strict=True):
        unit = str(panel["unit"].iloc[0])
        lower = bool(panel["lower_is_better"].iloc[0])
        same = fleet[(fleet["device_name"] == model) & (fleet["path"] == path)
                     & (fleet["metric"] == metric)]
        same = same if len(same) else panel
        others = without_tested(same, panel)
        if len(others):
            low, middle, high = fleet_band(others["figure"])
            band = "min–max" if len(others) < MIN_FOR_PERCENTILES else "10–90%"
            left = len(same) - len(others)
            axis.axhspan(low, high, color="tab:blue", alpha=0.15,
                         label=f"fleet {band} of {len(others)} figure(s)" + (
                             f", without the {left} judged" if left else ""))
            axis.axhline(middle, color="tab:blue", linestyle="--", linewidth=1,
                         label="fleet median")
        series = [(points, judge(group, threshold))
                  for _key, group in panel.groupby(SERIES_KEYS, sort=False, dropna=False)
                  for points in (runs_of(group),)]
        subjects = list(dict.fromkeys(str(points["subject"].iloc[0]) for points, _ in series))
        fallen = {str(points["subject"].iloc[0]) for points, judged in series
                  if judged is not None and judged.fell}
        named = sorted(subjects, key=lambda s: s not in fallen)[:MAX_LEGEND]
        labelled: set[str] = set()
        for points, judged in series:
            subject = str(points["subject"].iloc[0])
            colour = COLOURS[subjects.index(subject) % len(COLOURS)]
            label = _label(subject, points) if subject in named and subject not in labelled \
                else None
            labelled.add(subject)
            _draw_series(axis, points, judged, colour, label)
        handles, _labels = axis.get_legend_handles_labels()
        if not len(others):
            handles.append(Line2D([], [], linestyle="none",
                                  label="no fleet range: no figure besides the runs judged"))
        if any(judged is not None for _points, judged in series):
            handles.append(Line2D([], [], linestyle=":", color="grey", label=(
                f"threshold: {threshold:g}% {'above' if lower else 'below'} the median of "
                "the line's earlier runs")))
        hidden = len(subjects) - len(named)
        title = (f"{_short(model)} · {_short(path)} · {_short(metric)} "
                 f"({'lower' if lower else 'higher'}")
        title += " is better)" + (f" · {hidden} more not in the legend" if hidden > 0 else "")
        axis.set_title(title, fontsize=10)
        axis.set_ylabel(f"{_short(unit)}, median of samples")
        axis.set_xlabel("run start (UTC)")
        axis.grid(True, alpha=0.3)
        axis.legend(handles=handles, fontsize=8, loc="best")
        _time_axis(axis, rows)
    figure.suptitle(f"bwprof trend: {_short(case)} over time against the fleet's range",
                    fontsize=11)
    return figure


def write_trend_plots(rows: pd.DataFrame, fleet: pd.DataFrame, out: Path,
                      threshold: float) -> list[Path]:
    """One PNG per case of `rows` into `out` (made where missing; OutputError, exit 3,
    where it cannot be written), each range from `fleet` (every figure of the store), each
    series judged against `threshold` percent as `bwprof trend` judges it."""
    from bwprof.errors import write_failure

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failure(out, exc) from None  # the folder: no file was begun
    written = []
    rows = rows[rows["figure"].astype(float).abs() < DRAWABLE]
    fleet = fleet[fleet["figure"].astype(float).abs() < DRAWABLE]
    for case, group in rows.groupby("case", sort=True):
        written.append(save_figure(case_figure(str(case), group,
                                               fleet[fleet["case"] == case], threshold),
                                   out / f"{PNG_PREFIX}{_file_part(str(case))}.png"))
    return written
