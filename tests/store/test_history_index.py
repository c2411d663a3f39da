"""The history store's index (issue 36): `history compact` writes every run file's rows into
one file, `trend` reads it and only the run files it does not cover as they are now, so a
store of 10,000 runs is read in seconds, no run is read twice and none is left out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.analysis import trend
from bwprof.cli import app
from bwprof.store import history_index, history_read
from tests.store.test_history import make_run

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

runner = CliRunner()


def _runs(root: Path, days: range, boxes: range = range(1, 3),
          fall: float = 1.0) -> list[Path]:
    """Runs of `boxes` on `days`; the last day's HBM figure of box 1 times `fall`."""
    return [make_run(root, f"box{box}-202612{day:02d}T000000Z", host=f"box{box}",
                     uuid=f"GPU-box{box}", started=f"2026-12-{day:02d}T0{box}:00:00+00:00",
                     scale={"hbm_triad": fall} if (box == 1 and day == days[-1]) else None)
            for day in days for box in boxes]


def _add(folders: list[Path], store: Path) -> None:
    done = runner.invoke(app, ["history", "add", *map(str, folders), "--store", str(store)])
    assert done.exit_code == 0, done.output


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["run_key", "case", "path", "device", "metric", "size_bytes", "memory", "direction"]
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


def _read_files(monkeypatch) -> list[str]:
    """The names of the run files the store read hands to its file-by-file path."""
    seen: list[str] = []
    real = history_read._fragments

    def spy(files, notes):
        seen.extend(path.name for path in files)
        return real(files, notes)

    monkeypatch.setattr(history_read, "_fragments", spy)
    return seen


def test_a_compacted_store_reads_as_its_run_files_and_only_new_files_one_by_one(
        tmp_path, monkeypatch):
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 4)), store)
    whole = history_read.read_store(store)
    done = runner.invoke(app, ["history", "compact", "--store", str(store)])
    assert done.exit_code == 0, done.output
    assert "compacted 6 run file(s) (6 read now)" in done.output
    assert (store / history_index.INDEX_FILE).is_file()
    assert len(pd.read_parquet(store)) == len(whole)  # pandas reads the runs, not the index
    seen = _read_files(monkeypatch)
    pd.testing.assert_frame_equal(_sorted(history_read.read_store(store)), _sorted(whole))
    assert seen == []  # every run from the index
    _add(_runs(tmp_path / "later", range(4, 5)), store)
    after = history_read.read_store(store)
    assert sorted(seen) == sorted(p.name for p in store.glob("run-box*-20261204*.parquet"))
    assert after["run_key"].nunique() == 8 and len(after) == len(whole) // 6 * 8
    again = runner.invoke(app, ["history", "compact", "--store", str(store)])
    assert "compacted 8 run file(s) (2 read now)" in again.output  # the rest from the index


def test_a_run_file_removed_or_replaced_after_compaction_is_read_as_it_is_now(tmp_path):
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 4)), store)
    assert runner.invoke(app, ["history", "compact", "--store", str(store)]).exit_code == 0
    files = sorted(store.glob("run-*.parquet"))
    files[0].unlink()  # pruned by hand: its rows are gone from the index's reading too
    table = pq.read_table(files[1])
    index = table.schema.get_field_index("value")
    replaced = table.set_column(index, "value", pa.array([1.0] * len(table), pa.float64()))
    temp = files[1].with_name(".replacement")
    pq.write_table(replaced, temp)
    os.replace(temp, files[1])  # a new file under the same name (a new inode)
    rows = history_read.read_store(store)
    assert rows["run_key"].nunique() == 5
    key = table.column("run_key")[0].as_py()
    values = rows.loc[rows["run_key"] == key, "value"]
    assert len(values) == len(table) and (values == 1.0).all()  # once, as it is now


def test_trend_says_the_same_with_and_without_the_index(tmp_path):
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 5), fall=0.8), store)
    before = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert before.exit_code == 1 and "FELL hbm_triad GPU-box1" in before.output
    assert runner.invoke(app, ["history", "compact", "--store", str(store)]).exit_code == 0
    for args in ([], ["--gpu", "GPU-box1", "--case", "hbm_triad"]):
        plain = runner.invoke(app, ["trend", "--store", str(store), "--no-plots", *args])
        shutil.copy2(store / history_index.INDEX_FILE, tmp_path / "index")
        (store / history_index.INDEX_FILE).unlink()
        without = runner.invoke(app, ["trend", "--store", str(store), "--no-plots", *args])
        shutil.copy2(tmp_path / "index", store / history_index.INDEX_FILE)
        assert plain.output == without.output and plain.exit_code == without.exit_code == 1


def test_a_damaged_or_foreign_index_is_a_note_and_the_run_files_are_read(tmp_path):
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 3)), store)
    expected = len(history_read.read_store(store))
    for content in (b"not parquet", None):
        if content is None:
            pq.write_table(pa.table({"x": [1]}), store / history_index.INDEX_FILE)
        else:
            (store / history_index.INDEX_FILE).write_bytes(content)
        done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
        assert done.exit_code == 0, done.output
        assert "every run file is read from itself" in done.output
        notes: list[str] = []
        assert len(history_read.read_store(store, notes)) == expected
    fixed = runner.invoke(app, ["history", "compact", "--store", str(store)])
    assert fixed.exit_code == 0 and "written anew" in fixed.output
    notes = []
    history_read.read_store(store, notes)
    assert not [note for note in notes if "index" in note]


def test_compaction_leaves_out_what_cannot_be_read_as_trend_does(tmp_path):
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 3)), store)
    (store / "run-broken-0000000000000000.parquet").write_bytes(b"not parquet")
    done = runner.invoke(app, ["history", "compact", "--store", str(store)])
    assert done.exit_code == 0
    assert "note: left out: cannot read" in done.output and "compacted 4 run file(s)" in done.output
    trended = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert "note: left out: cannot read" in trended.output and "run-broken" in trended.output


def test_history_add_compacts_the_store_where_many_runs_are_outside_the_index(
        tmp_path, monkeypatch):
    monkeypatch.setattr(history_index, "COMPACT_AFTER", 3)  # as `history add` looks it up
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 2)), store)  # 2 runs: not yet
    assert not (store / history_index.INDEX_FILE).exists()
    _add(_runs(tmp_path / "more", range(2, 3)), store)  # 4
    assert history_index.uncovered(store) == 0
    _add(_runs(tmp_path / "again", range(3, 4)), store)  # 2 outside it: not yet
    assert history_index.uncovered(store) == 2


def test_history_compact_refuses_what_is_not_a_store(tmp_path):
    done = runner.invoke(app, ["history", "compact", "--store", str(tmp_path / "none")])
    assert done.exit_code == 2 and len(done.output.splitlines()) == 1
    assert "does not exist" in done.output


def test_adds_and_compactions_at_once_count_every_run_once(tmp_path, monkeypatch):
    """Threads, not processes (no import each): each opens its own locks, as boxes do."""
    from concurrent.futures import ThreadPoolExecutor

    from bwprof import saved

    monkeypatch.setattr(history_index, "COMPACT_AFTER", 1)  # every add compacts too
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 3)), store)
    assert history_index.uncovered(store) == 0  # the add compacted
    later = _runs(tmp_path / "later", range(3, 6))
    with ThreadPoolExecutor(max_workers=5) as pool:
        jobs = [pool.submit(saved.history_add, [run], store) for run in later]
        jobs += [pool.submit(saved.history_compact, store) for _ in range(2)]
        for job in jobs:
            job.result()
    rows = history_read.read_store(store)
    assert rows["run_key"].nunique() == 10
    assert not rows.duplicated(["run_key", "case", "path", "device", "metric",
                                "size_bytes", "memory", "direction"]).any()
    assert not [name for name in os.listdir(store) if name.endswith(".tmp")]
    saved.history_compact(store)
    assert history_index.uncovered(store) == 0
    pd.testing.assert_frame_equal(_sorted(history_read.read_store(store)), _sorted(rows))


def _reference_falls(rows: pd.DataFrame, threshold: float) -> list[tuple[str, str, float]]:
    """`falls` as it was: each series judged on its own."""
    found = []
    for _key, series in rows.groupby(trend.SERIES_KEYS, sort=True, dropna=False):
        judged = trend.judge(series, threshold)
        if judged is not None and judged.fell:
            found.append((str(judged.latest["subject"]), str(judged.latest["case"]),
                          round(judged.fell_pct, 9)))
    return found


def test_falls_judged_all_at_once_are_those_of_each_series_judged_alone(tmp_path):
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 5), boxes=range(1, 4), fall=0.9), store)
    rows = trend.figures(history_read.read_store(store))
    for threshold in (0.01, 1.0, 5.0, 50.0):
        found = [(f.subject, f.case, round(f.fell_pct, 9)) for f in trend.falls(rows, threshold)]
        assert found == _reference_falls(rows, threshold)
    assert len(trend.under_test(rows)) == rows.groupby(trend.SERIES_KEYS, dropna=False).ngroups


def test_trend_says_where_many_runs_are_outside_the_index(tmp_path, monkeypatch):
    monkeypatch.setattr(history_index, "COMPACT_AFTER", 3)  # `history add` compacts
    monkeypatch.setattr(history_read, "COMPACT_AFTER", 3)  # `trend` notes
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 3)), store)
    (store / history_index.INDEX_FILE).unlink()  # a store never compacted
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert "note: 4 run file(s) are outside the store's index" in done.output
    assert runner.invoke(app, ["history", "compact", "--store", str(store)]).exit_code == 0
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert "outside the store's index" not in done.output


def test_a_run_file_whose_name_is_not_utf8_is_read_from_itself(tmp_path):
    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 3)), store)
    first = sorted(store.glob("run-*.parquet"))[0]
    odd = os.fsencode(store) + b"/run-\xff-0000000000000000.parquet"
    os.rename(first, odd)
    done = runner.invoke(app, ["history", "compact", "--store", str(store)])
    assert done.exit_code == 0, done.output
    assert "compacted 3 run file(s)" in done.output and "is not UTF-8" in done.output
    assert history_read.read_store(store)["run_key"].nunique() == 4


# Catches (issue 37 review): lock files were made 0644 and opened for writing, so in a store
# shared by several users the second user's compaction (or replacing an empty entry) exit 3
def test_a_store_shared_by_several_users_can_be_locked_by_each(tmp_path, monkeypatch):
    import errno
    import stat

    store = tmp_path / "store"
    _add(_runs(tmp_path / "runs", range(1, 2)), store)
    old = os.umask(0)
    try:
        done = runner.invoke(app, ["history", "compact", "--store", str(store)])
    finally:
        os.umask(old)
    assert done.exit_code == 0, done.output
    assert stat.S_IMODE((store / history_index.INDEX_LOCK).stat().st_mode) == 0o666
    real = os.open

    def another_users(path, flags, *args, **kwargs):  # root is never refused: refused here
        if os.fspath(path).endswith(".lock") and flags & os.O_RDWR:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", another_users)
    done = runner.invoke(app, ["history", "compact", "--store", str(store)])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("compacted 2 run file(s)")
