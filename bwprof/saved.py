"""The API over saved run folders: `load`, and the reading commands `report`, `compare`,
`accept`, `history add`, `trend` and `export`, each one call the CLI makes and a notebook
can make.

Every function here reads and never measures: nothing of numba, CuPy, NVML or bwprof's
measuring code is imported (`tests/test_layers.py`). Each folder is read once into one
`Run` (`bwprof.analysis.run`), whose summary, verdicts and ceilings every output shares.
Anything wrong with the input is a BwprofError of one line (exit 2), a file that cannot be
written an OutputError (exit 3); nothing is written before every input is checked.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd
from rich.console import Console

from bwprof.analysis import trend as trends
from bwprof.analysis.acceptance import Acceptance, accept_runs
from bwprof.analysis.compare import (
    COMPARE_FILE,
    Comparison,
    Regression,
    compare_runs,
    parse_fail_below,
)
from bwprof.analysis.judge import Check
from bwprof.analysis.model import ModelReport, model_lines, model_report, parse_model
from bwprof.analysis.run import Run
from bwprof.analysis.spec import Spec, load_spec
from bwprof.errors import EXIT_USAGE, BwprofError, OutputError, WriteFailed
from bwprof.paths import user_path
from bwprof.render.accept import write_files as write_accept_files
from bwprof.render.openmetrics import openmetrics_text
from bwprof.render.outputs import REPORT_DIR, Written, output_dir, write_report_files, write_table
from bwprof.render.terminal import (
    page_written,
    print_answer,
    print_report,
    print_warnings,
    report_lines,
    shell_word,
)
from bwprof.render.trendplot import write_trend_plots
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.table import gc_paused
from bwprof.schema.text import json_ready, one_line, shown
from bwprof.store import history, history_index, history_read, history_schema
from bwprof.store.atomic import atomic_file
from bwprof.store.export import LOCK_FILE, RESULTS_FILE, SYSTEM_FILE
from bwprof.store.formats import check_format, json_rows, plain
from bwprof.store.runfolder import load_run, state_warning


def load(run_dir: str | Path) -> Run:
    """A saved run folder as one Run: `.results` (the rows of results.csv, integer columns
    as pandas' nullable Int64), `.meta` (system.json, typed: `bwprof.schema.meta.RunMeta`),
    `.samples` and `.findings` (None where the run has none), `.notes` (what reading left
    out), and derived on first use `.rows`, `.summary` (one row per memory path),
    `.checks` (the verdicts against the built-in bands) and `.ceilings`. Anything wrong
    with the folder is a BwprofError with one line; nothing is written."""
    return _load(run_dir, "RUN_DIR")


def _load(run_dir: str | Path, option: str) -> Run:
    """`load`, the path checked and made absolute as the argument `option` names."""
    return Run.of(load_run(user_path(run_dir, option)))


@dataclass
class RunReport:
    """`bwprof report`: the run, the files written for it, and the model's arithmetic."""

    run: Run
    written: Written
    model: ModelReport | None = None

    @property
    def summary(self) -> pd.DataFrame:
        return self.run.summary


def make_run_report(run_dir: str | Path, *, model: str | None = None, plots: bool = True,
                    file_format: str = "csv", out: str | Path | None = None,
                    html: bool = False, write: bool = True) -> RunReport:
    """Check every option, load the run folder, write summary.csv, the plots and with `html`
    report.html to `out` (default: RUN_DIR/report/, so the archived rows' folder gets no new
    file beside them). Raises BwprofError with one line for anything wrong. Without `write`
    (`report --json` with no `--out`, `--html` or `--format parquet`: stdout only) no
    file is written.

    Everything is read and checked before the first file is written. Where the default
    folder cannot be written (read-only storage, a full disk), the report is still made
    and a note says which files were not written and to pass `--out DIR`. An `out` the
    user chose that is not a folder is bad input (BwprofError, exit 2); one that cannot be
    created or written is an OutputError (exit 3): either before anything is shown, as is
    an `out` that is another run's folder (BwprofError, exit 2)."""
    folder_path = user_path(run_dir, "RUN_DIR")  # the arguments first, then the options
    spec = parse_model(model) if model is not None else None
    parquet = check_format(file_format)
    chosen = user_path(out, "--out") if out is not None else None
    run = load(folder_path)
    folder = run.path
    assert folder is not None  # a run read from a folder
    if chosen is not None:
        _not_another_run(chosen, folder)
    report = (model_report(spec, run.summary, run.meta, run.results) if spec is not None
              else None)
    if not write and chosen is None and not html and not parquet:
        return RunReport(run, Written(), report)
    target = folder / REPORT_DIR if chosen is None else output_dir(chosen, chosen)
    written = write_report_files(run, target, parquet=parquet, plots=plots,
                                 default_dir=chosen is None, html=html)
    return RunReport(run, written, report)



def _load_summarized(folders: Sequence[Path]) -> list[Run]:
    """Each folder loaded and its summary built (`_load`, `Run.summary`), two at a time in
    threads: reading Parquet and system.json, the summary's column work and the page faults
    of a fleet's fresh memory overlap where the GIL lets them (`bwprof compare` of two
    million-row folders on a 2-core VM: ~8.0 s wall against ~9.4 s one after the other, on
    average over seven runs each; ~40k more page faults, as both folders' transient memory
    is held at once). Errors as one after the other gives them: the first folder's that
    fails to load; a summary that fails is built again (and raises) where it is asked for.
    Daemon threads, waited on from this one: Ctrl-C stops the command at once."""
    if len(folders) < 2:
        return [_load(path, "RUN_DIRS") for path in folders]
    loaded: list[Run | None] = [None] * len(folders)
    failed: list[BaseException | None] = [None] * len(folders)
    done = [threading.Event() for _ in folders]
    turns = iter(range(len(folders)))
    turn_lock = threading.Lock()

    def work() -> None:
        while True:
            with turn_lock:
                index = next(turns, None)
            if index is None:
                return
            try:
                run = loaded[index] = _load(folders[index], "RUN_DIRS")
                with contextlib.suppress(Exception):
                    run.summary  # noqa: B018 - cached on the Run; compare_runs reads it
            except BaseException as exc:  # handed to the waiting thread, raised there
                failed[index] = exc
            finally:
                done[index].set()

    for _ in range(min(len(folders), _LOAD_THREADS)):
        threading.Thread(target=work, name="bwprof-load", daemon=True).start()
    runs = []
    for index, event in enumerate(done):
        event.wait()
        if (error := failed[index]) is not None:
            raise error
        runs.append(cast(Run, loaded[index]))
    return runs


_LOAD_THREADS = 2
"""Folders read at once: two cores' worth (more holds more transient memory at once)."""


@dataclass
class CompareResult:
    """`bwprof compare`: the comparison, the regressions past `--fail-below` (none without
    it) and the files written."""

    comparison: Comparison
    threshold: float | None = None
    regressions: list[Regression] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)


def _parquet_with_out(file_format: str, out_dir: Path | None, name: str) -> bool:
    """Whether Parquet copies are wanted (`check_format`); a one-line refusal where they are
    but no --out folder was given to write `name` in."""
    parquet = check_format(file_format)
    if parquet and out_dir is None:
        raise BwprofError(f"--format parquet writes {name}: give it a folder with --out DIR")
    return parquet


def compare(run_dirs: Sequence[str | Path], *, by: str = "node", out: str | Path | None = None,
            fail_below: str | None = None, file_format: str = "csv") -> CompareResult:
    """The same figures across runs (the first is the baseline), with compare.csv written
    to `out` where given, and the headline figures that fell more than `fail_below`% below
    the baseline's (or are missing)."""
    folders = [user_path(path, "RUN_DIRS") for path in run_dirs]  # arguments, then options
    out_dir = user_path(out, "--out") if out is not None else None
    threshold = parse_fail_below(fail_below) if fail_below is not None else None
    parquet = _parquet_with_out(file_format, out_dir, "compare.parquet")
    # A fleet's folders and summaries: many objects, no cycle (the aligned rows are made
    # when first read, `Comparison.rows`: for --out below, --json or the terminal's --all).
    with gc_paused():
        runs = _load_summarized(folders)
        comparison = compare_runs(runs, by=by)
    written = (write_table(comparison.rows, output_dir(out_dir, out_dir) / COMPARE_FILE,
                           parquet) if out_dir is not None else [])
    regressions = comparison.regressions(threshold) if threshold is not None else []
    return CompareResult(comparison, threshold, list(regressions), written)


def accept(run_dirs: Sequence[str | Path], *, spec: str | Path | None = None,
           out: str | Path | None = None,
           file_format: str = "csv") -> tuple[Acceptance, list[Path]]:
    """Every run held against its part's bands (or `spec`'s, a TOML file), with accept.csv
    and accept_fleet.csv written to `out` where given."""
    folders = [user_path(path, "RUN_DIRS") for path in run_dirs]  # arguments, then options
    spec_path = user_path(spec, "--spec") if spec is not None else None
    out_dir = user_path(out, "--out") if out is not None else None
    parquet = _parquet_with_out(file_format, out_dir, "accept.parquet")
    the_spec = load_spec(spec_path) if spec_path is not None else Spec()
    result = accept_runs([_load(path, "RUN_DIRS") for path in folders], the_spec)
    written = write_accept_files(result, out_dir, parquet) if out_dir is not None else []
    return result, written


def _stored_gpu(gpu: str, rows: Any) -> str:
    """`--gpu` as the store's rows hold it (`history_read.capped_gpu`): the form of it that names
    a subject, serial or host:device there, else the whole cut."""
    forms = history_read.capped_gpu(gpu)
    if len(forms) == 1 or rows.empty:
        return forms[0]
    plain = rows["host"].fillna("?").astype(str) + ":" + rows["device"].fillna("?").astype(str)
    known = set(rows["subject"]) | set(rows["gpu_serial"].dropna().astype(str)) | set(plain)
    return next((form for form in forms if form in known), forms[0])


def history_add(run_dirs: Sequence[str | Path], store: str | Path,
                on_outcome: Callable[[history.Added | history.Refused], None] | None = None
                ) -> list[history.Added | history.Refused]:
    """Each run's headline figures added to the history store, once per run; a folder that
    is refused (`history.Refused`, its one line) leaves the others to be added.
    `on_outcome`: given each folder's outcome as it is known (a store that fails later
    must not hide what was added before)."""
    folders = [user_path(path, "RUN_DIRS") for path in run_dirs]  # arguments, then options
    store_dir = user_path(store, "--store")
    history_schema.need_pyarrow()  # before any folder is read: nothing can be stored without it

    def runs() -> Iterator[Run | history.Refused]:
        # One folder loaded at a time; only its stored rows are kept (a month of runs'
        # samples never sits in memory at once).
        for path in folders:
            try:
                yield _load(path, "RUN_DIRS")
            except BwprofError as exc:
                if exc.exit_code != EXIT_USAGE:
                    raise
                yield history.Refused(path, str(exc))

    done = history.add_runs(runs(), store_dir, on_outcome=on_outcome)
    if any(isinstance(item, history.Added) and item.stored for item in done):
        _compact_where_due(store_dir)
    return done


def _compact_where_due(store: Path) -> None:
    """After runs were added: the store's index written again where COMPACT_AFTER run files
    or more are outside it (a trend reads those file by file), unless another box is at it.
    Best effort: the runs are stored whatever becomes of it, and `history compact` says why
    an index cannot be written."""
    try:
        if history_index.uncovered(store) >= history_index.COMPACT_AFTER:
            history_index.compact(store, wait=False)
    except BwprofError:
        pass


def history_compact(store: str | Path) -> history_index.Compacted:
    """`bwprof history compact`: the store's index written, so that a trend reads one file
    and only the runs added since (`history_index.compact`)."""
    store_dir = user_path(store, "--store")
    done = history_index.compact(store_dir)
    assert done is not None  # waited for any other compaction
    return done


@dataclass
class TrendResult:
    """`bwprof trend`: the figures followed, those that fell, the plots and the notes."""

    rows: pd.DataFrame
    falls: list[trends.Fall]
    written: list[Path]
    notes: list[str]

    @property
    def gpus(self) -> int:
        return int(self.rows.loc[self.rows["gpu_uuid"].notna(), "gpu_uuid"].nunique())

    @property
    def boxes(self) -> int:
        """Hosts counted as boxes: host#box where the run recorded its machine's box key
        (two machines named vm are two), the host name where it recorded none."""
        box = self.rows.reindex(columns=["box"])["box"].fillna("").astype(str)
        hosts = self.rows["host"].fillna("?").astype(str)
        return int(hosts.where(box == "", hosts + "#" + box).nunique())


TREND_COLUMNS = ("run_key", "run_id", "started_utc", "host", "box", "path", "case", "device",
                 "device_name", "gpu_uuid", "gpu_serial", "metric", "unit", "higher_is_better",
                 "value", "value_median", "status")
"""The store's columns a trend reads (`TrendResult.rows` has these): the pages of the others
(sources, digests, versions) are never read."""


def trend(store: str | Path, *, gpu: str | None = None, case: str | None = None,
          out: str | Path | None = None, threshold: float = 5.0,
          plots: bool = True) -> TrendResult:
    """Each GPU's figures over time from the history store, those whose latest run fell more
    than `threshold`% below the median of their earlier runs, and (with `plots`) a
    trend-<case>.png per case in `out` (default: reports/trend)."""
    if not 0 < threshold <= 1000:
        raise BwprofError(f"--threshold must be a percentage above 0 and at most 1000, got "
                          f"{threshold:g}")
    store_dir = user_path(store, "--store")
    out_dir = user_path(out if out is not None else os.path.join("reports", "trend"), "--out")
    if out_dir == store_dir:
        raise BwprofError("--out is the store's folder: plots there would break readers of "
                          "the store (pandas.read_parquet reads every file); choose another "
                          "--out")
    if history_schema.inside_store(out_dir, store_dir):
        raise BwprofError(f"--out {shown(out_dir)} is inside the store {shown(store_dir)}: "
                          "plots there would break readers of the store "
                          "(pandas.read_parquet reads every folder in it); choose an --out "
                          "outside it")
    # The store's texts are read cut to history_schema.MAX_TEXT, each of host, box and device on
    # its own: a --gpu or --case as long is matched cut the same way (the scan, before the
    # cut, matches it whole).
    shown_case = None if case is None else history_schema.capped_text(case)
    notes: list[str] = []
    # A dataset scan of only the rows asked for; the plots' fleet range needs every GPU's
    # figures of the case, so with plots only the case narrows it.
    fleet = trends.figures(history_read.read_store(store_dir, notes, case=case,
                                                   gpu=None if plots else gpu,
                                                   columns=TREND_COLUMNS))
    shown_gpu = None if gpu is None else _stored_gpu(gpu, fleet)
    try:
        if fleet.empty:
            raise BwprofError(f"--store {store_dir} holds no figure of status ok to follow")
        rows = trends.select(fleet, gpu=shown_gpu, case=shown_case)
    except BwprofError:
        if gpu is None and case is None:
            raise
        # Nothing of that GPU or case: the whole store says why, with what it holds.
        whole = trends.figures(history_read.read_store(store_dir, columns=TREND_COLUMNS))
        if whole.empty:
            raise BwprofError(f"--store {store_dir} holds no figure of status ok to "
                              "follow") from None
        trends.select(whole, gpu=shown_gpu, case=shown_case)
        raise
    found = trends.falls(rows, threshold)
    written = write_trend_plots(rows, fleet, out_dir, threshold) if plots else []
    return TrendResult(rows, found, written, notes)


@dataclass
class OpenMetricsExport:
    """`bwprof export --openmetrics`: the runs, their OpenMetrics text, the file written
    (None: the text was only returned, for stdout) and notes for stderr."""

    runs: list[Run]
    text: str
    path: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def series(self) -> int:
        """The samples written (every line that is not a comment)."""
        return sum(1 for line in self.text.splitlines() if line and not line.startswith("#"))


def export_openmetrics(run_dirs: Sequence[str | Path],
                       target: str | Path | None) -> OpenMetricsExport:
    """Each run's headline figures, their peaks and its verdicts as OpenMetrics text
    (`bwprof.render.openmetrics`, docs/monitoring.md), written whole to `target` (a
    temporary file renamed over it, so node_exporter's textfile collector never reads half
    a file); with `target` None only returned. A simulated run, one that did not finish,
    two runs of one box and a `target` that is a folder or in none are BwprofErrors of one
    line, said before anything is written."""
    path = user_path(target, "--openmetrics") if target is not None else None
    if path is not None:
        _check_file_target(path, "--openmetrics")
    runs = [_load(run_dir, "RUN_DIRS") for run_dir in run_dirs]
    for run in runs:
        why = _export_refusal(run)
        if why is not None:
            raise BwprofError(why)
    text = openmetrics_text(runs)
    if path is None:
        return OpenMetricsExport(runs, text)
    try:
        with atomic_file(path) as handle:
            handle.write(text)
    except WriteFailed as exc:
        raise OutputError(f"cannot write {shown(path)}: {exc.reason}; choose another "
                          "--openmetrics") from None
    notes = ([] if path.suffix == ".prom" else
             [f"{shown(path)}: node_exporter's textfile collector reads only files named "
              "*.prom"])
    return OpenMetricsExport(runs, text, path, notes)


def _export_refusal(run: Run) -> str | None:
    """Why a run's figures cannot go to the monitoring stack, or None where they can."""
    if run.simulated:
        return (f"{run.label} is a simulated run (test figures from the CPU stand-in "
                "backend), not a measurement: export writes measurements only")
    if run.state != "finished":
        return (f"{run.label} {run.stop_phrase}: export writes finished runs only; run "
                "`bwprof run` again")
    return None


def _check_file_target(path: Path, option: str) -> None:
    """BwprofError (exit 2) where `path` cannot be a file written whole: a folder, something
    that is not a regular file, or a name in a folder that does not exist."""
    if path.is_dir():
        raise BwprofError(f"{option} {shown(path)} is a folder; give a file in it, e.g. "
                          f"{shown(path / 'bwprof.prom')}")
    if os.path.lexists(path) and not path.is_symlink() and not path.is_file():
        raise BwprofError(f"{option} {shown(path)} is not a regular file; give a file name")
    if not path.parent.is_dir():
        raise BwprofError(f"{option} {shown(path)}: its folder {shown(path.parent)} does not "
                          "exist; create it or choose another")


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare the paths as given
        return path.absolute()


def _not_another_run(out: Path, run_dir: Path) -> None:
    """BwprofError (exit 2) where `out` is the folder of a run other than `run_dir`: its own
    summary.csv and plots would be replaced by this run's without a word. A run folder is
    one that holds system.json, results.csv or the lock of a run still writing it; `run_dir`
    itself, by whatever path, is where the report goes by default."""
    if _resolved(out) == _resolved(run_dir):
        return
    held = [name for name in (SYSTEM_FILE, RESULTS_FILE, LOCK_FILE)
            if os.path.lexists(out / name)]
    if held:
        raise BwprofError(f"--out {shown(out)} is another run's folder (it holds {held[0]}); "
                          "its summary.csv and plots would be replaced by this run's: choose "
                          "another --out")


def _say_not_written(notes: list[str]) -> None:
    """The files that could not be written (or plots not drawn), one line each on stderr,
    where a person sees them whatever stdout is piped to."""
    import typer

    for note in notes:
        typer.echo(one_line(note), err=True)


def report_warnings(run: Run) -> list[str]:
    """What `report` warns about on stderr: a run that did not finish, whose figures are
    only those of the rows it wrote."""
    consequence = ("its figures are of the rows written so far" if run.running
                   else "its figures are of the rows it wrote; cases it did not reach are "
                   "absent")
    line = state_warning(run, f"run {run.label}", consequence)
    return [line] if line else []


def _state_tag(run: Run) -> str:
    """' (incomplete: still running)' after the run's first line; '' once finished."""
    if run.state == "finished":
        return ""
    return f" ({run.state_text})" if run.state == "interrupted" else (
        f" (incomplete: {run.state_text})")


def print_run_report(console: Console, report: RunReport, show_rows: bool = False,
                     warn: bool = True, run_dir: str | None = None,
                     all_gpus: bool = False) -> None:
    """The report on `console`: the run, the box's overall verdict and the next step
    first (`run_dir` as the user typed it, for the command it names), then the summary;
    on stderr the files that could not be written; with `warn`, `report_warnings` on
    stderr too (a person sees them whatever stdout is piped to). A fleet of more than
    `FLEET_DIGEST_GPUS` GPUs shows its digest unless `all_gpus`."""
    run = report.run
    meta = run.meta
    console.print(
        f"run {run.label}: {one_line(run.run_id)}, {run.machine}, bwprof "
        f"{one_line(meta.bwprof_text)}, started {one_line(meta.started_utc or '?')}"
        + _state_tag(run),
        markup=False, highlight=False, soft_wrap=True,
    )
    print_answer(console, run, _typed(run, run_dir),
                 page=page_written(report.written.files))
    print_report(console, run, show_rows=show_rows, all_gpus=all_gpus)
    if report.model is not None:
        for line in model_lines(report.model):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for note in run.notes:
        console.print(one_line(note), style="yellow", markup=False, highlight=False,
                      soft_wrap=True)
    if report.written.files:
        folder = report.written.files[0].parent
        names = ", ".join(one_line(path.name) for path in report.written.files)
        console.print(f"wrote {names} in {shown(folder)}", markup=False, highlight=False,
                      soft_wrap=True)
    _say_not_written(report.written.notes)
    if warn:
        print_warnings(report_warnings(run))


def _typed(run: Run, run_dir: str | None) -> str | None:
    """The run folder for the next step's command: as the user typed it, else its path."""
    return run_dir if run_dir is not None else None if run.path is None else str(run.path)


def verdict_json(run: Run, run_dir: str | None = None,
                 page: Path | None = None) -> dict[str, object]:
    """The box's overall verdict (`bwprof.analysis.answer`) for scripts: `verdict` (PASS,
    WARN, FAIL, CANNOT_JUDGE), the `line` and `next_step` people read, the checks counted
    by verdict, the `worst` check that decides a FAIL or WARN (its path, case, device and
    figures; null otherwise) and bwprof's own `errors` (not the box's)."""
    from bwprof.analysis.answer import answer

    found = answer(run)

    def check(c: Check) -> dict[str, object]:
        return {"path": c.path, "case": c.case, "device": c.device, "box": c.box,
                "gpu_model": c.gpu_model, "verdict": c.verdict, "reason": c.reason,
                "value": c.value, "unit": c.unit, "size_bytes": c.size_bytes,
                "pct_of_band": c.pct_of_band, "pct_of_peak": c.pct_of_peak}

    return {"verdict": found.verdict, "label": found.label, "line": found.line(),
            "next_step": found.next_step(shell_word(_typed(run, run_dir)),
                                         shell_word(str(page)) if page else None),
            "counts": found.counts,
            "simulated": found.simulated,
            "worst": None if found.worst is None else check(found.worst),
            "errors": [check(c) for c in found.errors]}


def run_report_json(report: RunReport, show_rows: bool = False,
                    warn: bool = True, run_dir: str | None = None) -> dict[str, object]:
    """Everything `print_run_report` says, for scripts (simulated figures keep their label):
    `run.state` ('finished', 'interrupted', 'incomplete') with `state_detail` and
    `stopped_by`, `verdict` the box's overall verdict (`verdict_json`; `run_dir` as the
    user typed it, for the next step), `lines` the report's lines by kind, `notes` what
    reading or writing files left out, `warnings` what stderr says, and `rows` (with
    `show_rows`) every row of results.csv. Strict JSON, every string printable
    (`json_ready`). With `warn`, the warnings and the notes about files not written also go
    to stderr, where a person running the command sees them."""
    run = report.run
    # The tables (a fleet's are hundreds of thousands of cells) made JSON column by column
    # (`json_rows`); `json_ready` walks only the rest, as it would have walked the tables.
    with gc_paused():  # its lines and records: Python objects by the hundred thousand
        lines = report_lines(run)
        tables: dict[str, object] = {
            "summary": json_rows(report.summary),
            "findings": [] if run.findings is None else json_rows(run.findings)}
        if show_rows:
            tables["rows"] = json_rows(run.results)
    warnings = report_warnings(run)
    out: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "run": {"path": str(run.path), "run_id": run.run_id, "host": run.host,
                "machine": run.machine, "simulated": run.simulated,
                "bwprof_version": run.meta.bwprof_version,
                "bwprof_commit": run.meta.bwprof_commit,
                "interrupted": run.meta.interrupted,
                "state": run.state, "state_detail": run.state_text,
                "stopped_by": run.meta.stopped_by,
                "finished_utc": run.meta.finished_utc},
        "verdict": verdict_json(run, run_dir, page_written(report.written.files)),
        "summary": None,
        "headline": lines["headline"][0],  # report_lines' headline_sentence(run.summary)
        "findings": None,
        "model": None if report.model is None else plain(report.model.as_dict()),
        "files": [str(path) for path in report.written.files],
        "lines": lines,
        "notes": [*run.notes, *report.written.notes],
        "warnings": warnings,
    }
    if show_rows:
        out["rows"] = None
    if warn:
        _say_not_written(report.written.notes)
        print_warnings(warnings)
    ready = cast(dict[str, object],
                 json_ready({key: value for key, value in out.items() if key not in tables}))
    return {key: tables[key] if key in tables else ready[key] for key in out}
