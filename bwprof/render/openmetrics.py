"""Runs as OpenMetrics text for Prometheus: each run's headline figures (the summary's paths),
their peaks, every verdict against the built-in bands and the box's overall verdict, in the
file node_exporter's textfile collector serves (`bwprof export --openmetrics`,
docs/monitoring.md holds the names and labels).

The text is read by two parsers: Prometheus' OpenMetrics one and the classic text format the
textfile collector uses. So every family is a gauge (the classic format has no `stateset`
or `info` type), values carry no timestamp (the two formats write them in different units),
and a verdict is a gauge per state with a `verdict` label, 1 for the state the check is in
and 0 for the others. Figures are in base units (bytes per second, seconds, ratios), as
Prometheus' naming conventions ask; every family's samples carry the same label names.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd

from bwprof.analysis.answer import answer
from bwprof.analysis.judge import CHECK_VERDICTS, VERDICTS
from bwprof.analysis.run import Run
from bwprof.errors import BwprofError
from bwprof.schema.meta import GpuMeta, HostInfo, RunMeta
from bwprof.schema.metrics import METRICS
from bwprof.schema.table import is_missing
from bwprof.schema.text import one_line

PREFIX = "bwprof"

FIGURE_LABELS = ("host", "box", "gpu_uuid", "device", "device_name", "path", "case")
"""The labels of every figure and verdict series: the machine (host name and box key), the
GPU (NVML UUID; '' for the host or an aggregate such as `all`) and what was measured."""
RUN_LABELS = ("host", "box")


@dataclass(frozen=True)
class Unit:
    """How one metric of the rows (`bwprof.schema.metrics`) is written: the family's stem,
    its base unit, and whether a peak means anything for it."""

    stem: str
    unit: str
    peaks: bool = True


UNITS: dict[str, Unit] = {
    "bandwidth": Unit("bandwidth", "bytes_per_second"),
    "latency": Unit("latency", "seconds", peaks=False),
    "throughput": Unit("throughput", "flops_per_second"),
    "efficiency": Unit("efficiency", "ratio", peaks=False),
}
"""Every metric a row may carry, by name; a row's value in the base unit is value / scale
(GB/s × 10^9 = bytes per second, ns × 10^-9 = seconds, TFLOP/s × 10^12 = FLOP per second)."""

_FIGURE_HELP = {
    "bandwidth": "Median bandwidth of the path's headline case (GB/s x 1e9; bytes as the "
                 "row counts them: copied, or read plus written for STREAM kernels).",
    "latency": "Median latency of one dependent load of the path's case.",
    "throughput": "Median floating-point throughput of the path's case.",
    "efficiency": "Median overlap efficiency of the case (1 = transfers fully hidden "
                  "behind compute).",
}


@dataclass
class Family:
    """One metric family: its name, help, unit ('' for none) and samples in order."""

    name: str
    help: str
    unit: str = ""
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


def _families() -> dict[str, Family]:
    """Every family the export may write, in the order the file lists them."""
    families: list[Family] = []
    for metric, unit in UNITS.items():
        families.append(Family(f"{PREFIX}_{unit.stem}_{unit.unit}", _FIGURE_HELP[metric],
                               unit.unit))
        if unit.peaks:
            families.append(Family(f"{PREFIX}_{unit.stem}_peak_{unit.unit}",
                                   f"Theoretical peak of the path's {metric} on this part.",
                                   unit.unit))
    families += [
        Family(f"{PREFIX}_fraction_of_peak_ratio",
               "The figure as a fraction of its theoretical peak (summary pct_of_peak / 100).",
               "ratio"),
        Family(f"{PREFIX}_verdict",
               "Verdict of each check against the built-in bands (bwprof accept): 1 for the "
               "state in the verdict label, 0 for the others.",
               ""),
        Family(f"{PREFIX}_box_verdict",
               "The run's overall verdict (the worst check): 1 for the state in the verdict "
               "label, 0 for the others.",
               ""),
        Family(f"{PREFIX}_run_timestamp_seconds",
               "When the exported run started (Unix time).", "seconds"),
        Family(f"{PREFIX}_run_info", "The exported run: its run_id and bwprof version; "
               "always 1.", ""),
    ]
    return {family.name: family for family in families}


def escape_label(value: str) -> str:
    """A label value as both text formats quote it: backslash, double quote and line feed
    escaped, after `one_line` (a name that is not UTF-8 shows its bytes as `\\xff`)."""
    text = one_line(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _text(value: object) -> str:
    return "" if value is None or is_missing(value) else str(value)


def _where(meta: RunMeta, device: str) -> tuple[HostInfo | None, GpuMeta | None]:
    """The host and GPU a row's device names: 'gpu0'; 'node7:gpu0' in a fleet run (that
    node's); None for the GPU of the host's rows, an aggregate ('all') or a pair."""
    node, _colon, label = device.rpartition(":")
    host, gpus = meta.host, meta.gpus
    if node and meta.nodes and node in meta.nodes:
        host, gpus = meta.nodes[node].host, meta.nodes[node].gpus
    return host, gpus.device(label)


def _device_names(run: Run) -> dict[str, str]:
    """Each device's name as results.csv gives it ('NVIDIA H200', the CPU model)."""
    frame = run.results.drop_duplicates("device")
    return {_text(device): _text(name)
            for device, name in zip(frame["device"], frame["device_name"], strict=True)}


def _labels(run: Run, names: dict[str, str], device: str, path: str,
            case: str) -> dict[str, str]:
    host, gpu = _where(run.meta, device)
    return {
        "host": host.hostname if host is not None else run.host,
        "box": (host.box or "") if host is not None else "",
        "gpu_uuid": _text(gpu.metadata.get("uuid")) if gpu is not None else "",
        "device": device, "device_name": names.get(device, ""), "path": path,
        "case": case,
    }


def started(run: Run) -> float:
    """The run's start as Unix time; BwprofError where system.json has none readable."""
    text = run.meta.started_utc
    if not text:
        raise BwprofError(f"{run.label} has no start time in system.json: it cannot be dated")
    try:
        stamp = pd.Timestamp(text)
    except (TypeError, ValueError):
        raise BwprofError(f"{run.label}: system.json's started_utc {one_line(text)!r} is "
                          "not a time") from None
    if stamp is pd.NaT:
        raise BwprofError(f"{run.label}: system.json's started_utc {one_line(text)!r} is "
                          "not a time")
    return float((stamp if stamp.tzinfo is not None else stamp.tz_localize("UTC")).timestamp())


def _figures(run: Run, families: dict[str, Family]) -> None:
    """The summary's figures of status ok, their peaks and their fraction of peak."""
    names = _device_names(run)
    for row in run.summary.to_dict("records"):
        unit = UNITS.get(str(row["metric"]))
        value = row["value"]
        if unit is None or row["status"] != "ok" or is_missing(value):
            continue
        scale = METRICS[str(row["metric"])].scale
        labels = _labels(run, names, _text(row["device"]), _text(row["path"]), _text(row["case"]))
        families[f"{PREFIX}_{unit.stem}_{unit.unit}"].samples.append(
            (labels, float(value) / scale))
        peak = row["peak_value"]
        if unit.peaks and not is_missing(peak):
            families[f"{PREFIX}_{unit.stem}_peak_{unit.unit}"].samples.append(
                (labels, float(peak) / scale))
        pct = row["pct_of_peak"]
        if not is_missing(pct):
            families[f"{PREFIX}_fraction_of_peak_ratio"].samples.append(
                (labels, float(pct) / 100))


def _one_hot(labels: dict[str, str], verdict: str,
             states: Sequence[str]) -> Iterator[tuple[dict[str, str], float]]:
    for state in states:
        yield {**labels, "verdict": state}, 1.0 if state == verdict else 0.0


def _verdicts(run: Run, families: dict[str, Family]) -> None:
    """Every check's verdict, and the run's overall verdict (`answer`)."""
    names = _device_names(run)
    for check in run.checks:
        labels = _labels(run, names, check.device, check.path, check.case)
        families[f"{PREFIX}_verdict"].samples += _one_hot(labels, check.verdict,
                                                          CHECK_VERDICTS)
    host = run.meta.host
    box = {"host": run.meta.hostname or run.host,
           "box": (host.box or "") if host is not None else ""}
    families[f"{PREFIX}_box_verdict"].samples += _one_hot(box, answer(run).verdict, VERDICTS)
    families[f"{PREFIX}_run_timestamp_seconds"].samples.append((box, started(run)))
    families[f"{PREFIX}_run_info"].samples.append(
        ({**box, "run_id": run.run_id, "bwprof_version": run.meta.bwprof_text}, 1.0))


def _series_key(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{key}="{escape_label(value)}"' for key, value in labels.items())
    return f"{name}{{{inner}}}"


def openmetrics_text(runs: Sequence[Run]) -> str:
    """The runs' figures, peaks and verdicts as one OpenMetrics text, ending `# EOF`.
    BwprofError (one line) where two runs would give the same series (two runs of one
    box): Prometheus keeps one value per series, so the file holds one run per box."""
    families = _families()
    owner: dict[str, str] = {}
    for run in runs:
        before = {name: len(family.samples) for name, family in families.items()}
        _figures(run, families)
        _verdicts(run, families)
        for name, family in families.items():
            for labels, _value in family.samples[before[name]:]:
                key = _series_key(name, labels)
                if key in owner:
                    box = f", box {labels['box']}" if labels["box"] else ""
                    raise BwprofError(
                        f"{owner[key]} and {run.label} are runs of one box (host "
                        f"{one_line(labels['host'])}{box}): a series holds one value; "
                        "export one run per box (its newest)")
                owner[key] = run.label
    lines: list[str] = []
    for family in families.values():
        if not family.samples:
            continue
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} gauge"]
        if family.unit:
            lines.append(f"# UNIT {family.name} {family.unit}")
        lines += [f"{_series_key(family.name, labels)} {_number(value)}"
                  for labels, value in family.samples if math.isfinite(value)]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
