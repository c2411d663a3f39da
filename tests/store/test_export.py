import csv
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from bwprof.errors import BwprofError
from bwprof.schema.rows import (
    OPTIONAL_COLUMNS,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    TELEMETRY_COLUMNS,
    ResultRow,
)
from bwprof.schema.table import read_results, results_frame
from bwprof.store.export import RunWriter, prepare_run_dir, write_system_json


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
    assert tuple(frame.columns) == (*RESULT_COLUMNS, *OPTIONAL_COLUMNS, *TELEMETRY_COLUMNS)
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
    from bwprof.store.runlock import FolderTaken, running

    claim = prepare_run_dir(tmp_path / "new" / "run")
    assert claim.folder.is_dir() and running(claim.folder) is True
    with pytest.raises(FolderTaken, match=r"belongs to another run \(still running\)"):
        prepare_run_dir(tmp_path / "new" / "run")
    (claim.folder / "results.csv").write_text("case\n")
    claim.release()
    with pytest.raises(FolderTaken, match="belongs to another run; choose another --out"):
        prepare_run_dir(tmp_path / "new" / "run")  # a run's folder stays its own
    (claim.folder / "results.csv").unlink()  # a run killed before it wrote anything
    assert prepare_run_dir(tmp_path / "new" / "run").folder == claim.folder
    (tmp_path / "empty").mkdir()
    assert prepare_run_dir(tmp_path / "empty").folder == tmp_path / "empty"  # empty is fine
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(BwprofError, match="exists and is not empty"):
        prepare_run_dir(tmp_path / "full")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["x"]  # no lock left behind
    with pytest.raises(BwprofError, match="is not a folder"):
        prepare_run_dir(tmp_path / "full" / "x")
    with pytest.raises(BwprofError, match=r"cannot create output folder .*Not a directory") as bad:
        prepare_run_dir(tmp_path / "full" / "x" / "below-a-file")
    assert bad.value.exit_code == 2  # the path is wrong, not the storage


# Catches: two runs started in the same second, with bwprof's default folder name, write
# into one folder (the second run's rows replaced the first's)
def test_a_taken_default_folder_name_gets_a_suffix(tmp_path):
    import threading

    default = tmp_path / "reports" / "host-20261201T030212Z"
    claimed: list = []
    threads = [threading.Thread(target=lambda: claimed.append(
        prepare_run_dir(default, unique=True).folder)) for _ in range(4)]
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


def test_every_file_of_a_run_carries_the_schema_version(tmp_path, monkeypatch):
    import bwprof
    from tests.conftest import small_simulated_gpus

    small_simulated_gpus(monkeypatch, 8 << 20)  # the files' columns, not the copies' sizes
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


class _FailingFile:
    """A file that takes `writes` write calls, then half of the next one, then fails with
    `err` (a full disk: the kernel writes what fits, and the next write fails)."""

    def __init__(self, handle, writes, err=28):
        self.handle, self.writes, self.err, self.cut = handle, writes, err, False

    def write(self, data):
        if self.writes > 0:
            self.writes -= 1
            return self.handle.write(data)
        if not self.cut and len(data) > 1:
            self.cut = True
            return self.handle.write(bytes(data[: len(data) // 2]))
        import os

        raise OSError(self.err, os.strerror(self.err))

    def __getattr__(self, name):
        return getattr(self.handle, name)


def _fail_file(monkeypatch, name, writes, err=28):
    """Make the run writer's `name` fail after `writes` whole write calls."""
    import builtins

    from bwprof.store import export

    def fake_open(path, mode="r", *args, **kwargs):
        handle = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115
        return _FailingFile(handle, writes, err) if str(path).endswith("/" + name) else handle

    monkeypatch.setattr(export, "open", fake_open, raising=False)


# Catches: a full disk leaves a torn last row (half a number) or a row without its timings
@pytest.mark.parametrize("full", ["results.csv", "timings.csv"])
def test_a_row_that_does_not_fit_is_taken_back_whole(tmp_path, monkeypatch, full):
    from bwprof.errors import OutputError

    _fail_file(monkeypatch, full, writes=2)  # the header and one row
    writer = RunWriter(tmp_path)
    writer.add(make_row(case="a"), [1e-6, 2e-6])
    with pytest.raises(OutputError) as caught:
        writer.add(make_row(case="b"), [3e-6])
    writer.close()
    message = str(caught.value)
    assert message.startswith(f"cannot write {tmp_path / full}: No space left on device (")
    assert f"free there); the rows finished before are kept in {tmp_path}" in message
    assert len(message.splitlines()) == 1
    assert writer.rows == 1
    for name in ("results.csv", "timings.csv"):
        assert (tmp_path / name).read_bytes().endswith(b"\r\n"), name
    assert list(read_results(tmp_path / "results.csv")["case"]) == ["a"]
    assert list(pd.read_csv(tmp_path / "timings.csv")["case"]) == ["a", "a"]


def test_timings_are_numbers_and_text_cells_follow_the_spreadsheet_rule(tmp_path):
    writer = RunWriter(tmp_path)
    writer.add(make_row(host="=1+1", note="@SUM(A1)", device_name="-x"), [-1.5e-6, 2e-6])
    writer.add_samples([{"t_s": -0.5, "device": "+gpu0"}], ("t_s", "device"))
    writer.close()
    with open(tmp_path / "results.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["host"], row["note"], row["device_name"]) == ("'=1+1", "'@SUM(A1)", "'-x")
    assert row["gbps_best"] == "3.072"  # numbers are left alone
    with open(tmp_path / "timings.csv", newline="") as f:
        timings = list(csv.DictReader(f))
    assert [t["seconds_per_op"] for t in timings] == ["-1.5e-06", "2e-06"]
    assert {t["host"] for t in timings} == {"'=1+1"}
    assert (tmp_path / "samples.csv").read_text().splitlines()[1] == f"-0.5,'+gpu0,{SCHEMA_VERSION}"
    from bwprof.schema.cells import frame_from_spreadsheet

    back = frame_from_spreadsheet(pd.read_csv(tmp_path / "timings.csv"))
    assert set(back["host"]) == {"=1+1"} and back["seconds_per_op"].dtype == float


# Catches: a note with line breaks (multi-line CUDA error text) spans several lines of
# results.csv, so a run stopped inside it leaves a quote open and the folder unreadable
@pytest.mark.parametrize("brk", ["\r\n", "\n", "\r"])
def test_every_row_is_one_line_whatever_line_breaks_its_text_holds(tmp_path, brk):
    writer = RunWriter(tmp_path)
    note = f"CUDA error: out of memory{brk}cudaMalloc failed{brk}{brk}at line 3{brk}"
    writer.add(make_row(note=note, host=f"{brk}=1+1", device_name=f"GPU{brk}0"), [1e-6, 2e-6])
    writer.add(make_row(case="ddr_copy"), [1e-6])
    writer.add_samples([{"t_s": 0.1, "device": f"gpu{brk}0"}], ("t_s", "device"))
    writer.close()
    for name, rows in (("results.csv", 2), ("timings.csv", 3), ("samples.csv", 1)):
        data = (tmp_path / name).read_bytes()
        assert data.count(b"\n") == rows + 1 and b"\r" not in data.replace(b"\r\n", b""), name
    frame = read_results(tmp_path / "results.csv")
    assert frame.loc[0, "note"] == "CUDA error: out of memory | cudaMalloc failed | at line 3"
    assert frame.loc[0, "device_name"] == "GPU | 0"
    # the carriage return that started the host goes first, so the spreadsheet rule sees '='
    assert frame.loc[0, "host"] == "=1+1"
    with open(tmp_path / "results.csv", newline="") as f:
        assert next(csv.DictReader(f))["host"] == "'=1+1"
    assert (tmp_path / "samples.csv").read_text().splitlines()[1] == (
        f"0.1,gpu | 0,{SCHEMA_VERSION}")


# Catches: a disk full from the start leaves 0-byte CSV files
@pytest.mark.parametrize("full", ["results.csv", "timings.csv", "samples.csv"])
def test_a_table_that_cannot_take_its_header_leaves_no_file(tmp_path, monkeypatch, full):
    from bwprof.errors import OutputError

    _fail_file(monkeypatch, full, writes=0)
    with pytest.raises(OutputError, match=f"^cannot write {tmp_path / full}: No space left"):
        writer = RunWriter(tmp_path)
        writer.add_samples([{"t_s": 0.1}], ("t_s",))
    if full == "samples.csv":
        writer.close()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "timings.csv"]
    else:
        assert list(tmp_path.iterdir()) == []


# Catches: a full disk under samples.csv fails the sampler at every tick for the rest of the run
def test_samples_that_cannot_be_written_stop_once_and_the_rows_go_on(tmp_path, monkeypatch):
    from bwprof.telemetry.sampler import Sampler

    _fail_file(monkeypatch, "samples.csv", writes=1)  # the header only
    writer = RunWriter(tmp_path)
    sampler = Sampler(lambda: [{"device": "gpu0", "power_w": 100.0}],
                      on_samples=lambda batch: writer.add_samples(batch, ("t_s", "device")))
    for _ in range(4):
        sampler.sample_once()
    assert sampler.error_count == 1 and len(sampler.samples) == 4  # kept in memory
    (error,) = sampler.errors
    assert error.startswith(f"writing samples: cannot write {tmp_path / 'samples.csv'}: No "
                            "space left on device")
    assert writer.samples_error is not None
    writer.add(make_row(), [1e-6])  # the rows' files are another matter
    writer.close()
    assert (tmp_path / "samples.csv").read_text().splitlines() == [
        "t_s,device,schema_version"]
    assert len(read_results(tmp_path / "results.csv")) == 1


@pytest.mark.parametrize("stop", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_whole_file_is_the_old_one_or_the_new_one_never_torn(tmp_path, stop):
    from bwprof.errors import OutputError
    from bwprof.store.atomic import atomic_file, write_json_atomic

    target = tmp_path / "system.json"
    write_json_atomic(target, {"run": "old"})
    with (pytest.raises(OutputError if isinstance(stop, OSError) else KeyboardInterrupt),
          atomic_file(target) as handle):
        handle.write('{"run": "n')
        raise stop
    assert json.loads(target.read_text()) == {"run": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["system.json"]  # no temporary file


def test_a_write_failure_is_one_line_that_says_what_to_do(tmp_path):
    import errno

    from bwprof.store.export import write_failure

    full = str(write_failure(tmp_path / "x.csv", OSError(errno.ENOSPC, "No space left on "
                                                                          "device"), tmp_path))
    assert full.startswith(f"cannot write {tmp_path / 'x.csv'}: No space left on device (")
    assert full.endswith(f"free there); the rows finished before are kept in {tmp_path}; "
                         "free some space or choose another --out")
    gone = str(write_failure(tmp_path / "gone" / "x.csv", OSError(errno.ENOENT, "No such file "
                                                                                "or directory")))
    assert gone.endswith("No such file or directory (its folder was removed); choose another "
                         "--out")
    assert str(write_failure(tmp_path / "y", OSError(errno.EROFS, "Read-only file system"))) == (
        f"cannot write {tmp_path / 'y'}: Read-only file system; choose another --out")


@pytest.mark.parametrize(("raw", "safe"), [
    ("node7.cluster-a", "node7.cluster-a"), ("=1+1", "_1_1"), ("a/../b c", "a_.._b_c"),
    ("", "host"), (".", "_"), ("..", "_."), (".hidden", "_hidden"), ("x" * 300, "x" * 64),
    ("héte", "h_te"),
])
def test_a_host_name_becomes_a_safe_folder_name(raw, safe):
    from datetime import datetime, timezone

    from bwprof.api import default_run_dir
    from bwprof.store.export import safe_name

    assert safe_name(raw) == safe
    started = datetime(2026, 12, 1, 3, 2, 12, tzinfo=timezone.utc)
    assert default_run_dir(raw, started) == Path("reports") / f"{safe}-20261201T030212Z"


def test_a_folder_of_someone_else_s_files_is_refused_untouched(monkeypatch, tmp_path):
    """Not a lock made and taken back among the user's files: a kill in that instant would
    leave it there, and the folder's time would change for a run that never ran."""
    from bwprof.store import runlock

    def claim(folder):
        raise AssertionError(f"claimed {folder}")

    monkeypatch.setattr(runlock, "claim", claim)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep")
    os.utime(folder, (1_000_000, 1_000_000))
    with pytest.raises(BwprofError, match="exists and is not empty"):
        prepare_run_dir(folder)
    assert os.stat(folder).st_mtime == 1_000_000
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


# Catches (issue 37): a cell holding a name's surrogate escapes (bytes that are not UTF-8)
# raised UnicodeEncodeError at the first row: a traceback and every row lost
def test_text_that_is_not_utf8_is_written_escaped_and_every_row_kept(tmp_path):
    writer = RunWriter(tmp_path)
    writer.add(make_row(host="box\udcff", note="from /tmp/\udcfe.bin"), [1e-6, 2e-6])
    writer.add(make_row(case="ddr_copy", device_name="EPYC \udcff"), [1e-6])
    writer.close()
    frame = read_results(tmp_path / "results.csv")
    assert list(frame["host"]) == ["box\\xff", "h"]
    assert frame.loc[0, "note"] == "from /tmp/\\xfe.bin"
    assert frame.loc[1, "device_name"] == "EPYC \\xff"
    (tmp_path / "timings.csv").read_bytes().decode("utf-8")


def test_system_json_escapes_text_that_is_not_utf8(tmp_path):
    """A command line holding a path that is not UTF-8 (argv's surrogate escapes) was
    written as a lone \\udcff escape, which strict JSON readers refuse."""
    from tests.schema.builders import meta

    write_system_json(tmp_path, meta(run_id="box\udcff-1",
                                     command_line=("bwprof", "-o", "r\udcfe")))
    data = (tmp_path / "system.json").read_bytes()
    assert b"\\udc" not in data
    written = json.loads(data.decode("utf-8"))
    assert (written["run_id"], written["command_line"][-1]) == ("box\\xff-1", "r\\xfe")
