"""Adding runs to the history store (`bwprof history add`): a saved run made into the
store's rows (`prepare_run`), checked against what the store holds, and written as its own
file, many boxes at once without a server. The store's layout and columns are
`bwprof.store.history_schema`'s, reading it `bwprof.store.history_read`'s, its index
`bwprof.store.history_index`'s: this module only writes run files.

Writers never touch another writer's file: a file is written under a temporary name
(`.run-....parquet.bwprof-<pid>-<random>.tmp`, which pandas, pyarrow and `bwprof trend`
skip) and hard-linked into place, which never replaces a file (`publish_new`). Two boxes
adding different runs write different names; two adding the same run at once store it
once.

A run is stored once. Adding it again (the same folder, or a copy) says so and writes
nothing. A different run folder that claims a stored run_id with other results (its
results file's SHA-256 differs) is refused with one line (exit 2): the store keeps the
first, and a history never holds two sets of figures under one run. Nor one measurement under
two runs: a folder whose results rows name another run_id than its system.json, or whose
results' SHA-256 is a stored run's under another run_id, is refused the same way.

Only finished measurements are stored: a simulated run (test figures, never a
measurement), a run that was interrupted, killed or is still running, a run without a
figure (a figure of 0, negative, subnormal or not finite measured nothing: `a_figure`), and
a folder that is not a run are refused with one line (exit 2), nothing of them written; the
other folders of the same `history add` are added. An entry without figures (stored by an
earlier bwprof, or of such figures only) or unreadable under a run's name claims nothing:
the run replaces it.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Protocol

import pandas as pd

from bwprof.coerce import shorten
from bwprof.errors import EXIT_USAGE, BwprofError, write_failure
from bwprof.schema.meta import GpuMeta, RunMeta
from bwprof.schema.reading import MAX_TABLE_BYTES, Unreadable, read_bytes
from bwprof.schema.table import is_missing
from bwprof.schema.text import one_line, shown
from bwprof.store.atomic import atomic_file, publish_new
from bwprof.store.export import RESULTS_FILE
from bwprof.store.formats import cell_float, plain
from bwprof.store.history_read import read_store, read_store_file
from bwprof.store.history_schema import (
    COLUMN_NAMES,
    FILE_PREFIX,
    FILE_SUFFIX,
    HISTORY_VERSION,
    STORE_OPTION,
    OtherVersion,
    arrow_schema,
    need_pyarrow,
    open_lock,
)
from bwprof.store.runfolder import RESULTS_PARQUET, RunFolder

ABSENT = "absent"
"""The summary's status of a path none of whose cases ran: such rows are not stored."""


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


@contextmanager
def _store_locked(store: Path) -> Iterator[None]:
    fd = open_lock(store / STORE_LOCK)
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
