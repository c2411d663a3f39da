"""Standard streams that never raise: a closed, full or broken stdout, a narrow charset and
any COLUMNS keep their exit code and give no traceback. Real faults where the OS has them
(a closed descriptor, /dev/full, a pipe closed by its reader); every subprocess test checks
the exact exit code and that stderr holds no 'Traceback'."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bwprof import stdio
from bwprof.schema.table import read_results

DATA = Path(__file__).parent / "data"
TINY = ["run", "--cases", "ddr_copy", "--repeats", "2", "--size", "1MiB", "--threads", "1",
        "--no-plots"]
FULL_WARNING = b"warning: stdout could not be written (No space left on device)"


def _bwprof(*args: str, env: dict[str, str] | None = None,
            **popen: object) -> subprocess.CompletedProcess[bytes]:
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "bwprof", *args], timeout=180,
                          env={**os.environ, **(env or {})}, **popen)  # type: ignore[call-overload]


def _close_stdout() -> None:
    os.close(1)


# The guard itself, on real descriptors.

def test_a_broken_pipe_drops_the_rest_silently_and_leaves_the_descriptor_harmless():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away: every write is EPIPE
    said: list[OSError] = []
    with open(write_end, "w", encoding="utf-8") as inner:
        guarded = stdio.GuardedStream(inner, said.append)
        guarded.write("x" * 100_000)
        guarded.flush()
        assert guarded.dropped and said == []  # a pipe its reader closed is not worth a word
        guarded.write("more")
        guarded.flush()  # as at exit: the descriptor is /dev/null now
        assert os.path.samestat(os.fstat(write_end), os.stat(os.devnull))


def test_a_full_device_is_said_once_and_nothing_raises():
    said: list[OSError] = []
    with open("/dev/full", "w", encoding="utf-8") as inner:
        guarded = stdio.GuardedStream(inner, said.append)
        for _ in range(3):
            guarded.write("line\n")
            guarded.flush()
    assert [exc.strerror for exc in said] == ["No space left on device"]
    assert not guarded.isatty()


@pytest.mark.parametrize(("encoding", "expected"), [
    ("ascii", b"1 GiB . 2x r?"),
    ("latin-1", b"1 GiB \xb7 2\xd7 r\xff"),
    ("utf-8", b"1 GiB \xc2\xb7 2\xc3\x97 r\xff"),
])
def test_unencodable_text_is_replaced_and_escaped_bytes_go_back_as_they_came(encoding,
                                                                            expected):
    name = os.fsdecode(b"r\xff")  # a folder name from argv that is not UTF-8
    assert f"1 GiB · 2× {name}".encode(encoding, stdio.ERRORS) == expected


def test_click_and_rich_write_through_the_guard_even_to_an_ascii_stream(monkeypatch):
    """click rewraps an ASCII stream's `.buffer` in a stream of its own, and rich writes to
    sys.stdout as it is at each print: neither may get around the guard."""
    import typer
    from rich.console import Console

    raw = io.BytesIO()
    inner = io.TextIOWrapper(raw, encoding="ascii", errors=stdio.ERRORS)
    guarded = stdio.GuardedStream(inner)
    monkeypatch.setattr(sys, "stdout", guarded)
    typer.echo("a·b")
    Console(width=40).print("c×d", highlight=False)
    guarded.flush()
    assert raw.getvalue() == b"a.b\ncxd\n"


# The whole command, with the fault made by the OS.

def test_a_closed_stdout_is_a_quiet_normal_run(tmp_path):
    out = tmp_path / "run"
    done = _bwprof(*TINY, "--out", str(out), preexec_fn=_close_stdout)
    assert b"Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    # The plan's line and the progress line only: nothing to complain about.
    assert done.stderr.count(b"\n") == 2 and done.stderr.startswith(b"plan: 1 job(s)")
    assert (read_results(out / "results.csv")["status"] == "ok").all()


def test_compare_still_fails_a_regression_with_stdout_closed():
    done = _bwprof("compare", str(DATA / "sim-a"), str(DATA / "sim-b-slower"),
                   "--fail-below", "5", preexec_fn=_close_stdout)
    assert b"Traceback" not in done.stderr
    assert done.returncode == 1
    assert b"below --fail-below" in done.stderr


@pytest.mark.parametrize(("args", "code"), [
    (TINY, 0),
    (["list"], 0),
    (["info"], 0),
    (["report", str(DATA / "host-ddr-v2"), "--no-plots", "--out", "{tmp}"], 0),
    (["compare", str(DATA / "sim-a"), str(DATA / "sim-b-slower")], 0),
    (["run", "--help"], 0),
    (["--version"], 0),
    (["monitor", "--count", "1"], 2),  # no NVML here: refused, and nothing went to stdout
], ids=["run", "list", "info", "report", "compare", "help", "version", "monitor"])
def test_a_full_stdout_is_one_warning_and_keeps_the_exit_code(tmp_path, args, code):
    if args[0] == "monitor" and os.path.exists("/dev/nvidiactl"):
        pytest.skip("needs a machine without a driver")
    extra = ["--out", str(tmp_path / "run")] if args is TINY else []
    args = [str(tmp_path) if arg == "{tmp}" else arg for arg in args]
    with open("/dev/full", "w") as full:
        done = _bwprof(*args, *extra, stdout=full)
    assert b"Traceback" not in done.stderr
    assert done.returncode == code, done.stderr
    assert done.stderr.count(FULL_WARNING) == (0 if code else 1), done.stderr


@pytest.mark.parametrize(("encoding", "dot"), [("ascii", b"."), ("latin-1", b"\xb7")])
def test_a_narrow_charset_gets_the_table_with_stand_ins(tmp_path, encoding, dot):
    done = _bwprof(*TINY, "--out", str(tmp_path / "run"), env={"PYTHONIOENCODING": encoding})
    assert b"Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    title = done.stdout.splitlines()[0]
    assert b"bwprof summary: " in title and b" " + dot + b" " in title
    done.stdout.decode(encoding)  # every byte is of the stream's charset


def _small_pipe() -> tuple[int, int]:
    """A pipe of one page: a writer of more than 4 KiB blocks until its reader reads."""
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    return read_end, write_end


def _read_line(fd: int) -> bytes:
    """One line, a byte at a time: nothing beyond it is taken from the pipe."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


def test_a_pipe_closed_after_one_line_keeps_exit_0(tmp_path):
    """`bwprof report --rows | head -1`: the table (7 KiB) cannot fit the pipe, so the
    writer is still writing when the reader goes away, and gets EPIPE."""
    read_end, write_end = _small_pipe()
    process = subprocess.Popen([sys.executable, "-m", "bwprof", "report",
                                str(DATA / "h200-quick"), "--rows", "--no-plots", "--out",
                                str(tmp_path)], stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    first = _read_line(read_end)
    os.close(read_end)
    _, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    assert b"Traceback" not in err and b"warning" not in err
    assert first.strip()


def test_a_run_whose_pipe_is_closed_before_it_prints_keeps_exit_0(tmp_path):
    """`bwprof run | true`: every write is EPIPE; before the guard, exit 1 ('a figure
    failed')."""
    read_end, write_end = os.pipe()
    process = subprocess.Popen([sys.executable, "-m", "bwprof", *TINY, "--out",
                                str(tmp_path / "run")], stdout=write_end,
                               stderr=subprocess.PIPE)
    os.close(write_end)
    os.close(read_end)
    _, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    assert b"Traceback" not in err and b"warning" not in err
    assert (read_results(tmp_path / "run" / "results.csv")["status"] == "ok").all()


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_a_folder_name_that_is_not_utf8_is_printed_as_its_own_bytes(tmp_path, encoding):
    """A strict stream (a UTF-8 desktop locale: Python's C.UTF-8 default is lenient) once
    raised UnicodeEncodeError on the surrogate Python decoded the byte 0xff into."""
    out = os.fsdecode(os.fsencode(tmp_path) + b"/r\xff")
    done = _bwprof(*TINY, "--quiet", "--out", out, env={"PYTHONIOENCODING": encoding})
    assert b"Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    verdict, wrote = done.stdout.splitlines()  # --quiet: the verdict, where it wrote
    assert verdict.startswith(b"verdict: ")
    assert wrote == b"wrote " + os.fsencode(tmp_path) + b"/r\xff"
    assert os.path.isfile(os.fsencode(tmp_path) + b"/r\xff/results.csv")


def test_a_closed_stdin_and_stderr_are_reopened_quietly(tmp_path):
    def close_stdin_and_stderr() -> None:
        os.close(0)
        os.close(2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    done = subprocess.run([sys.executable, "-m", "bwprof", *TINY, "--out",
                           str(tmp_path / "run")], stdout=subprocess.PIPE, timeout=180,
                          preexec_fn=close_stdin_and_stderr)
    assert done.returncode == 0
    lines = done.stdout.decode().splitlines()
    assert lines[0].startswith("bwprof summary: ")  # the progress line went nowhere
    assert lines[-1] == f"wrote {tmp_path / 'run'}"
    assert not any(line.startswith("[1/1") for line in lines)


def test_a_stop_signal_while_the_streams_are_swapped_waits_until_they_are(stop_signals,
                                                                           monkeypatch):
    """Found under load (about 1 run in 70 of an interrupt right after the handlers went
    in): a signal whose KeyboardInterrupt was raised inside stderr's reconfigure (Python
    code: the new encoder's __init__) left stderr unable to write, and the run exited 130
    without its line. The signal now waits for both streams to be guarded."""

    class Torn(io.TextIOWrapper):
        finished = False

        def reconfigure(self, **options):
            signal.raise_signal(signal.SIGTERM)  # its handler runs at the next bytecode
            super().reconfigure(**options)
            self.finished = True

    stderr = Torn(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    with pytest.raises(KeyboardInterrupt):
        stdio.install()
    assert stderr.finished
    assert isinstance(sys.stderr, stdio.GuardedStream)
    assert isinstance(sys.stdout, stdio.GuardedStream)
