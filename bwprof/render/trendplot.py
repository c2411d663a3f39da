"""The trend plots of `bwprof trend`: one PNG per case, `trend-<case>.png`, with a panel per
GPU model (device_name) and path: each subject's figure over time as a line, the fleet's
range of that model and case (`bwprof.analysis.trend.fleet_band`) shaded, its median dashed;
a subject that fell is drawn red and named in the legend."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bwprof.analysis.trend import MIN_FOR_PERCENTILES, Fall, fleet_band
from bwprof.schema.text import one_line
from bwprof.store.atomic import save_figure

MAX_LEGEND = 12
"""Subjects named in a panel's legend (every fallen one, then the first others)."""
PNG_PREFIX = "trend-"


def _file_part(case: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", case).strip("._")[:80] or "case"


def _label(subject: str, group: pd.DataFrame) -> str:
    first = group.iloc[-1]
    if subject.endswith(f":{first['device']}"):
        return subject
    return f"{subject[:12]}… ({first['host']} {first['device']})" if len(subject) > 14 else (
        f"{subject} ({first['host']} {first['device']})")


PANEL_KEYS = ["device_name", "path", "metric"]


def case_figure(case: str, rows: pd.DataFrame, fleet: pd.DataFrame,
                fallen: set[tuple[str, str]]):  # -> matplotlib.figure.Figure
    """The trend plot of one case: a panel per (GPU model, path) of the subjects in `rows`,
    the range drawn from every figure of that model in `fleet` (the whole store's rows of
    the case, whatever --gpu chose)."""
    from matplotlib.figure import Figure

    panels = list(rows.groupby(PANEL_KEYS, sort=True, dropna=False))
    figure = Figure(figsize=(10, 3.6 * len(panels) + 0.8), dpi=100, layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    for axis, ((model, path, metric), panel) in zip(axes, panels, strict=True):
        unit = str(panel["unit"].iloc[0])
        same = fleet[(fleet["device_name"] == model) & (fleet["path"] == path)
                     & (fleet["metric"] == metric)]
        same = same if len(same) else panel
        low, middle, high = fleet_band(same["figure"])
        lower = bool(panel["lower_is_better"].iloc[0])
        band = ("min–max" if len(same) < MIN_FOR_PERCENTILES else "10–90%")
        axis.axhspan(low, high, color="tab:blue", alpha=0.15,
                     label=f"fleet {band} of {len(same)} figure(s)")
        axis.axhline(middle, color="tab:blue", linestyle="--", linewidth=1,
                     label="fleet median")
        subjects = list(dict.fromkeys(panel["subject"]))
        named = sorted(subjects, key=lambda s: (s, case) not in fallen)[:MAX_LEGEND]
        for subject in subjects:
            mine = panel[panel["subject"] == subject]
            fell = (subject, case) in fallen
            times = mine["started_utc"].dt.tz_convert("UTC").dt.tz_localize(None)
            axis.plot(times.to_list(), mine["figure"].to_list(), marker="o",
                      linewidth=2.2 if fell else 1.2, color="firebrick" if fell else None,
                      label=(("FELL " if fell else "") + _label(subject, mine)
                             if subject in named else None))
        hidden = len(subjects) - len(named)
        title = f"{one_line(str(model))} · {path} · {metric} ({'lower' if lower else 'higher'}"
        title += " is better)" + (f" · {hidden} more not in the legend" if hidden > 0 else "")
        axis.set_title(title, fontsize=10)
        axis.set_ylabel(f"{unit}, median of samples")
        axis.set_xlabel("run start (UTC)")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8, loc="best")
        figure.autofmt_xdate()
    figure.suptitle(f"bwprof trend: {case} over time against the fleet's range", fontsize=11)
    return figure


def write_trend_plots(rows: pd.DataFrame, fleet: pd.DataFrame, out: Path,
                      found: Sequence[Fall]) -> list[Path]:
    """One PNG per case of `rows` into `out` (made where missing; OutputError, exit 3,
    where it cannot be written), each range from `fleet` (every figure of the store)."""
    from bwprof.errors import write_failure

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failure(out, exc) from None  # the folder: no file was begun
    fallen = {(fall.subject, fall.case) for fall in found}
    written = []
    for case, group in rows.groupby("case", sort=True):
        written.append(save_figure(case_figure(str(case), group,
                                               fleet[fleet["case"] == case], fallen),
                                   out / f"{PNG_PREFIX}{_file_part(str(case))}.png"))
    return written
