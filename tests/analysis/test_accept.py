"""`bwprof accept` on the stored H200 run and on fakes made from it (no GPU needed).

The fakes are copies of tests/data/h200-quick with system.json or results.csv edited; no
expectation here holds a measured bandwidth, only the band arithmetic."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bwprof.analysis import bands
from bwprof.analysis.outliers import TABLE_WIDTH
from bwprof.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200-quick"
runner = CliRunner()
WIDE = {"COLUMNS": str(TABLE_WIDTH)}


def accept(*args: str):
    return runner.invoke(app, ["accept", *args], env=WIDE)


def accept_json(*args: str) -> dict:
    result = accept(*args, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def fake(tmp_path: Path, name: str = "box", scale: dict[str, float] | None = None,
         hostname: str | None = None, edit_system=None, edit_rows=None) -> Path:
    """A copy of the H200 run: `scale` multiplies a case's figures, `hostname` renames the
    box, `edit_system(dict)` and `edit_rows(frame)` change the rest in place."""
    target = tmp_path / name
    shutil.copytree(H200, target)
    rows = pd.read_csv(target / "results.csv", keep_default_na=False, dtype=str)
    for case, factor in (scale or {}).items():
        mine = rows["case"] == case
        for column in ("gbps_median", "gbps_best"):
            rows.loc[mine, column] = (pd.to_numeric(rows.loc[mine, column]) * factor).astype(str)
    if hostname is not None:
        rows["host"] = hostname
    if edit_rows is not None:
        edit_rows(rows)
    rows.to_csv(target / "results.csv", index=False)
    system = json.loads((target / "system.json").read_text())
    if hostname is not None:
        system["host"]["hostname"] = hostname
    if edit_system is not None:
        edit_system(system)
    (target / "system.json").write_text(json.dumps(system))
    return target


def checks_of(data: dict, path: str) -> list[dict]:
    return [c for c in data["checks"] if c["path"] == path]


# -- the stored H200 run ------------------------------------------------------------------


def test_the_h200_run_passes_with_a_verdict_for_every_measured_path():
    result = accept(str(H200))
    assert result.exit_code == 0, result.output
    data = accept_json(str(H200))
    judged = {c["path"] for c in data["checks"] if c["verdict"] in ("PASS", "WARN", "FAIL")}
    assert judged == {"h2d", "d2h", "bidir", "hbm", "d2d", "overlap"}
    # Measured but without a band (no SMBIOS in the VM) or waived (one GPU): said, not passed.
    unjudged = {c["path"]: c["reason"] for c in data["checks"] if c["verdict"] == "CANNOT_JUDGE"}
    assert set(unjudged) == {"ddr", "p2p"} and "SMBIOS" in unjudged["ddr"]
    assert data["verdict"] == "PASS" and data["exit_code"] == 0
    lines = [line for line in result.stdout.splitlines() if line.startswith("vm: ")]
    assert len(lines) == 1 and lines[0].startswith("vm: PASS")
    assert max(map(len, result.stdout.splitlines())) <= TABLE_WIDTH


def test_the_installed_command_passes_the_h200_run():
    process = subprocess.run([sys.executable, "-m", "bwprof", "accept", str(H200)],
                             capture_output=True, text=True, timeout=120, check=False)
    assert process.returncode == 0, process.stderr
    assert process.stdout.splitlines()[-1].startswith("vm: PASS")


def test_the_bands_are_the_full_parts_arithmetic():
    data = accept_json(str(H200))
    hbm, = checks_of(data, "hbm")
    part = bands.find_part("NVIDIA H200")
    assert part is not None and part.key == "H200"
    assert hbm["reference"] == part.hbm_gbps
    assert hbm["expected"] == pytest.approx(part.hbm_gbps * part.triad_share)
    assert hbm["warn"] == pytest.approx(hbm["expected"] * bands.WARN_SHARE)
    h2d, = checks_of(data, "h2d")
    line = 16 * 32 * 128 / 130 / 8
    assert h2d["reference"] == pytest.approx(line)
    assert h2d["expected"] == pytest.approx(line * bands.pcie_efficiency(256))
    assert "256 B payloads assumed" in h2d["source"]  # the stored run predates the field
    assert h2d["value"] == pytest.approx(h2d["pct_of_band"] * h2d["expected"] / 100)


def test_a_spec_demanding_95_percent_of_the_hbm_peak_fails_naming_hbm(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text("[gpu.H200.hbm]\nfail_pct = 95\n")
    result = accept(str(H200), "--spec", str(spec))
    assert result.exit_code == 1, result.output
    line, = [line for line in result.stdout.splitlines() if line.startswith("vm: ")]
    assert line.startswith("vm: FAIL") and "FAIL HBM gpu0" in line
    data = accept_json(str(H200), "--spec", str(spec))
    hbm, = checks_of(data, "hbm")
    assert hbm["verdict"] == "FAIL" and hbm["fail"] == pytest.approx(0.95 * hbm["reference"])
    assert data["boxes"][0]["failed"] == ["hbm gpu0"]
    assert {c["verdict"] for c in checks_of(data, "d2d")} == {"PASS"}  # only HBM moved


def test_a_spec_for_every_model_and_for_latency_and_ddr_reads(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('cv_max = 0.0001\n[host.ddr]\npeak_gbps = 100.0\nwarn_pct = 60\n'
                    'fail_pct = 50\n[gpu.all.overlap]\nwarn_pct = 99\nfail_pct = 90\n')
    data = accept_json(str(H200), "--spec", str(spec))
    ddr, = checks_of(data, "ddr")
    assert ddr["verdict"] == "PASS" and ddr["reference"] == 100.0 and ddr["warn"] == 60.0
    overlap = {c["case"]: c["verdict"] for c in checks_of(data, "overlap")}
    assert overlap["overlap_bidir_compute"] == "WARN"  # 0.954 < 0.99
    assert any(c["noisy"] for c in data["checks"])  # every CV is above 0.01 %


@pytest.mark.parametrize(("text", "words"), [
    ("[gpu.H200.hbm]\nfail_pct = 101\n", "gpu.H200.hbm.fail_pct is 101 %"),
    ("[gpu.H200.hbm]\nwarn_pct = 80\nfail_pct = 90\n", "warn_pct 80 below fail_pct 90"),
    ("[gpu.H200.hbm]\nfail_pct = 'high'\n", "should be a number, not a string"),
    ("[gpu.H200.hbm]\nfloor = 3\n", "gpu.H200.hbm.floor is not a spec key"),
    ("[gpu.h200]\n", "gpu.h200 names the listed models H200-NVL, H200: give their keys"),
    ("[gpu.'L4/x']\n", "gpu.L4/x is not a GPU model"),
    ("[gpu.all.latency.lat_gpu]\nwarn_ns = 900\nfail_ns = 700\n", "fail_ns 700 below warn_ns"),
    ("cv_max = 5\n", "cv_max is 5"),
    ("[gpu.H200\n", "is not valid TOML"),
])
def test_a_malformed_spec_is_one_line_and_exit_2(tmp_path, text, words):
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    result = accept(str(H200), "--spec", str(spec))
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("error: spec ") and words in result.output


def as_l4(system: dict) -> None:
    """The H200 run's GPU renamed to a model bwprof does not list (an L4's name)."""
    for device in system["gpus"]["devices"]:
        device["metadata"]["name"] = device["properties"]["name"] = "NVIDIA L4"


def l4_run(tmp_path: Path) -> Path:
    def rename(rows: pd.DataFrame) -> None:
        rows.loc[rows["backend"] == "cuda", "device_name"] = "NVIDIA L4"

    return fake(tmp_path, "l4", edit_system=as_l4, edit_rows=rename)


# Catches: `[gpu.L4.hbm]` refused as "not a GPU model" while the docs promise that a spec can
# band a model bwprof does not list.
def test_a_spec_bands_a_gpu_model_bwprof_does_not_list(tmp_path):
    run = l4_run(tmp_path)
    before, = checks_of(accept_json(str(run)), "hbm")
    assert before["part"] == "" and before["gpu_model"] == "NVIDIA L4"
    assert before["source"] != "spec file" and before["verdict"] == "PASS"  # NVML peak, shares
    spec = tmp_path / "l4.toml"
    expected = round(before["value"] * 1.5)  # the figure at 2/3 of it: below FAIL's 85 %
    spec.write_text(f"[gpu.L4.hbm]\nexpected_gbps = {expected}\npeak_gbps = {2 * expected}\n"
                    "[gpu.L4.d2d]\nfail_pct = 99\n")
    result = accept(str(run), "--spec", str(spec))
    assert result.exit_code == 1, result.output  # the band moved: the figure now fails
    data = accept_json(str(run), "--spec", str(spec))
    hbm, = checks_of(data, "hbm")
    assert (hbm["expected"], hbm["reference"]) == (expected, 2 * expected)
    assert hbm["verdict"] == "FAIL" and hbm["value"] == before["value"]
    d2d, = checks_of(data, "d2d")
    assert d2d["verdict"] == "FAIL" and d2d["fail"] == pytest.approx(0.99 * d2d["reference"])
    assert not [n for n in data["notes"] if n.startswith("spec:")]
    # An H200 is not an L4: the same spec leaves the stored run's HBM band as it was.
    h200, = checks_of(accept_json(str(H200), "--spec", str(spec)), "hbm")
    assert h200["verdict"] == "PASS" and h200["expected"] != expected


def test_a_spec_model_that_no_gpu_is_says_it_judged_nothing(tmp_path):
    spec = tmp_path / "typo.toml"
    spec.write_text("[gpu.H300.hbm]\nfail_pct = 99\n")
    result = accept(str(H200), "--spec", str(spec))
    assert result.exit_code == 0, result.output
    assert "note: spec: [gpu.H300] is no GPU of these runs" in result.stderr


def test_a_missing_spec_and_a_bad_run_folder_are_one_line_and_exit_2(tmp_path):
    for args in ([str(H200), "--spec", str(tmp_path / "none.toml")], [str(tmp_path / "nope")],
                 [str(tmp_path)]):
        result = accept(*args)
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1
        assert result.output.startswith("error: ")


# -- faults: a peak never shrinks -------------------------------------------------------


def test_a_link_trained_below_its_maximum_generation_fails_the_link_paths(tmp_path):
    def gen4(system):
        for device in system["gpus"]["devices"]:
            device["metadata"]["pcie_gen_current"] = 4
            # What the run itself would record: the slot's (trained) maximum; the verdict
            # must hold the GPU to the part's Gen5 anyway.
            device["metadata"]["pcie_gen_max_system"] = 4
            device["peak_pcie_gbps"] = device["metadata"]["peak_pcie_gbps"] = 31.5

    def trained_gen4(rows):
        links = rows["case"].isin(("h2d_pinned", "d2h_pinned", "bidir_pinned"))
        rows.loc[links & (rows["pcie_gen_min"] != ""), "pcie_gen_min"] = "4"

    folder = fake(tmp_path, edit_system=gen4, edit_rows=trained_gen4,
                  scale={"h2d_pinned": 0.5, "d2h_pinned": 0.5, "bidir_pinned": 0.5})
    result = accept(str(folder))
    assert result.exit_code == 1, result.output
    data = accept_json(str(folder))
    verdicts = {c["path"]: c for c in data["checks"]}
    for path in ("h2d", "d2h", "bidir"):
        assert verdicts[path]["verdict"] == "FAIL"
        assert "Gen4 x16 under load, below its Gen5 x16 maximum" in verdicts[path]["reason"]
        assert verdicts[path]["reference"] > 60  # held against Gen5 x16, not the Gen4 peak
    assert verdicts["hbm"]["verdict"] == "PASS"


def test_the_trained_link_fails_even_where_the_figure_looks_healthy(tmp_path):
    def trained_x8(rows):
        rows.loc[rows["case"].eq("h2d_pinned") & (rows["pcie_width_min"] != ""),
                 "pcie_width_min"] = "8"

    data = accept_json(str(fake(tmp_path, edit_rows=trained_x8)))
    h2d, = checks_of(data, "h2d")
    assert h2d["verdict"] == "FAIL" and "x8 under load" in h2d["reason"]


def two_h200s(links_up: tuple[int, int]):
    def edit(system):
        first = system["gpus"]["devices"][0]
        second = copy.deepcopy(first)
        second["index"] = second["properties"]["index"] = 1
        for device, up in zip((first, second), links_up, strict=True):
            device["metadata"]["nvlink_links_up"] = up
            device["metadata"]["nvlink_version"] = 4
        system["gpus"]["devices"].append(second)
        system["gpus"]["count"] = 2
    return edit


def test_nvlinks_down_fail_p2p_against_the_full_part(tmp_path):
    data = accept_json(str(fake(tmp_path, edit_system=two_h200s((18, 12)))))
    p2p = {c["device"]: c for c in checks_of(data, "p2p")}
    assert p2p["gpu1"]["verdict"] == "FAIL"
    assert "12 of H200's 18 NVLinks up" in p2p["gpu1"]["reason"]
    assert p2p["gpu0"]["verdict"] == "CANNOT_JUDGE"  # all links up; the pair was not measured
    assert data["exit_code"] == 1


def test_one_sxm_gpu_alone_needs_no_nvlink(tmp_path):
    data = accept_json(str(H200))
    p2p, = checks_of(data, "p2p")
    assert p2p["verdict"] == "CANNOT_JUDGE"


# -- the fleet ----------------------------------------------------------------------------


def seven_boxes(tmp_path: Path) -> list[Path]:
    folders = []
    for i in range(7):
        scale = {"hbm_triad": 0.7} if i == 3 else {"h2d_pinned": 1 - 0.01 * i}
        folders.append(fake(tmp_path, f"run{i}", scale=scale,
                            hostname=f"gpu-node-with-a-long-name-{i:02d}"))
    return folders


def test_seven_run_folders_give_a_table_that_fits_160_columns(tmp_path):
    folders = seven_boxes(tmp_path)
    result = accept(*map(str, folders))
    assert result.exit_code == 1, result.output  # box 3's HBM
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH
    header = lines[0].split()
    assert header[:4] == ["box", "GPU", "model", "box"] and "HBM" in header
    rows = lines[2:lines.index("")]
    rows = [line for line in rows if line.startswith("gpu-node")]
    assert len(rows) == 7  # one row per box × GPU
    assert rows[3].split()[0].endswith("-03")  # the number that tells boxes apart, kept
    assert "FAIL" in rows[3] and "!" in rows[3]
    verdict_lines = [line for line in lines if line.startswith("gpu-node") and " — " in line]
    assert [line.split(" — ")[0].split(": ")[1] for line in verdict_lines] == [
        "PASS", "PASS", "PASS", "FAIL", "PASS", "WARN", "WARN"]  # H2D 5 and 6 % short warn
    outliers = [line for line in lines if line.startswith("outliers against")]
    assert outliers and "-03 gpu0 HBM" in outliers[0]


def test_the_fleet_table_as_csv_and_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    folders = seven_boxes(tmp_path)
    out = tmp_path / "out"
    result = accept(*map(str, folders), "--out", str(out), "--format", "parquet")
    assert result.exit_code == 1, result.output
    table = pd.read_csv(out / "accept_fleet.csv")
    assert len(table) == 7 and {"hbm_verdict", "hbm_pct_of_band", "outliers"} <= set(table)
    assert (table["hbm_verdict"] == "FAIL").sum() == 1
    parquet = pd.read_parquet(out / "accept_fleet.parquet")
    assert list(parquet["hbm_verdict"]) == list(table["hbm_verdict"])
    checks = pd.read_csv(out / "accept.csv")
    assert set(checks["verdict"]) <= {"PASS", "WARN", "FAIL", "CANNOT_JUDGE"}


def test_parquet_without_pyarrow_is_one_line(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    result = accept(str(H200), "--out", str(tmp_path / "o"), "--format", "parquet")
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --format parquet needs pyarrow: "
                                     "python3 -m pip install pyarrow")


# -- bwprof's own errors are not the box's (issue 32) -----------------------------------------

OVERFLOW = "OverflowError: int too big to convert"


def _raised(rows: pd.DataFrame, case: str, device: str = "") -> None:
    """`case`'s rows as the runner writes a job that raised: status error, the exception as
    the note, no figure (and, where the job had no device yet, none)."""
    mine = rows["case"] == case
    for column in ("time_median_s", "time_min_s", "gbps_median", "gbps_best", "cv",
                   "peak_gbps", "pct_of_peak", "repeats"):
        rows.loc[mine, column] = ""
    rows.loc[mine, "status"] = "error"
    rows.loc[mine, "note"] = OVERFLOW
    if device:
        rows.loc[mine, "device"] = device


def test_a_gpu_case_that_raised_is_error_and_the_box_is_not_failed_for_it(tmp_path):
    """Every hbm_triad row raised: the HBM path is ERROR (it was FAIL, and the box with it),
    the box passes on what it was judged on, and the exit code is 0."""
    run = fake(tmp_path, edit_rows=lambda rows: _raised(rows, "hbm_triad"))
    data = accept_json(str(run))
    hbm, = checks_of(data, "hbm")
    assert hbm["verdict"] == "ERROR" and hbm["value"] is None
    assert hbm["reason"] == (f"bwprof error in hbm_triad (256 MiB): {OVERFLOW}; the box was not "
                             "judged on it")
    box, = data["boxes"]
    assert data["verdict"] == box["verdict"] == "PASS" and data["exit_code"] == 0
    assert box["counts"]["ERROR"] == 1 and box["counts"]["FAIL"] == 0
    assert box["errors"] == ["hbm gpu0"] and box["failed"] == []
    result = accept(str(run))
    assert result.exit_code == 0, result.output
    line, = [line for line in result.stdout.splitlines() if line.startswith("vm: ")]
    assert line.startswith("vm: PASS") and " 1 error" in line
    assert line.endswith(f"; bwprof error in hbm_triad: {OVERFLOW}; the box was not judged on it")
    table_row, = [line for line in result.stdout.splitlines() if " HBM " in line]
    assert " ERROR " in table_row


def test_a_failed_validation_still_fails_the_box(tmp_path):
    """The box's own wrong result is not bwprof's error: `invalid` stays FAIL, exit 1."""
    def invalid(rows: pd.DataFrame) -> None:
        rows.loc[rows["case"] == "hbm_triad", "status"] = "invalid"
        rows.loc[rows["case"] == "hbm_triad", "note"] = "validation failed: 3 of 2^25 elements"

    run = fake(tmp_path, edit_rows=invalid)
    data = accept_json(str(run))
    hbm, = checks_of(data, "hbm")
    assert hbm["verdict"] == "FAIL" and hbm["reason"].startswith("hbm_triad invalid: validation")
    assert data["verdict"] == "FAIL" and data["exit_code"] == 1
    assert accept(str(run)).exit_code == 1


def test_a_run_whose_cases_raised_is_error_in_accept_not_fail(tmp_path, monkeypatch):
    """A real run in which lat_host raised at every size and ddr_triad at its largest (as
    at 1 GiB and 2 GiB in the issue): the rows that raised have no device, yet each path is
    ERROR with its exception, never FAIL; DDR is not judged on the cache-resident size left."""
    import bwprof
    from bwprof.host import ddr
    from bwprof.units import MiB

    real = ddr.HostExecutor._measure_stream

    def overflow_at_256(self, case, job, plan):
        if job.size_bytes >= 256 * MiB:
            raise OverflowError("int too big to convert")
        return real(self, case, job, plan)

    def overflow(self, case, job, plan):
        raise OverflowError("int too big to convert")

    monkeypatch.setattr(ddr.HostExecutor, "_measure_stream", overflow_at_256)
    monkeypatch.setattr(ddr.HostExecutor, "_measure_declared", overflow)
    out = tmp_path / "run"
    result = bwprof.run(cases="ddr_triad,lat_host", size="4MiB,256MiB", threads="1",
                        repeats=3, out=out, plots=False)
    assert {row.status for row in result.rows if row.case == "lat_host"} == {"error"}
    monkeypatch.undo()
    data = accept_json(str(out))
    verdicts = {c["case"]: (c["verdict"], c["reason"]) for c in data["checks"]}
    assert verdicts["ddr_triad"] == (
        "ERROR", f"bwprof error in ddr_triad (256 MiB): {OVERFLOW}; the box was not judged on it")
    assert verdicts["lat_host"][0] == "ERROR"
    assert verdicts["lat_host"][1].startswith("bwprof error in lat_host (")
    assert "FAIL" not in {c["verdict"] for c in data["checks"]}
    assert data["verdict"] == "CANNOT_JUDGE" and data["exit_code"] == 0
    line = data["boxes"][0]["line"]
    assert line.endswith(f"; bwprof error in ddr_triad, lat_host: {OVERFLOW}; the box was not "
                         "judged on them")
    assert accept(str(out)).exit_code == 0


def test_an_error_in_a_case_accept_does_not_judge_is_a_note(tmp_path):
    run = fake(tmp_path, edit_rows=lambda rows: _raised(rows, "hbm_copy"))
    result = accept(str(run))
    assert result.exit_code == 0, result.output
    assert (f"note: {run}: bwprof error in hbm_copy (1 row(s)): {OVERFLOW}; not a path "
            "accept judges, and the box was not judged on it") in result.stderr


# -- a busy host (issue 32) -------------------------------------------------------------------

V2 = DATA / "host-ddr-v2"


def _ddr_spec(tmp_path: Path, run: Path) -> Path:
    """A DDR band the run's own ddr_triad figure passes (the VM has no SMBIOS peak)."""
    rows = pd.read_csv(run / "results.csv")
    triad = rows[(rows["case"] == "ddr_triad") & (rows["size_bytes"] == rows["size_bytes"].max())]
    spec = tmp_path / "spec.toml"
    spec.write_text(f"[host.ddr]\nexpected_gbps = {float(triad['value_median'].iloc[0]):.3f}\n")
    return spec


def test_a_figure_from_a_busy_host_cannot_be_judged_and_says_why(tmp_path):
    """The run's DDR figure passes its band; flagged busy_host (other processes took 63% of
    the measuring cores), it is CANNOT JUDGE (busy), neither PASS nor FAIL."""
    quiet = tmp_path / "quiet"
    shutil.copytree(V2, quiet)
    spec = _ddr_spec(tmp_path, quiet)
    ddr, = checks_of(accept_json(str(quiet), "--spec", str(spec)), "ddr")
    assert ddr["verdict"] == "PASS" and not ddr["busy"]

    busy = tmp_path / "busy"
    shutil.copytree(V2, busy)
    rows = pd.read_csv(busy / "results.csv", keep_default_na=False, dtype=str)
    sizes = pd.to_numeric(rows["size_bytes"])
    judged = (rows["case"] == "ddr_triad") & (sizes == sizes.max())
    assert rows.loc[judged, "flags"].tolist() == [""]
    rows["host_others_pct"] = rows["host_steal_pct"] = ""
    rows.loc[judged, ["host_others_pct", "host_steal_pct", "flags"]] = ["63.2", "0.4",
                                                                        "busy_host"]
    rows.to_csv(busy / "results.csv", index=False)
    data = accept_json(str(busy), "--spec", str(spec))
    ddr, = checks_of(data, "ddr")
    assert ddr["verdict"] == "CANNOT_JUDGE" and ddr["busy"]
    assert ddr["reason"] == ("busy: other processes took 63% of the measuring cores' time "
                             "while it ran; measure again on a quiet host")
    assert ddr["value"] is not None  # the figure is shown, not judged
    assert data["exit_code"] == 0 and data["boxes"][0]["line"].endswith("(DDR busy)")


# -- a box's identity (issue 34) ---------------------------------------------------------------


def _with_identity(machine_id: str):
    def edit(system: dict) -> None:
        from bwprof.system import box_key

        system["host"]["identity"] = {"box": box_key("machine_id", machine_id),
                                      "box_source": "machine_id", "machine_id": machine_id,
                                      "cpu_model": system["host"]["cpu_model"]}
    return edit


def four_boxes_named_vm(tmp_path: Path, identities: bool) -> list[Path]:
    """Four H200 runs of hosts all named `vm`; the fourth's HBM is 30% short."""
    return [fake(tmp_path, f"run{i}", scale={"hbm_triad": 0.7} if i == 3 else None,
                 edit_system=_with_identity(f"{i + 1:032x}") if identities else None)
            for i in range(4)]


def test_machines_sharing_a_host_name_are_boxes_of_their_own_in_the_fleet_table(tmp_path):
    from bwprof.system import box_key

    folders = four_boxes_named_vm(tmp_path, identities=True)
    out = tmp_path / "out"
    result = accept(*map(str, folders), "--out", str(out))
    assert result.exit_code == 1, result.output
    table = pd.read_csv(out / "accept_fleet.csv")
    keys = [box_key("machine_id", f"{i + 1:032x}") for i in range(4)]
    assert list(table["box"]) == [f"vm#{key}" for key in keys]
    flagged = table[table["outliers"].notna()]
    assert list(flagged["box"]) == [f"vm#{keys[3]}"]  # only the slow machine's row
    assert list(table["hbm_verdict"]) == ["PASS", "PASS", "PASS", "FAIL"]
    rows = [line for line in result.stdout.splitlines() if line.startswith("vm#")
            and " — " not in line]
    assert [("!" in line) for line in rows] == [False, False, False, True]
    assert "no machine identity" not in result.stdout


def test_runs_of_one_host_name_without_an_identity_say_so(tmp_path):
    folders = four_boxes_named_vm(tmp_path, identities=False)
    result = accept(*map(str, folders))
    assert result.exit_code == 1, result.output
    assert ("note: box vm: 4 runs recorded no machine identity (a bwprof before it did) and "
            "are told apart by host name only") in result.stdout
    assert accept(str(H200)).stdout.count("no machine identity") == 0  # one run: nothing to say


def test_a_long_host_name_keeps_its_number_and_its_box_key_in_the_table():
    from bwprof.analysis.outliers import BOX_WIDTH, _box_cell

    cell = _box_cell("gpu-node-with-a-long-name-03#3f2a9c1b7d4e", BOX_WIDTH)
    assert len(cell) == BOX_WIDTH and cell.endswith("-03#3f2a9c")
