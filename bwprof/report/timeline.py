"""PNG timelines of the overlap cases: one lane per stream, a bar from its first operation's
start to its last operation's end, drawn from the CUDA event times recorded in
timelines.json. Never touches a GPU, so `bwprof report` can redraw them anywhere."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from bwprof.errors import BwprofError
from bwprof.report.atomic import save_figure
from bwprof.report.export import TIMELINES_FILE
from bwprof.schema.reading import MAX_LANES, MAX_TIMELINES, MissingFile, read_json
from bwprof.schema.rows import READABLE_VERSIONS, unreadable_version
from bwprof.schema.text import shown
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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def write_timeline_plots(run_dir: Path, timelines: Sequence[dict], host: str = "",
                         gpu_name: str = "") -> list[Path]:
    """One PNG per case and device, a panel per recorded sample (per chunk size and stream
    count for pipeline_chunked); returns the files written."""
    if not timelines:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str], list[dict]] = {}
    for entry in timelines:
        groups.setdefault((entry["case"], entry["device"]), []).append(entry)
    written = []
    for (case, device), entries in groups.items():
        heights = [max(1, len(e["lanes"])) for e in entries]
        figure, axes = plt.subplots(len(entries), 1, squeeze=False,
                                    figsize=(10, 1.2 + 0.55 * sum(heights) + 0.5 * len(entries)),
                                    gridspec_kw={"height_ratios": heights})
        simulated = any(e.get("backend") == "simulated" for e in entries)
        heading = f"{case} on {device}{f' ({gpu_name})' if gpu_name else ''}"
        heading += f" - {host}" if host else ""
        if simulated:
            heading += "\nSIMULATED on the CPU - not a measurement"
        figure.suptitle(heading, fontsize=11)
        for axis, entry in zip(axes[:, 0], entries, strict=True):
            lanes = entry["lanes"]
            for row, lane in enumerate(lanes):
                start_ms, end_ms = 1e3 * lane["start_s"], 1e3 * lane["end_s"]
                axis.broken_barh([(start_ms, max(end_ms - start_ms, 1e-6))], (row - 0.35, 0.7),
                                 color=COLOURS.get(lane["kind"], "tab:gray"))
                axis.text(start_ms, row, f" {lane['ops']} op(s)", va="center", fontsize=8)
            axis.set_yticks(range(len(lanes)), [lane["label"] for lane in lanes], fontsize=8)
            axis.invert_yaxis()
            axis.set_xlabel("time since the first stream started (ms)", fontsize=8)
            axis.set_title(_title(entry), fontsize=9)
            axis.grid(axis="x", alpha=0.3)
        figure.tight_layout()
        path = run_dir / f"timeline-{_slug(case)}-{_slug(device)}.png"
        try:
            written.append(save_figure(figure, path, dpi=100))
        finally:
            plt.close(figure)
    return written
