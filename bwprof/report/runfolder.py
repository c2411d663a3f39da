"""Loading a saved run folder for `bwprof report` and `bwprof compare`, with one-line errors.

A run folder is what `bwprof run` wrote: `results.csv` (or `results.parquet`), `system.json`,
and where they exist `samples.csv` (telemetry) and `findings.csv`. Everything is checked
before use: a missing folder, a folder that is not a run, a malformed file or a file of
another schema version is a BwprofError naming the file, never a traceback. system.json is
read once into a typed `RunMeta` (`bwprof.schema.meta`), so the report reads attributes
whose kinds are known instead of guarding every key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bwprof.errors import BwprofError
from bwprof.report.export import FINDINGS_FILE, RESULTS_FILE, SAMPLES_FILE, SYSTEM_FILE
from bwprof.report.timeline import TimelinesVersionError, read_timelines
from bwprof.schema.meta import MetaError, ReadOnlyDict, RunMeta, read_only
from bwprof.schema.rows import READABLE_VERSIONS, unreadable_version
from bwprof.schema.table import (
    check_schema_version,
    checked_results,
    read_results,
    read_run_csv,
)

RESULTS_PARQUET = "results.parquet"


@dataclass
class RunFolder:
    """One saved run: its rows, its metadata, and the telemetry samples where recorded."""

    path: Path
    results: pd.DataFrame
    meta: RunMeta
    """system.json, typed (`bwprof.schema.meta`)."""
    samples: pd.DataFrame | None = None
    findings: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    """What reading the folder left out (a last line cut off by a stopped run)."""

    @property
    def system(self) -> ReadOnlyDict:
        """system.json as a read-only dict, for code written before `meta`."""
        return read_only(self.meta.as_dict())

    @property
    def run_id(self) -> str:
        return self.meta.run_id or self.path.name

    @property
    def host(self) -> str:
        return self.meta.hostname

    @property
    def simulated(self) -> bool:
        return self.meta.simulated or bool((self.results["backend"] == "simulated").any())

    @property
    def summary(self) -> pd.DataFrame:
        """One row per memory path (the columns of summary.csv), derived from the rows."""
        from bwprof.report.summary import build_summary

        return build_summary(self.results)


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not a number JSON allows")


def read_system(path: Path) -> RunMeta:
    """system.json, checked once: a file that is not strict JSON, not an object, of another
    schema version, or with a part of the wrong kind is a one-line error naming the part."""
    try:
        system = json.loads(path.read_text(), parse_constant=_not_json)
    except OSError as exc:
        raise BwprofError(f"cannot read {path}: {exc.strerror or exc}") from None
    except RecursionError:  # json gives up on objects nested thousands deep
        raise BwprofError(f"{path} is malformed: nested too deeply to be bwprof's") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise BwprofError(f"{path} is malformed: {str(exc).splitlines()[0]}") from None
    if not isinstance(system, dict) or "schema_version" not in system:
        raise BwprofError(f"{path} is not a bwprof system.json (no schema_version)")
    version = system["schema_version"]
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise BwprofError(unreadable_version(path, repr(version)))
    try:
        return RunMeta.from_dict(system)
    except MetaError as exc:
        raise BwprofError(f"{path} is malformed: {exc}") from None
    except RecursionError:
        raise BwprofError(f"{path} is malformed: nested too deeply to be bwprof's") from None


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
    meta = read_system(folder / SYSTEM_FILE)
    notes: list[str] = []
    results = (read_results(csv_path, notes) if csv_path.is_file()
               else read_parquet_results(parquet_path))
    try:
        read_timelines(folder)  # another version is refused now, as for every file
    except TimelinesVersionError:
        raise
    except BwprofError:
        pass  # a damaged file costs only the timeline plots, whose step says why
    return with_extras(folder, results, meta, notes)


def with_extras(folder: Path, results: pd.DataFrame, meta: RunMeta,
                notes: list[str] | None = None) -> RunFolder:
    """A RunFolder of rows and metadata at hand, with the folder's samples and findings files
    where they exist (the end of `bwprof run` uses this)."""
    notes = [] if notes is None else notes
    samples = (read_samples(folder / SAMPLES_FILE, notes) if (folder / SAMPLES_FILE).is_file()
               else None)
    findings = (_read_table(folder / FINDINGS_FILE, notes)
                if (folder / FINDINGS_FILE).is_file() else None)
    return RunFolder(folder, results, meta, samples, findings, notes)


def machine_line(meta: RunMeta) -> str:
    """'vm (AMD EPYC) · 8× NVIDIA H200' for titles: the host and its GPUs."""
    name = meta.hostname or "?"
    cpu = meta.host.cpu_model if meta.host is not None else None
    gpu_text = ", ".join(f"{n}× {model}" for model, n in meta.gpus.model_counts().items())
    gpu_text = gpu_text or "no GPU"
    return f"{name} ({cpu}) · {gpu_text}" if cpu else f"{name} · {gpu_text}"
