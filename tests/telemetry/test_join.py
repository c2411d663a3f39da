"""Joining hand-made samples onto rows."""

from __future__ import annotations

import pytest

from bwprof.schema.rows import TELEMETRY_COLUMNS
from bwprof.telemetry.join import counter_gbps, counters_for, join_every_gpu, join_row

MIB = 1 << 20


def _samples():
    out = []
    for t in (0.1, 0.2, 0.3, 0.4):
        out.append({"t_s": t, "device": "gpu0", "sm_clock_mhz": 1980 - 100 * (t == 0.3),
                    "pcie_rx_mibps": 40_000.0, "pcie_gen": 5 if t != 0.2 else 4,
                    "pcie_width": 16, "throttle_reasons": 0x1 | (0x4 if t == 0.3 else 0),
                    "dram_bw_util_pct": 80.0, "power_w": 600.0 + 100 * t})
        out.append({"t_s": t, "device": "gpu1", "sm_clock_mhz": 100, "pcie_rx_mibps": 1.0})
    return out


def test_the_csv_columns_are_what_the_join_fills():
    joined = join_row(_samples(), device="gpu0", direction="h2d", memory="pinned",
                      peak_gbps=None, window=(0.0, 1.0), window_bytes=None)
    assert set(joined) == set(TELEMETRY_COLUMNS)


def test_statistics_of_one_gpu_inside_the_window():
    counters = counters_for(_samples(), "gpu0", (0.15, 0.35))
    assert counters["telemetry_samples"] == 2
    assert counters["sm_clock_mhz_min"] == 1880 and counters["sm_clock_mhz_mean"] == 1930
    assert counters["pcie_gen_min"] == 4 and counters["pcie_width_min"] == 16
    assert counters["power_w_max"] == pytest.approx(630.0)
    assert counters["throttle_reasons"] == "sw_power_cap"  # idle is benign and left out
    assert counters["nvlink_tx_mibps_mean"] is None
    empty = counters_for(_samples(), "gpu0", (5.0, 6.0))
    assert empty["telemetry_samples"] == 0 and empty["power_w_mean"] is None


def test_counter_bandwidth_for_each_kind_of_row():
    c = {"dram_bw_util_pct_mean": 80.0, "pcie_rx_mibps_mean": 40_000.0,
         "pcie_tx_mibps_mean": 20_000.0, "gpm_pcie_rx_mibps_mean": None,
         "nvlink_tx_mibps_mean": 100_000.0}
    assert counter_gbps(c, direction="within", memory="hbm", peak_gbps=4900.0) == 3920.0
    assert counter_gbps(c, direction="h2d", memory="pinned", peak_gbps=63.0) == pytest.approx(
        40_000 * MIB / 1e9)
    assert counter_gbps({**c, "gpm_pcie_rx_mibps_mean": 50_000.0}, direction="h2d",
                        memory="pinned", peak_gbps=None) == pytest.approx(50_000 * MIB / 1e9)
    assert counter_gbps(c, direction="both", memory="pinned", peak_gbps=None) == pytest.approx(
        60_000 * MIB / 1e9)
    assert counter_gbps(c, direction="p2p", memory="hbm", peak_gbps=None) == pytest.approx(
        100_000 * MIB / 1e9)
    assert counter_gbps(c, direction="compute", memory="hbm", peak_gbps=None) is None


def _snapshots(count: int, rx_mibps: float = 40_000.0) -> list[dict[str, object]]:
    """Plain samples every 50 ms from 0.05 s (no GPM), PCIe receiving `rx_mibps`."""
    return [{"t_s": 0.05 * (i + 1), "device": "gpu0", "pcie_rx_mibps": rx_mibps}
            for i in range(count)]


def test_the_ratio_compares_with_bytes_moved_in_the_window_and_needs_ten_snapshots():
    """NVML's plain PCIe counter reads 20 ms of each interval: fewer than ten such snapshots
    of a copy in bursts read 0.75 of what moved on the H200, so they give no ratio."""
    window = (0.0, 0.55)
    window_bytes = int(40_000 * MIB * 0.55)  # 40,000 MiB/s for the whole window
    joined = join_row(_snapshots(10), device="gpu0", direction="h2d", memory="pinned",
                      peak_gbps=63.0, window=window, window_bytes=window_bytes)
    assert joined["telemetry_samples"] == 10
    assert joined["window_gbps"] == pytest.approx(40_000 * MIB / 1e9)
    assert joined["counter_ratio"] == pytest.approx(1.0)
    few = join_row(_snapshots(9), device="gpu0", direction="h2d", memory="pinned",
                   peak_gbps=63.0, window=window, window_bytes=window_bytes)
    assert few["telemetry_samples"] == 9 and few["counter_gbps"] is not None
    assert few["counter_ratio"] is None


def test_a_trickle_gives_no_ratio_the_counters_background_would_swamp_it():
    """A 4 KiB row moved 3 MB/s over its window on the H200; the counters, idle-link
    background included, read 0.09 of that. Under 1 GB/s moved there is no ratio."""
    window = (0.0, 0.55)

    def ratio(moved_gbps):
        rx = moved_gbps * 1e9 / MIB
        return join_row(_snapshots(10, rx), device="gpu0", direction="h2d", memory="pinned",
                        peak_gbps=63.0, window=window,
                        window_bytes=int(moved_gbps * 1e9 * 0.55))["counter_ratio"]

    assert ratio(0.9) is None
    assert ratio(1.1) == pytest.approx(1.0)


def test_each_row_reads_the_counters_of_the_gpu_that_sends():
    from bwprof.telemetry.join import source_device

    assert [source_device(d) for d in ("gpu0", "gpu0->gpu1", "gpu2<->gpu3", "all")] == [
        "gpu0", "gpu0", "gpu2", "all"]


def test_gpm_values_count_only_when_their_whole_interval_lies_in_the_window():
    samples = [{"t_s": t, "device": "gpu0", "dram_bw_util_pct": util, "gpm_interval_s": span}
               for t, util, span in ((1.0, 5.0, 0.2),     # covers 0.8-1.0: mostly before the row
                                     (1.1, None, None),   # too soon for a GPM sample
                                     (1.2, 90.0, 0.2),    # 1.0-1.2: inside
                                     (1.4, 80.0, 0.2))]   # 1.2-1.4: inside
    counters = counters_for(samples, "gpu0", (0.85, 1.45))
    assert counters["telemetry_samples"] == 4
    assert counters["dram_bw_util_pct_mean"] == pytest.approx(85.0)


def test_a_gpm_value_counts_only_from_one_refresh_after_the_window_starts():
    """The H200's GPM values trail their reads: the interval 10.65-10.80 s of a window that
    began at 10.63 s, the GPU copying all through it, read 11% against 86.5% after it."""
    samples = [{"t_s": t, "device": "gpu0", "dram_bw_util_pct": util, "gpm_interval_s": 0.15}
               for t, util in ((10.80, 11.3), (10.95, 86.6), (11.10, 86.5), (11.25, 86.5))]
    counters = counters_for(samples, "gpu0", (10.63, 11.3))
    assert counters["telemetry_samples"] == 4
    assert counters["dram_bw_util_pct_mean"] == pytest.approx(86.53, abs=0.01)


def test_a_gpm_figure_needs_three_gpm_values_behind_its_ratio():
    """Plain samples come every 50 ms, GPM values every 100 ms at most: an HBM row's ratio
    must rest on three GPM values, however many plain samples its window holds."""
    def samples(gpm_times):
        return [{"t_s": t, "device": "gpu0", "sm_clock_mhz": 1980.0,
                 **({"dram_bw_util_pct": 80.0, "gpm_interval_s": 0.1} if t in gpm_times else {})}
                for t in (1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35)]

    def ratio(gpm_times):
        return join_row(samples(gpm_times), device="gpu0", direction="within", memory="hbm",
                        peak_gbps=4800.0, window=(0.9, 1.4),
                        window_bytes=int(0.8 * 4800e9 * 0.5))["counter_ratio"]

    assert ratio({1.1, 1.3}) is None  # seven samples, two GPM values
    assert ratio({1.1, 1.2, 1.3}) == pytest.approx(1.0)


def test_the_link_counts_only_while_pcie_is_busy():
    idle = {"device": "gpu0", "pcie_gen": 1, "pcie_width": 16, "pcie_rx_mibps": 3.0}
    busy = {"device": "gpu0", "pcie_gen": 5, "pcie_width": 16, "pcie_rx_mibps": 50_000.0}
    samples = [{**idle, "t_s": 0.1}, {**busy, "t_s": 0.2}, {**busy, "t_s": 0.3}]
    counters = counters_for(samples, "gpu0", (0.0, 1.0))
    assert (counters["pcie_gen_min"], counters["pcie_width_min"]) == (5, 16)
    downtrained = [*samples, {**busy, "t_s": 0.4, "pcie_gen": 4}]
    assert counters_for(downtrained, "gpu0", (0.0, 1.0))["pcie_gen_min"] == 4
    assert counters_for(samples[:1], "gpu0", (0.0, 1.0))["pcie_gen_min"] is None


def test_a_link_trained_far_down_counts_as_busy_when_it_carries_the_copy():
    """Gen1 x1 carries 0.25 GB/s: moving 200 MiB/s it is the bottleneck, under load, though
    below 1 GiB/s; an idle x16 link moving as much is not (it has 4 GB/s even at Gen1)."""
    slow = {"device": "gpu0", "pcie_gen": 1, "pcie_width": 1, "pcie_rx_mibps": 200.0}
    idle_x16 = {"device": "gpu0", "pcie_gen": 1, "pcie_width": 16, "pcie_rx_mibps": 200.0}
    trickle = {**slow, "pcie_rx_mibps": 3.0}
    assert counters_for([{**slow, "t_s": 0.2}], "gpu0", (0.0, 1.0))["pcie_width_min"] == 1
    for quiet in (idle_x16, trickle):
        assert counters_for([{**quiet, "t_s": 0.2}], "gpu0", (0.0, 1.0))["pcie_gen_min"] is None


def test_p2p_without_nvlink_is_checked_against_pcie():
    over_pcie = {"nvlink_tx_mibps_mean": 0.0, "gpm_pcie_tx_mibps_mean": 20_000.0}
    assert counter_gbps(over_pcie, direction="p2p", memory="hbm", peak_gbps=None) == (
        pytest.approx(20_000 * MIB / 1e9))
    assert counter_gbps({}, direction="p2p", memory="hbm", peak_gbps=None) is None


def test_host_copies_over_c2c_are_not_checked_against_pcie_counters():
    counters = {"pcie_rx_mibps_mean": 10.0, "dram_bw_util_pct_mean": 80.0}
    assert counter_gbps(counters, direction="h2d", memory="pinned", peak_gbps=None,
                        host_over_pcie=False) is None
    assert counter_gbps(counters, direction="within", memory="hbm", peak_gbps=4800.0,
                        host_over_pcie=False) == pytest.approx(3840.0)


def test_counter_ratio_is_what_the_counters_saw_over_the_bytes_moved():
    window_bytes = int(40_000 * MIB * 0.55)  # what pcie_rx_mibps says over the window
    joined = join_row(_snapshots(10), device="gpu0", direction="h2d", memory="pinned",
                      peak_gbps=63.0, window=(0.0, 0.55), window_bytes=2 * window_bytes)
    assert joined["counter_ratio"] == pytest.approx(0.5, rel=1e-6)


def test_half_a_slow_links_capacity_counts_as_busy():
    from bwprof.telemetry.join import counters_for
    gen1x4 = {"device": "gpu0", "pcie_gen": 1, "pcie_width": 4, "t_s": 0.2}  # 1 GB/s = 954 MiB/s
    def width(rate):
        return counters_for([{**gen1x4, "pcie_rx_mibps": rate}], "gpu0", (0, 1))["pcie_width_min"]

    assert width(600.0) == 4 and width(400.0) is None


def test_exactly_1_gib_per_s_counts_as_busy():
    from bwprof.telemetry.join import counters_for
    s = {"device": "gpu0", "pcie_gen": 5, "pcie_width": 16, "t_s": 0.2, "pcie_rx_mibps": 1024.0}
    assert counters_for([s], "gpu0", (0, 1))["pcie_gen_min"] == 5


def test_every_column_is_its_own_fields_statistic():
    from bwprof.telemetry.join import _SPEC, counters_for
    fields = {name for _, name, _ in _SPEC}
    samples = [{"device": "gpu0", "t_s": 0.5 + k * 0.1, "gpm_interval_s": 0.1,
                **{f: float(100 * i + 10 * k) for i, f in enumerate(sorted(fields))}}
               for k in range(3)]
    out = counters_for(samples, "gpu0", (0.0, 1.0))
    for column in [c for c, n, _ in _SPEC if n not in ("pcie_gen", "pcie_width")]:
        name, stat = column.rsplit("_", 1)  # from the column's name, not from _SPEC
        values = [s[name] for s in samples]
        want = {"max": max(values), "min": min(values), "mean": sum(values) / 3}[stat]
        assert out[column] == pytest.approx(want), column


def test_a_gpm_interval_without_a_refresh_does_not_pull_the_counter_figure():
    """Seen on the H200 in a steady 256 MiB device copy: GPM counters refresh every 100 ms,
    so one interval read 0% and the next 100% (double, clamped). The counter figure takes the
    median of the window's GPM values; the `_mean` column stays their mean."""
    levels = (83.0, 85.7, 85.8, 85.7, 85.9, 0.0, 100.0)
    samples = [{"t_s": 11.1 + 0.1 * i, "device": "gpu0", "dram_bw_util_pct": level,
                "gpm_interval_s": 0.1} for i, level in enumerate(levels)]
    window = (10.9, 11.8)
    joined = join_row(samples, device="gpu0", direction="within", memory="hbm",
                      peak_gbps=4814.0, window=window, window_bytes=int(4133e9 * 0.9))
    assert joined["dram_bw_util_pct_mean"] == pytest.approx(sum(levels) / len(levels))
    assert joined["counter_gbps"] == pytest.approx(0.857 * 4814.0)
    assert joined["counter_ratio"] == pytest.approx(1.0, abs=0.01)


def test_gpm_pcie_rates_are_read_by_their_median_too():
    rates = (55_000.0, 55_200.0, 0.0, 110_000.0, 55_100.0)
    samples = [{"t_s": 1.2 + 0.1 * i, "device": "gpu0", "gpm_pcie_rx_mibps": rate,
                "gpm_interval_s": 0.1} for i, rate in enumerate(rates)]
    joined = join_row(samples, device="gpu0", direction="h2d", memory="pinned",
                      peak_gbps=63.0, window=(0.95, 1.7),
                      window_bytes=int(55_100 * MIB * 0.75))
    assert joined["counter_gbps"] == pytest.approx(55_100 * MIB / 1e9)
    assert joined["counter_ratio"] == pytest.approx(1.0, abs=0.001)


# Catches: the every-GPU row (h2d_all's `all`) without any counter check
def test_the_every_gpu_row_sums_its_gpus_counter_figures_against_all_bytes_moved():
    window = (0.0, 0.55)
    each = int(40_000 * MIB * 0.55)  # each GPU received 40,000 MiB/s over the window
    samples = _snapshots(10) + [{**s, "device": "gpu1", "pcie_rx_mibps": 30_000.0}
                                for s in _snapshots(10)]
    joined = join_every_gpu(samples, devices=["gpu0", "gpu1"], direction="h2d",
                            memory="pinned", window=window, window_bytes=2 * each)
    assert set(joined) <= set(TELEMETRY_COLUMNS) and joined["telemetry_samples"] == 20
    assert joined["window_gbps"] == pytest.approx(2 * 40_000 * MIB / 1e9)
    assert joined["counter_gbps"] == pytest.approx(70_000 * MIB / 1e9)
    assert joined["counter_ratio"] == pytest.approx(70 / 80)
    # A GPU short of samples, or reached over NVLink-C2C, leaves the sum unchecked.
    short = join_every_gpu(samples[:-1], devices=["gpu0", "gpu1"], direction="h2d",
                           memory="pinned", window=window, window_bytes=2 * each)
    assert short["counter_ratio"] is None
    c2c = join_every_gpu(samples, devices=["gpu0", "gpu1"], direction="h2d", memory="pinned",
                         window=window, window_bytes=2 * each, c2c=["gpu1"])
    assert c2c["counter_gbps"] is None and c2c["counter_ratio"] is None


# Catches: an all_to_one row ('all->gpu1') read by the counters of a GPU named 'all' (none),
# or by its GPU's bytes out, when every byte of the row comes in over gpu1's links
def test_a_row_into_one_gpu_reads_that_gpus_bytes_in():
    from bwprof.telemetry.join import source_device

    assert source_device("all->gpu1") == "gpu1"
    samples = [{"t_s": 0.1 * k, "device": "gpu1", "gpm_interval_s": 0.1,
                "nvlink_rx_mibps": 100_000.0, "nvlink_tx_mibps": 500.0} for k in range(3, 11)]
    samples += [{**s, "device": "gpu0", "nvlink_rx_mibps": 0.0} for s in samples]
    window = (0.0, 1.05)
    moved = int(100_000 * MIB * 1.05)
    joined = join_row(samples, device="all->gpu1", direction="p2p", memory="hbm",
                      peak_gbps=None, window=window, window_bytes=moved)
    assert joined["telemetry_samples"] == 8
    assert joined["counter_gbps"] == pytest.approx(100_000 * MIB / 1e9)
    assert joined["counter_ratio"] == pytest.approx(1.0)
    sender = join_row(samples, device="gpu1->all", direction="p2p", memory="hbm",
                      peak_gbps=None, window=window, window_bytes=moved)
    assert sender["counter_gbps"] == pytest.approx(500 * MIB / 1e9)  # gpu1's bytes out
