import io
from dataclasses import replace

from rich.console import Console

from bwprof.analysis.run import Run
from bwprof.analysis.summary import build_summary
from bwprof.render.terminal import failure_lines, not_run_lines, print_report
from bwprof.schema.meta import GpusMeta, TelemetryMeta
from bwprof.schema.table import results_frame
from tests.schema.builders import host, meta
from tests.store.test_export import make_row


def _render(rows) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    print_report(console, Run.from_rows(rows))
    return console.export_text()


def test_summary_shows_measured_rows_and_one_line_per_skip_reason():
    rows = [
        make_row(),
        make_row(case="h2d_pinned", status="skipped", note="no GPU", size_bytes=None),
        make_row(case="hbm_triad", status="skipped", note="no GPU", size_bytes=None),
        make_row(case="p2p_copy", status="waived", note="needs two GPUs", size_bytes=None),
    ]
    text = _render(rows)
    assert "ddr_triad" in text and "1.54" in text  # the median (make_row's best is 3.07)
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


def test_overlap_rows_get_their_own_lines_not_table_rows():
    from bwprof.render.terminal import headline_rows, overlap_lines

    common = dict(case="overlap_h2d_compute", backend="cuda", device="gpu0", threads=None,
                  size_bytes=256 << 20)
    rows = [
        make_row(**common, direction="h2d", phase="alone", time_median_s=0.004),
        make_row(**common, direction="compute", phase="alone", time_median_s=0.003),
        make_row(**common, direction="h2d", phase="overlapped", time_median_s=0.0041),
        make_row(**common, direction="h2d+compute", phase="concurrent", time_median_s=0.0042,
                 overlap_efficiency=0.93),
        make_row(case="pipeline_chunked", backend="cuda", device="gpu0", threads=None,
                 size_bytes=64 << 20, direction="h2d", phase="alone", gbps_median=50.0),
        make_row(case="pipeline_chunked", backend="cuda", device="gpu0", threads=None,
                 size_bytes=64 << 20, direction="h2d+compute+d2h", phase="pipeline",
                 streams=2, gbps_median=80.0),
        make_row(case="pipeline_chunked", backend="cuda", device="gpu0", threads=None,
                 size_bytes=16 << 20, direction="h2d+compute+d2h", phase="pipeline",
                 streams=4, gbps_median=60.0),
    ]
    assert headline_rows(rows) == []
    assert overlap_lines(rows) == [
        "overlap_h2d_compute gpu0: overlap efficiency 0.93 (alone h2d 4.00 + compute 3.00 ms,"
        " together 4.20 ms per op)",
        "pipeline_chunked gpu0: best 2 stream(s) x 64 MiB chunks, 80.00 GB/s in + out, "
        "1.60x the H2D copy alone",
    ]
    assert overlap_lines([replace(r, backend="simulated") for r in rows]) == []


def test_a_pipeline_is_held_against_the_copies_in_and_out_at_once_where_measured():
    from bwprof.render.terminal import overlap_lines

    common = dict(case="pipeline_chunked", backend="cuda", device="gpu0", threads=None,
                  size_bytes=64 << 20)
    rows = [make_row(**common, direction="h2d", phase="alone", gbps_median=50.0),
            make_row(**common, direction="both", phase="paired", gbps_median=100.0),
            make_row(**common, direction="h2d+compute+d2h", phase="pipeline", streams=2,
                     gbps_median=80.0)]
    assert overlap_lines(rows) == [
        "pipeline_chunked gpu0: best 2 stream(s) x 64 MiB chunks, 80.00 GB/s in + out, "
        "0.80 of the copies in and out at once"]


def test_a_both_ways_overlap_line_names_the_pair_as_the_copies_part():
    from bwprof.render.terminal import overlap_lines

    common = dict(case="overlap_bidir_compute", backend="cuda", device="gpu0", threads=None,
                  size_bytes=256 << 20)
    rows = [
        make_row(**common, direction="h2d", phase="alone", time_median_s=0.0048),
        make_row(**common, direction="d2h", phase="alone", time_median_s=0.0048),
        make_row(**common, direction="h2d", phase="paired", time_median_s=0.0051),
        make_row(**common, direction="d2h", phase="paired", time_median_s=0.0053),
        make_row(**common, direction="both", phase="paired", time_median_s=0.0053),
        make_row(**common, direction="compute", phase="alone", time_median_s=0.0048),
        make_row(**common, direction="h2d+d2h+compute", phase="concurrent",
                 time_median_s=0.0053, overlap_efficiency=1.0),
    ]
    assert overlap_lines(rows) == [
        "overlap_bidir_compute gpu0: overlap efficiency 1.00 (alone both 5.30 + compute 4.80"
        " ms, together 5.30 ms per op)"]



def test_telemetry_and_finding_lines():
    import pandas as pd

    from bwprof.render.terminal import finding_lines, telemetry_line

    probed = GpusMeta(count=0, reason="no GPU")
    assert telemetry_line(meta(gpus=probed, telemetry=TelemetryMeta(
        enabled=False, reason="no GPU"))) == "telemetry off: no GPU"
    # No GPU case selected: no GPU was probed, and the line would say nothing.
    assert telemetry_line(meta(telemetry=TelemetryMeta(reason="no GPU case selected"))) is None
    assert telemetry_line(meta()) is None  # a run from before telemetry was recorded
    assert telemetry_line(meta(gpus=GpusMeta(count=1), telemetry=TelemetryMeta(
            enabled=True, samples=40, interval_ms=50.0, gpm=("gpu0",)))) == (
        "telemetry: 40 counter sample(s) every 50 ms, joined to every GPU row; GPM on gpu0")
    frame = pd.DataFrame([{"severity": "warning", "device": "gpu1", "what": "PCIe link low",
                           "why": "x", "evidence": "Gen4 x16"}])
    assert finding_lines(frame) == ["warning: gpu1: PCIe link low (Gen4 x16)"]
    assert finding_lines(frame.iloc[0:0]) == []


def test_many_skip_reasons_are_capped():
    from bwprof.render.terminal import MAX_REASON_LINES

    rows = [make_row(case=f"c{i}", status="skipped", note=f"reason {i}", size_bytes=None)
            for i in range(MAX_REASON_LINES + 3)]
    lines = not_run_lines(rows)
    assert len(lines) == MAX_REASON_LINES + 1
    assert lines[-1].startswith("... and 3 more reason(s)")


def test_without_a_gpu_the_reason_is_said_once():
    from bwprof.render.terminal import print_report

    reason = "no NVIDIA driver / no CUDA device found"
    rows = [make_row()] + [make_row(case=c, backend="cuda", status="skipped", note=reason,
                                    size_bytes=None, threads=None, device="")
                           for c in ("h2d_pinned", "hbm_triad", "p2p_copy")]
    console = Console(width=200, record=True, file=io.StringIO())
    print_report(console, Run.from_rows(
        rows, meta(telemetry=TelemetryMeta(enabled=False, reason=reason))))
    assert console.export_text().count(reason) == 1


def test_a_ddr_figure_without_a_peak_says_why_once():
    from bwprof.render.terminal import ddr_peak_line

    system = meta(host=host(ddr_peak_note="SMBIOS memory devices are readable by root only"))
    summary = build_summary(results_frame([make_row()]))
    assert ddr_peak_line(summary, system) == (
        "DDR peak unknown: SMBIOS memory devices are readable by root only")
    with_peak = build_summary(results_frame([make_row(peak_gbps=614.4, pct_of_peak=0.5)]))
    assert ddr_peak_line(with_peak, system) is None
    assert ddr_peak_line(summary, meta()) is None  # no host recorded
    console = Console(width=200, record=True, file=io.StringIO())
    print_report(console, Run.from_rows([make_row()], system))
    assert "DDR peak unknown: SMBIOS" in console.export_text()


def test_a_run_inside_gvisor_says_so_under_the_summary():
    from bwprof.render.terminal import report_lines, sandbox_line

    system = meta(host=host(sandbox="gVisor"))
    line = sandbox_line(system)
    assert line is not None and line.startswith("measured inside a gVisor sandbox: ")
    assert report_lines(Run.from_rows([make_row()], system))["sandbox"] == [line]
    assert sandbox_line(meta(host=host(sandbox=None))) is None
    assert report_lines(Run.from_rows([make_row()], meta()))["sandbox"] == []  # no host recorded


def test_a_summary_title_longer_than_the_table_stays_on_one_line():
    rows = [make_row(gbps_best=20.0, size_bytes=64 << 20)]
    console = Console(width=160, record=True, file=io.StringIO())
    title = "gpu-node-rack07 (Intel(R) Xeon(R) Platinum 8480+) · 8× NVIDIA H200"
    print_report(console, Run.from_rows(rows), title)
    first = console.export_text().splitlines()[0]
    assert first.startswith("bwprof summary: gpu-node-rack07") and "bytes/s)" in first, first


# -- issue 32: bwprof's own errors, noisy and busy figures -------------------------------------


def test_bwprofs_own_error_is_said_to_be_bwprofs_not_the_boxs():
    rows = [make_row(case="lat_host", status="error", device="", threads=None,
                     size_bytes=1 << 30, note="OverflowError: int too big\nto convert"),
            make_row(status="invalid", note="validation failed: 1 of 2")]
    assert failure_lines(rows) == [
        "bwprof error in lat_host 1 GiB: OverflowError: int too big\\x0ato convert; the box "
        "was not judged on it",
        "invalid: ddr_triad 2 thr 1 KiB - validation failed: 1 of 2"]


def test_noisy_and_busy_figures_are_named_in_the_summary_not_only_in_the_file():
    """The summary table shows a headline figure's noisy and busy_host flags, and a line
    says how busy the host was; a quiet, steady run shows neither."""
    busy = make_row(size_bytes=256 << 20, cv=0.13, flags=frozenset({"noisy", "busy_host"}),
                    host_others_pct=63.4, host_steal_pct=2.0)
    text = _render([busy])
    table_row, = [line for line in text.splitlines() if line.startswith(" ddr_triad cpu")]
    assert "noisy busy_host" in table_row
    assert ("busy host: 1 host row(s) measured while other processes took up to 63% of the "
            "measuring cores' time, the hypervisor stole up to 2% (ddr_triad): their figures "
            "are partly the others', and `bwprof accept` does not judge them") in text
    quiet = _render([make_row(size_bytes=256 << 20, cv=0.01, host_others_pct=0.4,
                              host_steal_pct=0.0)])
    assert "busy" not in quiet and "noisy" not in quiet and "flags" not in quiet


# -- issue 35: the answer first, the P2P matrix ------------------------------------------------


def _p2p(source: int, target: int, gbps: float, size: int = 256 << 20,
         backend: str = "cuda", status: str = "ok"):
    return make_row(case="p2p_copy", backend=backend, device=f"gpu{source}->gpu{target}",
                    memory="hbm", direction="p2p", size_bytes=size, threads=None,
                    byte_convention="copy", gbps_median=gbps, gbps_best=gbps * 1.5,
                    status=status, note="")


def _matrix_text(rows, width: int = 160) -> list[str]:
    from bwprof.render.terminal import p2p_matrix_table

    matrix = p2p_matrix_table(Run.from_rows(rows).results)
    assert matrix is not None
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(matrix)
    return console.export_text().splitlines()


def _cells(lines: list[str]) -> dict[str, list[str]]:
    """The matrix's rows by source GPU: the cells, one per destination GPU."""
    return {line.split()[0]: line.split()[1:] for line in lines
            if line.strip().startswith("gpu")}


def test_the_p2p_matrix_is_source_by_destination_at_the_matrix_size_like_nvbandwidth():
    """Eight GPUs: a cell per ordered pair, its median (never the best) at the size every
    pair was measured at (the first pair's sweep left out), '-' on the diagonal and for the
    pair not measured."""
    gbps = {(a, b): 300.0 + 10 * a + b for a in range(8) for b in range(8) if a != b}
    rows = [_p2p(a, b, value) for (a, b), value in gbps.items() if (a, b) != (3, 5)]
    rows.append(_p2p(0, 1, 12.5, size=1 << 20))  # the first pair's sweep
    rows.append(_p2p(3, 5, 999.0, status="skipped"))
    lines = _matrix_text(rows)
    assert lines[0].startswith("GPU→GPU copy, GB/s median (p2p_copy, 256 MiB)")
    header = next(line for line in lines if line.strip().startswith("from"))
    assert header.split()[1:] == [f"gpu{i}" for i in range(8)]
    cells = _cells(lines)
    assert list(cells) == [f"gpu{i}" for i in range(8)]
    for a in range(8):
        for b in range(8):
            expected = "-" if a == b or (a, b) == (3, 5) else f"{gbps[(a, b)]:.0f}"
            assert cells[f"gpu{a}"][b] == expected, (a, b)
    text = "\n".join(lines)
    assert "12.5" not in text and "999" not in text and "450" not in text  # 300*1.5: best
    assert "-: the GPU itself, or a pair not measured" in text


def test_the_p2p_matrix_never_shows_a_simulated_figure():
    rows = [_p2p(a, b, 123.4, backend="simulated") for a in range(8) for b in range(8)
            if a != b]
    lines = _matrix_text(rows, width=80)
    cells = _cells(lines)
    assert cells["gpu2"] == ["sim", "sim", "-", "sim", "sim", "sim", "sim", "sim"]
    text = "\n".join(lines)
    assert "123" not in text and "simulated" in text


def test_the_report_shows_the_p2p_matrix_only_where_gpus_copied_to_each_other():
    two = [make_row(), _p2p(0, 1, 350.0), _p2p(1, 0, 340.0)]
    assert "from\\to" in _render(two) and "GPU→GPU copy, GB/s median" in _render(two)
    one = [make_row(), make_row(case="p2p_copy", status="waived", note="needs 2 GPUs",
                                size_bytes=None, device="", threads=None)]
    assert "GPU→GPU copy, GB/s median" not in _render(one)


def _answer_text(run: Run) -> str:
    from bwprof.render.terminal import print_answer

    console = Console(width=200, record=True, file=io.StringIO(), force_terminal=True,
                      color_system="standard")
    print_answer(console, run, "reports/x y")
    return console.export_text(styles=True)


def test_the_verdict_line_is_styled_by_the_verdict_and_names_the_next_step():
    from tests.analysis.test_answer import _with_hbm_at

    failed = _answer_text(_with_hbm_at(0.5))
    assert "\x1b[1;31mverdict: FAIL — worst: HBM gpu0 (hbm_triad)" in failed
    assert "next: `bwprof accept 'reports/x y'` says why per path" in failed
    passed = _answer_text(_with_hbm_at(1.0))
    assert "\x1b[1;32mverdict: PASS" in passed and "bwprof history add" in passed
