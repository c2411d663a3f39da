"""What `Record.from_dict` accepts and refuses, and every refusal's words, held to what they
were before the checker was compiled for speed (issue 36). A sweep puts each of a set of
values (null, booleans, numbers at and past the 64-bit bounds, non-finite floats, negative
counts, strings, lists of each length, objects) at every path of a file that holds every
field of the model, and drops each part in turn; each outcome must be the oracle's
(tests/schema/reference_meta.py, the checker as it was): the same MetaError text, or the
same record, value types and recorded fields included. A table of cases of each kind holds
the exact words captured from that checker, so a change to both cannot pass unseen."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, get_args, get_type_hints

import pytest

from bwprof.schema.meta import CacheLevel, HostInfo, MetaError, NodeMeta, Record, RunMeta
from tests.schema import reference_meta

HEALTH = {"ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0,
          "ecc_corrected_aggregate": 1, "ecc_uncorrected_aggregate": None,
          "remapped_rows_corrected": 0, "remapped_rows_uncorrected": 0,
          "remap_pending": False, "remap_failure": None, "retired_pages_single_bit": 0,
          "retired_pages_double_bit": 0, "retired_pages_pending": False}

HOST = {
    "hostname": "n1", "cpu_model": "Xeon", "logical_cpus": 16, "usable_cpus": 16,
    "physical_cores": 8, "sockets": None,
    "caches": [{"level": 3, "type": "Unified", "size_bytes": 1 << 20, "instances": 1}],
    "llc_bytes_total": 1 << 20, "memory_total_bytes": 1 << 34, "memory_available_bytes": None,
    "numa_nodes": [{"node": 0, "cpus": "0-15", "memory_total_bytes": None}],
    "memory_modules": [{"locator": "DIMM0", "size_bytes": 1 << 34}],
    "ddr_peak_gbps": 51.2, "ddr_peak_note": "", "os": "Linux", "kernel": "6.18",
    "python": "3.12.3", "packages": {"numpy": "2.5.2", "cupy": None},
    "transparent_hugepages": "madvise", "cpuset_cpus": 16, "numpy_asks_hugepages": True,
    "cache_source": "sysfs", "sandbox": None, "memory_policy": "default",
    "memory_policy_source": "numa_maps", "mems_allowed": "0", "cpus_allowed": "0-15",
    "cpuset_mems": None,
    "identity": {"box": "3f2a9c1b7d4e", "box_source": "machine_id", "dmi_uuid": None,
                 "dmi_serial": None, "machine_id": "ab12", "gpu_uuids": ["GPU-1"],
                 "cpu_model": "Xeon"},
}

GPUS = {
    "count": 1, "reason": None, "detail": None, "cuda_device_max_connections": 8,
    "devices": [{
        "index": 0,
        "properties": {"index": 0, "name": "NVIDIA H200", "pci_bus_id": "0000:1b:00.0",
                       "total_memory_bytes": 141 << 30, "l2_bytes": 60 << 20,
                       "multiprocessors": 132, "compute_capability": [9, 0],
                       "async_engines": 3, "memory_bus_width_bits": 6016,
                       "memory_clock_khz": None},
        "metadata": {"driver_version": "580.1", "power_limit_w": 700.0},
        "numa_node": 0, "cpus": "0-15", "peak_hbm_gbps": 4800.0, "peak_pcie_gbps": 63,
        "peak_nvlink_gbps": None,
    }],
    "used": [0], "simulated": False,
}

TELEMETRY = {
    "enabled": True, "interval_ms": 50.0, "reason": None,
    "idle_check": [{"device": "gpu0", "gpu_util_pct": 0, "other_processes": [12],
                    "busy": True}],
    "devices": ["gpu0"], "gpm": None, "counter_window_s": 0.9,
    "counter_window_min_bytes": 1 << 26, "samples": 493, "errors": ["lost"],
    "error_count": 1,
    "health": [{"device": "gpu0", "before": HEALTH, "after": None, "xid_events": [79],
                "flagged_rows": 2}],
}


def full() -> dict[str, Any]:
    """A fleet run's system.json holding every field of the model once (the host, GPUs and
    telemetry in full only in its node, where paths are deepest), and a key no version
    knows."""
    return json.loads(json.dumps({
        "schema_version": 2, "bwprof_version": "0.1.0", "bwprof_commit": None,
        "run_id": "n1-1", "command_line": ["bwprof", "run"],
        "started_utc": "2026-01-01T00:00:00+00:00", "finished_utc": None,
        "interrupted": True, "stopped_by": "SIGHUP",
        "plan": {"preset": "quick", "cases": ["ddr_triad"], "repeats": 5, "threads": [1, 16],
                 "host_array_bytes": [1 << 30], "transfer_sizes": [], "pipeline_chunks": [4],
                 "latency_step": 2, "pairs": "ring", "sweep_gpus": "first",
                 "counter_windows": False, "past_host_cache": True, "budget_s": 60,
                 "dropped": ["p2p"], "estimate_s": 55.5},
        "host": None, "gpus": {"count": None, "reason": "not probed"}, "simulated": False,
        "telemetry": {"enabled": False}, "mpi_rank": 0, "close_errors": ["gpu0: sticky"],
        "findings": 3, "a_newer_key": {"x": 1},
        "nodes": {"n1": {"host": HOST, "gpus": GPUS, "telemetry": TELEMETRY}},
        "mpi": {"size": 2, "timeout_s": 30, "ranks": [
            {"rank": 0, "status": "ok", "host": "n1", "local_rank": 0, "local_size": 1,
             "gpus": [0], "host_cases": True, "error": None},
            {"rank": 1, "status": "missing"}]},
    }))


VALUES: dict[str, object] = {
    "null": None, "true": True, "0": 0, "-1": -1, "2.5": 2.5, "-0.5": -0.5, "1e300": 1e300,
    "inf": math.inf, "-inf": -math.inf, "nan": math.nan, "2**63-1": (1 << 63) - 1,
    "2**63": 1 << 63, "-2**63": -(1 << 63), "-2**63-1": -(1 << 63) - 1, "str": "s",
    "[]": [], "[1]": [1], "[1, 2]": [1, 2], "[1, 2, 3]": [1, 2, 3], '["s"]': ["s"],
    "[{}]": [{}], "{}": {}, '{"k": 1}': {"k": 1}, '{"k": null}': {"k": None},
    "{long key: []}": {"k" * 60: []},
}
"""What the sweep puts at each path: each kind JSON has, and the edges the checker draws
(what goes inside a list or object is swept at the paths of the file's own lists and
objects)."""


def _paths(value: object, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key)
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*path, index)
            yield from _paths(item, (*path, index))



def _fingerprint(value: object) -> object:
    """All a read gives, comparable: each record's class, fields in __dict__ order and the
    fields the file recorded; each value with its type (1 is not 1.0, nor True)."""
    if isinstance(value, Record):
        state = vars(value)
        return (type(value).__name__, sorted(state.get("_recorded", ())),
                tuple((name, _fingerprint(item)) for name, item in state.items()
                      if name != "_recorded"))
    if isinstance(value, tuple):
        return ("tuple", tuple(_fingerprint(item) for item in value))
    if isinstance(value, Mapping):
        return (type(value).__name__,
                tuple((repr(key), _fingerprint(item)) for key, item in value.items()))
    return type(value).__name__, repr(value)


def _name(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)[1:]


Read = Callable[[object], object]


def _outcome(read: Read, data: object) -> tuple[str, object]:
    try:
        return "read", _fingerprint(read(data))
    except MetaError as exc:
        return "refused", str(exc)


def _sweep(data: dict[str, Any]) -> Iterator[tuple[str, object]]:
    """Each damage of `data` (a value of VALUES put at a path, or the part dropped), named,
    and the damaged file; `data` is whole again after each."""
    yield "(as it is)", data
    for label, value in VALUES.items():
        yield f"(top level) = {label}", copy.deepcopy(value)
    for path in list(_paths(data)):
        *parents, last = path
        parent: Any = data
        for part in parents:
            parent = parent[part]
        original = parent[last]
        for label, value in VALUES.items():
            parent[last] = copy.deepcopy(value)
            yield f"{_name(path)} = {label}", data
        parent[last] = original
        if isinstance(parent, dict):
            items = list(parent.items())
            del parent[last]
            yield f"{_name(path)} dropped", data
            parent.clear()
            parent.update(items)
        else:
            parent.pop(last)
            yield f"{_name(path)} dropped", data
            parent.insert(last, original)


def test_every_damage_is_read_or_refused_as_the_checker_before_did():
    data = full()
    differ = []
    cases = 0
    for case, damaged in _sweep(data):
        cases += 1
        ours = _outcome(RunMeta.from_dict, damaged)
        theirs = _outcome(lambda given: reference_meta.from_dict(RunMeta, given), damaged)
        if ours != theirs:
            differ.append(f"{case}: {ours!r}, where it was {theirs!r}")
    assert data == full()
    assert cases > 4000
    assert not differ, f"{len(differ)} of {cases} differ:\n" + "\n".join(differ[:20])


def _damage(path: str, value: object = None, drop: bool = False) -> dict[str, Any]:
    """`full()` with `value` at the dotted `path` (list entries by number), or without it."""
    data = full()
    *parents, last = path.split(".")
    target: Any = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    key: Any = int(last) if isinstance(target, list) else last
    if drop:
        del target[key]
    else:
        target[key] = value
    return data


WORDS = {
    "the top level not an object": (
        [1], "the top level should be an object, not list"),
    "a required field missing at the top": (
        _damage("schema_version", drop=True), "schema_version is missing"),
    "a required field missing 5 deep": (
        _damage("nodes.n1.gpus.devices.0.properties.name", drop=True),
        "nodes.n1.gpus.devices[0].properties.name is missing"),
    "a required field missing in a list": (
        _damage("mpi.ranks.1.status", drop=True), "mpi.ranks[1].status is missing"),
    "a list for a record": (_damage("gpus", [1]), "gpus should be an object, not list"),
    "a string for a record in a mapping": (
        _damage("nodes.n1.host", "s"), "nodes.n1.host should be an object, not str"),
    "an object for a list": (
        _damage("nodes.n1.host.caches", {}), "nodes.n1.host.caches should be a list, not object"),
    "a number for a record in a list": (
        _damage("nodes.n1.host.caches.0", 2.5),
        "nodes.n1.host.caches[0] should be an object, not float"),
    "a boolean in a pair of integers": (
        _damage("nodes.n1.gpus.devices.0.properties.compute_capability.1", True),
        "nodes.n1.gpus.devices[0].properties.compute_capability[1] should be an integer, "
        "not bool"),
    "a number for a boolean 5 deep": (
        _damage("nodes.n1.telemetry.health.0.before.remap_pending", 0),
        "nodes.n1.telemetry.health[0].before.remap_pending should be true or false, not int"),
    "a number in a mapping of strings": (
        _damage("nodes.n1.host.packages.numpy", 0),
        "nodes.n1.host.packages.numpy should be a string, not int"),
    "a list for an open mapping": (
        _damage("nodes.n1.gpus.devices.0.metadata", []),
        "nodes.n1.gpus.devices[0].metadata should be an object, not list"),
    "an integer of 64 bits and one": (
        _damage("schema_version", 1 << 63),
        "schema_version should be an integer of 64 bits, not one of 64 bits"),
    "an integer below the 64-bit range": (
        _damage("schema_version", -(1 << 63) - 1),
        "schema_version should be an integer of 64 bits, not one of 64 bits"),
    "a count of 65 bits": (
        _damage("nodes.n1.host.logical_cpus", 1 << 64),
        "nodes.n1.host.logical_cpus should be an integer of 64 bits, not one of 65 bits"),
    "an infinite timeout": (
        _damage("mpi.timeout_s", math.inf), "mpi.timeout_s should be a finite number, not inf"),
    "a timeout of minus infinity": (
        _damage("mpi.timeout_s", -math.inf),
        "mpi.timeout_s should be a finite number, not -inf"),
    "a timeout not a number": (
        _damage("mpi.timeout_s", math.nan), "mpi.timeout_s should be a finite number, not nan"),
    "an infinite figure or null": (
        _damage("nodes.n1.telemetry.idle_check.0.gpu_util_pct", math.inf),
        "nodes.n1.telemetry.idle_check[0].gpu_util_pct should be a finite number, not inf"),
    "a negative count": (
        _damage("nodes.n1.host.logical_cpus", -1),
        "nodes.n1.host.logical_cpus should be 0 or more, not -1"),
    "a negative timeout": (
        _damage("mpi.timeout_s", -0.5), "mpi.timeout_s should be 0 or more, not -0.5"),
    "a negative count in a list": (
        _damage("plan.threads.1", -1), "plan.threads[1] should be 0 or more, not -1"),
    "a negative count in a list or null": (
        _damage("nodes.n1.gpus.used", [3, -2]),
        "nodes.n1.gpus.used[1] should be 0 or more, not -2"),
    "a kind before a minimum, in a list": (
        _damage("plan.threads", [-1, "s"]), "plan.threads[1] should be an integer, not str"),
    "a string for an integer or null": (
        _damage("nodes.n1.host.physical_cores", "s"),
        "nodes.n1.host.physical_cores should be an integer, not str"),
    "a string for a record or null": (
        _damage("nodes.n1.telemetry.health.0.before", "s"),
        "nodes.n1.telemetry.health[0].before should be an object, not str"),
    "a damaged record of a record or null": (
        _damage("nodes.n1.telemetry.health.0.before.ecc_corrected_volatile", -3),
        "nodes.n1.telemetry.health[0].before.ecc_corrected_volatile should be 0 or more, "
        "not -3"),
    "a string in a list or null": (
        _damage("nodes.n1.telemetry.health.0.xid_events", ["s"]),
        "nodes.n1.telemetry.health[0].xid_events[0] should be an integer, not str"),
    "an object for a list or null": (
        _damage("mpi.ranks.0.gpus", [{}]), "mpi.ranks[0].gpus[0] should be an integer, not object"),
    "a node not an object": (_damage("nodes", {"k": 1}), "nodes.k should be an object, not int"),
    "a long node name, shortened": (
        _damage("nodes", {"k" * 60: []}),
        "nodes.kkkkkkkkkkkkkkkkkkkkkkkkkkkk...kkkkkk (60 characters) should be an object, "
        "not list"),
    "a pair of three": (
        _damage("nodes.n1.gpus.devices.0.properties.compute_capability", [1, 2, 3]),
        "nodes.n1.gpus.devices[0].properties.compute_capability should be a list of 2, not of 3"),
    "a list entry of the wrong kind": (
        _damage("command_line", [{}]), "command_line[0] should be a string, not object"),
}
"""Exact words of each kind of refusal, captured from the checker before issue 36."""


@pytest.mark.parametrize("kind", list(WORDS))
def test_each_kind_of_refusal_keeps_its_words(kind):
    data, message = WORDS[kind]
    with pytest.raises(MetaError) as caught:
        RunMeta.from_dict(data)
    assert str(caught.value) == message


def test_values_at_the_edges_read_as_they_did():
    """The 64-bit bounds are in; an integer stays an integer where a number belongs; null
    where null may be; a default stands in for a part left out, not recorded."""
    meta = RunMeta.from_dict(_damage("mpi.timeout_s", 7))
    assert meta.mpi is not None and type(meta.mpi.timeout_s) is int
    for edge in ((1 << 63) - 1, -(1 << 63)):
        assert RunMeta.from_dict(_damage("schema_version", edge)).schema_version == edge
    assert RunMeta.from_dict(_damage("mpi.timeout_s", 1e300)).mpi.timeout_s == 1e300
    node = RunMeta.from_dict(_damage("nodes.n1.gpus", drop=True)).nodes["n1"]
    assert node.gpus.count is None and not node.recorded("gpus") and node.recorded("host")
    assert RunMeta.from_dict(full()).nodes["n1"].host.physical_cores == 8


PARTS = {
    "a node as the merge reads it": (
        NodeMeta, {"gpus": {"devices": [{"index": -1}]}}, "nodes.n1",
        "nodes.n1.gpus.devices[0].index should be 0 or more, not -1"),
    "a cache level given where": (
        CacheLevel, 5, "host.caches", "host.caches should be an object, not int"),
    "a host without its where": (HostInfo, {}, "", "hostname is missing"),
    "a node without its where": (
        NodeMeta, {"host": {"hostname": 1}}, "", "host.hostname should be a string, not int"),
}
"""A part read on its own (`described`, the fleet merge): its path begins at `where`."""


@pytest.mark.parametrize("case", list(PARTS))
def test_a_part_read_on_its_own_names_paths_from_where(case):
    cls, data, where, message = PARTS[case]
    with pytest.raises(MetaError) as caught:
        cls.from_dict(data, where)
    assert str(caught.value) == message


@dataclass(frozen=True)
class _Odd(Record):
    """A part of a type the checker cannot check: refused only where such a value is read."""

    plain: int = 0
    odd: set[int] | None = None


@dataclass(frozen=True)
class _Derived(Record):
    """A part whose __init__ does more than set its fields: built through it."""

    count: int
    twice: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "twice", 2 * self.count)


def test_a_field_type_it_cannot_check_is_a_type_error_where_it_is_read():
    assert _Odd.from_dict({"plain": 1, "odd": None}).plain == 1
    with pytest.raises(TypeError, match="cannot check a field of type set"):
        _Odd.from_dict({"odd": [1]})


def test_a_part_with_a_post_init_is_built_through_it():
    part = _Derived.from_dict({"count": 2})
    assert part.twice == 4 and part.recorded("count") and not part.recorded("twice")
    assert part == reference_meta.from_dict(_Derived, {"count": 2})


def _fields_of(cls: type, seen: set[type]) -> Iterator[tuple[type, str]]:
    if cls in seen:
        return
    seen.add(cls)
    for name, hint in get_type_hints(cls).items():
        if name in {spec.name for spec in fields(cls)}:
            yield cls, name
            for arg in _leaves(hint):
                if isinstance(arg, type) and is_dataclass(arg) and issubclass(arg, Record):
                    yield from _fields_of(arg, seen)


def _leaves(hint: Any) -> Iterator[Any]:
    yield hint
    for arg in get_args(hint):
        yield from _leaves(arg)


def test_the_sweep_holds_every_field_of_the_model():
    """Each field of each part appears in the swept file, so each is damaged in turn."""
    meta = RunMeta.from_dict(full())
    held: set[tuple[type, str]] = set()

    def walk(value: object) -> None:
        if isinstance(value, Record):
            held.update((type(value), spec.name) for spec in fields(value)
                        if value.recorded(spec.name))
            for spec in fields(value):
                walk(getattr(value, spec.name))
        elif isinstance(value, tuple):
            for item in value:
                walk(item)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)

    walk(meta)
    assert set(_fields_of(RunMeta, set())) - held == set()
