"""Machines described in a file: the shapes load, what they say of the host reads back the
same through the code that reads this machine's /sys and /proc (each shape written out as
those trees), an earlier run's system.json is a machine too, and a file that is not one is
a one-line error. Described GPUs answer planning and refuse to measure."""

from __future__ import annotations

import json

import pytest

from bwprof import system
from bwprof.cpulist import format_cpu_list, parse_cpu_list
from bwprof.described import load_machine
from bwprof.errors import BwprofError
from bwprof.gpu.described import DescribedBackend, MeasuresNothing
from tests.shapes import SHAPES, shape

H200_RUN = "tests/data/h200-quick/system.json"


def _write_tree(root, machine):
    """The shape as Linux shows it: per-CPU cache folders (each instance of a level shared
    by an even slice of the CPUs), NUMA node folders and /proc/meminfo."""
    cpus = sorted(machine.cpus)
    for level in machine.host.caches:
        per = max(1, len(cpus) // level.instances)
        for n in range(level.instances):
            shared = cpus[n * per:(n + 1) * per]
            for cpu in shared:
                index = root / "cpu" / f"cpu{cpu}" / "cache" / f"index{level.level}{level.type[0]}"
                index.mkdir(parents=True)
                for name, value in (("level", level.level), ("type", level.type),
                                    ("size", f"{level.size_bytes // 1024}K"),
                                    ("shared_cpu_list", format_cpu_list(frozenset(shared)))):
                    (index / name).write_text(f"{value}\n")
    for node in machine.host.numa_nodes:
        folder = root / "node" / f"node{node.node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(node.cpus + "\n")
        (folder / "meminfo").write_text(
            f"Node {node.node} MemTotal:       {(node.memory_total_bytes or 0) // 1024} kB\n")
    (root / "meminfo").write_text(
        f"MemTotal:       {machine.host.memory_total_bytes // 1024} kB\n"
        f"MemAvailable:   {machine.host.memory_available_bytes // 1024} kB\n")


@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_each_shape_reads_back_through_sysfs_as_described(path, tmp_path):
    """Written out as /sys and /proc trees, a shape reads back as the same caches (with their
    instance counts), NUMA nodes and memory: the shapes say what bwprof would read there."""
    machine = shape(path.stem)
    _write_tree(tmp_path, machine)
    read = system.caches(tmp_path / "cpu")
    described = [c for c in machine.host.caches if c.type != "Instruction"]
    assert [(c.level, c.type, c.size_bytes, c.instances) for c in read] == [
        (c.level, c.type, c.size_bytes, c.instances) for c in described]
    assert system.llc_bytes_total(read) == machine.host.llc_bytes_total
    nodes = system.numa_nodes(tmp_path / "node")
    assert [(n.node, parse_cpu_list(n.cpus) or frozenset(), n.memory_total_bytes)
            for n in nodes] == [(n.node, parse_cpu_list(n.cpus) or frozenset(),
                                 n.memory_total_bytes) for n in machine.host.numa_nodes]
    memory = system.meminfo(tmp_path / "meminfo")
    assert memory["MemTotal"] == machine.host.memory_total_bytes // 1024 * 1024


@pytest.mark.parametrize("path", SHAPES, ids=lambda p: p.stem)
def test_each_shape_describes_what_planning_needs(path):
    machine = shape(path.stem)
    assert machine.description and machine.budgets_s
    assert machine.host.logical_cpus >= len(machine.cpus) >= 1
    assert machine.host.llc_bytes_total and machine.host.memory_total_bytes
    for index, gpu in enumerate(machine.gpus):
        assert gpu.properties.index == index and gpu.properties.l2_bytes > 0


def test_an_earlier_run_s_system_json_is_a_machine():
    """The stored H200 run's system.json plans as its box would: its GPU, its PCIe link (the
    peak the estimate's copies run at) and its NUMA node come from the file."""
    from bwprof import api

    machine = load_machine(H200_RUN)
    assert machine.host.cpu_model.startswith("Intel") and machine.name == "system"
    assert [g.properties.name for g in machine.gpus] == ["NVIDIA H200"]
    metadata = machine.gpus[0].metadata
    assert (metadata["pcie_gen_max"], metadata["pcie_width_max"], metadata["numa_node"]) == (
        5, 16, 0)
    planned = api.plan_run(machine=machine, preset="quick", cases="h2d_pinned")
    (device,) = planned.gpus.devices
    assert device.peak_pcie_gbps and round(device.peak_pcie_gbps) == 63
    assert planned.estimate.measured_jobs == len(planned.plan.transfer_sizes)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "is not JSON"),
    ("[]", "describes no machine: it needs a 'host' object"),
    ('{"host": {"logical_cpus": "two"}}', "host"),
    ('{"host": {"cpu_model": "x", "logical_cpus": 2, "caches": []}, "gpus": 3}',
     "gpus should be a list"),
    ('{"host": {"cpu_model": "x", "logical_cpus": 2, "caches": []}, "budgets_s": {"q": "x"}}',
     "budgets_s should map presets to seconds"),
])
def test_a_file_that_is_not_a_machine_is_one_line(tmp_path, text, message):
    path = tmp_path / "machine.json"
    path.write_text(text)
    with pytest.raises(BwprofError, match=message) as info:
        load_machine(path)
    assert "\n" not in str(info.value)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(BwprofError, match="cannot read the machine description"):
        load_machine(tmp_path / "nothing.json")


def test_described_gpus_answer_planning_and_refuse_to_measure():
    backend = DescribedBackend(shape("l40s-4x-pcie").gpus)
    assert backend.device_count() == 4
    assert backend.properties(2).name == "NVIDIA L40S"
    assert 0 < backend.free_memory(0) < backend.properties(0).total_memory_bytes
    assert backend.enable_peer_access(0, 1) is False  # no P2P on these
    with pytest.raises(MeasuresNothing):
        backend.device_array(0, 4096)
    with pytest.raises(MeasuresNothing):
        backend.time_sample([], True, 0)


def test_the_shapes_are_json_a_person_can_read():
    for path in SHAPES:
        data = json.loads(path.read_text())
        assert data["name"] == path.stem
