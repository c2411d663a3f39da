"""`bwprof accept`'s output: the per-path table of each box, one verdict line per box, the
fleet table, JSON for pipelines and the CSV/Parquet files (`--out`)."""

from __future__ import annotations

import re
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import cast

import pandas as pd

from bwprof.analysis import outliers as fleet
from bwprof.analysis.acceptance import (
    BAD,
    FLEET_WORST,
    Acceptance,
    CaseVerdicts,
    fleet_digest,
    more_gpus_than,
)
from bwprof.analysis.bands import PATH_LABELS
from bwprof.analysis.judge import (
    CANNOT_JUDGE,
    CHECK_COLUMNS,
    CHECK_VERDICTS,
    ERROR,
    FAIL,
    PASS,
    VERDICTS,
    WARN,
    Check,
    checks_frame,
    verdict_line,
    worst,
)
from bwprof.render.consoles import PIPED_COLUMNS, columns
from bwprof.render.terminal import FLEET_DIGEST_GPUS
from bwprof.schema.text import json_ready
from bwprof.store.formats import json_rows, plain

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


def text_lines(result: Acceptance, width: int | None = None, *, all_gpus: bool = False,
               written: Sequence[Path] = ()) -> list[str]:
    """What stdout shows: one box's table in `width` columns (default: the terminal's, or
    COLUMNS; a pipe's PIPED_COLUMNS), or the fleet table of several; then one verdict line
    per box, wrapped where the terminal is narrower. More than `FLEET_DIGEST_GPUS` GPUs get
    the fleet's digest instead (`digest_lines`; `written`: the files it names), unless
    `all_gpus`."""
    if width is None:
        width = columns(sys.stdout, PIPED_COLUMNS)
    if not all_gpus and more_gpus_than(result.checks, FLEET_DIGEST_GPUS):
        return digest_lines(result, width, written)
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


# -- a fleet's digest: the answer first, then per path and case, the worst GPUs named ------

DIGEST_HEADER = ("path", "case", "on", "PASS", "WARN", "FAIL", "ERROR", "CANNOT JUDGE",
                 "lowest %band")
_DIGEST_RIGHT = {"on", "PASS", "WARN", "FAIL", "ERROR", "CANNOT JUDGE"}


def gpu_name(check: Check, runs: int = 1) -> str:
    """A GPU (or host) of a fleet as the digest names it (`device_name`)."""
    return device_name(check.device, check.box, check.run_dir if runs > 1 else "")


def device_name(device: str, box: str, run_dir: str = "") -> str:
    """A device of a fleet as the digest names it: node first ('node12:gpu0'); its box
    after it where the box is not named by the node ('node12:gpu0 (gpu-a#3f2a9c)'), before
    it where the device names no node (a judge that named a box's GPUs 'gpu0'); its run
    folder where given (several were judged)."""
    node, colon, _ = device.partition(":")
    if not colon:
        name = f"{box}:{device}"
    elif node != box:
        name = f"{device} ({box})"
    else:
        name = device
    return f"{name} in {run_dir}" if run_dir else name


def _figure(check: Check) -> str:
    """'3210 GB/s, 77% of band' (the median and % of band, where there are)."""
    parts = []
    if check.value is not None:
        parts.append(f"{_number(check.value, check.unit)} {check.unit}".rstrip())
    if check.pct_of_band is not None:
        parts.append(f"{_number(check.pct_of_band)}% of band")
    return ", ".join(parts)


def _counts(verdicts: Counter[str]) -> str:
    """'97830 pass, 21740 cannot judge', in `CHECK_VERDICTS`' telling order (as
    `verdict_line`)."""
    return ", ".join(f"{verdicts[v]} {v.lower().replace('_', ' ')}"
                     for v in (PASS, WARN, FAIL, CANNOT_JUDGE, ERROR) if verdicts[v])


def digest_lines(result: Acceptance, width: int = PIPED_COLUMNS,
                 written: Sequence[Path] = ()) -> list[str]:
    """A fleet's acceptance in a few dozen lines whatever its size: the verdict of every
    box at once, how many boxes have each verdict and the worst of them (their verdict
    lines), a row per path and case counting its GPUs by verdict with the lowest % of band
    (naming the GPU), the worst GPUs of each case that fails, warns or raised, why the
    others could not be judged, the outliers against the fleet median, and where every
    check is. One pass over the checks' columns (`fleet_digest`); no row per GPU is made,
    only the shown boxes' checks are gathered."""
    checks = result.checks
    digest = fleet_digest(checks)
    cases, verdict_of = digest.cases, digest.boxes
    runs = len({run_dir for run_dir, _ in verdict_of})
    overall = worst(list(digest.told))
    head = (f"{overall.replace('_', ' ')} — {len(verdict_of)} boxes, {digest.gpus} GPUs"
            f"{f' in {runs} run folders' if runs > 1 else ''}, {len(checks)} checks: "
            f"{_counts(digest.told)}")
    unjudged = [c for c in cases if c.unjudged and not sum(
        n for v, n in c.counts.items() if v != CANNOT_JUDGE)]
    if unjudged:  # paths nothing of which could be judged, as a box's verdict line says
        order = list(PATH_LABELS)
        head += " (" + ", ".join(dict.fromkeys(
            PATH_LABELS[c.path] for c in sorted(unjudged, key=lambda c: order.index(c.path))
        )) + " not judged anywhere)"
    lines = _wrap(head, width, "", INDENT)
    by_box: Counter[str] = Counter(verdict_of.values())
    lines += _wrap("boxes: " + ", ".join(f"{by_box[v]} {v.lower().replace('_', ' ')}"
                                         for v in VERDICTS if by_box[v]), width, "", INDENT)
    shown = sorted((key for key, verdict in verdict_of.items()
                    if verdict in (FAIL, WARN) or key in digest.erred),
                   key=lambda key: VERDICTS.index(verdict_of[key]))
    wanted = set(shown[:FLEET_WORST])
    of_box: dict[tuple[str, str], list[Check]] = {key: [] for key in wanted}
    if wanted:
        for c in checks:
            if (c.run_dir, c.box) in wanted:
                of_box[(c.run_dir, c.box)].append(c)
    for key in shown[:FLEET_WORST]:  # a box of several run folders named with its own
        label = f"{key[1]} in {key[0]}" if runs > 1 else key[1]
        lines += _wrap(verdict_line(label, of_box[key]), width, "", INDENT)
    if len(shown) > FLEET_WORST:
        lines.append(f"... and {len(shown) - FLEET_WORST} more boxes that fail, warn or "
                     "raised (their verdict lines: --all-gpus or --json)")
    lines.append("")
    lines += [*_case_table(cases, runs), ""]
    for case in cases:
        if case.worst:
            lines += _wrap(_worst_line(case, runs), width, "", INDENT)
    for case in cases:
        if case.unjudged:
            reason, same, total = case.unjudged
            lines += _wrap(f"cannot judge {PATH_LABELS[case.path]} {case.case} on {total} "
                           f"{case.on}: {table_reason(reason)}"
                           + (f" (on {same}; the others' reasons: --json)" if same < total
                              else ""), width, "", INDENT)
    if result.outliers:
        lines += _wrap(_outlier_line(result, runs), width, "", INDENT)
    files = [str(path) for path in written if path.name == ACCEPT_FILE]
    where = (f"every check ({len(checks)}) is in `bwprof accept --json`"
             + (f" and in {', '.join(files)}" if files else "")
             + "; `bwprof accept --all-gpus` lists each here")
    return [*lines, "", *_wrap(where, width, "", INDENT)]


def _case_table(cases: list[CaseVerdicts], runs: int) -> list[str]:
    """A row per path and case: how many GPUs (or hosts) have each verdict and the lowest
    % of band, naming its GPU; each column as wide as its widest cell."""
    rows = []
    for case in cases:
        low = case.lowest
        lowest = (f"{_number(low.pct_of_band)} {gpu_name(low, runs)}"
                  if low is not None and low.pct_of_band is not None else "")
        rows.append([PATH_LABELS[case.path], case.case,
                     f"{sum(case.counts.values())} {case.on}",
                     *(str(case.counts[v]) for v in (PASS, WARN, FAIL, ERROR, CANNOT_JUDGE)),
                     lowest])
    widths = [max([len(label), *(len(row[i]) for row in rows)])
              for i, label in enumerate(DIGEST_HEADER)]

    def joined(cells: Sequence[str]) -> str:
        return " ".join(cell.rjust(w) if label in _DIGEST_RIGHT else cell.ljust(w)
                        for cell, w, label in zip(cells, widths, DIGEST_HEADER, strict=True)
                        ).rstrip()

    return [joined(DIGEST_HEADER), *(joined(row) for row in rows)]


def _worst_line(case: CaseVerdicts, runs: int) -> str:
    """'FAIL HBM hbm_triad on 3 of 10870 GPUs (2 fail, 1 warn), worst first: node12:gpu0 FAIL
    3210 GB/s, 77.3% of band: below 3528 GB/s (73% of peak); node5:gpu0 FAIL ...; and 2 more
    (--json)': the worst GPU's reason, the others' figures."""
    first = case.worst[0]
    said = [f"{gpu_name(c, runs)} {c.verdict} {_figure(c)}".rstrip() for c in case.worst]
    said[0] += f": {table_reason(first.reason)}"
    how = ", ".join(f"{case.counts[v]} {'bwprof error' if v == ERROR else v.lower()}"
                    for v in BAD if case.counts[v])
    more = case.bad - len(case.worst)
    return (f"{first.verdict} {PATH_LABELS[case.path]} {case.case} on "
            f"{sum(case.counts[v] for v in BAD)} of {sum(case.counts.values())} {case.on} "
            f"({how}), worst first: {'; '.join(said)}"
            + (f"; and {more} more (--json)" if more > 0 else ""))


def _outlier_line(result: Acceptance, runs: int) -> str:
    """The outliers against the fleet median, the furthest first, at most FLEET_WORST."""
    outliers = sorted(result.outliers, key=lambda o: o.pct_from_median)
    shown = [f"{device_name(o.device, o.box, o.run_dir if runs > 1 else '')} "
             f"{PATH_LABELS[o.path]} {abs(o.pct_from_median):.1f}% "
             f"{'below' if o.pct_from_median < 0 else 'above'} the median of {o.peers} "
             f"{o.part or 'hosts'}" for o in outliers[:FLEET_WORST]]
    return (f"{len(outliers)} outlier(s) against the fleet median (more than "
            f"{result.spec.outlier_pct:g}% worse than their model's), the furthest first: "
            + "; ".join(shown)
            + (f"; and {len(outliers) - FLEET_WORST} more (--json)"
               if len(outliers) > FLEET_WORST else ""))


def checks_table(checks: list[Check]) -> pd.DataFrame:
    """`checks_frame`'s frame (a row per check, `CHECK_COLUMNS`), made column by column from
    each check's fields read once: `Check.as_dict` deep-copied every field of every check
    (most of `--json`'s and `--out`'s CPU at 120,000 checks)."""
    if not checks:
        return checks_frame(checks)
    read = attrgetter(*CHECK_COLUMNS)
    columns = zip(*map(read, checks), strict=True)
    return pd.DataFrame(dict(zip(CHECK_COLUMNS, map(list, columns), strict=True)),
                        columns=list(CHECK_COLUMNS))


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
    # The checks (a fleet's hundred thousand rows) kept as columns (`json_rows`: what
    # `json_ready(json_records(...))` gives, written a column at a time by `jsontext`), put
    # in their place after `json_ready` walked the rest.
    ready = cast(dict[str, object], json_ready({
        "verdict": result.verdict, "exit_code": result.exit_code,
        "spec": str(result.spec.path) if result.spec.path else None,
        "cv_max": result.spec.cv_max, "boxes": boxes, "checks": None,
        "fleet": [{k: plain(v) for k, v in row.items() if not k.endswith("_cell")}
                  for row in result.rows],
        "outliers": [{"box": o.box, "device": o.device, "path": o.path, "part": o.part,
                      "pct_from_median": o.pct_from_median, "peers": o.peers, "text": o.text}
                     for o in result.outliers],
        "notes": result.notes,
    }))
    ready["checks"] = json_rows(checks_table(result.checks))
    return ready


def write_files(result: Acceptance, out_dir: Path, parquet: bool) -> list[Path]:
    """accept.csv (every check) and accept_fleet.csv (the fleet table), Parquet beside them
    on request."""
    from bwprof.render.outputs import output_dir, write_table

    folder = output_dir(out_dir, out_dir)
    written = write_table(checks_table(result.checks), folder / ACCEPT_FILE, parquet)
    written += write_table(fleet.fleet_frame(result.rows) if result.rows else pd.DataFrame(),
                           folder / FLEET_FILE, parquet)
    return written
