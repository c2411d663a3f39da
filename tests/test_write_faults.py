"""Writing run folders under faults: runs started together on one --out, a full disk (made up
and real), a file-size limit, interrupts at each end-of-run step, `~` paths and host names.

Whatever happens, a run folder belongs to one run, holds a whole system.json or nothing of
bwprof's, keeps every finished row readable, and never holds a temporary or empty file.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import bwprof
from bwprof import api, cli, interrupts
from bwprof.errors import EXIT_OUTPUT, EXIT_USAGE, BwprofError, OutputError, RunInterrupted
from bwprof.schema.table import read_results
from bwprof.store import atomic, export, runlock
from tests.faults import mount_tmpfs, unmount

TINY_ANY_THREADS = ["--repeats", "2", "--size", "1MiB", "--no-plots", "--quiet"]
TINY = [*TINY_ANY_THREADS, "--threads", "1"]
SMALL = {"size": "1MiB", "repeats": 2, "threads": "1", "plots": False}
ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    """The environment of a bwprof subprocess: this checkout first on the path."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def whole_folder(folder: Path) -> dict[str, object]:
    """Check what every fault must leave: no temporary file, no empty or torn findings.csv,
    a system.json that parses; return the system.json."""
    names = {p.name for p in folder.iterdir()}
    assert not [n for n in names if n.endswith(".tmp")], names
    if "findings.csv" in names:
        assert (folder / "findings.csv").stat().st_size > 0
        assert pd.read_csv(folder / "findings.csv").columns[0] == "severity"
    return json.loads((folder / "system.json").read_text())


# ---- one folder, one run ----------------------------------------------------------------

BARRIER = """
import sys, time
from pathlib import Path
from bwprof import api
from bwprof.cli import main

barrier, parties = Path(sys.argv[1]), int(sys.argv[2])
claim = api.prepare_run_dir

def at_once(*args, **kwargs):
    # every process waits here, so all of them claim the folder at the same moment
    (barrier / str(__import__("os").getpid())).touch()
    deadline = time.monotonic() + 300  # a guard: the three start within seconds, even loaded
    while len(list(barrier.iterdir())) < parties and time.monotonic() < deadline:
        time.sleep(0.005)
    return claim(*args, **kwargs)

api.prepare_run_dir = at_once
sys.exit(main(sys.argv[3:]))
"""


# Catches: three runs started at once with one --out all exit 0 and interleave their rows in
# one results.csv, which `report` then refuses (the folder was checked empty, then created
# with exist_ok)
def test_runs_started_together_on_one_folder_one_wins_the_others_write_nothing(tmp_path):
    out, barrier = tmp_path / "run", tmp_path / "barrier"
    barrier.mkdir()
    command = [sys.executable, "-c", BARRIER, str(barrier), "3", "run", "--cases", "ddr_copy",
               "--out", str(out), *TINY]
    started = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env(), cwd=tmp_path) for _ in range(3)]
    done = [(p.wait(timeout=600), *p.communicate()) for p in started]
    assert len(list(barrier.iterdir())) == 3  # all three reached the claim together
    codes = sorted(code for code, _, _ in done)
    assert codes == [0, EXIT_USAGE, EXIT_USAGE], done
    for code, _stdout, stderr in done:
        if code == EXIT_USAGE:
            assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
            assert stderr.startswith(f"error: output folder {out} belongs to another run")
    assert cli.main(["report", str(out), "--json", "--no-plots"]) == 0  # the winner's folder
    results = read_results(out / "results.csv")
    assert len(results) == 1 and results["run_id"].nunique() == 1  # the winner's rows only
    timings = pd.read_csv(out / "timings.csv")
    assert set(timings["run_id"]) == set(results["run_id"])
    assert len(timings) == results["repeats"].sum()
    assert json.loads((out / "system.json").read_text())["run_id"] == results["run_id"][0]


def test_a_second_run_on_a_finished_runs_folder_is_refused_and_changes_nothing(tmp_path):
    out = tmp_path / "run"
    bwprof.run(cases="ddr_copy", out=out, **SMALL)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(BwprofError, match=f"output folder {out} belongs to another run"):
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ---- a full disk --------------------------------------------------------------------------

class FullDisk:
    """Files opened under `folder` on a disk that fills up: results.csv takes `rows` rows
    after its header, half of the next, then fails with ENOSPC; with `everything`, every
    write under the folder fails from then on, as on a real full disk."""

    def __init__(self, folder: Path, rows: int, everything: bool) -> None:
        self.folder, self.rows, self.everything, self.full = folder, rows, everything, False

    def open(self, path, mode="r", *args, **kwargs):
        inside = self.folder in Path(path).parents
        if inside and self.full and self.everything and any(m in mode for m in "wax"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        handle = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115
        if not inside or "r" in mode:
            return handle
        return _OnDisk(handle, self, Path(path).name == "results.csv")


class _OnDisk:
    def __init__(self, handle, disk: FullDisk, counted: bool) -> None:
        self.handle, self.disk, self.counted, self.writes = handle, disk, counted, 0

    def write(self, data):
        if self.disk.full and (self.counted or self.disk.everything):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.counted:
            self.writes += 1
            if self.writes > self.disk.rows + 1:  # the header, then the rows that fit
                self.disk.full = True
                return self.handle.write(bytes(data[: len(data) // 2]))
        return self.handle.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()

    def __getattr__(self, name):
        return getattr(self.handle, name)


# Catches: a full disk is an `OSError: [Errno 28]` traceback, leaves a stray .system.json.tmp
# and 0-byte CSVs, and the run's finally raises again
@pytest.mark.parametrize("everything", [False, True], ids=["rows-only", "whole-disk"])
def test_a_full_disk_is_one_line_and_keeps_every_finished_row(tmp_path, monkeypatch, capsys,
                                                              everything):
    out = tmp_path / "run"
    disk = FullDisk(out, 2, everything)
    for module in (export, atomic):  # the row files, and every whole file
        monkeypatch.setattr(module, "open", disk.open, raising=False)
    code = cli.main(["run", "--cases", "ddr_copy,ddr_scale,ddr_add,ddr_triad", "--out",
                     str(out), *TINY])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == EXIT_OUTPUT
    assert err.startswith(f"error: cannot write {out / 'results.csv'}: No space left on device "
                          f"(") and err.count("\n") == 1 and "Traceback" not in err
    assert f"the rows finished before are kept in {out}" in err
    system = whole_folder(out)
    loaded = bwprof.load(out)
    assert list(loaded.results["case"]) == ["ddr_copy", "ddr_scale"]
    assert (out / "results.csv").read_bytes().endswith(b"\r\n")  # the torn row was taken back
    if everything:  # nothing more could be written: the system.json of the start stands
        assert system["finished_utc"] is None and loaded.meta.state == "incomplete"
        assert not (out / "findings.csv").exists()
    else:
        assert system["interrupted"] is True and system["finished_utc"]
        assert system["stopped_by"].startswith(f"output error: cannot write {out}")
        assert (out / "findings.csv").is_file()
        assert not (out / "summary.csv").exists()  # a stopped run writes no report files


def _limited(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _line_lengths(path: Path) -> list[int]:
    return [len(line) for line in path.read_bytes().splitlines(keepends=True)]


# Catches: a real write failure (not a test double) tears the last row or loses system.json
def test_a_file_size_limit_stops_the_run_cleanly(tmp_path):
    """The limit comes from this host's own sizes (a probe run first): system.json, which
    lists the DIMMs and can run to many kilobytes on a server, must fit under it, and
    results.csv must reach it after two rows and before its last; more sizes make more rows
    where system.json is large."""
    command = [sys.executable, "-m", "bwprof", "run", "--cases", "ddr_", "--threads", "1,2"]
    probe = tmp_path / "probe"
    done = subprocess.run([*command, "--out", str(probe), *TINY_ANY_THREADS],
                          capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    header, *row_lengths = _line_lengths(probe / "results.csv")
    row, per_size = max(row_lengths), len(row_lengths)
    # the stopped run's system.json also says why it stopped and lists every size
    limit = max((probe / "system.json").stat().st_size + 1024, header + 2 * row + row // 2)
    total = (limit - header) // min(row_lengths) + 2  # rows that cannot all fit
    sizes = ",".join(f"{1024 + n}KiB" for n in range(-(-total // per_size)))
    out = tmp_path / "run"
    done = subprocess.run(
        [*command, "--out", str(out), *TINY_ANY_THREADS, "--size", sizes],
        preexec_fn=_limited(limit), capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert done.returncode == EXIT_OUTPUT, done.stderr
    assert done.stderr.startswith(f"error: cannot write {out / 'results.csv'}: File too large")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    system = whole_folder(out)
    assert system["interrupted"] is True
    assert system["stopped_by"].startswith("output error: cannot write")
    rows = bwprof.load(out).results
    assert 2 <= len(rows) < total and (rows["status"] == "ok").all()
    assert (out / "results.csv").stat().st_size <= limit
    assert set(pd.read_csv(out / "timings.csv")["result_row"]) == set(range(len(rows)))


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 24 KiB file system (tmpfs: needs root and mount); skipped where unavailable."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mount_tmpfs(folder, "24k")
    try:
        yield folder
    finally:
        unmount(folder)


def test_a_real_full_disk_keeps_every_whole_row(tiny_tmpfs):
    out = tiny_tmpfs / "run"
    done = subprocess.run(
        [sys.executable, "-m", "bwprof", "run", "--cases", "ddr_", "--threads", "1,2",
         "--out", str(out), *TINY_ANY_THREADS],
        capture_output=True, text=True, env=_env(), cwd=tiny_tmpfs.parent)
    assert done.returncode == EXIT_OUTPUT, done.stderr
    assert done.stderr.startswith(f"error: cannot write {out}/") and (
        "No space left on device (" in done.stderr and "free there)" in done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    whole_folder(out)
    loaded = bwprof.load(out)  # every row on disk reads back
    assert (loaded.results["status"] == "ok").all() and not loaded.notes


# ---- interrupts at the end of a run ---------------------------------------------------------

def _once(real, stop: type[BaseException] = KeyboardInterrupt, at: int = 1):
    """`real`, except that its `at`-th call raises `stop` (a signal arriving there)."""
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            raise stop()
        return real(*args, **kwargs)
    return wrapper


END_STEPS = {
    "stopping telemetry": ("bwprof.telemetry.session.TelemetrySession.stop", 1),
    "closing executors": ("bwprof.api.close_executors", 1),
    "deriving findings": ("bwprof.api.derive_findings", 1),
    "writing findings.csv": ("bwprof.store.export.RunWriter.write_findings", 1),
    "closing the row files": ("bwprof.store.export.RunWriter.close", 1),
    "building the summary": ("bwprof.analysis.summary.build_summary", 1),
    "writing summary.csv": ("bwprof.render.outputs.write_table", 1),
    "writing the final system.json": ("bwprof.api.write_system_json", 3),
}


def _owner(target: str) -> tuple[object, str]:
    """The module or class holding dotted `target` ('module.function' or
    'module.Class.method'), and the attribute's name."""
    module_name, _, attribute = target.rpartition(".")
    try:
        return __import__(module_name, fromlist=["_"]), attribute
    except ImportError:  # a class attribute: module.Class.method
        module_name, _, cls = module_name.rpartition(".")
        return getattr(__import__(module_name, fromlist=["_"]), cls), attribute


def _patch(monkeypatch, target: str, at: int) -> None:
    owner, attribute = _owner(target)
    monkeypatch.setattr(owner, attribute, _once(getattr(owner, attribute), at=at))


def _fake_telemetry(monkeypatch) -> None:
    """A telemetry session on a made-up reader (no GPU here), so stopping it is a step."""
    from bwprof.schema.meta import TelemetryMeta
    from bwprof.telemetry.session import TelemetrySession

    def start(executor, writer, enabled, interval_s):
        reader = type("Reader", (), {"read": lambda self: [], "clock": staticmethod(time.monotonic),
                                     "c2c_devices": lambda self: [], "labels": ["gpu0"],
                                     "close": lambda self: None})()
        session = TelemetrySession(reader, interval_s)
        return session, TelemetryMeta(enabled=True, interval_ms=interval_s * 1000)

    monkeypatch.setattr(api, "start_telemetry", start)


# Catches: a full disk under samples.csv prints a thread traceback, or stops the run
def test_samples_that_cannot_be_written_are_a_note_and_the_run_measures_on(tmp_path,
                                                                          monkeypatch):
    from bwprof.schema.meta import TelemetryMeta
    from bwprof.telemetry.session import SAMPLE_COLUMNS, TelemetrySession

    out = tmp_path / "run"

    def start(executor, writer, enabled, interval_s):
        reader = type("Reader", (), {
            "read": lambda self: [{"device": "gpu0", "power_w": 100.0}],
            "clock": staticmethod(time.monotonic), "c2c_devices": lambda self: [],
            "labels": ["gpu0"], "close": lambda self: None})()
        session = TelemetrySession(reader, interval_s,
                                   lambda batch: writer.add_samples(batch, SAMPLE_COLUMNS))
        for _ in range(3):  # the sampler thread's ticks, here in order
            session.sampler.sample_once()
        return session, TelemetryMeta(enabled=True, interval_ms=interval_s * 1000)

    monkeypatch.setattr(api, "start_telemetry", start)
    real_open = builtins.open

    def no_samples(path, mode="r", *args, **kwargs):
        if Path(path).name == "samples.csv" and "w" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(export, "open", no_samples, raising=False)
    result = bwprof.run(cases="ddr_copy,ddr_scale", out=out, **SMALL)
    assert len(result.rows) == 2 and not (out / "samples.csv").exists()
    assert result.meta.telemetry.error_count == 1
    (error,) = result.meta.telemetry.errors
    assert error.startswith(f"writing samples: cannot write {out / 'samples.csv'}: No space")
    (note,) = [n for n in result.notes if "samples.csv" in n]
    assert note.startswith("counter samples stopped being written to samples.csv")
    assert json.loads((out / "system.json").read_text())["telemetry"]["error_count"] == 1


# Catches: SIGTERM during the final table and report files leaves an empty run folder, or a
# run marked finished without its files; and (issue 37) a signal after the last case exits
# 130 while system.json says the run was not interrupted: the folder says it was, and that
# every case was measured ('interrupted by KeyboardInterrupt after every case was measured')
@pytest.mark.parametrize("step", list(END_STEPS))
def test_an_interrupt_at_each_end_of_run_step_leaves_every_row_and_says_so(tmp_path,
                                                                           monkeypatch, step):
    _fake_telemetry(monkeypatch)
    _patch(monkeypatch, *END_STEPS[step])
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as caught:
        bwprof.run(cases="ddr_copy,ddr_scale", out=out, **{**SMALL, "plots": True})
    monkeypatch.undo()
    system = whole_folder(out)
    assert system["interrupted"] is True and system["finished_utc"]
    assert system["stopped_by"] == f"KeyboardInterrupt {api.AFTER_EVERY_CASE}"
    loaded = bwprof.load(out)
    assert loaded.meta.state == "interrupted"
    assert loaded.state_text == ("finished (every case measured; then interrupted by "
                                 "KeyboardInterrupt)")
    assert list(loaded.results["case"]) == ["ddr_copy", "ddr_scale"]
    result = caught.value.result
    assert [r.case for r in result.rows] == ["ddr_copy", "ddr_scale"]
    assert result.interrupted and result.meta.interrupted
    assert any("bwprof report RUN_DIR` writes them again" in note for note in result.notes)
    assert not list(out.glob("*.png"))  # an interrupted run draws no plots
    assert not (out / "report.html").exists()


# Catches: a signal in the middle of writing findings.csv or system.json tears it
def test_a_real_signal_during_an_end_step_is_held_until_the_step_is_done(tmp_path,
                                                                          monkeypatch,
                                                                          stop_signals):
    real = export.RunWriter.write_findings
    seen = {}

    def findings_under_a_signal(self, findings):
        os.kill(os.getpid(), signal.SIGTERM)
        real(self, findings)  # the signal waits: findings.csv is written whole
        seen["written"] = (self.run_dir / "findings.csv").is_file()

    monkeypatch.setattr(export.RunWriter, "write_findings", findings_under_a_signal)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as caught:
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    assert seen == {"written": True}
    system = whole_folder(out)
    assert system["interrupted"] is True and system["finished_utc"]  # as its exit 130 says
    assert system["stopped_by"] == f"SIGTERM {api.AFTER_EVERY_CASE}"  # its one case ran
    assert caught.value.result.interrupted
    assert interrupts.received() == "SIGTERM"
    assert len(bwprof.load(out).results) == 1


def _signal_at(monkeypatch, target: str, at: int, when: str,
               signum: int = signal.SIGHUP) -> list[int]:
    """`target` sends this process `signum` on its `at`-th call, before or after doing its
    work; the list it returns fills once it has."""
    owner, attribute = _owner(target)
    real, calls, sent = getattr(owner, attribute), [], []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == at and when == "before":
            sent.append(1)
            os.kill(os.getpid(), signum)
        value = real(*args, **kwargs)
        if len(calls) == at and when == "after":
            sent.append(1)
            os.kill(os.getpid(), signum)
        return value

    monkeypatch.setattr(owner, attribute, wrapper)
    return sent


FINAL_FILE_MOMENTS = {  # every moment after the last measurement, in the order they come
    "findings.csv": ("bwprof.store.export.RunWriter.write_findings", 1, "before"),
    "closing the row files": ("bwprof.store.export.RunWriter.close", 1, "before"),
    "the final system.json": ("bwprof.api.write_system_json", 3, "before"),
    "just after the final system.json": ("bwprof.api.write_system_json", 3, "after"),
    "summary.csv": ("bwprof.render.outputs.write_table", 1, "before"),
    "results.parquet": ("bwprof.render.outputs.write_results_parquet", 1, "after"),
    "the plots": ("bwprof.render.outputs._plots", 1, "after"),
    "report.html": ("bwprof.render.outputs._html", 1, "after"),
    "columns.csv": ("bwprof.render.outputs.write_csv_atomic", 2, "after"),
    "letting the folder go": ("bwprof.store.export.RunFolderClaim.release", 1, "before"),
}


# Catches (issue 37): a SIGHUP while `bwprof run` wrote its final files (after its last
# measurement) exited 130 while system.json said the run was not interrupted; the folder
# and the exit code now agree at every moment: 130, and system.json says interrupted (by
# the signal, after every case was measured), every row kept, and no report.html left
# that says 'finished'
@pytest.mark.parametrize("moment", list(FINAL_FILE_MOMENTS))
def test_a_signal_while_the_final_files_are_written_is_130_and_said_in_system_json(
        tmp_path, monkeypatch, capsys, stop_signals, moment):
    sent = _signal_at(monkeypatch, *FINAL_FILE_MOMENTS[moment])
    out = tmp_path / "run"
    code = cli.main(["run", "--cases", "ddr_copy,ddr_scale", "--repeats", "2", "--size",
                     "1MiB", "--threads", "1", "--quiet", "--out", str(out)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert sent and code == 130, err
    assert err.splitlines()[0] == f"interrupted (SIGHUP): kept 2 finished row(s) in {out}"
    assert "Traceback" not in err
    system = whole_folder(out)
    assert system["interrupted"] is True and system["finished_utc"]
    assert system["stopped_by"] == f"SIGHUP {api.AFTER_EVERY_CASE}"
    loaded = bwprof.load(out)
    # Every row is there: it reads as finished (history stores it, compare takes every
    # figure), and says what stopped it.
    assert loaded.state == "finished"
    assert loaded.state_text == "finished (every case measured; then interrupted by SIGHUP)"
    assert list(loaded.results["case"]) == ["ddr_copy", "ddr_scale"]
    assert not (out / "report.html").exists()  # drawn from metadata that said 'finished'
    assert runlock.running(out) is False  # let go


# Catches (issue 37): a Ctrl-C held through the run's last step and never raised there (it
# landed in a held step that then failed) came out of `interrupts.handling()` as a bare
# KeyboardInterrupt once the run had returned: a notebook lost the RunInterrupted with
# its rows, and the folder said the run finished
@pytest.mark.parametrize("where", ["report files", "release", "handling's end"])
def test_a_ctrl_c_held_to_the_end_of_a_library_run_is_run_interrupted(tmp_path, monkeypatch,
                                                                      where):
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a notebook
    try:
        def held_then_failed() -> None:
            with pytest.raises(ValueError), interrupts.deferred():
                os.kill(os.getpid(), signal.SIGINT)
                raise ValueError("a step that failed after the signal came")

        if where == "report files":
            real = api.write_report_files

            def report_files(*args, **kwargs):
                held_then_failed()
                return real(*args, **kwargs)

            monkeypatch.setattr(api, "write_report_files", report_files)
        elif where == "handling's end":  # held in an import, its resend not yet come
            real_drop, dropped = interrupts._drop_held_import_signal, []

            def drop():
                real_drop()
                dropped.append(1)
                return "SIGINT" if len(dropped) == 1 else None

            monkeypatch.setattr(interrupts, "_drop_held_import_signal", drop)
        else:
            real_release = api._Run.release

            def release(self):
                if not getattr(self, "_tried", False):
                    self._tried = True
                    held_then_failed()
                real_release(self)

            monkeypatch.setattr(api._Run, "release", release)
        out = tmp_path / "run"
        with pytest.raises(RunInterrupted) as caught:
            bwprof.run(cases="ddr_copy", out=out, **SMALL)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    finally:
        signal.signal(signal.SIGINT, previous)
    assert [row.case for row in caught.value.result.rows] == ["ddr_copy"]
    assert interrupts.lost() is None
    system = whole_folder(out)
    assert system["interrupted"] is True
    assert system["stopped_by"] == ("KeyboardInterrupt" if where == "handling's end"
                                    else "SIGINT") + f" {api.AFTER_EVERY_CASE}"


@pytest.mark.parametrize("given", ["new", "empty"])
def test_an_interrupt_while_claiming_leaves_nothing_of_bwprofs(tmp_path, monkeypatch, given):
    out = tmp_path / "run"
    if given == "empty":
        out.mkdir()
    monkeypatch.setattr(api, "write_system_json", _once(api.write_system_json))
    with pytest.raises(KeyboardInterrupt) as caught:
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    assert not isinstance(caught.value, RunInterrupted)  # nothing was kept: nothing to say
    assert (not out.exists()) if given == "new" else (list(out.iterdir()) == [])


def test_an_interrupt_after_the_claim_and_before_measuring_gives_the_folder_back(
        tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(api, "host_executor", _once(api.host_executor))
    with pytest.raises(RunInterrupted) as caught:
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    assert caught.value.result.rows == [] and caught.value.result.run_dir is None
    assert not out.exists()  # no system.json-only folder, neither a run nor free


# ---- paths and host names -----------------------------------------------------------------

# Catches: pandas and matplotlib expand a leading `~` of a string path themselves, so a run
# given '~/x' (a notebook) or './~/x' wrote files in two places
def test_every_file_of_a_run_goes_under_its_one_absolute_folder(tmp_path, monkeypatch):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    result = bwprof.run(cases="ddr_copy", out="~/x", file_format="parquet",
                        **{**SMALL, "plots": True})
    assert result.run_dir == home / "x"
    def bwprofs(folder: Path) -> list[str]:  # not a library's cache (~/.cache/matplotlib)
        return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))

    assert list(work.iterdir()) == [] and bwprofs(home) == ["x"]
    names = {p.name for p in (home / "x").iterdir()}
    assert {"results.csv", "results.parquet", "summary.csv", "system.json",
            "bandwidth_vs_size.png"} <= names
    assert all(path.parent == home / "x" for path in result.files)
    bwprof.run(cases="ddr_copy", out="./~/y", file_format="parquet", **SMALL)
    assert bwprofs(home) == ["x"]  # not ~/y: a folder named ~ here
    assert {"results.csv", "summary.parquet"} <= {p.name for p in (work / "~" / "y").iterdir()}


# Catches: a host named like a formula (=1+1) is run by a spreadsheet opening results.csv,
# and the default folder name takes the host name verbatim
def test_a_formula_host_name_round_trips_and_its_folder_name_is_safe(tmp_path, monkeypatch,
                                                                     capsys):
    import socket

    monkeypatch.setattr(api, "hostname", lambda: "=1+1/..")
    monkeypatch.setattr(socket, "gethostname", lambda: "=1+1/..")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--cases", "ddr_copy", "--format", "parquet", *TINY]) == 0
    (folder,) = (tmp_path / "reports").iterdir()
    assert folder.name.startswith("_1_1_..-") and len(list(tmp_path.iterdir())) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"wrote {folder}"
    for name in ("results.csv", "timings.csv", "summary.csv"):
        raw = pd.read_csv(folder / name)
        assert set(raw["host"]) == {"'=1+1/.."}, name
    from bwprof.schema.cells import frame_from_spreadsheet

    back = frame_from_spreadsheet(pd.read_csv(folder / "results.csv"))
    assert list(back["host"]) == ["=1+1/.."] and back["run_id"][0].startswith("=1+1/..-")
    for name in ("results.parquet", "timings.parquet", "summary.parquet"):  # text as it is
        assert set(pd.read_parquet(folder / name)["host"]) == {"=1+1/.."}, name
    assert list(bwprof.load(folder).results["host"]) == ["=1+1/.."]  # read back undoes it


# Catches: an I/O error that a network file system reports only when the file is closed is
# a traceback out of the run's end
def test_a_row_file_that_fails_to_close_is_one_line_and_the_run_is_finalised(tmp_path,
                                                                            monkeypatch):
    real_close = export._RowFile.close

    def late_error(self):
        real_close(self)
        if self.path.name == "timings.csv":
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(export._RowFile, "close", late_error)
    out = tmp_path / "run"
    with pytest.raises(OutputError, match=f"^cannot write {out / 'timings.csv'}: "
                                          "Input/output error; the rows finished"):
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    monkeypatch.undo()
    system = whole_folder(out)
    assert system["interrupted"] is True and system["stopped_by"].startswith("output error")
    assert len(bwprof.load(out).results) == 1


# Catches (the review): a stop signal landing just as an end-of-run step began marked the
# step done before it ran, so every retry skipped it and the folder had no findings.csv
def test_a_signal_just_before_an_end_step_leaves_it_to_the_retry(tmp_path, monkeypatch):
    import inspect

    real = interrupts.deferred
    fired: list[int] = []

    def deferred():
        caller = inspect.currentframe().f_back
        if (caller.f_code.co_name == "_step" and caller.f_locals.get("name") == "findings"
                and not fired):
            fired.append(1)
            raise KeyboardInterrupt("SIGTERM")  # between the step's check and its hold
        return real()

    monkeypatch.setattr(api.interrupts, "deferred", deferred)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    assert fired and (out / "findings.csv").is_file()
    whole_folder(out)


# Catches (the review): a disk full at the row files' headers left a folder holding only a
# system.json: `report` called it no run, and the next run with the same --out was refused
# as "another run's"; the message said rows were kept where none had been measured
def test_a_folder_that_cannot_take_the_row_files_is_given_back(tmp_path, monkeypatch):
    real = export._RowFile.__init__

    def full(self, path, header):
        if path.name == "timings.csv":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, path, header)

    monkeypatch.setattr(export._RowFile, "__init__", full)
    out = tmp_path / "run"
    with pytest.raises(OutputError) as caught:
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    assert "timings.csv: No space left on device" in str(caught.value)
    assert "kept" not in str(caught.value)
    assert not out.exists()  # the run made it, and took it back
    monkeypatch.undo()
    assert len(bwprof.run(cases="ddr_copy", out=out, **SMALL).rows) == 1  # free again


# Catches (the review): a full disk while drawing the plots marked a run that measured every
# case as stopped ("cases it did not reach are absent")
def test_report_files_that_cannot_be_written_leave_a_finished_run(tmp_path, monkeypatch):
    from bwprof.render import outputs

    def full(*args, **kwargs):
        raise OutputError("cannot write summary.csv: No space left on device")

    monkeypatch.setattr(outputs, "write_table", full)
    out = tmp_path / "run"
    with pytest.raises(OutputError, match=r"summary\.csv"):
        bwprof.run(cases="ddr_copy", out=out, **SMALL)
    system = whole_folder(out)
    assert system["interrupted"] is False and system["finished_utc"]
    assert bwprof.load(out).meta.state == "finished"


# The other side: an interrupt while cases remain still marks the run interrupted
def test_an_interrupt_between_cases_marks_the_run_interrupted(tmp_path, monkeypatch):
    from bwprof.host import ddr

    real = ddr.HostExecutor.measure
    calls: list[int] = []

    def second_stops(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ddr.HostExecutor, "measure", second_stops)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        bwprof.run(cases="ddr_copy,ddr_scale", out=out, **SMALL)
    system = whole_folder(out)
    assert system["interrupted"] is True and system["stopped_by"] == "KeyboardInterrupt"
    assert bwprof.load(out).meta.state == "interrupted"
    assert list(bwprof.load(out).results["case"]) == ["ddr_copy"]


# Catches (the review): `run --out` on read-only storage exited 2 while `report --out` and
# `compare --out` there exited 3; docs/command-line.md's exit-code table says 3 for storage
# that refuses output
def test_storage_that_refuses_the_run_folder_is_exit_3(tmp_path, monkeypatch, capsys):
    real = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self == tmp_path / "ro":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    code = cli.main(["run", "--cases", "ddr_copy", *TINY, "--out", str(tmp_path / "ro")])
    err = capsys.readouterr().err
    assert code == EXIT_OUTPUT, err
    assert err == (f"error: cannot create output folder {tmp_path / 'ro'} (Read-only file "
                   "system); choose another --out\n")


# Catches (the second review): a stop signal while the executors started (before the row
# files existed) left a folder holding only system.json: `report` called it no run, and
# every later run with that --out was refused as another run's
@pytest.mark.parametrize("given", ["new", "empty"])
def test_a_signal_before_the_row_files_gives_the_folder_back(tmp_path, monkeypatch, capsys,
                                                              given):
    out = tmp_path / "run"
    if given == "empty":
        out.mkdir()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "host_executor", stopped)
    code = cli.main(["run", "--cases", "ddr_copy", *TINY, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and "nothing was written" in err and "Traceback" not in err
    assert (not out.exists()) if given == "new" else list(out.iterdir()) == []
    monkeypatch.undo()
    assert len(bwprof.run(cases="ddr_copy", out=out, **SMALL).rows) == 1  # free again
