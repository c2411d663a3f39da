"""`bwprof compare` reads its folders two at a time (`saved._load_summarized`): the same
runs in the same order, each with its summary built, and errors as reading them one after
the other gives them (the first folder's that fails)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bwprof import saved
from bwprof.errors import BwprofError
from tests.analysis.compare_cases import DATA

FOLDERS = [DATA / "sim-a", DATA / "sim-b-slower", DATA / "sim-c-other-box"]


def test_runs_come_back_in_order_with_their_summaries():
    runs = saved._load_summarized(FOLDERS)
    assert [run.path for run in runs] == [folder.resolve() for folder in FOLDERS]
    assert all("summary" in run.__dict__ for run in runs)  # built in the reading threads


def test_the_first_folders_error_comes_first_even_when_it_fails_last(monkeypatch):
    real = saved._load
    first_failing = threading.Event()

    def slow_first(path: str | Path, option: str) -> saved.Run:
        if Path(path) == FOLDERS[0]:
            time.sleep(0.3)  # the second folder fails well before
            first_failing.set()
            raise BwprofError("first folder is broken")
        if Path(path) == FOLDERS[1]:
            raise BwprofError("second folder is broken")
        return real(path, option)

    monkeypatch.setattr(saved, "_load", slow_first)
    with pytest.raises(BwprofError, match="first folder is broken"):
        saved._load_summarized(FOLDERS)
    assert first_failing.is_set()


def test_a_later_folders_error_is_compares_error(monkeypatch):
    real = saved._load

    def second_fails(path: str | Path, option: str) -> saved.Run:
        if Path(path) == FOLDERS[1]:
            raise BwprofError("second folder is broken")
        return real(path, option)

    monkeypatch.setattr(saved, "_load", second_fails)
    with pytest.raises(BwprofError, match="second folder is broken"):
        saved.compare([str(folder) for folder in FOLDERS])


def test_a_summary_that_fails_is_raised_where_compare_asks_for_it(monkeypatch):
    from bwprof.analysis import run as run_module

    def broken(results: object) -> object:
        raise RuntimeError("summary broke")

    monkeypatch.setattr("bwprof.analysis.summary.build_summary", broken)
    assert run_module  # the Run's summary imports build_summary when it is asked for
    runs = saved._load_summarized(FOLDERS[:2])  # reading itself does not fail
    assert all("summary" not in run.__dict__ for run in runs)
    with pytest.raises(RuntimeError, match="summary broke"):
        saved.compare([str(folder) for folder in FOLDERS[:2]])
