"""The one Run object: `bwprof run` and `bwprof.load(DIR)` give the same Run, and every output
of a command shares what is derived from it: one summary, one judgement, one set of ceilings."""

from __future__ import annotations

import pandas as pd
import pytest

import bwprof
from bwprof.analysis import judge, roofline, summary
from bwprof.analysis.run import Run
from bwprof.cli import main
from bwprof.store.runfolder import load_run
from tests.conftest import DATA


@pytest.fixture
def derivations(monkeypatch) -> dict[str, int]:
    """How often each derivation ran from here on: the summary, a judgement, the ceilings."""
    counts = {"summary": 0, "judge": 0, "ceilings": 0}

    def counted(name: str, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(summary, "build_summary", counted("summary", summary.build_summary))
    monkeypatch.setattr(judge, "judge_run", counted("judge", judge.judge_run))
    monkeypatch.setattr(roofline, "ceilings", counted("ceilings", roofline.ceilings))
    return counts


def test_report_with_its_page_and_plots_derives_each_part_once(tmp_path, derivations):
    """`report --html` prints the summary, writes summary.csv, the plots (the summary plot
    shades accept's bands) and the page (its verdict table, the roofline): one of each."""
    assert main(["report", str(DATA / "h200-quick"), "--html", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").is_file() and (tmp_path / "summary_vs_peak.png").is_file()
    assert derivations == {"summary": 1, "judge": 1, "ceilings": 1}


def test_a_run_derives_on_first_use_and_keeps_it(derivations):
    run = bwprof.load(DATA / "h200-quick")
    assert isinstance(run, Run) and derivations == {"summary": 0, "judge": 0, "ceilings": 0}
    assert run.summary is run.summary and run.checks is run.checks
    assert run.ceilings is run.ceilings
    assert derivations == {"summary": 1, "judge": 1, "ceilings": 1}


def test_a_spec_is_judged_once_and_the_built_in_bands_are_the_default():
    from bwprof.analysis.spec import Spec

    run = bwprof.load(DATA / "h200-quick")
    spec = Spec()
    assert run.judged(spec) is run.judged(spec)
    assert [c.as_dict() for c in run.judged(spec)] == [c.as_dict() for c in run.checks]


def test_a_folder_read_by_the_store_becomes_the_same_run():
    folder = load_run(DATA / "host-ddr")
    run = Run.of(folder)
    assert run.results is folder.results and run.meta is folder.meta
    assert Run.of(run) is run


def test_a_run_measured_here_is_the_run_its_folder_loads(tmp_path, derivations):
    """`bwprof.run(...)` returns the Run `bwprof.load` gives of the folder it wrote: the same
    rows, summary, findings and verdicts, derived from memory, not read back; the summary
    it wrote (summary.csv) is the one it returns."""
    result = bwprof.run(cases="ddr_triad", repeats=2, threads="1", size="1MiB",
                        out=tmp_path / "run", plots=False, telemetry=False)
    assert result.summary is result.summary and derivations["summary"] == 1
    loaded = bwprof.load(tmp_path / "run")
    assert isinstance(result, Run) and result.run_dir == loaded.path == tmp_path / "run"
    assert [r.case for r in result.rows] == [r.case for r in loaded.rows]
    pd.testing.assert_frame_equal(result.summary, loaded.summary, check_dtype=False)
    assert len(result.findings) == len(loaded.findings if loaded.findings is not None else [])
    assert [c.as_dict() for c in result.checks] == [c.as_dict() for c in loaded.checks]


def test_a_run_of_rows_at_hand_needs_no_folder():
    from tests.store.test_export import make_row

    run = Run.from_rows([make_row()])
    assert run.path is None and run.label == "the run" and run.rows[0].case == "ddr_triad"
    assert run.summary["case"].iloc[0] == "ddr_triad"


def test_new_rows_or_metadata_forget_what_was_derived_from_the_old():
    from dataclasses import replace

    run = bwprof.load(DATA / "h200-quick")
    before, title = run.summary, run.machine
    assert run.checks
    assert run.meta.host is not None
    run.meta = replace(run.meta, host=replace(run.meta.host, hostname="another-box"))
    assert run.machine != title and "another-box" in run.machine
    run.results = run.results[run.results["case"] == "ddr_triad"]
    assert run.summary is not before and "hbm_triad" not in set(run.summary["case"])


def test_the_report_lines_read_only_the_rows_they_can_show_and_say_what_every_row_gives():
    """A run read back makes ResultRows only of the rare rows a report line names one by
    one (failed, simulated, busy, latency under load): the lines are those every row gives,
    the overlap and not-run lines read from the frame's columns, and a plain ok row or an
    overlap phase's (most of a fleet's million) is never made one."""
    from bwprof.analysis.summary import is_loaded
    from bwprof.render import terminal

    run = bwprof.load(DATA / "h200-quick")
    results = run.results.copy()
    results.loc[results.index[0], "status"] = "error"  # a failure line, from an ok case
    results.loc[results.index[1], "flags"] = "busy_host"
    run.results = results
    shown = run.line_rows
    assert 0 < len(shown) < len(run.rows)
    assert all(r.status in ("invalid", "error") or r.backend == "simulated"
               or "busy_host" in r.flags or is_loaded(r.phase) for r in shown)
    for lines in (terminal.loaded_latency_lines, terminal.failure_lines,
                  terminal.busy_lines, terminal.simulated_lines):
        assert lines(shown) == lines(run.rows)
    for lines in (terminal.overlap_lines, terminal.not_run_lines):
        assert lines(run.results) == lines(run.rows)
    assert terminal.failure_lines(shown) and terminal.busy_lines(shown)
    assert terminal.overlap_lines(run.results) and not terminal.overlap_lines(shown)
    said = terminal.report_lines(run)
    assert said["overlap"] == terminal.overlap_lines(run.rows)
    assert said["not_run"] == terminal.not_run_lines(run.rows)


def test_overlap_rows_are_line_rows_only_where_a_line_names_them():
    """No report line reads an overlap phase's row as a ResultRow (the overlap lines read
    the frame's columns; a fleet's are a quarter of a million): it becomes a line row only
    where it failed, as a failure line names it."""
    from bwprof.render import terminal

    run = bwprof.load(DATA / "h200-quick")
    phased = run.results.index[run.results["phase"].isin(["overlapped", "alone",
                                                          "concurrent"])]
    assert len(phased) > 1
    assert not [r for r in run.line_rows if r.phase]
    results = run.results.copy()
    results.loc[phased[0], "status"] = "error"
    run.results = results
    (failed,) = [r for r in run.line_rows if r.phase]
    assert failed.status == "error"
    assert terminal.failure_lines(run.line_rows) == terminal.failure_lines(run.rows)
    assert terminal.overlap_lines(run.results) == terminal.overlap_lines(run.rows)
