"""`bwprof accept`'s output: the per-path table of each box, one verdict line per box, the
fleet table, JSON for pipelines and the CSV/Parquet files (`--out`)."""

from __future__ import annotations

import re
from pathlib import Path

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


def detail_lines(checks: list[Check]) -> list[str]:
    """The per-path table of one box, each line cut to the fleet table's width."""
    lines = [DETAIL_HEADER]
    for c in checks:
        cv = f"{c.cv:.1%}" if c.cv is not None else ""
        line = (f"{c.device[:12]:<12} {PATH_LABELS[c.path]:<8} {c.case[:22]:<22} "
                f"{_number(c.value, c.unit):>8} {c.unit[:5]:<5} {cv:>6} "
                f"{_number(c.pct_of_peak):>6} {_number(c.pct_of_band):>6} "
                f"{c.verdict.replace('_', ' '):<12} {table_reason(c.reason)}")
        lines.append(line if len(line) <= fleet.TABLE_WIDTH
                     else line[:fleet.TABLE_WIDTH - 1] + "…")
    return lines


def text_lines(result: Acceptance) -> list[str]:
    """What stdout shows: one box's table, or the fleet table of several; then one verdict
    line per box."""
    boxes = result.boxes
    lines: list[str] = []
    if len(boxes) == 1:
        lines += detail_lines(next(iter(boxes.values())))
    else:
        lines += fleet.fleet_lines(result.rows, result.outliers)
    lines.append("")
    for (_, box), checks in boxes.items():
        lines.append(verdict_line(box, checks))
    return lines


def accept_json(result: Acceptance) -> dict[str, object]:
    """The JSON of `accept --json` (docs/verdicts.md lists its fields)."""
    boxes = []
    for (run_dir, box), checks in result.boxes.items():
        verdicts = [c.verdict for c in checks]
        boxes.append({
            "box": box, "run_dir": run_dir, "verdict": worst(verdicts),
            "counts": {v: verdicts.count(v) for v in CHECK_VERDICTS},
            "failed": [f"{c.path} {c.device}" for c in checks if c.verdict == FAIL],
            "errors": [f"{c.path} {c.device}" for c in checks if c.verdict == ERROR],
            "line": verdict_line(box, checks)})
    return {
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
    }


def write_files(result: Acceptance, out_dir: Path, parquet: bool) -> list[Path]:
    """accept.csv (every check) and accept_fleet.csv (the fleet table), Parquet beside them
    on request."""
    from bwprof.render.outputs import output_dir, write_table

    folder = output_dir(out_dir, out_dir)
    written = write_table(checks_frame(result.checks), folder / ACCEPT_FILE, parquet)
    written += write_table(fleet.fleet_frame(result.rows) if result.rows else pd.DataFrame(),
                           folder / FLEET_FILE, parquet)
    return written
