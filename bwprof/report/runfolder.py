"""Loading a saved run folder for `bwprof report` and `bwprof compare`, with one-line errors.

A run folder is what `bwprof run` wrote: `results.csv` (or `results.parquet`), `system.json`,
and where they exist `samples.csv` (telemetry) and `findings.csv`. Everything is checked
before use: a missing folder, a folder that is not a run, a malformed file or a file of
another schema version is a BwprofError naming the file, never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bwprof.errors import BwprofError
from bwprof.report.export import FINDINGS_FILE, RESULTS_FILE, SAMPLES_FILE, SYSTEM_FILE
from bwprof.report.frames import (
    check_schema_version,
    checked_results,
    read_results,
    read_run_csv,
)
from bwprof.report.timeline import TimelinesVersionError, read_timelines
from bwprof.schema.rows import READABLE_VERSIONS

RESULTS_PARQUET = "results.parquet"


@dataclass
class RunFolder:
    """One saved run: its rows, its metadata, and the telemetry samples where recorded."""

    path: Path
    results: pd.DataFrame
    system: dict
    samples: pd.DataFrame | None = None
    findings: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    """What reading the folder left out (a last line cut off by a stopped run)."""

    @property
    def run_id(self) -> str:
        return str(self.system.get("run_id") or self.path.name)

    @property
    def host(self) -> str:
        host = self.system.get("host")
        return str(host.get("hostname") or "") if isinstance(host, dict) else ""

    @property
    def simulated(self) -> bool:
        return bool(self.system.get("simulated")) or bool(
            (self.results["backend"] == "simulated").any()
        )


def read_system(path: Path) -> dict:
    """system.json as a dict; a file that is not JSON, not an object, or of another schema
    version is a one-line error."""
    try:
        system = json.loads(path.read_text())
    except OSError as exc:
        raise BwprofError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BwprofError(f"{path} is malformed: {str(exc).splitlines()[0]}") from None
    if not isinstance(system, dict) or "schema_version" not in system:
        raise BwprofError(f"{path} is not a bwprof system.json (no schema_version)")
    if system["schema_version"] not in READABLE_VERSIONS:
        raise BwprofError(
            f"{path} has schema version {system['schema_version']!r}, this bwprof reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))}; use the bwprof version that wrote it"
        )
    _check_shape(system, path)
    return system


# Where system.json nests, what each part must be: the report reads these without checking.
_SHAPES: tuple[tuple[tuple[str, ...], type], ...] = (
    (("host",), dict), (("gpus",), dict), (("telemetry",), dict), (("nodes",), dict),
    (("gpus", "devices"), list), (("telemetry", "idle_check"), list),
)


def _check_shape(system: dict, path: Path) -> None:
    """A one-line error where a part of system.json the report reads has the wrong kind."""
    for keys, kind in _SHAPES:
        value: object = system
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, kind):
            raise BwprofError(f"{path} is malformed: {'.'.join(keys)} should be "
                              f"{'an object' if kind is dict else 'a list'}, not "
                              f"{type(value).__name__}")
    devices = (system.get("gpus") or {}).get("devices") or []
    checks = (system.get("telemetry") or {}).get("idle_check") or []
    for name, items in (("gpus.devices", devices), ("telemetry.idle_check", checks)):
        if not all(isinstance(item, dict) for item in items):
            raise BwprofError(f"{path} is malformed: every entry of {name} should be an object")
    for part in ("properties", "metadata"):
        if any(not isinstance(device.get(part) or {}, dict) for device in devices):
            raise BwprofError(f"{path} is malformed: every gpus.devices entry's {part} should "
                              "be an object")


def _read_table(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """A CSV file of the run; one of another schema version is refused (files written before
    the other tables carried the column have none, and are read)."""
    frame = read_run_csv(path, notes)
    if "schema_version" in frame.columns:
        check_schema_version(frame, path)
    return frame


def read_samples(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """samples.csv (telemetry over time): needs `t_s`, numeric; other columns are kept."""
    frame = _read_table(path, notes)
    if "t_s" not in frame.columns:
        raise BwprofError(f"{path} is not a bwprof samples file (missing t_s)")
    times = pd.to_numeric(frame["t_s"], errors="coerce")
    if times.isna().any():
        raise BwprofError(f"{path} is malformed: column t_s holds a value that is not a number")
    frame["t_s"] = times
    return frame


def read_parquet_results(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_parquet(path)
    except ImportError:
        raise BwprofError(f"reading {path} needs pyarrow: python3 -m pip install pyarrow") from None
    except Exception as exc:  # pyarrow raises its own error types for a damaged file
        raise BwprofError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    return checked_results(frame, path)


def load_run(path: str | Path) -> RunFolder:
    """Load and check a run folder; BwprofError (one line) when it is not a usable run."""
    folder = Path(path)
    if not folder.exists():
        raise BwprofError(f"run folder {folder} does not exist; pass a folder written by "
                          "`bwprof run` (reports/<host>-<time> by default)")
    if not folder.is_dir():
        raise BwprofError(f"{folder} is not a run folder (it is a file); pass the folder that "
                          f"holds {RESULTS_FILE} and {SYSTEM_FILE}")
    csv_path, parquet_path = folder / RESULTS_FILE, folder / RESULTS_PARQUET
    if not (folder / SYSTEM_FILE).is_file() or not (csv_path.is_file() or parquet_path.is_file()):
        missing = SYSTEM_FILE if not (folder / SYSTEM_FILE).is_file() else RESULTS_FILE
        raise BwprofError(f"{folder} is not a bwprof run folder (no {missing}); pass a folder "
                          "written by `bwprof run`")
    system = read_system(folder / SYSTEM_FILE)
    notes: list[str] = []
    results = (read_results(csv_path, notes) if csv_path.is_file()
               else read_parquet_results(parquet_path))
    try:
        read_timelines(folder)  # another version is refused now, as for every file
    except TimelinesVersionError:
        raise
    except BwprofError:
        pass  # a damaged file costs only the timeline plots, whose step says why
    return with_extras(folder, results, system, notes)


def with_extras(folder: Path, results: pd.DataFrame, system: dict,
                notes: list[str] | None = None) -> RunFolder:
    """A RunFolder of rows and metadata at hand, with the folder's samples and findings files
    where they exist (the end of `bwprof run` uses this)."""
    notes = [] if notes is None else notes
    samples = (read_samples(folder / SAMPLES_FILE, notes) if (folder / SAMPLES_FILE).is_file()
               else None)
    findings = (_read_table(folder / FINDINGS_FILE, notes)
                if (folder / FINDINGS_FILE).is_file() else None)
    return RunFolder(folder, results, system, samples, findings, notes)


def machine_line(system: dict) -> str:
    """'vm (AMD EPYC) · 8× NVIDIA H200' for titles: the host and its GPUs."""
    host = system.get("host") if isinstance(system.get("host"), dict) else {}
    name = str((host or {}).get("hostname") or "?")
    cpu = (host or {}).get("cpu_model")
    gpus = system.get("gpus") if isinstance(system.get("gpus"), dict) else {}
    devices = [d for d in (gpus or {}).get("devices") or [] if isinstance(d, dict)]
    names: dict[str, int] = {}
    for device in devices:
        model = str((device.get("properties") or {}).get("name") or "GPU")
        names[model] = names.get(model, 0) + 1
    gpu_text = ", ".join(f"{n}× {model}" for model, n in names.items()) or "no GPU"
    return f"{name} ({cpu}) · {gpu_text}" if cpu else f"{name} · {gpu_text}"
