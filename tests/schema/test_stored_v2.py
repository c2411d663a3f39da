"""The one stored run of schema version 2 (tests/data/host-ddr-v2, a real host measurement):
the file format a version-2 reader must keep reading, pinned."""

from pathlib import Path

import pandas as pd

from bwprof.saved import load
from bwprof.schema.flags import split_flags
from bwprof.schema.rows import ADDED_COLUMNS, CSV_COLUMNS, TIMING_COLUMNS

STORED = Path(__file__).resolve().parents[1] / "data" / "host-ddr-v2"


def test_its_files_have_the_columns_of_version_2():
    """As first written: every column but those version 2 gained later."""
    first = tuple(c for c in CSV_COLUMNS if c not in ADDED_COLUMNS)
    assert tuple(pd.read_csv(STORED / "results.csv").columns) == first
    assert tuple(pd.read_csv(STORED / "timings.csv").columns) == TIMING_COLUMNS


def test_it_reads_with_the_columns_added_since_empty():
    results = load(STORED).results
    assert set(ADDED_COLUMNS) <= set(results.columns)
    assert results["page_bytes"].isna().all() and results["load_gbps"].isna().all()
    # ddr_copy derives its copy-convention figure from its case: half its GB/s (STREAM
    # counts the array read and the array written); ddr_triad copies nothing.
    copy = results[(results["case"] == "ddr_copy") & (results["status"] == "ok")]
    assert (copy["copy_gbps_best"] == copy["gbps_best"] / 2).all() and len(copy)
    assert results.loc[results["case"] == "ddr_triad", "copy_gbps_best"].isna().all()
    assert (results["cache_level"] == "").all()


def test_it_loads_with_its_metric_values_and_flags():
    run = load(STORED)
    results = run.results
    assert run.meta.schema_version == 2 and (results["schema_version"] == 2).all()
    assert (results["metric"] == "bandwidth").all() and results["higher_is_better"].all()
    assert (results["value_best"] == results["gbps_best"]).all()
    resident = results["flags"].map(lambda text: "in_cache" in split_flags(text))
    llc = run.meta.host.llc_bytes_total
    assert (resident == (results["size_bytes"] < 4 * llc)).all() and resident.any()
    assert results.loc[resident, "peak_value"].isna().all()
    # The cache-resident rows are never the DDR figure.
    ddr = run.summary[run.summary["path"] == "ddr"].iloc[0]
    assert ddr["size_bytes"] >= 4 * llc and "in_cache" not in ddr["flags"]


def test_it_compares_with_a_version_1_run():
    from bwprof.analysis.compare import compare_runs

    comparison = compare_runs([load(STORED.parent / "host-ddr"), load(STORED)])
    summary = comparison.rows[comparison.rows["scope"] == "summary"]
    assert set(summary["metric"]) == {"bandwidth"}
