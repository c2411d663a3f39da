"""Plots are written, non-empty, titled with the machine, and say SIMULATED when they are."""

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.report import plots
from bwprof.report.runfolder import load_run
from bwprof.report.summary import build_summary
from tests.report.conftest import DATA
from tests.schema.builders import host, meta

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def _title(figure) -> str:
    return figure._suptitle.get_text()


def _samples(path):
    """samples.csv of two GPUs running h2d_pinned then hbm_triad: PCIe and DRAM counters
    that move, a flat SM clock, power that moves, no throttling."""
    t = np.arange(0, 2, 0.05)
    frame = pd.DataFrame({
        "t_s": np.concatenate([t, t]), "device": ["gpu0"] * len(t) + ["gpu1"] * len(t),
        "case": (["h2d_pinned"] * 20 + ["hbm_triad"] * 20) * 2,
        "pcie_rx_mibps": np.linspace(0, 1000, 2 * len(t)),
        "dram_bw_util_pct": np.linspace(0, 90, 2 * len(t)),
        "sm_clock_mhz": 1980.0, "power_w": np.linspace(100, 500, 2 * len(t)),
        "throttle_reasons": 0,
    })
    frame.to_csv(path, index=False)


def test_every_plot_of_a_simulated_gpu_run(run_copy):
    run = run_copy("sim-a")
    _samples(run / "samples.csv")
    written = plots.write_plots(load_run(run))
    assert [p.name for p in written] == [plots.BANDWIDTH_PNG, plots.SUMMARY_PNG,
                                         plots.TELEMETRY_PNG, plots.P2P_PNG]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, path


def test_titles_name_the_machine_and_label_simulated_figures():
    sim, host = load_run(DATA / "sim-a"), load_run(DATA / "host-ddr")
    figure = plots.bandwidth_figure(sim.results, sim.meta)
    assert "vm (AMD EPYC) · 2× simulated GPU" in _title(figure)
    assert plots.SIMULATED_TITLE in _title(figure)
    assert plots.SIMULATED_TITLE in _title(plots.p2p_figure(sim.results, sim.meta))
    summary = plots.summary_figure(build_summary(sim.results), sim.meta)
    assert plots.SIMULATED_TITLE in _title(summary)
    labels = {axis.get_title(loc="left"): [t.get_text() for t in axis.get_yticklabels()]
              for axis in summary.axes}
    assert "hbm_triad gpu0 (simulated)" in labels["HBM: device memory"]
    assert labels["DDR: host memory"] == ["ddr_triad cpu"]
    measured = plots.summary_figure(build_summary(host.results), host.meta)
    assert plots.SIMULATED_TITLE not in _title(measured)
    assert "no GPU" in _title(measured)


def test_panels_cover_each_memory_kind_and_direction_with_the_peak():
    sim = load_run(DATA / "sim-a")
    results = sim.results.copy()
    results.loc[results["case"] == "h2d_pinned", ["peak_value", "peak_gbps"]] = 63.0
    figure = plots.bandwidth_figure(results, sim.meta)
    titles = [axis.get_title() for axis in figure.axes if axis.get_visible()]
    assert titles == ["host DDR, within one memory", "pinned host memory, host→device",
                      "pinned host memory, device→host", "device memory, within one memory",
                      "device memory, GPU→GPU"]
    h2d = figure.axes[1]
    assert h2d.get_xscale() == "log"
    assert [line.get_ydata()[0] for line in h2d.lines if line.get_linestyle() == "--"] == [63.0]
    assert "GB/s" in h2d.get_ylabel()


def test_telemetry_shades_each_case_and_draws_only_counters_that_moved(tmp_path):
    _samples(tmp_path / "samples.csv")
    samples = pd.read_csv(tmp_path / "samples.csv")
    figure = plots.telemetry_figure(samples, meta(host=host(hostname="h")))
    assert [axis.get_ylabel().replace("\n", " ") for axis in figure.axes] == [
        "DRAM bandwidth used, % of peak (GPM)", "PCIe throughput, GB/s (10^9 B/s)",
        "board power, W"]  # words with units; the flat SM clock is not a panel
    assert "SM clock 1980 MHz" in figure.axes[-1].get_xlabel()
    assert len(figure.axes[0].patches) == 2  # one shaded span per case
    pcie = [y for line in figure.axes[1].get_lines() for y in line.get_ydata()]
    assert max(pcie) == pytest.approx(1000 * 1048576 / 1e9)  # MiB/s drawn as GB/s
    assert plots.telemetry_figure(None, meta()) is None


def test_telemetry_panels_follow_the_rows_the_run_measured():
    """The H200 run: DRAM utilisation for its HBM rows, PCIe for its copies, power (it
    moved 120-660 W); its clocks were flat and are named, not drawn. A run of transfers
    only has no DRAM panel."""
    run = load_run(DATA / "h200-quick")
    figure = plots.telemetry_figure(run.samples, run.meta, results=run.results)
    labels = [axis.get_ylabel().replace("\n", " ") for axis in figure.axes]
    assert labels == ["DRAM bandwidth used, % of peak (GPM)",
                      "PCIe throughput, GB/s (10^9 B/s)", "board power, W"]
    assert "SM clock 1980 MHz" in figure.axes[-1].get_xlabel()
    dram = figure.axes[0].get_lines()[0]
    assert 85 < max(dram.get_ydata()) < 91 and not np.isnan(dram.get_ydata()).any()
    copies = run.results[run.results["case"].str.startswith("h2d_")]
    figure = plots.telemetry_figure(run.samples, run.meta, results=copies)
    assert [a.get_ylabel().split(",")[0] for a in figure.axes] == ["PCIe throughput",
                                                                   "board power"]


def test_a_host_only_run_has_no_p2p_or_telemetry_plot(tmp_path):
    result = runner.invoke(app, ["report", str(DATA / "host-ddr"), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [plots.BANDWIDTH_PNG,
                                                             plots.SUMMARY_PNG]
    assert (tmp_path / "summary.csv").is_file()


def test_no_plots_writes_no_png(tmp_path):
    result = runner.invoke(app, ["report", str(DATA / "sim-a"), "--out", str(tmp_path),
                                 "--no-plots"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["summary.csv"]


def test_a_long_title_fits_even_a_small_p2p_matrix():
    """Two GPUs make a narrow heatmap; a real host and GPU name must not be cut off."""
    from dataclasses import replace

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    sim = load_run(DATA / "sim-a")
    assert sim.meta.host is not None
    host = replace(sim.meta.host, hostname="WMWMWM-GPU-NODE-RACK07-SLOT3.EXAMPLE.INTERNAL",
                   cpu_model="Intel(R) Xeon(R) Platinum 8480+")  # wide glyphs
    devices = tuple(replace(d, properties=replace(d.properties, name="NVIDIA H200 NVL"))
                    for d in sim.meta.gpus.devices)
    system = replace(sim.meta, host=host, gpus=replace(sim.meta.gpus, devices=devices))
    for figure in (plots.p2p_figure(sim.results, system),
                   plots.bandwidth_figure(sim.results, system)):
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        box = figure._suptitle.get_window_extent(renderer=canvas.get_renderer())
        assert box.x0 >= 0 and box.x1 <= figure.bbox.width, (box, figure.bbox.width)


def test_every_plot_of_a_measured_h200_run_with_timelines_from_its_events(run_copy):
    """A real run (tests/data/README.md): no SIMULATED label, the H200 in every title, one
    timeline per overlap case and the pipeline, drawn from the events in timelines.json."""
    run = run_copy("h200-quick")
    notes: list[str] = []
    written = plots.write_plots(load_run(run), notes=notes)
    timelines = [f"timeline-{case}-gpu0.png" for case in (
        "overlap_h2d_compute", "overlap_d2h_compute", "overlap_bidir_compute",
        "overlap_pageable", "pipeline_chunked")]
    assert [p.name for p in written] == [plots.BANDWIDTH_PNG, plots.SUMMARY_PNG,
                                         plots.TELEMETRY_PNG, *timelines]  # one GPU: no P2P
    assert notes == []
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, path
    measured = load_run(DATA / "h200-quick")
    title = _title(plots.bandwidth_figure(measured.results, measured.meta))
    assert "NVIDIA H200" in title and plots.SIMULATED_TITLE not in title


def test_cache_resident_points_are_drawn_hollow_and_named_in_the_legend():
    """The H200 run's d2d_copy at 64 KiB-16 MiB fits in the 60 MiB L2: those points are
    marked, in the device-memory panel only, and the L2 figures draw no peak line of theirs."""
    measured = load_run(DATA / "h200-quick")
    figure = plots.bandwidth_figure(measured.results, measured.meta)
    marked = [axis for axis in figure.axes
              if any(text.get_text() == "fits in a cache: not the memory's figure"
                     for text in (axis.get_legend().get_texts() if axis.get_legend() else []))]
    assert [axis.get_title() for axis in marked] == ["device memory, within one memory"]
    hollow = [line for line in marked[0].get_lines()
              if line.get_markerfacecolor() == "white" and line.get_linestyle() == "None"]
    assert len(hollow) == 1 and len(hollow[0].get_xdata()) == 3


def test_latency_rows_leave_the_bandwidth_plot_for_their_own():
    from bwprof.schema.table import results_frame
    from tests.report.test_export import make_row
    from tests.schema.builders import meta

    rows = [make_row(gbps_best=28.6, size_bytes=1 << 30),
            *(make_row(case="lat_host", metric="latency", unit="ns", higher_is_better=False,
                       gbps_best=None, gbps_median=None, value_best=ns, value_median=ns,
                       size_bytes=size) for ns, size in ((1.2, 32 << 10), (95.0, 1 << 30)))]
    figure = plots.bandwidth_figure(results_frame(rows), meta())
    labels = {axis.get_title(): axis.get_ylabel() for axis in figure.axes if axis.get_visible()}
    assert labels == {"host DDR, within one memory": "GB/s (10^9 bytes/s), best"}
    assert plots.bandwidth_figure(results_frame(rows[1:]), meta()) is None
    assert plots.latency_figure(results_frame(rows), meta()) is not None
