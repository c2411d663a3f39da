"""What `bwprof run` and `bwprof report` write beside the rows: `summary.csv`, Parquet copies
of the tables on request, and the PNG plots.

A plot that cannot be drawn never costs the measurements: the rows are on disk before this
runs, and a plotting error becomes a note for the user, not a failed run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bwprof.errors import BwprofError
from bwprof.report.export import TIMINGS_FILE
from bwprof.report.formats import write_parquet
from bwprof.report.runfolder import RESULTS_PARQUET, RunFolder
from bwprof.report.summary import SUMMARY_FILE

TIMINGS_PARQUET = "timings.parquet"


@dataclass
class Written:
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def write_table(frame: pd.DataFrame, target: Path, parquet: bool = False) -> list[Path]:
    """A report table as CSV (always, the primary format) and Parquet beside it on request."""
    try:
        frame.to_csv(target, index=False)
    except OSError as exc:
        raise BwprofError(f"cannot write {target}: {exc.strerror or exc}") from None
    return [target, _parquet(frame, target.with_suffix(".parquet"))] if parquet else [target]


def _parquet(frame: pd.DataFrame, target: Path) -> Path:
    try:
        return write_parquet(frame, target)
    except (OSError, ValueError, TypeError) as exc:  # pyarrow's errors derive from the last two
        why = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise BwprofError(f"cannot write {target}: {why}") from None


def output_dir(out: Path | None, default: Path) -> Path:
    """The folder report files go to, created where needed; a one-line error when it cannot be."""
    target = out or default
    if target.exists() and not target.is_dir():
        raise BwprofError(f"{target} exists and is not a folder; choose another --out")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BwprofError(f"cannot create {target} ({exc.strerror or exc}); "
                          "choose another --out") from None
    return target


def write_report_files(run: RunFolder, summary: pd.DataFrame, out_dir: Path,
                       parquet: bool = False, plots: bool = True) -> Written:
    """summary.csv (and Parquet copies of the results and timings), then the plots."""
    written = Written()
    written.files += write_table(summary, out_dir / SUMMARY_FILE, parquet)
    if parquet:
        written.files.append(_parquet(run.results, out_dir / RESULTS_PARQUET))
        timings = run.path / TIMINGS_FILE
        if timings.is_file():
            written.files.append(_parquet(pd.read_csv(timings), out_dir / TIMINGS_PARQUET))
    if plots:
        from bwprof.report.plots import write_plots

        try:
            written.files += write_plots(run, out_dir, written.notes)
        except Exception as exc:  # the rows are safe on disk; say why the plots are missing
            written.notes.append(f"plots not written: {type(exc).__name__}: {exc}")
    return written
