"""The simulated backend on every machine shape's GPUs (`tests/shapes`): a quick run of a few
cases goes through the real runner, executor, validation and run folder on each shape's GPU
topology (their count, peer access or none, a MIG slice, NVLink-C2C, each GPU's NUMA node),
and runs exactly the jobs `api.plan_run` lists for that machine. A shape file with GPUs adds
its cases here. The copies stay small: every simulated GPU has SHAPE_GPU_BYTES of memory."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

import bwprof
from bwprof import api
from bwprof.described import DescribedMachine
from bwprof.gpu.devices import describe
from bwprof.gpu.sim import SIM_L2_BYTES, SimBackend
from bwprof.measurement import Job
from bwprof.schema import flags
from bwprof.units import MiB
from tests.shapes import gpu_shapes, shape, simulate_gpus

SHAPE_GPU_BYTES = 8 * MiB
"""Room for a latency chain of 4x the simulated L2 (a peer's chase), so every topology case
runs at one size at least; the larger sizes of the sweep are skipped as not fitting."""
CASES = "h2d_pinned,hbm_copy,h2d_all,lat_h2d,p2p_copy,p2p_all_pairs,lat_p2p"
"""A case per GPU, one over every GPU at once, a host-link latency, and the pair cases three
ways (a copy per pair, every pair at once, a chase through a peer)."""
PER_GPU = ("h2d_pinned", "hbm_copy", "lat_h2d")
PAIR_CASES = ("p2p_copy", "p2p_all_pairs", "lat_p2p")
HOST_LINK_CASES = ("h2d_pinned", "h2d_all", "lat_h2d")
NO_PEER_ACCESS = "peer access is not supported"

SHAPES_WITH_GPUS = gpu_shapes()


class _Jobs:
    """A progress listener that keeps every job the runner starts, in order."""

    def __init__(self) -> None:
        self.started: list[Job] = []

    def start(self, total: int, estimate_s: float | None = None) -> None:
        pass

    def job_started(self, job: Job, left_s: float | None = None) -> None:
        self.started.append(job)

    def job_finished(self, job: Job, rows: object) -> None:
        pass


@dataclass
class ShapedRun:
    machine: DescribedMachine
    result: api.RunResult
    ran: list[Job]
    planned: list[Job]
    """What `api.plan_run` lists for the same simulated machine."""
    run_dir: Path

    @property
    def frame(self) -> pd.DataFrame:
        return self.result.results

    def rows(self, *cases: str) -> pd.DataFrame:
        return self.frame[self.frame["case"].isin(cases)]

    @property
    def labels(self) -> set[str]:
        return {f"gpu{i}" for i in range(len(self.machine.gpus))}


@pytest.fixture(scope="module", params=SHAPES_WITH_GPUS, ids=lambda path: path.stem)
def shaped(request, tmp_path_factory) -> ShapedRun:
    machine = shape(request.param.stem)
    out = tmp_path_factory.mktemp(machine.name) / "run"
    jobs = _Jobs()
    options = dict(cases=CASES, preset="quick", repeats=2, simulate=True, plots=False,
                   telemetry=False)
    with pytest.MonkeyPatch.context() as patch:
        simulate_gpus(patch, machine, SHAPE_GPU_BYTES)
        planned = api.plan_run(**options)
        result = bwprof.run(out=out, progress=jobs, **options)
    listed = [job for work in planned.estimate.work for job in work.jobs]
    assert result.run_dir is not None
    return ShapedRun(machine, result, jobs.started, listed, result.run_dir)


def test_the_shapes_cover_every_gpu_topology_these_tests_check():
    """One GPU and several; peer access and none; a MIG slice; NVLink-C2C; GPUs on two
    NUMA nodes: the tests below hold each on the shapes that have it, so a shape must."""
    machines = [shape(path.stem) for path in SHAPES_WITH_GPUS]
    metadata = [gpu.metadata for m in machines for gpu in m.gpus]
    assert {len(m.gpus) for m in machines} >= {1, 4, 8}
    assert any(len(m.gpus) > 1 and not _peer_access(m) for m in machines)
    assert any(len(m.gpus) > 1 and _peer_access(m) for m in machines)
    assert any(meta.get("mig_mode") for meta in metadata)
    assert any(meta.get("c2c_enabled") for meta in metadata)
    assert any(len({gpu.metadata.get("numa_node") for gpu in m.gpus}) > 1 for m in machines)


def _peer_access(machine: DescribedMachine) -> bool:
    return all(gpu.metadata.get("p2p_supported", True) for gpu in machine.gpus)


def test_a_simulated_gpu_is_the_described_one_made_small():
    """Name, SMs, compute capability, copy engines and NVML metadata are the shape's; memory,
    L2, PCI address and the peaks are the simulator's (none), so sizes stay small and no
    CPU copy is judged against a GPU's link."""
    machine = shape("grace-hopper")
    (device,) = describe(backend := SimBackend(gpus=machine.gpus, memory_bytes=SHAPE_GPU_BYTES),
                         backend.metadata)
    described = machine.gpus[0]
    assert device.name == described.properties.name == "NVIDIA GH200 480GB"
    assert device.properties.multiprocessors == described.properties.multiprocessors
    assert device.properties.compute_capability == described.properties.compute_capability
    assert device.properties.async_engines == described.properties.async_engines
    assert device.properties.total_memory_bytes == SHAPE_GPU_BYTES
    assert device.properties.l2_bytes == SIM_L2_BYTES
    assert device.properties.pci_bus_id is None
    assert device.host_link_c2c and device.metadata["c2c_links"] == 10
    assert device.numa_node == described.metadata["numa_node"]
    assert device.cpus is None  # the described machine's CPUs, not this one's
    assert (device.peak_hbm_gbps, device.peak_pcie_gbps, device.peak_c2c_gbps) == (None,) * 3
    with pytest.raises(ValueError, match="2 simulated devices asked for 1"):
        SimBackend(devices=2, gpus=machine.gpus)


@pytest.mark.parametrize("path", SHAPES_WITH_GPUS, ids=lambda path: path.stem)
def test_peer_access_is_what_the_shape_says(path):
    machine = shape(path.stem)
    backend = SimBackend(gpus=machine.gpus)
    pairs = [(i, j) for i in range(len(machine.gpus)) for j in range(len(machine.gpus)) if i != j]
    assert {backend.enable_peer_access(i, j) for i, j in pairs} <= {_peer_access(machine)}


def test_each_shape_s_run_finishes_with_rows_for_every_gpu(shaped):
    assert shaped.result.failed == []
    assert set(shaped.frame["status"]) <= {"ok", "skipped", "waived"}
    for case in PER_GPU:
        rows = shaped.rows(case)
        assert set(rows[rows["status"] == "ok"]["device"]) == shaped.labels, case
    every = shaped.rows("h2d_all")
    assert set(every[every["status"] == "ok"]["device"]) == shaped.labels | {"all"}
    names = {gpu.properties.name for gpu in shaped.machine.gpus}
    measured = shaped.rows(*PER_GPU)
    assert set(measured[measured["status"] == "ok"]["device_name"]) == names


def test_each_shape_s_run_folder_says_which_gpus_were_simulated(shaped):
    system = json.loads((shaped.run_dir / "system.json").read_text())
    assert system["simulated"] is True and system["gpus"]["simulated"] is True
    devices = system["gpus"]["devices"]
    assert [d["properties"]["name"] for d in devices] == [
        gpu.properties.name for gpu in shaped.machine.gpus]
    assert [d["numa_node"] for d in devices] == [
        gpu.metadata.get("numa_node") for gpu in shaped.machine.gpus]
    loaded = bwprof.load(shaped.run_dir)
    assert len(loaded.results) == len(shaped.frame)


def test_pair_cases_are_waived_on_one_gpu_and_run_on_several(shaped):
    pairs = shaped.rows(*PAIR_CASES)
    assert set(pairs["case"]) == set(PAIR_CASES)
    if len(shaped.machine.gpus) == 1:
        assert set(pairs["status"]) == {"waived"}
        assert pairs["note"].str.contains("needs 2 GPUs; this machine has 1").all()
    elif _peer_access(shaped.machine):
        for case in PAIR_CASES:
            rows = shaped.rows(case)
            assert (rows["status"] == "ok").any(), case
            assert not rows["note"].str.contains(NO_PEER_ACCESS).any(), case


def test_pair_cases_say_peer_access_is_unavailable_where_the_gpus_have_none(shaped):
    """PCIe GPUs without P2P (4 L40S): every pair job is skipped, not an error, and each
    that fits says why; none is measured."""
    if len(shaped.machine.gpus) == 1 or _peer_access(shaped.machine):
        assert not shaped.frame["note"].str.contains(NO_PEER_ACCESS).any()
        return
    pairs = shaped.rows(*PAIR_CASES)
    assert set(pairs["status"]) == {"skipped"}
    for case in PAIR_CASES:
        said = shaped.rows(case)["note"].str.contains(NO_PEER_ACCESS)
        assert said.any(), case
    fitting = pairs[~pairs["note"].str.contains("does not fit")]
    assert fitting["note"].str.startswith(NO_PEER_ACCESS).all()
    assert {d for d in fitting["device"] if "->" in d} >= {"gpu0->gpu1"}


def test_a_mig_slice_s_rows_are_flagged_mig_slice(shaped):
    measured = shaped.frame[shaped.frame["status"] == "ok"]
    flagged = measured["flags"].str.contains(flags.MIG_SLICE)
    if any(g.metadata.get("mig_mode") for g in shaped.machine.gpus):
        assert flagged.all() and len(flagged)  # one GPU, a slice: every row is the slice's
    else:
        assert not flagged.any()


def test_host_link_rows_over_nvlink_c2c_are_flagged_c2c_link(shaped):
    measured = shaped.frame[shaped.frame["status"] == "ok"]
    over_link = measured["case"].isin(HOST_LINK_CASES)
    c2c = measured["flags"].str.contains(flags.C2C_LINK)
    if any(g.metadata.get("c2c_enabled") for g in shaped.machine.gpus):
        assert c2c[over_link].all() and over_link.any()
    else:
        assert not c2c.any()
    assert not c2c[~over_link].any()  # HBM and peer rows do not cross the host link


def test_host_memory_is_asked_of_each_gpu_s_numa_node(shaped):
    """Host-link rows name the NUMA node of their GPU's host memory: the shape's node of
    that GPU (two on the HGX box)."""
    rows = shaped.rows("h2d_pinned", "lat_h2d")
    rows = rows[rows["status"] == "ok"]
    nodes = {f"gpu{i}": gpu.metadata.get("numa_node")
             for i, gpu in enumerate(shaped.machine.gpus)}
    assert [int(n) for n in rows["numa_node"]] == [nodes[d] for d in rows["device"]]


def test_the_runner_runs_the_jobs_plan_run_lists_for_the_simulated_machine(shaped):
    """The same simulated machine: `plan_run` lists exactly the jobs the run ran, in order;
    and the shape as planned from its file (`plan_run(machine=...)`, full-sized GPUs) has
    the same cases on the same GPUs and pairs (its sizes are its own)."""
    assert shaped.ran == shaped.planned
    assert {j.device for j in shaped.ran if j.device is not None} == set(
        range(len(shaped.machine.gpus)))
    described = api.plan_run(machine=shaped.machine, cases=CASES, preset="quick", repeats=2,
                             telemetry=False)
    on_file = {(j.case, j.device, j.peer) for w in described.estimate.work for j in w.jobs}
    assert {(j.case, j.device, j.peer) for j in shaped.ran} == on_file
