"""Writing a run folder: claiming it for one run, results.csv, timings.csv and samples.csv
a row at a time, and its own whole files (system.json, findings.csv, timelines.json).

A run folder belongs to one run: `prepare_run_dir` claims it (`bwprof.store.runlock`) before
anything is written, so a second run given the same --out is refused. Every row is on disk
as soon as it exists, so Ctrl-C, SIGTERM or a crash leaves a parseable CSV holding every
finished row; a row that cannot be written whole (a full disk) is taken back, so no file ends
in half a row. Whole files go through `bwprof.store.atomic` (old or new, never torn). A
write that fails is an `OutputError` of one line naming the file, why, and for a full disk
the space left.
"""

from __future__ import annotations

import csv
import errno
import io
import os
import re
import threading
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bwprof.errors import BwprofError, OutputError, write_failure
from bwprof.schema.cells import spreadsheet_text
from bwprof.schema.meta import RunMeta
from bwprof.schema.rows import CSV_COLUMNS, SCHEMA_VERSION, TIMING_COLUMNS, ResultRow
from bwprof.schema.text import json_ready, printable
from bwprof.store import runlock
from bwprof.store.atomic import no_follow_opener, write_csv_atomic, write_json_atomic

RESULTS_FILE = "results.csv"
SAMPLES_FILE = "samples.csv"
TIMINGS_FILE = "timings.csv"
SYSTEM_FILE = "system.json"
TIMELINES_FILE = "timelines.json"
FINDINGS_FILE = "findings.csv"
LOCK_FILE = runlock.LOCK_FILE

UNIQUE_TRIES = 100
NAME_MAX_CHARS = 64
"""Longest host name kept in a folder name: the time and suffix still fit NAME_MAX."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(text: str, fallback: str = "host") -> str:
    """`text` (a host name: the machine's, not the user's) as one file name: characters
    outside [A-Za-z0-9._-] become `_`, at most NAME_MAX_CHARS, never empty, hidden, `.` or
    `..`, so a default run folder cannot land elsewhere or be refused for its name."""
    name = _UNSAFE.sub("_", text)[:NAME_MAX_CHARS]
    name = "_" + name[1:] if name.startswith(".") else name
    return name or fallback


# ---- whole files of the run folder ------------------------------------------------------

def write_timelines(run_dir: Path, timelines: Sequence[dict[str, object]]) -> Path:
    return write_json_atomic(run_dir / TIMELINES_FILE, {"schema_version": SCHEMA_VERSION,
                                                        "timelines": list(timelines)},
                             kept=run_dir)


def versioned(frame: Any) -> Any:
    """A table (DataFrame) with the schema_version column every bwprof file carries."""
    return frame.assign(schema_version=SCHEMA_VERSION)


def write_system_json(run_dir: Path, meta: RunMeta, rows_kept: bool = True) -> Path:
    """system.json, strict JSON (`RunMeta.as_dict` holds no NaN), replaced atomically;
    `rows_kept`: whether a failure may say the folder keeps the rows finished before (not
    for the first system.json: there are none yet). Text that is not UTF-8 (an argument's
    surrogate escapes) is written escaped (`\\xff`), never as a lone `\\udcff` that strict
    JSON readers refuse."""
    return write_json_atomic(run_dir / SYSTEM_FILE, json_ready(meta.as_dict()), strict=True,
                             kept=run_dir if rows_kept else None)


# ---- claiming a run folder ---------------------------------------------------------------

@dataclass
class RunFolderClaim:
    """A run folder this process claimed: `release()` at the run's end; `abandon()` when the
    run stops before writing its system.json, so the folder holds nothing of bwprof's."""

    folder: Path
    lock: runlock.RunLock
    created: bool
    """Whether the claim created the folder (abandon then removes it)."""

    def release(self) -> None:
        self.lock.release()

    def abandon(self) -> None:
        """Give the folder back: the lock unlinked (and the folder, if the claim made it,
        removed) while still held, then let go, so no other run can take over a lock that
        is about to disappear."""
        with suppress(OSError):
            (self.folder / LOCK_FILE).unlink()
        if self.created:
            with suppress(OSError):  # only while empty: never anything but ours
                self.folder.rmdir()
        self.lock.release()


def _new_folder(path: Path) -> Path:
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


_BAD_PATH_ERRNOS = frozenset({errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EEXIST,
                              errno.EINVAL})
"""Errors that say the path itself is wrong (through a file, a symlink loop): bad input."""


def _folder_error(exc: OSError, message: str) -> BwprofError:
    """The run folder could not be made or claimed: bad input (exit 2) where the path is
    wrong, OutputError (exit 3) where the storage refused (read-only, full, no permission)."""
    return BwprofError(message) if exc.errno in _BAD_PATH_ERRNOS else OutputError(message)


def _others(path: Path) -> list[str]:
    """What `path` holds besides a run's lock and debris (OSError where it cannot be read)."""
    return [p.name for p in path.iterdir()
            if p.name != LOCK_FILE and not runlock.is_debris(p.name)]


def _refuse_someone_elses(path: Path, created: bool) -> None:
    """A folder that held files and no run's lock is refused untouched: claiming it first
    would make and take back a lock file among the user's files (left there by a kill)."""
    if created or os.path.lexists(path / LOCK_FILE):
        return  # a run's folder: its claim says whose, and whether it still runs
    try:
        others = _others(path)
    except OSError as exc:
        raise _folder_error(exc, f"cannot read output folder {path} "
                                 f"({exc.strerror or exc}); choose another --out") from None
    if others:
        raise BwprofError(f"output folder {path} exists and is not empty; choose another --out")


def prepare_run_dir(path: Path, unique: bool = False) -> RunFolderClaim:
    """Create the run folder if needed and claim it for this run: a folder another run
    claimed, or one holding anything, is refused (BwprofError, nothing written); the lock
    file is also the proof that the folder can be written. With `unique` (a default name,
    not the user's) a taken name gets a suffix instead."""
    created = False
    try:
        if unique:
            path, created = _new_folder(path), True
        elif path.exists() and not path.is_dir():
            raise BwprofError(f"output path {path} exists and is not a folder; "
                              "choose another --out")
        else:
            try:
                path.mkdir(parents=True)
                created = True
            except FileExistsError:
                if not path.is_dir():
                    raise BwprofError(f"output path {path} exists and is not a folder; "
                                      "choose another --out") from None
    except OSError as exc:
        raise _folder_error(exc, f"cannot create output folder {path} "
                                 f"({exc.strerror or exc}); choose another --out") from None
    _refuse_someone_elses(path, created)
    try:
        lock = runlock.claim(path)
    except OSError as exc:
        if created:
            with suppress(OSError):
                path.rmdir()
        raise _folder_error(exc, f"cannot write to output folder {path} "
                                 f"({exc.strerror or exc}); choose another --out") from None
    claim = RunFolderClaim(path, lock, created)
    try:
        others = _others(path)
    except OSError as exc:
        claim.abandon()
        raise _folder_error(exc, f"cannot read output folder {path} ({exc.strerror or exc}); "
                          "choose another --out") from None
    if others:
        claim.abandon()
        raise BwprofError(f"output folder {path} exists and is not empty; choose another --out")
    return claim


# ---- rows --------------------------------------------------------------------------------

def _cell(value: object) -> object:
    """A value as its row file's cell: text on one line, so that every row is one line and a
    row cut off mid-write can be told from the rows before it (`read_run_csv`); its line
    breaks (multi-line CUDA error text in a note) become ' | ', before the spreadsheet rule,
    so a cell that started with a carriage return is judged by what follows it. Text that
    is not UTF-8 (a name's surrogate escapes) is escaped (`\\xff`): one such cell must never
    make the row, and every row after it, fail to encode."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = printable(value)
    if isinstance(value, str) and ("\n" in value or "\r" in value):
        value = " | ".join(part for part in re.split(r"\r\n|\n|\r", value) if part)
    return spreadsheet_text(value)


def _csv_bytes(rows: Iterable[Sequence[object]]) -> bytes:
    text = io.StringIO()
    csv.writer(text).writerows([[_cell(value) for value in row] for row in rows])
    return text.getvalue().encode("utf-8")


class _RowFile:
    """One CSV file written a row at a time, straight to the file (no buffer that could
    hold half a row): a write that fails is taken back to the last whole row."""

    def __init__(self, path: Path, header: Sequence[str]) -> None:
        self.path = path
        # Never through a link planted at its name in the claimed folder meanwhile.
        self._file = open(path, "wb", buffering=0, opener=no_follow_opener())  # noqa: SIM115
        self.size = 0
        try:
            self.append(_csv_bytes([header]))
        except BaseException:  # no empty file without even its header
            self._file.close()
            with suppress(OSError):
                path.unlink()
            raise

    def append(self, data: bytes) -> None:
        """Write `data` whole or, on failure, not at all (the file is cut back)."""
        view = memoryview(data)
        try:
            while view:
                written = self._file.write(view)
                view = view[written or 0:]
        except BaseException:
            self.rollback(self.size)
            raise
        self.size += len(data)

    def rollback(self, size: int) -> None:
        with suppress(OSError):
            os.ftruncate(self._file.fileno(), size)
            self._file.seek(size)
        self.size = size

    def close(self) -> None:
        self._file.close()


class RunWriter:
    """Appends result rows and raw timings to the run folder's CSV files as they finish.

    A row and its timings go in together or not at all: where a file cannot take them (a
    full disk) both files are cut back to the row before and `add` raises OutputError, so
    every row in results.csv is whole and has its timings. Text cells follow the
    spreadsheet rule (`bwprof.schema.cells`)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.rows = 0
        """Rows in results.csv so far (timings point at theirs by number)."""
        self.samples_error: str | None = None
        """Why samples.csv stopped taking samples (None while it takes them)."""
        self._timelines: list[dict[str, object]] = []
        self._samples: _RowFile | None = None
        self._samples_columns: Sequence[str] = ()
        self._samples_lock = threading.Lock()
        self._results: _RowFile | None = None
        self._timings: _RowFile | None = None
        try:
            self._results = _RowFile(run_dir / RESULTS_FILE, CSV_COLUMNS)
            self._timings = _RowFile(run_dir / TIMINGS_FILE, TIMING_COLUMNS)
        except OSError as exc:
            name = TIMINGS_FILE if self._results is not None else RESULTS_FILE
            with suppress(OSError, OutputError):
                self.close()
            for created in (RESULTS_FILE, TIMINGS_FILE):  # no empty or headless table
                with suppress(OSError):
                    (run_dir / created).unlink()
            raise write_failure(run_dir / name, exc) from None

    def add(self, row: ResultRow, seconds_per_op: Sequence[float]) -> None:
        """Write one row and its timings, whole: an error or an interrupt while writing
        takes both back (the runner holds stop signals around it)."""
        assert self._results is not None and self._timings is not None
        values = row.as_dict()
        line = _csv_bytes([[values[c] for c in CSV_COLUMNS]])
        timings = _csv_bytes(
            [row.run_id, self.rows, row.case, row.backend, row.device, row.direction,
             row.size_bytes, row.threads, index, float(seconds), SCHEMA_VERSION, row.host,
             row.rank]
            for index, seconds in enumerate(seconds_per_op))
        before = self._results.size
        self._append(self._results, line)
        try:
            self._append(self._timings, timings)
        except BaseException:
            self._results.rollback(before)
            raise
        self.rows += 1

    def _append(self, handle: _RowFile, data: bytes) -> None:
        try:
            handle.append(data)
        except OSError as exc:
            raise write_failure(handle.path, exc, self.run_dir) from None

    def add_samples(self, samples: Sequence[dict[str, object]], columns: Sequence[str]) -> None:
        """Append counter samples to samples.csv (called from the sampler thread). The first
        failure is raised (the sampler records it) and samples.csv takes nothing more; the
        run measures on."""
        with self._samples_lock:
            if self.samples_error is not None:
                return
            try:
                if self._samples is None:
                    self._samples_columns = tuple(columns)
                    self._samples = _RowFile(self.run_dir / SAMPLES_FILE,
                                             [*columns, "schema_version"])
                self._samples.append(_csv_bytes(
                    [*(sample.get(c) for c in self._samples_columns), SCHEMA_VERSION]
                    for sample in samples))
            except OSError as exc:
                error = write_failure(self.run_dir / SAMPLES_FILE, exc)
                self.samples_error = str(error)
                raise error from None

    def write_findings(self, findings: Any) -> None:
        """findings.csv (a DataFrame with FINDING_COLUMNS), written whole once at the end:
        where it cannot be, there is no findings.csv at all (OutputError)."""
        write_csv_atomic(versioned(findings), self.run_dir / FINDINGS_FILE)

    def add_timeline(self, timeline: dict[str, object]) -> None:
        """Rewrite timelines.json (atomically) with one more overlap timeline."""
        self.add_timelines([timeline])

    def add_timelines(self, timelines: Sequence[dict[str, object]]) -> None:
        """Rewrite timelines.json (atomically) with these timelines added (none: no file)."""
        if timelines:
            write_timelines(self.run_dir, [*self._timelines, *timelines])
            self._timelines += list(timelines)

    def close(self) -> None:
        """Close every file (again is harmless); a close that fails (an I/O error a network
        file system reports late) is an OutputError, after every file is closed."""
        failed: tuple[Path, OSError] | None = None
        with self._samples_lock:
            for handle in (self._results, self._timings, self._samples):
                if handle is not None:
                    try:
                        handle.close()
                    except OSError as exc:
                        failed = failed or (handle.path, exc)
        if failed is not None:
            raise write_failure(*failed, self.run_dir)
