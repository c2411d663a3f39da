"""A fleet's `nodes`: a node that is the same JSON as one before it (to its kinds and key
order) shares that node's record instead of being checked and built again (issue 36); every
other node, and every refusal, reads as the checker before it (tests/schema/reference_meta.py)."""

from __future__ import annotations

import copy
from typing import Any

from bwprof.schema.meta import RunMeta
from tests.schema import reference_meta
from tests.schema.test_meta_outcomes import _fingerprint, _outcome, _sweep, full


def _fleet(nodes: int = 3) -> dict[str, Any]:
    """`full()` with `nodes` nodes, each the same JSON as its first."""
    data = full()
    first = data["nodes"]["n1"]
    data["nodes"] = {f"n{i + 1}": copy.deepcopy(first) for i in range(nodes)}
    return data


def _theirs(data: object) -> object:
    return _outcome(lambda given: reference_meta.from_dict(RunMeta, given), data)


def test_identical_nodes_share_one_record_and_read_as_before():
    data = _fleet(4)
    meta = RunMeta.from_dict(data)
    assert meta.nodes is not None
    assert len({id(node) for node in meta.nodes.values()}) == 1
    assert list(meta.nodes) == ["n1", "n2", "n3", "n4"]
    assert _outcome(RunMeta.from_dict, data) == _theirs(data)
    assert meta.as_dict() == reference_meta.from_dict(RunMeta, data).as_dict()


def test_nodes_equal_in_python_but_not_in_kind_are_read_each_as_it_is():
    """1, 1.0 and true are equal in Python, not in JSON: a node differing from another only
    so is its own record, with its own kinds (as_dict writes 1.0 where the file said 1.0)."""
    for value in (4814, 4814.0, True, 4814.5):
        data = _fleet(2)
        data["nodes"]["n2"]["gpus"]["devices"][0]["peak_hbm_gbps"] = value
        assert _outcome(RunMeta.from_dict, data) == _theirs(data), value
    data = _fleet(2)
    data["nodes"]["n1"]["gpus"]["count"] = 1
    data["nodes"]["n2"]["gpus"]["count"] = True  # equal to 1 in Python; refused as ever
    ours = _outcome(RunMeta.from_dict, data)
    assert ours == _theirs(data)
    assert ours[0] == "refused" and "nodes.n2.gpus.count" in str(ours[1])


def test_nodes_in_another_key_order_read_as_they_are_written():
    data = _fleet(2)
    host = data["nodes"]["n2"]["host"]
    data["nodes"]["n2"]["host"] = dict(reversed(list(host.items())))
    meta = RunMeta.from_dict(data)
    assert meta.nodes is not None
    assert _fingerprint(meta) == _fingerprint(reference_meta.from_dict(RunMeta, data))


def test_every_damage_of_a_node_after_identical_ones_is_read_or_refused_as_before():
    """The sweep of test_meta_outcomes on the last of three nodes, the first two the same
    JSON: a damaged copy of a node seen before is checked in full, never taken for it."""
    data = _fleet(3)
    last = data["nodes"]["n3"]
    differ, cases = [], 0
    for case, damaged in _sweep(last):  # "(top level)": the whole node replaced
        cases += 1
        whole = {**data, "nodes": {**data["nodes"], "n3": damaged}}
        ours = _outcome(RunMeta.from_dict, whole)
        theirs = _theirs(whole)
        if ours != theirs:
            differ.append(f"{case}: {ours!r}, where it was {theirs!r}")
    assert cases > 1000
    assert not differ, f"{len(differ)} of {cases} differ:\n" + "\n".join(differ[:20])


def test_a_node_marshal_cannot_spell_is_read_on_its_own():
    """A mapping that is not a dict (a caller's own) is converted, not shared."""
    data = _fleet(2)

    class Node(dict[str, Any]):
        pass

    data["nodes"]["n2"] = Node(data["nodes"]["n2"])
    meta = RunMeta.from_dict(data)
    assert meta.nodes is not None
    assert meta.nodes["n1"] is not meta.nodes["n2"]
    assert meta.nodes["n1"] == meta.nodes["n2"]


def test_one_object_under_several_keys_is_one_record_and_refused_as_before():
    """A reader that parsed equal text once hands the same object for each node."""
    data = _fleet(1)
    node = data["nodes"]["n1"]
    data["nodes"] = {"a": node, "b": node, "c": node}
    meta = RunMeta.from_dict(data)
    assert meta.nodes is not None and meta.nodes["a"] is meta.nodes["c"]
    assert _outcome(RunMeta.from_dict, data) == _theirs(data)
    for value in (None, 1, "x", []):
        data["nodes"] = {"a": value, "b": value}
        assert _outcome(RunMeta.from_dict, data) == _theirs(data), value
