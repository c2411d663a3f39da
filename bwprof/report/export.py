"""Writing a run folder: results.csv and timings.csv row by row, system.json atomically.

Every row is flushed as soon as it exists, so Ctrl-C, SIGTERM or a crash leaves a parseable
CSV holding every finished row.
"""

from __future__ import annotations

import csv
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from bwprof.errors import BwprofError
from bwprof.schema.meta import RunMeta
from bwprof.schema.rows import CSV_COLUMNS, SCHEMA_VERSION, TIMING_COLUMNS, ResultRow

RESULTS_FILE = "results.csv"
SAMPLES_FILE = "samples.csv"
TIMINGS_FILE = "timings.csv"
SYSTEM_FILE = "system.json"
TIMELINES_FILE = "timelines.json"
FINDINGS_FILE = "findings.csv"


UNIQUE_TRIES = 100


def _claim(path: Path) -> Path:
    """Create `path`, or `path-2`, `path-3`... where it exists: a default folder is named by
    the second, and two runs started in the same one must not write into one folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, UNIQUE_TRIES + 1):
        candidate = path if attempt == 1 else path.with_name(f"{path.name}-{attempt}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise BwprofError(f"{UNIQUE_TRIES} run folders named {path.name} exist; choose an --out")


def prepare_run_dir(path: Path, unique: bool = False) -> Path:
    """Create the run folder, refusing a non-empty one and proving it is writable. With
    `unique` (a default name, not the user's) a taken name gets a suffix instead."""
    try:
        if unique:
            path = _claim(path)
    except OSError as exc:
        raise BwprofError(
            f"cannot create output folder {path} ({exc.strerror or exc}); choose an --out"
        ) from None
    if path.exists() and not path.is_dir():
        raise BwprofError(f"output path {path} exists and is not a folder; choose another --out")
    if path.is_dir() and any(path.iterdir()):
        raise BwprofError(f"output folder {path} exists and is not empty; choose another --out")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".bwprof-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BwprofError(
            f"cannot write to output folder {path} ({exc.strerror or exc}); choose another --out"
        ) from None
    return path


def _cell(value: object) -> object:
    return "" if value is None else value


class RunWriter:
    """Appends result rows and raw timings to the run folder's CSV files as they finish."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._results: IO[str] = open(run_dir / RESULTS_FILE, "w", newline="")  # noqa: SIM115
        self._timings: IO[str] = open(run_dir / TIMINGS_FILE, "w", newline="")  # noqa: SIM115
        self._results_csv = csv.writer(self._results)
        self._timings_csv = csv.writer(self._timings)
        self._results_csv.writerow(CSV_COLUMNS)
        self._timings_csv.writerow(TIMING_COLUMNS)
        self._flush()
        self._timelines: list[dict[str, object]] = []
        self._rows = 0  # data rows of results.csv so far: timings point at theirs by number
        self._samples: IO[str] | None = None
        self._samples_csv: Any = None
        self._samples_lock = threading.Lock()

    def add(self, row: ResultRow, seconds_per_op: Sequence[float]) -> None:
        values = row.as_dict()
        self._results_csv.writerow([_cell(values[c]) for c in CSV_COLUMNS])
        for index, seconds in enumerate(seconds_per_op):
            self._timings_csv.writerow(
                [row.run_id, self._rows, row.case, row.backend, row.device, row.direction,
                 _cell(row.size_bytes), _cell(row.threads), index, repr(seconds),
                 SCHEMA_VERSION, row.host, _cell(row.rank)]
            )
        self._rows += 1
        self._flush()

    def add_samples(self, samples: Sequence[dict[str, object]], columns: Sequence[str]) -> None:
        """Append counter samples to samples.csv (called from the sampler thread)."""
        with self._samples_lock:
            if self._samples is None:
                self._samples = open(self.run_dir / SAMPLES_FILE, "w", newline="")  # noqa: SIM115
                self._samples_csv = csv.writer(self._samples)
                self._samples_csv.writerow([*columns, "schema_version"])
            for sample in samples:
                self._samples_csv.writerow([*(_cell(sample.get(c)) for c in columns),
                                            SCHEMA_VERSION])
            self._samples.flush()

    def write_findings(self, findings: Any) -> None:
        """findings.csv (a DataFrame with FINDING_COLUMNS), written once at the end."""
        versioned(findings).to_csv(self.run_dir / FINDINGS_FILE, index=False)

    def add_timeline(self, timeline: dict[str, object]) -> None:
        """Rewrite timelines.json (atomically) with one more overlap timeline."""
        self.add_timelines([timeline])

    def add_timelines(self, timelines: Sequence[dict[str, object]]) -> None:
        """Rewrite timelines.json (atomically) with these timelines added (none: no file)."""
        if timelines:
            self._timelines += list(timelines)
            write_timelines(self.run_dir, self._timelines)

    def _flush(self) -> None:
        self._results.flush()
        self._timings.flush()

    def close(self) -> None:
        self._results.close()
        self._timings.close()
        with self._samples_lock:
            if self._samples is not None:
                self._samples.close()


def write_json_atomic(target: Path, payload: object, strict: bool = False) -> Path:
    """Write JSON through a temp file and a rename, so the file is never half-written.
    `strict`: the payload is plain JSON already (no NaN, nothing to turn into a string)."""
    temp = target.with_name(f".{target.name}.tmp")
    text = (json.dumps(payload, indent=2, allow_nan=False) if strict
            else json.dumps(payload, indent=2, default=str))
    temp.write_text(text + "\n")
    os.replace(temp, target)
    return target


def write_timelines(run_dir: Path, timelines: Sequence[dict[str, object]]) -> Path:
    return write_json_atomic(run_dir / TIMELINES_FILE, {"schema_version": SCHEMA_VERSION,
                                                        "timelines": list(timelines)})


def versioned(frame: Any) -> Any:
    """A table (DataFrame) with the schema_version column every bwprof file carries."""
    return frame.assign(schema_version=SCHEMA_VERSION)


def write_system_json(run_dir: Path, meta: RunMeta) -> Path:
    """system.json, strict JSON (`RunMeta.as_dict` holds no NaN), replaced atomically."""
    return write_json_atomic(run_dir / SYSTEM_FILE, meta.as_dict(), strict=True)
