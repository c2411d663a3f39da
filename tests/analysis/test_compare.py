"""`bwprof compare`: alignment, change and noise, machine warnings, --fail-below, outputs.

sim-b-slower and sim-c-other-box are derived from sim-a by tests/data/make_data.py: in
sim-b every `hbm_triad gpu1` and `d2h_pinned gpu0` time is ×1.25 (figure -20%) and
`h2d_pinned gpu0` ×1.02 (about -2%); sim-c has another GPU model, driver, CUDA and bwprof.
"""

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.analysis.compare import (
    NOISE_FLOOR,
    compare_runs,
    comparison_json,
    machine_warnings,
    noise_pct,
    parse_fail_below,
    regression_lines,
    run_lines,
    t_critical,
)
from bwprof.cli import app
from bwprof.errors import BwprofError
from bwprof.schema.meta import RunMeta
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.table import results_frame
from bwprof.store.runfolder import RunFolder, load_run
from tests.conftest import DATA
from tests.schema.builders import HOST, host, meta
from tests.store.test_export import make_row

runner = CliRunner()


def _runs(*names):
    return [load_run(DATA / name) for name in names]


def _later(comparison, case, device, scope="summary", run="B"):
    rows = comparison.rows
    picked = rows[(rows["scope"] == scope) & (rows["case"] == case)
                  & (rows["device"] == device) & (rows["run"] == run)]
    assert len(picked) == 1, picked
    return picked.iloc[0]


def test_noise_rule():
    # Welch: 16 degrees of freedom, t = 2.120; 2.120 * sqrt(2 * 0.05^2/9) = 5.00 %
    assert noise_pct(0.05, 9, 0.05, 9) == pytest.approx(
        100 * 2.120 * math.sqrt(2 * 0.05**2 / 9), rel=1e-3)
    # Two samples each: 2 degrees of freedom, t = 4.303, so the band is over twice as wide.
    assert noise_pct(0.05, 2, 0.05, 2) == pytest.approx(100 * 4.303 * 0.05)
    # One noisy side dominates: its own n - 1 = 2 degrees of freedom (about), not 2 + 99.
    assert noise_pct(0.10, 3, 0.001, 100) == pytest.approx(
        100 * 4.303 * math.sqrt(0.1**2 / 3 + 0.001**2 / 100), rel=1e-3)
    assert noise_pct(0.0, 9, 0.0, 9) == 100 * NOISE_FLOOR  # identical samples: the floor
    assert noise_pct(0.001, 9, 0.001, 9) == 100 * NOISE_FLOOR  # never below the floor
    assert noise_pct(None, 9, 0.05, 9) is None
    assert noise_pct(0.0, 1, 0.05, 9) is None  # one sample says nothing about its spread


def test_t_critical_values():
    assert t_critical(1) == 12.706 and t_critical(0.4) == 12.706
    assert t_critical(2) == 4.303 and t_critical(math.inf) == 1.960
    # Between entries: linear in 1/df, never below the true value (t(1.98) = 4.345,
    # t(2.9) = 3.245, t(11) = 2.201, t(500) = 1.9647) and close to it.
    for freedom, true in ((1.98, 4.345), (2.9, 3.245), (11, 2.201), (500, 1.9647)):
        assert true <= t_critical(freedom) <= true * 1.02, freedom
    # Welch's degrees of freedom come out a hair off whole numbers: no jump to the next row.
    assert t_critical(1.9999999999999998) == pytest.approx(4.303, abs=1e-6)
    assert t_critical(3.9999999999999996) == pytest.approx(2.776, abs=1e-6)


@pytest.mark.parametrize(("text", "value"), [("10", 10.0), ("2.5", 2.5), ("10%", 10.0),
                                             (" 100 ", 100.0)])
def test_parse_fail_below(text, value):
    assert parse_fail_below(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-5", "0", "101", "1e2", "10 pct"])
def test_malformed_fail_below(text):
    with pytest.raises(BwprofError, match="--fail-below expects a percentage"):
        parse_fail_below(text)


def test_rows_align_and_the_change_follows_from_the_figures():
    comparison = compare_runs(_runs("sim-a", "sim-b-slower"))
    assert comparison.warnings == []
    rows = comparison.rows
    assert (rows["schema_version"] == SCHEMA_VERSION).all()
    assert set(rows["run"]) == {"A", "B"} and rows["baseline"].sum() == len(rows) / 2
    assert (rows.groupby("figure_id").size() == 2).all()  # every figure in both runs
    for case, device, change in [("hbm_triad", "gpu1", -20.0), ("d2h_pinned", "gpu0", -20.0),
                                 ("h2d_pinned", "gpu0", 100 * (1 / 1.02 - 1)),
                                 ("hbm_triad", "gpu0", 0.0), ("ddr_triad", "cpu", 0.0)]:
        row = _later(comparison, case, device)
        assert row["change_pct"] == pytest.approx(change), (case, device)
        assert row["change_pct"] == pytest.approx(
            100 * (row["value"] / row["baseline_value"] - 1))
        base = rows[rows["baseline"] & (rows["figure_id"] == row["figure_id"])].iloc[0]
        noise = noise_pct(base["cv"], base["repeats"], row["cv"], row["repeats"])
        if noise is None:  # host DDR in sim-a keeps one sample: its noise is unknown
            assert pd.isna(row["noise_pct"]) and pd.isna(row["beyond_noise"])
        else:
            assert row["noise_pct"] == pytest.approx(noise)
            assert bool(row["beyond_noise"]) == (abs(row["change_pct"]) > noise)
    # Every measured row of results.csv is there too, at every size.
    sweep = rows[(rows["scope"] == "row") & (rows["case"] == "hbm_triad")
                 & (rows["device"] == "gpu1") & (rows["run"] == "B")]
    assert not sweep.empty and (sweep["change_pct"].round(9) == -20.0).all()


def _run(path, **figures):
    rows = [make_row(case=case, gbps_median=gbps, gbps_best=gbps * 1.02, cv=0.05, repeats=9)
            for case, gbps in figures.items()]
    return RunFolder(path, results_frame(rows), meta())


def test_beyond_noise_flags_a_real_change_and_not_a_small_one(tmp_path):
    # cv 5% over 9 samples on both sides: the noise band is ±5.00% (see test_noise_rule).
    base = _run(tmp_path / "a", ddr_copy=100.0, ddr_add=100.0, ddr_scale=100.0)
    later = _run(tmp_path / "b", ddr_copy=97.0, ddr_add=94.0, ddr_scale=106.0)
    rows = compare_runs([base, later]).rows
    verdicts = {r["case"]: (round(r["change_pct"], 6), r["noise_pct"], r["beyond_noise"])
                for _, r in rows[~rows["baseline"]].iterrows()}
    band = 100 * t_critical(16) * math.sqrt(2 * 0.05**2 / 9)
    assert verdicts == {"ddr_copy": (-3.0, pytest.approx(band), False),
                        "ddr_add": (-6.0, pytest.approx(band), True),
                        "ddr_scale": (6.0, pytest.approx(band), True)}


def test_machines_that_differ_are_named_and_other_models_never_align():
    runs = _runs("sim-a", "sim-c-other-box")
    assert machine_warnings(runs, ["A", "C"]) == [
        "GPU model differs: A 2× simulated GPU; C 2× simulated GPU, other model",
        "driver differs: A unknown; C 999.99",
        "CUDA differs: A unknown; C 99.9",
        "bwprof version differs: A 0.1.0; C 0.0.9",
    ]
    comparison = compare_runs(runs)
    ddr = _later(comparison, "ddr_triad", "cpu")
    assert ddr["change_pct"] == 0.0  # same CPU model: aligned
    gpu = comparison.rows[(comparison.rows["case"] == "hbm_triad")
                          & (comparison.rows["scope"] == "summary")]
    assert gpu["figure_id"].nunique() >= 2  # one figure per GPU model at least
    for _, figure in gpu.groupby("figure_id"):  # each model's row stands alone
        assert figure["value"].notna().sum() == 1
        assert figure["change_pct"].isna().all()


def test_runs_under_different_huge_page_modes_are_flagged():
    """2 MiB against 4 KiB pages moves DDR figures by about a tenth: not the box changing."""
    runs = [RunFolder(Path(name), results_frame([make_row()]),
                      meta(host=host(transparent_hugepages=mode)))
            for name, mode in (("a", "madvise"), ("b", "never"), ("c", None))]
    assert machine_warnings(runs, ["A", "B", "C"]) == [
        "transparent huge pages differs: A madvise; B never"]  # C predates the record


def test_a_run_inside_a_gvisor_sandbox_is_flagged_against_one_outside():
    recorded = HOST.as_dict()
    hosts = {"a": {**recorded, "sandbox": None}, "b": {**recorded, "sandbox": "gVisor"},
             "c": {key: value for key, value in recorded.items() if key != "sandbox"},
             "d": {**recorded, "sandbox": None}}
    runs = [RunFolder(Path(name), results_frame([make_row()]),
                      RunMeta.from_dict({"schema_version": 1, "host": host}))
            for name, host in hosts.items()]
    assert machine_warnings(runs, ["A", "B", "C", "D"]) == [
        "sandbox differs: A none; B gVisor"]  # C predates the record; D is like A


def test_runs_from_different_code_are_flagged_and_each_run_names_its_commit():
    """One version number from two checkouts may be two programs: the commits tell."""
    sha_a, sha_b = "1" * 40, "2" * 40
    commits = {"a": sha_a, "b": sha_b, "c": f"{sha_a}-dirty", "d": None, "e": sha_a}
    runs = [RunFolder(Path(name), results_frame([make_row()]),
                      meta(bwprof_version="0.1.0", bwprof_commit=commit))
            for name, commit in commits.items()]
    assert machine_warnings(runs, ["A", "B", "C", "D", "E"]) == [
        f"bwprof commit differs: A {sha_a}; B {sha_b}",
        f"bwprof commit differs: A {sha_a}; C {sha_a}-dirty",  # changes not committed
    ]  # D: installed from a wheel, nothing to hold against A; E: the same code
    comparison = compare_runs(runs[:2])
    assert comparison.warnings[0].startswith("bwprof commit differs")
    lines = run_lines(comparison)
    assert lines[0].endswith("bwprof 0.1.0 (commit 111111111111)")
    assert lines[1].endswith("bwprof 0.1.0 (commit 222222222222)")


def test_compare_and_report_show_the_commit_from_system_json(tmp_path):
    import shutil

    folders = []
    for name, commit in (("a", "a" * 40), ("b", "b" * 40 + "-dirty")):
        folder = tmp_path / name
        shutil.copytree(DATA / "host-ddr", folder)
        system = json.loads((folder / "system.json").read_text())
        (folder / "system.json").write_text(json.dumps({**system, "bwprof_commit": commit}))
        folders.append(str(folder))
    result = runner.invoke(app, ["compare", *folders])
    assert result.exit_code == 0, result.output
    assert f"warning: bwprof commit differs: A {'a' * 40}; B {'b' * 40}-dirty" in result.output
    assert "bwprof 0.1.0 (commit bbbbbbbbbbbb-dirty)" in result.output
    assert json.loads(runner.invoke(app, ["compare", *folders, "--json"]).output)[
        "runs"][1]["bwprof_commit"] == "b" * 40 + "-dirty"
    report = runner.invoke(app, ["report", folders[0], "--no-plots", "--out", str(tmp_path)])
    assert "bwprof 0.1.0 (commit aaaaaaaaaaaa), started" in report.output.splitlines()[0]


def test_fail_below_exits_1_naming_each_fallen_headline_figure(tmp_path):
    args = ["compare", str(DATA / "sim-a"), str(DATA / "sim-b-slower")]
    result = runner.invoke(app, [*args, "--fail-below", "10"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("below")]
    assert len(lines) == 2
    assert "run B: hbm_triad gpu1 (simulated GPU) 16 MiB fell more than 10%" in lines[0]
    assert "d2h_pinned gpu0" in lines[1]
    assert all("simulated rows, not a measurement" in line for line in lines)
    assert runner.invoke(app, [*args, "--fail-below", "25"]).exit_code == 0
    assert runner.invoke(app, [*args, "--fail-below", "1.5"]).exit_code == 1  # h2d -1.96%
    # A headline figure the later run lacks fails acceptance too.
    result = runner.invoke(app, [*args, str(DATA / "host-ddr"), "--fail-below", "50"])
    assert result.exit_code == 1
    assert "run C: hbm_triad gpu0 (simulated GPU) 16 MiB is missing" in result.output


def test_a_missing_figure_says_why_from_the_later_runs_own_rows():
    base = _run(Path("a"), ddr_triad=100.0)
    invalid = RunFolder(Path("b"), results_frame([make_row(
        gbps_best=90.0, cv=0.05, repeats=9, status="invalid",
        note="validation failed: 3 of 8 elements of a != 1.0")]), meta())
    other_cpu = _run(Path("c"), ddr_triad=100.0)
    other_cpu.results["device_name"] = "another CPU"
    interrupted = RunFolder(Path("d"), results_frame([]), meta(interrupted=True))
    skipped = RunFolder(Path("e"), results_frame([make_row(
        device_name="", status="skipped", gbps_best=None, note="no NVIDIA driver")]),
        meta())  # a skipped row names no device model
    other_size = RunFolder(Path("f"), results_frame([make_row(
        size_bytes=2048, cv=0.05, repeats=9)]), meta())
    comparison = compare_runs([base, invalid, other_cpu, interrupted, skipped, other_size])
    lines = regression_lines(comparison.regressions(10), 10)
    assert lines == [
        "below --fail-below: run B: ddr_triad cpu (CPU, with comma) 1 KiB is missing (invalid "
        "in this run: validation failed: 3 of 8 elements of a != 1.0)",
        "below --fail-below: run C: ddr_triad cpu (CPU, with comma) 1 KiB is missing (measured "
        "on another CPU, which does not align with it)",
        "below --fail-below: run D: ddr_triad cpu (CPU, with comma) 1 KiB is missing (not "
        "measured in this run (the run was interrupted))",
        "below --fail-below: run E: ddr_triad cpu (CPU, with comma) 1 KiB is missing (skipped "
        "in this run: no NVIDIA driver)",
        "below --fail-below: run F: ddr_triad cpu (CPU, with comma) 1 KiB is missing (measured "
        "at 2 KiB only: figures align at the same size, so compare runs made with the same "
        "--preset and --size)",
    ]
    assert comparison.warnings[-1] == ("run D was interrupted: figures it did not reach are "
                                       "absent")


def test_comparison_json_is_data_and_prints_nothing(capsys):
    """Analysis returns the warnings; the face (`bwprof compare --json`) says them on stderr."""
    base = _run(Path("a"), ddr_triad=100.0)
    interrupted = RunFolder(Path("b"), results_frame([]), meta(interrupted=True))
    comparison = compare_runs([base, interrupted])
    assert comparison.state_warnings == ["run B was interrupted: figures it did not reach are "
                                         "absent"]
    payload = comparison_json(comparison, None, [])
    assert capsys.readouterr() == ("", "")
    assert payload["warnings"] == comparison.warnings
    assert comparison.state_warnings[0] in comparison.warnings


def test_a_baseline_without_headline_figures_fails_acceptance(tmp_path):
    """Acceptance against nothing is no acceptance: an interrupted or cache-sized baseline."""
    empty = RunFolder(Path("a"), results_frame([]), meta(interrupted=True))
    comparison = compare_runs([empty, _run(Path("b"), ddr_triad=100.0)])
    assert regression_lines(comparison.regressions(10), 10) == [
        "below --fail-below: baseline A has no headline figure to hold the other runs against "
        "(it has no rows (the run was interrupted))"]
    in_cache = _run(Path("c"), ddr_triad=100.0)
    in_cache.results["flags"] = "in_cache"
    comparison = compare_runs([in_cache, in_cache])
    assert regression_lines(comparison.regressions(10), 10) == [
        "below --fail-below: baseline A has no headline figure to hold the other runs against "
        "(ddr: in cache)"]
    # Rows, none of them headline: the stop is named too.
    in_cache.meta = replace(in_cache.meta, interrupted=True)
    comparison = compare_runs([in_cache, in_cache])
    assert regression_lines(comparison.regressions(10), 10)[0].endswith(
        "(ddr: in cache (the run was interrupted))")


def test_measured_figures_print_and_simulated_ones_never_do():
    result = runner.invoke(app, ["compare", str(DATA / "host-ddr"), str(DATA / "host-ddr")])
    assert result.exit_code == 0, result.output
    assert "+0.0% within ±" in result.output and "ddr_triad cpu 64 MiB" in result.output
    result = runner.invoke(app, ["compare", str(DATA / "sim-a"), str(DATA / "sim-b-slower")])
    assert "-20.0%" not in result.output and "simulated" in result.output


def test_out_writes_compare_csv_and_json_prints_the_same(tmp_path):
    args = ["compare", str(DATA / "sim-a"), str(DATA / "sim-c-other-box"), "--out",
            str(tmp_path / "cmp")]
    result = runner.invoke(app, [*args, "--format", "parquet"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    assert (frame["schema_version"] == SCHEMA_VERSION).all()
    assert len(pd.read_parquet(tmp_path / "cmp" / "compare.parquet")) == len(frame)
    payload = json.loads(runner.invoke(app, [*args, "--json"]).output)
    assert payload["baseline"] == "A" and len(payload["rows"]) == len(frame)
    assert payload["warnings"][0].startswith("GPU model differs")
    assert payload["schema_version"] == SCHEMA_VERSION


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--fail-below", "ten"], "--fail-below expects a percentage"),
     (["--format", "xls"], "unknown --format 'xls'"),
     (["--format", "parquet"], "--format parquet writes compare.parquet: give it a folder")],
)
def test_bad_options_are_one_line(extra, message):
    result = runner.invoke(app, ["compare", str(DATA / "sim-a"), str(DATA / "sim-a"), *extra])
    assert result.exit_code == 2
    assert result.output.strip() == result.output.strip().splitlines()[0]
    assert result.output.startswith(f"error: {message}")


def test_compare_needs_two_runs():
    result = runner.invoke(app, ["compare", str(DATA / "sim-a")])
    assert result.exit_code == 2
    assert "at least two run folders" in result.output


def test_fail_below_ignores_improvements_and_holds_at_the_exact_threshold(tmp_path):
    base = _run(tmp_path / "a", ddr_triad=100.0)
    assert compare_runs([base, _run(tmp_path / "b", ddr_triad=130.0)]).regressions(10) == []
    exact = compare_runs([base, _run(tmp_path / "c", ddr_triad=75.0)])  # exactly -25.0%
    assert exact.regressions(25) == []
    assert len(exact.regressions(24.9)) == 1


def _latency_run(folder, ns, tmp_path):
    """A real run folder (ddr_copy at 1 MiB) holding, besides, a latency row of `ns` ns."""
    import bwprof
    from bwprof.store.export import RESULTS_FILE

    bwprof.run(cases="ddr_copy", size="1MiB", repeats=3, threads="1", out=folder, plots=False)
    rows = [make_row(case="lat_host", metric="latency", unit="ns", higher_is_better=False,
                     gbps_best=None, gbps_median=None, value_best=ns / 1.01, value_median=ns,
                     size_bytes=1 << 30, threads=1, cv=0.001, repeats=9, note="")]
    results_frame(rows).to_csv(folder / RESULTS_FILE, index=False)
    return folder


def test_a_latency_that_rose_fails_fail_below_and_one_that_fell_passes(tmp_path):
    base = _latency_run(tmp_path / "a", 100.0, tmp_path)
    slower = _latency_run(tmp_path / "b", 110.0, tmp_path)  # 10% more ns: worse
    faster = _latency_run(tmp_path / "c", 90.0, tmp_path)  # 10% fewer ns: better
    result = runner.invoke(app, ["compare", str(base), str(slower), "--fail-below", "5"])
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("below")]
    assert "run B: lat_host cpu" in line and "latency" in line and "rose 10.0%" in line
    assert runner.invoke(app, ["compare", str(base), str(faster),
                               "--fail-below", "5"]).exit_code == 0
    comparison = compare_runs([load_run(base), load_run(slower)])
    later = _later(comparison, "lat_host", "cpu")
    assert later["change_pct"] == later["regressed_pct"] == pytest.approx(10.0)
    assert later["unit"] == "ns" and not later["higher_is_better"]
    assert comparison.summaries[0].loc[lambda s: s["path"] == "latency", "value"].item() == 100.0


def _gemm_run(path, tf32):
    rows = [make_row(case="gemm_gpu", backend="cuda", device="gpu0", device_name="H200",
                     memory="hbm", threads=None, size_bytes=4 << 20, metric="throughput",
                     unit="TFLOP/s", gbps_best=None, gbps_median=None, value_best=value,
                     value_median=value, dtype=dtype, cv=0.001, repeats=9)
            for dtype, value in (("fp32", 50.0), ("tf32", tf32))]
    rows += [make_row(case="bidir_pinned", backend="cuda", device="gpu0", memory="pinned",
                      direction=direction, threads=None, size_bytes=1 << 28, gbps_best=gbps,
                      gbps_median=gbps, cv=0.001, repeats=9)
             for direction, gbps in (("h2d", 52.0), ("d2h", 50.0), ("both", 102.0))]
    return RunFolder(path, results_frame(rows), meta())


def test_rows_of_one_size_that_differ_by_dtype_or_direction_are_figures_of_their_own(tmp_path):
    """gemm_gpu's fp32 and tf32 share a size (as fma_gpu's fp32 and fp64 do): aligned on
    size alone, one of them was dropped from the comparison; and rows differing by direction
    only are named by it in the table."""
    from rich.console import Console

    from bwprof.render.comparison import compare_table

    comparison = compare_runs([_gemm_run(tmp_path / "a", 400.0),
                               _gemm_run(tmp_path / "b", 320.0)])
    rows = comparison.rows[(comparison.rows["scope"] == "row")
                           & (comparison.rows["case"] == "gemm_gpu")]
    later = rows[~rows["baseline"]].set_index("dtype")
    assert sorted(later.index) == ["fp32", "tf32"]
    assert later.loc["fp32", "change_pct"] == pytest.approx(0.0)
    assert later.loc["tf32", "change_pct"] == pytest.approx(-20.0)
    console = Console(width=200, record=True)
    console.print(compare_table(comparison, "row"))
    text = console.export_text()
    assert "gemm_gpu gpu0 4 MiB tf32 throughput" in text
    for direction in ("h2d", "d2h", "both"):
        assert f"bidir_pinned {direction} gpu0 256 MiB" in text


def test_a_16_thread_run_against_a_2_thread_run_warns():
    """h200-quick (16 threads of a Xeon) and host-ddr-v2 (a 2-thread EPYC VM) are both `vm`."""
    lines = machine_warnings(_runs("h200-quick", "host-ddr-v2"), ["A", "B"])
    assert "CPU threads differs: A 16; B 2" in lines
    assert any(line.startswith("CPU differs: A Intel(R) Xeon(R) Processor; B AMD EPYC")
               for line in lines)
    assert not any("machine" in line for line in lines)  # neither recorded an identity
    fewer = host(usable_cpus=1)
    runs = [RunFolder(Path(n), results_frame([make_row()]), meta(host=h))
            for n, h in (("a", HOST), ("b", fewer))]
    assert machine_warnings(runs, ["A", "B"]) == ["CPU threads differs: A 2; B 2 (1 usable)"]


def _identified(tmp_path, name, machine_id=None, dmi_uuid=None, gpus=()):
    from bwprof.system import machine_identity

    sys_dmi = tmp_path / f"dmi-{name}"
    sys_dmi.mkdir()
    if dmi_uuid:
        (sys_dmi / "product_uuid").write_text(dmi_uuid + "\n")
    (tmp_path / f"id-{name}").write_text((machine_id or "") + "\n")
    identity = machine_identity(HOST.cpu_model, gpus, sys_dmi=sys_dmi,
                                machine_id=tmp_path / f"id-{name}")
    return RunFolder(Path(name), results_frame([make_row()]),
                     meta(host=host(identity=identity)))


def test_two_machines_sharing_a_host_name_are_named_and_one_machine_is_not(tmp_path):
    a = _identified(tmp_path, "a", machine_id="1" * 32)
    b = _identified(tmp_path, "b", machine_id="2" * 32)
    again = _identified(tmp_path, "c", machine_id="1" * 32, dmi_uuid="4c4c4544-0042")
    clone = _identified(tmp_path, "d", machine_id="1" * 32, dmi_uuid="4c4c4544-0099")
    lines = machine_warnings([a, b, again], ["A", "B", "C"])
    assert lines == [f"machine differs: A vm#{a.meta.host.box}; B vm#{b.meta.host.box} "
                     "(other machine_id)"]  # C: the same machine-id, its DMI read as root
    assert machine_warnings([again, clone], ["C", "D"]) == [
        f"machine differs: C vm#{again.meta.host.box}; D vm#{clone.meta.host.box} "
        "(other dmi_uuid, same machine_id)"]  # an image cloned with its machine-id
    old = RunFolder(Path("old"), results_frame([make_row()]), meta(host=HOST))
    assert machine_warnings([a, old], ["A", "O"]) == [
        "machine unknown for run(s) O: recorded no machine identity (a bwprof before it "
        "did), so told apart by host name only"]
