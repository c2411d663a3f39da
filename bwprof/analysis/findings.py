"""Findings that flag a sick box, derived from the rows, their joined counters and the
metadata: a PCIe link trained below its maximum, clocks held down (application clocks set
below the board's default among them), a GPU that got worse during the run (new ECC errors,
rows remapped, a hardware Xid), a GPU busy before the run,
a GPU slower than its identical siblings, a GPU pair slower than the other pairs, one
direction of a link slower than its opposite, the GPUs of one NUMA node slower on host copies
than those of the others, a NUMA node slower than the host's others, host cases run on fewer
CPUs than the machine has, too few CUDA hardware queues for concurrent
streams, a figure above its peak, counters that disagree with the measurement. Pure
functions over frames, run at the end of `bwprof run`."""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import pandas as pd

from bwprof.analysis import figures
from bwprof.analysis.summary import cache_resident, is_numa_device, node_of, numa_pair
from bwprof.casespec import MEDIAN_BEYOND_CACHE
from bwprof.peaks import FINDING_ABOVE_PEAK
from bwprof.schema.meta import HEALTH_COUNTS, GpuHealth, RunMeta, xid_kind
from bwprof.store.formats import cell_float, lower_is_better_row

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


FIGURE = figures.column("value")
"""The column every finding reads: a row's figure in the statistic every output shows (the
median, `bwprof.analysis.figures`), so a finding never quotes a number the summary does not."""
STATISTIC = MEDIAN_BEYOND_CACHE.statistic
BEST = figures.best_column("value")


def _best_beside(row: pd.Series) -> str:
    """'; best 4897.3' where the row has a best sample, to say beside the figure, labelled."""
    best = cell_float(row.get(BEST))
    return f"; {figures.BEST} {best:.1f}" if best is not None else ""


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


APPLICATIONS_CLOCKS = "applications_clocks"
"""The clock-event reason of clocks held at the application clocks (nvml.h's 0x2)."""


APPLIED_AND_DEFAULT: tuple[tuple[str, str, str], ...] = (
    ("graphics", "applications_clock_graphics_mhz", "default_applications_clock_graphics_mhz"),
    ("memory", "applications_clock_mem_mhz", "default_applications_clock_mem_mhz"),
)
"""Each application clock in a GPU's NVML metadata: (which, in force, the board's default)."""


def _applications_clocks(info: object) -> list[tuple[str, float, float]]:
    """Each clock (graphics, memory) whose application clock is below the board's default
    one (someone ran `nvidia-smi -ac`), in a GPU's NVML metadata: (which, set, default) in
    MHz; empty where they are at the default or above, or unknown. Not the maximum: many
    healthy parts ship a default below it (A100 1095 of 1410 MHz, V100 1312 of 1530)."""
    if not isinstance(info, dict) and not hasattr(info, "get"):
        return []
    lowered = []
    for which, applied, default in APPLIED_AND_DEFAULT:
        value, board = cell_float(info.get(applied)), cell_float(info.get(default))
        if value is not None and board is not None and 0 < value < board:
            lowered.append((which, value, board))
    return lowered


def _at_default(meta: RunMeta | None, device: str) -> bool:
    """Whether a GPU's application clocks are known to be at the board's default or above,
    so clocks held at them hold nothing down that the part does not."""
    gpu = meta.gpus.device(device) if meta is not None else None
    if gpu is None:
        return False
    info = gpu.metadata
    known = all(cell_float(info.get(key)) is not None
                for _, applied, default in APPLIED_AND_DEFAULT for key in (applied, default))
    return known and not _applications_clocks(info)


def clock_events(rows: pd.DataFrame, meta: RunMeta | None = None) -> list[Finding]:
    """Rows measured while clocks were held down: power, thermal and hardware slowdowns, and
    application clocks (`nvidia-smi -ac`) unless system.json shows them at the board's
    default or above."""
    found = []
    reasons = _column(rows, "throttle_reasons").fillna("").astype(str)
    events = rows[reasons != ""]
    for device, group in events.groupby("device"):
        names = sorted({n for text in group["throttle_reasons"] for n in str(text).split("|")
                        if n})
        if _at_default(meta, str(device)):
            names = [n for n in names if n != APPLICATIONS_CLOCKS]
        if not names:
            continue
        why = ("power, thermal or hardware slowdown lowers clocks, so figures understate the "
               "GPU")
        if APPLICATIONS_CLOCKS in names:
            why = ("clocks held at the application clocks (set with nvidia-smi -ac, reset "
                   "with nvidia-smi -rac)" + ("" if names == [APPLICATIONS_CLOCKS] else
                                               ", or " + why.split(", so")[0])
                   + ", so figures understate the GPU")
        found.append(Finding(
            "warning", str(device), f"clocks held down during measurement ({', '.join(names)})",
            why, f"{len(group)} row(s): {', '.join(sorted(set(group['case'])))}",
        ))
    return found


def applications_clocks_lowered(meta: RunMeta) -> list[Finding]:
    """A GPU whose application clocks are set below the board's default (`nvidia-smi -ac`):
    under load it runs no faster than them, so every figure of it understates the part. Said
    from system.json whether or not a row saw the clock event; nothing where the default is
    unknown."""
    found = []
    for gpu in meta.gpus.devices or ():
        lowered = _applications_clocks(gpu.metadata)
        if lowered:
            found.append(Finding(
                "warning", gpu.label,
                "application clocks set below the board's default (nvidia-smi -ac); "
                "nvidia-smi -rac restores them",
                "the GPU runs no faster than its application clocks under load, so its "
                "figures understate the part",
                "; ".join(f"{which} {value:.0f} MHz, default {board:.0f} MHz"
                          for which, value, board in lowered),
            ))
    return found


_HEALTH_WORDS: dict[str, tuple[str, str, str]] = {
    # count: (severity, what one is, what several are). Corrected ECC errors alone are
    # info: occasional corrected single-bit errors are normal on HBM.
    "ecc_uncorrected_volatile": ("error", "new uncorrected ECC error", "new uncorrected ECC "
                                                                       "errors"),
    "ecc_uncorrected_aggregate": ("error", "new uncorrected ECC error", "new uncorrected ECC "
                                                                        "errors"),
    "ecc_corrected_volatile": ("info", "new corrected ECC error", "new corrected ECC errors"),
    "ecc_corrected_aggregate": ("info", "new corrected ECC error", "new corrected ECC "
                                                                   "errors"),
    "remapped_rows_uncorrected": ("error", "row newly remapped for uncorrected errors",
                                  "rows newly remapped for uncorrected errors"),
    "remapped_rows_corrected": ("warning", "row newly remapped for corrected errors",
                                "rows newly remapped for corrected errors"),
    "retired_pages_double_bit": ("error", "page newly retired for double-bit errors",
                                 "pages newly retired for double-bit errors"),
    "retired_pages_single_bit": ("warning", "page newly retired for single-bit errors",
                                 "pages newly retired for single-bit errors"),
}

_STATE_WORDS: tuple[tuple[str, str, str], ...] = (
    # state: (severity, what it says)
    ("remap_failure", "error", "row remapping failed (the GPU needs service)"),
    ("remap_pending", "warning", "a row remap pending (applied at the next GPU reset)"),
    ("retired_pages_pending", "warning", "a page retirement pending (applied at the next GPU "
                                         "reset)"),
)

_XID_WORDS: dict[str, tuple[str, str]] = {
    # Xid kind (bwprof.schema.meta.xid_kind): (severity, what they are)
    "hardware": ("error", "critical Xid event(s)"),
    "unknown": ("warning", "Xid event(s) NVIDIA's catalogue does not place"),
    "application": ("info", "application Xid event(s): a process on the GPU faulted"),
}

_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def _health_counts(changes: dict[str, int]) -> list[tuple[str, str]]:
    """(severity, 'N words') for each kind of error that rose (`changes` holds an aggregate
    ECC count only where the volatile one was not read)."""
    said = []
    for name, (severity, one, several) in _HEALTH_WORDS.items():
        if name in changes:
            said.append((severity, f"{changes[name]} {one if changes[name] == 1 else several}"))
    return said


def _health_xids(xids: Iterable[int]) -> list[tuple[str, str]]:
    """(severity, 'N words (Xid a, Xid b)') for each kind of Xid raised: hardware ones are
    errors, an application's own fault (13, 31, 43, 45) is information, others warnings."""
    by_kind: dict[str, list[int]] = {}
    for xid in xids:
        by_kind.setdefault(xid_kind(xid), []).append(xid)
    said = []
    for kind, (severity, words) in _XID_WORDS.items():
        if kind in by_kind:
            listed = ", ".join(f"Xid {xid}" for xid in sorted(set(by_kind[kind])))
            said.append((severity, f"{len(by_kind[kind])} {words} ({listed})"))
    return said


def gpu_health(meta: RunMeta) -> list[Finding]:
    """A GPU that got worse during the run (new ECC errors, rows remapped or pages retired,
    an Xid), or that ends it with a row remap or page retirement pending or failed (during
    the run, or since before it): the finding names the GPU and the count, and how many rows
    are flagged `gpu_degraded`. Corrected ECC errors alone and an application's Xids are
    information: they flag no row."""
    found = []
    for health in (meta.telemetry.health or ()) if meta.telemetry is not None else ():
        changes = health.changes()
        during = _health_counts(changes) + _health_xids(health.xid_events or ())
        since: list[tuple[str, str]] = []
        at_end: list[tuple[str, str]] = []
        after, before = health.after, health.before
        for name, severity, text in _STATE_WORDS:
            if after is None or not getattr(after, name):
                continue
            earlier = None if before is None else getattr(before, name)
            (during if name in changes else since if earlier else at_end).append(
                (severity, text))
        said = during + since + at_end
        if not said:
            continue
        severity = max((s for s, _ in said), key=_SEVERITY_RANK.__getitem__)
        parts = [", ".join(text for _, text in group) + when
                 for group, when in ((during, " during the run"),
                                     (since, " since before the run"),
                                     (at_end, " at the end of the run")) if group]
        rows = (f"; {health.flagged_rows} row(s) measured meanwhile flagged gpu_degraded"
                if health.flagged_rows else "")
        why = ("a GPU raising memory errors, repairing its memory or failing is not the part: "
               "its figures may be a failing GPU's (check nvidia-smi -q -d ECC,ROW_REMAPPER "
               "and the kernel log for Xids)")
        if severity == "info":
            why = ("occasional corrected ECC errors are normal on HBM, and an application's "
                   "Xid is that process's fault, not the GPU's: the figures stand (no row "
                   "flagged); a rising count is worth watching (nvidia-smi -q -d ECC)")
        found.append(Finding(severity, health.device,
                             f"{health.device}: " + "; ".join(parts), why,
                             _health_evidence(health) + rows))
    return found


def _health_evidence(health: GpuHealth) -> str:
    """The counts before and after the run that rose, or those in force at its end."""
    before, after = health.before, health.after
    parts = []
    for name, change in health.changes().items():
        if name in HEALTH_COUNTS and before is not None and after is not None:
            parts.append(f"{name} {getattr(before, name)} -> {getattr(after, name)}"
                         f" (+{change})")
    if after is not None:
        parts += [f"{name} true" for name in ("remap_pending", "remap_failure",
                                              "retired_pages_pending") if getattr(after, name)]
    return ", ".join(parts) or "counts recorded in system.json (telemetry.health)"


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


def _below_siblings(group: pd.DataFrame, column: str = FIGURE,
                    by: str = "device") -> Iterator[tuple[pd.Series, float, int]]:
    """Each row worse than SIBLING_SHARE of the median of the other devices' rows in its
    group (of one metric), on `column`, with that median and how many devices (or values of
    `by`) it spans: under 80% of it where higher is better, above 1/0.8 of it where lower is.
    The device itself stays out of the median: with two siblings it would be their mean,
    and one would pass at 67% of the other."""
    for _, row in group.iterrows():
        others = group[group[by] != row[by]]
        if others.empty or pd.isna(row[column]) or others[column].isna().all():
            continue
        median = statistics.median(others[column].dropna())
        if _worse(row, row[column], median):
            yield row, median, others[by].nunique()


def _worse(row: pd.Series, value: float, reference: float) -> bool:
    """Whether `value` is worse than SIBLING_SHARE of `reference` in the row's direction:
    under 80% of it where higher is better, above 1/0.8 of it where lower is (latency)."""
    if lower_is_better_row(row):
        return bool(value > reference / SIBLING_SHARE)
    return bool(value < SIBLING_SHARE * reference)


def _comparable(rows: pd.DataFrame) -> pd.DataFrame:
    """Validated rows with a median figure, bandwidth rows of at least SIBLING_MIN_BYTES (a
    latency row's size is its working set, or a 4-byte copy timed for its latency: any
    size)."""
    return rows[rows[FIGURE].notna() & (rows["status"] == "ok")
                & (~(rows["size_bytes"] < SIBLING_MIN_BYTES) | ~_bandwidth(rows))]


SAME_MEASUREMENT = ["case", "metric", "size_bytes", "direction", "phase", "memory", "streams",
                    "threads", "device_name"]
"""Everything that makes two rows the same measurement, device aside."""


def slower_than_siblings(rows: pd.DataFrame) -> list[Finding]:
    """A GPU whose median figure is under 80% of the median of its identical siblings doing
    the same case. Only validated rows of at least SIBLING_MIN_BYTES count: small copies are
    bound by launch latency and noisy, no sign of a sick GPU. Medians, not the best sample:
    one lucky sample must not hide a GPU that is usually slow."""
    single = _comparable(rows[rows["device"].str.fullmatch(GPU_LABEL)])
    keys = SAME_MEASUREMENT
    return [Finding(
        "warning", row["device"], f"slower than its identical siblings on {key[0]}",
        "one GPU (or its slot, link or NUMA placement) under-delivers",
        f"{row[FIGURE]:.1f} {row['unit']} vs a median of {median:.1f} {row['unit']} "
        f"over {others} other {key[-1]} GPUs at {row['size_bytes']} B"
        + (f" ({row['phase']})" if row["phase"] else ""),
    ) for key, group in single.groupby(keys, dropna=False)
        for row, median, others in _below_siblings(group)]


GPU_LABEL = r"gpu\d+"
PAIR_LABEL = re.compile(r"(gpu\d+)(->|<->)(gpu\d+)")
"""A GPU pair's device: `gpu0->gpu1` (the first GPU's engine or thread copies to, or reads
from, the second's memory) or `gpu0<->gpu1` (both ways at once, the sum)."""


def _pair(device: object) -> tuple[str, str, str] | None:
    match = PAIR_LABEL.fullmatch(str(device))
    return None if match is None else (match[1], match[2], match[3])


def _pair_route(device: object, meta: RunMeta) -> str:
    """Whether a pair's GPUs sit on one NUMA node ('local'), on two ('across'), or where
    system.json does not say ('?'): a pair crossing the sockets' link is slower by design,
    so it is held only against pairs that cross too."""
    pair = _pair(device)
    if pair is None:
        return "?"
    nodes = [gpu.numa_node if (gpu := meta.gpus.device(label)) is not None else None
             for label in (pair[0], pair[2])]
    if None in nodes:
        return "?"
    return "local" if nodes[0] == nodes[1] else "across"


def _slow_pair_rows(rows: pd.DataFrame, meta: RunMeta) -> list[tuple[pd.Series, float, int]]:
    """The pair rows `slower_pairs` names, each with the other pairs' median and count."""
    pairs = _comparable(rows[rows["device"].map(_pair).notna()])
    if pairs.empty:
        return []
    pairs = pairs.assign(_route=pairs["device"].map(lambda d: _pair_route(d, meta)),
                         _peak=pairs["peak_value"].round(3))
    keys = [*SAME_MEASUREMENT, "_peak", "_route"]
    return [slow for _, group in pairs.groupby(keys, dropna=False)
            for slow in _below_siblings(group)]


def slower_pairs(rows: pd.DataFrame, meta: RunMeta) -> list[Finding]:
    """A GPU pair (`p2p_copy`, `p2p_bidir`, `lat_p2p` rows) whose median figure is under 80%
    of the median of the other pairs doing the same measurement (case, size, direction,
    streams, the same device models), worse latency where lower is better. Pairs are held
    only against pairs of the same theoretical peak (as many NVLinks joining them, or the
    same PCIe link) and the same route (both GPUs on one NUMA node, or across two)."""
    return [Finding(
        "warning", str(row["device"]), f"GPU pair slower than the other pairs on {row['case']}",
        "one GPU-to-GPU path (an NVLink, an NVSwitch port, or the PCIe switch or host "
        "bridge between the two) under-delivers",
        f"{row[FIGURE]:.1f} {row['unit']} vs a median of {median:.1f} {row['unit']} "
        f"over {others} other pair(s) of {row['device_name']} at {row['size_bytes']} B",
    ) for row, median, others in _slow_pair_rows(rows, meta)]


OPPOSITE_DIRECTIONS = {"h2d": "d2h", "d2h": "h2d"}


def _link(row: pd.Series) -> tuple[str, str] | None:
    """The link a row's copy runs on and which way: ('gpu0', 'h2d') for a host copy,
    ('gpu0|gpu1', 'gpu1->gpu0') for one direction of a pair; None for anything else (a
    sum of both directions, a copy within one memory)."""
    pair = _pair(row["device"])
    if pair is not None:
        if pair[1] != "->":
            return None
        return "|".join(sorted((pair[0], pair[2]))), str(row["device"])
    if row["direction"] in OPPOSITE_DIRECTIONS and re.fullmatch(GPU_LABEL, str(row["device"])):
        return str(row["device"]), str(row["direction"])
    return None


def slow_directions(rows: pd.DataFrame,
                    named: Iterable[tuple[str, str]] = ()) -> list[Finding]:
    """One direction of a link under 80% of its opposite (worse latency where lower is
    better): `bidir_pinned`'s h2d against its d2h on one GPU, `p2p_bidir`'s (or `p2p_copy`'s,
    `lat_p2p`'s) gpu1->gpu0 against gpu0->gpu1. Like with like: the same case, size, memory,
    streams and device models; a healthy link carries both ways alike. Rows of a phase
    (overlap parts, loaded latency) are left to their own cases' lines. A (device, case)
    in `named` is left out: a pair already named slower than the other pairs (on a two-GPU
    box the other pair is its opposite direction) is not named twice."""
    skip = set(named)
    candidates = _comparable(rows[rows["phase"].fillna("") == ""])
    if candidates.empty:
        return []
    links = pd.Series([_link(row) for _, row in candidates.iterrows()], index=candidates.index,
                      dtype=object)
    candidates = candidates[links.notna()]
    if candidates.empty:
        return []
    links = links[links.notna()]
    candidates = candidates.assign(_link=[link[0] for link in links],
                                   _way=[link[1] for link in links])
    keys = ["case", "metric", "size_bytes", "memory", "streams", "threads", "_link"]
    found = []
    for _, group in candidates.groupby(keys, dropna=False):
        if group["_way"].nunique() != 2:
            continue
        if group["device_name"].map(_models).nunique() != 1:
            continue  # a pair of two GPU models: its two ways need not match
        for _, row in group.iterrows():
            opposite = group[group["_way"] != row["_way"]]
            reference = statistics.median(opposite[FIGURE])
            if (not _worse(row, row[FIGURE], reference)
                    or (str(row["device"]), str(row["case"])) in skip):
                continue
            way, other = str(row["_way"]), str(opposite["_way"].iloc[0])
            device = str(row["device"])
            found.append(Finding(
                "warning", device, f"{way} slower than the opposite direction on {row['case']}",
                "a link carries both ways alike when healthy: one direction (its lanes, a "
                "retimer, the host bridge or memory on that side) under-delivers",
                f"{row[FIGURE]:.1f} {row['unit']} vs {reference:.1f} {row['unit']} "
                f"{other} (medians) at {row['size_bytes']} B",
            ))
    return found


def _models(name: object) -> frozenset[str]:
    """The device models of a row ('NVIDIA H200 -> NVIDIA H200' for a pair: one model)."""
    return frozenset(part.strip() for part in str(name).split("->"))


def slower_gpu_numa_nodes(rows: pd.DataFrame) -> list[Finding]:
    """The GPUs of one NUMA node slower on host copies (rows with their host memory's
    `numa_node`: pinned and pageable copies each way, `h2d_all`'s and `d2h_all`'s per-GPU
    rows) than the GPUs of the other nodes: the median of the node's GPUs under 80% of the
    median of the other nodes' GPUs, on the same measurement. A node's memory, or its
    socket's PCIe root, under-delivers to every GPU placed there."""
    copies = _comparable(rows[rows["device"].str.fullmatch(GPU_LABEL)
                              & rows["direction"].isin(OPPOSITE_DIRECTIONS)
                              & _bandwidth(rows) & rows["numa_node"].notna()
                              & (rows["phase"].fillna("") == "")])
    slow: dict[int, list[str]] = {}
    evidence: dict[int, str] = {}
    for _, group in copies.groupby(SAME_MEASUREMENT, dropna=False, sort=False):
        if group["numa_node"].nunique() < 2:
            continue
        for node, mine in group.groupby("numa_node"):
            others = group[group["numa_node"] != node]
            value = statistics.median(mine[FIGURE])
            reference = statistics.median(others[FIGURE])
            first = mine.iloc[0]
            if not _worse(first, value, reference):
                continue
            number = int(str(node))
            if str(first["case"]) not in slow.setdefault(number, []):
                slow[number].append(str(first["case"]))
            unit = first["unit"]
            evidence.setdefault(number, (
                f"{first['case']}: {value:.1f} {unit} on {', '.join(mine['device'])} vs a "
                f"median of {reference:.1f} {unit} over {others['device'].nunique()} GPU(s) "
                f"on {others['numa_node'].nunique()} other node(s) at {first['size_bytes']} B"))
    return [Finding(
        "warning", f"numa{node}",
        f"host copies of the GPUs on NUMA node {node} slower than on the other nodes on "
        f"{', '.join(cases)}",
        "that node's memory or its socket's PCIe root under-delivers to every GPU placed "
        "there (or its one GPU does)",
        evidence[node],
    ) for node, cases in slow.items()]


def slower_numa_nodes(rows: pd.DataFrame) -> list[Finding]:
    """A host NUMA node whose DDR figure alone is under 80% of the median of its host's other
    nodes (a missing or slower DIMM, or memory channels left empty on one socket)."""
    # A NUMA pair (lat_host_numa: one node's CPUs reading another's memory) is a sibling
    # only where it is local: a remote pair is slower by design, not by a fault.
    nodes = rows[(rows["backend"] == "host") & (rows["status"] == "ok")
                 & rows[FIGURE].notna()
                 & (rows["device"].map(is_numa_device).astype(bool)
                    | rows["device"].map(_local_pair).astype(bool))]
    slow: dict[str, list[str]] = {}
    evidence: dict[str, str] = {}
    # Same thread count too: a cpuset may leave one node fewer CPUs, which is no DIMM fault.
    for (case, _metric, _size, _threads, _phase, _host), group in nodes.groupby(
            ["case", "metric", "size_bytes", "threads", "phase", nodes["device"].map(node_of)],
            sort=False, dropna=False):
        # The median, as the summary shows a node's DDR: one lucky sample must not hide it.
        for row, median, others in _below_siblings(group):
            slow.setdefault(row["device"], []).append(str(case))
            unit = row["unit"]
            evidence.setdefault(row["device"], f"{case}: {row[FIGURE]:.1f} {unit} vs a "
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
    """A figure (the median, as every output shows it) above its theoretical peak (where
    higher is better): never a cache-resident row, which is not held against the memory's
    peak. The best sample is shown beside it, labelled."""
    cached = cache_resident(rows)
    over = rows[rows["peak_value"].notna() & rows["higher_is_better"].eq(True).fillna(False)
                & (rows[FIGURE] > FINDING_ABOVE_PEAK * rows["peak_value"]) & ~cached]
    return [Finding(
        "error", str(row["device"]), f"{row['case']} above its theoretical peak",
        "no path beats its peak: the figure is a measurement error" + _peak_doubt(row),
        f"{row[FIGURE]:.1f} {row['unit']} ({STATISTIC}{_best_beside(row)}) > peak "
        f"{row['peak_value']:.1f} {row['unit']} "
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
        *clock_events(measured, meta),
        *applications_clocks_lowered(meta),
        *gpu_health(meta),
        *slower_than_siblings(measured),
        *slower_pairs(measured, meta),
        *slow_directions(measured, named=[(str(row["device"]), str(row["case"]))
                                          for row, _, _ in _slow_pair_rows(measured, meta)]),
        *slower_gpu_numa_nodes(measured),
        *above_peak(pd.concat([measured, rows[(rows["backend"] == "host")
                                              & (rows["status"] == "ok")]])),
        *counters_disagree(measured),
    ]
