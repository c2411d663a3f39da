"""Terminal output of `bwprof compare`: which run is which, then the aligned figures and each
later run's change against the baseline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bwprof.render.terminal import (
    device_words,
    figure_cell,
    is_fleet,
    print_lines,
    print_warnings,
    size_cell,
    summary_gpus,
)
from bwprof.schema.metrics import EFFICIENCY
from bwprof.schema.reading import gc_paused
from bwprof.schema.text import one_line
from bwprof.store.formats import cell_text, is_missing, lower_is_better_row
from bwprof.units import format_bytes

if TYPE_CHECKING:
    from bwprof.analysis.compare import Comparison


def change_cell(row: pd.Series | Mapping[str, Any]) -> str:
    """'-20.0% beyond ±3.1%' for a later run's figure against the baseline: the change, and
    whether it is beyond the noise band (`noise ?` where the rows cannot say); `n/a` where
    both figures are there but no change in % can be (a baseline of 0 or 5e-324)."""
    if is_missing(row["change_pct"]):
        if is_missing(row["baseline_value"]):
            return ""
        return "absent" if is_missing(row["value"]) else "n/a"
    if row["backend"] == "simulated" or row["baseline_simulated"]:
        return "simulated"
    text = f"{row['change_pct']:+.1f}%"
    if is_missing(row["beyond_noise"]):
        return text + " noise ?"
    verdict = "beyond" if row["beyond_noise"] else "within"
    return f"{text} {verdict} ±{row['noise_pct']:.1f}%"


def compare_table(comparison: Comparison, scope: str = "summary") -> Table:
    """Each aligned figure of `scope` per run, and each later run's change against the first;
    a line naming the device model opens each group of rows of that model. The cells are
    made from columns read once (not a Series per row, nor a group per figure): with
    --all-gpus a fleet's table has a row per device and figure."""
    frame = comparison.scope_rows(scope).copy()
    base = frame[frame["baseline"]].set_index("figure_id")["backend"] == "simulated"
    frame["baseline_simulated"] = frame["figure_id"].map(base).fillna(False)
    labels = comparison.labels
    what = "headline figures" if scope == "summary" else "every row"
    heading = f"bwprof compare ({what}; baseline {labels[0]}; GB/s = 1e9 bytes/s)"
    table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  min_width=len(heading))
    table.add_column("figure", overflow="fold", ratio=3)
    for index, label in enumerate(labels):
        table.add_column(label, justify="right", overflow="fold", ratio=2)
        if index:
            table.add_column(f"{label} vs {labels[0]}", justify="right", overflow="fold", ratio=3)
    # Figures of one case, device and size that differ by direction only (lat_memcpy's h2d,
    # d2h and within; bidir_pinned's h2d, d2h and both) name it, or their rows read alike.
    several = (frame.groupby(["case", "device", "size_bytes"], sort=False, dropna=False)
               ["direction"].transform("nunique") > 1).to_numpy(dtype=bool)
    # The rows of each figure together, figures in the order they first appear and rows
    # in theirs (as groupby("figure_id", sort=False) gave them).
    codes = pd.factorize(frame["figure_id"], use_na_sentinel=False)[0]
    order = np.argsort(codes, kind="stable")
    codes = codes[order]
    opens = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else codes
    at_open = np.zeros(len(codes), dtype=bool)
    at_open[opens] = True
    cells = {name: frame[name].to_numpy(dtype=object)[order].tolist() for name in (
        "device_name", "case", "direction", "device", "threads", "size_bytes", "dtype", "phase",
        "page_bytes", "metric", "higher_is_better", "unit", "value", "backend",
        "change_pct", "baseline_value", "baseline_simulated", "beyond_noise", "noise_pct")}
    several_rows = several[order].tolist()
    model: object = None
    row_cells: list[str | Text] = []
    for index, opening in enumerate(at_open.tolist()):
        row = {name: column[index] for name, column in cells.items()}
        if opening:
            if row_cells:
                table.add_row(*row_cells)
            if row["device_name"] != model:
                model = row["device_name"]
                table.add_row(Text(str(model) or "(no device model)", style="bold"))
            row_cells = [_figure_label(row, several_rows[index], scope)]
        unit = str(row["unit"]) if not is_missing(row["unit"]) else "GB/s"
        value = figure_cell(row["value"], row["backend"], unit)
        row_cells.append(value.removesuffix(" GB/s").removesuffix(" overlap") or "absent")
        if not opening:
            row_cells.append(change_cell(row))
    if row_cells:
        table.add_row(*row_cells)
    return table


def _figure_label(first: dict[str, Any], several: bool, scope: str) -> str:
    """'hbm_triad gpu0 256 MiB' and what else tells the figure apart, from the first row of
    its figure."""
    parts = [str(first["case"]), device_words(first), size_cell(first["size_bytes"])]
    if several:
        parts.insert(1, str(first["direction"]))
    return " ".join(p for p in [*parts, *_label_tail(first, scope)] if p)


def _label_tail(row: Mapping[str, Any], scope: str) -> list[str]:
    """What ends a figure's label, in the table and the digest alike: its dtype, and for
    every row (`scope` 'row') its phase and page size, then a metric other than bandwidth."""
    parts: list[str] = []
    if cell_text(row.get("dtype")):
        parts.append(str(row["dtype"]))
    if cell_text(row["phase"]) and scope == "row":
        parts.append(str(row["phase"]))
    if not is_missing(row["page_bytes"]) and scope == "row":
        parts.append(f"{format_bytes(int(row['page_bytes']))} pages")
    if row["metric"] == EFFICIENCY.name:
        parts.append("overlap efficiency")
    elif row["metric"] != "bandwidth":
        parts.append(f"{row['metric']} (lower is better)"
                     if lower_is_better_row(row) else str(row["metric"]))
    return parts


def digest_tables(comparison: Comparison, scope: str = "summary") -> list[Table]:
    """The fleet digest of `scope` (`compare_digest`), a table per later run: per figure how
    many devices compared, the median change, how many changed beyond noise for the worse
    and for the better, and the worst devices (named with their node)."""
    from bwprof.analysis.compare import compare_digest

    digest = compare_digest(comparison, scope)
    labels = comparison.labels
    what = "headline figures" if scope == "summary" else "every row"
    shown = comparison.scope_rows("summary")[["run", "device", "backend"]]  # what it reads
    gpus = [summary_gpus(shown[shown["run"] == label]) for label in labels]
    tables = []
    for label in labels[1:]:
        mine = digest[digest["run"] == label]
        count = (f"{gpus[0]} GPUs" if gpus[0] == gpus[labels.index(label)]
                 else f"{gpus[0]} GPUs in {labels[0]}, {gpus[labels.index(label)]} in {label}")
        heading = (f"bwprof compare, fleet digest ({what}; {label} vs baseline {labels[0]}; "
                   f"{count}; worse, better: changed beyond noise)")
        table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True, min_width=len(heading))
        unknown = bool((mine["noise_unknown"] > 0).any())
        columns = ["figure", "compared", "median", "worse", "better",
                   *(["noise ?"] if unknown else []), "worst (change)"]
        for column in columns:
            table.add_column(column, justify="left" if column in ("figure", columns[-1])
                             else "right", overflow="fold")
        records = mine.to_dict("records")
        # Figures at one place that differ by direction (or stream count) only name it.
        directions: dict[tuple[object, ...], set[object]] = {}
        streams: dict[tuple[object, ...], set[object]] = {}
        for row in records:
            directions.setdefault(_digest_place(row), set()).add(row["direction"])
            streams.setdefault((*_digest_place(row), row["direction"], row["phase"]),
                               set()).add(row["streams"])
        model: object = None
        for row in records:
            if row["device_name"] != model:
                model = row["device_name"]
                table.add_row(Text(str(model) or "(no device model)", style="bold"))
            on = row["on"]
            compared = (f"{row['compared']} {on}" if row["compared"] == row["aligned"]
                        else f"{row['compared']} of {row['aligned']} {on}")
            if row["compared"]:
                median = f"{row['median_change']:+.1f}%"
            else:
                median = "simulated" if row["simulated"] else ""
            worst = ", ".join(f"{device} {change:+.1f}%" for device, change in row["worst"])
            several = len(directions[_digest_place(row)]) > 1
            place = (*_digest_place(row), row["direction"], row["phase"])
            table.add_row(
                _digest_label(row, several, len(streams[place]) > 1),
                compared, median, str(row["worse"]), str(row["better"]),
                *([str(row["noise_unknown"])] if unknown else []), worst)
        tables.append(table)
    return tables


def _digest_place(row: dict[str, Any]) -> tuple[object, ...]:
    """A figure's case, model, size and threads: where its direction tells figures apart."""
    return (row["case"], row["device_name"], row["size_bytes"], row["threads"])


def _digest_label(row: dict[str, Any], several: bool, streams: bool) -> str:
    """'hbm_triad 256 MiB' and what else tells the fleet's figure apart (`_figure_label`
    without the device): the direction where `several`, the stream count where `streams`."""
    parts = [str(row["case"]), size_cell(row["size_bytes"])]
    if several:
        parts.insert(1, str(row["direction"]))
    if not is_missing(row["threads"]):
        parts.append(f"{int(row['threads'])} thr")
    if streams and not is_missing(row["streams"]):
        parts.append(f"{int(row['streams'])} streams")
    return " ".join(p for p in [*parts, *_label_tail(row, row["scope"])] if p)


def fleet_comparison(comparison: Comparison) -> bool:
    """Whether the terminal shows the fleet digest: the headline figures cover more than
    `FLEET_DIGEST_GPUS` GPUs (as `bwprof report`'s digest; `--by model` has one a model)."""
    return is_fleet(comparison.scope_rows("summary"))


def all_rows_line(fleet: bool, show_all: bool) -> str:
    """Where every aligned row is, when the terminal shows fewer."""
    if not fleet:
        return "every measured row, aligned, is in compare.csv (--out) or shown with --all"
    also = "" if show_all else " (with --all, every measured row too)"
    return ("every aligned row, each GPU's, is in compare.csv (--out) and in `bwprof compare "
            f"--json`; `bwprof compare --all-gpus` shows them here{also}")


def print_comparison(console: Console, comparison: Comparison, show_all: bool = False,
                     warn: bool = True, all_gpus: bool = False) -> None:
    """Which run is which, the machine differences, then the aligned figures; with `warn`,
    the runs that did not finish on stderr. A fleet (more than `FLEET_DIGEST_GPUS` GPUs),
    unless `all_gpus`, gets the digest (`digest_tables`) and a line saying where every row
    is: a row per GPU was a hundred thousand lines and most of compare's time."""
    from bwprof.analysis.compare import run_lines

    print_lines(console, run_lines(comparison))
    print_lines(console, [f"warning: {one_line(line)}" for line in comparison.warnings
                           if line not in comparison.state_warnings], style="yellow")
    if warn:  # a run that did not finish: said where a person sees it
        print_warnings(comparison.state_warnings)
    fleet = not all_gpus and fleet_comparison(comparison)
    with gc_paused():  # rich's cells by the hundred thousand, none in a cycle
        for scope in ("summary", "row") if show_all else ("summary",):
            for table in (digest_tables(comparison, scope) if fleet
                          else [compare_table(comparison, scope)]):
                console.print(table)
    if fleet or not show_all:
        print_lines(console, [all_rows_line(fleet, show_all)])
