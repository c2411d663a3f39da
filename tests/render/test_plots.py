"""Plots are written, non-empty, titled with the machine, and say SIMULATED when they are."""

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.analysis.summary import build_summary
from bwprof.cli import app
from bwprof.render import plots
from bwprof.render.plotcache import is_plot_name
from bwprof.saved import load
from tests.conftest import DATA
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
    written = plots.write_plots(load(run))
    assert [p.name for p in written] == [plots.BANDWIDTH_PNG, plots.SUMMARY_PNG,
                                         plots.TELEMETRY_PNG, plots.P2P_PNG]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, path


def test_titles_name_the_machine_and_label_simulated_figures():
    sim, host = load(DATA / "sim-a"), load(DATA / "host-ddr")
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
    sim = load(DATA / "sim-a")
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
    run = load(DATA / "h200-quick")
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["columns.csv", "results.parquet",
                                                          "summary.csv"]


def test_a_long_title_fits_even_a_small_p2p_matrix():
    """Two GPUs make a narrow heatmap; a real host and GPU name must not be cut off."""
    from dataclasses import replace

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    sim = load(DATA / "sim-a")
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
    written = plots.write_plots(load(run), notes=notes)
    timelines = [f"timeline-{case}-gpu0.png" for case in (
        "overlap_h2d_compute", "overlap_d2h_compute", "overlap_bidir_compute",
        "overlap_pageable", "pipeline_chunked")]
    assert [p.name for p in written] == [plots.BANDWIDTH_PNG, plots.SUMMARY_PNG,
                                         plots.TELEMETRY_PNG, *timelines]  # one GPU: no P2P
    assert notes == []
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, path
        assert is_plot_name(path.name), path  # else a stale copy of it is never removed
    measured = load(DATA / "h200-quick")
    title = _title(plots.bandwidth_figure(measured.results, measured.meta))
    assert "NVIDIA H200" in title and plots.SIMULATED_TITLE not in title


def test_cache_resident_points_are_drawn_hollow_and_named_in_the_legend():
    """The H200 run's d2d_copy at 64 KiB-16 MiB fits in the 60 MiB L2: those points are
    marked, in the device-memory panel only, and the L2 figures draw no peak line of theirs."""
    measured = load(DATA / "h200-quick")
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
    from tests.schema.builders import meta
    from tests.store.test_export import make_row

    rows = [make_row(gbps_best=28.6, size_bytes=1 << 30),
            *(make_row(case="lat_host", metric="latency", unit="ns", higher_is_better=False,
                       gbps_best=None, gbps_median=None, value_best=ns, value_median=ns,
                       size_bytes=size) for ns, size in ((1.2, 32 << 10), (95.0, 1 << 30)))]
    figure = plots.bandwidth_figure(results_frame(rows), meta())
    labels = {axis.get_title(): axis.get_ylabel() for axis in figure.axes if axis.get_visible()}
    assert labels == {"host DDR, within one memory": "GB/s (10^9 bytes/s), median"}
    assert plots.bandwidth_figure(results_frame(rows[1:]), meta()) is None
    assert plots.latency_figure(results_frame(rows), meta()) is not None


# -- what each plot shows (issue 21): figure objects, not pixels -------------------------


def _drawn(figure):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure).draw()
    return figure


def _panel(figure, title):
    return next(a for a in figure.axes if title in (a.get_title(), a.get_title(loc="left")))


def test_summary_is_percent_of_peak_on_a_linear_axis_with_the_band_shaded():
    run = load(DATA / "h200-quick")
    summary = build_summary(run.results)
    figure = plots.summary_figure(summary, run.meta, band={"hbm": (80.0, 92.0)})
    hbm = _panel(figure, "HBM: device memory")
    assert hbm.get_xscale() == "linear" and hbm.get_xlim()[0] == 0 and hbm.get_xlim()[1] >= 100
    bars = [p for p in hbm.patches if p.get_height() == pytest.approx(0.6)]
    widths = sorted(round(bar.get_width(), 1) for bar in bars)
    assert widths == [87.0, 89.4]  # d2d_copy and hbm_triad, medians, % of the 4814 GB/s peak
    shaded = [p for p in hbm.patches if p.get_alpha() == pytest.approx(0.18)]
    assert len(shaded) == 1
    band = shaded[0].get_bbox()  # in data units: x from the band's low to its high
    assert (band.x0, band.x1) == (80.0, 92.0)
    assert plots.BAND_LABEL in [t.get_text() for t in figure.legends[0].get_texts()]
    h2d = _panel(figure, "host→device (PCIe or C2C)")
    assert not [p for p in h2d.patches if p.get_alpha() == pytest.approx(0.18)]  # no band
    # Without a band nothing is shaded and there is no legend to explain it.
    plain_figure = plots.summary_figure(summary, run.meta)
    assert not plain_figure.legends
    assert [p.get_alpha() for a in plain_figure.axes for p in a.patches] == [None] * 7
    width, height = _drawn(plain_figure).canvas.get_width_height()
    assert width >= 900 and height >= 400


def test_summary_of_a_host_only_run_has_readable_gbps_ticks_and_a_sensible_size():
    run = load(DATA / "host-ddr-v2")
    figure = _drawn(plots.summary_figure(build_summary(run.results), run.meta))
    (axis,) = figure.axes
    assert axis.get_xscale() == "linear" and axis.get_xlim()[0] == 0
    ticks = [t.get_text() for t in axis.get_xticklabels() if t.get_text()]
    assert len(ticks) >= 4 and "GB/s" in axis.get_xlabel()
    width, height = figure.canvas.get_width_height()
    assert width >= 900 and height >= 300, (width, height)


def test_summary_draws_a_cache_only_path_as_a_note_never_a_bar():
    """host-ddr-v2 without its 256 MiB rows: every ddr_triad row is in_cache, so there is
    no DDR figure, and the panel says so instead of drawing the cache's GB/s."""
    run = load(DATA / "host-ddr-v2")
    small = run.results[run.results["size_bytes"] < (64 << 20)]
    figure = plots.summary_figure(build_summary(small), run.meta)
    (axis,) = figure.axes
    assert not axis.patches
    assert any("in a cache: no DDR figure" in t.get_text() for t in axis.texts)


def test_single_size_kernels_stand_at_their_size_each_named_in_the_markers_order():
    """The H200's five HBM kernels, all run at 256 MiB: five markers at 256 MiB and nowhere
    else (issue 35: they were spread from about 190 to 350 MiB), each a marker shape of its
    own, named beside it with its median (as the summary shows it: hbm_triad 4302, its best
    4309 not), the names stacked in the order of the markers' heights."""
    run = load(DATA / "h200-quick")
    figure = plots.bandwidth_figure(run.results, run.meta)
    axis = _panel(figure, "device memory, within one memory")
    kernels = [line for line in axis.get_lines() if str(line.get_label()).startswith("hbm_")]
    assert [line.get_label() for line in kernels] == [
        "hbm_copy gpu0: 3822", "hbm_scale gpu0: 3826", "hbm_add gpu0: 4289",
        "hbm_triad gpu0: 4302", "hbm_dot gpu0: 4354"]
    assert {float(x) for line in kernels for x in line.get_xdata()} == {float(256 << 20)}
    assert len({line.get_marker() for line in kernels}) == 5
    assert all(line.get_linestyle() == "None" for line in kernels)
    names = sorted((t for t in axis.texts if t.get_text().startswith("hbm_")),
                   key=lambda t: t.get_window_extent().y0)
    assert [t.get_text() for t in names] == ["hbm_copy 3822", "hbm_scale 3826", "hbm_add 4289",
                                             "hbm_triad 4302", "hbm_dot 4354"]
    legend = [t.get_text() for t in axis.get_legend().get_texts()]
    assert not [text for text in legend if text.startswith("hbm_")]  # named beside instead
    named = [t.get_text() for t in axis.texts]
    assert "in L2, above the peak" in named and named.count("in L2") == 2  # 16 MiB: 4897
    assert overprinted(figure) == []  # the names, and "in L2" at 64 KiB inside its frame
    v2 = load(DATA / "host-ddr-v2")  # "in cache" was on the data
    assert overprinted(plots.bandwidth_figure(v2.results, v2.meta)) == []


def _size_axis(axis) -> tuple[set[float], list[str]]:
    """Every x a size panel draws a point at, and its x tick labels as drawn."""
    xs = {float(x) for line in axis.get_lines() if line.get_transform() == axis.transData
          for x in line.get_xdata()}
    ticks = [label.get_text() for tick in axis.xaxis._update_ticks()
             for label in (tick.label1,) if label.get_visible() and label.get_text()]
    return xs, ticks


def test_kernels_run_at_one_size_are_drawn_and_labelled_at_that_size_only():
    """Issue 35: the H200 run's five DDR kernels, all run at 1.2 GiB, were drawn from 0.85
    to 1.7 GiB on an axis labelled 1 GiB and 2 GiB. Every point now stands at 1.2 GiB, the
    only size labelled, with no tick between; a panel that sweeps labels the sizes it ran."""
    from bwprof.schema.table import results_frame
    from bwprof.units import format_bytes
    from tests.store.test_export import make_row

    run = load(DATA / "h200-quick")
    figure = _drawn(plots.bandwidth_figure(run.results, run.meta))
    ddr = _panel(figure, "host DDR, within one memory")
    size = int(run.results.loc[run.results["case"] == "ddr_triad", "size_bytes"].iloc[0])
    assert _size_axis(ddr) == ({float(size)}, [format_bytes(size)])
    assert list(ddr.xaxis.get_minorticklocs()) == []
    low, high = ddr.get_xlim()
    assert low < size < high
    assert sorted(t.get_text() for t in ddr.texts) == [
        "ddr_add 78.8", "ddr_copy 73.2", "ddr_dot 84.7", "ddr_scale 71.4", "ddr_triad 82.3"]
    h2d = _panel(figure, "pinned host memory, host→device")
    assert _size_axis(h2d)[1] == ["64 KiB", "1 MiB", "16 MiB", "256 MiB"]  # as run
    rows = [make_row(case=case, gbps_best=gbps, size_bytes=128 << 20)
            for case, gbps in (("ddr_copy", 15.6), ("ddr_scale", 15.5), ("ddr_add", 16.3),
                               ("ddr_triad", 16.2), ("ddr_dot", 13.7))]
    alone = _drawn(plots.bandwidth_figure(results_frame(rows), meta()))
    (axis,) = alone.axes
    assert _size_axis(axis) == ({float(128 << 20)}, ["128 MiB"])
    assert overprinted(alone) == []


def test_a_threads_sweep_gets_a_panel_of_its_own():
    from bwprof.schema.table import results_frame
    from tests.store.test_export import make_row

    rows = [make_row(threads=t, gbps_median=10.0 * t, gbps_best=10.2 * t, size_bytes=1 << 30)
            for t in (1, 2, 4, 8)]
    figure = plots.bandwidth_figure(results_frame(rows), meta())
    titles = [a.get_title() for a in figure.axes if a.get_visible()]
    assert titles == ["host DDR, within one memory",
                      "host DDR, within one memory: against thread count (--threads)"]
    sizes, threads = (a for a in figure.axes if a.get_visible())
    (point,) = [line for line in sizes.get_lines() if line.get_label()[0] != "_"]
    assert point.get_label() == "ddr_triad cpu (8 threads): 80"  # the largest count only
    (sweep,) = threads.get_lines()
    assert list(sweep.get_xdata()) == [1, 2, 4, 8] and "1 GiB" in sweep.get_label()
    assert list(sweep.get_ydata()) == [10.0, 20.0, 40.0, 80.0]  # the medians, not the best


def test_compared_panels_share_one_x_scale_and_legends_are_readable():
    run = load(DATA / "h200-quick")
    figure = _drawn(plots.bandwidth_figure(run.results, run.meta))
    transfers = [a.get_xlim() for a in figure.axes if a.get_visible()
                 and "host memory," in a.get_title()]
    assert len(transfers) == 5 and len(set(transfers)) == 1
    for axis in figure.axes:
        if axis.get_legend():
            assert min(t.get_fontsize() for t in axis.get_legend().get_texts()) >= 8


def test_every_figure_keeps_its_text_at_8_points_or_more(run_copy):
    from bwprof.render import figstyle
    from bwprof.render.timeline import read_timelines, timeline_figures

    for name in ("h200-quick", "sim-a", "host-ddr-v2"):
        run = load(DATA / name)
        summary = build_summary(run.results)
        figures = [plots.bandwidth_figure(run.results, run.meta),
                   plots.summary_figure(summary, run.meta, band={"hbm": (80, 90)}),
                   plots.telemetry_figure(run.samples, run.meta, results=run.results),
                   plots.p2p_figure(run.results, run.meta),
                   *timeline_figures(read_timelines(run.path), "vm", "H200",
                                     run.results).values()]
        for figure in filter(None, figures):
            assert figstyle.smallest_text(_drawn(figure)) >= figstyle.MIN_POINTS, name


def test_timeline_panels_share_one_x_scale_and_overlaps_get_a_sequential_bar():
    from bwprof.render.timeline import SEQUENTIAL_LABEL, read_timelines, timeline_figures

    run = load(DATA / "h200-quick")
    figures = timeline_figures(read_timelines(run.path), "vm", "H200", run.results)
    pipeline = figures["timeline-pipeline_chunked-gpu0.png"]
    assert len(pipeline.axes) == 6 and len({a.get_xlim() for a in pipeline.axes}) == 1
    assert all(SEQUENTIAL_LABEL not in [t.get_text() for t in a.get_yticklabels()]
               for a in pipeline.axes)  # a pipeline's parts are chunked: no such bar
    (axis,) = figures["timeline-overlap_bidir_compute-gpu0.png"].axes
    assert [t.get_text() for t in axis.get_yticklabels()][-1] == SEQUENTIAL_LABEL
    alone = run.results[(run.results["case"] == "overlap_bidir_compute")
                        & (run.results["phase"] == "alone")]["time_median_s"].sum()
    reference = [c for c in axis.collections if c.get_hatch() == "//"]
    ends = [path.vertices[:, 0].max() for c in reference for path in c.get_paths()]
    assert len(reference) == 3 and max(ends) == pytest.approx(1e3 * alone)
    # Without results (an older caller) the timelines are drawn as before, no reference.
    (bare,) = timeline_figures(read_timelines(run.path))[
        "timeline-overlap_bidir_compute-gpu0.png"].axes
    assert SEQUENTIAL_LABEL not in [t.get_text() for t in bare.get_yticklabels()]


def test_a_timeline_of_a_case_named_at_length_still_gets_a_file_name(tmp_path):
    """A case or device of 300 characters in timelines.json (a folder from anywhere) is cut
    to a name the file system holds: its plot is drawn, not lost to ENAMETOOLONG."""
    from bwprof.render.timeline import read_timelines, write_timeline_plots

    timelines = [dict(entry, case="c" * 300, device="d" * 300)
                 for entry in read_timelines(DATA / "h200-quick")[:1]]
    (written,) = write_timeline_plots(tmp_path, timelines)
    assert len(written.name.encode()) <= 255 and written.is_file()


def test_the_p2p_heatmap_runs_from_zero_to_the_peak_not_to_the_data():
    sim = load(DATA / "sim-a")
    results = sim.results.copy()
    results.loc[results["case"] == "p2p_copy", "peak_value"] = 50.0
    (image,) = plots.p2p_figure(results, sim.meta).axes[0].get_images()
    assert (image.norm.vmin, image.norm.vmax) == (0, 50.0)
    figure = plots.p2p_figure(sim.results, sim.meta)  # no peak: 0 to the largest figure
    (image,) = figure.axes[0].get_images()
    # The largest median (gpu0->gpu1 at 16 MiB; its best is 10.95).
    assert image.norm.vmin == 0 and image.norm.vmax == pytest.approx(10.836401, rel=1e-4)
    assert "median" in figure.axes[1].get_ylabel()
    assert "no peak known" in _title(figure)


def _markers_under_legends(figure) -> list[str]:
    """The labels of drawn data points that a legend's box covers, in display space."""
    covered = []
    for axis in _drawn(figure).axes:
        legend = axis.get_legend()
        if not axis.get_visible() or legend is None:
            continue
        box = legend.get_window_extent()
        for line in axis.get_lines():
            if line.get_transform() != axis.transData or line.get_marker() in (None, "None"):
                continue
            for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
                px, py = axis.transData.transform((float(x), float(y)))
                if box.x0 <= px <= box.x1 and box.y0 <= py <= box.y1:
                    covered.append(str(line.get_label()))
    return covered


def test_no_legend_covers_a_point_of_single_size_kernels():
    """A host run's five DDR kernels at one size, the slow ones drawn last (on the right,
    low): the lower-right legend hid ddr_dot and ddr_triad."""
    from bwprof.schema.table import results_frame
    from tests.store.test_export import make_row

    rows = [make_row(case=case, gbps_best=gbps, size_bytes=128 << 20)
            for case, gbps in (("ddr_copy", 15.6), ("ddr_scale", 77.7), ("ddr_add", 30.3),
                               ("ddr_triad", 14.7), ("ddr_dot", 13.7))]
    assert _markers_under_legends(plots.bandwidth_figure(results_frame(rows), meta())) == []
    run = load(DATA / "h200-quick")
    assert _markers_under_legends(plots.bandwidth_figure(run.results, run.meta)) == []


def _texts(figure):
    """Every visible, non-empty text a reader sees: titles, axis and tick labels in view,
    annotations and legend entries."""
    texts = [t for t in (figure._suptitle,) if t is not None]
    for axis in figure.axes:
        if not axis.get_visible():
            continue
        texts += [axis.title, axis._left_title, axis._right_title, axis.xaxis.label,
                  axis.yaxis.label, axis.xaxis.get_offset_text(),
                  axis.yaxis.get_offset_text(), *axis.texts]
        for ticks in (axis.xaxis, axis.yaxis):  # the ticks in view, as drawn
            texts += [label for tick in ticks._update_ticks()
                      for label in (tick.label1, tick.label2) if label.get_visible()]
        if axis.get_legend() is not None:
            texts += axis.get_legend().get_texts()
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def overprinted(figure) -> list[str]:
    """What a reader would find overprinted: two texts whose boxes overlap, a text outside
    the figure or (an annotation) outside its frame, an annotation on a marker, and an
    annotation without a box of its own crossed by a line."""
    from bwprof.render.figstyle import _obstacles, collides

    renderer = _drawn(figure).canvas.get_renderer()
    page = figure.bbox
    found = []
    texts = _texts(figure)
    boxes = [t.get_window_extent(renderer).padded(-1) for t in texts]
    for index, (text, box) in enumerate(zip(texts, boxes, strict=True)):
        if not (page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0
                and box.y1 <= page.y1):
            found.append(f"{text.get_text()!r} outside the figure")
        for other, other_box in zip(texts[index + 1:], boxes[index + 1:], strict=True):
            if box.overlaps(other_box):
                found.append(f"{text.get_text()!r} over {other.get_text()!r}")
    for axis in figure.axes:
        if not axis.get_visible():
            continue
        frame = axis.get_window_extent(renderer)
        paths, marks = _obstacles(axis)
        for note in axis.texts:
            box = note.get_window_extent(renderer).padded(-1)
            if not (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
                    and box.y1 <= frame.y1):
                found.append(f"{note.get_text()!r} leaves its frame")
            if collides(box, [] if note.get_bbox_patch() else paths, marks, []):
                found.append(f"{note.get_text()!r} on the data")
    return found


def _roofline_rows():
    """The simulated run the reviewer saw: five GPU dtypes within 3% of each other (ridge
    points 8.3-8.6 on one spot), two host ceilings equal to three figures."""
    from bwprof.schema.table import results_frame
    from tests.store.test_export import make_row

    def gemm(case, device, dtype, tflops, threads=None, backend="simulated"):
        return make_row(case=case, device=device, backend=backend, dtype=dtype,
                        metric="throughput", unit="TFLOP/s", value_best=tflops,
                        value_median=tflops, threads=threads, gbps_best=None,
                        gbps_median=None)

    rows = [make_row(case="ddr_triad", gbps_median=15.0, gbps_best=15.3, size_bytes=1 << 30),
            make_row(case="hbm_triad", device="gpu0", backend="simulated", memory="hbm",
                     gbps_median=4.3, gbps_best=4.4, size_bytes=1 << 30)]
    rows += [gemm("gemm_gpu", "gpu0", dtype, tflops) for dtype, tflops in
             (("fp32", 0.0369), ("tf32", 0.0358), ("fp16", 0.0358), ("bf16", 0.0357),
              ("fp64", 0.0269))]
    rows += [gemm("gemm_host", "cpu", dtype, tflops, threads, "host") for dtype, tflops, threads
             in (("fp32", 0.0423, 1), ("fp64", 0.031, 1), ("fp32", 0.00959, 2),
                 ("fp64", 0.00959, 2))]
    return results_frame(rows)


def test_latency_and_roofline_figures_overprint_nothing():
    """Issue 21's review: minor tick labels 0.8/0.9/1 and 8/9/10 crowded on the log latency
    axis, the GPU chase's line crossed its "L2 60 MiB" label, a host run's "25%" sat under
    the legend on the frame's top edge, and the roofline's near-equal ridge labels lay
    under one another's markers."""
    from bwprof.analysis.roofline import ceilings
    from bwprof.render.rooflineplot import roofline_figure
    from bwprof.schema.table import results_frame
    from tests.analysis import latency_rows as lat

    sweeps = results_frame([*lat.lat_host(), *lat.lat_host(page_bytes=2 << 20, scale=0.8),
                            *lat.lat_gpu(0), *lat.lat_gpu(1, 500.0)])
    figure = plots.latency_figure(sweeps, lat.run_meta())
    assert overprinted(figure) == []
    host_axis = figure.axes[0]
    labelled = [t.label1.get_text() for t in host_axis.yaxis._update_ticks()
                if t.label1.get_text()]
    assert labelled == ["1", "2", "5", "10", "20", "50", "100"]  # 1-2-5, no 0.8 or 0.9
    measured = [lat.lat_row(ns, phase=f"load_{n}", case="lat_host_loaded", load_gbps=gbps)
                for n, gbps, ns in ((0, 0.0, 275.5), (25, 1.31, 1366.4), (50, 3.64, 936.9),
                                    (75, 8.01, 857.9), (100, 12.83, 840.1))]
    loaded = results_frame([*measured, *lat.loaded(
        "lat_gpu_loaded", "gpu0", idle=480.0, full_gbps=3000.0, backend="simulated",
        memory="hbm")])
    assert overprinted(plots.loaded_latency_figure(loaded, lat.run_meta())) == []
    unloaded = results_frame(lat.loaded("lat_gpu_loaded", "gpu0", idle=20.0, full_gbps=0.0,
                                        backend="simulated", memory="hbm"))
    assert overprinted(plots.loaded_latency_figure(unloaded, lat.run_meta())) == []  # no 1e-9
    roofline = roofline_figure(ceilings(_roofline_rows()), "vm", plots.SIMULATED_TITLE)
    assert overprinted(roofline) == []
    ridges = sorted(t.get_text() for a in roofline.axes for t in a.texts)
    assert ridges == ["0.64", "0.64", "2.1", "2.8", "6.3", "8.3", "8.3", "8.3", "8.6"]
    from bwprof.render import figstyle
    assert figstyle.smallest_text(roofline) >= figstyle.MIN_POINTS


def test_labels_are_placed_on_the_layout_the_figure_is_saved_with(tmp_path, layout_solves):
    """place_clear solves the layout once and keeps it: every label stays where it was
    checked clear, and saving the figure solves nothing again."""
    from bwprof.render.figstyle import around, new_figure, place_clear
    from bwprof.store.atomic import save_figure

    figure = new_figure(6, 3)
    axes = figure.subplots(1, 2)
    for axis in axes:
        axis.plot([1, 2, 3], [1, 4, 9], marker="o")
        axis.set_ylabel("a label long enough to matter")
    placed = [place_clear(figure, axis, [("point", around((2.0, 4.0)), {})])[0]
              for axis in axes]
    before = [label.get_window_extent().bounds for label in placed]
    save_figure(figure, tmp_path / "figure.png")
    assert layout_solves == ["layout"]
    assert [label.get_window_extent().bounds for label in placed] == before


# Catches: placing labels drew the whole figure once without pixels to find its layout, a
# pass as costly as the layout solve itself, before the PNG drew it again (issue 36)
def test_placing_labels_solves_the_layout_without_drawing_the_figure(monkeypatch,
                                                                     layout_solves):
    from matplotlib.figure import Figure

    from bwprof.render.figstyle import around, new_figure, place_clear

    draws: list[str] = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw",
                        lambda figure, renderer: draws.append("draw") or real(figure, renderer))
    figure = new_figure(6, 3)
    axis = figure.add_subplot()
    axis.plot([1, 2, 3], [1, 4, 9], marker="o")
    place_clear(figure, axis, [("point", around((2.0, 4.0)), {})])
    assert layout_solves == ["layout"]
    assert draws == []


def test_a_subnormal_latency_gives_its_axis_ticks_without_an_overflow():
    """A damaged row's latency of 5e-324 ns: left off the log axis' range (as 0 is), not a
    largest/smallest quotient that overflows (NumPy's warning, an error under -W error)."""
    import warnings

    import matplotlib.pyplot as plt

    figure, axis = plt.subplots()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            plots._latency_ticks(axis, pd.Series([5e-324, 0.0, 80.0, 120.0]))
    finally:
        plt.close(figure)


def test_the_roofline_draws_the_runs_own_ceilings_with_long_texts_cut():
    """The ceilings are worked out once, from the run's whole texts (the roofline used to
    work them out again whenever any cell of the run was cut for drawing); only what is drawn
    is cut, each long text to a bounded one that keeps a digest."""
    from bwprof.analysis.roofline import Ceiling, Ceilings
    from bwprof.render.plots import NAME_CHARACTERS, cut_ceilings, cut_text

    long_case = "gemm_" + "x" * 100_000
    found = Ceilings([Ceiling("gpu0", f"bf16 ({long_case})", 900.0, long_case, False, "bf16")],
                     [Ceiling("gpu0", "HBM", 4000.0, "hbm_triad", False)])
    cut = cut_ceilings(found)
    (compute,), (bandwidth,) = cut.compute, cut.bandwidth
    assert bandwidth == found.bandwidth[0]  # short texts as they are
    assert compute.case == cut_text(long_case) and len(compute.case) < 2 * NAME_CHARACTERS
    assert compute.label == cut_text(f"bf16 ({long_case})")
    assert compute.value == 900.0 and compute.dtype == "bf16" and compute.device == "gpu0"
