"""`bwprof report RUN_DIR`: the summary, findings, plots and model arithmetic of a saved run,
rendered again on any machine without touching hardware."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pandas as pd
from rich.console import Console

from bwprof.analysis.model import ModelReport, model_lines, model_report, parse_model
from bwprof.analysis.summary import build_summary, headline_sentence
from bwprof.errors import BwprofError
from bwprof.paths import user_path
from bwprof.render.outputs import REPORT_DIR, Written, output_dir, write_report_files
from bwprof.render.terminal import print_report, print_warnings, report_lines
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.table import rows_from_frame
from bwprof.schema.text import json_ready, one_line, shown
from bwprof.store.export import LOCK_FILE, RESULTS_FILE, SYSTEM_FILE
from bwprof.store.formats import check_format, json_records, plain
from bwprof.store.runfolder import RunFolder, load_run, machine_line, state_warning


@dataclass
class RunReport:
    run: RunFolder
    summary: pd.DataFrame
    written: Written
    model: ModelReport | None = None


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
    spec = parse_model(model) if model is not None else None
    parquet = check_format(file_format)
    chosen = user_path(out, "--out") if out is not None else None
    run = load_run(run_dir)
    if chosen is not None:
        _not_another_run(chosen, run.path)
    summary = build_summary(run.results)
    report = (model_report(spec, summary, run.meta, run.results) if spec is not None
              else None)
    if not write and chosen is None and not html and not parquet:
        return RunReport(run, summary, Written(), report)
    target = run.path / REPORT_DIR if chosen is None else output_dir(chosen, chosen)
    written = write_report_files(run, summary, target, parquet=parquet, plots=plots,
                                 default_dir=chosen is None, html=html)
    return RunReport(run, summary, written, report)


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


def report_warnings(run: RunFolder) -> list[str]:
    """What `report` warns about on stderr: a run that did not finish, whose figures are
    only those of the rows it wrote."""
    consequence = ("its figures are of the rows written so far" if run.running
                   else "its figures are of the rows it wrote; cases it did not reach are "
                   "absent")
    line = state_warning(run, f"run {run.label}", consequence)
    return [line] if line else []


def _state_tag(run: RunFolder) -> str:
    """' (incomplete: still running)' after the run's first line; '' once finished."""
    if run.state == "finished":
        return ""
    return f" ({run.state_text})" if run.state == "interrupted" else (
        f" (incomplete: {run.state_text})")


def print_run_report(console: Console, report: RunReport, show_rows: bool = False,
                     warn: bool = True) -> None:
    """The report on `console`, and on stderr the files that could not be written; with
    `warn`, `report_warnings` on stderr too (a person sees them whatever stdout is piped
    to)."""
    run = report.run
    meta = run.meta
    console.print(
        f"run {run.label}: {one_line(run.run_id)}, {machine_line(meta)}, bwprof "
        f"{one_line(meta.bwprof_text)}, started {one_line(meta.started_utc or '?')}"
        + _state_tag(run),
        markup=False, highlight=False, soft_wrap=True,
    )
    print_report(console, rows_from_frame(run.results), report.summary, show_rows=show_rows,
                 meta=meta, findings=run.findings, results=run.results)
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


def run_report_json(report: RunReport, show_rows: bool = False,
                    warn: bool = True) -> dict[str, object]:
    """Everything `print_run_report` says, for scripts (simulated figures keep their label):
    `run.state` ('finished', 'interrupted', 'incomplete') with `state_detail` and
    `stopped_by`, `lines` the report's lines by kind, `notes` what reading or writing files
    left out, `warnings` what stderr says, and `rows` (with `show_rows`) every row of
    results.csv. Strict JSON, every string printable (`json_ready`). With `warn`, the
    warnings and the notes about files not written also go to stderr, where a person
    running the command sees them."""
    run = report.run
    lines = report_lines(rows_from_frame(run.results), report.summary, run.meta, run.findings,
                         run.results)
    warnings = report_warnings(run)
    out: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "run": {"path": str(run.path), "run_id": run.run_id, "host": run.host,
                "machine": machine_line(run.meta), "simulated": run.simulated,
                "bwprof_version": run.meta.bwprof_version,
                "bwprof_commit": run.meta.bwprof_commit,
                "interrupted": run.meta.interrupted,
                "state": run.state, "state_detail": run.state_text,
                "stopped_by": run.meta.stopped_by,
                "finished_utc": run.meta.finished_utc},
        "summary": json_records(report.summary),
        "headline": headline_sentence(report.summary),
        "findings": [] if run.findings is None else json_records(run.findings),
        "model": None if report.model is None else plain(report.model.as_dict()),
        "files": [str(path) for path in report.written.files],
        "lines": lines,
        "notes": [*run.notes, *report.written.notes],
        "warnings": warnings,
    }
    if show_rows:
        out["rows"] = json_records(run.results)
    if warn:
        _say_not_written(report.written.notes)
        print_warnings(warnings)
    return cast(dict[str, object], json_ready(out))
