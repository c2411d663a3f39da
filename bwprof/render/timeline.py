"""PNG timelines of the overlap cases: one lane per stream, a bar from its first operation's
start to its last operation's end, drawn from the CUDA event times recorded in
timelines.json; every panel of a file on one time scale, and an overlap case's panel with a
reference bar of its parts run one after another (their alone times from results.csv).
Never touches a GPU, so `bwprof report` can redraw them anywhere."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bwprof.errors import BwprofError
from bwprof.render.figstyle import LABEL_POINTS, TEXT_POINTS, laid_out, new_figure, readable
from bwprof.schema.reading import MAX_LANES, MAX_TIMELINES, MissingFile, read_json
from bwprof.schema.rows import READABLE_VERSIONS, unreadable_version
from bwprof.schema.text import shown
from bwprof.store.atomic import save_figure
from bwprof.store.export import TIMELINES_FILE
from bwprof.units import format_bytes

COLOURS = {"copy": "tab:blue", "kernel": "tab:orange", "pipeline": "tab:green"}


class TimelinesVersionError(BwprofError):
    """timelines.json of another schema version (its reader leaves it out, as any damaged
    timelines file: it costs only the timeline plots)."""


_LANE_KINDS: dict[str, tuple[type, ...]] = {
    "label": (str,), "kind": (str,), "start_s": (int, float), "end_s": (int, float),
    "ops": (int,),
}


def _check_entry(entry: object, where: str) -> None:
    """One timeline as `write_timeline_plots` draws it; BwprofError naming what is wrong."""
    if not isinstance(entry, dict):
        raise BwprofError(f"{where} should be an object")
    required: dict[str, tuple[type, ...]] = {"case": (str,), "device": (str,),
                                              "size_bytes": (int,), "lanes": (list,)}
    for key, kinds in required.items():
        value = entry.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise BwprofError(f"{where}.{key} is missing or of the wrong kind")
    if entry["size_bytes"] < 0:
        raise BwprofError(f"{where}.size_bytes is negative")
    for key in ("streams", "overlap_efficiency"):
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise BwprofError(f"{where}.{key} should be a number")
    if len(entry["lanes"]) > MAX_LANES:
        raise BwprofError(f"{where} has {len(entry['lanes'])} lanes, more than bwprof draws "
                          f"({MAX_LANES})")
    for index, lane in enumerate(entry["lanes"]):
        if not isinstance(lane, dict):
            raise BwprofError(f"{where}.lanes[{index}] should be an object")
        for key, kinds in _LANE_KINDS.items():
            value = lane.get(key)
            if (not isinstance(value, kinds) or isinstance(value, bool)
                    or (isinstance(value, float) and not math.isfinite(value))):
                raise BwprofError(f"{where}.lanes[{index}].{key} is missing or of the wrong "
                                  "kind")


def read_timelines(run_dir: Path) -> list[dict]:
    """The recorded timelines ({"schema_version", "timelines"}; a bare list before the
    version was written into the file), read with bounded effort (`bwprof.schema.reading`)
    and checked entry by entry; [] where there is no file. BwprofError (one line naming the
    file) for another version or a damaged file: the callers turn it into a note, since it
    costs only the timeline plots."""
    path = run_dir / TIMELINES_FILE
    try:
        data = read_json(path, strict=False)  # NaN: an efficiency the writer could not tell
    except MissingFile:
        return []
    if isinstance(data, dict) and isinstance(data.get("timelines"), list):
        version = data.get("schema_version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise TimelinesVersionError(unreadable_version(shown(path), repr(version)[:40]))
        timelines = data["timelines"]
    elif isinstance(data, list):
        timelines = data
    else:
        raise BwprofError(f"{shown(path)} is not a bwprof timelines file")
    if len(timelines) > MAX_TIMELINES:
        raise BwprofError(f"{shown(path)} holds {len(timelines)} timelines, more than bwprof "
                          f"draws ({MAX_TIMELINES})")
    try:
        for index, entry in enumerate(timelines):
            _check_entry(entry, f"timelines[{index}]")
    except BwprofError as exc:
        raise BwprofError(f"{shown(path)} is malformed: {exc}") from None
    return timelines


def _title(entry: dict) -> str:
    parts = [format_bytes(int(entry["size_bytes"]))]
    if entry.get("streams"):
        parts.append(f"{entry['streams']} stream(s)")
    if entry.get("overlap_efficiency") is not None:
        parts.append(f"overlap efficiency {entry['overlap_efficiency']:.2f}")
    return ", ".join(parts)


SLUG_CHARS = 80
"""A case or device name's share of a timeline file name: timelines.json is read from a
folder that may come from anywhere, and a name over the file system's 255 bytes would lose
every timeline plot."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:SLUG_CHARS]


TIMELINE_FILE = re.compile(r"timeline-[A-Za-z0-9_.-]*\.png")
"""The names `timeline_figures` gives its plots (`timeline-<case>-<gpu>.png`, slugs)."""


SEQUENTIAL_LABEL = "one after another\n(the parts' alone times summed)"
PIPELINE_CASE = "pipeline_chunked"


def alone_parts(results: Any, entry: dict) -> list[tuple[str, float]]:
    """(part, median seconds alone) of each part of an overlap case at the entry's size, from
    the `alone` rows of results.csv: what running them one after another costs. [] without
    results, for the pipeline (its parts are chunked) or where a part has no time."""
    if results is None or entry["case"] == PIPELINE_CASE or "phase" not in results:
        return []
    rows = results[(results["case"] == entry["case"]) & (results["device"] == entry["device"])
                   & (results["phase"] == "alone") & (results["status"] == "ok")
                   & (results["size_bytes"] == entry["size_bytes"])]
    parts = [(str(r["direction"]), float(r["time_median_s"])) for _, r in rows.iterrows()]
    return [] if not parts or any(not math.isfinite(t) or t <= 0 for _, t in parts) else parts


def timeline_figure(case: str, device: str, entries: Sequence[dict], host: str = "",
                    gpu_name: str = "", results: Any = None) -> Any:
    """One case on one device: a panel per recorded sample (per chunk size and stream count
    for pipeline_chunked), all on one x scale so the panels compare; an overlap case's panel
    ends with a hatched reference lane, its parts' alone times laid end to end ("one after
    another"), against which the lanes above show what running them together saved."""
    alone = [alone_parts(results, e) for e in entries]  # once each: a filter of every row
    heights = [max(1, len(e["lanes"])) + (1 if parts else 0) for e, parts in zip(entries, alone,
                                                                                 strict=True)]
    figure = new_figure(10, 1.3 + 0.55 * sum(heights) + 0.75 * len(entries))
    axes = figure.subplots(len(entries), 1, squeeze=False, sharex=True,
                           gridspec_kw={"height_ratios": heights})[:, 0]
    simulated = any(e.get("backend") == "simulated" for e in entries)
    heading = f"{case} on {device}{f' ({gpu_name})' if gpu_name else ''}"
    heading += f" - {host}" if host else ""
    if simulated:
        heading += "\nSIMULATED on the CPU - not a measurement"
    figure.suptitle(heading, fontsize=11)
    for axis, entry, parts in zip(axes, entries, alone, strict=True):
        lanes = entry["lanes"]
        labels = [lane["label"] for lane in lanes]
        for row, lane in enumerate(lanes):
            start_ms, end_ms = 1e3 * lane["start_s"], 1e3 * lane["end_s"]
            axis.broken_barh([(start_ms, max(end_ms - start_ms, 1e-6))], (row - 0.35, 0.7),
                             color=COLOURS.get(lane["kind"], "tab:gray"))
            axis.text(start_ms, row, f" {lane['ops']} op(s)", va="center",
                      fontsize=TEXT_POINTS)
        if parts:
            row, at = len(lanes), 0.0
            for part, seconds in parts:
                kind = "kernel" if part == "compute" else "copy"
                axis.broken_barh([(at, 1e3 * seconds)], (row - 0.35, 0.7), facecolor="white",
                                 edgecolor=COLOURS[kind], hatch="//", linewidth=1)
                axis.text(at + 500 * seconds, row, part, ha="center", va="center",
                          fontsize=TEXT_POINTS,
                          bbox={"facecolor": "white", "linewidth": 0, "pad": 1})
                at += 1e3 * seconds
            together = 1e3 * max(lane["end_s"] for lane in lanes) if lanes else 0.0
            axis.text(at, row, f" {at:.2f} ms (together: {together:.2f} ms)", va="center",
                      fontsize=TEXT_POINTS)
            labels.append(SEQUENTIAL_LABEL)
        axis.set_yticks(range(len(labels)), labels, fontsize=TEXT_POINTS)
        axis.set_ylim(len(labels) - 0.5, -0.5)  # the first lane on top
        axis.tick_params(axis="x", labelsize=TEXT_POINTS, labelbottom=True)
        axis.set_title(_title(entry), fontsize=LABEL_POINTS)
        axis.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("time since the first stream started (ms; one scale for every panel)",
                        fontsize=LABEL_POINTS)
    right = max(axis.get_xlim()[1] for axis in axes)
    axes[-1].set_xlim(0, right * 1.12)  # room for the sums written after the reference bars
    return readable(figure)


def timeline_figures(timelines: Sequence[dict], host: str = "", gpu_name: str = "",
                     results: Any = None) -> dict[str, Any]:
    """{file name: figure} of every recorded case and device (`timeline-<case>-<gpu>.png`)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for entry in timelines:
        groups.setdefault((entry["case"], entry["device"]), []).append(entry)
    return {f"timeline-{_slug(case)}-{_slug(device)}.png":
            timeline_figure(case, device, entries, host, gpu_name, results)
            for (case, device), entries in groups.items()}


def write_timeline_plots(run_dir: Path, timelines: Sequence[dict], host: str = "",
                         gpu_name: str = "", results: Any = None) -> list[Path]:
    """One PNG per case and device (`timeline_figure`); returns the files written."""
    return [save_figure(laid_out(figure), run_dir / name)
            for name, figure in timeline_figures(timelines, host, gpu_name, results).items()]
