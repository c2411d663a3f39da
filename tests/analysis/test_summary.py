"""The summary's rows follow from results.csv: checked against the stored run folders (read
back with the csv module, independently of the pandas code) and hand-made rows."""

import csv
import io
import math

import pandas as pd
import pytest
from rich.console import Console

from bwprof.analysis.run import Run
from bwprof.analysis.summary import SLOWEST_PAIR, SUMMARY_COLUMNS, build_summary, headline_sentence
from bwprof.render.terminal import _gbps, print_report
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.table import read_results, results_frame
from tests.conftest import DATA
from tests.store.test_export import make_row


def _medians(median: float) -> dict[str, float]:
    """A hand-made row's figures: `median` (what every output shows) and a best 2% above it,
    so a test shows which of the two an output took."""
    return {"gbps_median": median, "gbps_best": median * 1.02}


def _csv_rows(name: str) -> list[dict]:
    with open(DATA / name / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _summary(name: str) -> pd.DataFrame:
    return build_summary(read_results(DATA / name / "results.csv"))


def _one(summary: pd.DataFrame, case: str, device: str) -> pd.Series:
    rows = summary[(summary["case"] == case) & (summary["device"] == device)]
    assert len(rows) == 1, (case, device, rows)
    return rows.iloc[0]


def _beyond_cache(row: dict) -> bool:
    return not ({"in_cache", "l2_resident"} & set((row.get("flags") or "").split("|")))


def test_host_run_ddr_row_is_the_best_median_at_the_largest_size_and_gpu_paths_stay_empty():
    rows = [r for r in _csv_rows("host-ddr") if r["case"] == "ddr_triad" and r["status"] == "ok"
            and _beyond_cache(r)]
    largest = max(int(r["size_bytes"]) for r in rows)
    best = max((r for r in rows if int(r["size_bytes"]) == largest),
               key=lambda r: float(r["gbps_median"]))
    summary = _summary("host-ddr")
    assert tuple(summary.columns) == SUMMARY_COLUMNS
    assert list(summary["path"]) == ["ddr", "hbm", "h2d", "d2h", "p2p", "overlap"]
    ddr = summary.iloc[0]
    assert ddr["gbps"] == float(best["gbps_median"]) and ddr["backend"] == "host"
    assert ddr["gbps_best"] == float(best["gbps_best"]) > ddr["gbps"]
    assert ddr["cv"] == float(best["cv"]) and ddr["repeats"] == int(best["repeats"])
    assert ddr["size_bytes"] == int(best["size_bytes"])
    assert (summary["schema_version"] == SCHEMA_VERSION).all()
    empty = summary.iloc[1:]
    assert empty["gbps"].isna().all() and empty["overlap_efficiency"].isna().all()
    assert (empty["status"] == "absent").all()
    assert empty["note"].str.endswith("row in this run").all()
    assert empty.iloc[0]["note"] == "no hbm_triad or d2d_copy row in this run"
    assert "DDR's is" in headline_sentence(summary)


def test_gpu_paths_take_the_largest_ok_size_per_gpu_and_the_aggregate():
    rows = [r for r in _csv_rows("sim-a") if r["status"] == "ok"]
    summary = _summary("sim-a")
    for case, device in [("hbm_triad", "gpu0"), ("hbm_triad", "gpu1"), ("d2d_copy", "gpu1"),
                         ("h2d_pinned", "gpu0"), ("d2h_pinned", "gpu1"), ("h2d_all", "all"),
                         ("d2h_all", "all")]:
        mine = [r for r in rows if r["case"] == case and r["device"] == device]
        largest = max(mine, key=lambda r: int(r["size_bytes"]))
        row = _one(summary, case, device)
        assert row["gbps"] == float(largest["gbps_median"]), (case, device)
        assert row["gbps_best"] == float(largest["gbps_best"]), (case, device)
        assert row["size_bytes"] == int(largest["size_bytes"])
        assert row["backend"] == "simulated"
    # 256 MiB was skipped on the 64 MiB simulated GPUs: the largest ok size is 16 MiB.
    assert set(summary.loc[summary["path"].isin(["h2d", "d2h"]), "size_bytes"]) == {16 << 20}
    assert "h2d_all" not in set(summary.loc[summary["device"] == "gpu0", "case"])


def test_p2p_is_the_slowest_ordered_pair_at_the_largest_size():
    rows = [r for r in _csv_rows("sim-a") if r["case"] == "p2p_copy" and r["status"] == "ok"]
    largest = max(int(r["size_bytes"]) for r in rows)
    pairs = [r for r in rows if int(r["size_bytes"]) == largest]
    slowest = min(pairs, key=lambda r: float(r["gbps_median"]))
    row = _one(_summary("sim-a"), "p2p_copy", SLOWEST_PAIR)
    assert row["gbps"] == float(slowest["gbps_median"])
    assert row["note"] == f"{slowest['device']} is the slowest of {len(pairs)} ordered pair(s)"


def test_ratios_are_hbm_over_ddr_and_over_the_same_gpus_host_to_device():
    summary = _summary("sim-a")
    ddr = summary.loc[summary["path"] == "ddr", "gbps"].item()
    for device in ("gpu0", "gpu1"):
        hbm = _one(summary, "hbm_triad", device)
        h2d = _one(summary, "h2d_pinned", device)
        assert math.isclose(hbm["hbm_over_ddr"], hbm["gbps"] / ddr)
        assert math.isclose(hbm["hbm_over_pcie"], hbm["gbps"] / h2d["gbps"])
    assert summary.loc[summary["case"] != "hbm_triad", "hbm_over_ddr"].isna().all()
    assert "simulated" in headline_sentence(summary)


def _gpu_row(**overrides):
    values = dict(case="hbm_triad", backend="cuda", device="gpu0", device_name="H200",
                  memory="hbm", direction="within", threads=None, size_bytes=1 << 28,
                  **_medians(4000.0), peak_gbps=4800.0, pct_of_peak=None, note="")
    values.update(overrides)
    return make_row(**values)


def test_percent_of_peak_ratios_and_the_headline_sentence_of_a_measured_box():
    rows = [
        make_row(**_medians(100.0), threads=1), make_row(**_medians(125.0), threads=2),
        make_row(**_medians(999.0), threads=4, status="invalid"),  # never a summary figure
        _gpu_row(), _gpu_row(device="gpu1", **_medians(3800.0)),
        _gpu_row(case="h2d_pinned", memory="pinned", direction="h2d", **_medians(50.0),
                 peak_gbps=63.0, size_bytes=1 << 20),
        _gpu_row(case="h2d_pinned", memory="pinned", direction="h2d", **_medians(40.0),
                 peak_gbps=63.0, size_bytes=1 << 30, cv=0.02),
    ]
    summary = build_summary(results_frame(rows))
    ddr = summary.iloc[0]
    assert ddr["gbps"] == 125.0 and ddr["threads"] == 2
    assert ddr["note"] == "the best median of 2 ddr_triad rows (threads) at its largest size"
    hbm0 = _one(summary, "hbm_triad", "gpu0")
    assert hbm0["pct_of_peak"] == pytest.approx(100 * 4000 / 4800)
    assert hbm0["hbm_over_ddr"] == pytest.approx(32.0)
    assert hbm0["hbm_over_pcie"] == pytest.approx(100.0)  # against the 1 GiB row: 40 GB/s
    assert math.isnan(_one(summary, "hbm_triad", "gpu1")["hbm_over_pcie"])  # no h2d row
    sentence = headline_sentence(summary)
    assert sentence.startswith("HBM moves 30.4–32.0× the bandwidth of DDR on this box")
    assert "2 GPUs, H200" in sentence and "125.0 GB/s" in sentence


def test_overlap_efficiency_comes_from_concurrent_rows_only():
    rows = [
        _gpu_row(case="overlap_h2d_compute", memory="pinned", direction="h2d", phase="alone",
                 size_bytes=1 << 26),
        _gpu_row(case="overlap_h2d_compute", memory="pinned", direction="h2d",
                 phase="concurrent", size_bytes=1 << 20, overlap_efficiency=0.5),
        _gpu_row(case="overlap_h2d_compute", memory="pinned", direction="h2d",
                 phase="concurrent", size_bytes=1 << 26, overlap_efficiency=0.93),
        _gpu_row(case="pipeline_chunked", memory="pinned", direction="both", phase="pipeline"),
    ]
    summary = build_summary(results_frame(rows))
    overlap = summary[summary["path"] == "overlap"]
    assert len(overlap) == 1
    assert overlap.iloc[0]["overlap_efficiency"] == 0.93
    assert overlap.iloc[0]["size_bytes"] == 1 << 26
    without = build_summary(results_frame(rows[:1]))
    row = without[without["path"] == "overlap"].iloc[0]
    assert math.isnan(row["overlap_efficiency"]) and row["status"] == "absent"


def test_a_path_that_could_not_run_says_why():
    skipped = dict(backend="cuda", device="", memory="hbm", status="skipped",
                   note="no NVIDIA driver", gbps_best=None, gbps_median=None,
                   size_bytes=None, threads=None)
    # d2d_copy runs first, but the HBM path is named by its headline case, hbm_triad.
    rows = [make_row(), make_row(case="d2d_copy", **skipped),
            make_row(case="hbm_triad", **skipped)]
    summary = build_summary(results_frame(rows))
    hbm = summary[summary["path"] == "hbm"].iloc[0]
    assert (hbm["status"], hbm["case"], hbm["note"]) == ("skipped", "hbm_triad",
                                                         "no NVIDIA driver")
    # The reason is in summary.csv and said once under the table, not again in the sentence.
    assert headline_sentence(summary).startswith(
        "No HBM figure in this run, so there is no HBM/DDR ratio")


def test_the_terminal_never_shows_a_simulated_figure():
    rows = read_results(DATA / "sim-a" / "results.csv")
    summary = build_summary(rows)
    console = Console(width=200, record=True, file=io.StringIO())

    print_report(console, Run.from_frame(rows))
    text = console.export_text()
    simulated = summary[summary["backend"] == "simulated"]
    assert len(simulated) >= 10 and "simulated" in text
    for value in simulated["gbps"]:
        assert _gbps(value) not in text
    ddr = summary.loc[summary["path"] == "ddr", "gbps"].item()
    assert f" {_gbps(ddr)} " in text  # the host row is measured


def test_the_p2p_figure_is_taken_at_the_size_every_pair_measured():
    from bwprof.analysis.summary import build_summary, p2p_matrix_rows
    from bwprof.schema.table import results_frame
    from tests.store.test_export import make_row

    def pair(device, size, gbps):
        return make_row(case="p2p_copy", backend="cuda", device=device, direction="p2p",
                        memory="hbm", threads=None, size_bytes=size, **_medians(gbps))

    # Only gpu0->gpu1 sweeps up to 1 GiB; every pair has 256 MiB (the matrix size).
    rows = [pair("gpu0->gpu1", 1 << 30, 400.0), pair("gpu0->gpu1", 256 << 20, 390.0),
            pair("gpu1->gpu0", 256 << 20, 380.0), pair("gpu0->gpu2", 256 << 20, 120.0)]
    frame = results_frame(rows)
    assert set(p2p_matrix_rows(frame)["device"]) == {"gpu0->gpu1", "gpu1->gpu0", "gpu0->gpu2"}
    summary = build_summary(frame)
    (row,) = summary[summary["path"] == "p2p"].itertuples()
    assert row.gbps == 120.0 and "gpu0->gpu2 is the slowest of 3" in row.note


def test_numa_nodes_follow_their_hosts_ddr_row_and_never_stand_for_the_host():
    def ddr(device, gbps, numa=None):
        return make_row(case="ddr_triad", device=device, **_medians(gbps), numa_node=numa)

    summary = build_summary(results_frame([
        ddr("numa0", 150.0, 0), ddr("cpu", 280.0), ddr("numa1", 140.0, 1),
        make_row(case="hbm_triad", backend="cuda", device="gpu0", device_name="NVIDIA H200",
                 memory="hbm", **_medians(4200.0))]))
    ddr_rows = summary[summary["path"] == "ddr"]
    assert list(ddr_rows["device"]) == ["cpu", "numa0", "numa1"]
    assert _one(summary, "hbm_triad", "gpu0")["hbm_over_ddr"] == pytest.approx(4200 / 280)
    assert "against 280.0 GB/s (ddr_triad)" in headline_sentence(summary)


def test_ddr_is_never_a_cache_figure():
    """Rows whose arrays are under 4x the last-level cache stay out of DDR's figure, the
    HBM/DDR ratio and the headline; with only such rows DDR has no figure and says why."""
    cached = make_row(case="ddr_triad", size_bytes=1 << 20, **_medians(114.0),
                      flags=frozenset({"in_cache"}),
                      note="arrays under 4x the last-level cache (480 MiB): partly cache "
                           "bandwidth")
    memory = make_row(case="ddr_triad", size_bytes=2 << 30, **_medians(28.6), note="")
    hbm = make_row(case="hbm_triad", backend="cuda", device="gpu0", memory="hbm",
                   device_name="NVIDIA H200", **_medians(4200.0))
    summary = build_summary(results_frame([cached, memory, hbm]))
    ddr = _one(summary, "ddr_triad", "cpu")
    assert ddr["gbps"] == 28.6 and "1 row(s) with arrays under 4x" in ddr["note"]
    assert _one(summary, "hbm_triad", "gpu0")["hbm_over_ddr"] == pytest.approx(4200 / 28.6)
    only_cached = build_summary(results_frame([cached, hbm]))
    ddr = _one(only_cached, "ddr_triad", "cpu")
    assert pd.isna(ddr["gbps"]) and ddr["status"] == "in cache"
    assert "cache bandwidth, not DDR; use a larger --size" in ddr["note"]
    assert pd.isna(_one(only_cached, "hbm_triad", "gpu0")["hbm_over_ddr"])
    assert headline_sentence(only_cached) == ("No DDR figure (every ddr_triad row's arrays fit "
                                              "in the cache), so there is no HBM/DDR ratio.")


def test_no_hbm_over_pcie_ratio_against_an_nvlink_c2c_host_link():
    from bwprof.analysis.summary import C2C_SUMMARY_NOTE

    rows = [make_row(case="hbm_triad", backend="cuda", device="gpu0", memory="hbm",
                     device_name="NVIDIA GH200", **_medians(3700.0)),
            make_row(case="h2d_pinned", backend="cuda", device="gpu0", memory="pinned",
                     direction="h2d", device_name="NVIDIA GH200", **_medians(380.0),
                     flags=frozenset({"c2c_link"}), note="something else")]
    summary = build_summary(results_frame(rows))
    assert pd.isna(_one(summary, "hbm_triad", "gpu0")["hbm_over_pcie"])
    h2d = _one(summary, "h2d_pinned", "gpu0")
    assert h2d["note"] == C2C_SUMMARY_NOTE and h2d["flags"] == "c2c_link"


def test_the_headline_says_why_ddr_has_no_figure():
    hbm = make_row(case="hbm_triad", backend="cuda", device="gpu0", memory="hbm",
                   device_name="NVIDIA H200", **_medians(4200.0))
    failed = make_row(case="ddr_triad", status="invalid", gbps_best=None,
                      note="validation failed: 3 of 8 elements of a != 4.0")
    assert headline_sentence(build_summary(results_frame([failed, hbm]))) == (
        "No DDR figure (invalid: validation failed: 3 of 8 elements of a != 4.0), so there is "
        "no HBM/DDR ratio.")
    assert headline_sentence(build_summary(results_frame([hbm]))) == (
        "No DDR figure (no ddr_triad row in this run), so there is no HBM/DDR ratio.")


def test_a_measured_h200_run_gives_every_path_from_its_own_rows():
    """h200-quick is a real run on an H200 (see tests/data/README.md): each summary figure is
    the row it names, read back with the csv module, and the ratios follow from them."""
    rows = [r for r in _csv_rows("h200-quick") if r["status"] == "ok"]

    def best(case, device="gpu0"):  # the figure: the best median at the largest size
        mine = [r for r in rows if r["case"] == case and r["device"] == device
                and _beyond_cache(r)]
        largest = max(int(r["size_bytes"]) for r in mine)
        return max(float(r["gbps_median"]) for r in mine if int(r["size_bytes"]) == largest)

    summary = _summary("h200-quick")
    ddr = best("ddr_triad", "cpu")
    hbm = _one(summary, "hbm_triad", "gpu0")
    assert hbm["backend"] == "cuda" and hbm["gbps"] == best("hbm_triad")
    assert hbm["hbm_over_ddr"] == pytest.approx(best("hbm_triad") / ddr)
    assert hbm["hbm_over_pcie"] == pytest.approx(best("hbm_triad") / best("h2d_pinned"))
    for case, device in [("d2d_copy", "gpu0"), ("h2d_pinned", "gpu0"), ("d2h_pinned", "gpu0"),
                         ("h2d_all", "all"), ("d2h_all", "all")]:
        assert _one(summary, case, device)["gbps"] == best(case, device), case
    concurrent = {r["case"]: float(r["overlap_efficiency"]) for r in rows
                  if r["phase"] == "concurrent"}
    overlap = summary[summary["path"] == "overlap"]
    efficiencies = dict(zip(overlap["case"], overlap["overlap_efficiency"], strict=True))
    assert efficiencies == pytest.approx(concurrent)
    assert _one(summary, "p2p_copy", "")["status"] == "waived"
    assert headline_sentence(summary).startswith(
        f"HBM moves {best('hbm_triad') / ddr:.1f}× the bandwidth of DDR on this box")


def test_a_run_with_latency_rows_gets_a_latency_path_in_its_own_unit():
    rows = [make_row(case="ddr_triad", size_bytes=2 << 30, **_medians(28.6)),
            *(make_row(case="lat_host", metric="latency", unit="ns", higher_is_better=False,
                       gbps_best=None, gbps_median=None, value_best=ns, value_median=ns,
                       size_bytes=size) for ns, size in ((1.2, 32 << 10), (95.0, 1 << 30)))]
    summary = build_summary(results_frame(rows))
    latency = summary[summary["path"] == "latency"]
    assert len(latency) == 1  # the largest working set: the memory's, not a cache's
    row = latency.iloc[0]
    assert (row["value"], row["unit"], row["higher_is_better"]) == (95.0, "ns", False)
    assert pd.isna(row["gbps"]) and pd.isna(row["pct_of_peak"])
    assert "latency" not in set(build_summary(results_frame(rows[:1]))["path"])


def test_an_hbm_figure_that_fits_in_l2_is_no_headline():
    l2 = make_row(case="hbm_triad", backend="cuda", device="gpu0", memory="hbm",
                  device_name="small GPU", **_medians(9000.0), size_bytes=8 << 20,
                  flags=frozenset({"l2_resident"}))
    hbm = _one(build_summary(results_frame([l2])), "hbm_triad", "gpu0")
    assert hbm["status"] == "in cache" and pd.isna(hbm["value"]) and pd.isna(hbm["gbps"])
    assert "fits in its cache" in hbm["note"]
    larger = make_row(case="hbm_triad", backend="cuda", device="gpu0", memory="hbm",
                      device_name="small GPU", **_medians(800.0), size_bytes=256 << 20)
    hbm = _one(build_summary(results_frame([l2, larger])), "hbm_triad", "gpu0")
    assert hbm["value"] == 800.0 and hbm["status"] == "ok"


def test_d2d_copy_is_also_shown_as_nvbandwidth_counts_it():
    """d2d_copy counts the buffer read and the buffer written (STREAM), nvbandwidth the bytes
    copied once: the summary keeps the convention as `gbps` and gives `copy_gbps` beside it,
    half; a copy-convention copy's is its own figure, a Triad has none."""
    rows = [make_row(case="d2d_copy", backend="cuda", device="gpu0", device_name="NVIDIA H200",
                     memory="hbm", size_bytes=256 << 20, threads=None, gbps_best=4196.0,
                     gbps_median=4188.0, copy_gbps_best=2098.0, copy_gbps_median=2094.0,
                     peak_gbps=4814.0),
            make_row(case="h2d_pinned", backend="cuda", device="gpu0", memory="pinned",
                     direction="h2d", size_bytes=256 << 20, threads=None, gbps_best=55.5,
                     gbps_median=55.4, copy_gbps_best=55.5, copy_gbps_median=55.4,
                     byte_convention="copy"),
            make_row(case="hbm_triad", backend="cuda", device="gpu0", memory="hbm",
                     size_bytes=256 << 20, threads=None, gbps_best=4308.0, gbps_median=4301.0)]
    summary = build_summary(results_frame(rows))
    d2d = _one(summary, "d2d_copy", "gpu0")
    assert (d2d["gbps"], d2d["copy_gbps"], d2d["copy_gbps_best"]) == (4188.0, 2094.0, 2098.0)
    assert "as nvbandwidth does" in d2d["note"]
    h2d = _one(summary, "h2d_pinned", "gpu0")
    assert h2d["copy_gbps"] == h2d["gbps"] == 55.4 and "nvbandwidth" not in h2d["note"]
    assert pd.isna(_one(summary, "hbm_triad", "gpu0")["copy_gbps"])
    console = Console(width=80, record=True)
    print_report(console, Run.from_rows(rows))
    text = console.export_text()
    assert "d2d_copy gpu0 256 MiB 4188 2094" in " ".join(text.split())
    assert "copied" in text.splitlines()[2]  # the column's heading
    # Only a copy counted as traffic needs the column: without one it is left out.
    console = Console(width=80, record=True)
    print_report(console, Run.from_rows(rows[1:]))
    assert "copied" not in console.export_text()


def test_a_stored_run_from_before_the_copy_column_gets_it_from_its_cases():
    """h200-quick predates copy_gbps_*: read, they are empty; loaded as a run folder, they
    are derived from each row's case (d2d_copy half its GB/s, pinned copies their own)."""
    from bwprof.store.runfolder import load_run

    raw = read_results(DATA / "h200-quick" / "results.csv")
    assert raw["copy_gbps_best"].isna().all()
    results = load_run(DATA / "h200-quick").results
    d2d = results[(results["case"] == "d2d_copy") & (results["status"] == "ok")]
    assert (d2d["copy_gbps_best"] == d2d["gbps_best"] / 2).all()
    assert (d2d["copy_gbps_median"] == d2d["gbps_median"] / 2).all()
    pinned = results[results["case"] == "h2d_pinned"]
    assert (pinned["copy_gbps_best"] == pinned["gbps_best"]).all()
    assert results.loc[results["case"] == "hbm_triad", "copy_gbps_best"].isna().all()
    assert results.loc[results["metric"] != "bandwidth", "copy_gbps_best"].isna().all()


def test_the_compute_path_gives_each_devices_ceiling_and_names_its_dtype():
    """The fastest dtype and size per device, with every selected thread on a host: the
    largest size is fp64's (8 bytes an element), which would stand for the GPU's ceiling at
    a tenth of bf16's."""
    def gemm(case, device, dtype, size, tflops, threads=None):
        return make_row(case=case, backend="cuda" if case == "gemm_gpu" else "host",
                        device=device, memory="hbm", threads=threads, size_bytes=size,
                        metric="throughput", unit="TFLOP/s", gbps_best=None,
                        gbps_median=None, value_best=tflops, value_median=tflops, dtype=dtype)

    rows = [gemm("gemm_gpu", "gpu0", "fp64", 2 << 30, 60.0),
            gemm("gemm_gpu", "gpu0", "bf16", 512 << 20, 720.0),
            gemm("gemm_gpu", "gpu0", "bf16", 128 << 20, 650.0),
            gemm("gemm_gpu", "gpu1", "fp32", 1 << 30, 50.0),
            gemm("gemm_host", "cpu", "fp64", 8 << 20, 0.9, threads=16),
            gemm("gemm_host", "cpu", "fp32", 4 << 20, 1.8, threads=16),
            gemm("gemm_host", "cpu", "fp32", 4 << 20, 2.5, threads=1)]  # no: one thread
    compute = build_summary(results_frame(rows))
    compute = compute[compute["path"] == "compute"]
    got = [(r["case"], r["device"], r["dtype"], r["value"]) for _, r in compute.iterrows()]
    assert got == [("gemm_gpu", "gpu0", "bf16", 720.0), ("gemm_gpu", "gpu1", "fp32", 50.0),
                   ("gemm_host", "cpu", "fp32", 1.8)]
    console = Console(width=120, record=True)
    print_report(console, Run.from_rows(rows))
    text = " ".join(console.export_text().split())
    assert "gemm_gpu gpu0 bf16 512 MiB 720 TFLOP/s" in text
    assert "gemm_host cpu, 16 thr fp32 4 MiB 1.80 TFLOP/s" in text


def test_the_summary_reads_a_cases_rows_from_an_index_made_once_in_file_order():
    """A fleet's rows are grouped by case once (`_Rows.of_case`), not scanned whole for each
    of the summary's twenty-odd selections; each case's rows are those of the file, in its
    order, and the summary is the one the plain rows give."""
    import bwprof
    from bwprof.analysis import summary
    from tests.conftest import DATA

    results = bwprof.load(DATA / "h200-quick").results
    records = summary._records(results)
    assert isinstance(records, summary._Rows)
    for case in ("hbm_triad", "p2p_copy", "no_such_case"):
        assert records.of_case(case) == [r for r in records if r["case"] == case]
    plain = list(records)
    for case, direction in (("h2d_pinned", "h2d"), ("hbm_triad", None)):
        assert summary._ok(records, case, direction) == summary._ok(plain, case, direction)
