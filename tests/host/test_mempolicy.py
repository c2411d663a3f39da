"""The memory-policy placement check, on fakes for the system calls and /proc files (and
once on this kernel, where it answers)."""

import ctypes
from pathlib import Path

import pytest

from bwprof.host import mempolicy
from bwprof.host.mempolicy import Policy, overrides, preferred_node


class FakeKernel:
    """get_mempolicy/set_mempolicy for one thread: the policy it holds and every call."""

    def __init__(self, mode: int = mempolicy.MPOL_DEFAULT, nodes: frozenset[int] = frozenset(),
                 refuse: bool = False) -> None:
        self.mode, self.nodes, self.refuse = mode, nodes, refuse
        self.calls: list[tuple[str, int, frozenset[int]]] = []

    def syscall(self, name: str, *args: object) -> int | None:
        if self.refuse:
            return -1  # EPERM under a seccomp filter, ENOSYS without NUMA
        if name == "get_mempolicy":
            mode, words = args[0], args[1]
            ctypes.cast(mode, ctypes.POINTER(ctypes.c_int))[0] = self.mode
            for node in self.nodes:
                words[node // 64] |= 1 << (node % 64)
            return 0
        if name == "set_mempolicy":
            mode, words = int(args[0].value), args[1]
            self.mode = mode
            self.nodes = mempolicy._nodes(words) if words is not None else frozenset()
            self.calls.append((name, mode, self.nodes))
            return 0
        raise AssertionError(name)


@pytest.fixture
def kernel(monkeypatch, tmp_path):
    fake = FakeKernel()
    monkeypatch.setattr(mempolicy, "_syscall", fake.syscall)
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCpus_allowed_list:\t0-63\nMems_allowed_list:\t0-1\n")
    monkeypatch.setattr(mempolicy, "PROC_STATUS", status)
    monkeypatch.setattr(mempolicy.mems_allowed, "__defaults__", (status,))
    nodes = tmp_path / "node"
    for node in (0, 1):
        (nodes / f"node{node}").mkdir(parents=True)
    monkeypatch.setattr(mempolicy, "SYS_NODE", nodes)
    return fake, status


def test_the_node_is_preferred_while_the_buffer_is_allocated_then_the_policy_restored(kernel):
    fake, _ = kernel
    with preferred_node(1) as placement:
        assert placement == mempolicy.Placement(True)
        assert (fake.mode, fake.nodes) == (mempolicy.MPOL_PREFERRED, {1})
    assert fake.calls == [("set_mempolicy", mempolicy.MPOL_PREFERRED, {1}),
                          ("set_mempolicy", mempolicy.MPOL_DEFAULT, frozenset())]


def test_an_inherited_membind_is_kept_and_named_as_overriding_the_node(kernel):
    """numactl --membind=0 on a GPU of node 1: bwprof does not undo the operator's binding;
    it says the binding overrides the node asked for."""
    fake, _ = kernel
    fake.mode, fake.nodes = mempolicy.MPOL_BIND, frozenset({0})
    with preferred_node(1) as placement:
        assert not placement.applied
        assert "memory policy bind:0" in (placement.override or "")
        assert "overrides NUMA node 1" in (placement.override or "")
    assert fake.calls == []  # nothing set, nothing to restore
    with preferred_node(0) as placement:  # the GPU's own node: nothing stands in the way
        assert placement.override is None


def test_an_interleave_or_another_preferred_node_overrides(kernel):
    fake, _ = kernel
    fake.mode, fake.nodes = mempolicy.MPOL_INTERLEAVE | (1 << 15), frozenset({0, 1})
    assert mempolicy.get_policy() == Policy("interleave", frozenset({0, 1}),
                                            mempolicy.MPOL_INTERLEAVE | (1 << 15))
    with preferred_node(1) as placement:
        assert "interleave:0-1" in (placement.override or "")
    assert overrides(1, Policy("preferred", frozenset({0})), None)
    assert overrides(1, Policy("preferred", frozenset({1})), None) is None
    assert overrides(1, Policy("bind", frozenset({0, 1})), None) is None  # within the binding
    assert overrides(1, Policy("local"), frozenset({0, 1})) is None


def test_a_cpuset_without_the_node_overrides_it(kernel):
    _, status = kernel
    status.write_text("Cpus_allowed_list:\t0-15\nMems_allowed_list:\t0\n")
    assert mempolicy.mems_allowed(status) == {0}
    assert mempolicy.cpus_allowed(status) == frozenset(range(16))
    with preferred_node(1) as placement:
        assert not placement.applied and "Mems_allowed 0" in (placement.override or "")


def test_a_kernel_that_will_not_say_changes_nothing_and_claims_nothing(kernel):
    fake, _ = kernel
    fake.refuse = True
    assert mempolicy.get_policy() is None
    with preferred_node(1) as placement:
        assert placement == mempolicy.Placement(False)
    with preferred_node(None) as placement:
        assert placement == mempolicy.Placement(False)
    fake.refuse = False
    with preferred_node(2) as placement:  # no node2 listed: nothing asked, nothing claimed
        assert placement == mempolicy.Placement(False) and fake.calls == []


def test_numa_maps_gives_the_policy_where_get_mempolicy_is_refused(tmp_path, monkeypatch):
    maps = tmp_path / "numa_maps"
    maps.write_text("7f00 bind:1 anon=4 dirty=4 N1=4\n7f10 bind:1 anon=2 N1=2\n"
                    "5556 default file=/usr/bin/python mapped=2 N0=2\n")
    assert mempolicy.numa_maps_policy(maps) == Policy("bind", frozenset({1}))
    maps.write_text("7f00 interleave:0-3 anon=4\n")
    assert mempolicy.numa_maps_policy(maps) == Policy("interleave", frozenset(range(4)))
    assert mempolicy.numa_maps_policy(tmp_path / "absent") is None
    monkeypatch.setattr(mempolicy, "get_policy", lambda: None)
    monkeypatch.setattr(mempolicy, "PROC_NUMA_MAPS", maps)
    monkeypatch.setattr(mempolicy.numa_maps_policy, "__defaults__", (maps,))
    assert mempolicy.process_policy() == (Policy("interleave", frozenset(range(4))),
                                          "numa_maps")


def test_the_binding_line_says_what_binds_the_process():
    line = mempolicy.describe_binding(Policy("bind", frozenset({0})), "get_mempolicy",
                                      frozenset({0}), frozenset({0, 1}), frozenset(range(16)), 64)
    assert line.startswith("memory policy bind:0 (get_mempolicy); memory nodes 0 allowed")
    assert "bound by policy bind:0, memory nodes 0 of 0-1, 16 of 64 CPUs" in line
    free = mempolicy.describe_binding(Policy("default"), "get_mempolicy", frozenset({0, 1}),
                                      frozenset({0, 1}), frozenset(range(64)), 64)
    assert "bound" not in free


def test_this_kernels_policy_round_trips_where_it_answers():
    """On a real kernel (this machine): asking for node 0 sets preferred, then restores."""
    before = mempolicy.get_policy()
    if before is None:
        pytest.skip("get_mempolicy refused here")
    with preferred_node(0) as placement:
        if placement.applied:
            assert mempolicy.get_policy() == Policy("preferred", frozenset({0}),
                                                    mempolicy.MPOL_PREFERRED)
    assert mempolicy.get_policy() == before


def test_host_info_records_the_policy_and_the_allowed_nodes(monkeypatch):
    from bwprof import system

    monkeypatch.setattr(mempolicy, "process_policy",
                        lambda: (Policy("bind", frozenset({0})), "get_mempolicy"))
    monkeypatch.setattr(mempolicy, "mems_allowed", lambda: frozenset({0}))
    monkeypatch.setattr(mempolicy, "cpus_allowed", lambda: frozenset(range(4)))
    info = system.host_info()
    assert (info.memory_policy, info.memory_policy_source) == ("bind:0", "get_mempolicy")
    assert (info.mems_allowed, info.cpus_allowed) == ("0", "0-3")
    assert info.as_dict()["memory_policy"] == "bind:0"


def test_cpuset_mems_of_the_process_cgroup(tmp_path: Path):
    from bwprof.system import cpuset_mems

    proc, root = tmp_path / "cgroup", tmp_path / "fs"
    (root / "job").mkdir(parents=True)
    (root / "job" / "cpuset.mems.effective").write_text("1\n")
    proc.write_text("0::/job\n")
    assert cpuset_mems(proc, root) == "1"
    proc.write_text("0::/other\n")
    assert cpuset_mems(proc, root) is None


# Catches (issue 37): a process named with bytes that are not UTF-8 (its Name: line in
# /proc/self/status) or a mapped file of such a name ends the run with a traceback
def test_proc_files_with_bytes_that_are_not_utf8_are_read(tmp_path):
    status = tmp_path / "status"
    status.write_bytes(b"Name:\tbw\xff\xfe\nCpus_allowed_list:\t0-3\nMems_allowed_list:\t0\n")
    assert mempolicy.mems_allowed(status) == {0}
    assert mempolicy.cpus_allowed(status) == frozenset(range(4))
    maps = tmp_path / "numa_maps"
    maps.write_bytes(b"7f0000000000 bind:1 file=/tmp/\xff.bin mapped=1 N1=1\n"
                     b"7f0000100000 bind:1 anon=4 dirty=4 N1=4\n")
    policy = mempolicy.numa_maps_policy(maps)
    assert policy is not None and "bind" in policy.text()
