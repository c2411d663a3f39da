"""PNG plots of a run folder (matplotlib, Agg, no display needed).

- `bandwidth_vs_size.png`: GB/s against transfer size (log x), one panel per memory kind and
  direction, one line per case and device, the theoretical peak as a dashed line.
- `summary_vs_peak.png`: the summary's figures (DDR, HBM, PCIe, P2P) as bars beside their peaks.
- `telemetry.png`: the counters of `samples.csv` over time, each case shaded (only when the run
  recorded telemetry).
- `p2p_heatmap.png`: GPU-to-GPU bandwidth as a matrix (only with two GPUs or more).
- `latency_vs_size.png`: load latency against working-set size (log x, log y), a panel for
  the host chase and one for the GPU chase (and one for any other latency sweep), one line
  per device, the cache sizes as dotted vertical lines (host: each level's per-instance
  size from system.json; GPU: its L2), cache-resident points hollow.
- `latency_under_load.png`: latency against the bandwidth a concurrent streaming load
  achieved (`load_N` rows), a panel per loaded case, one line per device.
- `numa_latency_heatmap.png`, `p2p_latency_heatmap.png`: latency from each NUMA node's CPUs
  to each node's memory, and from each GPU to each other's memory (only with two or more).

Every heatmap's colours run from 0, not from the smallest figure, so a small difference
does not look like a large one. A plot without rows is not drawn.

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
from bwprof.report.summary import (
    GPU_LATENCY,
    HOST_LATENCY,
    MEMCPY_LATENCY,
    NUMA_LATENCY,
    P2P_LATENCY,
    PATH_LABELS,
    build_summary,
    cache_resident,
    is_loaded,
    load_percent,
    matrix_rows,
    numa_pair,
    p2p_matrix_rows,
)
from bwprof.report.timeline import read_timelines, write_timeline_plots
from bwprof.schema.meta import RunMeta
from bwprof.units import format_bytes

BANDWIDTH_PNG = "bandwidth_vs_size.png"
SUMMARY_PNG = "summary_vs_peak.png"
TELEMETRY_PNG = "telemetry.png"
P2P_PNG = "p2p_heatmap.png"
LATENCY_PNG = "latency_vs_size.png"
LOADED_LATENCY_PNG = "latency_under_load.png"
NUMA_LATENCY_PNG = "numa_latency_heatmap.png"
P2P_LATENCY_PNG = "p2p_latency_heatmap.png"
LATENCY_AXIS = "ns per dependent load, best"
RESIDENT_LABEL = "fits in a cache: not the memory's figure"
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
    bandwidth; a throughput in TFLOP/s in panels of its own; latency is `latency_figure`'s);
    None when no row has a size. Points whose buffers fit in a cache (`in_cache`,
    `l2_resident`) are drawn hollow: they are not the memory's figure and may pass its peak
    line."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    rows = results[(results["status"] == "ok") & results["value_best"].notna()
                   & results["size_bytes"].notna() & (results["phase"] == "")
                   & (results["metric"] != "latency")]  # latency_vs_size.png has those
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
                                  label=RESIDENT_LABEL))
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


def _matrix_figure(rows: pd.DataFrame, pairs: list[tuple[str, str]], meta: RunMeta, what: str,
                   colour_label: str, cmap: str, axes: tuple[str, str]):
    """A heatmap of one figure per ordered pair (rows: the first of the pair, columns: the
    second), each cell's value written in it; colours from 0 to the largest figure, never
    fitted to the smallest: a 5% difference must not look like black against white. None
    with fewer than two members."""
    from matplotlib.colors import Normalize

    names = sorted({name for pair in pairs for name in pair}, key=lambda g: (len(g), g))
    if len(names) < 2:
        return None
    matrix = [[math.nan] * len(names) for _ in names]
    for (source, target), value in zip(pairs, rows["value_best"], strict=True):
        matrix[names.index(source)][names.index(target)] = float(value)
    top = max(v for line in matrix for v in line if not math.isnan(v))
    norm = Normalize(vmin=0, vmax=top if top > 0 else 1)
    figure = _figure(1.6 + 0.9 * len(names), 1.9 + 0.8 * len(names))
    axis = figure.subplots()
    image = axis.imshow(matrix, cmap=cmap, norm=norm)
    colours = image.get_cmap()
    for i, line in enumerate(matrix):
        for j, value in enumerate(line):
            if not math.isnan(value):
                red, green, blue, _alpha = colours(norm(value))
                light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
                axis.text(j, i, f"{value:.3g}", ha="center", va="center",
                          color="black" if light else "white", fontsize=8)
    axis.set_xticks(range(len(names)), names)
    axis.set_yticks(range(len(names)), names)
    axis.set_ylabel(axes[0])
    axis.set_xlabel(axes[1])
    figure.colorbar(image, ax=axis, label=colour_label)
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, what, meta, simulated)
    return figure


def p2p_figure(results: pd.DataFrame, meta: RunMeta):
    """Matrix of p2p_copy GB/s at the size every pair was measured at; None with fewer than
    two GPUs."""
    rows = p2p_matrix_rows(results)
    rows = rows[rows["value_best"].notna() & rows["device"].str.contains("->")]
    if rows.empty:
        return None
    pairs = [(a, b) for a, _, b in (str(d).partition("->") for d in rows["device"])]
    size = format_bytes(int(rows["size_bytes"].iloc[0]))
    return _matrix_figure(rows, pairs, meta, f"GPU→GPU copy (p2p_copy, {size})",
                          "GB/s (10^9 bytes/s), best", "viridis", ("from", "to"))


def p2p_latency_figure(results: pd.DataFrame, meta: RunMeta):
    """Matrix of lat_p2p ns (a GPU chasing through another GPU's memory); None with fewer
    than two GPUs."""
    rows = matrix_rows(results, P2P_LATENCY, "p2p")
    rows = rows[rows["value_best"].notna() & rows["device"].str.contains("->")]
    if rows.empty:
        return None
    pairs = [(a, b) for a, _, b in (str(d).partition("->") for d in rows["device"])]
    size = format_bytes(int(rows["size_bytes"].iloc[0]))
    return _matrix_figure(rows, pairs, meta,
                          f"GPU→GPU load latency (lat_p2p, {size} working set)",
                          f"{LATENCY_AXIS} (lower is better)", "magma_r",
                          ("GPU chasing", "GPU whose memory it reads"))


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
                          f"Host load latency across NUMA nodes (lat_host_numa, {size})",
                          f"{LATENCY_AXIS} (lower is better)", "magma_r",
                          ("CPUs of node", "memory of node"))


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
                   & results["value_best"].notna() & results["size_bytes"].notna()
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
    for axis, case in zip(axes, cases, strict=False):
        mine = rows[rows["case"] == case]
        pages = mine.groupby("device")["page_bytes"].nunique()
        several_pages = bool((pages > 1).any())
        keys = ["device", "page_bytes"] if several_pages else ["device"]
        for key, line in mine.groupby(keys, sort=False, dropna=False):
            device = str(key[0] if isinstance(key, tuple) else key)
            line = line.sort_values("size_bytes")
            drawn = axis.plot(line["size_bytes"].astype(float), line["value_best"], marker="o",
                              markersize=3,
                              label=_line_label(case, device, line, several_pages))[0]
            cached = resident[line.index]
            if cached.any():
                axis.plot(line.loc[cached, "size_bytes"].astype(float),
                          line.loc[cached, "value_best"], linestyle="none", marker="o",
                          markersize=6, markerfacecolor="white",
                          markeredgecolor=drawn.get_color())
        for size, label in _cache_marks(case, mine, meta):
            axis.axvline(size, linestyle=":", linewidth=1, color="grey")
            axis.annotate(label, (size, 0.98), xycoords=("data", "axes fraction"), fontsize=6,
                          color="grey", rotation=90, ha="right", va="top")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.xaxis.set_major_formatter(FuncFormatter(_size_formatter))
        for ticks in (axis.yaxis.set_major_formatter, axis.yaxis.set_minor_formatter):
            ticks(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.tick_params(axis="y", which="minor", labelsize=6)
        axis.tick_params(axis="x", labelrotation=45, labelsize=7)
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
        axis.legend(handles=handles, fontsize=6, loc="lower right",  # the cache names: top
                    ncol=2 if len(handles) > 8 else 1)
    for axis in axes[len(cases):]:
        axis.set_visible(False)
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, "Load latency against working-set size (one dependent load at a time)",
           meta, simulated)
    return figure


def loaded_latency_figure(results: pd.DataFrame, meta: RunMeta):
    """Latency against the bandwidth a concurrent streaming load achieved (`load_gbps`), a
    panel per loaded case, one line per device, each point named by the load's nominal
    intensity; None without loaded rows."""
    rows = results[(results["metric"] == "latency") & (results["status"] == "ok")
                   & results["value_best"].notna()
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
    for axis, case in zip(axes, cases, strict=True):
        mine = rows[rows["case"] == case]
        for device, line in mine.groupby("device", sort=False):
            line = line.sort_values(["percent", "load_gbps"])
            label = f"{case} {device}" + (" (simulated)" if (line["backend"] == "simulated")
                                          .any() else "")
            axis.plot(line["load_gbps"].astype(float), line["value_best"], marker="o",
                      markersize=4, label=label)
            for _, point in line.iterrows():
                axis.annotate(f"{point['percent']}%", (float(point["load_gbps"]),
                                                       float(point["value_best"])),
                              xytext=(3, 3), textcoords="offset points", fontsize=6)
        axis.set_xlim(left=0)
        axis.set_ylim(bottom=0)
        axis.set_xlabel("bandwidth the concurrent load achieved (GB/s, 10^9 bytes/s)")
        axis.set_ylabel(LATENCY_AXIS)
        where = "host" if (mine["backend"] == "host").all() else "GPU"
        axis.set_title(f"{where} latency under load ({case}); labels: the load's nominal "
                       "intensity", fontsize=8)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=6, loc="upper left")
    simulated = bool((rows["backend"] == "simulated").any())
    _title(figure, "Load latency under a concurrent streaming load", meta, simulated)
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
        LATENCY_PNG: latency_figure(run.results, run.meta),
        LOADED_LATENCY_PNG: loaded_latency_figure(run.results, run.meta),
        NUMA_LATENCY_PNG: numa_latency_figure(run.results, run.meta),
        P2P_LATENCY_PNG: p2p_latency_figure(run.results, run.meta),
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
