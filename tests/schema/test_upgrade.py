"""Version-1 folders (tests/data) load as version 2: metric named, figures copied, flags
derived once from the notes version 1 wrote, and cache-resident rows kept from the peak."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from bwprof.schema.flags import split_flags
from bwprof.store.runfolder import load_run

DATA = Path(__file__).resolve().parents[1] / "data"
STORED = sorted(p.name for p in DATA.iterdir() if (p / "results.csv").is_file()
                and set(pd.read_csv(p / "results.csv")["schema_version"]) == {1})


@pytest.mark.parametrize("name", STORED)
def test_every_stored_version_1_folder_reads_as_version_2(name):
    v1 = pd.read_csv(DATA / name / "results.csv")
    assert set(v1["schema_version"]) == {1} and "bytes_per_rep" in v1.columns
    results = load_run(DATA / name).results
    assert (results["schema_version"] == 2).all()
    assert (results["metric"] == "bandwidth").all() and (results["unit"] == "GB/s").all()
    assert results["higher_is_better"].all()
    assert results["bytes_per_op"].tolist() == v1["bytes_per_rep"].astype("Int64").tolist()
    pd.testing.assert_series_equal(results["value_best"], results["gbps_best"],
                                   check_names=False)
    assert (results.loc[results["backend"] == "simulated", "flags"]
            .map(lambda f: "simulated" in split_flags(f)).all())


def test_l2_resident_copies_of_the_h200_run_lose_the_hbm_peak():
    results = load_run(DATA / "h200-quick").results
    d2d = results[results["case"] == "d2d_copy"].set_index("size_bytes")
    resident = d2d["flags"].map(lambda f: "l2_resident" in split_flags(f))
    assert resident[d2d.index < 64 << 20].all() and not resident[d2d.index >= 256 << 20].any()
    assert d2d.loc[resident, ["peak_value", "peak_gbps", "pct_of_peak"]].isna().all().all()
    assert d2d.loc[~resident, "peak_value"].notna().all()


def test_noisy_rows_are_those_whose_cv_passes_the_threshold():
    from bwprof.schema.flags import NOISY_CV

    results = load_run(DATA / "h200-quick").results
    noisy = results["flags"].map(lambda f: "noisy" in split_flags(f))
    assert noisy.any()
    assert (noisy == (results["cv"].fillna(0) > NOISY_CV)).all()


def test_a_v1_ddr_row_noted_in_cache_is_flagged(tmp_path):
    run = tmp_path / "host-ddr"
    shutil.copytree(DATA / "host-ddr", run)
    frame = pd.read_csv(run / "results.csv", dtype={"note": str})
    frame.loc[0, "note"] = "arrays under 4x the last-level cache (480 MiB): partly cache"
    frame.to_csv(run / "results.csv", index=False)
    results = load_run(run).results
    assert split_flags(results.loc[0, "flags"]) == {"in_cache"}
    assert results.loc[1:, "flags"].eq("").all()
