"""The command line, through typer's test runner and, for signals, as a real process."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bwprof import __version__
from bwprof.cases import CASES
from bwprof.cli import app, main
from bwprof.schema.table import read_results

runner = CliRunner()
SMALL = ["--size", "1MiB", "--repeats", "3", "--threads", "1"]


def test_run_writes_results_and_prints_the_summary(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--cases", "ddr_triad,h2d_pinned", "--out", str(out),
                                 *SMALL])
    assert result.exit_code == 0, result.output
    assert "ddr_triad" in result.output
    assert f"wrote {out}" in result.output
    frame = read_results(out / "results.csv")
    assert frame.loc[0, "status"] == "ok"
    assert json.loads((out / "system.json").read_text())["command_line"][0] == "bwprof"


def test_quiet_prints_only_the_verdict_and_where_it_wrote(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--cases", "ddr_copy", "--quiet", "--out", str(out),
                                 *SMALL])
    assert result.exit_code == 0
    verdict, wrote = result.output.strip().splitlines()
    assert verdict.startswith("verdict: ") and wrote == f"wrote {out}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cases", "nope"], "unknown case or prefix 'nope'; give case keys or prefixes"),
        (["--repeats", "1"], "--repeats must be from 2"),
        (["--threads", "999"], "--threads 999 is outside"),
        (["--threads", "a,b"], "--threads expects"),
        # issue 37: an empty count between commas was dropped and the run went on
        (["--threads", "1,,2"], "--threads '1,,2' has an empty entry between commas; give a "
                                "list such as '1,2'"),
        (["--size", "12Q"], "malformed size '12Q'"),
        (["--preset", "huge"], "unknown preset 'huge'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--out", str(out), *args])
    assert result.exit_code == 2
    assert result.output.strip().startswith(f"error: {message}")
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_non_empty_or_unwritable_out_is_refused(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    result = runner.invoke(app, ["run", "--out", str(tmp_path / "busy"), *SMALL])
    assert result.exit_code == 2
    assert "exists and is not empty" in result.output
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["keep.txt"]
    result = runner.invoke(app, ["run", "--out", str(tmp_path / "busy" / "keep.txt" / "x")])
    assert result.exit_code == 2
    assert "cannot create output folder" in result.output and "Not a directory" in result.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["run", "--repeats", "abc"], "Invalid value for '--repeats'"),
     (["run", "--repeats", "2.5"], "Invalid value for '--repeats'"),  # issue 37
     (["run", "--bogus"], "No such option: --bogus"),
     (["frobnicate"], "No such command")],
)
def test_usage_errors_are_one_line_from_main(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err
    assert len(err.splitlines()) == 1


def test_failed_validation_exits_1(monkeypatch, tmp_path):
    from bwprof.host import stream

    def broken(a, b, c, scalar):
        c[:] = 0.0

    monkeypatch.setitem(stream.KERNELS, "copy",
                        stream.StreamKernel("copy", broken, stream.KERNELS["copy"].replay))
    result = runner.invoke(app, ["run", "--cases", "ddr_copy", "--out", str(tmp_path / "r"),
                                 *SMALL])
    assert result.exit_code == 1
    assert "invalid: ddr_copy" in result.output
    assert "failed validation" in result.output


def test_failed_validation_exits_1_with_json_too(monkeypatch, tmp_path):
    from bwprof.host import stream

    def broken(a, b, c, scalar):
        c[:] = 0.0

    monkeypatch.setitem(stream.KERNELS, "copy",
                        stream.StreamKernel("copy", broken, stream.KERNELS["copy"].replay))
    result = runner.invoke(app, ["run", "--cases", "ddr_copy", "--out", str(tmp_path / "r"),
                                 "--json", *SMALL])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)  # stdout is the JSON alone
    assert payload["lines"]["failed"][0].startswith("invalid: ddr_copy")
    assert "failed validation" in result.stderr


# Catches: `bwprof list` loading pandas, Numba and CuPy (through bwprof.api and the GPU
# executor) to say what a machine without a driver cannot run: 1.5-2 s for a table (issue 36)
def test_list_loads_no_pandas_numba_or_cupy_without_a_driver():
    from bwprof.availability import has_nvidia_driver

    if has_nvidia_driver():
        pytest.skip("a driver is present: list asks the GPU executor, which loads them")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    code = ("import sys; from bwprof.entry import main; sys.argv = ['bwprof', 'list']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'numba', 'cupy', 'pyarrow', 'matplotlib')"
            " if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert "no NVIDIA driver" in done.stdout
    assert done.stderr.splitlines()[-1] == "[]"


def test_list_shows_every_case_and_whether_it_runs_here():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    for case in CASES:
        assert any(line.split()[:1] == [case.key] for line in lines), case.key
    ddr = next(line for line in lines if line.startswith("ddr_triad "))
    assert " yes " in ddr and " traffic " in ddr
    # A case of another metric says what it measures instead of a byte convention.
    assert " latency " in next(line for line in lines if line.startswith("lat_host "))
    # A case that cannot run names a footnote, and the footnote says why.
    mpi = next(line for line in lines if line.startswith("net_p2p "))
    mark = next(word for word in mpi.split() if word.startswith("no"))
    assert any(line.startswith(f"{mark}: needs an MPI launch") for line in lines)


def test_info_describes_the_host():
    result = runner.invoke(app, ["info"])
    assert result.exit_code == 0
    assert "cpu " in result.output and "gpus " in result.output
    payload = json.loads(runner.invoke(app, ["info", "--json"]).output)
    assert payload["host"]["usable_cpus"] >= 1


def test_info_names_the_commit_bwprof_runs_from(monkeypatch):
    from bwprof import _version

    monkeypatch.setattr(_version, "git_commit", lambda: "c0ffee" * 6 + "abcd-dirty")
    result = runner.invoke(app, ["info"])
    assert f"bwprof      {__version__} (commit c0ffeec0ffee-dirty)" in result.output
    payload = json.loads(runner.invoke(app, ["info", "--json"]).output)
    assert payload["bwprof_version"] == __version__
    assert payload["bwprof_commit"] == "c0ffee" * 6 + "abcd-dirty"
    monkeypatch.setattr(_version, "git_commit", lambda: None)  # installed from a wheel
    assert f"bwprof      {__version__}\n" in runner.invoke(app, ["info"]).output


def test_version():
    assert runner.invoke(app, ["--version"]).output.strip() == f"bwprof {__version__}"


def test_info_describes_each_gpu_in_one_line():
    from bwprof.api import gpu_executor
    from bwprof.cli import _gpu_line

    executor, gpus = gpu_executor(simulate=True)
    executor.close()
    line = _gpu_line(gpus.devices[1])
    assert line.startswith("  gpu1      simulated GPU")
    assert "2 copy engines" in line and "L2 1 MiB" in line and "HBM ?" in line


def test_info_adds_what_nvml_knows_on_a_second_line():
    from bwprof.cli import _nvml_line

    assert _nvml_line({}) == ""
    line = _nvml_line({"driver_version": "580.159.03", "ecc_mode_current": True,
                       "nvlink_links_up": 18, "uuid": None})
    assert line.strip() == "driver 580.159.03, ECC True, NVLink links 18"


def test_mpi_without_mpi4py_is_one_line_saying_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    result = runner.invoke(app, ["run", "--mpi", "--out", str(tmp_path / "r"), *SMALL])
    assert result.exit_code == 2
    assert result.output.startswith("error: a fleet run (--mpi, or several ranks started by "
                                    "mpirun or srun) needs mpi4py")
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
    bad = runner.invoke(app, ["run", "--mpi-timeout", "0", *SMALL])
    assert bad.exit_code == 2 and "--mpi-timeout must be positive" in bad.output


# Catches: --mpi-timeout 1e308 is finite, so accepted, and a rank waits for ever: the hang
# the finite check was meant to prevent
@pytest.mark.parametrize("value", ["604800.5", "1e7", "1e308"])
def test_an_mpi_timeout_past_a_week_is_one_line(capsys, tmp_path, value):
    out = tmp_path / "r"
    assert main(["run", "--mpi-timeout", value, "--out", str(out), *SMALL]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: --mpi-timeout must be at most 604800 seconds (7 days), got "
                   f"{float(value):g}: a rank that waits longer for the others is a hang\n")
    assert not out.exists()


def test_an_mpi_timeout_of_exactly_a_week_is_taken(monkeypatch, tmp_path):
    from bwprof import cli

    seen = []
    monkeypatch.setattr(cli, "_measure", lambda out, options, fleet, quiet: seen.append(1))
    assert main(["run", "--mpi-timeout", "604800", "--out", str(tmp_path / "r"), *SMALL]) == 0
    assert seen == [1]


def test_help_keeps_the_defaults_it_names():
    text = runner.invoke(app, ["run", "--help"]).output
    assert "(default: all)" in text and "(default: 4x LLC)" in text


def _fixed_choices():
    from bwprof.analysis.compare import BY_CHOICES
    from bwprof.analysis.model import DTYPE_BYTES
    from bwprof.plan import PRESETS
    from bwprof.store.formats import FORMATS

    return [(["run"], "--preset", list(PRESETS)), (["run"], "--format", list(FORMATS)),
            (["report"], "--format", list(FORMATS)), (["report"], "--model", list(DTYPE_BYTES)),
            (["compare"], "--format", list(FORMATS)), (["compare"], "--by", list(BY_CHOICES)),
            (["accept"], "--format", list(FORMATS))]


# Catches: a value added to (or renamed in) the set an option is checked against while its
# --help still names the old ones (the help text is written in cli.py, which imports none of
# these modules so as to start fast; the check stays where the values live, one line on error)
@pytest.mark.parametrize(("command", "option", "choices"), _fixed_choices(),
                         ids=lambda value: value if isinstance(value, str) else None)
def test_help_shows_every_choice_of_an_option_with_a_fixed_set(command, option, choices):
    text = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).output
    block = text.split(f" {option} ", 1)[1].split("│ --", 1)[0]  # the option's rows
    words = re.findall(r"[\w]+", block)
    assert all(choice in words for choice in choices), block


def test_an_interrupt_before_the_first_measurement_says_so(monkeypatch, tmp_path):
    """Ctrl-C outside the measuring loop: one line and exit 130, not a silent exit."""
    from bwprof import api

    def interrupted(**_options):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "run", interrupted)
    result = runner.invoke(app, ["run", "--out", str(tmp_path / "run")])
    assert result.exit_code == 130
    assert result.output.strip() == ("interrupted before the first measurement: nothing was "
                                     "written")
    # A second Ctrl-C while a run is finishing: its folder holds what it wrote.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.csv").write_text("run_id\n")
    result = runner.invoke(app, ["run", "--out", str(tmp_path / "run")])
    assert result.exit_code == 130
    assert result.output.strip() == (f"interrupted before the run finished: what it wrote is "
                                     f"in {tmp_path / 'run'}")


def test_an_interrupt_in_any_command_is_one_line_and_exit_130(monkeypatch, capsys):
    from bwprof import saved as runreport

    def interrupted(*_args, **_options):
        raise KeyboardInterrupt

    monkeypatch.setattr(runreport, "make_run_report", interrupted)
    assert main(["report", "anywhere"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


@pytest.mark.parametrize(("mode", "numpy_asks", "text"), [
    ("madvise", True, "transparent huge pages 'madvise': host arrays get 2 MiB pages where "
                      "the kernel has them free"),
    ("madvise", False, "transparent huge pages 'madvise': host arrays get 4 KiB pages"),
    ("never", True, "transparent huge pages 'never': host arrays get 4 KiB pages"),
    ("always", False, "transparent huge pages 'always': host arrays get 2 MiB pages where "
                      "the kernel has them free"),
    (None, True, "unknown (no /sys/kernel/mm/transparent_hugepage)"),
])
def test_info_says_what_pages_host_arrays_get(mode, numpy_asks, text):
    from bwprof.cli import _hugepage_text

    assert _hugepage_text(mode, numpy_asks) == text


def test_tables_for_a_log_or_pipe_are_wide_and_plain(monkeypatch):
    """rich lays out 80 columns where stdout is no terminal: a summary title with a real CPU
    name would wrap in a log. Piped output gets PIPED_COLUMNS unless COLUMNS says otherwise;
    a fleet rank (plain) also gets no colour codes."""
    from bwprof import cli

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(cli.sys.stdout, "isatty", lambda: False, raising=False)
    assert cli._stdout_console().width == cli.PIPED_COLUMNS
    # A fleet rank's stdout is mpirun's pseudo-terminal: a terminal, and still plain.
    monkeypatch.setattr(cli.sys.stdout, "isatty", lambda: True, raising=False)
    plain = cli._stdout_console(plain=True)
    assert plain.width == cli.PIPED_COLUMNS and not plain.is_terminal
    assert plain.color_system is None
    monkeypatch.setenv("COLUMNS", "100")
    assert cli._stdout_console().width == 100



@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="needs a machine without a driver")
@pytest.mark.parametrize("debug", ["1", ""])
def test_bwprof_debug_shows_bwprofs_log_on_stderr(debug):
    """Without a driver, monitor's NVML layer logs why it is off; only BWPROF_DEBUG=1 shows it."""
    done = subprocess.run([sys.executable, "-m", "bwprof", "monitor", "--count", "1"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BWPROF_DEBUG": debug})
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[-1].startswith("error: nothing to monitor: NVML unavailable")
    assert any(line.startswith("bwprof.nvml: NVML unavailable") for line in lines) == (debug == "1")


def test_debug_logging_writes_to_stderr_as_it_is_at_each_line(monkeypatch):
    """A second command in one process (a notebook, these tests) must not write to the first
    one's stream, closed by then; and it adds no second handler."""
    import io
    import logging

    from bwprof import cli

    logger = logging.getLogger("bwprof")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers.clear()
    try:
        cli._debug_logging()
        assert logger.handlers == []  # not asked for
        monkeypatch.setenv("BWPROF_DEBUG", "1")
        first, second = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stderr", first)
        cli._debug_logging()
        logging.getLogger("bwprof.test").info("one")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        cli._debug_logging()
        logging.getLogger("bwprof.test").info("two")
        assert second.getvalue() == "bwprof.test: two\n"
        assert len(logger.handlers) == 1 and logger.propagate is False
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]


# Any COLUMNS or LINES, NaN and huge numbers, NUMBA_* variables and paths: one line or a
# normal run, never a traceback.

TINY = ["run", "--cases", "ddr_copy", "--repeats", "2", "--size", "1MiB", "--threads", "1",
        "--no-plots"]
ODD_SIZES = ["0", "1", "2", "3", "8", "-5", "abc", "", "1000000000000", "9" * 5000]
HUGE = "9" * 5000


@pytest.mark.parametrize("columns", ODD_SIZES)
def test_any_columns_value_gives_a_run_its_table(monkeypatch, capsys, tmp_path, columns):
    from bwprof.render.consoles import MAX_COLUMNS

    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("LINES", columns)
    assert main([*TINY, "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "bwprof summary" in out and out.splitlines()[-1] == f"wrote {tmp_path / 'run'}"
    assert max(len(line) for line in out.splitlines()) <= MAX_COLUMNS


@pytest.mark.parametrize("columns", ODD_SIZES)
@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"]])
def test_any_columns_value_gives_a_readable_help_screen(monkeypatch, capsys, columns, argv):
    from bwprof.render.consoles import MAX_COLUMNS

    monkeypatch.setenv("COLUMNS", columns)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Usage: bwprof" in out
    assert ("--sample-interval" if argv[0] == "run" else "compare") in out
    assert max(len(line) for line in out.splitlines()) <= MAX_COLUMNS


def test_a_terminal_width_typer_cannot_read_is_ignored():
    done = subprocess.run([sys.executable, "-m", "bwprof", "--help"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "TERMINAL_WIDTH": "abc"})
    assert "Traceback" not in done.stderr
    assert done.returncode == 0 and "Usage: bwprof" in done.stdout


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
@pytest.mark.parametrize("option", [["run", "--sample-interval"], ["run", "--mpi-timeout"],
                                    ["run", "--budget"], ["monitor", "--interval"]])
def test_every_float_option_refuses_nan_and_infinity(monkeypatch, capsys, tmp_path, option,
                                                     value):
    monkeypatch.chdir(tmp_path)
    assert main([*option, value]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: Invalid value for '{option[1]}': must be a finite number")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--threads", "--size", "--repeats", "--preset"])
def test_a_number_of_thousands_of_digits_is_one_short_line(capsys, tmp_path, option):
    assert main(["run", option, HUGE, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert len(err) < 300
    assert not (tmp_path / "run").exists()


def _bwprof(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bwprof", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


@pytest.mark.parametrize("value", ["0", "-1", "abc", ""])
def test_a_numba_thread_count_numba_refuses_is_one_line(value):
    done = _bwprof("list", NUMBA_NUM_THREADS=value)
    assert "Traceback" not in done.stderr
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: NUMBA_NUM_THREADS={value!r} is not a thread count numba accepts; set it to a "
        f"whole number from 1 to 65536, or unset it (numba then uses every CPU this process "
        f"may use)"]


@pytest.mark.parametrize("command", [["info"], ["kernels"], TINY])
def test_every_command_that_loads_numba_checks_its_thread_count_first(tmp_path, command):
    out = ["--out", str(tmp_path / "run")] if command is TINY else []
    done = _bwprof(*command, *out, NUMBA_NUM_THREADS="0")
    assert "Traceback" not in done.stderr
    assert done.returncode == 2
    assert done.stderr.startswith("error: NUMBA_NUM_THREADS='0' is not a thread count")
    assert len(done.stderr.splitlines()) == 1


def test_a_numba_variable_numba_cannot_parse_is_one_line():
    done = _bwprof("list", NUMBA_DEVELOPER_MODE="abc")
    assert "Traceback" not in done.stderr
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: NUMBA_DEVELOPER_MODE='abc' is not a value numba can read; fix or unset it"]


needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                    reason="needs two usable CPUs")


@needs_two_cpus
def test_more_threads_than_numba_allows_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    done = _bwprof(*TINY[:-3], "--threads", "2", "--no-plots", "--out", str(out),
                   NUMBA_NUM_THREADS="1")
    assert "Traceback" not in done.stderr
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --threads 2 is more than the 1 thread(s) NUMBA_NUM_THREADS=1 lets numba run; "
        "set NUMBA_NUM_THREADS=2 or more (or unset it), or ask for --threads 1 at most"]
    assert not out.exists()


@needs_two_cpus
def test_the_default_thread_count_is_capped_at_numba_and_says_so(tmp_path):
    out = tmp_path / "run"
    args = [arg for arg in TINY if arg not in ("--threads", "1")]
    done = _bwprof(*args, "--quiet", "--out", str(out), NUMBA_NUM_THREADS="1")
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("note: host cases use 1 thread(s), the NUMBA_NUM_THREADS=1 "
                                  "limit, not all")
    assert json.loads((out / "system.json").read_text())["plan"]["threads"] == [1]
    assert (read_results(out / "results.csv")["threads"] == 1).all()


def test_a_tilde_out_is_the_home_folder_for_every_file(monkeypatch, capsys, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    assert main([*TINY, "--quiet", "--out=~/x"]) == 0
    verdict, wrote = capsys.readouterr().out.splitlines()  # --quiet: these two lines
    assert verdict.startswith("verdict: ") and wrote == f"wrote {home / 'x'}"
    assert (home / "x" / "results.csv").is_file() and (home / "x" / "summary.csv").is_file()
    assert list(cwd.iterdir()) == []
    # `./~/y` is a folder named ~ here, as the shell means it, not the home folder.
    assert main([*TINY, "--quiet", "--out", "./~/y"]) == 0
    assert (cwd / "~" / "y" / "results.csv").is_file()
    assert sorted(p.name for p in home.iterdir()) == ["x"]


LONG = "a" * 300


@pytest.mark.parametrize(("argv", "option"), [
    ([*TINY, "--out", LONG], "--out"),
    (["report", LONG], "RUN_DIR"),
    (["report", "tests/data/host-ddr-v2", "--out", f"x/{LONG}"], "--out"),
    (["compare", "tests/data/sim-a", LONG], "RUN_DIRS"),
    (["compare", "tests/data/sim-a", "tests/data/sim-b-slower", "--out", LONG], "--out"),
    (["monitor", "--csv", f"{LONG}/samples.csv"], "--csv"),
], ids=["run", "report", "report-out", "compare", "compare-out", "monitor"])
def test_a_name_too_long_for_the_file_system_is_one_line(monkeypatch, capsys, tmp_path,
                                                          argv, option):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: {option}: the name '{LONG[:37]}...' is 300 bytes; the file system allows "
        f"255 per name: give a shorter one"]


def test_the_signal_that_stopped_a_run_is_named(monkeypatch, capsys, tmp_path):
    from bwprof import api, interrupts

    def hung_up(**_options):
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(10_000):  # the handler runs between bytecodes
            pass

    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    interrupts.install()
    try:
        monkeypatch.setattr(api, "run", hung_up)
        assert main([*TINY, "--out", str(tmp_path / "run")]) == 130
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        interrupts.reset()
    assert capsys.readouterr().err.splitlines() == [
        "interrupted (SIGHUP) before the first measurement: nothing was written"]


@pytest.mark.parametrize(("raised", "code", "line"), [
    ("abort", 130, "interrupted"),
    ("output", 3, "error: cannot write summary.csv (No space left on device)"),
])
def test_click_abort_is_an_interrupt_and_output_errors_exit_3(monkeypatch, capsys, raised,
                                                              code, line):
    import typer

    from bwprof import saved as runreport
    from bwprof.errors import OutputError

    def fails(*_args, **_options):
        if raised == "abort":
            raise typer.Abort()
        raise OutputError("cannot write summary.csv (No space left on device)")

    monkeypatch.setattr(runreport, "make_run_report", fails)
    assert main(["report", "tests/data/host-ddr-v2"]) == code
    assert capsys.readouterr().err.splitlines() == [line]


# Catches: a BwprofError that a command did not catch itself (an OutputError from a writer
# deep below) ended in a traceback instead of its one line and exit code
def test_an_error_no_command_caught_is_still_one_line_and_its_code(monkeypatch, capsys):
    from bwprof import availability
    from bwprof.errors import OutputError

    def full(*args, **kwargs):
        raise OutputError("cannot write x.csv: No space left on device")

    monkeypatch.setattr(availability, "case_availability", full)
    assert main(["list"]) == 3
    assert capsys.readouterr().err == "error: cannot write x.csv: No space left on device\n"


@pytest.mark.parametrize("args", [
    ("run", "--cases", "ddr_triad", "--size", "8MiB", "--threads", "1", "--quiet"),
    ("trend", "--store", "/nonexistent-store"),
    ("report", "run"),
])
def test_a_deleted_current_folder_is_one_line_and_exit_2(tmp_path, args):
    """A shell whose folder was deleted: run's default reports/<host>-<time>, trend's
    default reports/trend and a relative RUN_DIR were a FileNotFoundError traceback."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (f"cd {gone} && rmdir {gone} && exec {sys.executable} -m bwprof "
              + " ".join(f"'{a}'" for a in args))
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and "no longer exists" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and not gone.exists()


def test_a_dry_run_prints_the_plan_and_its_cost_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default run folder would be reports/ here
    result = runner.invoke(app, ["run", "--dry-run", "--cases", "ddr_triad,lat_host,h2d_"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("bwprof run --dry-run (nothing is measured): ")
    assert any(re.match(r" ddr_triad +1 +\d+ MiB .* s +\d+ MiB$", line) for line in lines)
    assert any(line.startswith("skipped 5 case(s) (h2d_pinned, h2d_pageable, h2d_all, ...)")
               for line in lines)
    estimate = next(line for line in lines if line.startswith("estimated time: "))
    assert re.match(r"estimated time: \d+ s \(\d+:\d\d\) for \d+ job\(s\)", estimate)
    assert any(line.startswith("peak memory: host ") for line in lines)
    assert list(tmp_path.iterdir()) == []  # no run folder, no reports/


def test_a_dry_run_plans_for_a_described_machine_with_its_budget():
    result = runner.invoke(app, ["run", "--dry-run", "--preset", "quick", "--budget", "90",
                                 "--machine", "tests/shapes/hgx-8xh200.json"])
    assert result.exit_code == 0, result.output
    assert "hgx-8xh200: " in result.output and "8× NVIDIA H200" in result.output
    assert " p2p_copy " in result.output and "--budget 90 s: dropped " in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--machine", "tests/shapes/hgx-8xh200.json"], "--machine plans for a machine described "
                                                     "in a file: it needs --dry-run"),
    (["--dry-run", "--machine", "no-such-file.json"], "cannot read the machine description"),
    (["--dry-run", "--budget", "0"], "--budget must be from 1 to 604800 seconds"),
])
def test_a_dry_run_s_bad_input_is_one_line_and_exit_2(args, message):
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and message in result.output


def test_a_run_says_its_plan_and_budget_before_it_measures(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--cases", "ddr_triad,ddr_copy", "--out", str(out),
                                 "--budget", "1", *SMALL])
    assert result.exit_code == 0, result.output
    assert re.search(r"^plan: 2 job\(s\), about \d+:\d\d by the planner's estimate",
                     result.output, re.MULTILINE)
    assert "--budget 1 s: the smallest plan is estimated at" in result.output
    system = json.loads((out / "system.json").read_text())
    assert system["plan"]["budget_s"] == 1 and system["plan"]["estimate_s"] > 0


# -- issue 35: the answer first, run --json, the P2P matrix ------------------------------------


def test_run_ends_with_the_verdict_and_the_next_step(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--cases", "ddr_copy", "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    *_, verdict, next_step, wrote = result.stdout.strip().splitlines()
    assert verdict.startswith("verdict: ")
    assert next_step.startswith("next: ") and f" {out}`" in next_step  # as the user typed it
    assert wrote == f"wrote {out}"


def test_a_fail_verdict_does_not_change_the_exit_code(monkeypatch, tmp_path):
    """`bwprof accept` is the gate: the verdict line says FAIL and the run still exits 0
    (1 stays a figure that failed validation or raised)."""
    from bwprof.analysis import answer

    monkeypatch.setattr(answer, "answer", lambda run: answer.Answer("FAIL", None, {"FAIL": 1}))
    result = runner.invoke(app, ["run", "--cases", "ddr_copy", "--out", str(tmp_path / "a"),
                                 *SMALL])
    assert result.exit_code == 0, result.output
    assert "verdict: FAIL (1 fail)" in result.stdout
    result = runner.invoke(app, ["run", "--cases", "ddr_copy", "--out", str(tmp_path / "b"),
                                 "--json", *SMALL])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verdict"]["verdict"] == "FAIL"


def test_run_json_prints_the_result_on_stdout_and_progress_on_stderr(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--simulate", "--preset", "quick", "--cases",
                                 "ddr_triad,p2p_copy", "--out", str(out), "--json", *SMALL])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)  # nothing else on stdout
    assert payload["run"]["path"] == str(out) and payload["run"]["state"] == "finished"
    assert payload["run"]["simulated"] is True
    verdict = payload["verdict"]
    assert verdict["verdict"] == "CANNOT_JUDGE" and verdict["simulated"] is True
    assert verdict["line"].startswith("verdict: CANNOT JUDGE — a simulated run")
    p2p, = [row for row in payload["summary"] if row["case"] == "p2p_copy"]
    assert p2p["backend"] == "simulated"  # a simulated figure keeps its label
    assert payload["findings"] == [] and isinstance(payload["notes"], list)
    assert str(out / "summary.csv") in payload["files"]
    assert "[1/" in result.stderr and result.stderr.strip().endswith(f"wrote {out}")
    assert "bwprof summary" not in result.output and "from\\to" not in result.output


def test_run_shows_the_p2p_matrix_where_gpus_copied_to_each_other(tmp_path):
    result = runner.invoke(app, ["run", "--simulate", "--preset", "quick", "--cases",
                                 "p2p_copy", "--out", str(tmp_path / "r"), *SMALL])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith("GPU→GPU copy, GB/s median (p2p_copy") for line in lines)
    row, = [line.split() for line in lines if line.strip().startswith("gpu0 ")]
    assert row == ["gpu0", "-", "sim"]  # simulated: never a number


def test_json_and_dry_run_do_not_go_together(tmp_path):
    result = runner.invoke(app, ["run", "--dry-run", "--json"])
    assert result.exit_code == 2
    assert result.output.startswith("error: --json prints a measured run's result")
