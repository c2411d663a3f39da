"""Findings that flag a sick box, derived from the rows, their joined counters and the
metadata: a PCIe link trained below its maximum, clocks held down, a GPU busy before the run,
a GPU slower than its identical siblings, a NUMA node slower than the host's others, host
cases run on fewer CPUs than the machine has, too few CUDA hardware queues for concurrent
streams, a figure above its peak, counters that disagree with the measurement. Pure
functions over frames, run at the end of `bwprof run`."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import pandas as pd

from bwprof.peaks import FINDING_ABOVE_PEAK
from bwprof.report.formats import cell_float, lower_is_better_row
from bwprof.report.summary import cache_resident, is_numa_device, node_of, numa_pair
from bwprof.schema.meta import RunMeta

FINDING_COLUMNS = ("severity", "device", "what", "why", "evidence")
SIBLING_SHARE = 0.8
SIBLING_MIN_BYTES = 16 << 20
"""Smallest transfer compared across sibling GPUs or nodes: below it launch latency rules."""
COUNTER_TOLERANCE = 0.2
LINK_PROTOCOL_HEADROOM = 1.2
"""How far above the payload a link counter may read: PCIe (and NVLink) counters count bytes on
the link, packet headers and framing included, and in both-ways traffic also the read requests
of the other direction. A 128-byte PCIe max payload costs about 19%, 256 bytes about 9% (the
H200 read 1.07-1.15); a row checked by link counters disagrees only beyond this much more."""
TRANSFER_DIRECTIONS = {"h2d", "d2h", "both"}
CUDA_DEFAULT_QUEUES = 8
"""CUDA_DEVICE_MAX_CONNECTIONS when unset: hardware queues per GPU for its streams."""


@dataclass(frozen=True)
class Finding:
    severity: str  # error | warning | info
    device: str
    what: str
    why: str
    evidence: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def findings_frame(findings: Iterable[Finding]) -> pd.DataFrame:
    return pd.DataFrame([f.as_dict() for f in findings], columns=list(FINDING_COLUMNS))


def _measured(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows that are measurements of a real GPU (simulated rows never yield findings)."""
    return rows[(rows["backend"] == "cuda") & rows["status"].isin(["ok", "invalid"])]


def _column(rows: pd.DataFrame, name: str) -> pd.Series:
    return rows[name] if name in rows.columns else pd.Series([None] * len(rows), index=rows.index)


def _bandwidth(rows: pd.DataFrame) -> pd.Series:
    """Which rows move bytes as their figure: a latency chase (or a small copy timed for its
    latency) barely loads a link, which may then idle at a lower generation, and its bytes
    are not what a counter of a concurrent load saw."""
    return rows["metric"].eq("bandwidth")


def _known(value: object) -> str:
    """A link generation or width for evidence text: '?' where no sample gave one."""
    number = cell_float(value)
    return "?" if number is None else f"{number:.0f}"


def pcie_below_max(rows: pd.DataFrame, meta: RunMeta) -> list[Finding]:
    found = []
    transfers = rows[_bandwidth(rows) & rows["direction"].isin(TRANSFER_DIRECTIONS)
                     & (rows["memory"] != "hbm")  # GPU<->GPU both ways: NVLink, not the slot
                     & (_column(rows, "telemetry_samples").fillna(0) > 0)]
    for device, group in transfers.groupby("device"):
        gpu = meta.gpus.device(str(device))
        info = gpu.metadata if gpu is not None else {}
        if gpu is not None and gpu.host_link_c2c:  # host copies use NVLink-C2C: PCIe idles
            continue
        gen_max = info.get("pcie_gen_max_system") or info.get("pcie_gen_max")
        width_max = info.get("pcie_width_max")
        gen, width = group["pcie_gen_min"].min(), group["pcie_width_min"].min()
        low_gen = gen_max and pd.notna(gen) and gen < gen_max
        low_width = width_max and pd.notna(width) and width < width_max
        if low_gen or low_width:
            found.append(Finding(
                "warning", str(device), "PCIe link below its maximum under load",
                "host<->device copies are capped by the trained link, not the slot",
                f"Gen{_known(gen)} x{_known(width)} during "
                f"{', '.join(sorted(set(group['case'])))}; "
                f"maximum Gen{gen_max} x{width_max}",
            ))
    return found


def few_hardware_queues(rows: pd.DataFrame, meta: RunMeta) -> list[Finding]:
    """Concurrent-stream cases measured with fewer CUDA hardware queues than CUDA's default 8
    (an inherited CUDA_DEVICE_MAX_CONNECTIONS, often 1 in training jobs): streams sharing a
    queue wait for each other, which reads as a GPU that cannot overlap."""
    queues = meta.gpus.cuda_device_max_connections
    concurrent = rows[rows["streams"].fillna(1) > 1]
    if queues is None or queues >= CUDA_DEFAULT_QUEUES or concurrent.empty:
        return []
    return [Finding(
        "warning", "gpus", f"only {queues} CUDA hardware queue(s) for concurrent streams",
        "streams sharing a queue wait for each other: overlap, both-ways and all-GPU figures "
        "understate the GPU",
        f"CUDA_DEVICE_MAX_CONNECTIONS={queues} in the environment during "
        f"{', '.join(sorted(set(concurrent['case'])))}; unset it (bwprof then asks for 32)",
    )]


def clock_events(rows: pd.DataFrame) -> list[Finding]:
    found = []
    reasons = _column(rows, "throttle_reasons").fillna("").astype(str)
    events = rows[reasons != ""]
    for device, group in events.groupby("device"):
        names = sorted({n for text in group["throttle_reasons"] for n in str(text).split("|")})
        found.append(Finding(
            "warning", str(device), f"clocks held down during measurement ({', '.join(names)})",
            "power, thermal or hardware slowdown lowers clocks, so figures understate the GPU",
            f"{len(group)} row(s): {', '.join(sorted(set(group['case'])))}",
        ))
    return found


def busy_before_run(meta: RunMeta) -> list[Finding]:
    found = []
    for check in (meta.telemetry.idle_check or ()) if meta.telemetry is not None else ():
        if check.busy:
            found.append(Finding(
                "warning", check.device, "GPU busy before the run",
                "another workload shares the memory and copy engines being measured",
                f"utilisation {check.gpu_util_pct}%, other processes "
                f"{list(check.other_processes) if check.other_processes else 'none'}",
            ))
    return found


def _below_siblings(group: pd.DataFrame) -> Iterator[tuple[pd.Series, float, int]]:
    """Each row worse than SIBLING_SHARE of the median of the other devices' rows in its
    group (of one metric), with that median and how many devices it spans: under 80% of it
    where higher is better, above 1/0.8 of it where lower is. The device itself stays out of
    the median: with two siblings it would be their mean, and one would pass at 67% of the
    other."""
    for _, row in group.iterrows():
        others = group[group["device"] != row["device"]]
        if others.empty:
            continue
        median = statistics.median(others["value_best"])
        lower_is_better = lower_is_better_row(row)
        worse = (row["value_best"] > median / SIBLING_SHARE if lower_is_better
                 else row["value_best"] < SIBLING_SHARE * median)
        if worse:
            yield row, median, others["device"].nunique()


def slower_than_siblings(rows: pd.DataFrame) -> list[Finding]:
    """A GPU whose figure is under 80% of the median of its identical siblings doing the same
    case. Only validated rows of at least SIBLING_MIN_BYTES count: small copies are bound by
    launch latency and noisy, no sign of a sick GPU."""
    # The size floor is for transfers; a latency row's size is its working set (or a 4-byte
    # copy timed for its latency), compared at any size.
    single = rows[rows["device"].str.fullmatch(r"gpu\d+") & rows["value_best"].notna()
                  & (rows["status"] == "ok")
                  & (~(rows["size_bytes"] < SIBLING_MIN_BYTES) | ~_bandwidth(rows))]
    # Everything that makes two rows the same measurement, device aside.
    keys = ["case", "metric", "size_bytes", "direction", "phase", "memory", "streams",
            "threads", "device_name"]
    return [Finding(
        "warning", row["device"], f"slower than its identical siblings on {key[0]}",
        "one GPU (or its slot, link or NUMA placement) under-delivers",
        f"{row['value_best']:.1f} {row['unit']} vs a median of {median:.1f} {row['unit']} "
        f"over {others} other {key[-1]} GPUs at {row['size_bytes']} B"
        + (f" ({row['phase']})" if row["phase"] else ""),
    ) for key, group in single.groupby(keys, dropna=False)
        for row, median, others in _below_siblings(group)]


def slower_numa_nodes(rows: pd.DataFrame) -> list[Finding]:
    """A host NUMA node whose DDR figure alone is under 80% of the median of its host's other
    nodes (a missing or slower DIMM, or memory channels left empty on one socket)."""
    # A NUMA pair (lat_host_numa: one node's CPUs reading another's memory) is a sibling
    # only where it is local: a remote pair is slower by design, not by a fault.
    nodes = rows[(rows["backend"] == "host") & (rows["status"] == "ok")
                 & rows["value_best"].notna()
                 & (rows["device"].map(is_numa_device).astype(bool)
                    | rows["device"].map(_local_pair).astype(bool))]
    slow: dict[str, list[str]] = {}
    evidence: dict[str, str] = {}
    # Same thread count too: a cpuset may leave one node fewer CPUs, which is no DIMM fault.
    for (case, _metric, _size, _threads, _phase, _host), group in nodes.groupby(
            ["case", "metric", "size_bytes", "threads", "phase", nodes["device"].map(node_of)],
            sort=False, dropna=False):
        for row, median, others in _below_siblings(group):
            slow.setdefault(row["device"], []).append(str(case))
            unit = row["unit"]
            evidence.setdefault(row["device"], f"{case}: {row['value_best']:.1f} {unit} vs a "
                                               f"median of {median:.1f} {unit} over {others} "
                                               f"other NUMA nodes")
    return [Finding(
        "warning", device, f"NUMA node slower than its siblings on {', '.join(cases)}",
        "one socket's memory under-delivers: a missing or slower DIMM, or empty channels; "
        "GPUs and threads on that node see less host bandwidth",
        evidence[device],
    ) for device, cases in slow.items()]


def _local_pair(device: object) -> bool:
    pair = numa_pair(device)
    return pair is not None and pair[0] == pair[1]


def host_cpus_narrowed(rows: pd.DataFrame, meta: RunMeta) -> list[Finding]:
    """Host cases ran on fewer CPUs than the machine has, so the DDR figure is not the
    node's. A binding narrower than the cgroup's cpuset (an MPI launcher binds ranks to a
    core or socket; taskset) is a warning the user can lift; a cpuset alone (a container's
    or a job's allocation) is information about what was measured."""
    if meta.host is None:
        return []
    usable, logical = meta.host.usable_cpus, meta.host.logical_cpus
    cpuset = meta.host.cpuset_cpus
    ddr = rows[(rows["backend"] == "host") & (rows["status"] == "ok")]
    if ddr.empty or usable >= logical:
        return []
    threads = pd.to_numeric(_column(ddr, "threads"), errors="coerce").max()
    used = f"DDR rows used up to {'?' if pd.isna(threads) else int(threads)} thread(s)"
    allowed = cpuset if cpuset is not None and usable <= cpuset < logical else None
    if allowed is not None and usable == allowed:
        return [Finding(
            "info", "cpu", f"host cases ran on the {usable} CPUs of this cgroup's cpuset, "
                           f"of the machine's {logical}",
            "a container's or job's CPU allocation caps the threads, so DDR figures are of "
            "that share of the node",
            f"cpuset allows {usable} CPU(s); {used}",
        )]
    return [Finding(
        "warning", "cpu", f"host cases ran on {usable} of the machine's {logical} CPUs",
        "the process's CPU affinity (an MPI launcher's binding, or taskset) capped the "
        "threads, so DDR figures understate the node",
        f"CPU affinity allows {usable} CPU(s)"
        + (f" of the cpuset's {allowed}" if allowed is not None else "")
        + f"; {used}; under mpirun add --bind-to none (srun: --cpu-bind=none)",
    )]


def _peak_doubt(row: pd.Series) -> str:
    """Where the peak itself may be wrong: it is derived from what the machine reports."""
    if row["backend"] == "host":
        return " or SMBIOS misreports the memory"
    if row["memory"] == "hbm" and row["direction"] == "within":
        return " or NVML misreports the memory's bus width or maximum clock (system.json)"
    return ""


def above_peak(rows: pd.DataFrame) -> list[Finding]:
    """A figure above its theoretical peak (where higher is better): never a cache-resident
    row, which is not held against the memory's peak."""
    cached = cache_resident(rows)
    over = rows[rows["peak_value"].notna() & rows["higher_is_better"].eq(True).fillna(False)
                & (rows["value_best"] > FINDING_ABOVE_PEAK * rows["peak_value"]) & ~cached]
    return [Finding(
        "error", str(row["device"]), f"{row['case']} above its theoretical peak",
        "no path beats its peak: the figure is a measurement error" + _peak_doubt(row),
        f"{row['value_best']:.1f} {row['unit']} > peak {row['peak_value']:.1f} {row['unit']} "
        f"at {row['size_bytes']} B",
    ) for _, row in over.iterrows()]


def counters_disagree(rows: pd.DataFrame) -> list[Finding]:
    """Counters more than 20% off the bytes the row moved. Link counters (every row but device
    memory within a GPU, which DRAM utilisation checks) may read LINK_PROTOCOL_HEADROOM more:
    the payload they imply is their reading divided by the protocol's overhead."""
    rows = rows[_bandwidth(rows)]  # a chase's bytes are not what counters of a load saw
    ratio = _column(rows, "counter_ratio")
    link = rows["direction"] != "within"
    high = (1 + COUNTER_TOLERANCE) * link.map({True: LINK_PROTOCOL_HEADROOM, False: 1.0})
    off = rows[ratio.notna() & ((ratio < 1 - COUNTER_TOLERANCE) | (ratio > high))]
    return [Finding(
        "warning", str(row["device"]), f"counters disagree with {row['case']}",
        "the hardware saw a different rate than the code measured: one of them is wrong",
        f"counters {row['counter_gbps']:.1f} GB/s vs {row['window_gbps']:.1f} GB/s moved "
        f"(ratio {row['counter_ratio']:.2f}) at {row['size_bytes']} B",
    ) for _, row in off.iterrows()]


def derive_findings(rows: pd.DataFrame, meta: RunMeta) -> list[Finding]:
    """Every finding of one run, from its rows and its metadata (none without rows: pandas
    warns on the masks of an empty frame's text columns)."""
    if rows.empty:
        return []
    measured = _measured(rows)
    return [
        *slower_numa_nodes(rows),
        *host_cpus_narrowed(rows, meta),
        *busy_before_run(meta),
        *pcie_below_max(measured, meta),
        *few_hardware_queues(measured, meta),
        *clock_events(measured),
        *slower_than_siblings(measured),
        *above_peak(pd.concat([measured, rows[(rows["backend"] == "host")
                                              & (rows["status"] == "ok")]])),
        *counters_disagree(measured),
    ]
