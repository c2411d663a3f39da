"""A fleet's `nodes`, each its own machine (host name, free memory, GPU UUIDs differ), read
by the record functions `meta` writes out field by field (issue 36): what they take without
calling a field's converter is only what that converter returns as it is, and every node,
and every refusal, reads as the checker before them (tests/schema/reference_meta.py)."""

from __future__ import annotations

import copy
import math
from dataclasses import fields
from typing import Any, get_type_hints

import pytest

from bwprof.schema import meta
from bwprof.schema.meta import Record, RunMeta
from tests.schema import reference_meta
from tests.schema.test_meta_outcomes import VALUES, _outcome, full


def _fleet(nodes: int = 3) -> dict[str, Any]:
    """`full()` with `nodes` nodes, each differing from the others in a few leaves."""
    data = full()
    first = data["nodes"]["n1"]
    data["nodes"] = {}
    for index in range(nodes):
        node = copy.deepcopy(first)
        node["host"]["hostname"] = f"node{index}"
        node["host"]["memory_available_bytes"] = 1_000_000 + index
        node["gpus"]["devices"][0]["metadata"]["uuid"] = f"GPU-{index:08x}"
        data["nodes"][f"node{index}"] = node
    return data


def _theirs(data: object) -> object:
    return _outcome(lambda given: reference_meta.from_dict(RunMeta, given), data)


def test_a_fleet_of_distinct_nodes_reads_as_the_checker_before():
    data = _fleet(4)
    assert _outcome(RunMeta.from_dict, data) == _theirs(data)
    data["nodes"]["node3"]["host"]["caches"][0]["size_bytes"] = -1
    ours = _outcome(RunMeta.from_dict, data)
    assert ours == _theirs(data)
    assert ours[0] == "refused" and "nodes.node3.host.caches[0].size_bytes" in str(ours[1])


def _records() -> list[type[Record]]:
    found, todo = [], [RunMeta]
    while todo:
        cls = todo.pop()
        if cls in found:
            continue
        found.append(cls)
        hints = get_type_hints(cls)
        todo += [arg for spec in fields(cls) for arg in _classes(hints[spec.name])]
    return found


def _classes(hint: Any) -> list[type[Record]]:
    if isinstance(hint, type) and issubclass(hint, Record):
        return [hint]
    return [cls for arg in getattr(hint, "__args__", ()) for cls in _classes(arg)]


class _Int(int):
    pass


class _Str(str):
    pass


PROBES: list[object] = [
    *VALUES.values(), 1.0, -0.0, 0.0, 1, (1 << 63) - 1, -(1 << 63) + 1, 10 ** 400, -1e300,
    float.fromhex("0x1p-1074"), _Int(3), _Str("s"), False, "",
]


@pytest.mark.parametrize("cls", _records(), ids=lambda cls: cls.__name__)
def test_what_a_field_takes_without_its_converter_is_what_the_converter_returns(cls):
    """The test each written-out field puts before its converter call (`_accepted_as_is`)
    is true only of a value the converter returns as it is: never of one it refuses (True
    for an integer, an integer of 64 bits or more, a number below a count's 0, inf, nan)."""
    hints = get_type_hints(cls)
    tested = 0
    for spec in fields(cls):
        hint, minimum = hints[spec.name], spec.metadata.get("min")
        names: dict[str, object] = {"_MAX_INT": meta.MAX_INT, "_INF": math.inf,
                                    "_NEG_INF": -math.inf}
        test = meta._accepted_as_is(hint, minimum, "0", names)
        if test is None:
            continue
        convert = meta._converter(hint, minimum)
        for value in PROBES:
            if not eval(test, {**names, "v": value}):  # meta's own test text
                continue
            tested += 1
            try:
                given = convert(value)
            except meta._Refusal as refusal:
                raise AssertionError(f"{cls.__name__}.{spec.name} took {value!r} that its "
                                     f"converter refuses: {refusal.message('x')}") from None
            assert given is value, (cls.__name__, spec.name, value)
    assert tested or not any(
        meta._accepted_as_is(hints[spec.name], spec.metadata.get("min"), "0", {})
        for spec in fields(cls))


def test_a_mapping_that_is_not_a_dict_is_read_as_a_record():
    """A caller's own Mapping (not a dict) is still an object to read, as ever."""
    from types import MappingProxyType

    data = _fleet(2)
    data["nodes"]["node1"] = MappingProxyType(data["nodes"]["node1"])
    data["nodes"]["node0"]["host"] = MappingProxyType(data["nodes"]["node0"]["host"])
    ours = _outcome(RunMeta.from_dict, data)
    assert ours[0] == "read"
    assert ours == _theirs(data)
