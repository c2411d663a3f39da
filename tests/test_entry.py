"""The process entry point: each stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) at each
moment of a real `bwprof run` process — while typer, rich and pandas import, during the
measurement, while the final table prints — is one line and exit 130, never a traceback;
and the exit-code table in docs/command-line.md is bwprof.errors'."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bwprof import entry, errors, interrupts
from bwprof.schema.table import read_results

STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"]
COMMAND_LINE_DOC = Path(__file__).resolve().parents[1] / "docs" / "command-line.md"


def _message(name: str) -> str:
    return "interrupted" if name == "SIGINT" else f"interrupted ({name})"


def _default_sigint() -> None:
    # A shell's background job ignores SIGINT, and a child would inherit that; give it the
    # default back, so Python turns SIGINT into KeyboardInterrupt as for a user.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _spawn(args: list[str], **popen: object) -> subprocess.Popen[str]:
    popen.setdefault("stdout", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "bwprof", *args], stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_sigint,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            **popen)  # type: ignore[call-overload]


def _catches_every_stop_signal(pid: int) -> bool:
    """Whether the process has a handler for every stop signal: bwprof.entry installs them
    (INT, TERM, HUP, QUIT in turn) before importing typer, rich, pandas. Waiting for one of
    them only could send SIGQUIT while it still had its default action (a core dump)."""
    wanted = 0
    for signum in interrupts.STOP_SIGNALS:
        wanted |= 1 << (signum - 1)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16) & wanted == wanted
    return False


def _wait(condition: Callable[[], bool], process: subprocess.Popen[str], what: str,
          seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"bwprof ended before {what}: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"bwprof never reached {what}")
        time.sleep(0.002)


def _finish(process: subprocess.Popen[str], name: str) -> str:
    process.send_signal(getattr(signal, name))
    _, err = process.communicate(timeout=120)
    assert "Traceback" not in err
    assert process.returncode == errors.EXIT_INTERRUPTED, err
    return err


@pytest.mark.parametrize("name", STOP_SIGNALS)
def test_a_signal_while_bwprof_imports_is_one_line(tmp_path, name):
    out = tmp_path / "run"
    process = _spawn(["run", "--cases", "ddr_copy", "--out", str(out)])
    _wait(lambda: _catches_every_stop_signal(process.pid), process,
          "installing its handlers")
    err = _finish(process, name)
    # A signal while a module imports is held until the import ends (bwprof.interrupts), so
    # it may be raised once the run command has begun, which says nothing was written.
    assert err.splitlines() in ([_message(name)], [
        _message(name) + " before the first measurement: nothing was written"])
    assert not out.exists()


_SLOW_ENTRY_IMPORT = '''
import runpy
import sys
import time
from pathlib import Path


class SlowEntry:
    """bwprof.entry's import waits (stands for a loaded machine) until the test says go."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "bwprof.entry":
            Path("importing").write_text("")
            deadline = time.monotonic() + 60
            while not Path("go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return None  # the import goes on as usual


sys.meta_path.insert(0, SlowEntry())
sys.argv = ["bwprof", "--version"]
runpy.run_module("bwprof", run_name="__main__", alter_sys=True)  # as `python -m bwprof`
'''


def _spawn_with_a_slow_entry_import(tmp_path: Path,
                                    preexec: Callable[[], None] = _default_sigint
                                    ) -> subprocess.Popen[str]:
    (tmp_path / "slow_entry.py").write_text(_SLOW_ENTRY_IMPORT)
    process = subprocess.Popen([sys.executable, "slow_entry.py"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=preexec)
    _wait((tmp_path / "importing").exists, process, "importing bwprof.entry")
    return process


# Catches (issue 37): a signal while `python -m bwprof` imported bwprof's own modules, before
# bwprof.entry put its handlers in (the outside tester's SIGINT 0.1 s after start, under
# load), was a KeyboardInterrupt traceback, or for SIGTERM and SIGHUP a death by the signal
@pytest.mark.parametrize("name", STOP_SIGNALS)
def test_a_signal_before_bwprof_entry_is_imported_is_one_line(tmp_path, name):
    process = _spawn_with_a_slow_entry_import(tmp_path)
    err = _finish(process, name)
    assert err.splitlines() == [_message(name)]


def test_a_signal_ignored_at_start_stays_ignored_before_bwprof_entry_is_imported(tmp_path):
    """`nohup python -m bwprof ...`: a hangup while bwprof still imports changes nothing."""

    def hangups_ignored() -> None:
        _default_sigint()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    process = _spawn_with_a_slow_entry_import(tmp_path, hangups_ignored)
    process.send_signal(signal.SIGHUP)
    time.sleep(0.2)  # where it were handled, the process would end now
    (tmp_path / "go").write_text("")
    out, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (0, "")
    assert out.startswith("bwprof ")


@pytest.mark.parametrize("name", STOP_SIGNALS)
def test_a_signal_mid_run_keeps_finished_rows(tmp_path, name):
    out = tmp_path / "run"
    results = out / "results.csv"
    # Many repeats on small arrays: long enough to interrupt after the first rows land.
    process = _spawn(["run", "--cases", "ddr_", "--size", "8MiB", "--repeats", "400",
                      "--threads", "1", "--quiet", "--out", str(out)])
    _wait(lambda: results.exists() and results.read_text().count("\n") >= 2, process,
          "its first row")
    err = _finish(process, name)
    assert err.splitlines()[0].startswith(f"{_message(name)}: kept ")
    frame = read_results(results)
    assert 1 <= len(frame) < 4
    assert (frame["status"] == "ok").all()
    assert json.loads((out / "system.json").read_text())["interrupted"] is True



def test_nohup_keeps_the_run_going_through_a_hangup(tmp_path):
    """Started with SIGHUP ignored (`nohup bwprof run`), a hang-up is not an interrupt: the
    run finishes, with exit 0 and every row, as nohup promised."""
    out = tmp_path / "run"
    results = out / "results.csv"

    def ignore_hangups() -> None:
        _default_sigint()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    process = subprocess.Popen(
        [sys.executable, "-m", "bwprof", "run", "--cases", "ddr_copy", "--size", "8MiB",
         "--repeats", "200", "--threads", "1", "--quiet", "--no-plots", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore_hangups,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    _wait(results.exists, process, "its row file")
    process.send_signal(signal.SIGHUP)
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (0, "")
    assert json.loads((out / "system.json").read_text())["interrupted"] is False
    assert len(read_results(results)) == 1

_TTY_WRITE = ("wait_woken", "n_tty_write", "tty_write", "file_tty_write")


def _proc(pid: int, name: str) -> str:
    """/proc/PID/NAME, or '' where this kernel does not give it."""
    try:
        return Path(f"/proc/{pid}/{name}").read_text().strip()
    except OSError:
        return ""


class _BlockedWriting:
    """Whether the process sleeps in the kernel's tty write path (a terminal whose output is
    stopped). Where /proc/PID/wchan names the function it sleeps in, that says it; where it
    reads '0' or is missing for a sleeping process (hardened kernels, gVisor), or with
    `use_wchan=False`, the main thread asleep (state S) for half a second on end, once
    printing is all the run has left to do, stands for it: nothing else there sleeps."""

    def __init__(self, pid: int, use_wchan: bool = True) -> None:
        self.pid, self.use_wchan = pid, use_wchan
        self.asleep_since: float | None = None

    def __call__(self) -> bool:
        stat = _proc(self.pid, "stat")
        state = stat.rsplit(")", 1)[1].split()[0] if ")" in stat else ""
        if state != "S":
            self.asleep_since = None
            return False
        wchan = _proc(self.pid, "wchan") if self.use_wchan else ""
        if wchan not in ("", "0"):
            return wchan in _TTY_WRITE
        now = time.monotonic()
        if self.asleep_since is None:
            self.asleep_since = now
        return now - self.asleep_since >= 0.5


def test_the_sleep_fallback_does_not_take_a_running_process_for_a_blocked_one():
    """The fallback must not fire on a process that never sleeps long (a busy loop)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        blocked = _BlockedWriting(process.pid, use_wchan=False)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert not blocked()
            time.sleep(0.01)
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(("name", "use_wchan"),
                         [(name, True) for name in STOP_SIGNALS] + [("SIGTERM", False)])
def test_a_signal_while_the_final_table_prints_is_one_line(tmp_path, name, use_wchan):
    """stdout is a terminal stopped with ^S (XOFF): the first write of the table blocks in
    the kernel, and the signal lands there, after every row is on disk. The last case finds
    the blocked write without /proc/PID/wchan, as on a kernel that hides it."""
    out = tmp_path / "run"
    master, slave = os.openpty()
    termios.tcflow(slave, termios.TCOOFF)
    try:
        process = _spawn(["run", "--cases", "ddr_copy", "--repeats", "2", "--size", "1MiB",
                          "--threads", "1", "--no-plots", "--out", str(out)], stdout=slave)
        _wait(lambda: (out / "summary.csv").exists(), process, "writing summary.csv")
        blocked = _BlockedWriting(process.pid, use_wchan)
        deadline = time.monotonic() + 120  # a guard: it blocks once it prints the table
        while not blocked():
            if process.poll() is not None:
                _, err = process.communicate()
                if process.returncode == 0:
                    pytest.skip("this terminal did not hold output on XOFF (^S), so the "
                                "table's write never blocked")
                pytest.fail(f"bwprof ended before printing its table: {err}")
            if time.monotonic() > deadline:
                process.kill()
                pytest.fail("bwprof did not block writing its table within 120 s")
            time.sleep(0.005)
        err = _finish(process, name)
    finally:
        termios.tcflow(slave, termios.TCOON)
        os.close(slave)
        os.close(master)
    assert err.splitlines()[-1] == _message(name)
    assert (read_results(out / "results.csv")["status"] == "ok").all()


def test_the_documented_exit_code_table_is_the_one_in_errors():
    text = COMMAND_LINE_DOC.read_text()
    table = dict(re.findall(r"^\| `(\d+)` \| (.+?) \|$", text, re.M))
    codes = {value for key, value in vars(errors).items()
             if key.startswith("EXIT_") and isinstance(value, int)}
    assert {int(code) for code in table} == codes
    assert "interrupt" in table[str(errors.EXIT_INTERRUPTED)].lower()
    assert "full" in table[str(errors.EXIT_OUTPUT)]
    # memory that ran out is 3 wherever it happened: the table, README's and errors' words
    readme = dict(re.findall(r"^\| `(\d+)` \| (.+?) \|$",
                             (COMMAND_LINE_DOC.parents[1] / "README.md").read_text(), re.M))
    source = Path(errors.__file__).read_text()
    said = source[source.index("EXIT_OUTPUT = "):source.index("EXIT_INTERRUPTED = ")]
    for words in ("read-only or vanished folder, I/O error", "memory ran out",
                  "while reading a file as well as writing"):
        assert words in table[str(errors.EXIT_OUTPUT)], words
        assert words in readme[str(errors.EXIT_OUTPUT)], words
        assert words in " ".join(said.split()), words
    # every place a command returns 1 (cli.py's EXIT_FAILED, bwprof/fleet/run.py's
    # SystemExit(1) and abort(1)) is named, so a script knows what 1 means
    for where in ("`invalid`", "`error`", "fleet rank", "`--mpi-timeout`", "--fail-below",
                  "`kernels`", "`monitor`", "`accept`"):
        assert where in table[str(errors.EXIT_FAILED)], where


@pytest.mark.parametrize("name", STOP_SIGNALS)
def test_a_signal_as_the_process_ends_keeps_the_code_the_command_chose(tmp_path, name):
    """Python puts the signals it handled back to their default action for its final
    teardown: a signal then would kill the process (SIGQUIT dumping core) with a code of
    its own after the run had succeeded. It changes nothing now, or is one line and 130
    where it lands before the teardown."""
    process = _spawn(["run", "--cases", "ddr_copy", "--repeats", "2", "--size", "1MiB",
                      "--threads", "1", "--no-plots", "--quiet", "--out", str(tmp_path / "r")])
    assert process.stdout is not None
    assert process.stdout.readline().startswith("verdict: ")  # --quiet's first line
    assert process.stdout.readline() == f"wrote {tmp_path / 'r'}\n"
    process.send_signal(getattr(signal, name))
    _, err = process.communicate(timeout=120)
    assert "Traceback" not in err
    assert (process.returncode, err) in ((0, ""), (130, _message(name) + "\n")), err


_INTERRUPTED_IN_EXEC = '''
import sys

import bwprof.cli
from bwprof.entry import main


def interrupted_in_exec(argv):
    exec("import os, signal\\nos.kill(os.getpid(), signal.{name})\\nfor _ in range(10 ** 6): pass")
    return 0


bwprof.cli.main = interrupted_in_exec
sys.exit(main())
'''


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_an_interrupt_inside_exec_code_still_exits_130_under_python_m(tmp_path, name):
    """A signal that lands in code run by exec() (dataclasses and typer build methods that
    way while bwprof imports; numba compiles so): under `python -m`, CPython would end the
    process by killing itself with SIGINT after the one line, returncode -2, not 130."""
    (tmp_path / "interrupted_in_exec.py").write_text(_INTERRUPTED_IN_EXEC.format(name=name))
    done = subprocess.run([sys.executable, "-m", "interrupted_in_exec"], cwd=tmp_path,
                          capture_output=True, text=True, preexec_fn=_default_sigint,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(tmp_path), *sys.path])})
    assert (done.returncode, done.stderr) == (errors.EXIT_INTERRUPTED, _message(name) + "\n")


_HELD_AND_LOST = '''
import os
import signal
import sys

import bwprof.cli
from bwprof import interrupts
from bwprof.entry import main


def held_then_failed(argv):
    try:
        with interrupts.deferred():  # a final step the signal lands in, which then fails
            os.kill(os.getpid(), signal.{name})
            for _ in range(10 ** 5):
                pass
            raise OSError("the step failed")
    except OSError:
        pass  # the command goes on, and no later step raises the held signal
    print("finished", flush=True)
    return 0


bwprof.cli.main = held_then_failed
sys.exit(main())
'''


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_signal_held_and_never_raised_still_ends_the_command_with_130(tmp_path, name):
    """A stop signal held by a step (or an import) near a command's end that never became a
    KeyboardInterrupt: the command finished, but the user asked it to stop; it said nothing
    and exited 0 (the outside tester's 'signal near the end is lost')."""
    (tmp_path / "held_and_lost.py").write_text(_HELD_AND_LOST.format(name=name))
    done = subprocess.run([sys.executable, "-m", "held_and_lost"], cwd=tmp_path,
                          capture_output=True, text=True, preexec_fn=_default_sigint,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(tmp_path), *sys.path])})
    assert done.stdout == "finished\n"
    assert (done.returncode, done.stderr) == (errors.EXIT_INTERRUPTED, _message(name) + "\n")


_WAITS_IN_THE_FINAL_FILES = '''
import sys
import time
from pathlib import Path

from bwprof import api, interrupts
from bwprof.entry import main
from bwprof.render import outputs

marker, where = Path(sys.argv[1]), sys.argv[2]


def wait_for_the_signal():
    marker.touch()  # the test sends it now, from outside
    deadline = time.monotonic() + 60
    while interrupts.received() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # a held step goes on; elsewhere the signal raises here


real_plots, real_system_json, calls = outputs._plots, api.write_system_json, []


def plots(*args, **kwargs):
    wait_for_the_signal()
    return real_plots(*args, **kwargs)


def system_json(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:  # the final one (the claim's, the plan's, the final)
        wait_for_the_signal()
    return real_system_json(*args, **kwargs)


if where == "the plots":
    outputs._plots = plots
else:
    api.write_system_json = system_json
sys.argv = ["bwprof", *sys.argv[3:]]
sys.exit(main())
'''


# Catches (issue 37): a SIGHUP (or SIGTERM) while `bwprof run` wrote its final files, after
# its last measurement, exited 130 while system.json said the run was not interrupted
@pytest.mark.parametrize(("where", "name"), [("the plots", "SIGHUP"),
                                             ("the final system.json", "SIGTERM")])
def test_a_signal_while_the_final_files_are_written_is_130_and_the_folder_says_so(
        tmp_path, where, name):
    out, marker = tmp_path / "run", tmp_path / "waiting"
    process = subprocess.Popen(
        [sys.executable, "-c", _WAITS_IN_THE_FINAL_FILES, str(marker), where, "run",
         "--cases", "ddr_copy", "--repeats", "2", "--size", "1MiB", "--threads", "1",
         "--quiet", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    _wait(marker.exists, process, where)
    err = _finish(process, name)
    assert err.splitlines()[0] == f"{_message(name)}: kept 1 finished row(s) in {out}"
    system = json.loads((out / "system.json").read_text())
    assert system["interrupted"] is True and system["finished_utc"]
    assert system["stopped_by"] == f"{name} after every case was measured"
    assert len(read_results(out / "results.csv")) == 1
    assert not (out / "report.html").exists()


_GPU_STOPPED = '''
import atexit
import sys
import time

import bwprof.cli
from bwprof.entry import main
from bwprof.gpu import runtime


def a_gpu_stops_answering(argv):
    runtime.STOPPED_GPUS.add(3)
    atexit.register(time.sleep, 60)  # stands in for CUDA's teardown waiting for gpu3
    print("wrote the run", flush=True)
    return 1


bwprof.cli.main = a_gpu_stops_answering
sys.exit(main())
'''


def test_a_process_whose_gpu_stopped_answering_exits_without_waiting_for_it():
    """After a GPU missed its deadline the command ends with its own code, not in CUDA's
    teardown waiting for that GPU (an exit function here that would wait a minute)."""
    done = subprocess.run([sys.executable, "-c", _GPU_STOPPED], capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stdout) == (1, "wrote the run\n"), done.stderr


_SIGNAL_IN_IMPORT = '''
import importlib.machinery
import os
import signal
import sys

from bwprof.entry import main

TARGET, NAME, TREATMENT = {target!r}, {name!r}, {treatment!r}


class SignalledWhileInitialising:
    """The stop signal lands while TARGET initialises, as in a compiled module's init that
    calls Python code and takes any error there for "could not import" or drops it."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader.exec_module

        def exec_module(module):
            try:
                os.kill(os.getpid(), getattr(signal, NAME))
                for _ in range(10 ** 5):
                    pass
            except BaseException as exc:
                if TREATMENT == "ImportError":
                    raise ImportError(f"{{TARGET}} could not initialise") from exc
            real(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, SignalledWhileInitialising())
sys.exit(main())
'''


def _signalled_in_import(tmp_path: Path, target: str, name: str, treatment: str,
                         args: list[str]) -> subprocess.CompletedProcess[str]:
    """`bwprof ARGS` in a process that gets signal NAME while it imports module TARGET."""
    (tmp_path / "signal_in_import.py").write_text(
        _SIGNAL_IN_IMPORT.format(target=target, name=name, treatment=treatment))
    return subprocess.run(
        [sys.executable, "-m", "signal_in_import", *args], cwd=tmp_path, capture_output=True,
        text=True, preexec_fn=_default_sigint, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})


@pytest.mark.parametrize(("command", "name", "treatment"), [
    ("report", "SIGTERM", "dropped"),
    ("report", "SIGINT", "ImportError"),
    ("compare", "SIGHUP", "dropped"),
    ("accept", "SIGINT", "ImportError"),
    ("history add", "SIGTERM", "dropped"),
    ("trend", "SIGHUP", "dropped"),
])
def test_a_signal_while_numpy_initialises_is_one_line(tmp_path, run_copy, command, name,
                                                      treatment):
    """A signal while NumPy's compiled modules initialised was dropped (the command went on
    to exit 0) or became NumPy's ImportError (a traceback); now it waits for the import to
    end and is one line and 130, and the command writes nothing."""
    run = run_copy("h200-quick")
    shutil.rmtree(run / "report", ignore_errors=True)
    store, out, history = tmp_path / "store", tmp_path / "out", tmp_path / "history"
    if command == "trend":  # a store to read: trend refuses a missing one before NumPy loads
        from typer.testing import CliRunner

        from bwprof.cli import app

        added = CliRunner().invoke(app, ["history", "add", str(run), "--store", str(history)])
        assert added.exit_code == 0, added.output
    held = sorted(history.rglob("*")) if history.exists() else []
    args = {"report": ["report", str(run), "--no-plots"],
            "compare": ["compare", str(run), str(run), "--out", str(out)],
            "accept": ["accept", str(run), "--out", str(out)],
            "history add": ["history", "add", str(run), "--store", str(store)],
            "trend": ["trend", "--store", str(history), "--no-plots", "--out", str(out)]}[command]
    done = _signalled_in_import(tmp_path, "numpy", name, treatment, args)
    assert (done.returncode, done.stderr) == (errors.EXIT_INTERRUPTED, _message(name) + "\n")
    assert not (run / "report").exists()
    assert not store.exists() and not out.exists()
    assert (sorted(history.rglob("*")) if history.exists() else []) == held


def test_a_signal_while_a_run_loads_its_parquet_writer_keeps_every_row(tmp_path):
    """pyarrow.parquet loads once the rows are measured, to write results.parquet: a signal
    then is one line, 130, and every row is kept."""
    out = tmp_path / "run"
    done = _signalled_in_import(tmp_path, "pyarrow.parquet", "SIGHUP", "dropped", [
        "run", "--cases", "ddr_copy", "--size", "1MiB", "--repeats", "3", "--threads", "1",
        "--quiet", "--no-plots", "--out", str(out)])
    assert done.returncode == errors.EXIT_INTERRUPTED, done.stderr
    assert done.stderr.splitlines()[0].startswith(f"{_message('SIGHUP')}: kept 1 ")
    assert len(read_results(out / "results.csv")) == 1


# Catches: Python's collector thresholds (700, 10, 10) left in a command's process: it ran
# 500 times in one `bwprof report`, a quarter of its CPU time (issue 36)
def test_a_command_collects_cyclic_garbage_rarely():
    from bwprof.entry import GC_THRESHOLDS

    code = ("import gc, sys\nimport bwprof.cli\n"
            "bwprof.cli.main = lambda argv: print(*gc.get_threshold()) or 0\n"
            "from bwprof.entry import main\nsys.exit(main())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert tuple(int(n) for n in done.stdout.split()) == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] >= 10_000


def _limited(limit: int) -> Callable[[], None]:
    def start() -> None:
        import resource

        _default_sigint()
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return start


@pytest.mark.parametrize("megabytes", [300, 400, 550])
def test_a_reading_command_out_of_memory_is_one_line_and_3(run_copy, megabytes):
    """Under an address-space limit `report` died with MemoryError, pyarrow's
    ArrowMemoryError, a library that could not be mapped, or OpenBLAS ending the process
    (exit 1, its own message) where its buffer came late; now it finishes or says it ran out
    of memory in one line, exit 3, every file it wrote whole."""
    run = run_copy("h200-quick")
    shutil.rmtree(run / "report", ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS",
                                                             "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-m", "bwprof", "report", str(run), "--html"],
                          capture_output=True, text=True, timeout=300, env=env,
                          preexec_fn=_limited(megabytes * 10**6))
    assert "Traceback" not in done.stderr
    if done.returncode == errors.EXIT_OK:
        return  # enough on this machine
    assert done.returncode == errors.EXIT_OUTPUT, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("<jemalloc>")]
    assert len(lines) == 1 and lines[0].startswith("error: bwprof ran out of memory"), lines
    for written in (run / "report").glob("*") if (run / "report").exists() else []:
        assert not written.name.endswith(".tmp") and written.stat().st_size > 0, written


# Catches: pyarrow's allocator reserved about a gigabyte of address space as it started, so
# under `ulimit -v` 1.5 GB a report of a hundred rows ran out of memory (exit 3) (issue 37)
def test_a_report_within_a_limit_that_its_memory_fits_finishes(run_copy):
    run = run_copy("h200-quick")
    env = {k: v for k, v in os.environ.items() if k != entry.ARROW_POOL_VARIABLE}
    done = subprocess.run([sys.executable, "-m", "bwprof", "report", str(run), "--html"],
                          capture_output=True, text=True, timeout=300, env=env,
                          preexec_fn=_limited(1500 * 10**6))
    assert done.returncode == errors.EXIT_OK, done.stderr


def test_pyarrow_takes_the_system_allocator_only_under_a_limit(monkeypatch):
    monkeypatch.delenv(entry.ARROW_POOL_VARIABLE, raising=False)
    monkeypatch.setattr(entry, "_address_space_limit", lambda: None)
    entry._arrow_pool_within_limit()
    assert entry.ARROW_POOL_VARIABLE not in os.environ  # its faster allocator, unlimited
    monkeypatch.setattr(entry, "_address_space_limit", lambda: 2**31)
    entry._arrow_pool_within_limit()
    assert os.environ[entry.ARROW_POOL_VARIABLE] == "system"
    monkeypatch.setenv(entry.ARROW_POOL_VARIABLE, "jemalloc")  # the user's choice stands
    entry._arrow_pool_within_limit()
    assert os.environ[entry.ARROW_POOL_VARIABLE] == "jemalloc"


def test_a_reading_command_runs_openblas_on_one_thread_unless_told(monkeypatch):
    for name in entry.BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    entry._one_blas_thread(["run", "--cases", "ddr_copy"])
    assert "OPENBLAS_NUM_THREADS" not in os.environ  # a run's host GEMM keeps every thread
    entry._one_blas_thread(["report", "RUN"])
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    entry._one_blas_thread(["compare", "A", "B"])
    assert "OPENBLAS_NUM_THREADS" not in os.environ  # the user's choice stands


def test_what_counts_as_running_out_of_memory():
    mapped = ImportError("libXau.so.6: failed to map segment from shared object")
    assert entry._out_of_memory(mapped)
    assert entry._out_of_memory(MemoryError())
    try:
        try:
            raise MemoryError
        except MemoryError as exc:
            raise ImportError("PyCapsule_Import could not import module") from exc
    except ImportError as chained:
        assert entry._out_of_memory(chained)
    assert not entry._out_of_memory(ImportError("No module named 'pyarrow'"))
    assert not entry._out_of_memory(ValueError("cannot allocate memory"))


_REPORT_WITH_ROOM = '''
import resource
import sys

import bwprof.cli
import bwprof.saved
import pandas
from bwprof import entry

# What `report` has loaded before it reads the folder, and this much address space more.
limit = entry._address_space_used() + {room}
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
sys.argv = ["bwprof", "report", sys.argv[1], "--json"]
sys.exit(entry.main())
'''


# Catches (issue 37): a results.csv with one damaged line of hundreds of MB, read under an
# address-space limit, exited 3 (out of memory: read, decoded and parsed, the line took
# several times its size) where the same file with more memory is 2 (bad input): the line
# is now refused from a scan in 1 MiB pieces, before the file is read whole
def test_a_damaged_huge_line_is_bad_input_under_a_memory_limit_too(run_copy):
    from bwprof.schema.reading import MAX_TABLE_LINE

    run = run_copy("h200-quick")
    with (run / "results.csv").open("ab") as results:
        results.write(b"x" * (8 * MAX_TABLE_LINE) + b"\n")  # 128 MiB
    done = subprocess.run([sys.executable, "-c", _REPORT_WITH_ROOM.format(room=160 * 2**20),
                           str(run)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert (done.returncode, done.stderr) == (errors.EXIT_USAGE, (
        f"error: {run / 'results.csv'} has a line (line 94) of more than 16 MiB, longer than "
        "any row bwprof writes; it is not a table bwprof wrote\n"))


_EXHAUSTED = '''
import sys

import {module}
from bwprof.entry import main


def exhausted(*args, **kwargs):
    raise {error}("cannot allocate {module}.{name}'s memory")


{module}.{name} = exhausted
sys.exit(main())
'''


@pytest.mark.parametrize(("module", "name", "error"), [
    ("pandas", "read_csv", "MemoryError"),  # while reading results.csv
    ("pandas", "read_csv", "__import__('pyarrow').lib.ArrowMemoryError"),
    ("json", "loads", "MemoryError"),  # while reading system.json
    ("json", "dumps", "MemoryError"),  # while writing the report
])
def test_out_of_memory_reading_or_writing_is_one_line_and_3(tmp_path, run_copy, module, name,
                                                             error):
    """Memory that ran out while a run file was read was 'cannot read ...: not enough
    memory', exit 2 (bad input), and 3 anywhere else: it is one rule, the entry point's line
    and exit 3 (the reviewer's repro, through the CLI)."""
    run = run_copy("h200-quick")
    # json.dumps patched for the whole process also makes pandas warn that it cannot keep a
    # frame's attrs: a warning of the patch, not of bwprof.
    quiet = {"PYTHONWARNINGS": "ignore::UserWarning"} if name == "dumps" else {}
    (tmp_path / "exhausted.py").write_text(_EXHAUSTED.format(module=module, name=name,
                                                             error=error))
    done = subprocess.run([sys.executable, "-m", "exhausted", "report", str(run), "--out",
                           str(tmp_path / "x")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **quiet, "PYTHONPATH": os.pathsep.join(
                              [str(tmp_path), *sys.path])})
    assert done.returncode == errors.EXIT_OUTPUT, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: bwprof ran out of memory"), lines
    assert "not enough memory" not in done.stderr


def test_what_counts_as_running_out_of_open_files():
    import errno as errnos

    assert entry._out_of_files(OSError(errnos.EMFILE, "Too many open files"))
    assert entry._out_of_files(OSError(errnos.ENFILE, "Too many open files in system"))
    try:
        try:
            raise OSError(errnos.EMFILE, "Too many open files")
        except OSError as exc:
            raise ImportError("cannot import name 'write_html'") from exc
    except ImportError as chained:
        assert entry._out_of_files(chained)
    assert entry._out_of_files(ImportError(
        "libstdc++.so.6: cannot open shared object file: Too many open files"))
    assert not entry._out_of_files(OSError(errnos.EIO, "Input/output error"))
    assert not entry._out_of_files(ValueError("too many open files"))


def test_open_files_running_out_is_never_bad_input_and_says_what_to_do(tmp_path):
    import errno as errnos

    no_files = OSError(errnos.EMFILE, "Too many open files")
    with pytest.raises(OSError) as raised:
        errors.raise_if_no_memory(no_files)
    assert raised.value is no_files  # the entry point's line and 3, not 'cannot read' and 2
    failed = errors.write_failure(tmp_path / "summary.csv", no_files)
    assert failed.exit_code == errors.EXIT_OUTPUT
    assert str(failed).endswith("raise the open-file limit (ulimit -n) and run it again")


_FEW_FILES = '''
import resource
import sys

import bwprof.cli
from bwprof.entry import main


def opens_a_file(argv):
    resource.setrlimit(resource.RLIMIT_NOFILE, (5, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    handles = [open(__file__) for _ in range(8)]  # EMFILE, as a late import or a file would
    return len(handles)


bwprof.cli.main = opens_a_file
sys.exit(main())
'''


# Catches (issue 37): under `ulimit -n 8` a run measured and wrote every row, then its late
# import of the HTML writer failed with EMFILE: an OSError traceback and exit 1
def test_open_files_running_out_is_one_line_and_3(tmp_path):
    (tmp_path / "few_files.py").write_text(_FEW_FILES)
    done = subprocess.run([sys.executable, "few_files.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == errors.EXIT_OUTPUT, done.stderr
    assert done.stderr.startswith("error: bwprof ran out of open files under a limit of 5 "
                                  "(ulimit -n) (OSError: [Errno 24] Too many open files"), \
        done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_memory_running_out_is_never_bad_input():
    import errno as errnos

    with pytest.raises(MemoryError):
        errors.raise_if_no_memory(OSError(errnos.ENOMEM, "Cannot allocate memory"))
    with pytest.raises(MemoryError):
        errors.raise_if_no_memory(MemoryError())
    errors.raise_if_no_memory(OSError(errnos.EIO, "Input/output error"))  # not memory: kept
    errors.raise_if_no_memory(ValueError("bad"))
