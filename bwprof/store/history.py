"""The history store: every run's headline figures, one Parquet file per run, in a folder
that many boxes can append to at once without a server.

Layout: `STORE/run-<run_id>-<key>.parquet`, one file per run, each holding one row per
headline figure of the run's summary (`bwprof.analysis.summary`), with the run's, the
machine's (`box`: the box key of `bwprof.system.machine_identity`, empty for a run from
before it) and the GPU's identity on every row (`COLUMNS`). `<key>` is the first 16 hex
digits of the SHA-256 of the run's identity (its `run_id`; a run without one: its folder's
name and start time), so the same run always lands on the same name, and `<run_id>` is that
id cut to the characters a file name can always hold, for people.

Writers never touch another writer's file: a file is written under a temporary name
(`.run-....parquet.bwprof-<pid>-<random>.tmp`, which pandas, pyarrow and `bwprof trend`
skip) and hard-linked into place, which never replaces a file (`publish_new`). Two boxes
adding different runs write different names; two adding the same run at once store it
once. Every file has the same column types (`ARROW_SCHEMA`), so `pandas.read_parquet(STORE)`
and DuckDB's `read_parquet('STORE/run-*.parquet')` read the store as one table.

A run is stored once. Adding it again (the same folder, or a copy) says so and writes
nothing. A different run folder that claims a stored run_id with other results (its
results file's SHA-256 differs) is refused with one line (exit 2): the store keeps the
first, and a history never holds two sets of figures under one run. Nor one measurement under
two runs: a folder whose results rows name another run_id than its system.json, or whose
results' SHA-256 is a stored run's under another run_id, is refused the same way.

`STORE/_bwprof-index.parquet` (`compact`, written by `bwprof history compact` and by
`history add` as runs accrue) holds the rows of the run files it covers, and which files
those are (name, size, mtime, inode, SHA-256): `trend` reads it and only the other run files,
so 10,000 runs are one file read, not 10,000. The run files stay the store; its name begins
with `_`, which pandas and pyarrow skip.

Only finished measurements are stored: a simulated run (test figures, never a
measurement), a run that was interrupted, killed or is still running, a run without a
figure (a figure of 0, negative, subnormal or not finite measured nothing: `a_figure`), and
a folder that is not a run are refused with one line (exit 2), nothing of them written; the
other folders of the same `history add` are added. An entry without figures (stored by an
earlier bwprof, or of such figures only) or unreadable under a run's name claims nothing:
the run replaces it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path
from typing import IO, Any, Protocol

import pandas as pd

from bwprof.coerce import shorten
from bwprof.errors import EXIT_USAGE, BwprofError, raise_if_no_memory, write_failure
from bwprof.schema.meta import GpuMeta, RunMeta
from bwprof.schema.reading import MAX_TABLE_BYTES, Unreadable, file_size, read_bytes
from bwprof.schema.table import is_missing
from bwprof.schema.text import one_line, shown
from bwprof.store.atomic import atomic_file, no_follow_opener, publish_new
from bwprof.store.export import RESULTS_FILE
from bwprof.store.formats import cell_float, plain
from bwprof.store.runfolder import RESULTS_PARQUET, RunFolder
from bwprof.store.runlock import is_debris

HISTORY_VERSION = 1
"""The store's own format version, in every row's `schema_version`."""
FILE_PREFIX = "run-"
FILE_SUFFIX = ".parquet"
STORE_OPTION = "--store"
PYARROW_ADVICE = "python3 -m pip install pyarrow"
ABSENT = "absent"
"""The summary's status of a path none of whose cases ran: such rows are not stored."""

# (column, Arrow type): the store's columns, in order. "timestamp" is microseconds, UTC.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_key", "string"), ("run_id", "string"), ("started_utc", "timestamp"),
    ("finished_utc", "timestamp"), ("host", "string"), ("box", "string"),
    ("bwprof_version", "string"),
    ("bwprof_commit", "string"), ("driver_version", "string"),
    ("cuda_driver_version", "string"), ("path", "string"), ("case", "string"),
    ("device", "string"), ("device_name", "string"), ("gpu_uuid", "string"),
    ("gpu_serial", "string"), ("memory", "string"), ("direction", "string"),
    ("size_bytes", "int64"), ("metric", "string"), ("unit", "string"),
    ("higher_is_better", "bool"), ("value", "float64"), ("value_median", "float64"),
    ("cv", "float64"), ("flags", "string"), ("status", "string"),
    ("results_sha256", "string"), ("source", "string"), ("added_utc", "timestamp"),
    ("schema_version", "int64"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _kind in COLUMNS)
LATER_COLUMNS: tuple[str, ...] = ("box",)
"""Columns a file stored by an earlier bwprof lacks: read as empty (the run is keyed by its
host name, as it was then)."""


def need_pyarrow() -> None:
    """BwprofError of one line where pyarrow (the store's Parquet) is not installed."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise BwprofError("the history store is Parquet and needs pyarrow: "
                          f"{PYARROW_ADVICE}") from None


def arrow_schema() -> Any:
    """The pyarrow schema every file of the store is written with."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
             "bool": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in COLUMNS])


# -- one run as rows --------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredRun:
    """One run made ready for the store: its rows, its file name, what identifies it."""

    source: Path
    run_id: str
    key: str
    digest: str
    rows: pd.DataFrame

    @property
    def file_name(self) -> str:
        return f"{FILE_PREFIX}{_name_part(self.run_id)}-{self.key}{FILE_SUFFIX}"

    @property
    def figures(self) -> int:
        return int(self.rows["value"].notna().sum())


def _name_part(run_id: str) -> str:
    """The run_id as part of a file name: the characters any file system holds, at most 64."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._")[:64] or "run"


def run_identity(meta: RunMeta, folder: Path) -> str:
    """What makes a run the same run wherever its folder is copied: its run_id, or for a
    run without one its folder's name and start time: the name of the folder itself, links
    and `..` resolved (as typed, `RUN/..` or a link to the folder made one run two)."""
    if meta.run_id:
        return meta.run_id
    try:
        name = folder.resolve().name
    except (OSError, RuntimeError):  # a loop of links: the name as given
        name = folder.name
    return f"{name}@{meta.started_utc}"


def _utc(text: str | None, folder: Path, what: str) -> pd.Timestamp | None:
    if text is None:
        return None
    try:
        stamp = pd.Timestamp(text)
    except (TypeError, ValueError):
        raise BwprofError(f"{shown(folder)}: system.json's {what} {one_line(text)!r} is not a "
                          "time") from None
    if not FIRST_YEAR <= stamp.year <= LAST_YEAR:
        raise BwprofError(f"{shown(folder)}: system.json's {what} {one_line(text)!r} is not a "
                          f"time a run was at (years {FIRST_YEAR} to {LAST_YEAR}): its clock "
                          "or the file is wrong")
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


FIRST_YEAR, LAST_YEAR = 1970, 2200
"""The years a stored run may carry. A box without a battery-backed clock starts at 1970; a
year such as 9999 is a wrong clock or a forged file, and beyond matplotlib's dates (year
9999 at most, the axis padded past it): it broke every `trend` plot of the store."""


def _gpu(meta: RunMeta, device: object) -> GpuMeta | None:
    """The GPU a summary row's device names ('gpu0', 'node7:gpu0' in a fleet run); None for
    the host, an aggregate ('all') or a pair."""
    node, _colon, label = str(device).rpartition(":")
    gpus = meta.gpus
    if node and meta.nodes and node in meta.nodes:
        gpus = meta.nodes[node].gpus
    return gpus.device(label)


def _box(meta: RunMeta, device: object) -> str | None:
    """The box key of the machine a summary row's device is on (a fleet run's node's, for
    'node7:gpu0'); None where the run recorded no machine identity."""
    node, _colon, _label = str(device).rpartition(":")
    host = meta.host
    if node and meta.nodes and node in meta.nodes:
        host = meta.nodes[node].host
    return host.box if host is not None else None


def a_figure(value: object) -> float | None:
    """`value` where it is a measurement: finite and at least the smallest normal float. A
    zero, negative, subnormal, infinite or NaN figure (a damaged or edited results.csv)
    measured nothing, so it is no figure of the store: a run of only such rows holds no
    figure and is refused, and an entry of only such rows claims no run_id (as `a_peak` in
    bwprof.analysis.figures judges a peak)."""
    number = cell_float(value)
    if number is None or not math.isfinite(number) or number < sys.float_info.min:
        return None
    return number


def _text(value: object) -> str | None:
    return None if value is None or is_missing(value) or value == "" else one_line(str(value))


def _results_digest(folder: Path) -> str:
    """SHA-256 of the run's results file (results.csv, or results.parquet where it has only
    that): what tells a copy of a stored run from another run claiming its run_id."""
    path = folder / RESULTS_FILE
    if not os.path.lexists(path):
        path = folder / RESULTS_PARQUET
    return hashlib.sha256(read_bytes(path, MAX_TABLE_BYTES)).hexdigest()


class SummarisedRun(Protocol):
    """A run read back with its summary (`bwprof.analysis.run.Run`): the store keeps the
    headline figures the analysis derived, and derives none itself."""

    @property
    def path(self) -> Path | None: ...
    @property
    def meta(self) -> RunMeta: ...
    @property
    def label(self) -> str: ...
    @property
    def simulated(self) -> bool: ...
    @property
    def state(self) -> str: ...
    @property
    def stop_phrase(self) -> str: ...
    @property
    def summary(self) -> pd.DataFrame: ...
    @property
    def results(self) -> pd.DataFrame: ...


def refusal(run: RunFolder | SummarisedRun) -> str | None:
    """Why a loaded run folder cannot go into the history, or None where it can."""
    if run.simulated:
        return (f"{run.label} is a simulated run (test figures from the CPU stand-in "
                "backend), not a measurement: the history keeps measurements only")
    if run.state != "finished":
        return (f"{run.label} {run.stop_phrase}: the history keeps finished runs only; "
                "run `bwprof run` again")
    if run.meta.started_utc is None:
        return f"{run.label} has no start time in system.json: it cannot be dated"
    return None


def _check_row_ids(results: pd.DataFrame, meta: RunMeta, folder: Path) -> None:
    """BwprofError (one line) where results.csv's rows name another run_id than system.json:
    the results are another run's (a results file copied into this folder), and stored
    under this id one measurement would be two runs of the history."""
    if not meta.run_id or "run_id" not in results.columns:
        return
    named = results["run_id"].dropna().astype(str)
    other = named[(named != "") & (named != meta.run_id)]
    if not other.empty:
        raise BwprofError(
            f"{shown(folder)}: its results name run_id {shorten(one_line(other.iloc[0]))!r} "
            f"but its system.json names {shorten(one_line(meta.run_id))!r}: the results are "
            "another run's, refused; add the folder they were measured into")


def prepare_run(run: SummarisedRun, added: datetime) -> StoredRun:
    """A saved run's rows for the store; BwprofError (one line) where it is refused
    (`refusal`)."""
    why = refusal(run)
    if why is not None:
        raise BwprofError(why)
    folder = run.path
    if folder is None:
        raise BwprofError(f"{run.label} has no run folder: the history keeps saved runs")
    meta = run.meta
    identity = run_identity(meta, folder)
    key = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    digest = _results_digest(folder)
    _check_row_ids(run.results, meta, folder)
    started = _utc(meta.started_utc, folder, "started_utc")
    finished = _utc(meta.finished_utc, folder, "finished_utc")
    drivers = ", ".join(meta.gpus.metadata_values("driver_version")) or None
    cuda = ", ".join(meta.gpus.metadata_values("cuda_driver_version")) or None
    records = []
    for row in run.summary.to_dict("records"):
        if _text(row["case"]) is None or row["status"] == ABSENT:
            continue  # a path none of whose cases ran: nothing of this run to follow
        gpu = _gpu(meta, row["device"])
        info = gpu.metadata if gpu is not None else {}
        higher = plain(row["higher_is_better"])
        records.append({
            "run_key": key, "run_id": identity, "started_utc": started,
            "finished_utc": finished, "host": _text(row["host"]) or meta.hostname or None,
            "box": _box(meta, row["device"]),
            "bwprof_version": meta.bwprof_version, "bwprof_commit": meta.bwprof_commit,
            "driver_version": _text(info.get("driver_version")) if gpu else drivers,
            "cuda_driver_version": _text(info.get("cuda_driver_version")) if gpu else cuda,
            "path": _text(row["path"]), "case": _text(row["case"]),
            "device": _text(row["device"]), "device_name": _text(row["device_name"]),
            "gpu_uuid": _text(info.get("uuid")), "gpu_serial": _text(info.get("serial")),
            "memory": _text(row["memory"]), "direction": _text(row["direction"]),
            "size_bytes": plain(row["size_bytes"]), "metric": _text(row["metric"]),
            "unit": _text(row["unit"]),
            "higher_is_better": None if higher is None else bool(higher),
            "value": a_figure(row["value"]), "value_median": a_figure(row["value_median"]),
            "cv": cell_float(row["cv"]), "flags": _text(row["flags"]) or "",
            "status": _text(row["status"]), "results_sha256": digest,
            "source": shown(folder.resolve()), "added_utc": pd.Timestamp(added),
            "schema_version": HISTORY_VERSION,
        })
    rows = pd.DataFrame.from_records(records, columns=list(COLUMN_NAMES))
    stored = StoredRun(folder, identity, key, digest, rows)
    if not stored.figures:
        raise BwprofError(f"{run.label} holds no figure (its results are empty, a header "
                          "only, every case was skipped, or no figure is a positive, finite "
                          "number): the history keeps measured "
                          "figures only, so it is not stored; add the run that measured")
    return stored


def _write_parquet(rows: pd.DataFrame, handle: IO[bytes]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(rows, schema=arrow_schema(), preserve_index=False)
    pq.write_table(table, handle)


# -- adding runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Added:
    """What `add_runs` did with one run folder: `stored` False where the run was there;
    `replaced` where its file took the place of an entry that held no figure (or could not
    be read) under its name."""

    run: StoredRun
    target: Path
    stored: bool
    replaced: bool = False


@dataclass(frozen=True)
class Refused:
    """A run folder `add_runs` did not add, and why (one line); the others are added."""

    source: Path
    why: str


def _store_folder(store: Path) -> None:
    """Make the store folder where it is missing; a path that is something else is one line
    (exit 2), a folder that cannot be made one line of exit 3."""
    try:
        mode = os.stat(store).st_mode
    except FileNotFoundError:
        try:
            store.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_failure(store, exc, option=STORE_OPTION) from None  # no file begun
        return
    except OSError as exc:
        raise BwprofError(f"cannot use {STORE_OPTION} {shown(store)}: "
                          f"{exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        raise BwprofError(f"{STORE_OPTION} {shown(store)} is not a folder; give the history "
                          "store's folder (it is made where missing)")


_ABSENT, _SAME, _HOLLOW = "absent", "same", "hollow"
"""What a run's name in the store holds: nothing, this run, or an entry that is no run's
figures (none stored, or a file that cannot be read as a history file)."""


def _conflict(run: StoredRun, target: Path, source: str) -> BwprofError:
    return BwprofError(
        f"{shown(run.source)} claims run_id {one_line(run.run_id)!r}, which {shown(target)} "
        f"already holds from {source} with other results: refused (the store keeps the "
        "first run of an id; a folder copied and edited is not the same run)")


def _check_against_store(run: StoredRun, target: Path) -> str:
    """What the store holds under this run's name (`_ABSENT`, `_SAME`, `_HOLLOW`);
    BwprofError where it holds another run's figures under its run_id, or a file of
    another history version."""
    if not os.path.lexists(target):
        return _ABSENT
    try:
        frame = read_store_file(target)
    except OtherVersion:
        raise
    except Unreadable as exc:  # its content unknown: it may be the genuine run
        raise BwprofError(f"{exc}; it is kept and {shown(run.source)} is not added: make "
                          "the store's file readable and add the run again") from None
    except BwprofError:
        return _HOLLOW  # damaged or foreign: it holds no run, and must not block one
    if not frame["value"].map(a_figure).notna().any():
        return _HOLLOW  # no figure (an earlier bwprof stored such): it claims no run
    if str(frame["results_sha256"].iloc[0]) != run.digest:
        raise _conflict(run, target, str(frame["source"].iloc[0]))
    return _SAME


STORE_LOCK = ".bwprof-history.lock"
"""Held (flock) while an entry without figures is replaced, so two boxes never replace one
name at once; adding a new run never waits for it (a hard link never replaces a file)."""


def _open_lock(path: Path) -> int:
    """A lock file of the store opened to be flocked: made 0o666 (the umask applies), so
    every user of a store shared by several can take it; where opening it for writing is
    refused (EACCES: another user's file of mode 0644), opened read-only, as flock needs no
    more (on local file systems). OutputError (exit 3) where it cannot be opened at all."""
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, os.O_CREAT | os.O_RDWR | flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.EACCES:
            with suppress(OSError):
                return os.open(path, os.O_RDONLY | flags)
        raise write_failure(path, exc, option=STORE_OPTION) from None


@contextmanager
def _store_locked(store: Path) -> Iterator[None]:
    fd = _open_lock(store / STORE_LOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _add_one(run: StoredRun, store: Path, target: Path) -> Added:
    """Store one run under its name: a new file where the name is free, nothing where the
    store holds the run, its file in place of an entry that holds no figure."""

    def write(handle: IO[bytes]) -> None:
        _write_parquet(run.rows, handle)

    state = _check_against_store(run, target)
    if state == _ABSENT:
        if publish_new(target, write, option=STORE_OPTION):
            return Added(run, target, True)
        state = _check_against_store(run, target)  # another box added it in the meantime
    if state == _SAME:
        return Added(run, target, False)
    with _store_locked(store):
        state = _check_against_store(run, target)  # again: another box may have replaced it
        if state == _SAME:
            return Added(run, target, False)
        if state == _ABSENT:
            return Added(run, target, publish_new(target, write, option=STORE_OPTION))
        with atomic_file(target, binary=True) as handle:  # replaced whole, never torn
            write(handle)
    return Added(run, target, True, replaced=True)


def add_runs(saved: Iterable[SummarisedRun | Refused], store: Path,
             now: datetime | None = None,
             on_outcome: Callable[[Added | Refused], None] | None = None
             ) -> list[Added | Refused]:
    """Add each saved run's headline figures to the store, each run once, and say what
    became of each folder, in order. A run refused (not a finished measurement, no figure,
    another run's id: `Refused`, one line) is left out and the others are added; `saved`
    may hold folders already refused when loaded. `saved` is read once, each run kept only
    as its stored rows (a generator loads one folder at a time). A store that cannot be
    written is an OutputError (exit 3) naming the file; the runs added before it stay.
    `on_outcome` is given each folder's outcome, in order, as soon as it is known: those
    before a store that cannot be written are said before its error."""
    need_pyarrow()
    added = now or datetime.now(timezone.utc)
    outcomes: list[StoredRun | Refused] = []
    for one in saved:
        if isinstance(one, Refused):
            outcomes.append(one)
            continue
        try:
            outcomes.append(prepare_run(one, added))
        except BwprofError as exc:
            if exc.exit_code != EXIT_USAGE:
                raise
            outcomes.append(Refused(one.path or Path(one.label), str(exc)))
    runs = [item for item in outcomes if isinstance(item, StoredRun)]
    for index, item in enumerate(outcomes):  # one id, other results: neither is the run
        if isinstance(item, StoredRun):
            other = next((r for r in runs if r.key == item.key and r.digest != item.digest),
                         None)
            if other is not None:
                outcomes[index] = Refused(item.source, (
                    f"{shown(item.source)} and {shown(other.source)} both claim run_id "
                    f"{one_line(item.run_id)!r} with different results: refused; add the "
                    "one that is the run"))
    done: list[Added | Refused] = []
    first: dict[str, Added | Refused] = {}
    made = False
    measured = _stored_digests(store) if runs else {}
    for item in outcomes:
        outcome: Added | Refused
        if isinstance(item, Refused):
            outcome = item
        elif (held := measured.get(item.digest)) and item.key not in held:
            held_id, held_source = next(iter(held.values()))
            outcome = Refused(item.source, (
                f"{shown(item.source)} holds the results (SHA-256 {item.digest[:16]}...) of "
                f"run_id {shorten(one_line(held_id))!r}, stored from {shorten(held_source)}, but "
                f"claims run_id {shorten(one_line(item.run_id))!r}: refused (one measurement "
                "is stored once, under its own run)"))
        elif isinstance(earlier := first.get(item.key), Refused):
            outcome = Refused(item.source, earlier.why)
        elif earlier is not None:
            outcome = Added(item, store / item.file_name, False)
        else:
            if not made:
                _store_folder(store)
                made = True
            try:
                outcome = _add_one(item, store, store / item.file_name)
            except BwprofError as exc:
                if exc.exit_code != EXIT_USAGE:
                    raise
                outcome = Refused(item.source, str(exc))
            first[item.key] = outcome
            if isinstance(outcome, Added):
                measured.setdefault(item.digest, {}).setdefault(
                    item.key, (item.run_id, shown(item.source)))
        done.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return done


def _stored_digests(store: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """The results digest of each run the store holds with a figure: {run_key: (run_id,
    source)} of every run stored with it, what tells one measurement added again under
    another run_id (a store may already hold one twice, from before the check: each of
    them is still its own run, re-added as 'already stored'). Empty where the
    store is not there yet or holds no run that can be read (`add_runs` says what is
    wrong with it where it matters)."""
    if not os.path.isdir(store):
        return {}
    try:
        frame = read_store(store, columns=["run_key", "run_id", "value", "results_sha256",
                                           "source"])
    except BwprofError:
        return {}
    frame = frame[frame["value"].map(a_figure).notna() & frame["results_sha256"].notna()]
    digests: dict[str, dict[str, tuple[str, str]]] = {}
    for row in frame.drop_duplicates(["results_sha256", "run_key"]).itertuples(index=False):
        digests.setdefault(str(row.results_sha256), {})[str(row.run_key)] = (
            str(row.run_id), str(row.source))
    return digests


def added_lines(done: Sequence[Added | Refused]) -> list[str]:
    """What `history add` prints on stdout: a line per run folder added or already there
    (a refused one's line is the CLI's `error:` on stderr)."""
    lines = []
    for item in done:
        if isinstance(item, Refused):
            continue
        run = item.run
        if item.stored:
            lines.append(f"added {one_line(run.run_id)} ({run.figures} figure(s)) from "
                         f"{shown(run.source)} to {shown(item.target)}"
                         + (" (in place of an entry that held no figure)"
                            if item.replaced else ""))
        else:
            lines.append(f"already stored: {one_line(run.run_id)} (from {shown(run.source)}) "
                         f"is in {shown(item.target)}; not added again")
    return lines


# -- reading the store ------------------------------------------------------------------------


def inside_store(path: Path, store: Path) -> bool:
    """Whether `path` is the store folder or lies within it, links resolved (a folder made
    there would be read by pandas as part of the store)."""
    try:
        where, home = path.resolve(), store.resolve()
    except (OSError, RuntimeError):  # a loop of links: not a folder anything is written to
        return False
    return where == home or home in where.parents


def store_files(store: Path) -> list[Path]:
    """The run files of the store, sorted by name; BwprofError where the store is not a
    readable folder. Temporary files of writers still at work are never among them."""
    try:
        names = os.listdir(store)
    except FileNotFoundError:
        raise BwprofError(f"{STORE_OPTION} {shown(store)} does not exist; make a store with "
                          "`bwprof history add RUN_DIR --store DIR`") from None
    except NotADirectoryError:
        raise BwprofError(f"{STORE_OPTION} {shown(store)} is not a folder") from None
    except OSError as exc:
        raise BwprofError(f"cannot read {STORE_OPTION} {shown(store)}: "
                          f"{exc.strerror or exc}") from None
    return [store / name for name in sorted(names)
            if name.startswith(FILE_PREFIX) and name.endswith(FILE_SUFFIX)
            and not is_debris(name)]


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (pyarrow's run to several), or its type's name
    where it says nothing."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


class OtherVersion(BwprofError):
    """A store file of another history version: read by the bwprof that wrote it."""


def read_store_file(path: Path) -> pd.DataFrame:
    """One file of the store, checked and read as the store's types (`arrow_schema`), its
    long texts cut (`capped`): BwprofError (one line) where it is not one."""
    frame: pd.DataFrame = capped(store_table(path)).to_pandas()
    return frame


def store_table(path: Path, data: bytes | None = None) -> Any:
    """One file of the store (its bytes `data`, where read already) as a pyarrow table of
    the store's columns and types: a file whose columns cannot be read as those types (a
    damaged or hand-made file) is a BwprofError (one line), never a column of other values
    that would break what reads the store; OtherVersion for another history version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if data is None:
        data = read_bytes(path, MAX_TABLE_BYTES)
    try:
        table = pq.read_table(BytesIO(data))
    except MemoryError:  # the entry point's one line, exit 3
        raise
    except Exception as exc:  # pyarrow's own error types for a damaged file
        raise_if_no_memory(exc)
        why = _first_line(exc)
        raise BwprofError(f"cannot read {shown(path)}: {one_line(why)}") from None
    names = table.column_names
    missing = [name for name in COLUMN_NAMES if name not in names and name not in LATER_COLUMNS]
    if missing:
        raise BwprofError(f"{shown(path)} is not a bwprof history file (missing "
                          f"{', '.join(missing[:5])})")
    try:
        versions = set(pa.compute.cast(table.column("schema_version"), pa.int64())
                       .unique().drop_null().to_pylist())
    except Exception as exc:  # not whole numbers: said below, as a column of another type
        raise_if_no_memory(exc)
        versions = set()
    if versions - {HISTORY_VERSION}:
        raise OtherVersion(f"{shown(path)} is of history version "
                           f"{', '.join(str(v) for v in sorted(versions))}; this bwprof reads "
                           f"version {HISTORY_VERSION}")
    schema = arrow_schema()
    try:
        for name in LATER_COLUMNS:
            if name not in names:
                table = table.append_column(name, pa.nulls(table.num_rows, pa.string()))
        table = table.select(list(COLUMN_NAMES)).cast(schema)
    except MemoryError:  # the entry point's one line, exit 3
        raise
    except Exception as exc:  # a column of values the store's type cannot hold, or named twice
        raise_if_no_memory(exc)
        odd = [f"{field.name} ({field.type})" for field in table.schema
               if field.name in schema.names and field.type != schema.field(field.name).type]
        raise BwprofError(f"{shown(path)} is not a bwprof history file: "
                          f"{', '.join(odd[:5]) or 'its columns'} cannot be read as the "
                          "store's types") from None
    return table


MAX_TEXT = 200
"""The most characters of one text a store read gives (a GPU name, host, case...): bwprof
writes far shorter ones, and a hand-made or hostile file of 100,000-character names must not
make a trend's lines and plots take minutes."""


def capped_text(text: str) -> str:
    """`text` cut to about MAX_TEXT characters, its length and a digest of the whole kept, so
    two long names that share a beginning stay two."""
    if len(text) <= MAX_TEXT:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{text[:MAX_TEXT - 40]}... ({len(text)} characters, {digest})"


def capped(table: Any) -> Any:
    """`table` with every text longer than MAX_TEXT cut (`capped_text`); the columns within
    it untouched (one length scan each)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for index, field in enumerate(table.schema):
        if not pa.types.is_string(field.type) or not table.num_rows:
            continue
        column = table.column(index)
        if (pc.max(pc.utf8_length(column)).as_py() or 0) <= MAX_TEXT:
            continue
        values = [None if v is None else capped_text(v) for v in column.to_pylist()]
        table = table.set_column(index, field, pa.array(values, pa.string()))
    return table


def read_store(store: Path, notes: list[str] | None = None, *, gpu: str | None = None,
               case: str | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The runs of the store as one table (COLUMNS, or only `columns`: the others' pages are
    never read), narrowed by a dataset scan to the rows that may be of `gpu` (a UUID,
    serial, 'host:device' or 'host#box:device': `scan_filter`) and `case`: a superset,
    which `bwprof.analysis.trend.select` narrows exactly. The rows of the run files the
    store's index covers as they are now come from the index (one file), every other run
    file is read from itself (`_read_index`). A file that cannot be read is left out with a
    note, as is one of another history version. BwprofError where the store holds no
    readable run."""
    need_pyarrow()
    wanted = [name for name in COLUMN_NAMES if columns is None or name in columns]
    files = store_files(store)
    found: list[str] = []
    frames: list[pd.DataFrame] = []
    where, readable = scan_filter(gpu, case), False
    indexed, covered = _read_index(store, files, where, wanted, found)
    if indexed is not None:
        frames.append(indexed)
        readable = True
        files = [path for path in files if path.name not in covered]
    if len(files) >= COMPACT_AFTER:
        found.append(f"{len(files)} run file(s) are outside the store's index and were read "
                     f"one by one; `bwprof history compact --store {shown(store)}` puts them "
                     "in it, for a faster read next time")
    for start in range(0, len(files), SCAN_FILES):  # footers of a few files held at once
        fragments, odd = _fragments(files[start:start + SCAN_FILES], found)
        frames.extend(frame for path in odd if (frame := _read_whole(path, found)) is not None)
        if fragments:
            frames.append(_scan(fragments, where, found, wanted))
        readable |= bool(fragments)
    if notes is not None:
        notes.extend(found)
    if not readable and not frames:
        raise BwprofError(f"{STORE_OPTION} {shown(store)} holds no run"
                          f"{' that can be read' if files else ''}; add runs with "
                          "`bwprof history add RUN_DIR --store DIR`")
    frames = [f for f in frames if not f.empty] or frames[:1]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    frame = frame.loc[:, wanted]
    if notes is not None and {"box", "run_key"} <= set(wanted):
        notes.extend(identity_notes(frame))
    return frame


def scan_filter(gpu: str | None = None, case: str | None = None) -> Any:
    """The pyarrow filter of the rows a trend of `gpu` and `case` may use, or None for all:
    every row whose UUID or serial is `gpu`, or whose host (with its box key, for
    'host#box:device') and device make it, at every ':' and '#' it could be split at (a
    fleet run's device is 'node7:gpu0'); '?' is a missing host or device, as in a subject."""
    import pyarrow.dataset as ds

    def equal(name: str, value: str) -> Any:
        field = ds.field(name)
        return field.is_null() | (field == value) if value == "?" else field == value

    parts = []
    if gpu is not None:
        match = (ds.field("gpu_uuid") == gpu) | (ds.field("gpu_serial") == gpu)
        for cut in (i for i, char in enumerate(gpu) if char == ":"):
            host, device = gpu[:cut], gpu[cut + 1:]
            match |= equal("host", host) & equal("device", device)
            for mark in (i for i, char in enumerate(host) if char == "#"):
                match |= (equal("host", host[:mark]) & (ds.field("box") == host[mark + 1:])
                          & equal("device", device))
        parts.append(match)
    if case is not None:
        parts.append(ds.field("case") == case)
    if not parts:
        return None
    return parts[0] & parts[1] if len(parts) > 1 else parts[0]


def capped_gpu(gpu: str) -> list[str]:
    """The forms a `--gpu` may take in the store's texts as read (`capped`: each of the
    UUID, serial, host, box and device cut on its own to MAX_TEXT), at every ':' and '#'
    it could be split at (as `scan_filter`): the whole first."""
    forms = [capped_text(gpu)]
    for cut in (i for i, char in enumerate(gpu) if char == ":"):
        host, device = gpu[:cut], capped_text(gpu[cut + 1:])
        forms.append(f"{capped_text(host)}:{device}")
        for mark in (i for i, char in enumerate(host) if char == "#"):
            forms.append(f"{capped_text(host[:mark])}#{capped_text(host[mark + 1:])}:{device}")
    return list(dict.fromkeys(forms))


SCAN_FILES = 1000
"""Files scanned at once: their footers are kept for the scan, so a store of 10,000 runs
is read a thousand files at a time, and its memory does not grow with the store."""
_FILE_NAME = "__filename"
"""The dataset scan's own column: the file each row came from."""


def _fragments(files: Sequence[Path], notes: list[str]) -> tuple[list[Any], list[Path]]:
    """The files a dataset scan can read (their Parquet footers read once and kept), and
    the odd ones, read whole and checked as one file (`read_store_file`): a column missing or
    of another type. A file that is not a regular one within the size limit, or whose footer
    cannot be read, is a note."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    # Pre-buffering reads ahead for large files over a network; a store file is small.
    file_format = ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))
    local = pafs.LocalFileSystem()
    expected = {field.name: field.type for field in arrow_schema()}
    fragments, odd = [], []
    for path in files:
        try:
            file_size(path, MAX_TABLE_BYTES)
            fragment = file_format.make_fragment(str(path), filesystem=local)
            fragment.ensure_complete_metadata()
            physical = fragment.physical_schema
        except BwprofError as exc:
            notes.append(f"left out: {exc}")
            continue
        except Exception as exc:  # pyarrow's own error types for a damaged file: said as one file's
            raise_if_no_memory(exc)
            odd.append(path)
            continue
        types = {field.name: field.type for field in physical}
        if all(types.get(name, expected[name] if name in LATER_COLUMNS else None)
               == kind for name, kind in expected.items()):
            fragments.append(fragment)
        else:
            odd.append(path)
    return fragments, odd


def _read_whole(path: Path, notes: list[str]) -> pd.DataFrame | None:
    """One file read and checked whole (`read_store_file`); None, with a note, where it
    cannot be used."""
    try:
        return read_store_file(path)
    except BwprofError as exc:
        notes.append(f"left out: {exc}")
        return None


def _scan(fragments: list[Any], where: Any, notes: list[str],
          wanted: Sequence[str] = COLUMN_NAMES) -> pd.DataFrame:
    """The rows of `fragments` that `where` keeps, as one frame; a file of another history
    version left out with a note. Where a file's pages are damaged the scan goes file by
    file, so the damaged one is a note, never the whole store."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    schema = arrow_schema()
    columns = [*dict.fromkeys([*wanted, "schema_version"]), _FILE_NAME]
    # Rows of another version pass the filter, so that their file is noted, not skipped.
    other = ds.field("schema_version") != HISTORY_VERSION
    keep = None if where is None else where | other
    try:
        table = ds.FileSystemDataset(fragments, schema, fragments[0].format).to_table(
            columns=columns, filter=keep)
    except MemoryError:  # the entry point's one line, exit 3
        raise
    except Exception as exc:  # a damaged page: find its file
        raise_if_no_memory(exc)
        tables = []
        for fragment in fragments:
            try:
                tables.append(fragment.to_table(schema=schema, columns=columns, filter=keep))
            except Exception as exc:
                raise_if_no_memory(exc)
                why = _first_line(exc)
                notes.append(f"left out: cannot read {shown(Path(fragment.path))}: "
                             f"{one_line(why)}")
        table = pa.concat_tables(tables) if tables else schema.empty_table().append_column(
            _FILE_NAME, pa.array([], pa.string()))
    versions = table.column("schema_version")
    bad = pa.compute.fill_null(pa.compute.not_equal(versions, HISTORY_VERSION), False)
    if pa.compute.any(bad).as_py():
        for name in sorted(set(table.filter(bad).column(_FILE_NAME).to_pylist())):
            _read_whole(Path(name), notes)  # says which version, as a file read whole does
        names = table.filter(bad).column(_FILE_NAME).unique()
        table = table.filter(pa.compute.invert(pa.compute.is_in(table.column(_FILE_NAME),
                                                                value_set=names)))
    return _to_frame(table.select(list(wanted)))


def _to_frame(table: Any) -> pd.DataFrame:
    """The scanned rows as pandas, long texts cut (`capped`): the one place the store's
    scanned rows are materialised."""
    frame: pd.DataFrame = capped(table).to_pandas()
    return frame


def identity_notes(frame: pd.DataFrame) -> list[str]:
    """A line where stored runs recorded no machine identity: they are keyed by host name,
    so machines that share one (`vm`, `localhost`) are one series there."""
    bare = frame.loc[frame["box"].isna() | (frame["box"].astype(str) == ""), "run_key"]
    if bare.empty:
        return []
    count = bare.nunique()
    return [f"{count} stored run(s) recorded no machine identity (from a bwprof before it "
            "kept one): their figures are keyed by host name, so machines sharing a host "
            "name are not told apart there"]


# -- the index: the store compacted (issue 36) -----------------------------------------------

INDEX_FILE = "_bwprof-index.parquet"
"""The store compacted: every covered run file's rows in one Parquet file. Its name begins
with `_`, so pandas and pyarrow, reading the store folder, skip it, as DuckDB's
`run-*.parquet` does: the run files stay the store, the index only a faster way to read it."""
INDEX_VERSION = 1
INDEX_LOCK = ".bwprof-index.lock"
"""Held (flock) while the index is written: one compaction at a time; `history add` skips its
own compaction where another holds it."""
RUN_FILE = "run_file"
"""The index's own column: the name of the run file each row is of."""
_INDEX_KEY = b"bwprof.history.index"
"""The index's Parquet metadata: which run files it covers, each as name, size, mtime
(ns) and inode when read, and its SHA-256."""
COMPACT_AFTER = 200
"""`history add` compacts the store where this many run files or more are not in its index:
a trend reads each of those file by file."""


def _stamp(info: os.stat_result) -> tuple[int, int, int]:
    """What says a run file is the one the index read: a file replaced (a new inode), grown or
    written again (size, mtime) is read from itself."""
    return info.st_size, info.st_mtime_ns, info.st_ino


def _stamps(files: Sequence[Path]) -> dict[str, tuple[int, int, int]]:
    """The stamp of each regular run file (a link or anything else is never covered)."""
    stamps = {}
    for path in files:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            stamps[path.name] = _stamp(info)
    return stamps


def _index_schema() -> Any:
    import pyarrow as pa

    return arrow_schema().append(pa.field(RUN_FILE, pa.string()))


@contextmanager
def _opened_index(store: Path) -> Iterator[tuple[Any, dict[str, list[Any]]] | None]:
    """The store's index (a pyarrow ParquetFile over one open file, so what it covers and
    the rows read are of one index, whatever a compaction renames meanwhile) and what it
    covers (name: [size, mtime_ns, inode, sha256]); None where there is none; BwprofError
    where it cannot be used."""
    import pyarrow.parquet as pq

    path = store / INDEX_FILE
    try:
        reading = no_follow_opener(extra=os.O_NONBLOCK | os.O_CLOEXEC)
        handle = open(path, "rb", opener=reading)  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        raise BwprofError(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    with handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_TABLE_BYTES:
            raise BwprofError(f"{shown(path)} is not a regular file within "
                              f"{MAX_TABLE_BYTES} bytes")
        try:
            index = pq.ParquetFile(handle, pre_buffer=False)
            schema = index.schema_arrow
            covers = json.loads((schema.metadata or {})[_INDEX_KEY])
        except Exception as exc:  # a damaged or foreign file
            raise_if_no_memory(exc)
            why = _first_line(exc)
            raise BwprofError(f"cannot read {shown(path)}: {one_line(why)}") from None
        if (not isinstance(covers, dict) or covers.get("version") != INDEX_VERSION
                or covers.get("history_version") != HISTORY_VERSION
                or not isinstance(covers.get("files"), dict)
                or not schema.remove_metadata().equals(_index_schema())):
            raise BwprofError(f"{shown(path)} is not an index this bwprof writes")
        yield index, covers["files"]


def _read_index(store: Path, files: Sequence[Path], where: Any, wanted: Sequence[str],
                notes: list[str]) -> tuple[pd.DataFrame | None, set[str]]:
    """The rows of `where` from the store's index, of the run files it covers as they are
    now (name, size, mtime and inode as when it read them), and the names of those files:
    every other run file, and every file where the index cannot be used (a note), is read
    from itself, so no run is read twice and none is left out."""
    import pyarrow.dataset as ds

    again = (f"every run file is read from itself; `bwprof history compact --store "
             f"{shown(store)}` writes the index again")
    try:
        with _opened_index(store) as opened:
            if opened is None:
                return None, set()
            index, covers = opened
            now = _stamps(files)
            covered = {name for name, stamp in now.items()
                       if (cover := covers.get(name)) is not None and tuple(cover[:3]) == stamp}
            if not covered:
                return None, set()
            keep = ds.field(RUN_FILE).isin(sorted(covered))
            try:
                table = index.read(columns=[*wanted, RUN_FILE])
                table = table.filter(keep if where is None else keep & where)
            except MemoryError:  # the entry point's one line, exit 3
                raise
            except Exception as exc:  # damaged pages: the run files say it all
                raise_if_no_memory(exc)
                why = _first_line(exc)
                notes.append(f"cannot read {shown(store / INDEX_FILE)}: {one_line(why)}: "
                             f"{again}")
                return None, set()
    except BwprofError as exc:
        notes.append(f"{exc}: {again}")
        return None, set()
    return _to_frame(table.select(list(wanted))), covered


def _utf8(name: str) -> bool:
    """Whether a file name is text (not bytes a file system took, held as surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kept_from_index(store: Path, now: dict[str, tuple[int, int, int]]
                     ) -> tuple[list[Any], dict[str, list[Any]]]:
    """The old index's rows and covers of the run files it covers as they are now."""
    import pyarrow as pa
    import pyarrow.compute as pc

    with _opened_index(store) as opened:
        if opened is None:
            return [], {}
        index, old = opened
        kept = sorted(name for name, stamp in now.items()
                      if (cover := old.get(name)) is not None and tuple(cover[:3]) == stamp)
        if not kept:
            return [], {}
        try:
            table = index.read()
        except MemoryError:  # the entry point's one line, exit 3
            raise
        except Exception as exc:  # damaged pages: every file is read again
            raise_if_no_memory(exc)
            why = _first_line(exc)
            raise BwprofError(f"cannot read {shown(store / INDEX_FILE)}: "
                              f"{one_line(why)}") from None
        rows = table.filter(pc.is_in(table.column(RUN_FILE),
                                     value_set=pa.array(kept, pa.string())))
        return [rows], {name: old[name] for name in kept}


@dataclass(frozen=True)
class Compacted:
    """What `compact` did: the index, the run files it covers, those read for it now, and
    the files it leaves out (each a note, read from itself by `trend` as before)."""

    target: Path
    covered: int
    read: int
    notes: list[str]


def uncovered(store: Path) -> int:
    """How many run files of the store its index does not cover (all, without an index)."""
    files = store_files(store)
    try:
        with _opened_index(store) as opened:
            covers = {} if opened is None else opened[1]
    except BwprofError:
        covers = {}
    return sum(1 for name, stamp in _stamps(files).items()
               if (cover := covers.get(name)) is None or tuple(cover[:3]) != stamp)


def compact(store: Path, *, wait: bool = True) -> Compacted | None:
    """Write the store's index (`INDEX_FILE`): the rows of every run file that can be read,
    those the old index covers as they are now taken from it, the others read (each file
    once, its stamp taken before and after the read: a file that changed meanwhile is left
    to be read from itself). Written whole under a temporary name and renamed over the old
    one, so a reader sees the old index or the new, never a torn one; a run added meanwhile
    is not in it and is read from its file. One compaction at a time (`INDEX_LOCK`); with
    `wait` False, None where another holds it. OutputError (exit 3) where the index cannot
    be written: the store's runs are untouched."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    need_pyarrow()
    store_files(store)  # a store that is not a readable folder: one line
    fd = _open_lock(store / INDEX_LOCK)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        files = store_files(store)
        notes: list[str] = []
        covers: dict[str, list[Any]] = {}
        pieces: list[Any] = []
        now = _stamps(files)
        try:
            pieces, covers = _kept_from_index(store, now)
        except BwprofError as exc:
            notes.append(f"{exc}: written anew")
        read = 0
        for path in files:
            if path.name in covers:
                continue
            before = now.get(path.name)
            if not path.name.isascii() and not _utf8(path.name):
                notes.append(f"{shown(path)}: its name is not UTF-8, which the index cannot "
                             "hold: read from itself")
                continue
            try:
                if before is None:
                    file_size(path, MAX_TABLE_BYTES)  # says what it is
                    raise BwprofError(f"{shown(path)} is not a regular file")
                data = read_bytes(path, MAX_TABLE_BYTES)
                table = store_table(path, data)
                after = _stamp(os.lstat(path))
            except OSError as exc:
                notes.append(f"left out: cannot read {shown(path)}: {exc.strerror or exc}")
                continue
            except BwprofError as exc:
                notes.append(f"left out: {exc}")
                continue
            if after != before or len(data) != before[0]:
                notes.append(f"{shown(path)} changed while it was read: read from itself")
                continue
            read += 1
            covers[path.name] = [*before, hashlib.sha256(data).hexdigest()]
            pieces.append(table.append_column(
                RUN_FILE, pa.array([path.name] * table.num_rows, pa.string())))
            if len(pieces) >= SCAN_FILES:  # a table per file holds its own buffers: merged
                pieces = [pa.concat_tables(pieces).combine_chunks()]
        schema = _index_schema()
        table = pa.concat_tables(pieces) if pieces else schema.empty_table()
        table = table.take(pc.sort_indices(table, [(RUN_FILE, "ascending")]))
        payload = {"version": INDEX_VERSION, "history_version": HISTORY_VERSION,
                   "files": covers}
        table = table.replace_schema_metadata({_INDEX_KEY: json.dumps(payload).encode()})
        target = store / INDEX_FILE
        with atomic_file(target, binary=True) as handle:
            pq.write_table(table, handle, row_group_size=ROW_GROUP)
        return Compacted(target, len(covers), read, notes)
    finally:
        os.close(fd)


ROW_GROUP = 64 * 1024
"""Rows per row group of the index: a `--case` or `--gpu` filter skips the groups whose
statistics rule it out."""
