"""Terminal output of `bwprof compare`: which run is which, then the aligned figures and each
later run's change against the baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bwprof.render.terminal import (
    _on,
    _print_lines,
    _size_cell,
    figure_cell,
    print_warnings,
)
from bwprof.schema.metrics import EFFICIENCY
from bwprof.schema.text import one_line
from bwprof.store.formats import cell_text, is_missing, lower_is_better_row
from bwprof.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from bwprof.analysis.compare import Comparison


def change_cell(row: pd.Series) -> str:
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
    a line naming the device model opens each group of rows of that model."""
    frame = comparison.rows[comparison.rows["scope"] == scope].copy()
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
    directions = frame.groupby(["case", "device", "size_bytes"], sort=False,
                               dropna=False)["direction"].nunique()
    several = {key for key, count in directions.items() if count > 1}
    model = None
    for _, group in frame.groupby("figure_id", sort=False):
        first = group.iloc[0]
        if first["device_name"] != model:
            model = first["device_name"]
            table.add_row(Text(str(model) or "(no device model)", style="bold"))
        parts = [str(first["case"]), _on(first), _size_cell(first["size_bytes"])]
        if (first["case"], first["device"], first["size_bytes"]) in several:
            parts.insert(1, str(first["direction"]))
        if cell_text(first.get("dtype")):
            parts.append(str(first["dtype"]))
        if first["phase"] and scope == "row":
            parts.append(str(first["phase"]))
        if not is_missing(first["page_bytes"]) and scope == "row":
            parts.append(f"{format_bytes(int(first['page_bytes']))} pages")
        if first["metric"] == EFFICIENCY.name:
            parts.append("overlap efficiency")
        elif first["metric"] != "bandwidth":
            parts.append(f"{first['metric']} (lower is better)"
                         if lower_is_better_row(first) else str(first["metric"]))
        cells = [" ".join(p for p in parts if p)]
        for index, (_, row) in enumerate(group.iterrows()):
            unit = str(row["unit"]) if not is_missing(row["unit"]) else "GB/s"
            value = figure_cell(row["value"], row["backend"], unit)
            cells.append(value.removesuffix(" GB/s").removesuffix(" overlap") or "absent")
            if index:
                cells.append(change_cell(row))
        table.add_row(*cells)
    return table


def print_comparison(console: Console, comparison: Comparison, show_all: bool = False,
                     warn: bool = True) -> None:
    """Which run is which, the machine differences, then the aligned figures; with `warn`,
    the runs that did not finish on stderr."""
    from bwprof.analysis.compare import run_lines

    _print_lines(console, run_lines(comparison))
    _print_lines(console, [f"warning: {one_line(line)}" for line in comparison.warnings
                           if line not in comparison.state_warnings], style="yellow")
    if warn:  # a run that did not finish: said where a person sees it
        print_warnings(comparison.state_warnings)
    console.print(compare_table(comparison, "summary"))
    if show_all:
        console.print(compare_table(comparison, "row"))
    else:
        _print_lines(console, ["every measured row, aligned, is in compare.csv (--out) or "
                               "shown with --all"])
