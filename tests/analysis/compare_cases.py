"""Pairs of runs and what `compare` makes of them, as plain data: the oracle of
test_compare_outputs.py, captured from the per-row compare_runs before it became column
operations (issue 36), so the columnar one is held to the same rows, order, texts and JSON.

`snapshot` gives, for a pair of folders: every cell of the comparison rows as its repr (so
-0.0, NaN, pd.NA and dtypes count), the regressions at a few thresholds, and the text and
JSON `bwprof compare` prints (with --all, --fail-below, --by model), paths replaced by
placeholders. `degenerate_pair` writes two folders whose figures are zero, -0.0,
subnormal, NaN, with a CV of 1e155, duplicated, and present on one side only.

    python -m tests.analysis.compare_cases OUT_DIR [A B NAME]   # (re)capture expectations
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from bwprof.analysis.compare import compare_runs
from bwprof.cli import app
from bwprof.store.runfolder import load_run

DATA = Path(__file__).resolve().parent.parent / "data"
PAIRS: dict[str, tuple[str, str]] = {
    "sim-a_sim-b-slower": ("sim-a", "sim-b-slower"),
    "sim-a_sim-c-other-box": ("sim-a", "sim-c-other-box"),
    "host-ddr_host-ddr-v2": ("host-ddr", "host-ddr-v2"),
    "h200-quick_h200-quick": ("h200-quick", "h200-quick"),
}
THRESHOLDS = (1.0, 5.0, 50.0)


def _edit(folder: Path, edit: Callable[[list[dict[str, str]]], list[dict[str, str]]]) -> None:
    """Rewrite folder/results.csv row by row: `edit(rows)` returns the new list of dicts."""
    path = folder / "results.csv"
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    rows = edit(rows)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _set(row: dict[str, str], **cells: str) -> None:
    for name, value in cells.items():
        if name in row:
            row[name] = value


def degenerate_pair(root: Path) -> tuple[Path, Path]:
    """Two copies of h200-quick (overlap, latency, dtype and page-size rows) with damaged
    figures: zero, -0.0 and subnormal baselines, NaN values, CVs of 1e155 and 1e-300, one
    repeat, a duplicated row, rows on one side only, a status other than ok."""
    a, b = root / "degen-a", root / "degen-b"
    for folder in (a, b):
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(DATA / "h200-quick", folder)

    def base(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        ok = [r for r in rows if r["status"] == "ok"]
        _set(ok[0], gbps_best="0.0", gbps_median="0.0")
        _set(ok[1], gbps_best="-0.0", gbps_median="-0.0")
        _set(ok[2], gbps_best="5e-324", gbps_median="5e-324")
        _set(ok[3], gbps_best="", gbps_median="", status="invalid")
        _set(ok[4], cv="1e155")
        _set(ok[5], cv="1e-300")
        _set(ok[6], repeats="1")
        _set(ok[7], status="invalid")
        _set(ok[8], gbps_best="1e308", gbps_median="1e308")
        for r in ok:
            if r.get("overlap_efficiency"):
                _set(r, overlap_efficiency="0.0")
                break
        return [*rows, dict(ok[10], gbps_best="1.5")]  # a duplicate: the later one counts

    def later(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        ok = [r for r in rows if r["status"] == "ok"]
        _set(ok[0], gbps_best="3.0")
        _set(ok[3], gbps_best="7.0")
        _set(ok[4], cv="0.01")
        _set(ok[8], gbps_best="1e-308", gbps_median="1e-308")  # quotient underflows
        # No figure later, one in the baseline:
        _set(ok[9], gbps_best="", gbps_median="", status="invalid")
        _set(ok[11], cv="1e155")
        _set(ok[12], gbps_best="0.0", gbps_median="0.0")
        _set(ok[13], gbps_best="-0.0", gbps_median="-0.0")
        for r in ok[20:]:
            if r.get("overlap_efficiency"):
                _set(r, overlap_efficiency="nan")
                break
        dropped = {id(ok[14]), id(ok[15])}  # present in the baseline only
        extra = dict(ok[16], size_bytes="12345")  # present in the later run only
        for r in ok:
            if r["case"].startswith("hbm_") or r["case"].startswith("lat_"):
                _set(r, cv="1e-300")
        return [r for r in rows if id(r) not in dropped] + [extra]

    _edit(a, base)
    _edit(b, later)
    return a, b


def _cells(frame: pd.DataFrame) -> dict[str, object]:
    return {"dtypes": {str(k): str(v) for k, v in frame.dtypes.items()},
            "index": repr(list(frame.index)),
            "columns": {str(c): [repr(v) for v in frame[c].tolist()] for c in frame.columns}}


def _invoke(args: list[str], places: dict[str, str]) -> dict[str, object]:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "1000"})
    out = {"exit": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
    for key in ("stdout", "stderr"):
        text = str(out[key])
        for path, name in sorted(places.items(), key=lambda p: -len(p[0])):
            text = text.replace(path, name)
        out[key] = text
    return out


def snapshot(a: Path, b: Path, *, full: bool = True) -> dict[str, object]:
    """What compare makes of the pair (a baseline): rows, regressions, CLI text and JSON.
    `full`: also --all and --by model (slow at a fleet's size: the terminal's table)."""
    places = {str(a): "<A>", str(b): "<B>"}
    runs = [load_run(a), load_run(b)]
    out: dict[str, object] = {}
    for by in ("node", "model"):
        comparison = compare_runs(runs, by=by)
        out[f"rows_{by}"] = _cells(comparison.rows)
        out[f"warnings_{by}"] = comparison.warnings
        out[f"regressions_{by}"] = {
            str(t): [asdict(r) for r in comparison.regressions(t)] for t in THRESHOLDS}
        if not full:
            break
    pair = [str(a), str(b)]
    out["cli_text"] = _invoke(["compare", *pair, "--fail-below", "5"], places)
    out["cli_json"] = _invoke(["compare", *pair, "--json", "--fail-below", "1"], places)
    if full:
        out["cli_all"] = _invoke(["compare", *pair, "--all"], places)
        out["cli_model_json"] = _invoke(["compare", *pair, "--by", "model", "--json"], places)
    text = json.dumps(out)
    for path, name in sorted(places.items(), key=lambda p: -len(p[0])):
        text = text.replace(path, name)
    return json.loads(text)


def compact(snap: dict[str, object]) -> dict[str, object]:
    """`snap` with each printed JSON document parsed and its rows (already held cell by cell
    in rows_*) as a digest: a tenth of the size to commit, as telling where it differs."""
    out = dict(snap)
    for key in ("cli_json", "cli_model_json"):
        printed = out.get(key)
        if not isinstance(printed, dict) or not isinstance(printed["stdout"], str):
            continue
        printed = dict(printed)
        if printed["stdout"].strip().startswith("{"):
            document = json.loads(printed["stdout"])
            document["rows"] = hashlib.sha256(
                json.dumps(document["rows"], sort_keys=True).encode()).hexdigest()
            printed["stdout"] = document
        out[key] = printed
    return out


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    if len(argv) == 4:
        pairs = {argv[3]: (Path(argv[1]), Path(argv[2]), False)}
    else:
        a, b = degenerate_pair(out / "folders")
        pairs = {name: (DATA / x, DATA / y, True) for name, (x, y) in PAIRS.items()}
        pairs["degenerate"] = (a, b, True)
    for name, (x, y, full) in pairs.items():
        (out / f"{name}.json").write_text(
            json.dumps(compact(snapshot(x, y, full=full)), indent=0) + "\n")
        print("captured", name)


if __name__ == "__main__":
    main(sys.argv[1:])
