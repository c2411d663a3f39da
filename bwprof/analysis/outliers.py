"""The fleet table: one row per box × GPU, a column per path (verdict and % of band), the
outliers against the fleet median named, drawn to fit a 160-column terminal.

A box is a run folder's machine, named by host name and box key ('vm#3f2a9c1b7d4e',
`bwprof.system.machine_identity`), so machines sharing a host name are rows of their own and
an outlier marks only its own; a run from before the key was recorded is named by host name.

Plain fixed-width text, not a rich table: every line is built to at most TABLE_WIDTH
characters (long box names are cut with '…'), so nothing wraps, whatever the terminal.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from bwprof.analysis.bands import PATH_LABELS, PATHS
from bwprof.analysis.figures import ratio
from bwprof.analysis.judge import CANNOT_JUDGE, ERROR, FAIL, PASS, WARN, Check, worst
from bwprof.schema.meta import BOX_MARK

TABLE_WIDTH = 160
BOX_WIDTH = 20
GPU_WIDTH = 6
MODEL_WIDTH = 14
CELL_WIDTH = 10
NOISY_MARK = "~"
OUTLIER_MARK = "!"


@dataclass(frozen=True)
class Outlier:
    box: str
    device: str
    path: str
    part: str
    pct_from_median: float
    """How far the figure is from its model's fleet median, in % (negative: worse)."""
    peers: int
    run_dir: str = ""
    """The run folder of the figure: two runs of one box name are two rows of the table."""

    @property
    def text(self) -> str:
        return (f"{self.box} {self.device} {PATH_LABELS[self.path]}: "
                f"{abs(self.pct_from_median):.1f}% "
                f"{'below' if self.pct_from_median < 0 else 'above'} the median of "
                f"{self.peers} {self.part or 'GPUs'}")


def _key(check: Check) -> tuple[str, str, str]:
    return check.run_dir, check.box, check.device


def outliers(checks: list[Check], outlier_pct: float) -> list[Outlier]:
    """Figures worse than their model's fleet median (same path and case) by more than
    `outlier_pct` %; only where at least three GPUs (or hosts) of the model have one."""
    groups: dict[tuple[str, str, str], list[Check]] = {}
    for check in checks:
        if check.value is not None:
            groups.setdefault((check.part or check.gpu_model, check.path, check.case),
                              []).append(check)
    out = []
    for (part, path, _case), members in groups.items():
        if len(members) < 3:
            continue
        median = statistics.median(float(c.value or 0) for c in members)
        if median <= 0:
            continue
        for check in members:
            change = ratio(100 * (float(check.value or 0) - median), median)
            if change is None:  # a median of 5e-324 (damaged rows): no % from it, not inf
                continue
            worse = -change if check.higher_is_better else change
            if worse > outlier_pct:
                out.append(Outlier(check.box, check.device, path, part,
                                   change if check.higher_is_better else -change,
                                   len(members), check.run_dir))
    return out


def _cell(checks: list[Check], flagged: bool) -> str:
    """'PASS 99%', 'FAIL 52%~!' (noisy, outlier), '-' where nothing could be judged,
    'ERROR' where nothing was judged because bwprof itself raised. A WARN or FAIL at 100% of
    its band or more (a spec's line above what a healthy part reaches) shows no %: the
    table's reason names the line it crossed."""
    if not checks:
        return ""
    verdict = worst([c.verdict for c in checks])
    if verdict == CANNOT_JUDGE:
        return ERROR if any(c.verdict == ERROR for c in checks) else "-"
    judged = [c for c in checks if c.verdict == verdict and c.pct_of_band is not None]
    pct = min(c.pct_of_band for c in judged) if judged else None  # type: ignore[type-var]
    if pct is not None and pct >= 100 and verdict in (WARN, FAIL):
        pct = None  # a spec's line above a healthy part: "FAIL 104%" reads as a pass
    text = verdict if pct is None else f"{verdict} {min(pct, 999):.0f}%"
    if any(c.noisy for c in checks):
        text += NOISY_MARK
    if flagged:
        text += OUTLIER_MARK
    return text


def fleet_rows(checks: list[Check], outlier_list: list[Outlier]) -> list[dict[str, object]]:
    """One row per box × GPU; the box's host checks (DDR, host latency) on each of its
    GPU rows; a box without GPUs gets a row of its host. Each box's outliers and each row's
    paths are found once (a fleet of 10,000 boxes looked each box up among every GPU)."""
    flagged = {(o.run_dir, o.box, o.device, o.path) for o in outlier_list}
    hosts: dict[tuple[str, str], list[Check]] = {}
    gpus: dict[tuple[str, str, str], list[Check]] = {}
    for check in checks:
        if check.gpu_model:
            gpus.setdefault(_key(check), []).append(check)
        else:
            hosts.setdefault((check.run_dir, check.box), []).append(check)
    with_gpus = {key[:2] for key in gpus}
    keys = list(gpus) + [(run, box, "host") for run, box in hosts if (run, box) not in with_gpus]
    box_outliers: dict[tuple[str, str], list[Outlier]] = {}
    for o in outlier_list:
        box_outliers.setdefault((o.run_dir, o.box), []).append(o)
    rows = []
    for run, box, device in keys:
        host = hosts.get((run, box), [])
        mine = gpus.get((run, box, device), [])
        row: dict[str, object] = {
            "run_dir": run, "box": box, "device": device,
            "gpu_model": mine[0].gpu_model if mine else "", "part": mine[0].part if mine else "",
            "verdict": worst([c.verdict for c in host + mine])}
        by_path: dict[str, list[Check]] = {}
        for c in host + mine:
            by_path.setdefault(c.path, []).append(c)
        for path in PATHS:
            on_path = by_path.get(path, [])
            judged = [c for c in on_path if c.pct_of_band is not None]
            row[f"{path}_verdict"] = worst([c.verdict for c in on_path]) if on_path else None
            row[f"{path}_pct_of_band"] = (min(c.pct_of_band for c in judged)  # type: ignore
                                          if judged else None)
            row[f"{path}_cell"] = _cell(on_path, any(
                (c.run_dir, c.box, c.device, path) in flagged for c in on_path))
        # A host's outlier (no part: DDR, host latency) is on each of its box's rows.
        row["outliers"] = "; ".join(o.text for o in box_outliers.get((run, box), [])
                                    if o.device in (device, "cpu") or not o.part)
        rows.append(row)
    return rows


def fleet_frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    """The fleet table as a frame (accept_fleet.csv): the cells' text left out, verdicts and
    % of band in columns of their own."""
    frame = pd.DataFrame(rows)
    return frame.drop(columns=[c for c in frame.columns if c.endswith("_cell")])


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _cut_middle(text: str, width: int) -> str:
    """A long box name with its middle cut out: fleets number their boxes at the end."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


SHORT_BOX = 6
"""Hex digits of a box key kept where a long host name is cut to fit the column."""


def _box_cell(name: str, width: int) -> str:
    """A box's name cut to `width`: a long host name loses its middle, the box key keeps
    its first SHORT_BOX digits ('gpu-nod…ame-03#3f2a9c')."""
    host, mark, key = name.partition(BOX_MARK)
    if len(name) <= width or not mark:
        return _cut_middle(name, width)
    key = key[:SHORT_BOX]
    return _cut_middle(host, width - len(mark) - len(key)) + mark + key


def gpu_cell(device: str) -> str:
    """A GPU as the table's GPU column shows it: without a fleet's node ('node12:gpu0' is
    'gpu0'; the box column names the node), which cut to GPU_WIDTH left 'node1…' for
    every GPU of a node."""
    return device.rpartition(":")[2]


def fleet_lines(rows: list[dict[str, object]], outlier_list: list[Outlier]) -> list[str]:
    """The table as lines of at most TABLE_WIDTH characters, then the outliers and a key."""
    paths = [p for p in PATHS if any(row[f"{p}_cell"] for row in rows)]
    header = (f"{'box':<{BOX_WIDTH}} {'GPU':<{GPU_WIDTH}} {'model':<{MODEL_WIDTH}} {'box':<5} "
              + " ".join(f"{PATH_LABELS[p]:<{CELL_WIDTH}}" for p in paths))
    lines = [header.rstrip(), "-" * min(len(header.rstrip()), TABLE_WIDTH)]
    for row in rows:
        model = str(row["part"] or row["gpu_model"] or "")
        verdict = str(row["verdict"])
        line = (f"{_box_cell(str(row['box']), BOX_WIDTH):<{BOX_WIDTH}} "
                f"{_cut(gpu_cell(str(row['device'])), GPU_WIDTH):<{GPU_WIDTH}} "
                f"{_cut(model, MODEL_WIDTH):<{MODEL_WIDTH}} "
                f"{verdict if verdict != CANNOT_JUDGE else '-':<5} "
                + " ".join(f"{row[f'{p}_cell']!s:<{CELL_WIDTH}}" for p in paths))
        lines.append(line.rstrip())
    if outlier_list:
        lines.append(_cut("outliers against the fleet median: "
                          + "; ".join(o.text for o in outlier_list[:3])
                          + (f"; and {len(outlier_list) - 3} more (--json)"
                             if len(outlier_list) > 3 else ""), TABLE_WIDTH))
    lines.append(f"cells: verdict and % of the band's expected figure; {NOISY_MARK} noisy, "
                 f"{OUTLIER_MARK} outlier, - cannot judge ({PASS} needs a band and a figure), "
                 f"{ERROR} bwprof's own error (not the box's)")
    lines += unidentified_lines(rows)
    return [_cut(line, TABLE_WIDTH) for line in lines]


def unidentified_lines(rows: list[dict[str, object]]) -> list[str]:
    """A note per box name that several run folders share without a machine identity
    (runs from a bwprof before it recorded one): they may be one machine or several."""
    runs: dict[str, set[str]] = {}
    for row in rows:
        if BOX_MARK not in str(row["box"]):
            runs.setdefault(str(row["box"]), set()).add(str(row["run_dir"]))
    return [f"note: box {name}: {len(dirs)} runs recorded no machine identity (a bwprof before "
            "it did) and are told apart by host name only: one machine or several"
            for name, dirs in runs.items() if len(dirs) > 1]
