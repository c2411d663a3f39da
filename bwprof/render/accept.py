"""`bwprof accept`'s output: the per-path table of each box, one verdict line per box, the
fleet table, JSON for pipelines and the CSV/Parquet files (`--out`)."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import cast

import pandas as pd

from bwprof.analysis import outliers as fleet
from bwprof.analysis.acceptance import Acceptance
from bwprof.analysis.bands import PATH_LABELS
from bwprof.analysis.judge import (
    CHECK_VERDICTS,
    ERROR,
    FAIL,
    Check,
    checks_frame,
    verdict_line,
    worst,
)
from bwprof.render.consoles import PIPED_COLUMNS, columns
from bwprof.schema.text import json_ready
from bwprof.store.formats import json_records, plain

ACCEPT_FILE = "accept.csv"
FLEET_FILE = "accept_fleet.csv"


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    if unit == "ratio":
        return f"{value:.3f}"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


DETAIL_HEADER = (f"{'device':<12} {'path':<8} {'case':<22} {'median':>8} {'unit':<5} "
                 f"{'cv':>6} {'%peak':>6} {'%band':>6} {'verdict':<12} why")


FIGURE_CLAUSE = re.compile(r"(?:^|(?<=; ))[^;]* \(median\)[^;]*(?:; |$)")
"""The reason's "55.5 GB/s (median), 88.0% of the part's 63.0 GB/s peak; " clause, which the
table's median and %peak columns already show."""


def table_reason(reason: str) -> str:
    """The reason as the table's why column shows it: without the clause the columns repeat,
    so what is left (the threshold, a fault, noise) fits before the line is cut."""
    return FIGURE_CLAUSE.sub("", reason, count=1).removesuffix("; ") or reason


MIN_WHY = 30
"""The narrowest why column the table keeps beside the figures; narrower, each check is a
block of its own lines (`_block`)."""
INDENT = "    "


def _cells(c: Check) -> list[str]:
    """One check's cells, in DETAIL_HEADER's order (why excluded)."""
    return [c.device[:12], PATH_LABELS[c.path], c.case[:22], _number(c.value, c.unit),
            c.unit[:5], f"{c.cv:.1%}" if c.cv is not None else "", _number(c.pct_of_peak),
            _number(c.pct_of_band), c.verdict.replace("_", " ")]


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """`text` after `first`, wrapped to `width`, later lines after `rest`: every word kept,
    a word longer than the line broken."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False) or [first.rstrip()]


def _block(c: Check, width: int) -> list[str]:
    """One check where the table does not fit: what it is and its verdict, then its figures
    and its reason, indented."""
    head = f"{c.device} {PATH_LABELS[c.path]} {c.case}: {c.verdict.replace('_', ' ')}"
    figures = [f"median {_number(c.value, c.unit)} {c.unit}" if c.value is not None else "",
               f"cv {c.cv:.1%}" if c.cv is not None else "",
               f"%peak {_number(c.pct_of_peak)}" if c.pct_of_peak is not None else "",
               f"%band {_number(c.pct_of_band)}" if c.pct_of_band is not None else ""]
    shown = ", ".join(f.strip() for f in figures if f)
    lines = _wrap(head, width, "", INDENT)
    if shown:
        lines += _wrap(shown, width, INDENT, INDENT)
    return lines + _wrap(table_reason(c.reason), width, INDENT, INDENT)


def detail_lines(checks: list[Check], width: int = fleet.TABLE_WIDTH) -> list[str]:
    """The per-path table of one box in at most `width` columns: each column as wide as its
    widest cell (DETAIL_HEADER's widths at most), the why column wrapped beside them; where
    fewer than MIN_WHY columns would be left for it, a block of lines per check instead."""
    labels = DETAIL_HEADER.split()[:-1]
    rows = [_cells(c) for c in checks]
    widths = [max([len(label), *(len(row[i]) for row in rows)])
              for i, label in enumerate(labels)]
    right = {"median", "cv", "%peak", "%band"}

    def joined(cells: list[str]) -> str:
        return " ".join(cell.rjust(w) if label in right else cell.ljust(w)
                        for cell, w, label in zip(cells, widths, labels, strict=True))

    fixed = len(joined(labels)) + 1
    if fixed + MIN_WHY > width:
        return [line for c in checks for line in _block(c, width)]
    lines = [joined(labels) + " why"]
    for c, cells in zip(checks, rows, strict=True):
        lines += _wrap(table_reason(c.reason), width, joined(cells) + " ", " " * fixed)
    return lines


def text_lines(result: Acceptance, width: int | None = None) -> list[str]:
    """What stdout shows: one box's table in `width` columns (default: the terminal's, or
    COLUMNS; a pipe's PIPED_COLUMNS), or the fleet table of several; then one verdict line
    per box, wrapped where the terminal is narrower."""
    if width is None:
        width = columns(sys.stdout, PIPED_COLUMNS)
    boxes = result.boxes
    lines: list[str] = []
    if len(boxes) == 1:
        lines += detail_lines(next(iter(boxes.values())), width)
    else:
        lines += fleet.fleet_lines(result.rows, result.outliers)
    lines.append("")
    for (_, box), checks in boxes.items():
        lines += _wrap(verdict_line(box, checks), width, "", INDENT)
    return lines


def accept_json(result: Acceptance) -> dict[str, object]:
    """The JSON of `accept --json` (docs/verdicts.md lists its fields): strict, as report's
    and compare's (`json_ready`: a float that is not finite is null, never Infinity)."""
    boxes = []
    for (run_dir, box), checks in result.boxes.items():
        verdicts = [c.verdict for c in checks]
        boxes.append({
            "box": box, "run_dir": run_dir, "verdict": worst(verdicts),
            "counts": {v: verdicts.count(v) for v in CHECK_VERDICTS},
            "failed": [f"{c.path} {c.device}" for c in checks if c.verdict == FAIL],
            "errors": [f"{c.path} {c.device}" for c in checks if c.verdict == ERROR],
            "line": verdict_line(box, checks)})
    return cast(dict[str, object], json_ready({
        "verdict": result.verdict, "exit_code": result.exit_code,
        "spec": str(result.spec.path) if result.spec.path else None,
        "cv_max": result.spec.cv_max, "boxes": boxes,
        "checks": json_records(checks_frame(result.checks)),
        "fleet": [{k: plain(v) for k, v in row.items() if not k.endswith("_cell")}
                  for row in result.rows],
        "outliers": [{"box": o.box, "device": o.device, "path": o.path, "part": o.part,
                      "pct_from_median": o.pct_from_median, "peers": o.peers, "text": o.text}
                     for o in result.outliers],
        "notes": result.notes,
    }))


def write_files(result: Acceptance, out_dir: Path, parquet: bool) -> list[Path]:
    """accept.csv (every check) and accept_fleet.csv (the fleet table), Parquet beside them
    on request."""
    from bwprof.render.outputs import output_dir, write_table

    folder = output_dir(out_dir, out_dir)
    written = write_table(checks_frame(result.checks), folder / ACCEPT_FILE, parquet)
    written += write_table(fleet.fleet_frame(result.rows) if result.rows else pd.DataFrame(),
                           folder / FLEET_FILE, parquet)
    return written
