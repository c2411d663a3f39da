from dataclasses import replace

import pytest

from bwprof.gpu.devices import describe, sysfs_dir, sysfs_metadata
from bwprof.gpu.sim import SimBackend


def _pci(root, bus_id, **files):
    folder = root / bus_id
    folder.mkdir(parents=True)
    for name, value in files.items():
        (folder / name).write_text(f"{value}\n")
    return folder


def test_sysfs_metadata_reads_numa_cpus_and_link(tmp_path):
    _pci(tmp_path, "0000:1b:00.0", numa_node=1, local_cpulist="32-63",
         max_link_speed="32.0 GT/s PCIe", max_link_width=16)
    meta = sysfs_metadata("0000:1B:00.0", tmp_path)
    assert meta == {"numa_node": 1, "cpu_affinity": "32-63", "pcie_gen_max": 5,
                    "pcie_width_max": 16}
    assert sysfs_dir("00000000:1B:00.0", tmp_path) == tmp_path / "0000:1b:00.0"


def test_sysfs_without_numa_or_device(tmp_path):
    _pci(tmp_path, "0000:01:00.0", numa_node=-1)
    assert sysfs_metadata("0000:01:00.0", tmp_path)["numa_node"] is None
    assert sysfs_metadata("0000:02:00.0", tmp_path) == {}
    assert sysfs_metadata("not-a-bus-id", tmp_path) == {}
    assert sysfs_metadata(None, tmp_path) == {}


class H200Like(SimBackend):
    """Simulated devices that report an H200's CUDA properties and a PCI address."""

    def properties(self, device):
        return replace(super().properties(device), name="NVIDIA H200",
                       pci_bus_id=f"0000:{0x1b + device:02X}:00.0", memory_bus_width_bits=6144,
                       memory_clock_khz=3_201_000)


SMALL_GPU_BYTES = 8 << 20
"""The runs below check their rows' flags and peaks, not sizes: on 8 MiB simulated GPUs the
overlap case copies 2 MiB, not 16 MiB (the plans copy 1 MiB)."""


def _small() -> H200Like:
    return H200Like(devices=1, memory_bytes=SMALL_GPU_BYTES)


def test_peaks_come_from_nvml_then_cuda_then_sysfs(tmp_path):
    _pci(tmp_path, "0000:1b:00.0", numa_node=0, local_cpulist="0-3",
         max_link_speed="32.0 GT/s PCIe", max_link_width=16)
    _pci(tmp_path, "0000:1c:00.0", numa_node=1, local_cpulist="4-7",
         max_link_speed="16.0 GT/s PCIe", max_link_width=8)

    def metadata(props):
        return {"peak_nvlink_gbps": 450.0} if props.index == 0 else {"numa_node": 3}

    first, second = describe(H200Like(), metadata, tmp_path)
    assert first.peak_hbm_gbps == pytest.approx(2 * 3201e6 * 6144 / 8 / 1e9)
    assert first.peak_pcie_gbps == pytest.approx(16 * 32 * 128 / 130 / 8)
    assert first.peak_nvlink_gbps == 450.0
    assert (first.numa_node, first.cpus) == (0, frozenset(range(4)))
    assert second.numa_node == 3  # NVML's answer wins over sysfs
    assert second.peak_pcie_gbps == pytest.approx(8 * 16 * 128 / 130 / 8)
    assert first.as_dict()["cpus"] == "0-3"
    assert first.label == "gpu0" and first.name == "NVIDIA H200"


def test_a_c2c_host_link_has_no_pcie_peak_and_its_host_rows_say_why(tmp_path):
    """Grace Hopper: sysfs may still show a PCIe link, but host copies use NVLink-C2C; a PCIe
    peak would mark a healthy ~400 GB/s copy invalid."""
    from bwprof.gpu.executor import GpuExecutor
    from bwprof.plan import make_plan
    from bwprof.runner import RunContext, Runner

    _pci(tmp_path, "0000:1b:00.0", numa_node=0, local_cpulist="0-3",
         max_link_speed="32.0 GT/s PCIe", max_link_width=16)
    small = _small()
    (device,) = describe(small, lambda props: {"c2c_enabled": True}, tmp_path)
    assert device.host_link_c2c and device.peak_pcie_gbps is None
    assert device.peak_hbm_gbps is not None
    plan = make_plan(cases="h2d_pinned,d2d_copy,h2d_all,overlap_h2d_compute", preset="quick",
                     repeats=2, usable_cpus=1, llc_bytes=None, memory_available_bytes=8 << 30,
                     size="1MiB")
    runner = Runner(plan, {"gpu": GpuExecutor(small, [device], 8 << 30)}, RunContext("r", "h"))
    try:
        rows = [r for r in runner.run() if r.status == "ok"]
    finally:
        runner.close()
    assert {r.case for r in rows} == {"h2d_pinned", "d2d_copy", "h2d_all", "overlap_h2d_compute"}
    assert {r.device for r in rows if r.case == "h2d_all"} == {"gpu0", "all"}
    # Every row that moves host memory is flagged (the overlap case's copies and its
    # concurrent row too); device memory alone (d2d_copy, the overlap kernel) is not.
    host = [r for r in rows if r.memory != "hbm"]
    assert {r.direction for r in host if r.case == "overlap_h2d_compute"} == {"h2d",
                                                                             "h2d+compute"}
    assert all(("c2c_link" in r.flags) == (r.memory != "hbm") for r in rows)
    assert all("host link is NVLink-C2C" in r.note for r in host)
    assert all(r.peak_gbps is None for r in host)


def test_simulated_devices_have_no_peaks():
    devices = describe(SimBackend())
    assert len(devices) == 2
    assert all(d.peak_hbm_gbps is None and d.peak_pcie_gbps is None for d in devices)


def test_p2p_peak_counts_only_the_links_joining_the_pair():
    from bwprof.gpu.transfers import p2p_peak

    backend = H200Like(devices=3)
    props = [backend.properties(i) for i in range(3)]

    def device(i, remotes, nvlink=150.0, pcie=63.0):
        return type(describe(backend)[0])(
            i, props[i], {"nvlink_links_up": len(remotes), "nvlink_remotes": remotes},
            peak_nvlink_gbps=nvlink if remotes else None, peak_pcie_gbps=pcie)

    bus1, bus2 = props[1].pci_bus_id, props[2].pci_bus_id
    # A 2-way bridge: gpu0 has 4 links, 3 to gpu1 and 1 to gpu2 (lower-case spelling too).
    bridged = device(0, [bus1, bus1, bus1.lower(), bus2])
    assert p2p_peak(bridged, device(1, [])) == pytest.approx(150.0 * 3 / 4)
    assert p2p_peak(bridged, device(2, [])) == pytest.approx(150.0 / 4)
    # No link to this GPU: PCIe, the slower of the two.
    assert p2p_peak(device(0, [bus1]), device(2, [], pcie=31.5)) == 31.5
    # Behind NVSwitch every link counts; unknown remotes give no peak rather than a wrong one.
    assert p2p_peak(device(0, ["switch"] * 18, nvlink=450.0), device(1, [])) == 450.0
    assert p2p_peak(device(0, [None, None]), device(1, [])) is None
    assert p2p_peak(device(0, []), device(1, [])) == 63.0


def test_links_down_lower_the_figure_never_the_pair_peak():
    """An 18-link GPU behind NVSwitch with 6 links down keeps the whole part's peak (its
    12 links up would have made a sick GPU look healthy)."""
    from bwprof.gpu.transfers import p2p_peak

    backend = H200Like(devices=2)
    props = [backend.properties(i) for i in range(2)]
    devices = describe(backend)
    sick = type(devices[0])(0, props[0], {"nvlink_links_up": 12, "nvlink_links": 18,
                                          "nvlink_remotes": ["switch"] * 12},
                            peak_nvlink_gbps=450.0, peak_pcie_gbps=63.0)
    peer = type(devices[0])(1, props[1], {}, peak_pcie_gbps=63.0)
    assert p2p_peak(sick, peer) == pytest.approx(450.0)
    # A direct bridge: the links joining the pair, at the part's per-link rate.
    bridged = type(devices[0])(0, props[0], {"nvlink_links_up": 2, "nvlink_links": 4,
                                             "nvlink_remotes": [props[1].pci_bus_id] * 2},
                               peak_nvlink_gbps=100.0, peak_pcie_gbps=63.0)
    assert p2p_peak(bridged, peer) == pytest.approx(50.0)


def _rows_on(device, cases, backend=None):
    from bwprof.gpu.executor import GpuExecutor
    from bwprof.plan import make_plan
    from bwprof.runner import RunContext, Runner

    plan = make_plan(cases=cases, preset="quick", repeats=2, usable_cpus=1, llc_bytes=None,
                     memory_available_bytes=8 << 30, size="1MiB")
    backend = backend or _small()
    runner = Runner(plan, {"gpu": GpuExecutor(backend, [device], 8 << 30)}, RunContext("r", "h"))
    try:
        return [r for r in runner.run() if r.status == "ok"]
    finally:
        runner.close()


def test_a_c2c_host_link_gets_nvmls_c2c_peak_where_the_driver_gives_it(tmp_path):
    (device,) = describe(_small(), lambda props: {
        "c2c_enabled": True, "c2c_links": 10, "c2c_link_max_gbps": 45.0,
        "peak_c2c_gbps": 450.0}, tmp_path)
    assert device.peak_c2c_gbps == 450.0 and device.peak_pcie_gbps is None
    rows = _rows_on(device, "h2d_pinned,bidir_pinned,h2d_all,overlap_h2d_compute,d2d_copy")
    host = [r for r in rows if r.memory != "hbm"]
    assert host and all("c2c_link" in r.flags for r in host)
    peaks = {(r.case, r.direction, r.device): r.peak_gbps for r in host}
    assert peaks[("h2d_pinned", "h2d", "gpu0")] == 450.0
    assert peaks[("bidir_pinned", "both", "gpu0")] == 900.0  # both directions at once
    assert peaks[("h2d_all", "h2d", "all")] == 450.0  # summed over the (one) GPU
    assert peaks[("overlap_h2d_compute", "h2d+compute", "gpu0")] == 450.0
    assert all("peak from NVML's C2C links" in r.note for r in host)
    assert not any("c2c_link" in r.flags for r in rows if r.memory == "hbm")


def test_a_mig_slice_is_labelled_and_held_against_no_whole_gpu_hbm_peak(tmp_path):
    (device,) = describe(_small(), lambda props: {
        "mig_mode": True, "peak_hbm_gbps": 4800.0}, tmp_path)
    assert device.mig_slice and device.peak_hbm_gbps is None
    assert device.metadata["mig_slice_multiprocessors"] == device.properties.multiprocessors
    assert device.metadata["mig_slice_memory_bytes"] == device.properties.total_memory_bytes
    rows = _rows_on(device, "h2d_pinned,d2d_copy,hbm_copy")
    assert rows and all("mig_slice" in r.flags for r in rows)
    assert all(r.peak_gbps is None for r in rows if r.memory == "hbm")
    assert all("measured on a MIG slice" in r.note for r in rows)
    (whole,) = describe(_small(), lambda props: {"mig_mode": False}, tmp_path)
    assert not any("mig_slice" in r.flags for r in _rows_on(whole, "d2d_copy"))


def test_confidential_computing_flags_the_host_link_rows(tmp_path):
    (device,) = describe(_small(), lambda props: {"cc_mode": True}, tmp_path)
    rows = _rows_on(device, "h2d_pinned,h2d_pageable,d2d_copy")
    host = [r for r in rows if r.memory != "hbm"]
    assert host and all("confidential_computing" in r.flags for r in host)
    assert all("encrypted bounce buffers" in r.note for r in host)
    assert not any("confidential_computing" in r.flags for r in rows if r.memory == "hbm")
