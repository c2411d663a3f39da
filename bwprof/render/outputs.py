"""What `bwprof run` and `bwprof report` write beside the rows: `summary.csv`, the column
dictionary (`columns.csv`), `results.parquet` (the rows with their types, for pandas and
DuckDB), Parquet copies of the other tables on request (each Parquet file with the
dictionary in its metadata), the PNG plots and `report.html`.

Every input is read and checked before the first file is written, and every file is written
whole (`bwprof.store.atomic`), so a failure never leaves part of the output. A
plot that cannot be drawn never costs the measurements: the rows are on disk before this
runs, and a plotting error becomes a note for the user, not a failed run.
"""

from __future__ import annotations

import contextvars
import errno
import os
import threading
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from bwprof.analysis.summary import SUMMARY_FILE
from bwprof.errors import BwprofError, OutputError, write_failure
from bwprof.schema.columns import COLUMNS_FILE, dictionary_frame
from bwprof.schema.reading import link_note
from bwprof.schema.table import (
    RESULT_DTYPES,
    ResultDtype,
    check_schema_version,
    read_run_csv,
    typed_results,
)
from bwprof.schema.text import shown
from bwprof.store.atomic import Picture, captured_figures, held_folder, write_csv_atomic
from bwprof.store.export import RESULTS_FILE, TIMINGS_FILE
from bwprof.store.formats import write_parquet
from bwprof.store.history_schema import PYARROW_ADVICE
from bwprof.store.mirror import mirror_metadata
from bwprof.store.runfolder import RESULTS_PARQUET, numeric_column

if TYPE_CHECKING:
    from bwprof.analysis.run import Run

HTML_FILE = "report.html"
TIMINGS_PARQUET = "timings.parquet"
REPORT_DIR = "report"
"""`bwprof report RUN_DIR` without --out writes into RUN_DIR/report/, never beside the rows."""


@dataclass
class Written:
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def write_table(frame: pd.DataFrame, target: Path, parquet: bool = False) -> list[Path]:
    """A report table as CSV (always, the primary format; text cells safe in a spreadsheet)
    and Parquet beside it on request, each written whole; OutputError where one cannot be."""
    written = [write_csv_atomic(frame, target)]
    if parquet:
        written.append(_parquet(frame, target.with_suffix(".parquet")))
    return written


def _parquet(frame: pd.DataFrame, target: Path,
             dtypes: dict[str, ResultDtype] | None = None,
             metadata: dict[bytes, bytes] | None = None) -> Path:
    try:
        return write_parquet(frame, target, dtypes, metadata)
    except OutputError:
        raise
    except (ValueError, TypeError) as exc:  # pyarrow's conversion errors derive from these
        raise BwprofError(f"cannot write {target}: {str(exc).splitlines()[0]}") from None


def write_results_parquet(results: pd.DataFrame, target: Path, notes: list[str],
                          source: Path | None = None) -> list[Path]:
    """results.parquet: the rows with every column as its type (`RESULT_DTYPES`: integers
    stay integers beside a skipped row's empty cells, an all-empty figure column is still a
    double), so pandas and DuckDB read numbers where the CSV leaves them guessing. Without
    pyarrow (a dependency, but an install can lack it) a note, not a failed report.
    `source`: the results.csv these rows are, beside it: the copy records which
    (`bwprof.store.mirror`), so reading the folder may take the copy for it."""
    metadata = mirror_metadata(source) if source is not None else None
    try:
        return [_parquet(typed_results(results), target, RESULT_DTYPES, metadata)]
    except ImportError:
        notes.append(f"{target.name} not written: it needs pyarrow ({PYARROW_ADVICE})")
        return []


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def output_dir(out: Path | None, default: Path) -> Path:
    """The folder report files go to, created where needed. A path that is not a folder is
    bad input (BwprofError, exit 2); one that cannot be created is an OutputError (exit 3)."""
    target = out or default
    if os.path.lexists(target) and not target.is_dir():  # a file, or a link to nothing
        raise BwprofError(f"{target} exists and is not a folder; choose another --out")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTDIR, errno.ELOOP):  # the path is wrong
            raise BwprofError(f"cannot create {target} ({exc.strerror}); choose another "
                              "--out") from None
        raise write_failure(target, exc) from None
    return target


def refuse_link(folder: Path) -> None:
    """BwprofError (exit 2, before anything is written) where `folder`, a folder bwprof
    chose inside one the user named (RUN_DIR/report/), is a symbolic link: the run folder is
    untrusted input, and a planted link would send the files into its target (another run's
    report, any folder the user can write)."""
    if not os.path.islink(folder):
        return
    raise BwprofError(f"{shown(folder)} is a symbolic link{link_note(folder)}; bwprof never "
                      "writes through a link inside a run folder: remove it, or pass --out "
                      "DIR")


def read_timings(path: Path) -> pd.DataFrame:
    """timings.csv, checked (read with bounded effort, of a schema this bwprof reads, numeric
    seconds), its text cells as measured, for its Parquet copy; BwprofError with one line
    otherwise. A last line a stopped run cut off is left out."""
    frame = read_run_csv(path)
    check_schema_version(frame, path)
    return numeric_column(frame, "seconds_per_op", path, "timings")


def write_report_files(run: Run, out_dir: Path,
                       parquet: bool = False, plots: bool = True,
                       default_dir: bool = False, html: bool = False) -> Written:
    """summary.csv (with `parquet`, its Parquet copy), results.parquet, with `parquet` the
    Parquet copy of timings.csv, then the plots, then report.html (with the plots inline)
    where `html`, and columns.csv.

    Inputs are read first: a timings.csv that cannot be read costs only timings.parquet (a
    note). A file that cannot be written raises OutputError; with `default_dir` (`report`
    writing to the folder the user did not choose, RUN_DIR/report/, created here) it is a
    note instead, naming what was not written and saying to pass --out, and the report is
    still shown; a default folder left empty is removed again."""
    written = Written()
    timings: pd.DataFrame | None = None
    timings_path = run.path / TIMINGS_FILE if run.path is not None else None
    if parquet and timings_path is not None and timings_path.is_file():
        try:
            timings = read_timings(timings_path)
        except BwprofError as exc:
            written.notes.append(f"{TIMINGS_PARQUET} not written: {exc}")

    pictures: list[Picture] = []
    plot_notes: list[str] = []
    steps: list[tuple[str, Callable[[], list[Path]]]] = [
        (SUMMARY_FILE, lambda: write_table(run.summary, out_dir / SUMMARY_FILE, parquet))]
    # Beside the results.csv its rows were read from (the run's own folder): the copy
    # that `load` may read in its place.
    source = run.path / RESULTS_FILE if run.path is not None else None
    beside = source if source is not None and _same_folder(source.parent, out_dir) else None
    steps.append((RESULTS_PARQUET, lambda: write_results_parquet(
        run.results, out_dir / RESULTS_PARQUET, written.notes, beside)))
    if parquet and timings is not None:
        frame = timings
        steps.append((TIMINGS_PARQUET, lambda: [_parquet(frame, out_dir / TIMINGS_PARQUET)]))
    if plots:
        steps.append(("the plots", lambda: _plots(run, out_dir, plot_notes,
                                                  pictures if html else None)))
    if html:
        steps.append((HTML_FILE, lambda: [_html(run, out_dir, pictures, plot_notes, plots)]))
    # What every column of results.csv means, with the files it explains.
    steps.append((COLUMNS_FILE,
                  lambda: [write_csv_atomic(dictionary_frame(), out_dir / COLUMNS_FILE)]))
    if default_dir:
        refuse_link(out_dir)
    created = default_dir and not out_dir.exists()
    try:
        if default_dir:
            output_dir(out_dir, out_dir)
    except (OutputError, BwprofError) as exc:
        written.notes.append(_not_written(out_dir, [name for name, _ in steps], exc))
        return written
    with ExitStack() as stack:
        try:
            # Opened once: every file below goes into this very folder, never through a
            # link put at its name meanwhile (RUN_DIR/report/ is never opened through one).
            stack.enter_context(held_folder(out_dir, follow=not default_dir))
        except OSError as exc:
            if exc.errno == errno.ELOOP and default_dir:
                refuse_link(out_dir)  # made a link since it was checked
            failure = write_failure(out_dir, exc)
            if not default_dir:
                raise failure from None
            written.notes.append(_not_written(out_dir, [name for name, _ in steps], failure))
            return written
        for number, (name, step) in enumerate(steps):
            try:
                written.files += (_while_judging(run, step) if name == RESULTS_PARQUET
                                  else step())
            except OutputError as exc:
                if not default_dir:
                    raise
                written.notes.append(_not_written(
                    out_dir, [name for name, _ in steps[number:]], exc))
                break
    written.notes += plot_notes
    if created and not written.files:
        with suppress(OSError):
            out_dir.rmdir()
    return written


def _while_judging(run: Run, step: Callable[[], list[Path]]) -> list[Path]:
    """`step()` (results.parquet: a second of pyarrow encoding and compressing a fleet's
    rows, without the GIL) in a thread of its own, while this one judges the run
    (`run.checks`), which the report, the plots' bands and the verdict read next: on two
    cores the two overlap. The step keeps its place: it is done, or has raised, on return.
    A judging error is left for where the checks are read (it is raised there again)."""
    context = contextvars.copy_context()  # the folder `held_folder` holds, in the thread
    outcome: list[list[Path] | BaseException] = []

    def work() -> None:
        try:
            outcome.append(context.run(step))
        except BaseException as exc:  # raised again below, in the caller's thread
            outcome.append(exc)

    thread = threading.Thread(target=work, name="bwprof-results-parquet")
    thread.start()
    try:
        with suppress(Exception):
            run.checks  # noqa: B018 (computed and kept: a cached property)
    finally:
        thread.join()  # an interrupt waits for the file to be whole (or not there)
    found = outcome[0]
    if isinstance(found, BaseException):
        raise found
    return found


def _not_written(out_dir: Path, names: list[str], exc: BwprofError) -> str:
    why = getattr(exc, "reason", None) or str(exc)
    return (f"not written to {out_dir}: {', '.join(names)} ({why}); pass --out DIR to write "
            "them elsewhere")


def _html(run: Run, out_dir: Path, pictures: list[Picture],
          plot_notes: list[str], plots: bool) -> Path:
    from bwprof.render.html import write_html

    notes = list(plot_notes) if plots else ["plots not drawn (--no-plots)"]
    return write_html(run, out_dir / HTML_FILE, pictures, notes)


def _bands(run: Run, notes: list[str]) -> dict[str, tuple[float, float]] | None:
    """The built-in achievable bands of the run's paths (`bwprof accept`'s), for the summary
    plot to shade; none for a simulated run, or where judging fails (a note says why)."""
    if run.simulated:
        return None
    from bwprof.analysis.judge import summary_bands

    try:
        return summary_bands(run.checks) or None
    except Exception as exc:  # the plots still come, without the bands
        notes.append(f"achievable bands not shaded: {type(exc).__name__}: {exc}")
        return None


def _plots(run: Run, out_dir: Path, notes: list[str],
           pictures: list[Picture] | None) -> list[Path]:
    """The PNG plots; each figure is also rendered for the page into `pictures` where one
    is given (the page's SVG costs about as much again as the PNG: not for `report` without
    --html). A report folder (not the run folder itself) that holds this run's plots, drawn
    by this bwprof and unchanged, keeps them (`plotcache`): nothing is drawn again."""
    from bwprof.render import plotcache

    if run.path is not None and out_dir.resolve() == run.path.resolve():
        return _drawn(run, out_dir, notes, pictures)[0]
    with plotcache.held(out_dir) as folder:  # another report drawing here waits its turn
        key = plotcache.plot_key(run) if folder is not None else None
        found = plotcache.reuse(out_dir, key, pictures is not None)
        if found is not None:
            notes += found.notes
            if pictures is not None and found.pictures is not None:
                pictures += found.pictures
            return found.files
        before = plotcache.written_before(folder) if folder is not None else {}
        plotcache.record(out_dir, None, plotcache.Drawn([], [], None))  # none while drawing
        files, mine, drawn = _drawn(run, out_dir, notes, pictures)
        if not any(note.startswith(PLOTS_FAILED) for note in mine):
            if folder is not None:
                plotcache.remove_stale(folder, before, files)
            plotcache.record(out_dir, key, plotcache.Drawn(files, mine, drawn))
        return files


def _drawn(run: Run, out_dir: Path, notes: list[str], pictures: list[Picture] | None
           ) -> tuple[list[Path], list[str], list[Picture] | None]:
    """Draw the plots: the files, the notes drawing gave (added to `notes` too) and the
    page's pictures (added to `pictures`, where one is given)."""
    mine: list[str] = []
    drawn: list[Picture] = []
    files = _draw(run, out_dir, mine, drawn if pictures is not None else None)
    notes += mine
    if pictures is not None:
        pictures += drawn
    return files, mine, drawn if pictures is not None else None


PLOTS_FAILED = "plots not written:"


def _draw(run: Run, out_dir: Path, notes: list[str],
          pictures: list[Picture] | None) -> list[Path]:
    from bwprof.render.plots import write_plots

    try:
        if pictures is None:
            return write_plots(run, out_dir, notes, band=_bands(run, notes))
        with captured_figures() as drawn:
            try:
                return write_plots(run, out_dir, notes, band=_bands(run, notes))
            finally:
                pictures += drawn
    except OutputError:
        raise
    except Exception as exc:  # the rows are safe on disk; say why the plots are missing
        notes.append(f"{PLOTS_FAILED} {type(exc).__name__}: {exc}")
        return []
