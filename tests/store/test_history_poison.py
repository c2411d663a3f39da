"""The history store cannot be poisoned (issue 37): a run without figures is never stored, an
entry without figures never blocks the genuine run, one refused folder never stops a batch,
a damaged file never makes `trend` raise, `trend --out` never writes into the store, and huge
texts in a store are cut when read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.store import history, history_read, history_schema
from tests.store.test_history import H200, make_run, store_names

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

runner = CliRunner()
GENUINE = "run-vm-20261130T235257Z-de7ef85fbea9e3f4.parquet"


def _hollow(tmp_path: Path, name: str, text: str) -> Path:
    """A copy of h200-quick (its run_id) whose results.csv is `text`."""
    folder = tmp_path / name
    shutil.copytree(H200, folder)
    (folder / "results.csv").write_text(text)
    return folder


def _header(tmp_path: Path) -> str:
    return (H200 / "results.csv").read_text().splitlines()[0] + "\n"


@pytest.mark.parametrize("text", ["", "header"])
def test_a_run_without_figures_is_refused_and_the_genuine_run_is_then_added(tmp_path, text):
    hollow = _hollow(tmp_path, "hollow", _header(tmp_path) if text else "")
    added = _refused_then_genuine_added(hollow, H200, tmp_path / "store")
    assert added.startswith("added vm-20261130T235257Z (11 figure(s))")


@pytest.mark.parametrize("target", ["/proc/self/environ", "/dev/null"])
def test_results_linked_into_proc_or_dev_are_refused_and_the_genuine_run_is_then_added(
        tmp_path, target):
    """A results.csv that is a link to /proc/self/environ (size 0, text of another kind) or
    /dev/null is one line, exit 2, nothing stored under the run's id: the genuine run is
    then added."""
    hollow = tmp_path / "linked"
    shutil.copytree(H200, hollow)
    (hollow / "results.csv").unlink()
    (hollow / "results.csv").symlink_to(target)
    added = _refused_then_genuine_added(hollow, H200, tmp_path / "store", "symbolic link")
    assert added.startswith("added vm-20261130T235257Z (11 figure(s))")


def _refused_then_genuine_added(bad: Path, genuine: Path, store: Path,
                                why: str = "holds no figure") -> str:
    """`history add` of `bad` refused with one line saying `why`, nothing stored, then that
    of `genuine` into the same store succeeds: its output."""
    done = runner.invoke(app, ["history", "add", str(bad), "--store", str(store)])
    assert done.exit_code == 2, done.output
    assert len(done.output.splitlines()) == 1 and why in done.output
    assert not store.exists() or store_names(store) == []
    good = runner.invoke(app, ["history", "add", str(genuine), "--store", str(store)])
    assert good.exit_code == 0, good.output
    return good.output


def _figures_set(folder: Path, cell: str) -> None:
    """Every figure cell (value_*, gbps_*, overlap_efficiency) of the folder's results.csv
    that holds one set to `cell`, as a damaged or edited file leaves them."""
    results = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    for name in results.columns:
        if name.startswith(("value_", "gbps_", "overlap_efficiency")):
            results[name] = results[name].where(results[name] == "", cell)
    results.to_csv(folder / "results.csv", index=False)


@pytest.mark.parametrize("source", ["h200-quick", "host-ddr"])
@pytest.mark.parametrize("cell", ["0", "0.0", "-0.0", "1e-310"])
def test_a_run_whose_figures_are_not_measurements_is_refused_and_blocks_nothing(
        tmp_path, source, cell):
    """A figure of 0 (or subnormal; negative and infinite ones are refused when read) measured
    nothing: stored, such a run claimed its run_id and the genuine run was refused forever."""
    genuine = H200.parent / source
    bad = tmp_path / "bad"
    shutil.copytree(genuine, bad)
    _figures_set(bad, cell)
    assert _refused_then_genuine_added(bad, genuine, tmp_path / "store").startswith("added ")


def _stored_rows() -> pd.DataFrame:
    from datetime import datetime, timezone

    import bwprof

    return history.prepare_run(bwprof.load(H200), datetime(2026, 12, 1, tzinfo=timezone.utc)).rows


@pytest.mark.parametrize("entry", ["no rows", "no figures", "zero figures", "damaged"])
def test_an_entry_without_figures_gives_way_to_the_genuine_run(tmp_path, entry):
    """A store written by an earlier bwprof may hold such an entry under the run's name."""
    store = tmp_path / "store"
    store.mkdir()
    rows = _stored_rows().assign(results_sha256="0" * 64)
    if entry == "no rows":
        rows = rows.iloc[0:0]
    elif entry == "no figures":
        rows = rows.assign(value=None, value_median=None)
    elif entry == "zero figures":  # stored by an earlier bwprof from a damaged results.csv
        rows = rows.assign(value=0.0, value_median=0.0)
    target = store / GENUINE
    if entry == "damaged":
        target.write_bytes(b"not parquet")
    else:
        pq.write_table(pa.Table.from_pandas(rows, schema=history_schema.arrow_schema(),
                                            preserve_index=False), target)
    done = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
    assert done.exit_code == 0, done.output
    assert "added vm-20261130T235257Z (11 figure(s))" in done.output
    assert "in place of an entry that held no figure" in done.output
    assert store_names(store) == [".bwprof-history.lock", GENUINE]
    stored = pd.read_parquet(store)
    assert stored["value"].notna().sum() == 11
    again = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
    assert again.exit_code == 0 and again.output.startswith("already stored:")


def test_an_entry_of_a_later_history_version_is_not_replaced(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    rows = _stored_rows().assign(schema_version=2, value=None)
    pq.write_table(pa.Table.from_pandas(rows, schema=history_schema.arrow_schema(),
                                        preserve_index=False), store / GENUINE)
    before = (store / GENUINE).read_bytes()
    done = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
    assert done.exit_code == 2 and "history version 2" in done.output
    assert (store / GENUINE).read_bytes() == before


def test_a_batch_with_refused_folders_adds_the_others_and_exits_2(tmp_path):
    runs = [make_run(tmp_path, f"box{n}-20261201T000000Z", host=f"box{n}",
                     started="2026-12-01T00:00:00+00:00", uuid=f"GPU-{n}") for n in (1, 2)]
    hollow = _hollow(tmp_path, "hollow", _header(tmp_path))
    store = tmp_path / "store"
    done = runner.invoke(app, ["history", "add", str(runs[0]), str(hollow),
                               str(tmp_path / "missing"), str(runs[1]), "--store", str(store)])
    assert done.exit_code == 2, done.output
    lines = done.output.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 2 and "holds no figure" in errors[0]
    assert "does not exist" in errors[1]
    assert sum(line.startswith("added box") for line in lines) == 2 and len(lines) == 4
    assert len(store_names(store)) == 2
    again = runner.invoke(app, ["history", "add", *map(str, runs), "--store", str(store)])
    assert again.exit_code == 0, again.output  # all added or there: 0


def test_two_folders_claiming_one_id_are_both_refused_and_the_rest_added(tmp_path):
    forged = tmp_path / "forged"
    shutil.copytree(H200, forged)
    results = pd.read_csv(forged / "results.csv", keep_default_na=False, dtype=str)
    results.loc[results["case"] == "hbm_triad", "gbps_best"] = "1.0"
    results.to_csv(forged / "results.csv", index=False)
    other = make_run(tmp_path, "box1-20261201T000000Z", host="box1",
                     started="2026-12-01T00:00:00+00:00", uuid="GPU-1")
    store = tmp_path / "store"
    done = runner.invoke(app, ["history", "add", str(H200), str(forged), str(other),
                               "--store", str(store)])
    assert done.exit_code == 2
    assert done.output.count("both claim run_id 'vm-20261130T235257Z'") == 2
    (name,) = [n for n in store_names(store) if n.startswith("run-")]
    assert name.startswith("run-box1-20261201T000000Z-")


def _small_store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    folders = [make_run(tmp_path / "runs", f"box1-2026120{day}T000000Z", host="box1",
                        uuid="GPU-box1", started=f"2026-12-0{day}T01:00:00+00:00")
               for day in (1, 2, 3)]
    done = runner.invoke(app, ["history", "add", *map(str, folders), "--store", str(store)])
    assert done.exit_code == 0, done.output
    return store


def _retyped(store: Path, name: str, column: str, values: pa.Array) -> None:
    table = pq.read_table(sorted(store.glob("run-*.parquet"))[0])
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, values), store / name)


def test_a_store_file_of_other_column_types_is_a_note_or_read_as_the_stores_types(tmp_path):
    store = _small_store(tmp_path)
    rows = len(pq.read_table(sorted(store.glob("run-*.parquet"))[0]))
    _retyped(store, "run-words-0000000000000000.parquet", "value",
             pa.array(["fast"] * rows, pa.string()))
    _retyped(store, "run-stamp-0000000000000000.parquet", "started_utc",
             pa.array(["yesterday"] * rows, pa.string()))
    _retyped(store, "run-ints-1111111111111111.parquet", "size_bytes",
             pa.array([1.5] * rows, pa.float64()))
    for args in (["--no-plots"], ["--out", str(tmp_path / "plots")]):
        done = runner.invoke(app, ["trend", "--store", str(store), *args])
        assert done.exit_code == 0, done.output
        notes = [line for line in done.output.splitlines() if line.startswith("note: left out")]
        assert len(notes) == 3, done.output
        assert any("run-words" in n and "value (string) cannot be read as the store's types"
                   in n for n in notes)
    frame = history_read.read_store(store)
    assert frame["value"].dtype == "float64" and str(frame["started_utc"].dtype).startswith(
        "datetime64")


def test_a_store_file_of_castable_other_types_is_read(tmp_path):
    store = _small_store(tmp_path)
    first = sorted(store.glob("run-*.parquet"))[0]
    table = pq.read_table(first)
    index = table.schema.get_field_index("schema_version")
    first.unlink()
    pq.write_table(table.set_column(index, "schema_version",
                                    pa.array([1] * len(table), pa.int32())), first)
    notes: list[str] = []
    frame = history_read.read_store(store, notes)
    assert not [n for n in notes if "left out" in n]
    assert frame["run_id"].nunique() == 3 and frame["schema_version"].dtype == "int64"


@pytest.mark.parametrize("inside", ["plots", "plots/deeper"])
def test_trend_out_inside_the_store_is_refused(tmp_path, inside):
    store = _small_store(tmp_path)
    done = runner.invoke(app, ["trend", "--store", str(store), "--out", str(store / inside)])
    assert done.exit_code == 2, done.output
    assert len(done.output.splitlines()) == 1 and "inside the store" in done.output
    assert not (store / "plots").exists()
    link = tmp_path / "link"
    link.symlink_to(store)
    done = runner.invoke(app, ["trend", "--store", str(store), "--out", str(link / inside)])
    assert done.exit_code == 2 and "inside the store" in done.output
    pd.read_parquet(store)  # the store still reads as one table


def test_huge_texts_in_a_store_are_cut_when_read(tmp_path):
    store = _small_store(tmp_path)
    files = sorted(store.glob("run-*.parquet"))
    for number, path in enumerate(files):
        table = pq.read_table(path)
        for column, text in (("device_name", "H" * 100_000), ("gpu_uuid", "G" * 100_000),
                             ("case", "c" * 50_000 if number == 2 else None)):
            if text is None:
                continue
            index = table.schema.get_field_index(column)
            table = table.set_column(index, column, pa.array([text] * len(table), pa.string()))
        path.unlink()
        pq.write_table(table, path)
    frame = history_read.read_store(store)
    for column in ("device_name", "gpu_uuid", "case"):
        assert frame[column].str.len().max() <= history_schema.MAX_TEXT, column
    assert frame["gpu_uuid"].nunique() == 1  # the same long text is cut the same way
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert done.exit_code == 0, done.output
    assert max(len(line) for line in done.output.splitlines()) < 2000
    assert history_schema.capped_text("a" * 300) != history_schema.capped_text("a" * 299 + "b")
    one = runner.invoke(app, ["trend", "--store", str(store), "--no-plots",
                              "--gpu", "G" * 100_000])  # the whole UUID, as it was stored
    assert one.exit_code == 0 and "1 GPU(s)" in one.output, one.output[-500:]


def test_a_trend_plot_of_huge_stored_texts_is_drawn_in_seconds(tmp_path):
    import time

    store = _small_store(tmp_path)
    for path in sorted(store.glob("run-*.parquet")):
        table = pq.read_table(path)
        for column in ("device_name", "host", "path"):
            index = table.schema.get_field_index(column)
            table = table.set_column(index, column,
                                     pa.array([column[0] * 100_000] * len(table), pa.string()))
        path.unlink()
        pq.write_table(table, path)
    began = time.monotonic()
    done = runner.invoke(app, ["trend", "--store", str(store), "--case", "hbm_triad",
                               "--out", str(tmp_path / "plots")])
    assert done.exit_code == 0, done.output
    assert time.monotonic() - began < 60  # minutes, uncut; a few seconds cut
    assert (tmp_path / "plots" / "trend-hbm_triad.png").is_file()


def test_an_entry_that_cannot_be_read_is_kept_and_the_add_refused(tmp_path, monkeypatch):
    """Permission denied (or EIO) on the stored file says nothing of its content: it may be
    the genuine run, so a folder claiming its run_id must not replace it."""
    import errno
    import os

    store = tmp_path / "store"
    first = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
    assert first.exit_code == 0, first.output
    before = (store / GENUINE).read_bytes()
    other = _hollow(tmp_path, "other", (H200 / "results.csv").read_text() + "\n")
    real = os.open

    def denied(path, flags, *args, **kwargs):
        if os.fspath(path).endswith(GENUINE) and not flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    done = runner.invoke(app, ["history", "add", str(other), "--store", str(store)])
    monkeypatch.setattr(os, "open", real)
    assert done.exit_code == 2, done.output
    assert len(done.output.splitlines()) == 1
    assert "Permission denied" in done.output and "it is kept" in done.output
    assert (store / GENUINE).read_bytes() == before


def test_a_run_without_run_id_is_one_run_by_any_path(tmp_path):
    """Its identity is its folder's own name: given as `RUN/sub/..` or through a link, the
    same run was stored a second time under the name as typed."""
    import json

    run = make_run(tmp_path, "box-20261201T000000Z", started="2026-12-01T00:00:00+00:00")
    system = json.loads((run / "system.json").read_text())
    system["run_id"] = None
    (run / "system.json").write_text(json.dumps(system))
    (run / "sub").mkdir()
    (tmp_path / "link").symlink_to(run)
    store = tmp_path / "store"
    for given in (run, run / "sub" / "..", tmp_path / "link"):
        done = runner.invoke(app, ["history", "add", str(given), "--store", str(store)])
        assert done.exit_code == 0, done.output
    assert len([name for name in store_names(store) if name.endswith(".parquet")]) == 1
    assert done.output.startswith("already stored: box-20261201T000000Z@")


def test_a_store_failing_mid_batch_hides_no_earlier_outcome(tmp_path, monkeypatch, capsys):
    """Each folder's outcome is said as it is known: a write failure later in the batch
    (exit 3) came before every line, and the runs added and the folders refused went
    unsaid."""
    import errno

    from bwprof import cli
    from bwprof.errors import EXIT_OUTPUT, write_failure

    runs = [make_run(tmp_path / "runs", f"w1-{n}", started=f"2026-12-0{n}T00:00:00+00:00")
            for n in (1, 2, 3)]
    real, calls = history.publish_new, []

    def full_on_second(target, write, kept=None, option="--out", folder=None):
        calls.append(target)
        if len(calls) == 2:
            raise write_failure(target, OSError(errno.ENOSPC, "No space left on device"),
                                option=option)
        return real(target, write, kept, option)

    monkeypatch.setattr(history, "publish_new", full_on_second)
    code = cli.main(["history", "add", str(runs[0]), str(tmp_path / "nonexistent"),
                     str(runs[1]), str(runs[2]), "--store", str(tmp_path / "store")])
    captured = capsys.readouterr()
    assert code == EXIT_OUTPUT
    assert captured.out.startswith("added w1-1 (")
    errors = captured.err.splitlines()
    assert len(errors) == 2 and "nonexistent" in errors[0] and "No space left" in errors[1]


def test_a_long_host_colon_device_gpu_is_cut_as_the_store_cuts_it(tmp_path):
    """The store cuts host and device each on its own: a --gpu HOST:DEVICE of more than
    MAX_TEXT characters, cut whole, named no stored figure."""
    store = _small_store(tmp_path)
    host = "h" * 300
    for path in sorted(store.glob("run-*.parquet")):
        table = pq.read_table(path)
        for column, value in (("host", host), ("gpu_uuid", None), ("gpu_serial", None)):
            index = table.schema.get_field_index(column)
            table = table.set_column(index, column, pa.array([value] * len(table), pa.string()))
        path.unlink()
        pq.write_table(table, path)
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots",
                               "--gpu", f"{host}:gpu0"])
    assert done.exit_code == 0, done.output[-500:]
    assert "on 1 host(s)" in done.output, done.output[-500:]


def _results_copied(tmp_path: Path, name: str, results_from: Path) -> Path:
    """A copy of host-ddr whose results.csv is another run's (host-ddr-v2's) file."""
    folder = tmp_path / name
    shutil.copytree(H200.parent / "host-ddr", folder)
    shutil.copyfile(results_from / "results.csv", folder / "results.csv")
    return folder


def _added_then_refused(first: Path, copied: Path, store: Path) -> str:
    """`history add` of `first` stored, then that of `copied` refused with one line (exit
    2), the store unchanged: the line."""
    added = runner.invoke(app, ["history", "add", str(first), "--store", str(store)])
    assert added.exit_code == 0, added.output
    before = store_names(store)
    done = runner.invoke(app, ["history", "add", str(copied), "--store", str(store)])
    assert done.exit_code == 2, done.output
    assert done.output.count("\n") == 1
    assert store_names(store) == before
    return done.output


def test_results_naming_another_run_id_are_refused_and_the_batch_goes_on(tmp_path):
    """host-ddr-v2's results copied into host-ddr's folder were stored as a second run."""
    v2 = H200.parent / "host-ddr-v2"
    copied = _results_copied(tmp_path, "copied", v2)
    store = tmp_path / "store"
    refused = _added_then_refused(v2, copied, store)
    assert refused.startswith("error: ")
    assert str(copied) in refused and "vm-20261201T081848Z" in refused
    batch = runner.invoke(app, ["history", "add", str(copied), str(H200),
                                "--store", str(tmp_path / "other")])
    assert batch.exit_code == 2, batch.output
    assert [line.split(" ")[0] for line in batch.output.splitlines()] == ["error:", "added"]


def _one_measurement_in_two_folders(tmp_path: Path) -> tuple[Path, Path]:
    """host-ddr-v2 with its rows' run_id emptied (an older results.csv), and host-ddr holding
    that same results.csv: one measurement whose folders claim two run ids."""
    v2 = tmp_path / "v2"
    shutil.copytree(H200.parent / "host-ddr-v2", v2)
    results = pd.read_csv(v2 / "results.csv", keep_default_na=False, dtype=str)
    results["run_id"] = ""
    results.to_csv(v2 / "results.csv", index=False)
    return v2, _results_copied(tmp_path, "copied", v2)


def test_one_measurement_under_two_run_ids_is_stored_once(tmp_path):
    """The rows name no run_id (an older results.csv, or cells emptied): the results' digest
    tells the same measurement under another run_id, in the store and in one batch."""
    v2, copied = _one_measurement_in_two_folders(tmp_path)
    store = tmp_path / "store"
    refused = _added_then_refused(v2, copied, store)
    assert str(copied) in refused
    assert "SHA-256" in refused and "vm-20261201T081848Z" in refused
    again = runner.invoke(app, ["history", "add", str(v2), "--store", str(store)])
    assert again.exit_code == 0 and again.output.startswith("already stored:")
    batch = runner.invoke(app, ["history", "add", str(v2), str(copied),
                                "--store", str(tmp_path / "fresh")])
    assert batch.exit_code == 2, batch.output
    assert [line.split(" ")[0] for line in batch.output.splitlines()] == ["added", "error:"]
    assert len(store_names(tmp_path / "fresh")) == 1


def test_a_store_holding_one_measurement_twice_from_before_the_check_re_adds_each(tmp_path):
    """A store written before the digest check may hold one measurement under two run ids:
    re-adding either folder (a nightly `history add reports/*`) is 'already stored', exit 0,
    not a refusal naming the other one (the review's catch: only the first run of a digest
    was remembered)."""
    v2, copied = _one_measurement_in_two_folders(tmp_path)
    store, other = tmp_path / "store", tmp_path / "other"
    for folder, into in ((v2, store), (copied, other)):
        done = runner.invoke(app, ["history", "add", str(folder), "--store", str(into)])
        assert done.exit_code == 0, done.output
    for name in store_names(other):  # as an older bwprof would have stored both
        shutil.copyfile(other / name, store / name)
    assert len(store_names(store)) == 2
    for folder in (v2, copied):
        again = runner.invoke(app, ["history", "add", str(folder), "--store", str(store)])
        assert again.exit_code == 0, again.output
        assert again.output.startswith("already stored:"), again.output
