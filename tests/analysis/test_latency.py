"""The report side of the latency cases (issue 19), on synthetic rows shaped as the cases
write them (tests/analysis/latency_rows.py): the summary's latency path and the HBM/DDR
latency sentence, the loaded-latency lines, the latency plots, findings, compare and
`bwprof report` on a run folder of such rows."""

from __future__ import annotations

import io
from dataclasses import replace

import pandas as pd
import pytest
from rich.console import Console

from bwprof.analysis.run import Run
from bwprof.analysis.summary import (
    SLOWEST_GPU,
    SLOWEST_PAIR,
    build_summary,
    latency_sentence,
)
from bwprof.render.terminal import loaded_latency_lines, print_report, report_lines
from bwprof.schema.table import results_frame, rows_from_frame
from tests.analysis import latency_rows as lat
from tests.analysis.latency_rows import GiB, MiB


def _summary(rows) -> pd.DataFrame:
    return build_summary(results_frame(rows))


def _latency(summary: pd.DataFrame, case: str) -> pd.DataFrame:
    return summary[(summary["path"] == "latency") & (summary["case"] == case)]


def _text(rows, width: int = 200) -> str:
    frame = results_frame(rows)
    console = Console(width=width, record=True, file=io.StringIO())
    print_report(console, Run.from_frame(frame, lat.run_meta()))
    return console.export_text()


# -- the summary ------------------------------------------------------------------------------


def test_ddr_latency_is_the_largest_working_set_beyond_the_cache_never_loaded_or_numa():
    rows = [*lat.lat_host(), *lat.lat_host_numa(remote=300.0),
            *lat.loaded(idle=60.0)]  # loaded rows: 60 ns idle, all at 1 GiB, phase load_N
    (ddr,) = _latency(_summary(rows), "lat_host").itertuples()
    assert (ddr.device, ddr.size_bytes, ddr.value, ddr.unit) == ("cpu", 1 * GiB, 95.0, "ns")
    assert not ddr.higher_is_better and pd.isna(ddr.pct_of_peak) and pd.isna(ddr.gbps)
    assert not _latency(_summary(rows), "lat_host_loaded").size  # never a summary figure


def test_ddr_latency_of_in_cache_rows_only_is_in_cache_without_a_figure():
    rows = [r for r in lat.lat_host() if "in_cache" in r.flags]
    (ddr,) = _latency(_summary(rows), "lat_host").itertuples()
    assert ddr.status == "in cache" and pd.isna(ddr.value)
    assert ddr.size_bytes == 16 * MiB and "fits in a cache" in ddr.note


def test_two_page_sizes_at_the_largest_working_set_give_the_lower_and_say_so():
    rows = [*lat.lat_host(page_bytes=4096), *lat.lat_host(page_bytes=2 << 20, scale=0.8)]
    (ddr,) = _latency(_summary(rows), "lat_host").itertuples()
    assert ddr.value == pytest.approx(76.0)
    assert ddr.note == "on 2 MiB pages, the lowest of 2 page sizes (4 KiB pages in results.csv)"


def test_hbm_latency_per_gpu_beyond_the_l2_and_its_ratio_to_ddr():
    rows = [*lat.lat_host(), *lat.lat_gpu(0, 480.0), *lat.lat_gpu(1, 500.0)]
    gpus = _latency(_summary(rows), "lat_gpu")
    assert list(gpus["device"]) == ["gpu0", "gpu1"]
    assert list(gpus["size_bytes"]) == [256 * MiB] * 2  # the L2-resident sizes left out
    assert list(gpus["value"]) == [480.0, 500.0]
    assert list(gpus["hbm_over_ddr"]) == pytest.approx([480 / 95, 500 / 95])


def test_the_host_round_trip_is_lat_h2ds_headline_not_its_tlb_missing_row():
    """lat_h2d writes nvbandwidth's 2 MiB in-order chase (no phase) and, larger, a random
    chase where GPU page walks add to the round trip (phase random_tlb): the summary's
    figure is the headline's, though the other's set is the larger."""
    headline = lat.lat_h2d(0, 1100.0)
    random = [replace(row, size_bytes=256 * MiB, phase="random_tlb", value_best=1700.0,
                      value_median=1734.0) for row in headline]
    headline = [replace(row, size_bytes=2 * MiB) for row in headline]
    (row,) = _latency(_summary([*headline, *random]), "lat_h2d").itertuples()
    assert (row.value, row.size_bytes) == (1100.0, 2 * MiB)


def test_round_trip_pairs_and_small_copies():
    rows = [*lat.lat_h2d(0, 1100.0), *lat.lat_h2d(1, 1300.0),
            *lat.lat_p2p(3, 900.0, slow="gpu2->gpu0"),
            *lat.lat_memcpy(0), *lat.lat_memcpy(1, scale=1.5)]
    summary = _summary(rows)
    assert list(_latency(summary, "lat_h2d")["value"]) == [1100.0, 1300.0]
    (p2p,) = _latency(summary, "lat_p2p").itertuples()
    assert (p2p.device, p2p.value) == (SLOWEST_PAIR, 1350.0)
    assert p2p.note.startswith("gpu2->gpu0 is the slowest of 6 ordered pair(s)")
    memcpy = _latency(summary, "lat_memcpy")
    assert list(memcpy["direction"]) == ["h2d", "d2h", "within"]
    assert set(memcpy["device"]) == {SLOWEST_GPU}
    assert list(memcpy["value"]) == [3600.0, 3900.0, 2700.0]
    assert all(note.startswith("gpu1 is the slowest of 2 GPUs") for note in memcpy["note"])
    one = _latency(_summary(lat.lat_memcpy(0)), "lat_memcpy")
    assert list(one["device"]) == ["gpu0"] * 3 and set(one["note"]) == {""}


def test_numa_pairs_give_the_slowest_pair():
    (numa,) = _latency(_summary(lat.lat_host_numa(2)), "lat_host_numa").itertuples()
    assert (numa.device, numa.value) == (SLOWEST_PAIR, 140.0)
    assert numa.note.startswith("numa0->numa1 is the slowest of 4 ordered pair(s)")


def test_the_latency_sentence_sets_bandwidth_and_latency_ratios_side_by_side():
    one = lat.every_case(gpu_count=1)
    assert latency_sentence(_summary(one)) == (
        "HBM/DDR bandwidth 30.1×, latency 5.1×: a dependent load takes 480 ns from HBM "
        "(lat_gpu, gpu0 NVIDIA H200) against 95.0 ns from DDR (lat_host).")
    two = [*lat.lat_host(), *lat.lat_gpu(0, 480.0), *lat.lat_gpu(1, 500.0)]
    assert latency_sentence(_summary(two)) == (
        "HBM/DDR bandwidth ? (no hbm_triad and ddr_triad figures), latency 5.1–5.3×: a "
        "dependent load takes 480–500 ns from HBM (lat_gpu, 2 GPUs, NVIDIA H200) against "
        "95.0 ns from DDR (lat_host).")
    assert latency_sentence(_summary([lat.ddr_triad()])) is None  # no latency rows
    host_only = latency_sentence(_summary(lat.lat_host()))
    assert host_only == "A dependent load takes 95.0 ns from DDR (lat_host); no GPU latency " \
                        "in this run."


def test_simulated_latency_is_never_printed_as_a_figure():
    rows = [*lat.lat_host(), *lat.lat_gpu(0, 480.0, backend="simulated"),
            *lat.loaded("lat_gpu_loaded", "gpu0", idle=480.0, backend="simulated")]
    summary = _summary(rows)
    assert "simulated, not measurements" in latency_sentence(summary)
    text = _text(rows)
    assert "480" not in text and "simulated" in text
    assert loaded_latency_lines(rows_from_frame(results_frame(rows))) == []


def test_the_terminal_shows_the_latency_section_beside_bandwidth():
    text = _text(lat.every_case(gpu_count=1))
    lines = text.splitlines()
    section = lines[lines.index(next(line for line in lines if line.strip() == "latency")):]
    shown = [" ".join(line.split()) for line in section[1:8]]
    assert shown == [
        "lat_host cpu, 1 thr 1 GiB 95.0 ns 1.0%",
        "lat_host_numa slowest pair, 1 thr 1 GiB 140 ns 1.0%",
        "lat_gpu gpu0 256 MiB 480 ns 1.0% 5.1×",
        "lat_h2d gpu0 64 MiB 1100 ns 1.0%",
        "lat_memcpy h2d gpu0 4 B 2400 ns 1.0%",
        "lat_memcpy d2h gpu0 4 B 2600 ns 1.0%",
        "lat_memcpy within gpu0 4 B 1800 ns 1.0%",
    ]
    assert "hbm_triad gpu0 1 GiB 4300 10.0% 30.1×" in " ".join(text.split())
    assert "HBM/DDR bandwidth 30.1×, latency 5.1×" in text


def test_loaded_latency_lines_give_idle_and_each_load_with_its_bandwidth():
    rows = rows_from_frame(results_frame([*lat.loaded(), *lat.lat_host()]))
    assert loaded_latency_lines(rows) == [
        "lat_host_loaded cpu (1 GiB): latency idle and under a streaming load on the other "
        "cores (the GB/s that load achieved): 95.0 ns idle, 142 ns at 25% (10.0 GB/s), 190 ns "
        "at 50% (20.0 GB/s), 238 ns at 75% (30.0 GB/s), 285 ns at 100% (40.0 GB/s); 3.0× idle "
        "at the heaviest load"]
    frame = results_frame(lat.every_case(gpu_count=1))
    lines = report_lines(Run.from_frame(frame))["latency"]
    assert [line.split(" (")[0] for line in lines] == [
        "HBM/DDR bandwidth 30.1×, latency 5.1×: a dependent load takes 480 ns from HBM",
        "lat_host_loaded cpu", "lat_gpu_loaded gpu0"]


# -- findings ---------------------------------------------------------------------------------


def _findings(rows, system=None):
    from bwprof.analysis.findings import derive_findings

    return derive_findings(results_frame(rows), system or lat.run_meta(4))


def test_a_gpu_whose_latency_is_higher_than_its_siblings_is_the_slow_one():
    rows = [*lat.lat_gpu(0, 480.0), *lat.lat_gpu(1, 480.0), *lat.lat_gpu(2, 490.0),
            *lat.lat_gpu(3, 700.0)]
    found = _findings(rows)
    assert {(f.device, f.what) for f in found} == {
        ("gpu3", "slower than its identical siblings on lat_gpu")}
    # Medians (value_median; the best is 2% under it in these rows).
    assert "700.0 ns vs a median of 480.0 ns" in found[0].evidence
    # The lowest latency is the best: a GPU far below its siblings' latency is not slow.
    fast = [*lat.lat_gpu(0, 480.0), *lat.lat_gpu(1, 480.0), *lat.lat_gpu(2, 300.0)]
    assert _findings(fast) == []


def test_small_copies_are_compared_across_siblings_at_their_own_4_bytes():
    rows = [*lat.lat_memcpy(0), *lat.lat_memcpy(1), *lat.lat_memcpy(2, scale=1.6)]
    found = _findings(rows)
    assert {f.device for f in found} == {"gpu2"} and len(found) == 3  # each direction
    assert all("at 4 B" in f.evidence for f in found)


def test_loaded_latency_is_compared_phase_by_phase_and_says_which():
    rows = [lat.loaded("lat_gpu_loaded", f"gpu{i}", idle=480.0, full_gbps=3000.0,
                       backend="cuda", device_name="NVIDIA H200", memory="hbm", threads=None)
            for i in range(3)]
    assert _findings([r for group in rows for r in group]) == []  # load_0 vs load_100: never
    slow = [r if r.phase != "load_100" or r.device != "gpu1"
            else replace(r, value_best=r.value_best * 1.5, value_median=r.value_median * 1.5)
            for group in rows for r in group]
    (finding,) = _findings(slow)
    assert finding.device == "gpu1" and finding.evidence.endswith("(load_100)")


def test_a_remote_numa_pair_is_no_slow_node_but_a_slow_local_node_is():
    assert _findings(lat.lat_host_numa(2, local=90.0, remote=140.0)) == []
    rows = [r if r.device != "numa1->numa1" else replace(r, value_median=130.0)
            for r in lat.lat_host_numa(2, local=90.0, remote=140.0)]
    (finding,) = _findings(rows)
    assert finding.device == "numa1->numa1" and "NUMA node slower" in finding.what
    assert "130.0 ns vs a median of 90.0 ns" in finding.evidence


def test_latency_rows_have_no_peak_link_or_counter_findings():
    """A chase barely loads a link (which may idle at a lower generation) and moves few bytes
    against counters that also see a concurrent load: none of those checks apply."""
    counters = {"telemetry_samples": 20, "pcie_gen_min": 1, "pcie_width_min": 16,
                "counter_ratio": 40.0, "counter_gbps": 2000.0, "window_gbps": 50.0}
    rows = [replace(r, counters=counters) for r in
            [*lat.lat_h2d(0), *lat.lat_memcpy(0),
             *lat.loaded("lat_gpu_loaded", "gpu0", idle=480.0, backend="cuda",
                         device_name="NVIDIA H200", memory="hbm", threads=None)]]
    system = lat.run_meta(1, gpus=lat.gpus(lat.gpu(0, metadata={"pcie_gen_max": 5,
                                                                 "pcie_width_max": 16})))
    assert _findings(rows, system) == []
    above = [lat.lat_row(1.0, peak_value=0.5)]  # a latency "above" a peak means nothing
    assert _findings(above) == []


# -- compare ----------------------------------------------------------------------------------


def _compare_runs(tmp_path, later_scale: float):
    """Run A: every latency case; run B: the same with every latency `later_scale` times."""
    from bwprof.analysis.compare import compare_runs
    from bwprof.store.runfolder import load_run

    rows = lat.every_case(gpu_count=1)
    slower = [replace(r, value_best=r.value_best * later_scale,
                      value_median=r.value_median * later_scale)
              if r.metric == "latency" else r for r in rows]
    a = lat.write_run(tmp_path / "a", rows, gpu_count=1, run_id="box-a")
    b = lat.write_run(tmp_path / "b", slower, gpu_count=1, run_id="box-b")
    return a, b, compare_runs([load_run(a), load_run(b)])


def test_a_latency_that_rose_20_percent_is_a_regression_in_both_scopes(tmp_path):
    from typer.testing import CliRunner

    from bwprof.cli import app

    a, b, comparison = _compare_runs(tmp_path, 1.2)
    rows = comparison.rows
    later = rows[~rows["baseline"] & (rows["metric"] == "latency")]
    for scope in ("summary", "row"):
        mine = later[later["scope"] == scope]
        assert len(mine) and mine["change_pct"].tolist() == pytest.approx([20.0] * len(mine))
        assert mine["regressed_pct"].tolist() == pytest.approx([20.0] * len(mine))
    bandwidth = rows[~rows["baseline"] & (rows["metric"] == "bandwidth")]
    assert bandwidth["regressed_pct"].tolist() == pytest.approx([0.0] * len(bandwidth))
    summary = later[later["scope"] == "summary"]
    assert set(summary["case"]) == {"lat_host", "lat_gpu", "lat_h2d", "lat_memcpy",
                                    "lat_host_numa"}  # one GPU: no lat_p2p
    regressions = comparison.regressions(10)
    assert len(regressions) == len(summary)
    assert all(not r.higher_is_better and r.change_pct == pytest.approx(20.0)
               for r in regressions)
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--fail-below", "10"])
    assert result.exit_code == 1, result.output
    assert "below --fail-below: run B: lat_host cpu (CPU, with comma) 1 GiB latency rose " \
           "20.0% (more than 10%)" in result.output
    better = _compare_runs(tmp_path / "faster", 0.8)[2]
    assert better.regressions(10) == []


def test_loaded_phases_and_page_sizes_are_never_matched_to_each_other(tmp_path):
    """Run A measured lat_host_loaded at load_0 only, run B at load_100 only (and lat_host on
    other pages): no figure of one stands against the other's."""
    from bwprof.analysis.compare import compare_runs
    from bwprof.store.runfolder import load_run

    idle, full = lat.loaded()[0], lat.loaded()[-1]
    a = lat.write_run(tmp_path / "a", [idle, *lat.lat_host(4096)], run_id="a")
    b = lat.write_run(tmp_path / "b", [full, *lat.lat_host(2 << 20)], run_id="b")
    rows = compare_runs([load_run(a), load_run(b)]).rows
    loaded = rows[(rows["scope"] == "row") & (rows["case"] == "lat_host_loaded")]
    assert loaded.groupby("figure_id")["phase"].first().tolist() == ["load_0", "load_100"]
    assert loaded["change_pct"].isna().all()
    assert sorted(loaded["status"]) == ["absent", "absent", "ok", "ok"]
    host = rows[(rows["scope"] == "row") & (rows["case"] == "lat_host")]
    assert host["change_pct"].isna().all() and host["figure_id"].nunique() == 2 * 9
    # The headline DDR latency is the box's, whatever its pages: it aligns.
    (headline,) = rows[(rows["scope"] == "summary") & (rows["case"] == "lat_host")
                       & ~rows["baseline"]].itertuples()
    assert headline.change_pct == pytest.approx(0.0)


# -- plots ------------------------------------------------------------------------------------


def _visible(figure):
    return [axis for axis in figure.axes if axis.get_visible() and axis.get_label() != "<colorbar>"]


def test_latency_against_size_has_a_host_and_a_gpu_panel_with_the_cache_sizes():
    from bwprof.render import plots

    rows = results_frame([*lat.lat_host(), *lat.lat_host(page_bytes=2 << 20, scale=0.8),
                          *lat.lat_gpu(0), *lat.lat_gpu(1, 500.0), *lat.lat_memcpy(0),
                          *lat.loaded(), *lat.lat_host_numa()])
    figure = plots.latency_figure(rows, lat.run_meta())
    host, gpu = _visible(figure)
    assert host.get_title() == "host load latency (lat_host): host DDR"
    assert gpu.get_title() == "GPU load latency (lat_gpu): device memory"
    assert host.get_xscale() == "log" and host.get_yscale() == "log"
    marks = [text.get_text() for text in host.texts]
    assert marks == ["L1d 48 KiB", "L2 1 MiB", "L3 32 MiB"]  # per instance, as listed
    assert [text.get_text() for text in gpu.texts] == ["L2 60 MiB"]
    assert sorted(line.get_xdata()[0] for line in host.lines
                  if line.get_linestyle() == ":") == [48 << 10, 1 << 20, 32 << 20]
    legend = [text.get_text() for text in host.get_legend().get_texts()]
    assert legend == ["lat_host cpu, 4 KiB pages", "lat_host cpu, 2 MiB pages",
                      plots.RESIDENT_LABEL]
    # One line per device; loaded, NUMA and 4-byte copy rows are not on it.
    drawn = [line for line in gpu.lines if line.get_linestyle() == "-"]
    assert [line.get_label() for line in drawn] == ["lat_gpu gpu0", "lat_gpu gpu1"]
    assert len(drawn[0].get_xdata()) == 9
    hollow = [line for line in gpu.lines if line.get_markerfacecolor() == "white"
              and line.get_linestyle() == "None"]
    assert [len(line.get_xdata()) for line in hollow] == [8, 8]  # under 4x the L2
    assert plots.SIMULATED_TITLE not in figure._suptitle.get_text()


def test_latency_under_load_is_drawn_against_the_loads_bandwidth():
    from bwprof.render import plots

    rows = results_frame([*lat.loaded(),
                          *lat.loaded("lat_gpu_loaded", "gpu0", idle=480.0, full_gbps=3000.0,
                                      backend="simulated", memory="hbm")])
    figure = plots.loaded_latency_figure(rows, lat.run_meta())
    host, gpu = _visible(figure)
    (line,) = host.lines
    assert list(line.get_xdata()) == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert list(line.get_ydata()) == pytest.approx([95.0, 142.5, 190.0, 237.5, 285.0])
    assert [t.get_text() for t in host.texts] == ["0%", "25%", "50%", "75%", "100%"]
    assert gpu.lines[0].get_label() == "lat_gpu_loaded gpu0 (simulated)"
    assert plots.SIMULATED_TITLE in figure._suptitle.get_text()
    assert plots.loaded_latency_figure(results_frame(lat.lat_host()), lat.run_meta()) is None


def test_numa_and_p2p_latency_heatmaps_colour_from_zero_and_need_two_members():
    from bwprof.render import plots

    rows = results_frame([*lat.lat_host_numa(2), *lat.lat_p2p(3, slow="gpu2->gpu0")])
    numa = plots.numa_latency_figure(rows, lat.run_meta())
    (image,) = numa.axes[0].images
    assert image.norm.vmin == 0 and image.norm.vmax == 140.0
    assert image.get_array().tolist() == [[90.0, 140.0], [140.0, 90.0]]
    assert numa.axes[0].get_ylabel() == "CPUs of node"
    p2p = plots.p2p_latency_figure(rows, lat.run_meta(3))
    (image,) = p2p.axes[0].images
    assert image.norm.vmin == 0 and image.norm.vmax == 1350.0
    assert plots.numa_latency_figure(results_frame(lat.lat_host_numa(1)), lat.run_meta()) is None
    assert plots.p2p_latency_figure(results_frame(lat.lat_host()), lat.run_meta()) is None


# -- bwprof report ----------------------------------------------------------------------------


def test_report_of_a_latency_run_shows_the_section_and_writes_the_plots(tmp_path):
    from typer.testing import CliRunner

    from bwprof.cli import app
    from bwprof.render import plots

    run = lat.write_run(tmp_path / "run", lat.every_case(gpu_count=2), gpu_count=2)
    result = CliRunner().invoke(app, ["report", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "lat_host cpu, 1 thr 1 GiB 95.0 ns" in text
    assert "lat_gpu gpu1 256 MiB 480 ns 1.0% 5.1×" in text
    assert "lat_p2p slowest pair 64 MiB 900 ns" in text
    assert "lat_memcpy d2h slowest GPU 4 B 2600 ns" in text
    assert "HBM/DDR bandwidth 30.1×, latency 5.1×: a dependent load takes 480 ns from HBM " \
           "(lat_gpu, 2 GPUs, NVIDIA H200) against 95.0 ns from DDR (lat_host)." in text
    assert "lat_host_loaded cpu (1 GiB): latency idle and under a streaming load" in text
    written = [plots.BANDWIDTH_PNG, plots.SUMMARY_PNG, plots.LATENCY_PNG,
               plots.LOADED_LATENCY_PNG, plots.NUMA_LATENCY_PNG, plots.P2P_LATENCY_PNG]
    assert (f"wrote summary.csv, results.parquet, {', '.join(written)}, columns.csv in "
            f"{run / 'report'}") in text
    for name in written:
        assert (run / "report" / name).read_bytes().startswith(b"\x89PNG"), name
    summary = pd.read_csv(run / "report" / "summary.csv")
    latency = summary[summary["path"] == "latency"]
    assert set(latency["unit"]) == {"ns"} and not latency["higher_is_better"].any()
    json_run = CliRunner().invoke(app, ["report", str(run), "--json", "--no-plots"])
    import json

    lines = json.loads(json_run.output)["lines"]["latency"]
    assert lines[0].startswith("HBM/DDR bandwidth 30.1×, latency 5.1×") and len(lines) == 4


def test_latency_plots_keep_their_text_at_8_points_or_more():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bwprof.render import figstyle, plots

    rows = results_frame(lat.every_case())
    for figure in (plots.latency_figure(rows, lat.run_meta()),
                   plots.loaded_latency_figure(rows, lat.run_meta()),
                   plots.numa_latency_figure(rows, lat.run_meta()),
                   plots.p2p_latency_figure(rows, lat.run_meta())):
        assert figure is not None
        FigureCanvasAgg(figure).draw()
        assert figstyle.smallest_text(figure) >= figstyle.MIN_POINTS
