"""Loading a saved run folder for `bwprof report` and `bwprof compare`, with one-line errors.

A run folder is what `bwprof run` wrote: `results.csv` (or `results.parquet`) and
`system.json` make the run; `samples.csv` (telemetry) and `findings.csv` are auxiliary. Every
file is read with bounded effort (`bwprof.schema.reading`: regular files only, sizes and
JSON depth bounded, UTF-8) and checked before use. A missing folder, a folder that is not a
run, or a results.csv or system.json that is malformed or of another schema version is a
BwprofError of one line naming the file, never a traceback. An auxiliary file that is
damaged in any way (empty, torn, not UTF-8, malformed, of another version) costs only what
it holds: a note in `RunFolder.notes` says what was left out, and the run is read.
system.json is read once into a typed `RunMeta` (`bwprof.schema.meta`), so the report reads
attributes whose kinds are known instead of guarding every key.

A run that never finished is shown as such: `RunFolder.state_text` says whether it was
interrupted (and by what), is still running, or stopped without finishing.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from bwprof.coerce import NAME_CHARACTERS, shorten
from bwprof.errors import BwprofError, raise_if_no_memory
from bwprof.schema.meta import AFTER_EVERY_CASE, MetaError, ReadOnlyDict, RunMeta, read_only
from bwprof.schema.reading import (
    MAX_MESSAGE,
    MAX_TABLE_BYTES,
    MAX_TABLE_CELLS,
    MAX_TABLE_COLUMNS,
    MissingFile,
    gc_paused,
    read_bytes,
    read_json,
    settle_young_objects,
)
from bwprof.schema.rows import READABLE_VERSIONS, unreadable_version
from bwprof.schema.table import (
    check_schema_version,
    checked_results,
    read_results,
    read_run_csv,
)
from bwprof.schema.text import one_line, printable, shown
from bwprof.store import runlock
from bwprof.store.export import FINDINGS_FILE, RESULTS_FILE, SAMPLES_FILE, SYSTEM_FILE
from bwprof.store.mirror import mirrors

RESULTS_PARQUET = "results.parquet"


@dataclass(eq=False)
class RunFolder:
    """One run as the store holds it: its rows, its metadata, and the telemetry samples
    where recorded (`bwprof.analysis.run.Run` adds what is derived from them)."""

    path: Path | None
    """The run folder; None for a run measured without one (`bwprof.run()` without `out`)."""
    results: pd.DataFrame
    meta: RunMeta
    """system.json, typed (`bwprof.schema.meta`)."""
    samples: pd.DataFrame | None = None
    findings: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    """What reading the folder left out (a last line cut off by a stopped run, a damaged
    auxiliary file)."""
    running: bool | None = None
    """For a run never finalised: whether the run that claimed the folder is still alive
    (`bwprof.store.runlock.running`; None where that cannot be told)."""

    @property
    def system(self) -> ReadOnlyDict:
        """system.json as a read-only dict (`meta` is the typed view)."""
        return read_only(self.meta.as_dict())

    @property
    def run_id(self) -> str:
        return self.meta.run_id or (printable(self.path.name) if self.path else "?")

    @property
    def label(self) -> str:
        """The folder's path as a label: printable and one line (a name that is not UTF-8
        shows its bytes as `\\xff`); 'the run' for a run with no folder."""
        return shown(self.path) if self.path is not None else "the run"

    @property
    def host(self) -> str:
        return self.meta.hostname

    @property
    def simulated(self) -> bool:
        return self.meta.simulated or bool((self.results["backend"] == "simulated").any())

    @property
    def state(self) -> str:
        """'finished', 'interrupted' or 'incomplete' (`RunMeta.state`), as far as its rows
        go: a run a signal stopped only while it wrote its final files, after every case was
        measured (`measured_everything`), holds every row, so it reads as finished (history
        stores it, `compare` takes every figure); `state_text` still says what stopped it."""
        if self.measured_everything:
            return "finished"
        return self.meta.state

    @property
    def measured_everything(self) -> bool:
        """Whether the run was interrupted only after every case was measured (system.json's
        `stopped_by` is 'SIGHUP after every case was measured')."""
        return self.meta.measured_everything

    @property
    def state_text(self) -> str:
        """What became of the run, in a few words: 'finished'; 'interrupted', 'interrupted by
        SIGHUP' or 'stopped: output error: ...' (what system.json says stopped it); and for a
        run never finalised 'still running', 'stopped without finishing (killed or crashed)'
        or, where the lock cannot tell, 'never finalised'."""
        meta = self.meta
        if self.measured_everything:
            assert meta.stopped_by is not None
            by = one_line(meta.stopped_by.removesuffix(f" {AFTER_EVERY_CASE}"))
            return f"finished (every case measured; then interrupted by {by})"
        if meta.state == "interrupted":
            by = one_line(meta.stopped_by) if meta.stopped_by else ""
            if not by:
                return "interrupted"
            return f"interrupted by {by}" if by.startswith("SIG") else f"stopped: {by}"
        if meta.state == "incomplete":
            if self.running is False and self.path is not None and self._unmerged_ranks(self.path):
                return ("stopped without finishing (killed or crashed while merging its "
                        f"ranks; `bwprof salvage {shown(self.path)}` merges them "
                        "again)")
            return {True: "still running", False: "stopped without finishing (killed or crashed)",
                    None: "never finalised"}[self.running]
        return "finished"

    def _unmerged_ranks(self, path: Path) -> bool:
        """Whether this is a fleet job's folder, `path`, whose ranks' own folders are beside
        it (RUN/ranks/): a merge cut short can be done again from them."""
        return self.meta.mpi is not None and os.path.isdir(path / "ranks")

    @property
    def stop_phrase(self) -> str:
        """The state as the end of 'the run ...': 'was interrupted by SIGHUP', 'is still
        running'; '' for a finished run."""
        if self.state == "finished":
            return ""
        if self.state == "interrupted":
            return f"was {self.state_text}"
        return {True: "is still running", False: "was killed or crashed before it finished",
                None: "was never finalised"}[self.running]


def state_warning(run: RunFolder, name: str, consequence: str) -> str | None:
    """'{name} is incomplete (still running): {consequence}', '{name} was interrupted by
    SIGHUP: {consequence}' for a run that did not finish, None for one that did: the words
    report and compare warn with."""
    if run.state == "finished":
        return None
    if run.state == "incomplete":
        return f"{name} is incomplete ({run.state_text}): {consequence}"
    text = run.state_text
    if text.startswith("stopped: "):
        return f"{name} was stopped ({text.removeprefix('stopped: ')}): {consequence}"
    return f"{name} was {text}: {consequence}"


def read_system(path: Path) -> RunMeta:
    """system.json, checked once: a file that is not strict JSON, not an object, of another
    schema version, or with a part of the wrong kind is a one-line error naming the part.
    The cyclic collector is held off across both steps and the parsed tree dropped before
    it runs again: a fleet's tree is a million containers, and letting the collector in
    between (each step pauses it on its own) had it walk them all once for nothing. The
    records kept are then settled in the collector's oldest generation
    (`settle_young_objects`): its young passes walked them twice more (0.4 s at 10,870
    nodes)."""
    with gc_paused():
        system = read_json(path, strict=True)
        meta = system_meta(system, path)
        del system
        settle_young_objects()
    return meta


def system_meta(system: object, path: Path) -> RunMeta:
    """Parsed system.json (from `path`, which errors name) as a typed RunMeta, with the
    checks of `read_system`."""
    if not isinstance(system, dict) or "schema_version" not in system:
        raise BwprofError(f"{shown(path)} is not a bwprof system.json (no schema_version)")
    version = system["schema_version"]
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise BwprofError(unreadable_version(shown(path), shorten(repr(version))))
    try:
        return RunMeta.from_dict(system)
    except MetaError as exc:
        raise BwprofError(f"{shown(path)} is malformed: {exc}") from None


def _read_table(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """An auxiliary CSV file of the run (samples, findings), refused (BwprofError) where it is
    of another schema version: files written before the tables carried the column have
    none, and are read.

    The refusal costs the file only, never the folder (`with_extras` turns it into a note):
    the run is results.csv and system.json, whose versions are checked as strictly, so an
    auxiliary file of another version in a readable folder was copied in from elsewhere, and
    leaving it out, said in a note naming its version, loses only what it holds."""
    frame = read_run_csv(path, notes)
    if "schema_version" in frame.columns:
        check_schema_version(frame, path)
    return frame


def numeric_column(frame: pd.DataFrame, column: str, path: Path, kind: str) -> pd.DataFrame:
    """`frame` with `column` (which a bwprof `kind` file must have) made numeric, in place;
    a one-line BwprofError where it is missing or holds a value that is not a number."""
    if column not in frame.columns:
        raise BwprofError(f"{shown(path)} is not a bwprof {kind} file (missing {column})")
    values = pd.to_numeric(frame[column], errors="coerce")
    if values.isna().any():
        raise BwprofError(f"{shown(path)} is malformed: column {column} holds a value that is "
                          "not a number")
    frame[column] = values
    return frame


def read_samples(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """samples.csv (telemetry over time): needs `t_s`, numeric; other columns are kept."""
    return numeric_column(_read_table(path, notes), "t_s", path, "samples")


FINDINGS_NEEDS = ("severity", "what")


def read_findings(path: Path, notes: list[str] | None = None) -> pd.DataFrame:
    """findings.csv: needs `severity` and `what` (what a finding's line shows)."""
    frame = _read_table(path, notes)
    missing = [c for c in FINDINGS_NEEDS if c not in frame.columns]
    if missing:
        raise BwprofError(f"{shown(path)} is not a bwprof findings file (missing "
                          f"{', '.join(missing)})")
    return frame


def read_parquet_results(path: Path) -> pd.DataFrame:
    """results.parquet, bounded like every table: its size before it is read, then its
    columns and cells from the footer before any column is decoded."""
    return _parquet_rows(_parquet_file(path), path)


def _parquet_file(path: Path) -> tuple[Any, bytes]:
    """The pyarrow ParquetFile of `path` and its bytes, read whole within MAX_TABLE_BYTES
    (never through a link found in the folder); only its footer is decoded yet."""
    data = read_bytes(path, MAX_TABLE_BYTES)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BwprofError(f"reading {shown(path)} needs pyarrow: python3 -m pip install "
                          "pyarrow") from None
    with _parquet_errors(path):
        return pq.ParquetFile(BytesIO(data)), data


def _parquet_rows(parquet: tuple[Any, bytes], path: Path) -> pd.DataFrame:
    """The checked rows of `parquet` (`_parquet_file`): its columns and cells bounded from
    the footer before any column is decoded."""
    with _parquet_errors(path):
        metadata = parquet[0].metadata
        columns, rows = int(metadata.num_columns), int(metadata.num_rows)
        if columns > MAX_TABLE_COLUMNS or columns * rows > MAX_TABLE_CELLS:
            raise BwprofError(f"{shown(path)} has {rows:,} rows of {columns} columns, more "
                              "than bwprof reads; it is not a table bwprof wrote")
        frame = _parquet_frame(parquet)
    return checked_results(frame, path)


_PLAIN_TYPES = {("double", "float64"): "float64", ("int64", "Int64"): "Int64",
                ("bool", "boolean"): "boolean", ("string", "str"): "str",
                ("large_string", "str"): "str"}
"""(Arrow type, pandas' `numpy_type` in the file's pandas metadata) of the columns bwprof
writes (`typed_results`), and the dtype pandas reads each as."""


def _parquet_frame(parquet: tuple[Any, bytes]) -> pd.DataFrame:
    """The frame `pd.read_parquet` makes of `parquet` (`_parquet_file`), the same dtypes,
    values and layout, made a column at a time where every column is of a kind bwprof writes
    (`_plain_columns`): pandas' reader decodes every column before it converts any, so a
    fleet's million rows held them twice (1.5 GB), and paid the page faults of both. Each
    column is decoded, converted by the dtype's own `__from_arrow__` (what pandas' reader
    calls) and let go; the float columns fill one block, as that reader makes them; text is
    decoded from its dictionary straight into the type pandas holds. A file of any other
    kind (an index stored, other types, pandas before 3) is read by `pd.read_parquet`."""
    plan = _plain_columns(parquet[0].schema_arrow)
    if plan is None:
        return pd.read_parquet(BytesIO(parquet[1]))
    import pyarrow.parquet as pq

    frame_of_blocks = _frame_of_blocks()
    assert frame_of_blocks is not None  # `_plain_columns` said so
    # Text as Parquet stores it, its distinct values and a code a row: decoding every row's
    # text, then copying it into the large_string pandas holds, cost twice the one pass
    # from the codes.
    texts = [name for name, kind in plan if kind == "str"]
    reader = pq.ParquetFile(BytesIO(parquet[1]), read_dictionary=texts)
    rows = int(reader.metadata.num_rows)
    floats = {position: row for row, position in
              enumerate(i for i, (_, kind) in enumerate(plan) if kind == "float64")}
    block = np.empty((len(floats), rows), dtype="float64")
    blocks: list[tuple[Any, np.ndarray]] = (
        [(block, np.array(list(floats), dtype=np.intp))] if floats else [])
    for position, (name, kind) in enumerate(plan):
        column = reader.read(columns=[name], use_threads=False).column(0)
        if kind == "float64":
            block[floats[position]] = column.to_numpy()
        else:
            dtype: Any = pd.api.types.pandas_dtype(kind)  # Int64, boolean, str: from Arrow
            blocks.append((dtype.__from_arrow__(column), np.array([position], dtype=np.intp)))
        del column
    names = [name for name, _ in plan]
    return cast(pd.DataFrame, frame_of_blocks(blocks, index=pd.RangeIndex(rows),
                                              columns=pd.Index(names)))


def _frame_of_blocks() -> Any:
    """pandas' `create_dataframe_from_blocks` (pandas 3 on: what its Parquet reader builds
    frames with), or None before it."""
    import importlib

    try:
        return importlib.import_module("pandas.api.internals").create_dataframe_from_blocks
    except (ImportError, AttributeError):
        return None


def _plain_columns(schema: Any) -> list[tuple[str, str]] | None:
    """Each column's name and dtype where `_parquet_frame` reads the file a column at a
    time as pandas would: pandas 3 (its `str` dtype and block API), pandas metadata naming
    every column in order with no index, column index or attributes, and every column of a
    `_PLAIN_TYPES` kind. None otherwise."""
    import json

    if pd.Series(["a"]).dtype != pd.StringDtype(na_value=np.nan):
        return None  # pandas before 3 reads text as objects
    if _frame_of_blocks() is None:
        return None
    metadata = schema.metadata or {}
    if b"pandas" not in metadata or b"PANDAS_ATTRS" in metadata:
        return None
    try:
        pandas_meta = json.loads(metadata[b"pandas"])
        if (pandas_meta.get("index_columns") != [] or pandas_meta.get("column_indexes") != []
                or pandas_meta.get("attributes", {}) != {}):
            return None
        described = pandas_meta["columns"]
        if len(described) != len(schema.names):
            return None
        plan: list[tuple[str, str]] = []
        for field, entry in zip(schema, described, strict=True):
            kind = _PLAIN_TYPES.get((str(field.type), entry.get("numpy_type")))
            if (kind is None or entry.get("name") != field.name
                    or entry.get("field_name", field.name) != field.name):
                return None
            plan.append((field.name, kind))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return plan if len(set(schema.names)) == len(schema.names) else None


@contextmanager
def _parquet_errors(path: Path) -> Iterator[None]:
    """pyarrow's own error types for a damaged file as one BwprofError naming `path`."""
    try:
        yield
    except BwprofError:
        raise
    except MemoryError:  # the entry point's one line, exit 3
        raise
    except Exception as exc:
        raise_if_no_memory(exc)
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise BwprofError(f"cannot read {shown(path)}: {why}") from None


def _present(path: Path) -> bool:
    """Whether something is at `path` (of any kind: the reader refuses what is not a file);
    BwprofError where the folder cannot be looked into."""
    try:
        os.lstat(path)  # a link is there, and refused by the reader: never followed
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise BwprofError(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    return True


def load_run(path: str | Path) -> RunFolder:
    """Load and check a run folder; BwprofError (one line) when it is not a usable run."""
    folder = Path(path)
    try:
        return _load_run(folder)
    except BwprofError as exc:  # one line, printable and of bounded length, whatever it quotes
        message = one_line(str(exc))
        if len(message) > MAX_MESSAGE:  # keep the end, which says what to do
            message = f"{message[:MAX_MESSAGE - 1005]} ... {message[-1000:]}"
        exc.args = (message,)
        raise


def _load_run(folder: Path) -> RunFolder:
    try:
        mode = os.stat(folder).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise BwprofError(f"run folder {shown(folder)} does not exist; pass a folder written "
                          "by `bwprof run` (reports/<host>-<time> by default)") from None
    except OSError as exc:
        raise BwprofError(f"cannot read run folder {shown(folder)}: "
                          f"{exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        what = "a file" if stat.S_ISREG(mode) else "not a folder"
        raise BwprofError(f"{shown(folder)} is not a run folder (it is {what}); pass the "
                          f"folder that holds {RESULTS_FILE} and {SYSTEM_FILE}")
    csv_path, parquet_path = folder / RESULTS_FILE, folder / RESULTS_PARQUET
    has_system = _present(folder / SYSTEM_FILE)
    has_csv = _present(csv_path)
    if not has_system or not (has_csv or _present(parquet_path)):
        missing = SYSTEM_FILE if not has_system else RESULTS_FILE
        if not has_system and (folder / "ranks").is_dir():  # a fleet job that never merged
            raise BwprofError(
                f"{shown(folder)} is a fleet job's folder that was never merged (the job "
                f"ended before rank 0's merge: a rank died, or mpirun was stopped); each "
                f"rank's rows are in {shown(folder / 'ranks')}/rank-NNNN, which `bwprof "
                f"report` reads one at a time; `bwprof salvage {shown(folder)}` merges "
                f"them into it")
        raise BwprofError(f"{shown(folder)} is not a bwprof run folder (no {missing}); pass "
                          "a folder written by `bwprof run`")
    meta = read_system(folder / SYSTEM_FILE)
    notes: list[str] = []
    results = _results_mirror(parquet_path, csv_path) if has_csv else None
    if results is None:
        results = (read_results(csv_path, notes) if has_csv
                   else read_parquet_results(parquet_path))
    results = with_copy_figures(results)
    run = with_extras(folder, results, meta, notes)
    if meta.state == "incomplete":
        run.running = runlock.running(folder)  # never blocks: a FIFO lock is None
    return run


def _results_mirror(parquet_path: Path, csv_path: Path) -> pd.DataFrame | None:
    """The rows of results.csv from its Parquet copy beside it, where there is one made from
    the CSV as it is now (seconds less for a fleet's million rows); None where there is not,
    or it cannot be read: the CSV, the run's record, is read then, whatever the copy holds."""
    try:
        if not _present(parquet_path):
            return None
        parquet = _parquet_file(parquet_path)
        if not mirrors(parquet[0].schema_arrow.metadata, csv_path):
            return None
        return _parquet_rows(parquet, parquet_path)
    except BwprofError:
        return None


def read_auxiliary(path: Path, read: Callable[[Path, list[str]], pd.DataFrame],
                   notes: list[str], lost: str) -> pd.DataFrame | None:
    """An auxiliary file read by `read` (`read_run_csv` for any table); None where there is
    none, or (with a note saying `lost` and why) where it cannot be read: it never makes the
    folder unreadable."""
    try:
        return read(path, notes)
    except MissingFile:
        return None
    except BwprofError as exc:
        notes.append(f"{path.name} is left out ({lost}): {one_line(str(exc))}")
        return None


COPY_FIGURES = ("copy_gbps_median", "copy_gbps_best")


def with_copy_figures(results: pd.DataFrame) -> pd.DataFrame:
    """The copy-convention figures (`copy_gbps_*`) of a file written before they were
    columns, derived again from each row's case (`bwprof.cases.copy_shares`) where the case
    copies: a bandwidth row's GB/s times the case's share. Rows that carry them, and rows of
    cases this bwprof does not know, stay as they are."""
    from bwprof.cases import copy_shares

    shares = _mapped(results["case"], copy_shares())
    if not len(results) or shares.isna().all():
        return results
    bandwidth = results["metric"].eq("bandwidth")
    derived: dict[str, pd.Series] = {}
    for column, source in zip(COPY_FIGURES, ("gbps_median", "gbps_best"), strict=True):
        empty = results[column].isna() & results[source].notna() & bandwidth & shares.notna()
        if empty.any():  # a file that carries them all is not copied (a fleet's million rows)
            derived[column] = results[column].mask(empty, results[source] * shares)
    return results.assign(**derived) if derived else results


def _mapped(values: pd.Series, mapping: dict[str, float]) -> pd.Series:
    """`values.map(mapping)` (NaN where a cell is not a key), each distinct cell looked up
    once: pandas' `map` of a text column makes a Python object of every cell (a third of a
    second a million rows)."""
    try:
        codes, distinct = pd.factorize(values, use_na_sentinel=False)
    except TypeError:  # cells that cannot be told apart by hashing
        return values.map(mapping)
    found = pd.Series(list(distinct), dtype=object).map(mapping)
    if found.dtype == object:  # what map gives where no cell was a key, or shares not floats
        return values.map(mapping)
    return pd.Series(found.to_numpy()[codes], index=values.index, name=values.name)


def with_extras(folder: Path, results: pd.DataFrame, meta: RunMeta,
                notes: list[str] | None = None) -> RunFolder:
    """A RunFolder of rows and metadata at hand, with the folder's samples and findings files
    where they exist and can be read (the end of `bwprof run` uses this); what a damaged one
    costs is in `notes`."""
    notes = [] if notes is None else notes
    samples = read_auxiliary(folder / SAMPLES_FILE, read_samples, notes,
                             "no telemetry samples or their plot")
    findings = read_auxiliary(folder / FINDINGS_FILE, read_findings, notes,
                              "its findings are not shown")
    if findings is None and meta.findings and not _exists(folder / FINDINGS_FILE):
        notes.append(f"{FINDINGS_FILE} is missing although {SYSTEM_FILE} counts "
                     f"{meta.findings} finding(s): they are not shown")
    return RunFolder(folder, results, meta, samples, findings, notes)


def _exists(path: Path) -> bool:
    try:
        return _present(path)
    except BwprofError:
        return True  # there, but not to be looked at: its note says so


def machine_line(meta: RunMeta) -> str:
    """'vm (AMD EPYC) · 8× NVIDIA H200' for titles: the host and its GPUs, each name
    `shorten`ed (system.json keeps it whole). A fleet of several nodes is counted whole,
    '1,000 nodes (AMD EPYC) · 8,000× NVIDIA H200' (its own host and GPUs are rank 0's, one
    node of the many)."""
    nodes = list((meta.nodes or {}).values())
    if len(nodes) > 1:
        counts: Counter[str] = Counter()
        for node in nodes:
            counts.update(node.gpus.model_counts())
        cpus = {node.host.cpu_model for node in nodes if node.host is not None}
        name = f"{len(nodes):,} nodes"
        cpu = shorten(one_line(cpus.pop()), NAME_CHARACTERS) if len(cpus) == 1 else None
    else:
        counts = Counter(meta.gpus.model_counts())
        name = shorten(one_line(meta.hostname), NAME_CHARACTERS) or "?"
        cpu = (shorten(one_line(meta.host.cpu_model), NAME_CHARACTERS)
               if meta.host is not None else None)
    gpu_text = ", ".join(f"{n:,}× {shorten(one_line(model), NAME_CHARACTERS)}"
                         for model, n in counts.items())
    gpu_text = gpu_text or "no GPU"
    return f"{name} ({cpu}) · {gpu_text}" if cpu else f"{name} · {gpu_text}"
