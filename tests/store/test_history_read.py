"""Reading the history store (`bwprof.store.history_read`, issue 36): `trend` reads the store
as a pyarrow dataset, only the rows of the GPU and case asked for, a few files at a time, and
notes each file it cannot read. Stores are the fleet stores of tests/store/test_history.py."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.store import history_read
from tests.store.test_history import _store_cache, fleet_store  # noqa: F401 (its fixture)

pytest.importorskip("pyarrow")

runner = CliRunner()


# -- trend reads the store as a dataset (issue 36) -------------------------------------------


def _materialised(monkeypatch) -> list[pd.DataFrame]:
    """Every frame the store's dataset scan hands to pandas, as it is made."""
    frames: list[pd.DataFrame] = []
    real = history_read.to_frame

    def spy(table):
        frames.append(real(table))
        return frames[-1]

    monkeypatch.setattr(history_read, "to_frame", spy)
    return frames


@pytest.mark.parametrize("gpu, rows_of", [
    ("GPU-box2", lambda rows: rows["gpu_uuid"] == "GPU-box2"),
    ("box2:gpu0", lambda rows: (rows["host"] == "box2") & (rows["device"] == "gpu0")),
])
def test_a_trend_of_one_gpu_and_case_reads_only_their_rows(tmp_path, monkeypatch, gpu, rows_of):
    store = fleet_store(tmp_path, last_hbm=0.90)
    whole = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    fell = [line for line in whole.output.splitlines() if line.startswith("FELL")]
    frames = _materialised(monkeypatch)
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots", "--gpu", gpu,
                               "--case", "hbm_triad"])
    assert done.exit_code == 1, done.output
    assert [line for line in done.output.splitlines() if line.startswith("FELL")] == fell
    assert "1 GPU(s) on 1 host(s), 1 case(s), 3 run(s)" in done.output
    read = pd.concat(frames)
    assert len(read) == 3  # one figure of each of box2's three runs, nothing else
    assert (rows_of(read) & (read["case"] == "hbm_triad")).all()


def test_a_trend_with_plots_reads_the_whole_fleet_of_its_case(tmp_path, monkeypatch):
    store = fleet_store(tmp_path)
    frames = _materialised(monkeypatch)
    done = runner.invoke(app, ["trend", "--store", str(store), "--out", str(tmp_path / "p"),
                               "--gpu", "GPU-box1", "--case", "hbm_triad"])
    assert done.exit_code == 0, done.output
    read = pd.concat(frames)  # the fleet's range: every GPU's figures of the case
    assert set(read["case"]) == {"hbm_triad"} and read["gpu_uuid"].nunique() == 3


def test_a_narrowed_trend_still_notes_damaged_and_foreign_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = fleet_store(tmp_path)
    first = sorted(store.glob("run-*.parquet"))[0]
    table = pq.read_table(first)
    later = table.set_column(table.schema.get_field_index("schema_version"), "schema_version",
                             pa.array([2] * table.num_rows, pa.int64()))
    pq.write_table(later, store / "run-later-0000000000000000.parquet")
    pq.write_table(pa.table({"x": [1]}), store / "run-foreign-0000000000000000.parquet")
    paged = bytearray(first.read_bytes())
    paged[4:400] = b"\xff" * 396  # its pages, not its footer
    (store / "run-paged-0000000000000000.parquet").write_bytes(bytes(paged))
    (store / "run-broken-0000000000000000.parquet").write_bytes(b"not parquet")
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots",
                               "--gpu", "GPU-box1", "--case", "hbm_triad"])
    assert done.exit_code == 0, done.output
    notes = [line for line in done.output.splitlines() if line.startswith("note: left out")]
    assert len(notes) == 4, done.output
    assert any("run-later" in n and "is of history version 2" in n for n in notes)
    assert any("run-foreign" in n and "is not a bwprof history file" in n for n in notes)
    assert any("run-paged" in n and "cannot read" in n for n in notes)
    assert any("run-broken" in n and "cannot read" in n for n in notes)
    assert "1 GPU(s) on 1 host(s), 1 case(s), 3 run(s)" in done.output


def test_a_store_read_a_few_files_at_a_time_is_the_same_table(tmp_path, monkeypatch):
    store = fleet_store(tmp_path)
    (store / "run-broken-0000000000000000.parquet").write_bytes(b"not parquet")
    notes: list[str] = []
    whole = history_read.read_store(store, notes)
    monkeypatch.setattr(history_read, "SCAN_FILES", 2)
    batches: list[int] = []
    real = history_read._fragments

    def spy(files, found):
        batches.append(len(files))
        return real(files, found)

    monkeypatch.setattr(history_read, "_fragments", spy)
    parts: list[str] = []
    pd.testing.assert_frame_equal(history_read.read_store(store, parts), whole)
    assert batches == [2] * 5  # the nine runs and the broken file, two at a time
    assert parts == notes and sum("run-broken" in note for note in notes) == 1
