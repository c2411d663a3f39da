"""`bwprof history add` and `bwprof trend`: the Parquet store of runs' headline figures, many
writers at once, and each GPU's figures over time against the fleet and its own history.

Stores are built from copies of the real H200 run (tests/data/h200-quick) whose run_id,
start time, GPU UUID and figures are edited: a fleet of boxes measured over days."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.analysis import trend
from bwprof.cli import app
from bwprof.errors import BwprofError
from bwprof.store import history_read, history_schema
from tests.conftest import DATA
from tests.faults import read_only_folder, writable_again

pytest.importorskip("pyarrow")

runner = CliRunner()
H200 = DATA / "h200-quick"
H200_UUID = "GPU-ee79134a-9732-1adc-01eb-364e22de051a"


def make_run(root: Path, name: str, *, started: str, uuid: str = H200_UUID,
             host: str = "vm", scale: dict[str, float] | None = None,
             machine_id: str | None = None) -> Path:
    """A copy of h200-quick as the run `name` of `host` started at `started` (ISO, UTC) on
    the GPU `uuid`, each case of `scale` with its figures times its factor; with
    `machine_id`, the run records that machine identity (h200-quick predates it)."""
    folder = root / name
    shutil.copytree(H200, folder)
    system = json.loads((folder / "system.json").read_text())
    system["run_id"] = name
    system["started_utc"] = started
    system["finished_utc"] = started
    system["host"]["hostname"] = host
    system["gpus"]["devices"][0]["metadata"]["uuid"] = uuid
    if machine_id is not None:
        from bwprof.system import machine_identity

        identity = machine_identity(system["host"]["cpu_model"], (uuid,),
                                    sys_dmi=root / "no-dmi", machine_id=root / machine_id)
        system["host"]["identity"] = identity.as_dict()
    (folder / "system.json").write_text(json.dumps(system))
    results = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    results["run_id"], results["host"] = name, host
    for case, factor in (scale or {}).items():
        rows = results["case"] == case
        for column in ("gbps_median", "gbps_best"):
            results.loc[rows, column] = (
                pd.to_numeric(results.loc[rows, column]) * factor).astype(str)
    results.to_csv(folder / "results.csv", index=False)
    return folder


def store_names(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir())


# -- history add ---------------------------------------------------------------------------


def test_the_same_run_added_twice_is_stored_once(tmp_path):
    store = tmp_path / "store"
    first = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
    assert first.exit_code == 0, first.output
    assert first.output.startswith("added vm-20261130T235257Z (11 figure(s)) from ")
    copy = tmp_path / "elsewhere" / "h200"
    shutil.copytree(H200, copy)  # the same run, copied: still the same run
    again = runner.invoke(app, ["history", "add", str(H200), str(copy), "--store", str(store)])
    assert again.exit_code == 0, again.output
    lines = again.output.splitlines()
    assert len(lines) == 2 and all(line.startswith("already stored: vm-20261130T235257Z")
                                   for line in lines)
    assert store_names(store) == ["run-vm-20261130T235257Z-de7ef85fbea9e3f4.parquet"]
    stored = pd.read_parquet(store)
    assert len(stored) == 12 and stored["run_id"].eq("vm-20261130T235257Z").all()  # p2p waived too


def test_a_store_row_carries_the_run_and_the_gpu(tmp_path):
    store = tmp_path / "store"
    assert runner.invoke(app, ["history", "add", str(H200), "--store", str(store)]).exit_code == 0
    stored = pd.read_parquet(store)  # the whole folder, as pandas reads a dataset
    assert tuple(stored.columns) == history_schema.COLUMN_NAMES
    hbm = stored[stored["case"] == "hbm_triad"].iloc[0]
    assert hbm["gpu_uuid"] == H200_UUID
    assert pd.isna(hbm["gpu_serial"])  # this run predates the serial
    assert hbm["driver_version"] == "580.159.04" and hbm["host"] == "vm"
    assert hbm["bwprof_version"] == "0.1.0" and hbm["higher_is_better"]
    assert hbm["started_utc"] == pd.Timestamp("2026-11-30T23:52:57.863683Z")
    assert hbm["value_median"] == pytest.approx(4301.58, rel=1e-5)
    assert hbm["value"] == pytest.approx(4301.58, rel=1e-5)  # the figure is the median
    assert hbm["unit"] == "GB/s" and hbm["status"] == "ok" and hbm["schema_version"] == 1
    ddr = stored[stored["case"] == "ddr_triad"].iloc[0]
    assert pd.isna(ddr["gpu_uuid"]) and ddr["device"] == "cpu"
    assert stored.loc[stored["case"] == "p2p_copy", "status"].tolist() == ["waived"]


def test_a_different_run_claiming_a_stored_run_id_is_refused(tmp_path):
    store = tmp_path / "store"
    assert runner.invoke(app, ["history", "add", str(H200), "--store", str(store)]).exit_code == 0
    before = store_names(store)
    forged = tmp_path / "forged"
    shutil.copytree(H200, forged)
    results = pd.read_csv(forged / "results.csv", keep_default_na=False, dtype=str)
    results.loc[results["case"] == "hbm_triad", "gbps_best"] = "1.0"
    results.to_csv(forged / "results.csv", index=False)
    done = runner.invoke(app, ["history", "add", str(forged), "--store", str(store)])
    assert done.exit_code == 2
    assert len(done.output.splitlines()) == 1
    assert "claims run_id 'vm-20261130T235257Z'" in done.output and "refused" in done.output
    assert store_names(store) == before


@pytest.mark.parametrize("name, words", [
    ("sim-a", "is a simulated run"),
    ("missing", "does not exist"),
])
def test_a_simulated_run_or_a_folder_that_is_no_run_is_refused(tmp_path, name, words):
    store = tmp_path / "store"
    done = runner.invoke(app, ["history", "add", str(H200), str(DATA / name),
                               "--store", str(store)])
    assert done.exit_code == 2 and words in done.output
    refused = [line for line in done.output.splitlines() if line.startswith("error: ")]
    assert len(refused) == 1 and words in refused[0]
    assert len(store_names(store)) == 1  # the refused folder stops no other (issue 37)
    alone = runner.invoke(app, ["history", "add", str(DATA / name), "--store",
                                str(tmp_path / "other")])
    assert alone.exit_code == 2 and len(alone.output.splitlines()) == 1
    assert not (tmp_path / "other").exists()  # nothing to add: no store made


@pytest.mark.parametrize("started", ["9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+00:00",
                                     "2201-01-01T00:00:00+00:00"])
def test_a_run_started_in_a_year_no_run_was_at_is_refused(tmp_path, started):
    """Year 9999 (a forged file or a wrong clock) was stored, and then every trend plot of
    the store failed with matplotlib's date-range ValueError, a traceback."""
    folder = make_run(tmp_path, "r1", started=started)
    store = tmp_path / "store"
    done = runner.invoke(app, ["history", "add", str(folder), "--store", str(store)])
    assert done.exit_code == 2, done.output
    assert "is not a time a run was at (years 1970 to 2200)" in done.output
    assert len(done.output.splitlines()) == 1 and not store.exists()  # checked first


def test_a_run_of_a_box_whose_clock_starts_at_1970_is_stored(tmp_path):
    folder = make_run(tmp_path, "r1", started="1970-01-01T00:05:00+00:00")
    done = runner.invoke(app, ["history", "add", str(folder), "--store", str(tmp_path / "s")])
    assert done.exit_code == 0, done.output


def test_an_interrupted_run_is_refused(tmp_path):
    run = make_run(tmp_path, "cut", started="2026-12-01T00:00:00+00:00")
    system = json.loads((run / "system.json").read_text())
    system["interrupted"], system["stopped_by"] = True, "SIGHUP"
    (run / "system.json").write_text(json.dumps(system))
    done = runner.invoke(app, ["history", "add", str(run), "--store", str(tmp_path / "s")])
    assert done.exit_code == 2 and "finished runs only" in done.output


def test_a_store_that_is_a_file_or_lies_under_one_is_bad_input(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for store in (blocker, blocker / "s"):
        done = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
        assert done.exit_code == 2 and len(done.output.splitlines()) == 1, done.output
    assert "is not a folder" in done.output or "Not a directory" in done.output


def test_a_full_disk_under_the_store_is_exit_3_and_leaves_no_temporary_file(tmp_path,
                                                                            monkeypatch):
    import errno

    from bwprof.store import atomic

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    store = tmp_path / "store"
    done = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
    assert done.exit_code == 3 and done.output.startswith("error: cannot write ")
    assert "choose another --store" in done.output and len(done.output.splitlines()) == 1
    assert store_names(store) == []


def test_a_read_only_store_is_exit_3(tmp_path):
    """chmod 555 where not root; as root (whom permission bits do not stop) a real
    read-only bind mount."""
    store = tmp_path / "store"
    store.mkdir()
    read_only_folder(store)
    try:
        done = runner.invoke(app, ["history", "add", str(H200), "--store", str(store)])
    finally:
        writable_again(store)
    assert done.exit_code == 3 and "choose another --store" in done.output
    assert store_names(store) == []  # no temporary file left


def test_a_store_or_trend_folder_that_cannot_be_made_is_named_in_its_line(tmp_path):
    """The line names the folder that could not be made, not a file name's prefix
    ('cannot write .../store/run-')."""
    parent = tmp_path / "ro"
    parent.mkdir()
    read_only_folder(parent)
    try:
        added = runner.invoke(app, ["history", "add", str(H200), "--store",
                                    str(parent / "store")])
        drawn = runner.invoke(app, ["trend", "--store", str(fleet_store(tmp_path)),
                                    "--out", str(parent / "plots")])
    finally:
        writable_again(parent)
    assert added.exit_code == 3, added.output
    assert added.output.startswith(f"error: cannot write {parent / 'store'}: ")
    assert drawn.exit_code == 3, drawn.output
    assert drawn.output.startswith(f"error: cannot write {parent / 'plots'}: ")


def test_without_pyarrow_history_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    for args in (["history", "add", str(H200), "--store", str(tmp_path / "s")],
                 ["trend", "--store", str(tmp_path / "s")]):
        done = runner.invoke(app, args)
        assert done.exit_code == 2
        assert done.output.strip() == ("error: the history store is Parquet and needs "
                                       "pyarrow: python3 -m pip install pyarrow")
    assert not (tmp_path / "s").exists()


def test_two_history_adds_started_at_once_both_land(tmp_path):
    runs = [make_run(tmp_path, f"box{n}-20261201T000000Z", host=f"box{n}",
                     started="2026-12-01T00:00:00+00:00", uuid=f"GPU-{n}") for n in (1, 2)]
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-m", "bwprof", "history", "add", str(run),
                               str(H200), "--store", str(store)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for run in runs]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    names = store_names(store)
    assert len(names) == 3, names  # both runs, and the run both added stored once
    stored = pd.read_parquet(store)
    assert set(stored["run_id"]) == {"box1-20261201T000000Z", "box2-20261201T000000Z",
                                     "vm-20261130T235257Z"}
    said = "".join(out for out, _err in outputs)
    assert said.count("added vm-20261130T235257Z") + said.count("already stored: vm-") == 2


# -- trend ---------------------------------------------------------------------------------


_built_stores: dict[float | str, Path] = {}
"""Each fleet store built once a module (nine copies of h200-quick and a `history add`: seconds
each); every test gets its own copy, so one that changes its store changes no other's."""


@pytest.fixture(scope="module", autouse=True)
def _store_cache(tmp_path_factory):
    _built_stores["root"] = tmp_path_factory.mktemp("fleet-stores")
    yield
    _built_stores.clear()


def fleet_store(tmp_path: Path, last_hbm: float = 1.0) -> Path:
    """Three H200 boxes measured on three days; box2's last HBM figure times `last_hbm`."""
    if last_hbm not in _built_stores:
        _built_stores[last_hbm] = _build_fleet_store(
            _built_stores["root"] / f"hbm-{last_hbm}", last_hbm)
    store = tmp_path / "store"
    shutil.copytree(_built_stores[last_hbm], store)
    return store


def _build_fleet_store(tmp_path: Path, last_hbm: float) -> Path:
    store = tmp_path / "store"
    folders = []
    for day in (1, 2, 3):
        for box in (1, 2, 3):
            scale = {"hbm_triad": 1.0 + 0.005 * box}
            if box == 2 and day == 3:
                scale = {"hbm_triad": last_hbm}
            folders.append(make_run(tmp_path / "runs", f"box{box}-2026120{day}T000000Z",
                                    host=f"box{box}", uuid=f"GPU-box{box}",
                                    started=f"2026-12-0{day}T0{box}:00:00+00:00", scale=scale))
    done = runner.invoke(app, ["history", "add", *map(str, folders), "--store", str(store)])
    assert done.exit_code == 0, done.output
    return store


def test_trend_draws_a_png_per_case_from_a_store_of_several_runs(tmp_path):
    store = fleet_store(tmp_path)
    out = tmp_path / "plots"
    done = runner.invoke(app, ["trend", "--store", str(store), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "3 GPU(s) on 3 host(s), 11 case(s), 9 run(s)" in done.output
    assert "no figure fell more than 5%" in done.output
    assert "trend-hbm_triad.png" in {p.name for p in out.iterdir()}
    assert (out / "trend-hbm_triad.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one = runner.invoke(app, ["trend", "--store", str(store), "--out", str(tmp_path / "one"),
                              "--gpu", "GPU-box1", "--case", "hbm_triad"])
    assert one.exit_code == 0, one.output
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["trend-hbm_triad.png"]


def test_a_gpu_whose_latest_figure_dropped_is_flagged_with_exit_1(tmp_path):
    store = fleet_store(tmp_path, last_hbm=0.90)  # box2's HBM 10% below its own history
    plots = tmp_path / "p"
    done = runner.invoke(app, ["trend", "--store", str(store), "--out", str(plots),
                               "--no-plots"])
    assert done.exit_code == 1, done.output
    assert "11 case(s), 9 run(s); no plots (--no-plots)" in done.output
    assert not plots.exists()
    fell = [line for line in done.output.splitlines() if line.startswith("FELL")]
    assert len(fell) == 1
    assert fell[0].startswith("FELL hbm_triad GPU-box2 (box2 gpu0), NVIDIA H200: ")
    assert "% below its median of " in fell[0] and "over 2 earlier run(s)" in fell[0]
    drawn = runner.invoke(app, ["trend", "--store", str(store), "--out", str(plots),
                                "--case", "hbm_triad"])  # the fallen GPU among the lines
    assert drawn.exit_code == 1, drawn.output
    assert [p.name for p in plots.iterdir()] == ["trend-hbm_triad.png"]
    loose = runner.invoke(app, ["trend", "--store", str(store), "--no-plots",
                                "--threshold", "15", "--case", "hbm_triad"])
    assert loose.exit_code == 0, loose.output


def _series(values: list[float], higher_is_better: bool) -> pd.DataFrame:
    return pd.DataFrame({
        "run_key": [f"k{i}" for i in range(len(values))], "run_id": [f"r{i}" for i in
                                                                     range(len(values))],
        "started_utc": pd.to_datetime([f"2026-12-0{i + 1}" for i in range(len(values))],
                                      utc=True),
        "host": "h", "device": "gpu0", "device_name": "NVIDIA H200", "gpu_uuid": "GPU-1",
        "gpu_serial": None, "path": "latency", "case": "lat_gpu", "metric": "latency",
        "unit": "ns", "higher_is_better": higher_is_better, "value": values,
        "value_median": values, "status": "ok"})


def test_a_latency_that_rose_is_its_fall():
    rows = trend.figures(_series([500.0, 510.0, 600.0], higher_is_better=False))
    assert trend.select(rows, gpu="GPU-1", case="lat_gpu").equals(rows)
    (fall,) = trend.falls(rows, 5.0)
    assert fall.lower_is_better and fall.fell_pct == pytest.approx(600 / 505 * 100 - 100)
    assert "above its median of 505 ns" in fall.line(5.0)
    assert trend.falls(trend.figures(_series([500.0, 510.0, 450.0], False)), 5.0) == []


def test_an_earlier_median_too_small_to_divide_by_is_no_fall():
    """A damaged store's median of 5e-324 (subnormal): the change overflows to inf%, which is
    no fall to report (as a median of 0 is not), in judge and in falls alike."""
    for lower in (False, True):
        rows = trend.figures(_series([5e-324, 5e-324, 600.0], higher_is_better=not lower))
        assert trend.falls(rows, 5.0) == []
        assert trend.judge(rows, 5.0) is None


@pytest.mark.parametrize("option", ["gpu", "case"])
def test_a_gpu_or_case_of_thousands_of_characters_is_a_short_line(option):
    """The refusal shows the head and tail of what was given, not 5000 characters."""
    rows = trend.figures(_series([500.0, 510.0], higher_is_better=False))
    with pytest.raises(BwprofError) as refused:
        trend.select(rows, **{option: "9" * 5000})
    assert "(5000 characters)" in str(refused.value) and len(str(refused.value)) < 200


def test_trend_refuses_what_it_cannot_follow(tmp_path):
    store = fleet_store(tmp_path)
    for args, words in ((["--gpu", "GPU-nope"], "is in no stored figure"),
                        (["--case", "nope"], "has no stored figure"),
                        (["--threshold", "0"], "--threshold must be"),
                        (["--out", str(store)], "--out is the store's folder")):
        done = runner.invoke(app, ["trend", "--store", str(store), *args])
        assert done.exit_code == 2 and words in done.output, done.output
    done = runner.invoke(app, ["trend", "--store", str(tmp_path / "none")])
    assert done.exit_code == 2 and "does not exist" in done.output
    empty = tmp_path / "empty"
    empty.mkdir()
    done = runner.invoke(app, ["trend", "--store", str(empty)])
    assert done.exit_code == 2 and "holds no run" in done.output


def test_trend_skips_a_writer_still_at_work_and_notes_a_damaged_file(tmp_path):
    store = fleet_store(tmp_path)
    (store / ".run-x.parquet.bwprof-1-0a0b0c0d.tmp").write_bytes(b"half")
    (store / "run-broken-0000000000000000.parquet").write_bytes(b"not parquet")
    done = runner.invoke(app, ["trend", "--store", str(store), "--out", str(tmp_path / "p"),
                               "--case", "hbm_triad"])  # the store is read whole; one plot
    assert done.exit_code == 0, done.output
    assert "note: left out: cannot read " in done.output and "run-broken" in done.output


def test_the_docs_name_trend_among_the_commands_that_exit_1_and_the_stores_columns():
    import re

    docs = Path(__file__).resolve().parents[2] / "docs"
    command_line = (docs / "command-line.md").read_text()
    table = dict(re.findall(r"^\| `(\d+)` \| (.+?) \|$", command_line, re.M))
    assert "`trend` where a GPU's latest figure fell" in table["1"]
    store_doc = (docs / "history.md").read_text()
    assert "## History and trend" in store_doc
    for column in history_schema.COLUMN_NAMES:  # the store's columns, each in its table
        assert f"`{column}`" in store_doc, column


def test_one_gpus_trend_is_drawn_against_the_whole_fleets_range(tmp_path):
    fleet = trend.figures(history_read.read_store(fleet_store(tmp_path)))
    rows = trend.select(fleet, gpu="GPU-box1", case="hbm_triad")
    assert set(rows["subject"]) == {"GPU-box1"} and len(rows) == 3
    from bwprof.render.trendplot import case_figure

    figure = case_figure("hbm_triad", rows, fleet[fleet["case"] == "hbm_triad"], 5.0)
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    # Three boxes' three runs, not box1's alone, less box1's latest: the run under test.
    assert "fleet min–max of 8 figure(s), without the 1 judged" in labels
    assert any(label.startswith("GPU-box1") for label in labels)


# -- the trend plot (issue 35): the fall, the threshold, the band without the point judged --


def _hbm_figure(tmp_path: Path, last_hbm: float):
    """The hbm_triad trend of the three-box fleet whose box2 ended at `last_hbm` times its
    figure, box2's points (time, figure) in order, and the fleet's hbm_triad rows."""
    from bwprof.render.trendplot import case_figure

    fleet = trend.figures(history_read.read_store(fleet_store(tmp_path, last_hbm)))
    rows = trend.select(fleet, case="hbm_triad")
    figure = case_figure("hbm_triad", rows, fleet[fleet["case"] == "hbm_triad"], 5.0)
    box2 = rows[rows["subject"] == "GPU-box2"]
    times = box2["started_utc"].dt.tz_convert("UTC").dt.tz_localize(None).to_list()
    return figure, list(zip(times, box2["figure"], strict=True)), rows


def _red(axis) -> list:
    """The solid red lines of a panel: a fall."""
    from matplotlib.colors import same_color

    return [line for line in axis.get_lines() if line.get_linestyle() == "-"
            and same_color(line.get_color(), "firebrick")]


def _band(axis) -> tuple[float, float]:
    (band,) = [patch for patch in axis.patches if str(patch.get_label()).startswith("fleet")]
    box = band.get_bbox()  # y in data units
    return box.y0, box.y1


def test_the_fleet_band_leaves_out_the_points_under_test(tmp_path):
    """box2's latest HBM figure at 90%: the fleet's min–max of every stored figure reached
    down to it, so the band covered the very drop it should show. Without each box's latest
    run (the ones judged) the band's low edge stays above it."""
    figure, box2, hbm = _hbm_figure(tmp_path, 0.90)
    (axis,) = figure.axes
    low, _high = _band(axis)
    latest = box2[-1][1]
    earlier = min(value for _time, value in box2[:-1])
    assert latest < 0.92 * earlier and low > latest and low >= 0.99 * earlier
    labels = [t.get_text() for t in axis.get_legend().get_texts()]
    assert "fleet min–max of 6 figure(s), without the 3 judged" in labels
    kept = trend.without_tested(hbm, hbm)
    assert len(kept) == 6 and not kept["run_id"].str.endswith("20261203T000000Z").any()


def test_only_the_fall_is_red_with_its_threshold_dotted(tmp_path):
    """The fallen box's line keeps its colour; only the segment into its latest run and that
    point are red, and its threshold (5% under the median of its earlier runs) is drawn."""
    figure, box2, _rows = _hbm_figure(tmp_path, 0.90)
    (axis,) = figure.axes
    (fall,) = _red(axis)
    assert list(fall.get_xdata()) == [time for time, _value in box2[-2:]]
    assert list(fall.get_ydata()) == [value for _time, value in box2[-2:]]
    assert fall.get_markevery() == [1]  # the latest point marked, not the one before
    whole = [line for line in axis.get_lines() if len(line.get_xdata()) == 3]
    assert len(whole) == 3 and not [line for line in whole if line in _red(axis)]
    median = float(pd.Series([value for _time, value in box2[:-1]]).median())
    dotted = [line for line in axis.get_lines() if line.get_linestyle() == ":"]
    assert any(list(line.get_ydata()) == pytest.approx([0.95 * median] * 2) for line in dotted)
    labels = [t.get_text() for t in axis.get_legend().get_texts()]
    assert "threshold: 5% below the median of the line's earlier runs" in labels
    assert any(label.startswith("FELL GPU-box2") for label in labels)


def _points(values: list[float], *, path: str = "h2d", case: str = "h2d_pinned",
            higher_is_better: bool = True, days: int = 1) -> pd.DataFrame:
    """A series of one GPU, one run each `days` days from 2026-12-01."""
    frame = _series(values, higher_is_better)
    frame["started_utc"] = [pd.Timestamp("2026-12-01", tz="UTC") + pd.Timedelta(days=days * i)
                            for i in range(len(values))]
    frame["path"], frame["case"] = path, case
    if higher_is_better:
        frame["metric"], frame["unit"] = "bandwidth", "GB/s"
    return frame


def test_a_rise_is_never_red():
    """One GPU's case with two paths: its host→device figure fell, its device→host one rose.
    Falls were matched by GPU and case, so both panels' lines were red; now only the panel
    whose series fell has red, and a latency that fell (it improved) has none."""
    from bwprof.render.trendplot import case_figure

    rows = trend.figures(pd.concat([_points([50.0, 50.0, 40.0], path="h2d"),
                                    _points([50.0, 50.0, 60.0], path="d2h")],
                                   ignore_index=True))
    figure = case_figure("h2d_pinned", rows, rows, 5.0)
    red = {axis.get_title().split(" · ")[1]: len(_red(axis)) for axis in figure.axes}
    assert red == {"d2h": 0, "h2d": 1}
    better = trend.figures(_series([500.0, 510.0, 450.0], higher_is_better=False))
    assert _red(case_figure("lat_gpu", better, better, 5.0).axes[0]) == []
    worse = trend.figures(_series([500.0, 510.0, 600.0], higher_is_better=False))
    (fall,) = _red(case_figure("lat_gpu", worse, worse, 5.0).axes[0])
    assert list(fall.get_ydata()) == [510.0, 600.0]  # a latency's rise is its fall


@pytest.mark.parametrize(("runs", "days"), [(1, 1), (2, 1), (3, 30)])
def test_the_time_axis_spans_the_runs_with_a_little_room(runs, days):
    """One run was drawn across four years of axis (matplotlib's range for a lone date)."""
    from matplotlib.dates import num2date

    from bwprof.render.trendplot import case_figure

    rows = trend.figures(_points([50.0] * runs, days=days))
    (axis,) = case_figure("h2d_pinned", rows, rows, 5.0).axes
    first, last = (pd.Timestamp(num2date(x)) for x in axis.get_xlim())
    span = pd.Timedelta(days=days * (runs - 1))
    start = pd.Timestamp("2026-12-01", tz="UTC")
    assert first < start and start + span < last
    assert last - first <= span * 1.2 + pd.Timedelta(days=1)
    assert last - first < pd.Timedelta(days=10) or runs > 2


def test_trend_hands_its_threshold_to_the_plots(tmp_path, monkeypatch):
    from bwprof import saved
    from bwprof.render import trendplot

    seen: list[float] = []
    drawn = trendplot.case_figure

    def spy(case, rows, fleet, threshold):
        seen.append(threshold)
        return drawn(case, rows, fleet, threshold)

    monkeypatch.setattr(trendplot, "case_figure", spy)
    saved.trend(fleet_store(tmp_path), case="hbm_triad", out=tmp_path / "p", threshold=15.0)
    assert seen == [15.0]


def test_two_machines_of_one_host_name_but_other_models_are_separate_series(tmp_path):
    """h200-quick (Xeon) and host-ddr-v2 (EPYC) were both measured on hosts named `vm`: the
    EPYC's DDR is not a fall of the Xeon's."""
    store = tmp_path / "store"
    done = runner.invoke(app, ["history", "add", str(H200), str(DATA / "host-ddr-v2"),
                               "--store", str(store)])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert done.exit_code == 0 and "FELL" not in done.output, done.output


def _two_boxes_named_vm(tmp_path: Path, identities: bool) -> Path:
    """Two runs of hosts both named `vm`: the first a fast box, the second (a day later)
    another machine whose DDR and HBM are a tenth of it; with `identities`, each records its
    own machine-id."""
    ids = []
    for n in (1, 2):
        (tmp_path / f"machine-id-{n}").write_text(f"{n:032x}\n")
        ids.append(f"machine-id-{n}" if identities else None)
    first = make_run(tmp_path, "vm-a", started="2026-12-01T00:00:00Z", uuid="GPU-a",
                     machine_id=ids[0])
    second = make_run(tmp_path, "vm-b", started="2026-12-02T00:00:00Z", uuid="GPU-b",
                      machine_id=ids[1], scale={"ddr_triad": 0.1, "ddr_copy": 0.1})
    store = tmp_path / "store"
    done = runner.invoke(app, ["history", "add", str(first), str(second), "--store", str(store)])
    assert done.exit_code == 0, done.output
    return store


def test_two_machines_sharing_a_host_name_are_two_boxes_in_trend(tmp_path):
    """The issue's store: a fast box and a slow VM both named `vm` were one series, and the
    slow one's DDR a fall of the fast one's. With their identities recorded they are two."""
    store = _two_boxes_named_vm(tmp_path, identities=True)
    rows = history_read.read_store(store)
    boxes = set(rows["box"])
    assert len(boxes) == 2 and None not in boxes
    fleet = trend.figures(rows)
    ddr = fleet[fleet["case"] == "ddr_triad"]
    assert ddr["subject"].nunique() == 2
    assert all(subject.startswith("vm#") for subject in ddr["subject"])
    assert not [f for f in trend.falls(fleet, 5.0) if f.case.startswith("ddr")]
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert done.exit_code == 0 and "FELL" not in done.output, done.output
    assert "no machine identity" not in done.output
    assert "2 GPU(s) on 2 host(s)" in done.output  # boxes counted, not host names
    with pytest.raises(BwprofError, match="2 machines that share a host name"):
        trend.select(fleet, gpu="vm:cpu")
    one = sorted(ddr["subject"])[0]
    assert set(trend.select(fleet, gpu=one)["subject"]) == {one}


def test_runs_without_an_identity_are_keyed_by_host_name_with_a_note(tmp_path):
    """Older runs (every folder in tests/data) have no identity: keyed by host name as
    before, and the trend says so."""
    store = _two_boxes_named_vm(tmp_path, identities=False)
    notes: list[str] = []
    rows = history_read.read_store(store, notes)
    assert rows["box"].isna().all()
    assert any("2 stored run(s) recorded no machine identity" in note for note in notes)
    fleet = trend.figures(rows)
    assert set(fleet.loc[fleet["case"] == "ddr_triad", "subject"]) == {"vm:cpu"}
    done = runner.invoke(app, ["trend", "--store", str(store), "--no-plots"])
    assert "note: 2 stored run(s) recorded no machine identity" in done.output
    assert "FELL ddr_triad vm:cpu" in done.output and done.exit_code == 1
    assert "2 GPU(s) on 1 host(s)" in done.output  # without identities: host names


def test_a_store_file_written_before_the_box_column_still_reads(tmp_path):
    store = _two_boxes_named_vm(tmp_path, identities=True)
    import pyarrow.parquet as pq

    old = store / "run-old-0000000000000000.parquet"
    table = pq.read_table(next(store.iterdir()))
    pq.write_table(table.drop(["box"]).replace_schema_metadata(None), old)
    notes: list[str] = []
    rows = history_read.read_store(store, notes)
    assert list(rows.columns) == list(history_schema.COLUMN_NAMES)
    assert any("1 stored run(s) recorded no machine identity" in note for note in notes)
