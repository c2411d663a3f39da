"""Reading version-1 results (every folder written before schema 2, such as `tests/data`):
their rows are upgraded once, on read, to version 2.

Version 1 held GB/s only and said in its notes what version 2 says in `flags`. The upgrade
names the metric (bandwidth, GB/s, higher is better), copies the figures into `value_*`,
renames `bytes_per_rep` to `bytes_per_op`, and derives the flags from the notes as the code
of that version wrote them, once and here only. A cache-resident row loses its peak, as a new
run's would.
"""

from __future__ import annotations

import pandas as pd

from bwprof.schema import flags as f
from bwprof.schema.metrics import BANDWIDTH
from bwprof.schema.rows import SCHEMA_VERSION

V1_RESULT_COLUMNS: tuple[str, ...] = (
    "run_id", "host", "case", "backend", "device", "device_name", "memory", "direction",
    "size_bytes", "threads", "streams", "numa_node", "repeats", "ops_per_sample",
    "bytes_per_rep", "byte_convention", "time_median_s", "time_min_s", "gbps_median",
    "gbps_best", "cv", "peak_gbps", "pct_of_peak", "status", "note", "phase",
    "overlap_efficiency", "schema_version",
)
"""The columns a version-1 results file has (it is upgraded on read)."""

V1_IN_CACHE_NOTE = "under 4x the last-level cache"
"""Version 1's note on a host row whose arrays were smaller than STREAM's 4x rule."""
V1_L2_NOTES = ("fits in L2", "the cache is in the figure")
V1_C2C_NOTE = "host link is NVLink-C2C"
V1_NUMA_NOTES = ("host memory placement not enforced", "host memory not on NUMA node",
                 "could not be read back", "placement not verified")
V1_CACHE_UNKNOWN_NOTES = ("from CPUID, one instance", "last-level cache size unknown")


def _v1_flags(note_cell: object, backend: object, cv: float) -> str:
    """A version-1 row's flags, from its note, its backend and its cv (a number or NaN)."""
    note = note_cell if isinstance(note_cell, str) else ""  # NaN where a row had none
    found: set[str] = set()
    if V1_IN_CACHE_NOTE in note:
        found.add(f.IN_CACHE)
    if any(text in note for text in V1_L2_NOTES):
        found.add(f.L2_RESIDENT)
    if V1_C2C_NOTE in note:
        found.add(f.C2C_LINK)
    if any(text in note for text in V1_NUMA_NOTES):
        found.add(f.NUMA_UNVERIFIED)
    if any(text in note for text in V1_CACHE_UNKNOWN_NOTES):
        found.add(f.CACHE_UNKNOWN)
    if backend == "simulated":
        found.add(f.SIMULATED)
    if cv == cv and cv > f.NOISY_CV:  # NaN is no cv
        found.add(f.NOISY)
    return f.join_flags(found)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column of the table, or a column of NA where the table has none."""
    return frame[name] if name in frame.columns else pd.Series(pd.NA, index=frame.index)


def upgrade_results_v1(frame: pd.DataFrame) -> pd.DataFrame:
    """A version-1 results table as version 2 (the input is left as it was)."""
    out = frame.rename(columns={"bytes_per_rep": "bytes_per_op"}).copy()
    measured = out["status"].isin(["ok", "invalid"])
    out["metric"] = BANDWIDTH.name
    out["unit"] = BANDWIDTH.unit
    out["higher_is_better"] = BANDWIDTH.higher_is_better
    out["work_per_op"] = out["bytes_per_op"].where(measured)
    out["value_median"] = out["gbps_median"]
    out["value_best"] = out["gbps_best"]
    cvs = pd.to_numeric(_column(out, "cv"), errors="coerce").astype("float64")
    out["flags"] = [_v1_flags(note, backend, cv) for note, backend, cv in
                    zip(_column(out, "note"), _column(out, "backend"), cvs, strict=True)]
    cached = out["flags"].map(f.is_cache_resident).astype(bool)
    # A cache-resident figure is not held against the memory's peak (version 1 kept the
    # HBM peak beside L2-resident rows).
    out.loc[cached, ["peak_gbps", "pct_of_peak"]] = None
    out["peak_value"] = out["peak_gbps"]
    out["schema_version"] = SCHEMA_VERSION
    return out
