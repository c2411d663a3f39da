import csv
import json

import pandas as pd
import pytest

from bwprof.errors import BwprofError
from bwprof.report.export import RunWriter, prepare_run_dir, write_system_json
from bwprof.schema.rows import RESULT_COLUMNS, SCHEMA_VERSION, TELEMETRY_COLUMNS, ResultRow
from bwprof.schema.table import read_results, results_frame


def make_row(**overrides) -> ResultRow:
    values = dict(
        run_id="r", host="h", case="ddr_triad", backend="host", device="cpu",
        device_name="CPU, with comma", memory="ddr", direction="within", size_bytes=1024,
        threads=2, streams=None, numa_node=None, repeats=3, ops_per_sample=1,
        bytes_per_op=3072, byte_convention="traffic", time_median_s=2e-6, time_min_s=1e-6,
        gbps_median=1.536, gbps_best=3.072, cv=0.1, peak_gbps=None, pct_of_peak=None,
        status="ok", note='a "quoted" note',
    )
    values.update(overrides)
    return ResultRow(**values)


def set_first_row(path, column, value):
    """Rewrite one cell of the first data row of a CSV file."""
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    table[0][column] = value
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(table[0]))
        out.writeheader()
        out.writerows(table)


def test_rows_are_on_disk_as_soon_as_they_are_added(tmp_path):
    writer = RunWriter(tmp_path)
    writer.add(make_row(), [1e-6, 2e-6])
    # Read back while the writer is still open: an interrupted run leaves exactly this.
    frame = read_results(tmp_path / "results.csv")
    assert len(frame) == 1
    assert frame.loc[0, "device_name"] == "CPU, with comma"
    assert frame.loc[0, "note"] == 'a "quoted" note'
    assert frame.loc[0, "schema_version"] == SCHEMA_VERSION
    assert frame.loc[0, "gbps_best"] == 3.072
    with open(tmp_path / "timings.csv") as f:
        timings = list(csv.DictReader(f))
    assert [float(t["seconds_per_op"]) for t in timings] == [1e-6, 2e-6]
    writer.add(make_row(case="ddr_copy", status="skipped", size_bytes=None, gbps_best=None), [])
    writer.close()
    frame = read_results(tmp_path / "results.csv")
    assert list(frame["case"]) == ["ddr_triad", "ddr_copy"]
    assert frame["size_bytes"].isna().tolist() == [False, True]


def test_results_frame_has_every_column_in_order():
    frame = results_frame([make_row(), make_row(threads=None, counters={"power_w_max": 650.0})])
    assert tuple(frame.columns) == (*RESULT_COLUMNS, "rank", *TELEMETRY_COLUMNS)
    assert frame["power_w_max"].isna().tolist() == [True, False]
    assert str(frame["threads"].dtype) == "Int64"


def test_read_results_rejects_a_foreign_csv(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(BwprofError, match="not a bwprof results file"):
        read_results(path)


def test_system_json_is_replaced_atomically(tmp_path):
    from tests.schema.builders import meta

    write_system_json(tmp_path, meta(run_id="a"))
    write_system_json(tmp_path, meta(run_id="b"))
    assert json.loads((tmp_path / "system.json").read_text())["run_id"] == "b"
    assert [p.name for p in tmp_path.iterdir()] == ["system.json"]


def test_system_json_is_strict_json_whatever_nvml_said(tmp_path):
    """A NaN or infinity (a driver's odd reading) is written as null, never as the NaN
    literal other JSON readers refuse."""
    from tests.schema.builders import gpu, gpus, meta

    odd = gpu(0, metadata={"power_limit_w": float("nan"), "nested": [float("inf"), 1.5]})
    write_system_json(tmp_path, meta(gpus=gpus(odd)))
    text = (tmp_path / "system.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    written = json.loads(text)["gpus"]["devices"][0]["metadata"]
    assert written == {"power_limit_w": None, "nested": [None, 1.5]}


def test_prepare_run_dir(tmp_path):
    assert prepare_run_dir(tmp_path / "new" / "run").is_dir()
    assert prepare_run_dir(tmp_path / "new" / "run").is_dir()  # empty folder is fine
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(BwprofError, match="exists and is not empty"):
        prepare_run_dir(tmp_path / "full")
    with pytest.raises(BwprofError, match="is not a folder"):
        prepare_run_dir(tmp_path / "full" / "x")
    with pytest.raises(BwprofError, match="cannot write to output folder"):
        prepare_run_dir(tmp_path / "full" / "x" / "below-a-file")


# Catches: two runs started in the same second, with bwprof's default folder name, write
# into one folder (the second run's rows replaced the first's)
def test_a_taken_default_folder_name_gets_a_suffix(tmp_path):
    import threading

    default = tmp_path / "reports" / "host-20261201T030212Z"
    claimed: list = []
    threads = [threading.Thread(target=lambda: claimed.append(
        prepare_run_dir(default, unique=True))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(p.name for p in claimed) == [default.name] + [
        f"{default.name}-{n}" for n in (2, 3, 4)]
    (default / "x").write_text("")
    with pytest.raises(BwprofError, match="cannot create output folder"):
        prepare_run_dir(default / "x" / "y", unique=True)


def test_read_results_rejects_another_schema_version_and_keeps_extra_columns(tmp_path):
    writer = RunWriter(tmp_path)
    writer.add(make_row(), [])
    writer.close()
    path = tmp_path / "results.csv"
    lines = path.read_text().splitlines()
    lines[0] += ",site_rack"
    lines[1] += ",12.5"
    path.write_text("\n".join(lines) + "\n")
    frame = read_results(path)
    assert frame.columns[-1] == "site_rack" and frame.loc[0, "site_rack"] == 12.5
    set_first_row(path, "schema_version", "99")
    with pytest.raises(BwprofError, match=r"schema version 99, this bwprof reads 1"):
        read_results(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BwprofError, match=r"is not UTF-8 text \(byte 0xff at offset 0\)"):
        read_results(path)


def test_timings_point_at_their_row_of_results(tmp_path):
    writer = RunWriter(tmp_path)
    writer.add(make_row(case="a"), [1.0])
    writer.add(make_row(case="b", status="skipped"), [])
    writer.add(make_row(case="c", phase="alone", backend="simulated"), [2.0, 3.0])
    writer.close()
    with open(tmp_path / "timings.csv") as f:
        timings = list(csv.DictReader(f))
    assert [(t["result_row"], t["case"]) for t in timings] == [("0", "a"), ("2", "c"),
                                                               ("2", "c")]
    # A simulated row's samples say so too: they are not measurements either.
    assert [t["backend"] for t in timings] == ["host", "simulated", "simulated"]
    results = read_results(tmp_path / "results.csv")
    assert results.loc[int(timings[1]["result_row"]), "case"] == "c"


@pytest.mark.parametrize(("column", "value"), [("size_bytes", "1.5"), ("repeats", "1e30"),
                                               ("gbps_best", "fast")])
def test_a_value_of_the_wrong_kind_is_a_one_line_error(tmp_path, column, value):
    writer = RunWriter(tmp_path)
    writer.add(make_row(), [])
    writer.close()
    path = tmp_path / "results.csv"
    set_first_row(path, column, value)
    with pytest.raises(BwprofError, match=f"is malformed: column {column}"):
        read_results(path)


def test_every_file_of_a_run_carries_the_schema_version(tmp_path):
    import bwprof

    run = bwprof.run(cases="ddr_copy,overlap_h2d_compute", preset="quick", repeats=2,
                     size="1MiB", threads="1", simulate=True, plots=False, out=tmp_path / "r")
    for name in ("results.csv", "timings.csv", "findings.csv", "summary.csv"):
        frame = pd.read_csv(run.run_dir / name)
        assert "schema_version" in frame.columns, name
        assert set(frame["schema_version"]) <= {SCHEMA_VERSION}, name
    timelines = json.loads((run.run_dir / "timelines.json").read_text())
    assert timelines["schema_version"] == SCHEMA_VERSION and timelines["timelines"]
    assert json.loads((run.run_dir / "system.json").read_text())["schema_version"] == (
        SCHEMA_VERSION)
    writer = RunWriter(tmp_path)  # samples.csv comes only from a real GPU's counters
    writer.add_samples([{"t_s": 0.1, "device": "gpu0"}], ("t_s", "device"))
    writer.close()
    assert (tmp_path / "samples.csv").read_text().splitlines() == [
        "t_s,device,schema_version", f"0.1,gpu0,{SCHEMA_VERSION}"]
