"""PNG plots of a run folder (matplotlib, Agg, no display needed).

- `bandwidth_vs_size.png`: GB/s against transfer size (log x), one panel per memory kind and
  direction (and one per `--threads` sweep), one line per case and device (a single size: a
  marker at that size, named beside it), the theoretical peak as a dashed line, cache points
  hollow and named; the size axis labels only the sizes measured.
- `summary_vs_peak.png`: the summary's figures, a panel per path, in % of peak on a linear
  0-100% axis (the achievable band shaded where given), GB/s from 0 without a peak.
- `telemetry.png`: the counters that explain the figures (DRAM utilisation, PCIe, what moved)
  over time, each case shaded (only when the run recorded telemetry).
- `p2p_heatmap.png`: GPU-to-GPU bandwidth as a matrix, coloured 0 to the peak (only with two
  GPUs or more).
- `latency_vs_size.png`: load latency against working-set size (log x, log y), a panel for
  the host chase and one for the GPU chase (and one for any other latency sweep), one line
  per device, the cache sizes as dotted vertical lines (host: each level's per-instance
  size from system.json; GPU: its L2), cache-resident points hollow.
- `latency_under_load.png`: latency against the bandwidth a concurrent streaming load
  achieved (`load_N` rows), a panel per loaded case, one line per device.
- `roofline.png`: the roofline of each device with a compute ceiling, from measured ceilings
  (`bwprof.analysis.roofline`): TFLOP/s per dtype flat, HBM, L2, host link and DDR GB/s as
  slopes, ridge points marked
- `numa_latency_heatmap.png`, `p2p_latency_heatmap.png`: latency from each NUMA node's CPUs
  to each node's memory, and from each GPU to each other's memory (only with two or more).

Every heatmap's colours run from 0 (to the peak where the figure has one), not from the
smallest figure, so a small difference does not look like a large one. Text is 8 pt or more
(`figstyle.readable`). A plot without rows is not drawn. Every point, bar and cell is a
row's median (`FIGURE`, the figure the summary, verdicts and compare show), and each axis
says so.

Every title names the host and its GPUs; a plot with simulated rows says "SIMULATED — not a
measurement" in its title. Figures are built with `matplotlib.figure.Figure` (no pyplot state),
so plotting is safe to call from a library. Nothing here touches hardware.
"""

from __future__ import annotations

import hashlib
import math
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from bwprof.analysis import figures
from bwprof.analysis.roofline import Ceiling, Ceilings
from bwprof.analysis.summary import (
    GPU_LATENCY,
    HOST_LATENCY,
    MEMCPY_LATENCY,
    NUMA_LATENCY,
    P2P_LATENCY,
    PATH_LABELS,
    cache_resident,
    is_loaded,
    load_percent,
    matrix_rows,
    numa_pair,
    p2p_matrix_rows,
)
from bwprof.casespec import MEDIAN_BEYOND_CACHE
from bwprof.coerce import NAME_CHARACTERS, shorten
from bwprof.errors import BwprofError
from bwprof.render.figstyle import (
    LABEL_POINTS,
    MIN_POINTS,
    PANEL_TITLE_POINTS,
    TEXT_POINTS,
    Candidate,
    around,
    laid_out,
    new_figure,
    place_clear,
    readable,
)
from bwprof.render.rooflineplot import ROOFLINE_PNG, roofline_figure
from bwprof.render.timeline import read_timelines, write_timeline_plots
from bwprof.schema import flags as f
from bwprof.schema.meta import RunMeta
from bwprof.store.atomic import save_figure
from bwprof.store.formats import cell_float
from bwprof.store.runfolder import machine_line
from bwprof.units import format_bytes

if TYPE_CHECKING:
    from bwprof.analysis.run import Run

BANDWIDTH_PNG = "bandwidth_vs_size.png"
SUMMARY_PNG = "summary_vs_peak.png"
TELEMETRY_PNG = "telemetry.png"
P2P_PNG = "p2p_heatmap.png"
LATENCY_PNG = "latency_vs_size.png"
LOADED_LATENCY_PNG = "latency_under_load.png"
NUMA_LATENCY_PNG = "numa_latency_heatmap.png"
P2P_LATENCY_PNG = "p2p_latency_heatmap.png"
PLOT_FILES = frozenset({BANDWIDTH_PNG, SUMMARY_PNG, TELEMETRY_PNG, P2P_PNG, LATENCY_PNG,
                        LOADED_LATENCY_PNG, NUMA_LATENCY_PNG, P2P_LATENCY_PNG, ROOFLINE_PNG})
"""Every fixed plot `write_plots` may write (the overlap timelines: `TIMELINE_FILE`)."""
FIGURE = figures.column("value")
"""The column every plot draws: a row's figure in the statistic every output shows (the
median, `bwprof.analysis.figures`), so a plot never shows a number the summary does not."""
STATISTIC = MEDIAN_BEYOND_CACHE.statistic
"""The statistic's name, said on every axis that shows it."""
LATENCY_AXIS = f"ns per dependent load, {STATISTIC}"
RESIDENT_LABEL = "fits in a cache: not the memory's figure"
SIMULATED_TITLE = "SIMULATED — not a measurement"
LABEL_ROOM = 1.15
"""Axis limits this far beyond the largest value, so a point's name fits inside the frame."""

_MEMORY_LABELS = {"ddr": "host DDR", "hbm": "device memory", "pinned": "pinned host memory",
                  "pageable": "pageable host memory", "host": "host buffers"}
_DIRECTION_LABELS = {"within": "within one memory", "h2d": "host→device",
                     "d2h": "device→host", "both": "both directions at once",
                     "p2p": "GPU→GPU", "net": "rank→rank over MPI (net_p2p)"}


def _figure(width: float, height: float):  # -> matplotlib.figure.Figure
    return new_figure(width, height)


TITLE_POINTS = 11
TITLE_MARGIN_INCHES = 0.4


def _text_inches(line: str, points: float) -> float:
    """Width of one line of text in the default font, measured from its glyphs."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    width, _height, _descent = TextToPath().get_text_width_height_descent(
        line, FontProperties(size=points), ismath=False)
    return width / 72


def _title(figure, what: str, meta: RunMeta, simulated: bool) -> None:
    """The title names what is drawn, the host and its GPUs; a figure too narrow for its
    longest line (a small P2P matrix, a long CPU name) is widened so nothing is cut off."""
    text = f"{what}\n{machine_line(meta)}"
    if simulated:
        text += f"\n{SIMULATED_TITLE}"
    needed = max(_text_inches(line, TITLE_POINTS) for line in text.splitlines())
    if figure.get_figwidth() < needed + TITLE_MARGIN_INCHES:
        figure.set_figwidth(needed + TITLE_MARGIN_INCHES)
    figure.suptitle(text, fontsize=TITLE_POINTS, color="firebrick" if simulated else "black")


def _size_formatter(value: float, _position: object) -> str:
    return format_bytes(int(value)) if value >= 1 else ""


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
SIZE_PAD = 1.6
"""A size axis reaches this factor beyond the smallest and largest size drawn in its family."""
PANEL_INCHES = 5.4
"""Width of one panel of the bandwidth figure."""
AXIS_INCHES = 4.2
"""Width of a panel's plotting area, its tick and axis labels taken off (about)."""
MAX_SIZE_LABELS = 9
"""Size ticks labelled at most; a longer sweep labels every second (third, ...) measured size,
each measured size still ticked."""


def _family(memory: str, direction: str) -> str:
    """Panels compared with each other share an x scale: the host's memory, the host↔device
    transfers (pinned, pageable, either direction), device memory, GPU↔GPU."""
    if direction in ("h2d", "d2h", "both"):
        return "transfer"
    return f"{memory}:{direction}"


def _threads_swept(rows: pd.DataFrame) -> pd.Series:
    """Which rows belong to a case and device measured at more than one thread count."""
    threads = rows["threads"].astype("Float64")
    counts = threads.groupby([rows["case"], rows["device"]]).transform("nunique")
    return (counts > 1).fillna(False).astype(bool)


def _series_label(case: str, device: str, line: pd.DataFrame, threads: str = "") -> str:
    label = f"{case} {device}{threads}"
    return label + (" (simulated)" if (line["backend"] == "simulated").any() else "")


def _resident_word(line: pd.DataFrame) -> pd.Series:
    return line["flags"].map(lambda text: "in L2" if f.has_flag(text, f.L2_RESIDENT)
                             else "in cache")


NEAR_POINTS = 11.0
"""How far (points) from a cache point its word may go: farther, it would name another."""
Label = tuple[str, list[Candidate], dict]
"""A text to place clear of the data (`figstyle.place_clear`): text, places, options."""


def _draw_series(axis, line: pd.DataFrame, x: pd.Series, resident: pd.Series, label: str,
                 marker: str, peak: float | None, single: bool, words: list[Label]) -> None:
    """One case and device: a line through its sizes (a marker at its one size, its value
    in the legend, where it has one); the points that fit in a cache hollow, joined by a
    dotted line and named (`in L2`, `in cache`, added to `words`, placed once the layout is
    known), so they never read as the memory's."""
    cached = resident[line.index]
    values = line[FIGURE].astype(float)
    if single:  # white-edged, so markers stacked at one size stay told apart
        drawn = axis.plot(x, values, linestyle="none", marker=marker, markersize=7,
                          markeredgecolor="white", markeredgewidth=0.8, alpha=0.9,
                          label=f"{label}: {_value_text(float(values.iloc[0]))}")[0]
    else:
        drawn = axis.plot(x, values, linestyle=":", linewidth=1, marker=None)[0]
        kept = ~cached
        axis.plot(x[kept], values[kept], linestyle="-", linewidth=1.4, marker=marker,
                  markersize=4, color=drawn.get_color(), label=label)
        if not kept.any():  # every point in a cache: the dotted line carries the name
            drawn.set_label(label)
    if cached.any():
        axis.plot(x[cached], values[cached], linestyle="none", marker=marker, markersize=7,
                  markerfacecolor="white", markeredgecolor=drawn.get_color())
        for xv, yv, word in zip(x[cached], values[cached], _resident_word(line[cached]),
                                strict=True):
            above = peak is not None and yv > peak
            xy = (float(xv), float(yv))
            # Up or down and right, then close around; where none is clear, the first, on a
            # white box over the line, rather than far off where it names another point.
            near = [place for place in around(xy) if abs(place[1][0]) <= NEAR_POINTS]
            words.append((word + (", above the peak" if above else ""),
                          [(xy, (6.0, 6.0), "left", "bottom"), (xy, (6.0, -6.0), "left", "top"),
                           *near],
                          {"fontsize": TEXT_POINTS, "color": drawn.get_color(),
                           "style": "italic"}))


def _value_text(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


NAME_GAP_POINTS = 1.3 * TEXT_POINTS
"""Height of one marker's name in a stack of them, in points."""
NAME_OFFSET_POINTS = 9.0
"""How far right of its marker a single-size marker's name starts, in points."""


@dataclass(frozen=True)
class _Name:
    """A single-size marker to be named beside it: its text, point, colour and line."""

    text: str
    x: float
    y: float
    colour: str
    line: object


def _spread(wanted: list[float], gap: float, low: float, high: float) -> list[float]:
    """Heights for names wanted at `wanted` (ascending, in points), each at least `gap` from
    the next and in the same order: a run of names too close is centred on where its names
    want to be; then the whole stack is kept between `low` and `high`."""
    blocks: list[list[float]] = []
    for value in wanted:
        blocks.append([value])
        while len(blocks) > 1:
            below, above = blocks[-2], blocks[-1]
            top = sum(below) / len(below) + (len(below) - 1) * gap / 2
            bottom = sum(above) / len(above) - (len(above) - 1) * gap / 2
            if bottom - top >= gap:
                break
            blocks[-2:] = [below + above]
    placed = [sum(block) / len(block) + (k - (len(block) - 1) / 2) * gap
              for block in blocks for k in range(len(block))]
    shift = max(0.0, low - placed[0]) if placed else 0.0
    if placed and placed[-1] + shift > high:
        shift = high - placed[-1]
    return [value + shift for value in placed]


def _name_markers(figure, axis, names: list[_Name], words: list[Label]) -> None:
    """Write each single-size marker's name and value to its right, then `words` (what
    fits in a cache) clear of them and of the data. The markers of kernels run at one size
    stand on one x, however close their figures: their names are stacked in the markers'
    order, each as near its marker's height as the others leave room for. Call it last: it
    solves the figure's layout and keeps it (`place_clear`)."""
    place_clear(figure, axis, [])  # the final layout: display heights are now true
    points = 72 / figure.dpi
    frame = axis.get_window_extent()
    low, high = frame.y0 * points + NAME_GAP_POINTS / 2, frame.y1 * points - NAME_GAP_POINTS / 2
    labels: list[Label] = []
    for x in dict.fromkeys(name.x for name in names):
        stack = sorted((name for name in names if name.x == x), key=lambda name: name.y)
        wanted = [float(axis.transData.transform((x, name.y))[1]) * points for name in stack]
        for name, want, at in zip(stack, wanted, _spread(wanted, NAME_GAP_POINTS, low, high),
                                  strict=True):
            labels.append((name.text, [((x, name.y), (NAME_OFFSET_POINTS, at - want), "left",
                                        "center")],
                           {"fontsize": TEXT_POINTS, "color": name.colour}))
    place_clear(figure, axis, labels + words)


def _size_panel(axis, mine: pd.DataFrame, resident: pd.Series,
                swept: set[tuple[str, str]]) -> tuple[list[_Name], list[Label]]:
    """Draw one panel against size, every point at the size it was measured at; returns
    its single-size markers and the words of its points in a cache, to be placed once the
    figure's layout is known."""
    from matplotlib.colors import to_hex

    metric = str(mine["metric"].iloc[0])
    unit = str(mine["unit"].iloc[0])
    peaks = sorted(mine["peak_value"].dropna().unique())
    peak = float(max(peaks)) if peaks else None
    groups = list(mine.groupby(["case", "device"], sort=False))
    singles = [key for key, line in groups if line["size_bytes"].nunique() == 1]
    devices = mine.loc[mine.set_index(["case", "device"]).index.isin(singles), "device"]
    names: list[_Name] = []
    words: list[Label] = []
    for index, ((case, device), line) in enumerate(groups):
        line = line.sort_values("size_bytes")
        x = line["size_bytes"].astype(float)
        single = (case, device) in singles
        threads = ""
        if line["threads"].notna().any() and (mine["threads"].nunique() > 1
                                               or (case, device) in swept):
            threads = f" ({int(line['threads'].dropna().iloc[0])} threads)"
        _draw_series(axis, line, x, resident, _series_label(str(case), str(device), line,
                                                            threads),
                     MARKERS[index % len(MARKERS)], peak, single, words)
        if single:
            value = float(line[FIGURE].iloc[0])
            name = str(case) + (f" {device}" if devices.nunique() > 1 else "")
            simulated = " (simulated)" if (line["backend"] == "simulated").any() else ""
            drawn = axis.get_lines()[-1]
            names.append(_Name(f"{name} {_value_text(value)}{simulated}", float(x.iloc[0]),
                               value,
                               to_hex(drawn.get_color()), drawn))
    for value in peaks:
        axis.axhline(value, linestyle="--", linewidth=1, color="grey")
        axis.annotate(f"theoretical peak {value:.0f} {unit}", (0.01, value),
                      xycoords=("axes fraction", "data"), fontsize=TEXT_POINTS, color="dimgrey",
                      va="bottom")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("transfer or array size (bytes, log scale)", fontsize=LABEL_POINTS)
    axis.set_ylabel(f"GB/s (10^9 bytes/s), {STATISTIC}" if metric == "bandwidth"
                    else f"{metric}, {unit}, {STATISTIC}", fontsize=LABEL_POINTS)
    return names, words


def _size_ticks(axis, sizes: list[float]) -> None:
    """Ticks at the sizes measured and nowhere else (no minor ticks): a log axis left to
    itself labels round sizes around a lone one (0.85 and 1.7 GiB around 1.2 GiB) as if they
    were run. A long sweep labels every k-th size, each still ticked."""
    from matplotlib.ticker import FixedLocator, NullLocator

    every = math.ceil(len(sizes) / MAX_SIZE_LABELS)
    axis.xaxis.set_major_locator(FixedLocator(sizes))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.set_xticks(sizes, [_size_formatter(size, None) if k % every == 0 else ""
                            for k, size in enumerate(sizes)])


def _threads_panel(axis, mine: pd.DataFrame) -> None:
    """A thread-count sweep: the figure against threads, a line per case, device and size."""
    peak = mine["peak_value"].dropna()
    for index, ((case, device, _size), line) in enumerate(
            mine.groupby(["case", "device", "size_bytes"], sort=False)):
        line = line.sort_values("threads")
        axis.plot(line["threads"].astype(float), line[FIGURE].astype(float),
                  marker=MARKERS[index % len(MARKERS)], markersize=5,
                  label=_series_label(str(case), str(device), line,
                                      f", {format_bytes(int(line['size_bytes'].iloc[0]))}"))
    if len(peak):
        axis.axhline(float(peak.max()), linestyle="--", linewidth=1, color="grey")
    threads = sorted(int(t) for t in mine["threads"].dropna().unique())
    axis.set_xscale("log", base=2)
    axis.set_xticks(threads, [str(t) for t in threads])
    axis.minorticks_off()
    axis.set_xlabel("threads (log scale)", fontsize=LABEL_POINTS)
    axis.set_ylabel(f"GB/s (10^9 bytes/s), {STATISTIC}", fontsize=LABEL_POINTS)


def _share_size_axes(panels: list[tuple[object, str, float]]) -> None:
    """One x range for the panels of each family (axis, family, inches the names of the
    single-size markers at its largest size need), spanning every point drawn in them with
    SIZE_PAD to spare, and room for those names at the right end. The room is blank: the axis
    labels only the sizes measured, so a reader never takes it for a size that was run."""
    extents: dict[str, tuple[float, float]] = {}
    named: dict[str, float] = {}
    for axis, family, inches in panels:
        xs = [float(x) for line in axis.get_lines()  # type: ignore[attr-defined]
              if line.get_transform() == axis.transData  # type: ignore[attr-defined]
              for x in line.get_xdata() if float(x) > 0]  # not the peak's axhline
        if xs:
            low, high = extents.get(family, (math.inf, 0.0))
            extents[family] = (min(low, min(xs)), max(high, max(xs)))
        named[family] = max(named.get(family, 0.0), inches)
    for axis, family, _inches in panels:
        if family in extents:
            low, high = extents[family]
            right = SIZE_PAD
            share = min(named.get(family, 0.0) / AXIS_INCHES, 0.6)  # of the axis, for names
            if share > 0:
                octaves = math.log2(high / low) + math.log2(SIZE_PAD)
                right = max(right, 2 ** (octaves * share / (1 - share)))
            axis.set_xlim(low / SIZE_PAD, high * right)  # type: ignore[attr-defined]


DRAWABLE = 1e100
"""Figures and peaks from this on (GB/s; a petabyte a second is 1e6) are no memory's: a
damaged results.csv's 1e308 overflowed matplotlib's tick steps."""


def _drawable(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a size axis (log) and a figure axis can show: a size above 0 and a figure
    under DRAWABLE; a peak of 0, 5e-324 or DRAWABLE on is no line. A damaged results.csv's
    other rows are left out of the picture only: the tables keep them."""
    rows = rows[(rows["size_bytes"] > 0) & (rows[FIGURE].abs() < DRAWABLE)]
    peak = rows["peak_value"].astype(float)
    normal = peak >= 2.2250738585072014e-308  # the smallest normal float: 5e-324 is none
    return rows.assign(peak_value=peak.where(normal & (peak < DRAWABLE)))


def bandwidth_figure(results: pd.DataFrame, meta: RunMeta):
    """Each figure against size, one panel per metric, memory kind and direction (GB/s for
    bandwidth; a throughput in TFLOP/s in panels of its own; latency is `latency_figure`'s);
    None when no row has a size.

    Every point stands at the size it was run at, and a size axis labels only the sizes
    measured. A case measured at one size is a marker, its name and value written beside it
    and in the legend (several such cases at one size share its x, each its own marker
    shape); a `--threads` sweep gets a panel against thread count of its own (the size
    panel keeps each case's largest thread count, named in its legend). Points whose buffers
    fit in a cache (`in_cache`, `l2_resident`) are hollow, joined by a dotted line and named
    (`in L2`, `in cache`; `, above the peak` where they pass its line). Panels compared with
    each other (the host↔device transfers) share one x scale."""
    from matplotlib.lines import Line2D

    rows = results[(results["status"] == "ok") & results[FIGURE].notna()
                   & results["size_bytes"].notna()
                   # Overlap parts and loaded latency have plots of their own; a pattern's
                   # copy-engine rows are its sweep (its SM twin would zigzag one line).
                   & results["phase"].isin(["", "copy_engine"])
                   & ~results["metric"].isin(["latency", "throughput"])]  # their own plots
    rows = _drawable(rows)
    if rows.empty:
        return None
    resident = cache_resident(rows)
    swept = _threads_swept(rows)
    keys = list(dict.fromkeys(zip(rows["metric"], rows["memory"], rows["direction"],
                                  strict=True)))
    panels: list[tuple[str, tuple[str, str, str], pd.DataFrame]] = []
    for metric, memory, direction in keys:
        mine = rows[(rows["metric"] == metric) & (rows["memory"] == memory)
                    & (rows["direction"] == direction)]
        sweep = mine[swept[mine.index]]
        if len(sweep):  # the size panel keeps each swept case's largest thread count
            most = sweep.groupby(["case", "device"])["threads"].transform("max")
            mine = mine.drop(sweep.index[sweep["threads"] != most])
        panels.append(("size", (metric, memory, direction), mine))
        if len(sweep):
            panels.append(("threads", (metric, memory, direction), sweep))
    columns = min(len(panels), 3)
    lines = math.ceil(len(panels) / columns)
    figure = new_figure(PANEL_INCHES * columns, 4.1 * lines + 0.9)
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    largest: dict[str, float] = {}
    for kind, (_metric, memory, direction), mine in panels:
        if kind == "size":
            family = _family(memory, direction)
            largest[family] = max(largest.get(family, 0.0), float(mine["size_bytes"].max()))
    names: dict[int, tuple[list[_Name], list[Label]]] = {}
    shared: list[tuple[object, str, float]] = []
    for index, (axis, (kind, (metric, memory, direction), mine)) in enumerate(
            zip(axes, panels, strict=False)):
        where = (("" if metric == "bandwidth" else f"{metric}: ")
                 + f"{_MEMORY_LABELS.get(memory, memory)}, "
                 f"{_DIRECTION_LABELS.get(direction, direction)}")
        if kind == "size":
            family = _family(memory, direction)
            names[index] = _size_panel(axis, mine, resident,
                                       set(zip(rows.loc[swept, "case"],
                                               rows.loc[swept, "device"], strict=True)))
            right = [_text_inches(name.text, TEXT_POINTS) for name in names[index][0]
                     if name.x >= largest[family]]
            shared.append((axis, family,
                           (max(right) + (NAME_OFFSET_POINTS + 4) / 72) if right else 0.0))
            _size_ticks(axis, sorted(float(s) for s in mine["size_bytes"].unique()))
            axis.tick_params(axis="x", labelrotation=45)
            axis.set_title(where, fontsize=PANEL_TITLE_POINTS)
        else:
            _threads_panel(axis, mine)
            axis.set_title(f"{where}: against thread count (--threads)",
                           fontsize=PANEL_TITLE_POINTS)
        axis.tick_params(labelsize=TEXT_POINTS)
        ys = [float(y) for line in axis.get_lines() for y in line.get_ydata()
              if line.get_transform() == axis.transData] + [
              float(v) for v in mine["peak_value"].dropna()]
        axis.set_ylim(0, 1.1 * max(ys) if ys and max(ys) > 0 else None)  # markers kept whole
        axis.grid(True, alpha=0.3)
        handles, _labels = axis.get_legend_handles_labels()
        named = {id(name.line) for name in names.get(index, ([], []))[0]}
        handles = [handle for handle in handles if id(handle) not in named]  # named beside
        if kind == "size" and resident[mine.index].any():
            handles.append(Line2D([], [], linestyle=":", marker="o", markerfacecolor="white",
                                  markeredgecolor="grey", color="grey", label=RESIDENT_LABEL))
        # Lower right: bandwidth rises with size, so that corner is the one left empty; a
        # panel of single-size markers has no such rise (a slow kernel drawn last sat under
        # the legend), so matplotlib finds the corner its few points leave free.
        singles_only = kind == "size" and bool(
            (mine.groupby(["case", "device"])["size_bytes"].nunique() == 1).all())
        if handles:
            axis.legend(handles=handles, fontsize=TEXT_POINTS,
                        loc="best" if singles_only else "lower right",
                        ncol=2 if len(handles) > 8 else 1)
    _share_size_axes(shared)
    for axis in axes[len(panels):]:
        axis.set_visible(False)
    simulated = bool((rows["backend"] == "simulated").any())
    what = ("Bandwidth against transfer size" if set(rows["metric"]) == {"bandwidth"}
            else "Figures against transfer or working-set size")
    _title(figure, what, meta, simulated)
    readable(figure)
    for index, (markers, words) in names.items():  # last: the data and legends are known
        if markers or words:
            _name_markers(figure, axes[index], markers, words)
    return figure


PATH_TITLES: dict[str, str] = {
    "ddr": "DDR: host memory", "hbm": "HBM: device memory",
    "h2d": "host→device (PCIe or C2C)", "d2h": "device→host (PCIe or C2C)",
    "p2p": "GPU↔GPU (NVLink or PCIe)", "net": "network: rank→rank",
}
PATH_COLOURS: dict[str, str] = {"ddr": "tab:blue", "hbm": "tab:red", "h2d": "tab:green",
                                "d2h": "tab:olive", "p2p": "tab:purple", "net": "tab:cyan"}
BAND_LABEL = "achievable band (% of peak)"
Band = Mapping[str, tuple[float, float]]
"""The achievable band of each summary path (`ddr`, `hbm`, `h2d`, ...): (low, high) in % of
the theoretical peak."""


def _summary_entries(summary: pd.DataFrame) -> pd.DataFrame:
    """The bandwidth rows the summary plot draws: those with a figure, and those that have
    none because every row of theirs fits in a cache (drawn as a note, never as a bar)."""
    bandwidth = summary["metric"] == "bandwidth"
    cached = summary["status"] == "in cache"
    drawable = ~(summary["gbps"].astype(float).abs() >= DRAWABLE)  # a damaged row's 1e308
    rows = summary[(bandwidth & summary["gbps"].notna() & drawable)
                   | (cached & summary["path"].isin(list(PATH_TITLES)))]
    huge = rows["peak_gbps"].astype(float) >= DRAWABLE  # its 309 digits collapsed the layout
    return rows.assign(pct_of_peak=rows["pct_of_peak"].where(~huge))


def summary_figure(summary: pd.DataFrame, meta: RunMeta, band: Band | None = None):
    """The summary's bandwidth figures, a panel per path (DDR, HBM, host→device, ...), one
    horizontal bar per figure. A path whose rows have a theoretical peak is drawn in % of
    it on a linear 0–100% axis (the peak is the right edge; `band`, where given, shades the
    path's achievable band); a path without a peak in GB/s from 0. A figure of a cache
    (`in cache`: no DRAM figure) is a note in its panel, never a bar. None without figures."""
    from matplotlib.patches import Patch

    rows = _summary_entries(summary)
    if rows.empty:
        return None
    paths = list(dict.fromkeys(rows["path"]))
    counts = [int((rows["path"] == path).sum()) for path in paths]
    figure = new_figure(9.5, max(3.2, 1.5 + sum(0.45 * n + 0.75 for n in counts)))
    axes = figure.subplots(len(paths), 1, squeeze=False,
                           gridspec_kw={"height_ratios": [n + 1.2 for n in counts]}).ravel()
    for axis, path in zip(axes, paths, strict=True):
        _summary_panel(axis, rows[rows["path"] == path], path,
                       None if band is None else band.get(path))
    if band:  # the panels name their paths; the legend says what the shading is
        figure.legend(handles=[Patch(color="tab:green", alpha=0.18, label=BAND_LABEL)],
                      loc="outside lower center", fontsize=TEXT_POINTS)
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, "Summary: measured bandwidth against theoretical peak", meta, simulated)
    return readable(figure)


def _bar_label(row: pd.Series) -> str:
    return f"{row['case']} {row['device']}" + (" (simulated)" if row["backend"] == "simulated"
                                              else "")


def _summary_panel(axis, rows: pd.DataFrame, path: str,
                   band: tuple[float, float] | None) -> None:
    """One path's bars: in % of peak where its rows have a peak, else in GB/s."""
    colour = PATH_COLOURS.get(path, "grey")
    shown = rows[rows["gbps"].notna()]
    in_percent = bool(shown["pct_of_peak"].notna().any())
    positions = list(range(len(rows)))[::-1]
    if in_percent:  # past 100 a little, so the dashed peak line shows
        top = max(105.0, 10 * math.ceil(float(shown["pct_of_peak"].max()) / 10) + 5)
        top = min(top, 1005.0)  # a damaged row's 1e99% would ask for 1e98 ticks
    else:
        top = 1.15 * float(shown["gbps"].max()) if len(shown) else 1.0
    if not 0 < top < DRAWABLE:  # figures of 0 or past 1e308 (a damaged results.csv)
        top = 1.0
    for position, (_, row) in zip(positions, rows.iterrows(), strict=True):
        gbps, peak, pct = (cell_float(row[c]) for c in ("gbps", "peak_gbps", "pct_of_peak"))
        cached = row["status"] == "in cache" or bool(f.is_cache_resident(row["flags"]))
        if gbps is None or cached:  # a cache's figure: never a bar of the memory's
            axis.text(0.01 * top, position, f"in a cache: no {PATH_LABELS[path]} figure (its "
                      "arrays or buffers are under 4× the cache; see summary.csv)",
                      va="center", fontsize=TEXT_POINTS, color="dimgrey", style="italic")
            continue
        if in_percent and pct is None:  # a row without a peak among rows with one
            axis.text(0.01 * top, position, f"{gbps:.1f} GB/s: no theoretical peak known",
                      va="center", fontsize=TEXT_POINTS)
            continue
        length = pct if in_percent and pct is not None else gbps
        axis.barh(position, length, color=colour, height=0.6)
        text = (f"{gbps:.1f} GB/s = {pct:.0f}% of {peak:.0f} GB/s" if in_percent
                else f"{gbps:.1f} GB/s")
        inside = length > 0.55 * top
        axis.annotate(text, (length, position), xytext=(-4 if inside else 4, 0),
                      textcoords="offset points", va="center", fontsize=TEXT_POINTS,
                      ha="right" if inside else "left", color="white" if inside else "black")
    if in_percent and band is not None:
        low, high = band
        axis.axvspan(low, high, color="tab:green", alpha=0.18, linewidth=0, zorder=0)
    if in_percent:
        axis.axvline(100, color="black", linewidth=1, linestyle="--")
        axis.set_xlim(0, top)
        axis.set_xticks(range(0, int(top) + 1, 10))
        axis.set_xlabel("% of the theoretical peak (linear; dashed line: the peak)",
                        fontsize=LABEL_POINTS)
    else:
        axis.set_xlim(0, top)
        axis.set_xlabel(f"GB/s (10^9 bytes/s), {STATISTIC} (no theoretical peak known for "
                        "this path)", fontsize=LABEL_POINTS)
    axis.set_ylim(-0.6, len(rows) - 0.4)
    axis.set_yticks(positions, [_bar_label(r) for _, r in rows.iterrows()],
                    fontsize=TEXT_POINTS + 1)
    axis.tick_params(axis="x", labelsize=TEXT_POINTS)
    axis.set_title(PATH_TITLES.get(path, PATH_LABELS[path]), fontsize=PANEL_TITLE_POINTS,
                   loc="left")
    axis.grid(True, axis="x", alpha=0.3)


def _case_spans(samples: pd.DataFrame) -> list[tuple[str, float, float]]:
    """(case, first t_s, last t_s) for each stretch of consecutive samples of one case."""
    ordered = samples.sort_values("t_s")
    cases = ordered["case"].fillna("").astype(str) if "case" in ordered else None
    if cases is None:
        return []
    spans: list[tuple[str, float, float]] = []
    for case, t in zip(cases, ordered["t_s"], strict=True):
        if spans and spans[-1][0] == case:
            spans[-1] = (case, spans[-1][1], float(t))
        else:
            spans.append((case, float(t), float(t)))
    return [span for span in spans if span[0]]


MIB_TO_GB = 1048576 / 1e9
MOVED = {"sm_clock_mhz": 30.0, "mem_clock_mhz": 30.0, "power_w": 25.0, "temperature_c": 10.0,
         "pcie_gen": 0.5, "pcie_width": 0.5}
"""How far (max - min) a counter of state must move to be drawn: a flat clock explains
nothing, a clock that dropped during a case does."""
COUNTER_WORDS = {
    "dram_bw_util_pct": "DRAM bandwidth used, % of peak (GPM)",
    "mem_util_pct": "memory busy time, % (NVML; not bandwidth)",
    "pcie": "PCIe throughput, GB/s (10^9 B/s)",
    "nvlink": "NVLink throughput, GB/s (10^9 B/s)",
    "sm_clock_mhz": "SM clock, MHz", "mem_clock_mhz": "memory clock, MHz",
    "power_w": "board power, W", "temperature_c": "GPU temperature, °C",
    "pcie_gen": "PCIe link generation", "pcie_width": "PCIe link width, lanes",
    "throttle_reasons": "throttle reasons (NVML bitmask)",
}


def _numbers(samples: pd.DataFrame, column: str) -> pd.Series | None:
    """A counter's values as numbers; None where the column is absent or empty."""
    if column not in samples:
        return None
    values = pd.to_numeric(samples[column], errors="coerce")
    return values if values.notna().any() else None


def _row_kinds(results: pd.DataFrame | None, samples: pd.DataFrame) -> set[str]:
    """What the run measured, as the telemetry panels need it: 'hbm' (device memory),
    'pcie' (host↔device transfers), 'p2p'. Without results, every kind the counters can
    speak of."""
    if results is None:
        return {"hbm", "pcie", "p2p"}
    ok = results[results["status"] == "ok"]
    direction = ok["direction"].fillna("").astype(str)
    kinds = set()
    if ((ok["memory"] == "hbm") & (direction == "within")).any():
        kinds.add("hbm")
    if direction.str.contains("h2d|d2h|both").any() & (ok["memory"] != "hbm").any():
        kinds.add("pcie")
    if (direction == "p2p").any():
        kinds.add("p2p")
    return kinds


def _telemetry_panels(samples: pd.DataFrame, results: pd.DataFrame | None
                      ) -> tuple[list[tuple[str, list[tuple[str, pd.Series, str]]]], list[str]]:
    """The panels that explain the run's figures, each (y label, [(series label suffix,
    values, line style)]), and a note per counter left out and why."""
    kinds = _row_kinds(results, samples)
    panels: list[tuple[str, list[tuple[str, pd.Series, str]]]] = []
    left: list[str] = []
    if "hbm" in kinds:  # DRAM utilisation validates the HBM figures; busy time where no GPM
        for column in ("dram_bw_util_pct", "mem_util_pct"):
            values = _numbers(samples, column)
            if values is not None:
                panels.append((COUNTER_WORDS[column], [("", values, "-")]))
                break
    for kind, prefix, pairs in (
            ("pcie", "pcie", (("rx", "host→device (rx)"), ("tx", "device→host (tx)"))),
            ("p2p", "nvlink", (("tx", "sent (tx)"), ("rx", "received (rx)")))):
        series = []
        for suffix, words in pairs:
            names = ([f"gpm_pcie_{suffix}_mibps", f"pcie_{suffix}_mibps"] if prefix == "pcie"
                     else [f"nvlink_{suffix}_mibps"])
            for column in names:
                values = _numbers(samples, column)
                if values is not None:
                    series.append((f" {words}", values * MIB_TO_GB,
                                   "-" if suffix == pairs[0][0] else "--"))
                    break
        moved = any(float(v.max()) > 0.1 for _, v, _ in series)
        if series and (kind in kinds and (kind == "pcie" or moved)):
            panels.append((COUNTER_WORDS[prefix], series))
    for column, threshold in MOVED.items():
        values = _numbers(samples, column)
        if values is None:
            continue
        low, high = float(values.min()), float(values.max())
        if high - low >= threshold:
            panels.append((COUNTER_WORDS[column], [("", values, "-")]))
        else:
            span = f"{low:g}" if high == low else f"{low:g}–{high:g}"
            name, _comma, unit = COUNTER_WORDS[column].partition(", ")
            left.append(f"{name} {span}{' ' + unit if unit and unit != 'lanes' else ''}")
    throttle = _numbers(samples, "throttle_reasons")
    if throttle is not None and (throttle.fillna(0) != 0).any():
        panels.append((COUNTER_WORDS["throttle_reasons"], [("", throttle, "-")]))
    elif throttle is not None:
        left.append("throttle reasons none")
    return panels, left


SPAN_LEADER_TOP = 1.04
"""Where a case's thin line ends above the top panel (axes fraction): its name starts there."""
SPAN_NAME_GAP_POINTS = 2.0
"""Between the end of that line and the case's name."""


def _name_spans(axis, spans: list[tuple[str, float, float]]) -> None:
    """Each case's name above the top panel, upright, pushed apart where short cases would
    overlap, with a thin line to the middle of its span."""
    from matplotlib.lines import Line2D

    if not spans:
        return
    low, high = axis.get_xlim()
    width = axis.get_figure().get_figwidth() * 0.9
    gap = (MIN_POINTS + 3) / 72 / width  # one upright line of text, in axes fraction
    wanted = [((start + end) / 2 - low) / (high - low) for _, start, end in spans]
    placed: list[float] = []
    for x in wanted:
        placed.append(max(x, placed[-1] + gap) if placed else x)
    for index in range(len(placed) - 1, -1, -1):  # pulled back within the axis
        ceiling = 1.0 if index == len(placed) - 1 else placed[index + 1] - gap
        placed[index] = min(placed[index], ceiling)
    # The thin lines are one Line2D, not an arrow per name: an annotation's arrow is clipped
    # to its text's box by a bezier search at every draw (a third of this figure's cost).
    leaders_x: list[float] = []
    leaders_y: list[float] = []
    for (case, _start, _end), x, at in zip(spans, placed, wanted, strict=True):
        axis.annotate(case, xy=(x, SPAN_LEADER_TOP), xycoords="axes fraction",
                      xytext=(0, SPAN_NAME_GAP_POINTS), textcoords="offset points",
                      rotation=90, ha="center", va="bottom", fontsize=TEXT_POINTS)
        leaders_x += [at, x, math.nan]
        leaders_y += [1.0, SPAN_LEADER_TOP, math.nan]
    axis.add_line(Line2D(leaders_x, leaders_y, transform=axis.transAxes, clip_on=False,
                         color="grey", linewidth=0.6))


def telemetry_figure(samples: pd.DataFrame | None, meta: RunMeta, simulated: bool = False,
                     results: pd.DataFrame | None = None):
    """The counters that explain the run's figures over time, a line per device, each case
    shaded and named: DRAM utilisation where the run measured device memory (GPM; NVML's
    busy time where the GPU has no GPM), PCIe throughput where it measured host↔device
    copies, NVLink where GPUs copied to each other and it moved, clocks, power, temperature
    and the PCIe link only where they moved beyond a small threshold (MOVED), throttle
    reasons where any was set. The counters left out are named with their range under the
    time axis; samples.csv holds them all. None without samples."""
    if samples is None or samples.empty or "t_s" not in samples:
        return None
    panels, left = _telemetry_panels(samples, results)
    if not panels:
        return None
    figure = new_figure(11, 2.2 + 1.9 * len(panels))
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False).ravel()
    spans = _case_spans(samples)
    devices = samples["device"].fillna("").astype(str) if "device" in samples else None
    groups = [("", pd.Series(True, index=samples.index))] if devices is None else [
        (d, devices == d) for d in dict.fromkeys(devices)]
    time = pd.to_numeric(samples["t_s"], errors="coerce")
    for axis, (label, series) in zip(axes, panels, strict=True):
        for device, mask in groups:
            for suffix, values, style in series:
                kept = mask & values.notna()  # GPM's samples come between NVML's
                axis.plot(time[kept], values[kept], linewidth=1, linestyle=style,
                          label=(device + suffix).strip() or None)
        for index, (_case, start, end) in enumerate(spans):
            axis.axvspan(start, end, color="tab:blue" if index % 2 else "tab:orange",
                         alpha=0.12, linewidth=0)
        axis.set_ylabel(textwrap.fill(label, 24), fontsize=LABEL_POINTS)
        axis.tick_params(labelsize=TEXT_POINTS)
        axis.grid(True, alpha=0.3)
        if axis.get_legend_handles_labels()[1]:
            axis.legend(fontsize=TEXT_POINTS, loc="upper right")
    axes[0].set_xlim(float(time.min()), float(time.max()))
    _name_spans(axes[0], spans)
    xlabel = "time since the run started (s); shaded: the case running"
    if left:
        xlabel += "\n" + textwrap.fill("Not drawn (flat; all counters are in samples.csv): "
                                       + ", ".join(left), 150)
    axes[-1].set_xlabel(xlabel, fontsize=LABEL_POINTS)
    _title(figure, "Hardware counters that explain the figures", meta, simulated)
    return readable(figure)


def _matrix_figure(rows: pd.DataFrame, pairs: list[tuple[str, str]], meta: RunMeta, what: str,
                   colour_label: str, cmap: str, axes: tuple[str, str],
                   top: float | None = None):
    """A heatmap of one figure per ordered pair (rows: the first of the pair, columns: the
    second), each cell's value written in it; colours from 0 to `top` (a bandwidth's
    theoretical peak) or, without one, to the largest figure, never fitted to the data's
    range: a 5% difference must not look like black against white. None with fewer than
    two members."""
    from matplotlib.colors import Normalize

    names = sorted({name for pair in pairs for name in pair}, key=lambda g: (len(g), g))
    if len(names) < 2:
        return None
    matrix = [[math.nan] * len(names) for _ in names]
    for (source, target), value in zip(pairs, rows[FIGURE], strict=True):
        matrix[names.index(source)][names.index(target)] = float(value)
    largest = max(v for line in matrix for v in line if not math.isnan(v))
    top = max(top or 0.0, largest)  # a figure above its peak still gets a colour
    norm = Normalize(vmin=0, vmax=top if top > 0 else 1)
    figure = _figure(2.4 + 0.9 * len(names), 2.2 + 0.8 * len(names))
    axis = figure.subplots()
    image = axis.imshow(matrix, cmap=cmap, norm=norm)
    colours = image.get_cmap()
    for i, line in enumerate(matrix):
        for j, value in enumerate(line):
            if not math.isnan(value):
                red, green, blue, _alpha = colours(norm(value))
                light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
                axis.text(j, i, f"{value:.3g}", ha="center", va="center",
                          color="black" if light else "white", fontsize=TEXT_POINTS + 1)
    axis.set_xticks(range(len(names)), names)
    axis.set_yticks(range(len(names)), names)
    axis.set_ylabel(axes[0])
    axis.set_xlabel(axes[1])
    bar = figure.colorbar(image, ax=axis)
    bar.set_label(colour_label, fontsize=LABEL_POINTS)
    bar.ax.tick_params(labelsize=TEXT_POINTS)
    axis.tick_params(labelsize=TEXT_POINTS + 1)
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, what, meta, simulated)
    return readable(figure)


def p2p_figure(results: pd.DataFrame, meta: RunMeta):
    """Matrix of p2p_copy GB/s at the size every pair was measured at; None with fewer than
    two GPUs."""
    rows = p2p_matrix_rows(results)
    rows = rows[rows[FIGURE].notna() & rows["device"].str.contains("->")]
    if rows.empty:
        return None
    pairs = [(a, b) for a, _, b in (str(d).partition("->") for d in rows["device"])]
    size = format_bytes(int(rows["size_bytes"].iloc[0]))
    peaks = pd.to_numeric(rows["peak_value"], errors="coerce").dropna()
    peak = float(peaks.max()) if len(peaks) else None
    scale = (f"0 to the peak, {peak:.0f} GB/s" if peak is not None
             else "0 to the largest: no peak known")
    return _matrix_figure(rows, pairs, meta,
                          f"GPU→GPU copy (p2p_copy, {size})\ncolours: {scale}",
                          f"GB/s (10^9 bytes/s), {STATISTIC}", "viridis", ("from", "to"), top=peak)


def p2p_latency_figure(results: pd.DataFrame, meta: RunMeta):
    """Matrix of lat_p2p ns (a GPU chasing through another GPU's memory); None with fewer
    than two GPUs."""
    rows = matrix_rows(results, P2P_LATENCY, "p2p")
    rows = rows[rows[FIGURE].notna() & rows["device"].str.contains("->")]
    if rows.empty:
        return None
    pairs = [(a, b) for a, _, b in (str(d).partition("->") for d in rows["device"])]
    size = format_bytes(int(rows["size_bytes"].iloc[0]))
    return _matrix_figure(rows, pairs, meta,
                          f"GPU→GPU load latency (lat_p2p, {size} working set)\n"
                          "colours: 0 to the largest",
                          f"{LATENCY_AXIS} (lower is better)",
                          "magma_r", ("GPU chasing", "GPU whose memory it reads"))


def numa_latency_figure(results: pd.DataFrame, meta: RunMeta):
    """Matrix of lat_host_numa ns: each node's CPUs (rows) reading each node's memory
    (columns); None on a host of one node."""
    rows = matrix_rows(results, NUMA_LATENCY)
    found = [numa_pair(d) for d in rows["device"]]
    keep = [pair is not None for pair in found]
    rows = rows[keep]
    pairs = [pair for pair in found if pair is not None]
    if rows.empty:
        return None
    size = format_bytes(int(rows["size_bytes"].iloc[0]))
    return _matrix_figure(rows, pairs, meta,
                          f"Host load latency across NUMA nodes (lat_host_numa, {size})\n"
                          "colours: 0 to the largest",
                          f"{LATENCY_AXIS} (lower is better)",
                          "magma_r", ("CPUs of node", "memory of node"))


def _cache_marks(case: str, rows: pd.DataFrame, meta: RunMeta) -> list[tuple[int, str]]:
    """(size, label) of the caches a latency sweep crosses: the host's levels (per instance,
    as system.json lists them) for a host chase, the GPU's L2 for a chase of its memory."""
    marks: list[tuple[int, str]] = []
    host_chase = case == HOST_LATENCY or (case != GPU_LATENCY
                                          and (rows["backend"] == "host").all())
    gpu_chase = case == GPU_LATENCY or (not host_chase and (rows["memory"] == "hbm").all()
                                        and (rows["direction"] == "within").all())
    if host_chase and meta.host is not None:
        for cache in meta.host.caches:
            if cache.type == "Instruction":
                continue
            name = f"L{cache.level}{'d' if cache.type == 'Data' else ''}"
            marks.append((cache.size_bytes, f"{name} {format_bytes(cache.size_bytes)}"))
    elif gpu_chase:
        sizes = dict.fromkeys(d.properties.l2_bytes for d in meta.gpus.devices
                              if d.properties.l2_bytes)
        marks += [(size, f"L2 {format_bytes(size)}") for size in sizes]
    return marks


def _latency_sweeps(results: pd.DataFrame) -> pd.DataFrame:
    """Latency rows that sweep the working set: ok, idle (no load phase), the pair and
    small-copy cases left to their own views."""
    rows = results[(results["metric"] == "latency") & (results["status"] == "ok")
                   & results[FIGURE].notna() & results["size_bytes"].notna()
                   & ~results["phase"].map(is_loaded).astype(bool)
                   & ~results["case"].isin((NUMA_LATENCY, MEMCPY_LATENCY))]
    swept = rows.groupby(["case", "device"])["size_bytes"].transform("nunique") > 1
    return rows[swept]


def _line_label(case: str, device: str, line: pd.DataFrame, several_pages: bool) -> str:
    label = f"{case} {device}"
    if several_pages and line["page_bytes"].notna().any():
        label += f", {format_bytes(int(line['page_bytes'].dropna().iloc[0]))} pages"
    if (line["backend"] == "simulated").any():
        label += " (simulated)"
    return label


def _beside_line(size: int) -> list[Candidate]:
    """Where a cache's rotated name may go: beside its dotted line, at the top of the
    frame, at the bottom or between, left or right, whichever the data leaves clear."""
    places: list[Candidate] = []
    for gap in (2.0, 6.0):
        for y, va in ((0.98, "top"), (0.02, "bottom"), (0.5, "center"), (0.75, "center"),
                      (0.25, "center")):
            for dx, ha in ((-gap, "right"), (gap, "left")):
                places.append(((size, y), (dx, 0.0), ha, va))
    return places


LOG_TICK_DECADES = 3.0
"""Up to this many decades a log latency axis labels 1, 2 and 5 of each; beyond, only the
powers of ten (labelling every minor tick crowded 0.8, 0.9, 1 and 8, 9, 10 together)."""


def _latency_ticks(axis, values: pd.Series) -> None:
    """Labelled ticks at 1-2-5 of each decade (powers of ten only across a wide range), the
    other minor ticks unlabelled, plain numbers rather than 10^n."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    values = values[values >= sys.float_info.min]  # a log axis: no 0, nor a subnormal
    decades = (math.log10(values.max()) - math.log10(values.min())) if len(values) else 0.0
    subs = (1.0, 2.0, 5.0) if decades <= LOG_TICK_DECADES else (1.0,)
    axis.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.yaxis.set_minor_formatter(NullFormatter())


def latency_figure(results: pd.DataFrame, meta: RunMeta):
    """Load latency against working-set size: a panel per sweeping case (the host chase,
    the GPU chase, ...), one line per device (and page size, where a device has several),
    cache sizes as dotted vertical lines, cache-resident points hollow. None without a
    latency sweep."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    rows = _latency_sweeps(results)
    if rows.empty:
        return None
    order = {HOST_LATENCY: 0, GPU_LATENCY: 1}
    cases = sorted(dict.fromkeys(rows["case"]), key=lambda c: order.get(c, 2))
    columns = min(len(cases), 3)
    lines = math.ceil(len(cases) / columns)
    figure = _figure(5.6 * columns, 4.2 * lines + 0.8)
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    resident = cache_resident(rows)
    marks: list[tuple[object, tuple[str, list[Candidate], dict]]] = []
    for axis, case in zip(axes, cases, strict=False):
        mine = rows[rows["case"] == case]
        pages = mine.groupby("device")["page_bytes"].nunique()
        several_pages = bool((pages > 1).any())
        keys = ["device", "page_bytes"] if several_pages else ["device"]
        for key, line in mine.groupby(keys, sort=False, dropna=False):
            device = str(key[0] if isinstance(key, tuple) else key)
            line = line.sort_values("size_bytes")
            drawn = axis.plot(line["size_bytes"].astype(float), line[FIGURE], marker="o",
                              markersize=3,
                              label=_line_label(case, device, line, several_pages))[0]
            cached = resident[line.index]
            if cached.any():
                axis.plot(line.loc[cached, "size_bytes"].astype(float),
                          line.loc[cached, FIGURE], linestyle="none", marker="o",
                          markersize=6, markerfacecolor="white",
                          markeredgecolor=drawn.get_color())
        for size, label in _cache_marks(case, mine, meta):
            axis.axvline(size, linestyle=":", linewidth=1, color="grey")
            marks.append((axis, (label, _beside_line(size), {
                "xycoords": ("data", "axes fraction"), "fontsize": TEXT_POINTS,
                "color": "grey", "rotation": 90})))
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.xaxis.set_major_formatter(FuncFormatter(_size_formatter))
        _latency_ticks(axis, mine[FIGURE].astype(float))
        axis.tick_params(axis="x", labelrotation=45, labelsize=TEXT_POINTS)
        axis.set_xlabel("working-set size (bytes, log scale)")
        axis.set_ylabel(f"{LATENCY_AXIS} (log scale)")
        where = ("host" if (mine["backend"] == "host").all() else "GPU")
        memory = _MEMORY_LABELS.get(str(mine["memory"].iloc[0]), str(mine["memory"].iloc[0]))
        axis.set_title(f"{where} load latency ({case}): {memory}", fontsize=9)
        axis.grid(True, which="both", alpha=0.3)
        handles, _labels = axis.get_legend_handles_labels()
        if resident[mine.index].any():
            handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="white",
                                  markeredgecolor="grey", label=RESIDENT_LABEL))
        axis.legend(handles=handles, fontsize=TEXT_POINTS,
                    loc="lower right",  # the cache names are at the top
                    ncol=2 if len(handles) > 8 else 1)
    for axis in axes[len(cases):]:
        axis.set_visible(False)
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, "Load latency against working-set size (one dependent load at a time)",
           meta, simulated)
    readable(figure)
    for axis in axes[:len(cases)]:  # last: where the data and legend are is known
        place_clear(figure, axis, [label for owner, label in marks if owner is axis])
    return figure


def loaded_latency_figure(results: pd.DataFrame, meta: RunMeta):
    """Latency against the bandwidth a concurrent streaming load achieved (`load_gbps`), a
    panel per loaded case, one line per device, each point named by the load's nominal
    intensity; None without loaded rows."""
    rows = results[(results["metric"] == "latency") & (results["status"] == "ok")
                   & results[FIGURE].notna()
                   & results["phase"].map(is_loaded).astype(bool)].copy()
    if rows.empty:
        return None
    rows["percent"] = rows["phase"].map(load_percent)
    idle = rows["percent"].eq(0) & rows["load_gbps"].isna()
    rows.loc[idle, "load_gbps"] = 0.0  # the idle chase: no load at all
    rows = rows[rows["load_gbps"].notna()]
    if rows.empty:
        return None
    cases = list(dict.fromkeys(rows["case"]))
    figure = _figure(5.6 * len(cases), 4.4)
    axes = figure.subplots(1, len(cases), squeeze=False).ravel()
    names: list[tuple[object, tuple[str, list[Candidate], dict]]] = []
    for axis, case in zip(axes, cases, strict=True):
        mine = rows[rows["case"] == case]
        for device, line in mine.groupby("device", sort=False):
            line = line.sort_values(["percent", "load_gbps"])
            label = f"{case} {device}" + (" (simulated)" if (line["backend"] == "simulated")
                                          .any() else "")
            axis.plot(line["load_gbps"].astype(float), line[FIGURE], marker="o",
                      markersize=4, label=label)
            for _, point in line.iterrows():
                xy = (float(point["load_gbps"]), float(point[FIGURE]))
                names.append((axis, (f"{point['percent']}%", around(xy),
                                     {"fontsize": TEXT_POINTS})))
        # Room above and right of the highest and widest points for their names.
        widest = float(mine["load_gbps"].max())  # 0 where no load ran (a simulated GPU)
        axis.set_xlim(0, widest * LABEL_ROOM if widest > 0 else 1.0)
        axis.set_ylim(0, float(mine[FIGURE].max()) * LABEL_ROOM)
        axis.set_xlabel("bandwidth the concurrent load achieved (GB/s, 10^9 bytes/s)")
        axis.set_ylabel(LATENCY_AXIS)
        where = "host" if (mine["backend"] == "host").all() else "GPU"
        axis.set_title(f"{where} latency under load ({case}); labels: the load's nominal "
                       "intensity", fontsize=8)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=TEXT_POINTS, loc="upper left")
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, "Load latency under a concurrent streaming load", meta, simulated)
    readable(figure)
    for axis in axes:  # last: where the data and legend are is known
        place_clear(figure, axis, [name for owner, name in names if owner is axis])
    return figure


def cut_texts(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every text cell longer than NAME_CHARACTERS shortened (`shorten`, as the
    machine's names are): a case name, unit, note or device of 100,000 characters from a run
    folder is drawn as about 80, where matplotlib laid out every glyph (16-56 s for one
    report). Short texts are kept as they are, so a case is still known by its name; the
    run's files keep every text whole."""
    cut = frame
    for name in frame.columns:
        column = frame[name]
        if column.dtype != object and not isinstance(column.dtype, pd.StringDtype):
            continue
        try:
            long = (column.str.len() > NAME_CHARACTERS).fillna(False).astype(bool)
        except AttributeError:  # no text in it
            continue
        if long.any():
            if cut is frame:
                cut = frame.copy()
            shortened = column.copy()  # the other cells as they are (None stays None)
            shortened[long] = column[long].map(cut_text)
            cut[name] = shortened
    return cut


def cut_ceilings(found: Ceilings) -> Ceilings:
    """The run's ceilings (worked out once, from its whole texts) with each text longer than
    NAME_CHARACTERS cut as `cut_texts` cuts a cell: what the roofline draws."""
    def short(text: str) -> str:
        return cut_text(text) if len(text) > NAME_CHARACTERS else text

    def cut(ceiling: Ceiling) -> Ceiling:
        return replace(ceiling, device=short(ceiling.device), label=short(ceiling.label),
                       case=short(ceiling.case), dtype=short(ceiling.dtype))
    return Ceilings([cut(c) for c in found.compute], [cut(c) for c in found.bandwidth])


def cut_text(text: str) -> str:
    """`text` as `shorten` cuts it, with a digest of the whole: two long case names that
    share their head and tail stay two series, not one."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{shorten(text, NAME_CHARACTERS - 10)} {digest}"


def _cut_timelines(timelines: Sequence[dict]) -> list[dict]:
    """The recorded timelines with their case and device names shortened as `cut_texts`
    does (each is a figure's title)."""
    return [{**entry, **{key: cut_text(entry[key]) for key in ("case", "device")
                         if isinstance(entry.get(key), str)
                         and len(entry[key]) > NAME_CHARACTERS}}
            if isinstance(entry, dict) else entry for entry in timelines]


def write_plots(run: Run, out_dir: Path | None = None,
                notes: list[str] | None = None, band: Band | None = None) -> list[Path]:
    """Write every plot that has data into `out_dir` (default: the run folder); why the
    timeline plots could not be drawn goes to `notes`; `band` (each path's achievable band,
    % of peak) is shaded in the summary plot."""
    target = out_dir or run.path
    if target is None:
        raise ValueError("write_plots needs a folder: the run has none")
    # Free texts of the run folder (case names, units, notes) enter the plots here, cut.
    results = cut_texts(run.results)
    summary = cut_texts(run.summary)
    samples = None if run.samples is None else cut_texts(run.samples)
    simulated = run.simulated
    drawn = {
        BANDWIDTH_PNG: bandwidth_figure(results, run.meta),
        SUMMARY_PNG: summary_figure(summary, run.meta, band),
        TELEMETRY_PNG: telemetry_figure(samples, run.meta, simulated, results),
        P2P_PNG: p2p_figure(results, run.meta),
        LATENCY_PNG: latency_figure(results, run.meta),
        LOADED_LATENCY_PNG: loaded_latency_figure(results, run.meta),
        NUMA_LATENCY_PNG: numa_latency_figure(results, run.meta),
        P2P_LATENCY_PNG: p2p_latency_figure(results, run.meta),
        ROOFLINE_PNG: roofline_figure(cut_ceilings(run.ceilings), run.machine,
                                      SIMULATED_TITLE),
    }
    written = []
    for name, figure in drawn.items():
        if figure is not None:
            written.append(save_figure(laid_out(figure), target / name))
    # The overlap timelines, from the event times the run recorded (timelines.json).
    names = " + ".join(sorted({shorten(d.name, NAME_CHARACTERS) for d in run.meta.gpus.devices}))
    try:
        timelines = (run.timelines if run.timelines is not None
                     else read_timelines(run.path) if run.path is not None else [])
        written += write_timeline_plots(target, _cut_timelines(timelines),
                                        shorten(run.host, NAME_CHARACTERS), names, results)
    except (BwprofError, KeyError, TypeError, ValueError) as exc:  # a damaged file
        if notes is not None:  # the other plots stand
            notes.append(f"timeline plots not drawn: {type(exc).__name__}: {exc}")
    return written
