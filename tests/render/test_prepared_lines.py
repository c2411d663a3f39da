"""`bwprof report` makes its lines while results.parquet is written
(`terminal.prepare_report_lines` through `outputs.MEANWHILE`): the next `report_lines` call
of the same run and kind takes them once, as copies; a run changed since, or the other kind
of lines, is made anew."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bwprof import saved
from bwprof.render import terminal
from bwprof.render.terminal import made_report_lines, prepare_report_lines, report_lines

DATA = Path(__file__).resolve().parents[1] / "data"


def test_prepared_lines_are_taken_once_and_only_for_the_same_run(monkeypatch):
    run = saved.load(DATA / "h200-quick")
    made: list[bool] = []

    def counted(run_: object, fleet: bool = False) -> dict[str, list[str]]:
        made.append(fleet)
        return made_report_lines(run_, fleet)  # type: ignore[arg-type]

    monkeypatch.setattr(terminal, "made_report_lines", counted)
    prepare_report_lines(run, False)
    assert made == [False]
    lines = report_lines(run)
    assert made == [False]  # taken, not made again
    assert lines == made_report_lines(run)
    lines["headline"].append("changed by a caller")
    assert report_lines(run) == made_report_lines(run)  # once only: made anew
    assert made == [False, False]

    prepare_report_lines(run, False)
    assert report_lines(run, fleet=True) is not None  # the other kind: made anew
    assert made == [False, False, False, True]

    prepare_report_lines(run, False)
    run.meta = replace(run.meta, run_id="another")  # the run changed since
    assert report_lines(run)["sandbox"] == made_report_lines(run)["sandbox"]
    assert made == [False, False, False, True, False, False]
