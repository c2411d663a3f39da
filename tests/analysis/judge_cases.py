"""Runs that exercise every branch of the judge, and the judge's checks as text, for the
golden test of `bwprof.analysis.judge` (test_judge_golden.py): the checks of these runs were
captured before the judge was rewritten to judge a fleet's GPUs all at once (issue 36), and
must stay what they were, check for check, field for field.

The capture is gzipped JSON (a few hundred kilobytes of text, mostly the bands' sources
repeated). `python -m tests.analysis.judge_cases` rewrites it (only where the judge's
outputs are meant to change: review its diff)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

import bwprof
from bwprof.analysis import judge
from bwprof.analysis.spec import Spec, parse_spec
from bwprof.schema.meta import NodeMeta
from bwprof.store.runfolder import RunFolder

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = Path(__file__).resolve().parent / "judge_golden.json.gz"
FOLDERS = ("h200-quick", "host-ddr", "host-ddr-v2", "sim-a", "sim-b-slower", "sim-c-other-box")
GIB = 1 << 30


def serialised(checks: list[judge.Check]) -> list[str]:
    """Each check as one JSON line, every field in order; floats as `repr` writes them, so
    a last-digit change shows (NaN as NaN: compared as text, not as numbers). The run's
    folder by its name only: the checkout's place is no output of the judge's."""
    return [json.dumps([(key, Path(str(value)).name if key == "run_dir" else value)
                        for key, value in check.as_dict().items()], allow_nan=True)
            for check in checks]


def specs() -> dict[str, Spec]:
    """The built-in bands, and a spec that moves every kind of band the judge reads."""
    data = {
        "cv_max": 0.004,
        "host": {"ddr": {"peak_gbps": 120.0, "fail_pct": 40},
                 "latency": {"lat_host": {"warn_ns": 100, "fail_ns": 150}}},
        "gpu": {
            "all": {"hbm": {"fail_pct": 80}, "latency": {"lat_gpu": {"warn_ns": 500}}},
            "H200": {"cv_max": 0.02, "h2d": {"warn_pct": 90}, "overlap": {"fail_pct": 99},
                     "p2p": {"peak_gbps": 400.0}},
            "L4": {"hbm": {"expected_gbps": 250.0}, "d2d": {"warn_pct": 50}},
        },
    }
    return {"default": Spec(), "spec": parse_spec(data, Path("judge_cases.toml"))}


def _set(rows: pd.DataFrame, mask: object, **values: object) -> None:
    for column, value in values.items():
        rows.loc[mask, column] = value  # type: ignore[call-overload]


def _latency_rows(template: pd.Series, device: str) -> pd.DataFrame:
    """A host's or a GPU's latency sweep, a lat_memcpy each way and loaded phases (never
    judged), from one row of the run as template."""
    out = []

    def add(case: str, dev: str, ns: float, size: int, **fields: object) -> None:
        row = template.copy()
        row["case"], row["device"], row["metric"], row["unit"] = case, dev, "latency", "ns"
        row["value_median"], row["size_bytes"], row["status"] = ns, size, "ok"
        row["flags"], row["phase"], row["cv"], row["direction"] = "", "", 0.01, "within"
        row["backend"] = "host" if dev.endswith("cpu") else "cuda"
        for key, value in fields.items():
            row[key] = value
        out.append(row)

    if device.endswith("cpu"):
        add("lat_host", device, 14.0, 16 << 20, flags="in_cache")
        add("lat_host", device, 95.0, GIB)
        add("lat_host", device, 160.0, GIB, cv=0.3)
        add("lat_host_loaded", device, 190.0, GIB, phase="load_50")
        add("lat_host_numa", device.replace("cpu", "numa0->numa1"), 140.0, GIB)
    else:
        add("lat_gpu", device, 200.0, 16 << 20, flags="l2_resident")
        add("lat_gpu", device, 480.0, GIB)
        add("lat_memcpy", device, 2100.0, 4, direction="h2d")
        add("lat_memcpy", device, 2300.0, 4, direction="d2h", status="error",
            note="RuntimeError: timed out\nsecond line")
        add("lat_gpu_loaded", device, 900.0, GIB, phase="load_100")
    return pd.DataFrame(out)


def _as_model(gpus, name: str, **metadata: object):
    devices = tuple(replace(gpu, properties=replace(gpu.properties, name=name),
                            metadata={**gpu.metadata, "name": name, **metadata},
                            peak_hbm_gbps=metadata.get("peak_hbm_gbps", gpu.peak_hbm_gbps))
                    for gpu in gpus.devices)
    return replace(gpus, devices=devices)


def _two_gpus(gpus, links_up: int | None):
    first = replace(gpus.devices[0], metadata={**gpus.devices[0].metadata,
                                               "nvlink_links_up": links_up})
    second = replace(first, index=1, properties=replace(first.properties, index=1))
    return replace(gpus, count=2, devices=(first, second))


Variant = Callable[[pd.DataFrame, NodeMeta], tuple[pd.DataFrame, NodeMeta]]


def _zero_nan_peak(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"] == "hbm_triad", value_median=0.0)
    _set(rows, rows["case"] == "d2d_copy", value_median=np.nan)
    _set(rows, rows["case"] == "h2d_pinned", peak_value=np.nan)
    _set(rows, rows["case"] == "d2h_pinned", peak_value=0.0)
    _set(rows, rows["case"] == "ddr_triad", value_median=-1.0)
    return rows, node


def _failed(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"] == "d2h_pinned", status="invalid", note="checksum mismatch\nat 0")
    bidir = rows["case"] == "bidir_pinned"
    largest = bidir & (rows["size_bytes"] == rows.loc[bidir, "size_bytes"].max())
    _set(rows, largest, status="error", note="OverflowError: int too big", value_median=np.nan)
    h2d = rows["case"] == "h2d_pinned"
    smallest = h2d & (rows["size_bytes"] == rows.loc[h2d, "size_bytes"].min())
    _set(rows, smallest, status="error", note="MemoryError")  # below the largest: judged
    _set(rows, rows["case"] == "hbm_triad", status="skipped", note="no memory left")
    _set(rows, rows["case"] == "ddr_triad", status="error", size_bytes=pd.NA,
         note="ValueError: bad")
    return rows, node


def _overlap(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    h2d = rows["case"] == "overlap_h2d_compute"
    rows = rows[~(h2d & (rows["phase"] == "concurrent"))].copy()
    d2h = rows["case"] == "overlap_d2h_compute"
    _set(rows, d2h & (rows["phase"] == "concurrent"), overlap_efficiency=np.nan)
    error = rows[d2h].iloc[[0]].copy()
    _set(error, error.index, status="error", phase=np.nan, note="CudaError: launch failed",
         value_median=np.nan)
    rows = pd.concat([rows, error], ignore_index=True)
    bidir = rows["case"] == "overlap_bidir_compute"
    _set(rows, bidir & (rows["phase"] == "concurrent"), overlap_efficiency=0.5, cv=0.09)
    rows = rows[rows["case"] != "overlap_pageable"].copy()
    return rows, node


def _overlap_raised(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    """Beside a concurrent row with its efficiency: an alone row that raised (the case is
    ERROR) and a second concurrent row without one (never read)."""
    h2d = rows["case"] == "overlap_h2d_compute"
    alone = h2d & (rows["phase"] == "alone")
    _set(rows, alone & (rows["direction"] == "h2d"), status="error", value_median=np.nan,
         note="CudaError: out of memory")
    extra = rows[h2d & (rows["phase"] == "concurrent")].copy()
    _set(extra, extra.index, overlap_efficiency=np.nan)
    d2h = rows["case"] == "overlap_d2h_compute"
    _set(rows, d2h & (rows["phase"] == "overlapped"), status="invalid", note="bad sum")
    return pd.concat([rows, extra], ignore_index=True), node


def _busy_noisy(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"].isin(["ddr_triad", "hbm_triad"]), flags="busy_host",
         host_others_pct=63.0, host_steal_pct=2.0)
    _set(rows, rows["case"] == "d2d_copy", flags="busy_host;noisy", host_others_pct=np.nan,
         host_steal_pct=0.2)
    _set(rows, rows["case"] == "h2d_pinned", cv=0.2)
    _set(rows, rows["case"] == "d2h_pinned", cv=np.nan)
    return rows, node


def _simulated_cached(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"] == "d2d_copy", flags="simulated")
    _set(rows, rows["case"] == "hbm_triad", flags="in_cache")
    _set(rows, rows["case"] == "d2h_pinned", backend="simulated")
    rows = rows[rows["case"] != "h2d_pinned"].copy()
    return rows, node


def _link_fault(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"] == "h2d_pinned", pcie_gen_min=4.0, telemetry_samples=3.0)
    _set(rows, rows["case"] == "d2h_pinned", pcie_width_min=8.0, telemetry_samples=0.0)
    return rows, node


def _width_fault(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"] == "bidir_pinned", pcie_width_min=8.0, telemetry_samples=5.0)
    gpus = _as_model(node.gpus, "NVIDIA H200", pcie_max_payload_bytes=512)
    return rows, replace(node, gpus=gpus)


def _pairs(links_up: int | None, slow: float) -> Variant:
    def variant(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
        gpu_rows = rows[rows["device"].astype(str) == "gpu0"].copy()
        gpu_rows["device"] = "gpu1"
        pair = rows[rows["case"] == "p2p_copy"].iloc[[0]]
        pairs = []
        for device, value in (("gpu0->gpu1", 380.0), ("gpu1->gpu0", slow),
                              ("gpu0->gpu1", 300.0)):
            one = pair.copy()
            size = 1 << 28 if value != 300.0 else 1 << 20
            _set(one, one.index, device=device, status="ok", value_median=value,
                 size_bytes=size, note="", cv=0.01)
            pairs.append(one)
        rows = pd.concat([rows[rows["case"] != "p2p_copy"], gpu_rows, *pairs],
                         ignore_index=True)
        return rows, replace(node, gpus=_two_gpus(node.gpus, links_up))
    return variant


def _pairs_missing(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    rows, node = _pairs(18, 370.0)(rows, node)
    rows = rows[rows["case"] != "p2p_copy"].copy()
    return rows, replace(node, gpus=_two_gpus(node.gpus, 12))


def _unknown(peak: float | None) -> Variant:
    def variant(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
        meta = {"peak_hbm_gbps": peak, "pcie_gen_max": None, "pcie_width_max": None}
        return rows, replace(node, gpus=_as_model(node.gpus, "NVIDIA L4", **meta))
    return variant


def _gh200(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"] == "d2h_pinned", flags="c2c_link")
    return rows, replace(node, gpus=_as_model(node.gpus, "NVIDIA GH200 480GB",
                                              c2c_enabled=True, nvlink_links_up=0))


def _a100_pcie(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    _set(rows, rows["case"] == "d2h_pinned", flags="c2c_link")  # C2C by the row only
    return rows, replace(node, gpus=_as_model(node.gpus, "NVIDIA A100 80GB PCIe"))


def _a100_pairs(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    rows, node = _pairs(0, 20.0)(rows, node)
    return rows, replace(node, gpus=_as_model(node.gpus, "NVIDIA A100-PCIE-40GB",
                                              pcie_gen_max=4))


def _latency(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    template = rows[rows["case"] == "hbm_triad"].iloc[0]
    raised = template.copy()
    raised["case"], raised["device"], raised["backend"] = "ddr_triad", "", "host"
    raised["status"], raised["note"], raised["size_bytes"] = "error", "OSError: no", pd.NA
    raised["metric"] = "bandwidth"
    lat = pd.concat([_latency_rows(template, "cpu"), _latency_rows(template, "gpu0")],
                    ignore_index=True)
    host = replace(node.host, ddr_peak_gbps=204.8, ddr_peak_note="") if node.host else None
    return (pd.concat([rows, lat, pd.DataFrame([raised])], ignore_index=True),
            replace(node, host=host))


def _no_host(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    rows = rows[~rows["case"].str.startswith("ddr_")].copy()
    return rows, replace(node, host=None)


def _nothing(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    return rows.iloc[0:0].copy(), node


def _same(rows: pd.DataFrame, node: NodeMeta) -> tuple[pd.DataFrame, NodeMeta]:
    return rows, node


VARIANTS: dict[str, Variant] = {
    "same": _same, "zero_nan_peak": _zero_nan_peak, "failed": _failed, "overlap": _overlap,
    "busy_noisy": _busy_noisy, "simulated_cached": _simulated_cached,
    "link_fault": _link_fault, "width_fault": _width_fault,
    "nvlink_down": _pairs(12, 350.0), "nvlink_all_up": _pairs(18, 200.0),
    "pcie_pairs": _pairs(0, 20.0), "pairs_missing": _pairs_missing,
    "unknown_model": _unknown(None), "unknown_with_peak": _unknown(900.0), "gh200": _gh200,
    "a100_pcie": _a100_pcie, "a100_pairs": _a100_pairs, "latency": _latency,
    "no_host": _no_host, "nothing": _nothing, "overlap_raised": _overlap_raised,
}


def _base():
    return bwprof.load(DATA / "h200-quick")


def fleet(names: dict[str, str]):
    """A fleet run (devices `name:gpu0`, as the merge names them): each node the stored
    H200 run's rows and meta with its variant applied."""
    base = _base()
    parts, nodes = [], {}
    for name, variant in names.items():
        node = NodeMeta(host=base.meta.host, gpus=base.meta.gpus, telemetry=base.meta.telemetry)
        rows, node = VARIANTS[variant](base.results.copy(), node)
        rows = rows.copy()
        rows["device"] = name + ":" + rows["device"].fillna("").astype(str)
        parts.append(rows)
        nodes[name] = node
    results = pd.concat(parts, ignore_index=True)
    return replace(base, results=results, meta=replace(base.meta, nodes=nodes))


def single(variant: str):
    """One box (no nodes): the stored H200 run with `variant` applied."""
    base = _base()
    node = NodeMeta(host=base.meta.host, gpus=base.meta.gpus, telemetry=base.meta.telemetry)
    rows, node = VARIANTS[variant](base.results.copy(), node)
    return replace(base, results=rows.reset_index(drop=True),
                   meta=replace(base.meta, host=node.host, gpus=node.gpus))


def runs() -> dict[str, RunFolder]:
    """Every run the golden test judges, by name."""
    out: dict[str, RunFolder] = {name: bwprof.load(DATA / name) for name in FOLDERS}
    out["fleet"] = fleet({f"n{i}": variant for i, variant in enumerate(VARIANTS)})
    out["fleet_colons"] = fleet({"a:1": "failed", "a": "latency", "a:10": "same"})
    out["fleet_one"] = fleet({"solo": "nvlink_down"})
    for variant in ("failed", "overlap", "overlap_raised", "latency", "nvlink_down",
                    "unknown_with_peak", "gh200"):
        out[f"single_{variant}"] = single(variant)
    return out


def judged() -> dict[str, list[str]]:
    """Every run's checks under every spec, serialised."""
    out = {}
    for run_name, run in runs().items():
        for spec_name, spec in specs().items():
            out[f"{run_name}/{spec_name}"] = serialised(judge.judge_run(run, spec))
    return out


def main() -> None:
    captured = judged()
    text = json.dumps(captured, indent=0, allow_nan=True) + "\n"
    GOLDEN.write_bytes(gzip.compress(text.encode(), mtime=0))  # the same bytes each time
    print(f"{GOLDEN}: {sum(map(len, captured.values()))} checks of {len(captured)} runs")


if __name__ == "__main__":
    main()
