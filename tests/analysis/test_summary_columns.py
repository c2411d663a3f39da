"""The summary, the pair matrices and the ResultRows made a column at a time (issue 36) are
what the record-at-a-time builders made (`tests/analysis/reference_summary.py`, the code they
replaced): the same frames (columns, order, dtypes, index) and the same rows, on every stored
folder, on latency and compute rows, and on frames with degenerate cells (zero, -0.0, NaN,
subnormal peaks and figures, failed rows, empty case names, missing sizes, ties, duplicated
rows, cache-resident rows) in shuffled order. The stored folders' outputs are also pinned as
the old builders wrote them (`summary_expected.json`), so a change to both is seen too."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

import bwprof
from bwprof.analysis import summary
from bwprof.analysis.run import Run
from bwprof.schema.rows import ResultRow
from bwprof.schema.table import RESULT_DTYPES, results_frame, rows_from_frame, typed_results
from bwprof.store.formats import write_parquet
from bwprof.store.runfolder import read_parquet_results
from tests.analysis import reference_summary as reference
from tests.analysis.latency_rows import every_case

DATA = Path(__file__).resolve().parent.parent / "data"
FOLDERS = sorted(p.name for p in DATA.iterdir() if (p / "results.csv").is_file())
EXPECTED = Path(__file__).with_name("summary_expected.json")
PAIRS = (("p2p_copy", "p2p"), ("lat_p2p", "p2p"), ("lat_host_numa", None))


def _results(name: str) -> pd.DataFrame:
    return bwprof.load(DATA / name).results


def _fleet(frame: pd.DataFrame, node: int) -> pd.DataFrame:
    """`frame`'s rows as node `node` of a fleet names them ('node1:gpu0')."""
    out = frame.copy()
    out["device"] = f"node{node}:" + out["device"].astype(str)
    out["host"] = f"node{node}"
    return out


def _compute(frame: pd.DataFrame) -> pd.DataFrame:
    """hbm_triad rows recast as a throughput case at two thread counts."""
    rows = frame[frame["case"] == "hbm_triad"].copy()
    rows["metric"], rows["case"], rows["unit"] = "throughput", "gemm_fp", "TFLOP/s"
    return pd.concat([rows, rows.assign(threads=4, value_median=rows["value_median"] * 2)])


def degenerate(seed: int) -> pd.DataFrame:
    """Every stored kind of row (GPU, simulated, latency, compute; one box and a fleet's
    nodes) with degenerate cells, shuffled, and fifty rows repeated at the end."""
    h200, sim = _results("h200-quick"), _results("sim-a")
    latency = results_frame(every_case(2))
    frame = pd.concat([h200, sim, latency, _fleet(latency, 1), _compute(h200),
                       *(_fleet(h200, node) for node in range(3))], ignore_index=True)
    rng = np.random.default_rng(seed)
    count = len(frame)

    def some(k: int) -> np.ndarray:
        return rng.choice(count, size=k, replace=False)

    for column, value, k in (
            ("value_median", 0.0, 40), ("value_median", -0.0, 40), ("value_median", np.nan, 20),
            ("gbps_median", 0.0, 40), ("peak_value", 0.0, 40), ("peak_value", -0.0, 40),
            ("peak_value", np.nan, 40), ("peak_value", 5e-324, 30), ("value_median", 5e-324, 10),
            ("status", "failed", 30), ("note", "failed\nhere", 15), ("case", "", 20),
            ("size_bytes", pd.NA, 20), ("threads", pd.NA, 20), ("flags", "in_cache", 20),
            ("copy_gbps_median", np.nan, 10), ("phase", "", 10)):
        frame.loc[some(k), column] = value
    ties = some(60)
    frame.loc[ties, "value_median"] = frame.loc[ties[0], "value_median"]
    frame = frame.iloc[rng.permutation(count)].reset_index(drop=True)
    return pd.concat([frame, frame.iloc[:50]], ignore_index=True)


def _via_parquet(frame: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """`frame` as results.parquet holds it and the store reads it back (Arrow-backed text)."""
    path = folder / "results.parquet"
    write_parquet(typed_results(frame), path, RESULT_DTYPES)
    return read_parquet_results(path)


def _frames() -> dict[str, pd.DataFrame]:
    failed = _results("h200-quick").assign(status="failed", note="it failed")
    frames = {name: _results(name) for name in FOLDERS}
    frames.update({f"degenerate-{seed}": degenerate(seed) for seed in range(4)})
    # Every row twice, the second told apart only by its cv: each pick is a tie, where the
    # first row of the best is the one chosen (as max and min choose).
    every = pd.concat([_results("h200-quick"), _fleet(_results("sim-a"), 0),
                       results_frame(every_case(2)), _compute(_results("h200-quick"))],
                      ignore_index=True)
    frames["ties"] = pd.concat([every, every.assign(cv=every["cv"] * 2)], ignore_index=True)
    frames["ties reversed"] = frames["ties"].iloc[::-1]
    with tempfile.TemporaryDirectory() as folder:
        for name in ("h200-quick", "sim-a"):
            frames[f"{name} via parquet"] = _via_parquet(frames[name], Path(folder))
        frames["ties via parquet"] = _via_parquet(frames["ties"], Path(folder))
    frames.update({"latency": results_frame(every_case(2)), "all failed": failed,
                   "empty": _results("sim-a").iloc[:0],
                   "no hbm rows": _results("h200-quick").query("memory != 'hbm'")})
    return frames


FRAMES = _frames()


def assert_same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    assert got.dtypes.to_dict() == want.dtypes.to_dict()
    assert_frame_equal(got, want, check_exact=True)
    assert got.index.tolist() == want.index.tolist()


def _fields(row: ResultRow) -> str:
    """A row's every field, its counters included (== leaves them out), NaN-safe."""
    return repr(vars(row))


@pytest.mark.parametrize("name", list(FRAMES))
def test_the_summary_is_the_one_the_records_made(name: str) -> None:
    frame = FRAMES[name]
    assert_same_frame(summary.build_summary(frame), reference.build_summary(frame))


@pytest.mark.parametrize("name", list(FRAMES))
def test_pair_matrices_are_the_rows_the_records_chose(name: str) -> None:
    frame = FRAMES[name]
    for case, direction in PAIRS:
        assert_same_frame(summary.matrix_rows(frame, case, direction),
                          reference.matrix_rows(frame, case, direction))


@pytest.mark.parametrize("name", list(FRAMES))
def test_result_rows_are_the_rows_the_dataclass_made(name: str) -> None:
    frame = FRAMES[name]
    got, want = rows_from_frame(frame), reference.rows_from_frame(frame)
    assert [_fields(row) for row in got] == [_fields(row) for row in want]
    assert got == want
    assert all(type(row) is ResultRow for row in got)


@pytest.mark.parametrize("name", list(FRAMES))
def test_row_records_are_the_dicts_the_records_made(name: str) -> None:
    frame = FRAMES[name]
    read = ("case", "device", "status", "value_median", "size_bytes", "flags", "no_such_column",
            "telemetry_samples", "higher_is_better")
    for columns in ((), read):
        got = summary.row_records(frame, *[columns] if columns else [])
        want = reference.row_records(frame, *[columns] if columns else [])
        assert repr(got) == repr(want)
        assert [list(row) for row in got] == [list(row) for row in want]


def test_result_rows_refuse_an_unknown_flag_as_the_dataclass_does() -> None:
    frame = _results("sim-a").copy()
    frame.loc[3, "flags"] = "no_such_flag"
    with pytest.raises(ValueError, match="no_such_flag"):
        reference.rows_from_frame(frame)
    with pytest.raises(ValueError, match="no_such_flag"):
        rows_from_frame(frame)


def test_a_bandwidth_row_fills_its_value_from_its_gbps_as_the_dataclass_does() -> None:
    frame = _results("sim-a").copy()
    frame.loc[0, ["value_median", "peak_gbps"]] = np.nan
    frame.loc[1, ["gbps_best"]] = np.nan
    got, want = rows_from_frame(frame), reference.rows_from_frame(frame)
    assert [_fields(row) for row in got[:2]] == [_fields(row) for row in want[:2]]
    assert got[0].value_median == got[0].gbps_median is not None


def _cell(value: object) -> object:
    """A cell as JSON holds it exactly: floats as their repr (NaN, -0.0 kept)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    return value


def described(frame: pd.DataFrame) -> dict[str, object]:
    """A frame as JSON: columns, dtypes, index and every cell."""
    return {"columns": [str(c) for c in frame.columns],
            "dtypes": [str(t) for t in frame.dtypes],
            "index": [int(i) for i in frame.index],
            "rows": [[_cell(v) for v in row] for row in frame.itertuples(index=False)]}


def digest(rows: list[dict[str, object]]) -> str:
    """A digest of rows' every field, the same in every process (a frozenset's order is its
    strings' hashes', which Python seeds per process: sorted here)."""
    canonical = [{k: sorted(v) if isinstance(v, frozenset) else v for k, v in row.items()}
                 for row in rows]
    return hashlib.sha256(repr(canonical).encode()).hexdigest()


def outputs(results: pd.DataFrame) -> dict[str, object]:
    """What the pinned file holds of a folder: its summary, the p2p matrix, and digests of
    its ResultRows (every field), its line rows and its row records."""
    run = Run.from_frame(results)
    return {"summary": described(summary.build_summary(results)),
            "p2p_matrix_index": [int(i) for i in summary.p2p_matrix_rows(results).index],
            "rows": digest([vars(row) for row in rows_from_frame(results)]),
            "line_rows": digest([vars(row) for row in run.line_rows]),
            "row_records": digest(summary.row_records(results))}


def test_the_stored_folders_give_the_outputs_pinned_before_the_change() -> None:
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    assert sorted(expected) == FOLDERS
    for name in FOLDERS:
        assert outputs(_results(name)) == expected[name], name


if __name__ == "__main__":  # rewrite the pinned outputs (only where they are meant to change)
    EXPECTED.write_text(json.dumps({name: outputs(_results(name)) for name in FOLDERS},
                                   indent=1) + "\n", encoding="utf-8")


@pytest.mark.parametrize("seed", range(5))
def test_pick_per_group_is_pick_of_each_group(seed: int) -> None:
    """Few sizes and values, so that ties are everywhere; a group's lower-is-better rows
    make it pick the lowest, as `summary._picked` asks `pick` to."""
    from bwprof.analysis import figures

    rng = np.random.default_rng(seed)
    count, rows = 7, 200
    groups = rng.integers(0, count - 1, rows)  # the last group has no row
    sizes = rng.choice([0.0, 1.0, 2.0, 2.0], rows)
    values = rng.choice([-0.0, 0.0, 1.5, 3.0, 3.0, 5e-324], rows)
    lower = rng.random(rows) < 0.02
    among = rng.random(rows) < 0.8
    got = figures.pick_per_group(groups, count, sizes, values, lower, among)
    for group in range(count):
        mine = [{"status": "ok", "value_median": values[i], "size_bytes": sizes[i],
                 "flags": "", "at": i} for i in range(rows) if groups[i] == group and among[i]]
        if not mine:
            assert got[group] == -1
            continue
        low = any(lower[row["at"]] for row in mine)
        picked = figures.pick(mine, higher_is_better=not low)
        assert picked is not None and got[group] == picked["at"]
    largest = figures.pick_per_group(groups, count, sizes)
    for group in range(count - 1):
        mine = [i for i in range(rows) if groups[i] == group]
        assert largest[group] == max(mine, key=lambda i: sizes[i])
