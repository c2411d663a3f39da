"""Which rank pairs net_p2p measures: pure Python, any fleet size."""

from __future__ import annotations

from collections import Counter

import pytest

from bwprof.errors import BwprofError
from bwprof.fleet.pairs import (
    ACROSS,
    ALL,
    RING,
    SAMPLES_PER_RANK,
    WITHIN,
    groups_of,
    read_groups,
    ring,
    ring_order,
    select_pairs,
    slurm_switch,
    topology_groups,
)


def _nodes(count: int) -> list[str]:
    return [f"node{r:04d}" for r in range(count)]


@pytest.mark.parametrize("size", [2, 3, 8, 1000])
def test_the_default_is_o_of_n_and_every_rank_sends_and_receives(size):
    chosen = select_pairs(_nodes(size), "host-20261202T073000Z-mpi8")
    pairs = chosen.pairs
    assert len(pairs) <= (2 + SAMPLES_PER_RANK) * size  # O(N), never N(N-1)
    assert len(pairs) == len(set(pairs))  # no pair twice
    assert all(sender != receiver for sender, receiver in pairs)
    assert all(0 <= r < size for pair in pairs for r in pair)
    assert {s for s, _ in pairs} == {r for _, r in pairs} == set(range(size))
    ring_pairs = [p for p, why in zip(pairs, chosen.reasons, strict=True) if why == RING]
    assert {(r, (r + 1) % size) for r in range(size)} <= set(ring_pairs)  # r -> r+1 ...
    assert {((r + 1) % size, r) for r in range(size)} <= set(ring_pairs)  # ... and back
    if size >= 8:  # room for the samples beside the ring: each rank sends on 2 more
        assert len(pairs) == (2 + SAMPLES_PER_RANK) * size
        sent = Counter(s for s, _ in pairs)
        assert set(sent.values()) == {2 + SAMPLES_PER_RANK}
    if size <= 3:  # the ring is every pair already
        assert len(pairs) == size * (size - 1)


def test_eight_ranks_measure_32_pairs_and_say_so():
    chosen = select_pairs(_nodes(8), "seed-a")
    assert len(chosen.pairs) == 32
    assert chosen.note == ("ring (each rank to its neighbour and back: 16 pairs) + 16 sampled "
                           "pairs (up to 2 per rank; seed seed-a): 32 of the 56 ordered pairs; "
                           "--all-pairs measures all 56")


def test_the_same_seed_gives_the_same_pairs_and_another_seed_others():
    one, again = select_pairs(_nodes(100), "run-1"), select_pairs(_nodes(100), "run-1")
    assert one == again
    assert select_pairs(_nodes(100), "run-2").pairs != one.pairs
    ring_part = [p for p, why in zip(one.pairs, one.reasons, strict=True) if why == RING]
    other = select_pairs(_nodes(100), "run-2")
    assert ring_part == [p for p, w in zip(other.pairs, other.reasons, strict=True)
                         if w == RING]


@pytest.mark.parametrize("size", [2, 3, 8])
def test_all_pairs_is_every_ordered_pair(size):
    chosen = select_pairs(_nodes(size), "x", all_pairs=True)
    assert len(chosen.pairs) == len(set(chosen.pairs)) == size * (size - 1)
    assert set(chosen.reasons) == {ALL}
    assert "every ordered pair" in chosen.note


def test_one_rank_has_no_pair():
    assert select_pairs(["vm"], "x").pairs == ()
    assert ring(["vm"]) == []


def test_ranks_of_one_node_are_a_plain_ring():
    assert ring_order(["vm"] * 4) == [0, 1, 2, 3]
    assert ring(["vm"] * 4)[:4] == [(0, 1), (1, 0), (1, 2), (2, 1)]


def test_with_several_ranks_per_node_every_ring_neighbour_is_on_another_node():
    hosts = [f"node{r // 4}" for r in range(16)]  # 4 nodes of 4 ranks, in block order
    assert ring_order(hosts)[:5] == [0, 4, 8, 12, 1]
    chosen = select_pairs(hosts, "s")
    assert all(hosts[s] != hosts[r] for s, r in chosen.pairs)  # the network, every time


def test_groups_give_pairs_across_and_within_groups():
    hosts = _nodes(16)
    groups = {host: f"rack{r // 4}" for r, host in enumerate(hosts)}  # 4 racks of 4 nodes
    chosen = select_pairs(hosts, "s", groups=groups)
    why = dict(zip(chosen.pairs, chosen.reasons, strict=True))
    across = [p for p, w in why.items() if w == ACROSS]
    within = [p for p, w in why.items() if w == WITHIN]
    assert len(across) == len(within) == 16  # one of each per rank
    assert all(groups[hosts[s]] != groups[hosts[r]] for s, r in across)
    assert all(groups[hosts[s]] == groups[hosts[r]] for s, r in within)
    assert "across and within 4 groups (--groups)" in chosen.note
    without = select_pairs(hosts, "s")  # without groups the samples fall where they may
    assert ACROSS not in without.reasons and WITHIN not in without.reasons


def test_a_groups_file(tmp_path):
    path = tmp_path / "racks.txt"
    path.write_text("# host group\nnode1 rack-a\n\nnode2.cluster   rack-b  # a comment\n")
    groups = read_groups(path)
    assert groups == {"node1": "rack-a", "node2.cluster": "rack-b"}
    found, missing = groups_of(["node1.cluster", "node2", "node3", "node2"], groups)
    assert found == {"node1.cluster": "rack-a", "node2": "rack-b"} and missing == ["node3"]


@pytest.mark.parametrize("text, message", [
    ("node1\n", "line 1: expected 'host group', got 'node1'"),
    ("node1 a b\n", "line 1: expected 'host group'"),
    ("node1 a\nnode1 b\n", "line 2: node1 is in group a already, not b"),
    ("# nothing\n\n", "no 'host group' line"),
])
def test_a_bad_groups_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "racks.txt"
    path.write_text(text)
    with pytest.raises(BwprofError, match=message):
        read_groups(path)
    with pytest.raises(BwprofError, match="cannot read it"):
        read_groups(tmp_path / "absent.txt")


@pytest.mark.parametrize(("address", "pattern", "switch"), [
    ("s0.s3.node12", "switch.switch.node", "s0.s3"),
    ("s1.node7", "switch.node", "s1"),
    ("node7", "node", None),  # topology/flat: no switch
    ("", "", None),  # not under Slurm
    ("s0.node7", "switch.switch.node", None),  # address and pattern disagree
])
def test_slurms_topology_address_gives_the_leaf_switch(address, pattern, switch):
    env = {"SLURM_TOPOLOGY_ADDR": address, "SLURM_TOPOLOGY_ADDR_PATTERN": pattern}
    assert slurm_switch(env) == switch


def test_switches_group_the_hosts_only_when_every_rank_has_one():
    hosts = ["n1", "n1", "n2", "n3"]
    assert topology_groups(hosts, ["a", "a", "a", "b"]) == {"n1": "a", "n2": "a", "n3": "b"}
    assert topology_groups(hosts, ["a", "a", None, "b"]) == {}
