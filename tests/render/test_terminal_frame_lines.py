"""The overlap, pipeline and not-run lines read from a frame's columns (issue 36: a fleet's
quarter of a million overlap rows as ResultRows cost its report seconds) say what they said
when made of ResultRows one at a time (`tests.render.reference_lines`), on rows of every
kind the lines tell apart: phases, directions, statuses, simulated, missing and tied
figures, rows out of order."""

from __future__ import annotations

import random

import pytest

from bwprof.analysis.run import Run
from bwprof.analysis.summary import build_summary
from bwprof.render.terminal import fleet_overlap_lines, not_run_lines, overlap_lines
from bwprof.schema.rows import ResultRow
from bwprof.schema.table import results_frame
from tests.render import reference_lines as reference
from tests.store.test_export import make_row


def _rows(seed: int, count: int = 120) -> list[ResultRow]:
    pick = random.Random(seed).choice
    rows = []
    for _ in range(count):
        status = pick(["ok", "ok", "ok", "invalid", "skipped", "waived", "error"])
        measured = status in ("ok", "invalid")
        gbps = pick([None, 0.0, 40.0, 80.0, 80.0, 123.456]) if measured else None
        rows.append(make_row(
            case=pick(["overlap_h2d_compute", "overlap_bidir_compute", "pipeline_chunked",
                       ""]),
            backend=pick(["cuda", "cuda", "simulated"]), device=pick(["gpu0", "gpu1", "n1:gpu0"]),
            threads=None, size_bytes=pick([None, 16 << 20, 64 << 20]),
            phase=pick(["alone", "alone", "paired", "concurrent", "pipeline", "overlapped", ""]),
            direction=pick(["h2d", "d2h", "both", "compute", "h2d+compute"]),
            status=status, note=pick(["", "no GPU", "needs two GPUs"]),
            time_median_s=pick([None, 0.004, 0.0053, 1e-7]),
            gbps_median=gbps, gbps_best=gbps if gbps is not None else None,
            overlap_efficiency=pick([None, 0.5, 0.93]), streams=pick([None, 1, 2, 4])))
    return rows


@pytest.mark.parametrize("seed", range(40))
def test_lines_of_the_frame_are_those_of_the_rows(seed: int) -> None:
    rows = _rows(seed)
    frame = results_frame(rows)
    assert overlap_lines(rows) == reference.overlap_lines(rows)
    assert overlap_lines(frame) == reference.overlap_lines(rows)
    assert not_run_lines(frame) == reference.not_run_lines(rows)
    summary = build_summary(frame)
    cases = fleet_overlap_lines(summary, [])  # the per-case lines read the summary only
    assert fleet_overlap_lines(summary, frame)[len(cases):] == reference.pipeline_digest(rows)


def test_a_run_read_back_says_the_lines_of_its_rows() -> None:
    """`report_lines` of a Run read from a frame (no ResultRows at hand) against the
    reference's lines of every row: `Run.line_rows` now holds only the rare rows."""
    from bwprof.render.terminal import report_lines

    rows = _rows(7, 400)
    lines = report_lines(Run.from_frame(results_frame(rows)))
    assert lines["overlap"] == reference.overlap_lines(rows)
    assert lines["not_run"] == reference.not_run_lines(rows)
    assert lines == report_lines(Run.from_rows(rows))


def test_an_empty_frame_has_no_lines() -> None:
    import pandas as pd

    assert overlap_lines(pd.DataFrame()) == []
    assert not_run_lines(pd.DataFrame()) == []
