"""Findings across a fleet run: nodes whose headline figures fall more than 10% below the
fleet median for the same hardware, and nodes whose software or link differs from most."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping

import pandas as pd

from bwprof.analysis import figures
from bwprof.analysis.findings import Finding
from bwprof.analysis.summary import is_numa_device, node_of
from bwprof.casespec import path_of
from bwprof.schema.meta import NodeMeta

FLEET_SHARE = 0.9
FLEET_PATHS = ("ddr", "hbm", "d2d", "h2d", "d2h")
"""The paths whose headline figure a node is held against its peers on."""
HEADLINE_CASES = tuple(path_of(key).headline for key in FLEET_PATHS)
FIGURE = figures.column("value")
"""The figure compared: the median, as every output's (`bwprof.analysis.figures`)."""
METADATA_KEYS = {"driver_version": "driver", "cuda_driver_version": "CUDA driver",
                 "vbios_version": "VBIOS", "pcie_gen_max": "PCIe generation (max)",
                 "pcie_width_max": "PCIe width (max)"}


def _headline(results: pd.DataFrame) -> pd.DataFrame:
    """Per device, each headline case's figure as every output picks it (`figures.pick`:
    the best median at the largest size no cache holds): a node whose arrays fit its cache
    is not slower than its peers."""
    if results.empty:  # pandas warns on the masks of an empty frame's text columns
        return pd.DataFrame()
    rows = results[results["case"].isin(HEADLINE_CASES) & (results["backend"] != "simulated")
                   & ~results["device"].map(is_numa_device)]  # whole hosts against each other
    chosen = []
    for (_case, _device), group in rows.groupby(["case", "device"], sort=False):
        picked = figures.pick(group.to_dict("records"))
        if picked is not None:
            chosen.append(picked)
    return pd.DataFrame(chosen)


def box_labels(nodes: Mapping[str, NodeMeta]) -> dict[str, str]:
    """Each node's box label, 'host#box' where its run recorded a machine identity (two
    machines sharing a host name are two boxes), its node name otherwise."""
    return {name: (node.host.box_label or name) if node.host is not None else name
            for name, node in nodes.items()}


def slower_nodes(results: pd.DataFrame,
                 labels: Mapping[str, str] | None = None) -> list[Finding]:
    """Nodes more than 10% below the fleet median of the same case, size and model; a node
    is its box (`labels`: node name -> 'host#box') where known."""
    headline = _headline(results)
    found: list[Finding] = []
    if headline.empty:
        return found
    known = labels or {}

    def box_of(device: object) -> str:
        node = node_of(device)
        return known.get(node, node)

    keys = ["case", "size_bytes", "direction", "device_name"]
    for key, group in headline.groupby(keys, dropna=False):
        if group["device"].map(box_of).nunique() < 2:
            continue
        median = statistics.median(group[FIGURE])
        for _, row in group[group[FIGURE] < FLEET_SHARE * median].iterrows():
            found.append(Finding(
                "warning", str(row["device"]),
                f"node {box_of(row['device'])} below the fleet median on {key[0]}",
                "a node under-delivers against identical hardware in the same fleet",
                f"{row[FIGURE]:.1f} GB/s vs a fleet median of {median:.1f} GB/s over "
                f"{len(group)} {key[3]} device(s)",
            ))
    return found


def differing_nodes(nodes: Mapping[str, NodeMeta]) -> list[Finding]:
    """Nodes whose driver, CUDA driver, VBIOS or PCIe link maximum differ from the majority;
    each node named by its box label ('host#box') where known."""
    values: dict[str, dict[str, set[str]]] = {}
    labels = box_labels(nodes)
    for name, node in nodes.items():
        host = labels[name]
        for key in METADATA_KEYS:
            seen = node.gpus.metadata_values(key)
            if seen:
                values.setdefault(key, {}).setdefault(host, set()).update(seen)
    found = []
    for key, per_host in values.items():
        if len(per_host) < 2:
            continue
        counts = Counter(v for vals in per_host.values() for v in vals)  # nodes per value
        (majority, most), *others = counts.most_common()
        if others and others[0][1] == most:  # no value is the most common: name them all
            hosts_of = {value: ", ".join(h for h, vals in sorted(per_host.items())
                                         if value in vals) for value in counts}
            found.append(Finding(
                "warning", "fleet", f"{METADATA_KEYS[key]} differs across nodes",
                "nodes that should be identical are not: figures may differ for that reason",
                "; ".join(f"{value} on {hosts_of[value]}" for value in sorted(counts)),
            ))
            continue
        for host, vals in sorted(per_host.items()):
            odd = sorted(vals - {majority})
            if odd:
                found.append(Finding(
                    "warning", host, f"node {host}: {METADATA_KEYS[key]} differs from the fleet",
                    "nodes that should be identical are not: figures may differ for that reason",
                    f"{METADATA_KEYS[key]} {', '.join(odd)} here, {majority} on {most} of "
                    f"{len(per_host)} nodes",
                ))
    return found


def fleet_findings(results: pd.DataFrame, nodes: Mapping[str, NodeMeta]) -> list[Finding]:
    """Every fleet finding, nodes keyed by their box (`box_labels`)."""
    return [*slower_nodes(results, box_labels(nodes)), *differing_nodes(nodes)]
