"""Reading run folders that are not what bwprof wrote: every input read with bounded effort,
one line (exit 2) where the run itself cannot be read, a note where only an auxiliary file
is damaged, and runs that never finished shown as such (issue 18).

Fault files are made in tmp folders: 0-byte, torn, deep-nested, huge (sparse), FIFOs,
devices, bytes that are not UTF-8, names that are not UTF-8."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from bwprof.cli import main
from bwprof.errors import BwprofError
from bwprof.render.timeline import read_timelines
from bwprof.schema.reading import MAX_JSON_DEPTH, json_depth
from bwprof.schema.text import one_line, printable
from bwprof.store import runlock
from bwprof.store.runfolder import load_run, read_system
from tests.conftest import DATA
from tests.store.test_export import set_first_row

SPARSE = 2**31  # a file stat calls 2 GiB, which takes no disk


@pytest.fixture
def deadline():
    """Fail instead of hanging where a read blocks (a FIFO opened for reading waits for a
    writer): SIGALRM interrupts the blocked call."""
    def expire(signum, frame):
        raise TimeoutError("a read blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(300)  # against a blocked read, never a time limit on a slow (loaded) one
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def cli(capsys, *args: object) -> tuple[int, str, str]:
    """`bwprof ARGS` in this process: exit code, stdout, stderr."""
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, fragment: str = "") -> None:
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert fragment in err, err


# -- the damage a file can have --------------------------------------------------------------


def _zero(path: Path) -> None:
    path.write_bytes(b"")


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def _sparse(path: Path) -> None:
    with open(path, "ab") as file:
        file.truncate(SPARSE)


def _folder(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


def _not_utf8(path: Path) -> None:
    data = path.read_bytes() if path.exists() else b"severity,what\nwarning,x\n"
    cut = data.index(b"\n") + 3
    path.write_bytes(data[:cut] + b"\xff\xfe" + data[cut:])


def _torn(path: Path) -> None:
    """Half the file, then a line of another shape: a writer that died mid-file, or two."""
    data = path.read_text() if path.exists() else "severity,what\nwarning,x\n"
    path.write_text(data[: len(data) // 2] + "\n1,2,3,4,5,6,7,8,9,10,11,12\n")


def _header_cut(path: Path) -> None:
    data = path.read_text() if path.exists() else "severity,what\n"
    path.write_text(data[:7])


def _symlink_huge(path: Path) -> None:
    target = path.with_name(f".{path.name}.huge")
    with open(target, "wb") as file:
        file.truncate(SPARSE)
    path.unlink(missing_ok=True)
    path.symlink_to(target)


def _char_device(path: Path) -> None:
    """A device node of /dev/zero's numbers (root may make one; others skip)."""
    path.unlink(missing_ok=True)
    try:
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("making a device node needs root")


def _environ(path: Path) -> None:
    """A link to a file that says 0 bytes and has content (issue 37's tester)."""
    path.unlink(missing_ok=True)
    path.symlink_to("/proc/self/environ")


def _another_runs(path: Path) -> None:
    """A link to the same file of another (genuine) run: read, it would pass for this one's."""
    path.unlink(missing_ok=True)
    path.symlink_to(DATA / "host-ddr-v2" / path.name)


def _symlink_fifo(path: Path) -> None:
    target = path.with_name(".results.csv.fifo")
    os.mkfifo(target)
    path.unlink(missing_ok=True)
    path.symlink_to(target.name)


LINK = "it is a symbolic link"
"""A file of a folder bwprof reads is read through a link only to a regular file outside
/proc, /sys and /dev (issue 37)."""

DAMAGE = {
    "0-byte": (_zero, "is empty (0 bytes)"),
    "FIFO": (_fifo, "it is a FIFO (named pipe), not a file bwprof wrote"),
    "a device": (_char_device, "it is a character device"),
    "symlink to /dev/zero": (_dev_zero, f"{LINK} (to /dev/zero)"),
    "symlink to /proc/self/environ": (_environ, f"{LINK} (to /proc/self/environ)"),
    "sparse 2 GiB": (_sparse, "is 2 GiB, more than bwprof reads"),
    "symlink to a huge file": (_symlink_huge, "is 2 GiB, more than bwprof reads"),
    "symlink to a FIFO": (_symlink_fifo, f"{LINK} (to .results.csv.fifo) to a FIFO"),
    "a folder": (_folder, "it is a folder"),
    "not UTF-8": (_not_utf8, "is not UTF-8 text (byte 0x"),
}


def _deep(path: Path) -> None:
    text = path.read_text()
    path.write_text(text.replace('"gpus": {', '"deep": ' + "[" * 200_000 + "]" * 200_000
                                 + ', "gpus": {', 1))


SYSTEM_DAMAGE = {
    **DAMAGE,
    "torn": (lambda path: path.write_text(path.read_text()[:200]), "system.json is malformed"),
    "nested 200,000 deep": (_deep, "nested too deeply to be bwprof's (more than 64 levels)"),
}
RESULTS_DAMAGE = {
    **{name: DAMAGE[name] for name in DAMAGE if name != "0-byte"},
    "torn": (_torn, "results.csv is malformed"),
}


@pytest.mark.parametrize("name, damage", [("system.json", d) for d in SYSTEM_DAMAGE]
                         + [("results.csv", d) for d in RESULTS_DAMAGE])
def test_a_damaged_file_that_makes_the_run_is_one_line(run_copy, capsys, deadline, name,
                                                       damage):
    table = SYSTEM_DAMAGE if name == "system.json" else RESULTS_DAMAGE
    run = run_copy("host-ddr-v2")
    spoil, message = table[damage]
    spoil(run / name)
    with pytest.raises(BwprofError, match=r"^[^\n]*$") as caught:
        load_run(run)
    assert message in str(caught.value) and name in str(caught.value)
    assert_one_line_error(*cli(capsys, "report", run, "--no-plots"), fragment=message)
    assert_one_line_error(*cli(capsys, "compare", DATA / "host-ddr", run), fragment=message)


def test_an_unreadable_file_is_one_line(run_copy, capsys, monkeypatch):
    """Permission denied (this machine runs as root, so chmod would not stop the read):
    injected at the open that reads the file."""
    run = run_copy("host-ddr-v2")
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if Path(path).name == "system.json":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    assert_one_line_error(*cli(capsys, "report", run, "--no-plots"),
                          fragment="system.json: Permission denied")


def test_a_folder_that_cannot_be_looked_into_is_one_line(run_copy, capsys, monkeypatch):
    run = run_copy("host-ddr-v2")
    for name in ("stat", "lstat"):  # lstat: a file of the folder is looked at, not followed
        real = getattr(os, name)

        def refuse(path, *args, real=real, **kwargs):
            if Path(path).parent == run:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, refuse)
    assert_one_line_error(*cli(capsys, "compare", DATA / "host-ddr", run),
                          fragment="Permission denied")


def test_a_fifo_is_never_opened_even_in_a_real_process(tmp_path):
    """The CLI as users run it: a FIFO named results.csv must not block (a blocked open
    would wait for a writer forever; the timeout fails the test instead)."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "host-ddr-v2", run)
    _fifo(run / "results.csv")
    done = subprocess.run([sys.executable, "-m", "bwprof", "report", str(run), "--no-plots"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "results.csv: it is a FIFO" in done.stderr


# -- JSON depth ------------------------------------------------------------------------------


def _nested(rng: random.Random, depth: int) -> object:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([1, 2.5, None, True, "a[b{", 'q"[\\', "\\\\[", "", "é]}"])
    if rng.random() < 0.5:
        return [_nested(rng, depth - 1) for _ in range(rng.randrange(3))]
    return {f"k{i}[": _nested(rng, depth - 1) for i in range(rng.randrange(3))}


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def test_json_depth_counts_as_the_parser_nests_without_parsing():
    rng = random.Random(18)
    for _ in range(300):
        value = _nested(rng, rng.randrange(8))
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
        assert json_depth(text) == _depth(value), text
    assert json_depth(b"[" * 200_000, stop_above=64) > 64
    assert json_depth(b'"' * 1001 + b"[[") == 0  # inside an unterminated string


def test_json_is_read_up_to_its_depth_bound_and_refused_beyond_it(run_copy, monkeypatch):
    run = run_copy("host-ddr-v2")
    text = (run / "system.json").read_text()

    def deep(levels: int) -> None:  # the whole file nests `levels` deep
        inner = "[" * (levels - 2) + "]" * (levels - 2)
        (run / "system.json").write_text(text.replace('"gpus": {', f'"deep": [{inner}], '
                                                      '"gpus": {', 1))

    deep(MAX_JSON_DEPTH)
    assert read_system(run / "system.json").hostname == "vm"
    deep(MAX_JSON_DEPTH + 1)
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("parsed a deep file"))
    with pytest.raises(BwprofError, match="nested too deeply"):
        read_system(run / "system.json")


def test_memory_that_runs_out_in_a_json_read_is_not_the_files_fault(run_copy, monkeypatch):
    """It stays a MemoryError (the entry point's one line, exit 3), never a BwprofError that
    would call the file bad input (exit 2)."""
    run = run_copy("host-ddr-v2")

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(json, "loads", exhausted)
    with pytest.raises(MemoryError):
        load_run(run)


# -- auxiliary files cost only what they hold -----------------------------------------------


def _other_version(path: Path) -> None:
    header = "t_s,device,schema_version" if path.name == "samples.csv" else (
        "severity,what,schema_version")
    path.write_text(f"{header}\n0,x,3\n")


def _foreign(path: Path) -> None:
    path.write_text("a,b\n1,2\n")


AUX_DAMAGE = {
    **DAMAGE,
    "torn": (_torn, "line 2 has more fields than the header names"),
    "header cut off": (_header_cut, "holds only a header cut off"),
    "of schema version 3": (_other_version, "has schema version 3, this bwprof reads 1 and 2"),
    "not bwprof's": (_foreign, "is not a bwprof"),
}
AUX_FILES = {
    "findings.csv": ("its findings are not shown", "severity,device,what\nwarning,gpu0,x\n"),
    "samples.csv": ("no telemetry samples or their plot", "t_s,device,power_w\n0.0,gpu0,100\n"),
}


def _damaged_aux(run_copy, name: str, damage: str) -> tuple[Path, str]:
    """A copy of host-ddr-v2 whose auxiliary file `name` has `damage`, read: its folder and
    the one note the reading gave (checked to name the file, what is lost and why)."""
    run = run_copy("host-ddr-v2")
    lost, content = AUX_FILES[name]
    (run / name).write_text(content)
    spoil, why = AUX_DAMAGE[damage]
    spoil(run / name)
    loaded = load_run(run)
    assert len(loaded.results) == len(pd.read_csv(DATA / "host-ddr-v2" / "results.csv"))
    assert getattr(loaded, name.removesuffix(".csv")) is None
    [note] = loaded.notes
    assert note.startswith(f"{name} is left out ({lost}): ") and why in note, note
    return run, note


@pytest.mark.parametrize("name", sorted(AUX_FILES))
@pytest.mark.parametrize("damage", sorted(AUX_DAMAGE))
def test_a_damaged_auxiliary_file_is_a_note_never_a_refusal(run_copy, deadline, name, damage):
    """The disk filled mid-run (a 0-byte findings.csv) and any other damage: results.csv
    holds every finished row, and the folder is read with a note naming the file."""
    _damaged_aux(run_copy, name, damage)


@pytest.mark.parametrize("name", sorted(AUX_FILES))
@pytest.mark.parametrize("damage", ["FIFO", "sparse 2 GiB"])
def test_report_and_compare_show_a_damaged_auxiliary_files_note(run_copy, capsys, deadline,
                                                                name, damage):
    """Both read the folder as above, once (a FIFO opened again would block, a 2 GiB file
    read again would take its time): the note is shown and the command succeeds. Every other
    damage reaches them as the same note."""
    run, note = _damaged_aux(run_copy, name, damage)
    code, out, err = cli(capsys, "report", run, "--no-plots", "--out", run.parent / "out")
    assert code == 0 and note in out and "Traceback" not in err, err
    code, out, err = cli(capsys, "compare", DATA / "host-ddr-v2", run)
    assert code == 0 and f"warning: run B: {note}" in out, out + err


def test_the_findings_a_run_counts_but_lost_are_said(run_copy):
    run = run_copy("host-ddr-v2")
    system = json.loads((run / "system.json").read_text())
    (run / "system.json").write_text(json.dumps({**system, "findings": 2}))
    assert load_run(run).notes == [
        "findings.csv is missing although system.json counts 2 finding(s): they are not shown"]


@pytest.mark.parametrize("damage", ["0-byte", "FIFO", "symlink to /dev/zero", "not UTF-8",
                                    "sparse 2 GiB", "nested deep", "of schema version 3",
                                    "an entry of the wrong kind"])
def test_a_damaged_timelines_file_costs_only_the_timeline_plots(run_copy, deadline, damage):
    run = run_copy("h200-quick")
    path = run / "timelines.json"
    extra = {
        "nested deep": lambda p: p.write_text("[" * 100 + "]" * 100),
        "of schema version 3": lambda p: p.write_text('{"schema_version": 3, "timelines": []}'),
        "an entry of the wrong kind": lambda p: p.write_text(
            p.read_text().replace('"ops": 1', '"ops": "one"', 1)),
    }
    spoil = extra[damage] if damage in extra else DAMAGE[damage][0]
    spoil(path)
    with pytest.raises(BwprofError, match=r"^[^\n]*timelines\.json[^\n]*$"):
        read_timelines(run)
    assert load_run(run).notes == []  # only the timeline plots read it, and say why not


def test_a_fifo_timelines_file_leaves_the_other_plots(run_copy, capsys, deadline, tmp_path):
    # A host-only run: the timelines file is read whatever the rows (h200-quick's eight
    # plots cost 2 s and say no more)
    run = run_copy("host-ddr-v2")
    _fifo(run / "timelines.json")
    code, out, err = cli(capsys, "report", run, "--out", tmp_path / "out")
    assert code == 0, err
    (note,) = [line for line in err.splitlines() if "timeline plots not drawn: " in line]
    assert "timelines.json: it is a FIFO" in note and note not in out  # on stderr only
    assert (tmp_path / "out" / "bandwidth_vs_size.png").is_file()


# -- a results.csv without rows ---------------------------------------------------------------


@pytest.mark.parametrize("damage, note", [
    (_zero, "results.csv is empty (0 bytes): the run wrote no rows to show"),
    (_header_cut, "results.csv holds only a header cut off while it was written: the run "
                  "wrote no rows to show"),
    (lambda path: path.write_text(path.read_text().splitlines()[0] + "\n"), None),
])
def test_a_results_file_without_rows_is_an_empty_run_in_report_and_compare(
        run_copy, capsys, damage, note):
    """The disk filled, or the run was killed, before its first row: report and compare
    both show a run with no rows (and why), never a refusal of one but not the other."""
    run = run_copy("host-ddr-v2")
    damage(run / "results.csv")
    loaded = load_run(run)
    assert loaded.results.empty and loaded.notes == ([note] if note else [])
    code, out, err = cli(capsys, "report", run, "--no-plots", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["notes"] == loaded.notes and err == ""
    assert all(row["value"] is None for row in payload["summary"])
    code, out, err = cli(capsys, "compare", run, DATA / "host-ddr-v2", "--fail-below", "5")
    assert code == 1 and "baseline A has no headline figure" in err and "it has no rows" in err


# -- spreadsheet escapes undone ----------------------------------------------------------------


def test_text_escaped_for_spreadsheets_reads_back_as_written(run_copy):
    run = run_copy("host-ddr-v2")
    set_first_row(run / "results.csv", "note", "'=HYPERLINK(x)")
    set_first_row(run / "results.csv", "device_name", "'+cpu")
    (run / "findings.csv").write_text("severity,device,what\nwarning,'@gpu0,'-1 link\n")
    loaded = load_run(run)
    assert loaded.results.loc[0, "note"] == "=HYPERLINK(x)"
    assert loaded.results.loc[0, "device_name"] == "+cpu"
    assert loaded.findings.loc[0, "device"] == "@gpu0"
    assert loaded.findings.loc[0, "what"] == "-1 link"


# -- runs that never finished ------------------------------------------------------------------


def _unfinished(run: Path, **fields: object) -> None:
    system = json.loads((run / "system.json").read_text())
    (run / "system.json").write_text(json.dumps({**system, "finished_utc": None, **fields}))


def test_a_run_killed_mid_run_is_shown_incomplete(tmp_path, capsys):
    """A real SIGKILL once results.csv has a row: system.json keeps `finished_utc: null`
    and `interrupted: false`, and report and compare say the run did not finish."""
    run = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "bwprof", "run", "--cases", "ddr_copy,ddr_scale,ddr_add,"
         "ddr_triad", "--repeats", "40", "--size", "32MiB", "--threads", "1", "--no-plots",
         "--out", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        give_up = time.monotonic() + 600  # a guard: the first row comes in seconds
        while time.monotonic() < give_up and process.poll() is None:
            results = run / "results.csv"
            if results.is_file() and results.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be killed"
        process.kill()
    finally:
        process.kill()
        process.wait()
    system = json.loads((run / "system.json").read_text())
    assert system["finished_utc"] is None and system["interrupted"] is False
    code, out, err = cli(capsys, "report", run, "--no-plots", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["run"]["state"] == "incomplete"
    # Without a lock file (a bwprof before the lock) it cannot be told from a live run.
    detail = payload["run"]["state_detail"]
    assert detail in ("stopped without finishing (killed or crashed)", "never finalised")
    assert err.startswith(f"warning: run {run} is incomplete ({detail}): ")
    assert payload["warnings"] == [err.strip().removeprefix("warning: ")]
    code, out, err = cli(capsys, "report", run, "--no-plots")
    assert code == 0 and f"(incomplete: {detail})" in out.splitlines()[0]
    assert "is incomplete" in err and "is incomplete" not in out
    code, out, err = cli(capsys, "compare", DATA / "host-ddr-v2", run, "--json")
    payload = json.loads(out)
    assert [r["state"] for r in payload["runs"]] == ["finished", "incomplete"]
    assert err == (f"warning: run B is incomplete ({detail}): figures it did not reach are "
                   "absent\n")
    code, out, err = cli(capsys, "compare", DATA / "host-ddr-v2", run, "--fail-below", "5")
    assert "is incomplete" not in out and "is incomplete" in err
    assert f"incomplete: {detail}" in out  # the run's own line says it too


def test_a_live_run_is_still_running_and_a_released_one_was_killed(run_copy, capsys):
    run = run_copy("host-ddr-v2")
    _unfinished(run)
    lock = runlock.claim(run)
    try:
        code, out, err = cli(capsys, "report", run, "--no-plots", "--json")
        assert code == 0 and json.loads(out)["run"]["state_detail"] == "still running"
        assert err == (f"warning: run {run} is incomplete (still running): its figures are "
                       "of the rows written so far\n")
        _, out, err = cli(capsys, "compare", DATA / "host-ddr-v2", run)
        assert "is incomplete" not in out
        assert err == ("warning: run B is incomplete (still running): figures it has not "
                       "reached yet are absent\n")
    finally:
        lock.release()
    loaded = load_run(run)
    assert loaded.running is False
    assert loaded.state_text == "stopped without finishing (killed or crashed)"


@pytest.mark.parametrize("stopped_by, text, warning", [
    ("SIGHUP", "interrupted by SIGHUP", "was interrupted by SIGHUP: "),
    ("output error: cannot write results.csv (No space left on device)",
     "stopped: output error: cannot write results.csv (No space left on device)",
     "was stopped (output error: cannot write results.csv (No space left on device)): "),
    (None, "interrupted", "was interrupted: "),
])
def test_an_interrupted_run_says_what_stopped_it(run_copy, capsys, stopped_by, text, warning):
    run = run_copy("host-ddr-v2")
    _unfinished(run, interrupted=True, **({"stopped_by": stopped_by} if stopped_by else {}))
    code, out, err = cli(capsys, "report", run, "--no-plots", "--json")
    assert {k: json.loads(out)["run"][k] for k in ("state", "state_detail", "stopped_by")} == {
        "state": "interrupted", "state_detail": text, "stopped_by": stopped_by}
    assert err.startswith(f"warning: run {run} {warning}")
    code, out, err = cli(capsys, "compare", DATA / "host-ddr-v2", run, "--fail-below", "50")
    assert f"warning: run B {warning}figures it did not reach are absent" in err
    rows = load_run(DATA / "host-ddr-v2").results
    if not rows.empty:  # every figure of B is there: nothing is called missing
        assert code == 0, err


def test_a_missing_figure_of_an_unfinished_run_says_why(run_copy, capsys):
    run = run_copy("host-ddr-v2")
    _unfinished(run)
    lines = (run / "results.csv").read_text().splitlines(keepends=True)
    (run / "results.csv").write_text("".join(line for line in lines
                                             if "ddr_triad" not in line))
    code, _, err = cli(capsys, "compare", DATA / "host-ddr-v2", run, "--fail-below", "5")
    assert code == 1
    assert "is missing (not measured in this run (the run was never finalised))" in err


# -- names and strings that are not UTF-8 -----------------------------------------------------


def test_folder_names_that_are_not_utf8_never_break_report_or_compare(tmp_path, capsys):
    run = tmp_path / os.fsdecode(b"run-\xff")
    shutil.copytree(DATA / "host-ddr-v2", run)
    out_dir = tmp_path / os.fsdecode(b"out-\xfe")
    code, out, err = cli(capsys, "report", run, "--no-plots", "--json", "--out", out_dir)
    assert code == 0, err
    assert json.loads(out)["run"]["path"].endswith("run-\\xff")
    code, out, err = cli(capsys, "report", run, "--no-plots", "--out", out_dir)
    assert code == 0 and "run-\\xff" in out, err
    code, out, err = cli(capsys, "compare", run, DATA / "host-ddr", "--out", out_dir,
                         "--json")
    assert code == 0, err
    frame = pd.read_csv(out_dir / "compare.csv", encoding="utf-8")
    assert frame.loc[0, "run_dir"].endswith("run-\\xff")
    code, out, err = cli(capsys, "compare", run, run, "--json")
    payload = json.loads(out)
    assert code == 0 and payload["runs"][0]["path"].endswith("run-\\xff")
    assert payload["warnings"][0].startswith("runs A and B are the same folder")


def test_not_utf8_names_in_a_real_process(tmp_path):
    run = tmp_path / os.fsdecode(b"run-\xff")
    shutil.copytree(DATA / "host-ddr-v2", run)
    for args in (["compare", str(run), str(DATA / "host-ddr"), "--json", "--out",
                  str(tmp_path / os.fsdecode(b"out-\xfe"))],
                 ["report", str(run), "--no-plots"]):
        done = subprocess.run([sys.executable, "-m", "bwprof", *args], capture_output=True,
                              timeout=120)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
        if "--json" in args:
            assert json.loads(done.stdout)["runs"][0]["path"].endswith("run-\\xff")
        else:
            assert b"run-\\xff" in done.stdout


def test_strings_of_system_json_that_no_utf8_can_hold_are_made_printable(run_copy, capsys,
                                                                         tmp_path):
    run = run_copy("host-ddr-v2")
    system = (run / "system.json").read_text()
    (run / "system.json").write_text(system.replace('"hostname": "vm"',
                                                    '"hostname": "vm\\udcff\\ud800"', 1))
    assert load_run(run).host == "vm\\udcff\\ud800"
    code, out, err = cli(capsys, "compare", run, DATA / "host-ddr-v2", "--json", "--out",
                         tmp_path / "cmp")
    assert code == 0 and json.loads(out)["runs"][0]["host"] == "vm\\udcff\\ud800", err


def test_printable_and_one_line():
    assert printable(os.fsdecode(b"run-\xff\xc3\xa9")) == "run-\\xffé"
    assert printable("plain é") == "plain é"
    assert one_line("a\nb\u2028c\x1b[31m") == "a\\x0ab\\u2028c\\x1b[31m"


# -- a battery of hostile inputs through the CLI ----------------------------------------------


def _copy(tmp_path: Path, name: str, to: str) -> Path:
    target = tmp_path / to
    shutil.copytree(DATA / name, target)
    return target


def _edit(run: Path, name: str, old: str, new: str) -> Path:
    text = (run / name).read_text()
    assert old in text
    (run / name).write_text(text.replace(old, new, 1))
    return run


BATTERY = {
    "a file for a folder": (lambda t: (t / "f").write_text("x") and t / "f", "(it is a file)"),
    "a FIFO for a folder": (lambda t: os.mkfifo(t / "p") or t / "p", "(it is not a folder)"),
    "an empty folder": (lambda t: (t / "e").mkdir() or t / "e", "(no system.json)"),
    "a name with a line break": (lambda t: t / "no\nsuch", "no\\x0asuch does not exist"),
    "a status with a line break": (
        lambda t: _edit(_copy(t, "host-ddr-v2", "r"), "results.csv", ",ok,", ',"o\nk",'),
        "unknown status o\\x0ak in row 1"),
    "the schema version a list": (
        lambda t: _edit(_copy(t, "host-ddr-v2", "r"), "system.json", '"schema_version": 2',
                        '"schema_version": [' + "1," * 10_000 + "1]"),
        "has schema version [1, 1, 1, 1, 1, 1, 1, 1, 1, ... 1, 1] (30003 characters), this "
        "bwprof reads"),
    "a key a megabyte long": (
        lambda t: _edit(_copy(t, "host-ddr-v2", "r"), "system.json", '"packages": {',
                        '"packages": {"' + "k" * 1_000_000 + '": 5, '),
        "host.packages.kkkkkkkkkkkkkkkkkkkkkkkkkkkk...kkkkkk (1000000 characters) should be a "
        "string, not int"),
    "an integer beyond 64 bits": (
        lambda t: _edit(_copy(t, "host-ddr-v2", "r"), "system.json", '"logical_cpus": ',
                        '"logical_cpus": 1' + "0" * 30 + ", \"x\": "),
        "host.logical_cpus should be an integer of 64 bits"),
    "a schema version of infinity": (  # once a traceback: int() of inf, reading versions
        lambda t: _edit(_copy(t, "host-ddr-v2", "r"), "results.csv",
                        'beside it)",,,2,', 'beside it)",,,inf,'),
        "column schema_version holds inf, not a whole number"),
    "results.csv of a million columns": (
        lambda t: (_copy(t, "host-ddr-v2", "r") / "results.csv").write_text(
            ",".join(["a"] * 1_000_000) + "\n") and t / "r",
        "has 1000000 columns, more than bwprof reads (1024)"),
}


@pytest.mark.parametrize("case", list(BATTERY))
def test_hostile_inputs_are_one_line_or_a_result(tmp_path, capsys, deadline, case):
    make, fragment = BATTERY[case]
    target = make(tmp_path)
    for command in (["report", target, "--no-plots", "--out", tmp_path / "o"],
                    ["compare", DATA / "host-ddr-v2", target]):
        code, out, err = cli(capsys, *command)
        assert "Traceback" not in out + err
        if fragment:
            assert_one_line_error(code, out, err, fragment)
            assert len(err) < 6000  # a value a hostile file makes huge is cut
        else:
            assert code == 0, err


def test_folders_twice_copies_and_other_versions_compare(tmp_path, capsys):
    v1, v2 = DATA / "host-ddr", DATA / "host-ddr-v2"
    copy = _copy(tmp_path, "host-ddr-v2", "copy")
    code, out, err = cli(capsys, "compare", v2, v1, v2, copy, v2 / ".." / "host-ddr-v2",
                         "--json")
    payload = json.loads(out)
    assert code == 0, err
    assert [line for line in payload["warnings"] if line.startswith("runs ")] == [
        f"runs A and C are the same folder ({v2}): their figures are the same rows",
        "runs A and D are the same run (vm-20261201T081848Z) in two folders: their figures "
        "are the same measurement",
        f"runs A and E are the same folder ({v2 / '..' / 'host-ddr-v2'}): their figures are "
        "the same rows"]
    code, out, err = cli(capsys, "report", DATA / "h200-quick", "--no-plots", "--out",
                         tmp_path / "o")
    assert code == 0 and err == "", err
    code, out, err = cli(capsys, "compare", DATA / "h200-quick", v1, v2, DATA / "sim-a")
    assert code == 0 and err == "", err
    assert_one_line_error(*cli(capsys, "compare", v2), "at least two run folders")


def test_many_tiny_folders_compare_in_linear_time(tmp_path, capsys):
    """A thousand took 41 s by hand (about 40 ms a run: reading and summarising it); twenty
    here, each a copy of one run, so every later one is named a copy of the first."""
    folders = [_copy(tmp_path, "host-ddr-v2", f"r{i:02}") for i in range(20)]
    code, out, err = cli(capsys, "compare", *folders, "--json")
    payload = json.loads(out)
    assert code == 0 and err == "" and len(payload["runs"]) == 20
    assert len(payload["warnings"]) == 19


# -- every key of system.json, every cell kind of results.csv --------------------------------


def _paths(value: object, where: tuple = ()) -> list[tuple]:
    found = [where] if where else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:2]):
            found += _paths(item, (*where, index))
    return found


def _set(value: object, where: tuple, new: object) -> object:
    if not where:
        return new
    copied = dict(value) if isinstance(value, dict) else list(value)  # type: ignore[call-overload]
    copied[where[0]] = _set(copied[where[0]], where[1:], new)
    return copied


WRONG_KINDS = [None, True, -1, 1.5, "x", [], {}, [{}], 10**30, 1e308]


def test_system_json_of_the_wrong_kind_at_any_key_is_one_line_or_read():
    """Every part of two real system.json files (a GPU run and a v2 host run) replaced by
    every wrong kind: the reader refuses it in one line, or the report's and compare's uses
    of the metadata work on what it read."""
    from bwprof.analysis.compare import Comparison, machine_warnings, run_lines
    from bwprof.analysis.summary import build_summary
    from bwprof.render.terminal import ddr_peak_line, sandbox_line, telemetry_line
    from bwprof.store.runfolder import RunFolder, machine_line, system_meta

    checked = refused = 0
    for name in ("h200-quick", "host-ddr-v2"):
        base = load_run(DATA / name)
        summary = build_summary(base.results)
        system = json.loads((DATA / name / "system.json").read_text())
        for where in _paths(system):
            for wrong in WRONG_KINDS:
                try:  # read_system's checks, on what it would have parsed
                    meta = system_meta(_set(system, where, wrong), Path("system.json"))
                except BwprofError as exc:
                    assert "\n" not in str(exc)
                    refused += 1
                    continue
                run = RunFolder(base.path, base.results, meta)
                telemetry_line(meta), ddr_peak_line(summary, meta), sandbox_line(meta)
                machine_line(meta)
                pair = [base, run]
                warnings = machine_warnings(pair, ["A", "B"])
                run_lines(Comparison(pair, ["A", "B"], pd.DataFrame(), warnings, []))
                assert run.state_text
                checked += 1
    assert checked > 100 and refused > 100


CELL_VALUES = ["x", "1e300", ""]
MORE_VALUES = ["-1", "9" * 30, "'=1", "nan", "1.5", "True"]
"""Tried in a few columns of each kind only: each case costs the table's checks (25 ms),
and these take the same paths as CELL_VALUES in the other columns of that kind."""
SOME_COLUMNS = ("size_bytes", "value_best", "cv", "higher_is_better", "metric", "flags",
                "note")


def test_a_results_cell_of_any_kind_is_one_line_or_read():
    """Each column of a real results.csv, its first row's cell replaced by values of every
    kind: a one-line refusal, or rows that the summary, the report lines and compare's
    figures work on. Those run once, on every table that was read, stacked (pytest makes
    a numeric warning an error)."""
    from bwprof.analysis.compare import _figures
    from bwprof.analysis.run import Run
    from bwprof.analysis.summary import build_summary
    from bwprof.render.terminal import report_lines
    from bwprof.schema.table import checked_results
    from bwprof.store.runfolder import RunFolder

    source = DATA / "host-ddr-v2" / "results.csv"
    text = pd.read_csv(source, dtype=str, keep_default_na=False)
    meta = load_run(source.parent).meta
    read, refused = [], 0
    for column in text.columns:
        for value in CELL_VALUES + (MORE_VALUES if column in SOME_COLUMNS else []):
            frame = text.copy()
            frame.loc[0, column] = value
            frame = pd.read_csv(io.StringIO(frame.to_csv(index=False)))
            try:
                read.append(checked_results(frame, Path("results.csv")))
            except BwprofError as exc:
                assert "\n" not in str(exc)
                refused += 1
    assert len(read) > 40 and refused > 40, (len(read), refused)
    results = pd.concat(read, ignore_index=True)
    summary = build_summary(results)
    report_lines(Run.from_frame(results, meta))
    _figures(RunFolder(source.parent, results, meta), summary)


# Catches (issue 37 review): run files that are links to regular files were refused, and
# folders of git-annex, DVC or assembled by hand could not be reported (exit 2)
def test_run_files_linked_to_regular_files_are_read(run_copy, capsys, tmp_path):
    run = run_copy("host-ddr-v2")
    objects = tmp_path / "objects"
    objects.mkdir()
    for path in sorted(run.iterdir()):
        if path.is_file():
            moved = objects / path.name
            path.rename(moved)
            path.symlink_to(os.path.relpath(moved, run))
    loaded = load_run(run)
    assert len(loaded.results) == len(pd.read_csv(DATA / "host-ddr-v2" / "results.csv"))
    assert loaded.notes == []
    code, _out, err = cli(capsys, "report", run, "--no-plots")
    assert code == 0, err
    assert (run / "report" / "summary.csv").is_file()


def test_a_link_to_nothing_is_one_line(run_copy, capsys):
    run = run_copy("host-ddr-v2")
    (run / "results.csv").unlink()
    (run / "results.csv").symlink_to("gone.csv")
    assert_one_line_error(*cli(capsys, "report", run, "--no-plots"),
                          fragment=f"{LINK} (to gone.csv) to nothing")


# Catches (issue 37 review): the open refused as a link (ELOOP) and the file gone before the
# lstat that was to say so: FileNotFoundError raised out of the error handler
def test_a_file_that_became_a_link_and_vanished_at_the_open_is_one_line(run_copy, capsys,
                                                                        monkeypatch):
    import errno

    run = run_copy("host-ddr-v2")
    real_open = os.open

    def vanish(path, flags, *args, **kwargs):
        if Path(path).name == "results.csv" and flags & os.O_NOFOLLOW:
            Path(path).unlink()
            raise OSError(errno.ELOOP, "Too many levels of symbolic links", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", vanish)
    assert_one_line_error(*cli(capsys, "report", run, "--no-plots"), fragment="results.csv")
