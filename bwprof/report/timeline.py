"""PNG timelines of the overlap cases: one lane per stream, a bar from its first operation's
start to its last operation's end, drawn from the CUDA event times recorded in
timelines.json. Never touches a GPU, so `bwprof report` can redraw them anywhere."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from bwprof.errors import BwprofError
from bwprof.report.export import save_figure
from bwprof.schema.rows import READABLE_VERSIONS, unreadable_version
from bwprof.units import format_bytes

COLOURS = {"copy": "tab:blue", "kernel": "tab:orange", "pipeline": "tab:green"}


class TimelinesVersionError(BwprofError):
    """timelines.json of another schema version: refused like any file of the run."""


def read_timelines(run_dir: Path) -> list[dict]:
    """The recorded timelines ({"schema_version", "timelines"}; a bare list before the
    version was written into the file); BwprofError for another version or a damaged file."""
    path = run_dir / "timelines.json"
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BwprofError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    if isinstance(data, list):
        return data
    if not isinstance(data, dict) or not isinstance(data.get("timelines"), list):
        raise BwprofError(f"{path} is not a bwprof timelines file")
    if data.get("schema_version") not in READABLE_VERSIONS:
        raise TimelinesVersionError(unreadable_version(path, repr(data.get("schema_version"))))
    return data["timelines"]


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
