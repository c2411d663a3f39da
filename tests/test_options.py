"""What a notebook or a file hands bwprof, checked as the command line checks it: finite
numbers, bounded digits, NUMBA_NUM_THREADS read without numba, CPU lists of sane size, and
console sizes within range whatever COLUMNS holds."""

from __future__ import annotations

import io
import math
import sys

import pytest

from bwprof.errors import BwprofError


@pytest.mark.parametrize("interval", [math.nan, math.inf, -math.inf, "50", None, True,
                                      10**400])
def test_bwprof_run_refuses_a_sample_interval_that_is_no_finite_number(tmp_path, interval):
    import bwprof

    with pytest.raises(BwprofError, match=r"^--sample-interval must be a (finite )?number"):
        bwprof.run(cases="ddr_copy", size="1MiB", repeats=2, threads=1,
                   sample_interval_ms=interval, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_check_options_takes_numba_s_thread_limit_from_the_environment(monkeypatch):
    """Without numba loaded the variable is the limit; once loaded, numba's own setting
    (what set_num_threads allows) is."""
    from bwprof import api, numbaenv
    from bwprof.system import host_info

    host = host_info()
    options = dict(cases="ddr_copy", preset="quick", repeats=2, threads=None, size="1MiB",
                   sample_interval_ms=50, file_format="csv")
    monkeypatch.setitem(sys.modules, "numba", None)  # as before numba's first import
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    plan, _ = api.check_options(host, **options)
    assert plan.threads == (1,)
    monkeypatch.setenv("NUMBA_NUM_THREADS", "0")
    with pytest.raises(BwprofError, match=r"^NUMBA_NUM_THREADS='0' is not a thread count"):
        api.check_options(host, **options)
    monkeypatch.undo()
    import numba

    assert numbaenv.thread_limit() == numba.config.NUMBA_NUM_THREADS


@pytest.mark.parametrize(("raw", "expected"), [
    (None, None), ("1", 1), (" 8 ", 8), ("+2", 2), ("65536", 65536)])
def test_numba_thread_settings_numba_accepts(raw, expected):
    from bwprof.numbaenv import num_threads_setting

    assert num_threads_setting({} if raw is None else {"NUMBA_NUM_THREADS": raw}) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "", " ", "2.0", "65537", "9" * 5000])
def test_numba_thread_settings_numba_refuses_are_one_short_line(raw):
    from bwprof.numbaenv import num_threads_setting

    with pytest.raises(BwprofError, match=r"^NUMBA_NUM_THREADS=") as info:
        num_threads_setting({"NUMBA_NUM_THREADS": raw})
    assert "\n" not in str(info.value) and len(str(info.value)) < 250


@pytest.mark.parametrize("text", ["0-99999999999", "0-70000", "3-1", "1" * 5000])
def test_a_cpu_list_of_impossible_cpus_is_malformed_not_built(text):
    from bwprof.cpulist import parse_cpu_list

    assert parse_cpu_list(text) is None


def test_a_cpu_list_up_to_the_largest_cpu_number_is_read():
    from bwprof.cpulist import MAX_CPU, parse_cpu_list

    assert parse_cpu_list(f"0,{MAX_CPU}") == frozenset({0, MAX_CPU})


def test_shorten_keeps_a_message_one_short_line():
    from bwprof.coerce import shorten

    assert shorten("abc") == "abc"
    assert shorten("9" * 5000) == "9" * 28 + "..." + "9" * 6 + " (5000 characters)"
    assert shorten(10**5000) == "a number of about 5001 digits"  # str() would raise


class _Stream(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize(("columns", "piped", "terminal"), [
    (None, 160, 80),  # no terminal size to read from a StringIO: 80
    ("0", 60, 60), ("3", 60, 60), ("-5", 160, 80), ("abc", 160, 80), ("", 160, 80),
    ("100", 100, 100), ("1000000000000", 160, 80), ("5000", 1000, 1000),
])
def test_every_console_width_is_in_range_whatever_columns_says(monkeypatch, columns, piped,
                                                               terminal):
    from bwprof.render.consoles import columns as width

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert width(_Stream(terminal=False), 160) == piped
    assert width(_Stream(terminal=True), 160) == terminal
    assert width(None, 160) == piped


def test_consoles_made_elsewhere_see_tamed_sizes(monkeypatch):
    """typer's help console reads COLUMNS and LINES itself."""
    import os

    from typer import rich_utils

    from bwprof.render.consoles import tame_terminal_sizes

    for name, value in (("COLUMNS", "2"), ("LINES", "9" * 5000), ("TERMINAL_WIDTH", "abc")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", None)
    tame_terminal_sizes()
    assert os.environ["COLUMNS"] == "60" and "LINES" not in os.environ
    assert "TERMINAL_WIDTH" not in os.environ and rich_utils.MAX_WIDTH == 60
