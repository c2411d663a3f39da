from rich.console import Console

from bwprof.report.terminal import failure_lines, not_run_lines, print_summary
from tests.report.test_export import make_row


def _render(rows) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_summary(console, rows)
    return console.export_text()


def test_summary_shows_measured_rows_and_one_line_per_skip_reason():
    rows = [
        make_row(),
        make_row(case="h2d_pinned", status="skipped", note="no GPU", size_bytes=None),
        make_row(case="hbm_triad", status="skipped", note="no GPU", size_bytes=None),
        make_row(case="p2p_copy", status="waived", note="needs two GPUs", size_bytes=None),
    ]
    text = _render(rows)
    assert "ddr_triad" in text and "3.07" in text
    assert "skipped 2 case(s) (h2d_pinned, hbm_triad): no GPU" in text
    assert "waived 1 case(s) (p2p_copy): needs two GPUs" in text


def test_simulated_rows_never_show_a_figure():
    text = _render([make_row(backend="simulated", gbps_best=123.456, gbps_median=99.5)])
    assert "simulated" in text
    assert "123.46" not in text and "99.50" not in text


def test_failures_are_listed():
    rows = [make_row(status="invalid", note="validation failed: 1 of 2"), make_row()]
    assert failure_lines(rows) == ["invalid: ddr_triad 2 thr 1 KiB - validation failed: 1 of 2"]
    assert not_run_lines(rows) == []
