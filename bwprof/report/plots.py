"""PNG plots of a run folder (matplotlib, Agg, no display needed).

- `bandwidth_vs_size.png`: GB/s against transfer size (log x), one panel per memory kind and
  direction, one line per case and device, the theoretical peak as a dashed line.
- `summary_vs_peak.png`: the summary's figures (DDR, HBM, PCIe, P2P) as bars beside their peaks.
- `telemetry.png`: the counters of `samples.csv` over time, each case shaded (only when the run
  recorded telemetry).
- `p2p_heatmap.png`: GPU-to-GPU bandwidth as a matrix (only with two GPUs or more).

Every title names the host and its GPUs; a plot with simulated rows says "SIMULATED — not a
measurement" in its title. Figures are built with `matplotlib.figure.Figure` (no pyplot state),
so plotting is safe to call from a library. Nothing here touches hardware.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from bwprof.errors import BwprofError
from bwprof.report.atomic import save_figure
from bwprof.report.formats import cell_float
from bwprof.report.runfolder import RunFolder, machine_line
from bwprof.report.summary import PATH_LABELS, build_summary, cache_resident, p2p_matrix_rows
from bwprof.report.timeline import read_timelines, write_timeline_plots
from bwprof.schema.meta import RunMeta
from bwprof.units import format_bytes

BANDWIDTH_PNG = "bandwidth_vs_size.png"
SUMMARY_PNG = "summary_vs_peak.png"
TELEMETRY_PNG = "telemetry.png"
P2P_PNG = "p2p_heatmap.png"
SIMULATED_TITLE = "SIMULATED — not a measurement"
MAX_COUNTER_PANELS = 8
_NOT_COUNTERS = {"t_s", "size_bytes", "threads", "sample", "index", "schema_version",
                 "numa_node", "streams"}

_MEMORY_LABELS = {"ddr": "host DDR", "hbm": "device memory", "pinned": "pinned host memory",
                  "pageable": "pageable host memory", "host": "host buffers"}
_DIRECTION_LABELS = {"within": "within one memory", "h2d": "host→device",
                     "d2h": "device→host", "both": "both directions at once",
                     "p2p": "GPU→GPU", "net": "rank→rank over MPI (net_p2p)"}


def _figure(width: float, height: float):  # -> matplotlib.figure.Figure
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


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


def bandwidth_figure(results: pd.DataFrame, meta: RunMeta):
    """Each figure against size, one panel per metric, memory kind and direction (GB/s for
    bandwidth; a latency in ns, a throughput in TFLOP/s, each in panels of its own); None
    when no row has a size. Points whose buffers fit in a cache (`in_cache`,
    `l2_resident`) are drawn hollow: they are not the memory's figure and may pass its peak
    line."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    rows = results[(results["status"] == "ok") & results["value_best"].notna()
                   & results["size_bytes"].notna() & (results["phase"] == "")]
    if rows.empty:
        return None
    resident = cache_resident(rows)
    panels = list(dict.fromkeys(zip(rows["metric"], rows["memory"], rows["direction"],
                                    strict=True)))
    columns = min(len(panels), 3)
    lines = math.ceil(len(panels) / columns)
    figure = _figure(5.2 * columns, 3.9 * lines + 0.8)
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    for axis, (metric, memory, direction) in zip(axes, panels, strict=False):
        mine = rows[(rows["metric"] == metric) & (rows["memory"] == memory)
                    & (rows["direction"] == direction)]
        unit = str(mine["unit"].iloc[0])
        bandwidth = metric == "bandwidth"
        for (case, device), line in mine.groupby(["case", "device"], sort=False):
            line = line.sort_values("size_bytes")
            label = f"{case} {device}" + (" (simulated)" if (line["backend"] == "simulated")
                                          .any() else "")
            drawn = axis.plot(line["size_bytes"].astype(float), line["value_best"], marker="o",
                              markersize=3, label=label)[0]
            cached = resident[line.index]
            if cached.any():  # hollow markers over the cache-resident points
                axis.plot(line.loc[cached, "size_bytes"].astype(float),
                          line.loc[cached, "value_best"], linestyle="none", marker="o",
                          markersize=6, markerfacecolor="white",
                          markeredgecolor=drawn.get_color())
        for peak in sorted(mine["peak_value"].dropna().unique()):
            axis.axhline(peak, linestyle="--", linewidth=1, color="grey")
            axis.annotate(f"peak {peak:.0f} {unit}", (0.01, peak), xycoords=("axes fraction",
                          "data"), fontsize=7, color="grey", va="bottom")
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_formatter(FuncFormatter(_size_formatter))
        axis.tick_params(axis="x", labelrotation=45, labelsize=7)
        axis.set_xlabel("transfer or array size (bytes, log scale)")
        axis.set_ylabel("GB/s (10^9 bytes/s), best" if bandwidth else f"{metric}, {unit}, best")
        axis.set_ylim(bottom=0)
        axis.set_title(("" if bandwidth else f"{metric}: ")
                       + f"{_MEMORY_LABELS.get(memory, memory)}, "
                       f"{_DIRECTION_LABELS.get(direction, direction)}", fontsize=9)
        axis.grid(True, alpha=0.3)
        handles, _labels = axis.get_legend_handles_labels()
        if resident[mine.index].any():
            handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="white",
                                  markeredgecolor="grey",
                                  label="fits in a cache: not the memory's figure"))
        axis.legend(handles=handles, fontsize=6,
                    ncol=2 if mine.groupby(["case", "device"]).ngroups > 8 else 1)
    for axis in axes[len(panels):]:
        axis.set_visible(False)
    simulated = bool((rows["backend"] == "simulated").any())
    what = ("Bandwidth against transfer size" if set(rows["metric"]) == {"bandwidth"}
            else "Figures against transfer or working-set size")
    _title(figure, what, meta, simulated)
    return figure


def summary_figure(summary: pd.DataFrame, meta: RunMeta):
    """Horizontal bars: each summary figure in GB/s beside its peak; None without figures."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    rows = summary[summary["gbps"].notna() & (summary["metric"] == "bandwidth")]
    if rows.empty:
        return None
    labels = [
        f"{PATH_LABELS[str(r['path'])]}  {r['case']} {r['device']}"
        + (" (simulated)" if r["backend"] == "simulated" else "")
        for _, r in rows.iterrows()
    ]
    figure = _figure(10, 1.2 + 0.42 * len(rows))
    axis = figure.subplots()
    positions = list(range(len(rows)))[::-1]
    colours = {"ddr": "tab:blue", "hbm": "tab:red", "h2d": "tab:green", "d2h": "tab:olive",
               "p2p": "tab:purple"}
    axis.barh(positions, rows["gbps"], color=[colours.get(p, "grey") for p in rows["path"]])
    # The legend names each path's colour (the bars are coloured by path) and the peak box.
    handles = [Patch(color=colours.get(path, "grey"), label=f"{PATH_LABELS[path]}, best")
               for path in dict.fromkeys(rows["path"])]
    peaks = rows["peak_gbps"]
    if peaks.notna().any():
        axis.barh(positions, peaks.fillna(0), fill=False, edgecolor="black", linewidth=0.8)
        handles.append(Patch(fill=False, edgecolor="black", label="theoretical peak"))
    for position, (_, row) in zip(positions, rows.iterrows(), strict=True):
        gbps, peak, pct = (cell_float(row[c]) for c in ("gbps", "peak_gbps", "pct_of_peak"))
        text = f"{gbps:.1f} GB/s"
        if pct is not None:
            text += f" ({pct:.0f}% of peak)"
        end = max(gbps or 0.0, peak or 0.0)
        axis.annotate(text, (end, position), xytext=(3, 0), textcoords="offset points",
                      va="center", fontsize=7)  # right of the bar and its peak box
    axis.set_yticks(positions, labels, fontsize=8)
    axis.set_xscale("log")
    # Room right of the longest bar or peak for its label (log scale: a factor, not a sum).
    longest = float(max(rows["gbps"].max(), peaks.max(skipna=True) if peaks.notna().any() else 0))
    axis.set_xlim(float(rows["gbps"].min()) / 2, 4 * longest)
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    axis.set_xlabel("GB/s (10^9 bytes/s), log scale")
    axis.grid(True, axis="x", alpha=0.3)
    axis.legend(handles=handles, fontsize=7, loc="lower right")
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, "Summary: measured bandwidth against theoretical peak", meta, simulated)
    return figure


def _counters(samples: pd.DataFrame) -> list[str]:
    names = []
    for column in samples.columns:
        if column in _NOT_COUNTERS or "reason" in column or column in ("device", "case"):
            continue
        values = pd.to_numeric(samples[column], errors="coerce")
        if values.notna().any():
            names.append(column)
    return names


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


def telemetry_figure(samples: pd.DataFrame | None, meta: RunMeta, simulated: bool = False):
    """One panel per counter over time, a line per device, each case shaded."""
    if samples is None or samples.empty:
        return None
    counters = _counters(samples)
    if not counters:
        return None
    shown = counters[:MAX_COUNTER_PANELS]
    figure = _figure(11, 1.0 + 1.9 * len(shown))
    axes = figure.subplots(len(shown), 1, sharex=True, squeeze=False).ravel()
    spans = _case_spans(samples)
    devices = samples["device"].fillna("").astype(str) if "device" in samples else None
    for axis, counter in zip(axes, shown, strict=True):
        values = pd.to_numeric(samples[counter], errors="coerce")
        groups = [("", slice(None))] if devices is None else [
            (d, devices == d) for d in dict.fromkeys(devices)
        ]
        for device, mask in groups:
            axis.plot(samples["t_s"][mask], values[mask], linewidth=1, label=device or None)
        for index, (case, start, end) in enumerate(spans):
            axis.axvspan(start, end, color="tab:blue" if index % 2 else "tab:orange",
                         alpha=0.12, linewidth=0)
            if axis is axes[0]:
                # Upright names: a short case's span is narrower than its name laid flat.
                axis.annotate(case, ((start + end) / 2, 0.97), xycoords=("data", "axes fraction"),
                              fontsize=6, ha="center", va="top", rotation=90,
                              bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0})
        axis.set_ylabel(counter, fontsize=7)
        axis.grid(True, alpha=0.3)
        if devices is not None and axis is axes[0]:
            axis.legend(fontsize=6, loc="upper right")
    axes[-1].set_xlabel("time since the run started (s); shaded: the case running")
    what = "Hardware counters over time"
    if len(counters) > len(shown):
        what += f" (first {len(shown)} of {len(counters)} counters; all in samples.csv)"
    _title(figure, what, meta, simulated)
    return figure


def p2p_figure(results: pd.DataFrame, meta: RunMeta):
    """Matrix of p2p_copy GB/s at the size every pair was measured at; None with fewer than
    two GPUs."""
    rows = p2p_matrix_rows(results)
    rows = rows[rows["value_best"].notna() & rows["device"].str.contains("->")]
    if rows.empty:
        return None
    pairs = [tuple(d.split("->")) for d in rows["device"]]
    gpus = sorted({g for pair in pairs for g in pair}, key=lambda g: (len(g), g))
    if len(gpus) < 2:
        return None
    matrix = [[math.nan] * len(gpus) for _ in gpus]
    for (source, target), value in zip(pairs, rows["value_best"], strict=True):
        matrix[gpus.index(source)][gpus.index(target)] = float(value)
    figure = _figure(1.6 + 0.9 * len(gpus), 1.9 + 0.8 * len(gpus))
    axis = figure.subplots()
    image = axis.imshow(matrix, cmap="viridis")
    for i, line in enumerate(matrix):
        for j, value in enumerate(line):
            if not math.isnan(value):
                axis.text(j, i, f"{value:.3g}", ha="center", va="center", color="white",
                          fontsize=8)
    axis.set_xticks(range(len(gpus)), gpus)
    axis.set_yticks(range(len(gpus)), gpus)
    axis.set_xlabel("to")
    axis.set_ylabel("from")
    figure.colorbar(image, ax=axis, label="GB/s (10^9 bytes/s), best")
    size = format_bytes(int(rows["size_bytes"].iloc[0]))
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, f"GPU→GPU copy (p2p_copy, {size})", meta, simulated)
    return figure


def write_plots(run: RunFolder, out_dir: Path | None = None,
                notes: list[str] | None = None) -> list[Path]:
    """Write every plot that has data into `out_dir` (default: the run folder); why the
    timeline plots could not be drawn goes to `notes`."""
    target = out_dir or run.path
    summary = build_summary(run.results)
    simulated = run.simulated
    figures = {
        BANDWIDTH_PNG: bandwidth_figure(run.results, run.meta),
        SUMMARY_PNG: summary_figure(summary, run.meta),
        TELEMETRY_PNG: telemetry_figure(run.samples, run.meta, simulated),
        P2P_PNG: p2p_figure(run.results, run.meta),
    }
    written = []
    for name, figure in figures.items():
        if figure is not None:
            written.append(save_figure(figure, target / name))
    # The overlap timelines, from the event times the run recorded in timelines.json.
    names = " + ".join(sorted({d.name for d in run.meta.gpus.devices}))
    try:
        written += write_timeline_plots(target, read_timelines(run.path), run.host, names)
    except (BwprofError, KeyError, TypeError, ValueError) as exc:  # a damaged file
        if notes is not None:  # the other plots stand
            notes.append(f"timeline plots not drawn: {type(exc).__name__}: {exc}")
    return written
