import os
from dataclasses import replace
from pathlib import Path

import pytest

from bwprof.pci import (
    PciePath,
    PciePort,
    host_link_ceiling,
    link_generation,
    parse_pci_bus_id,
    read_pcie_path,
    same_device,
)


def test_parse_pci_bus_id_spellings() -> None:
    address = parse_pci_bus_id("00000000:1B:00.0")
    assert address == (0, 0x1B, 0, 0)
    assert address.cuda() == "0000:1B:00.0"
    assert address.nvml() == "00000000:1B:00.0"
    assert address.sysfs() == "0000:1b:00.0"
    assert parse_pci_bus_id("10000:e1:1f.7").sysfs() == "10000:e1:1f.7"  # VMD domains


def test_a_malformed_bus_id_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a PCI bus id"):
        parse_pci_bus_id("gpu0")


@pytest.mark.parametrize(("x", "y", "same"), [
    ("00000000:1B:00.0", "0000:1b:00.0", True),
    ("1B:00.0", "0000:1B:00.0", True),
    ("0000:1B:00.0", "0000:1C:00.0", False),
    (None, "0000:1B:00.0", False),
    ("switch", "0000:1B:00.0", False),
])
def test_same_device_whatever_the_spelling(x, y, same) -> None:
    assert same_device(x, y) is same


# -- the PCIe tree above the GPUs and the ceiling of host copies by all at once ----------------

GEN5_X16 = 16 * 32.0 * 128 / 130 / 8  # 63.0 GB/s one direction
GEN4_X16 = GEN5_X16 / 2


class FakeSysfs:
    """A /sys tree as the kernel lays it out: each device a folder under
    devices/pci<domain>:<bus>/<port>/..., and bus/pci/devices/<bdf> a symlink to it."""

    def __init__(self, root: Path) -> None:
        self.devices, self.bus = root / "devices", root / "bus" / "pci" / "devices"
        self.bus.mkdir(parents=True)

    def add(self, *chain: str, gen: int | None = 5, width: int = 16, vendor: str = "0x1000",
            link: bool = True) -> str:
        folder = self.devices.joinpath(*chain)
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
        if link:
            speed = {3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}.get(
                gen, "Unknown") if gen else "Unknown"
            for kind in ("max", "current"):
                (folder / f"{kind}_link_speed").write_text(speed + "\n")
                (folder / f"{kind}_link_width").write_text(f"{width}\n")
        (self.bus / chain[-1]).symlink_to(os.path.relpath(folder, self.bus))  # as sysfs
        return chain[-1]


def _switch(fs: FakeSysfs, root_bus: str, root_port: str, bus: int, gpus: int, nics: int = 0,
            uplink_gen: int = 5) -> list[tuple[str, ...]]:
    """A root port, a switch (upstream port, a downstream port a device) and behind it `gpus`
    GPUs then `nics` NICs; the GPUs' chains."""
    rp = (root_bus, fs.add(root_bus, root_port, vendor="0x8086", gen=uplink_gen))
    usp = (*rp, fs.add(*rp, f"0000:{bus:02x}:00.0", gen=uplink_gen))
    chains = []
    for k in range(gpus + nics):
        dsp = (*usp, fs.add(*usp, f"0000:{bus + 1:02x}:{k:02x}.0"))
        end = (*dsp, fs.add(*dsp, f"0000:{bus + 2 + k:02x}:00.0",
                            vendor="0x10de" if k < gpus else "0x15b3"))
        if k < gpus:
            chains.append(end)
    return chains


def _leaves(fs: FakeSysfs, chains, own=GEN5_X16, in_vm=False):
    return [(f"gpu{i}", own, read_pcie_path(chain[-1], fs.bus, in_vm))
            for i, chain in enumerate(chains)]


def test_link_generation_reads_old_and_new_kernels_spellings() -> None:
    assert link_generation("32.0 GT/s PCIe") == 5
    assert link_generation("8 GT/s") == 3
    assert link_generation("2.5 GT/s PCIe") == 1
    assert link_generation("Unknown") is None
    assert link_generation(None) is None


def test_the_path_is_read_from_the_root_bus_down_to_the_gpu(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    (chain,) = _switch(fs, "pci0000:15", "0000:15:01.0", 0x16, gpus=1)
    path = read_pcie_path("00000000:18:00.0", fs.bus)
    assert path.root_bus == "pci0000:15" and path.hidden == ""
    assert [p.bdf for p in path.ports] == list(chain[1:])
    assert path.ports[0] == PciePort("0000:15:01.0", "0x8086", 5, 16, 5, 16)
    assert path.ports[-1].vendor == "0x10de"
    assert PciePath.from_json(path.as_json()) == path  # as system.json records it


# Catches: h2d_all's ceiling summing each GPU's own x16 link where two GPUs share one
# switch uplink (the aggregate would read ~50% of "peak" with nothing wrong)
def test_two_gpus_behind_one_uplink_share_it(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    chains = _switch(fs, "pci0000:00", "0000:00:01.0", 0x01, gpus=2)
    ceiling = host_link_ceiling(_leaves(fs, chains))
    assert ceiling.gbps == pytest.approx(GEN5_X16)  # one link, not two
    assert "gpu0 + gpu1 share 0000:01:00.0 (Gen5 x16)" in ceiling.note


def _switch_reading(fs: FakeSysfs, root_gen: int | None, upstream_gen: int | None):
    """Two GPUs behind one switch whose uplink's ends (root port, upstream port) read the
    given generations (None: "Unknown", as a switch's upstream port may)."""
    rp = ("pci0000:00", fs.add("pci0000:00", "0000:00:01.0", vendor="0x8086", gen=root_gen))
    usp = (*rp, fs.add(*rp, "0000:01:00.0", gen=upstream_gen))
    chains = []
    for k in range(2):
        dsp = (*usp, fs.add(*usp, f"0000:02:{k:02x}.0"))
        chains.append((*dsp, fs.add(*dsp, f"0000:{3 + k:02x}:00.0", vendor="0x10de")))
    return chains


# Catches: one unreadable end of a link (a switch upstream port reading "Unknown" under a
# Gen5 x16 root port) voiding the whole ceiling though the other end reads the same link
@pytest.mark.parametrize(("root_gen", "upstream_gen", "read_at"), [
    (5, None, "0000:00:01.0"), (None, 5, "0000:01:00.0")])
def test_a_link_unreadable_at_one_end_is_read_at_the_other(tmp_path, root_gen, upstream_gen,
                                                          read_at) -> None:
    fs = FakeSysfs(tmp_path)
    ceiling = host_link_ceiling(_leaves(fs, _switch_reading(fs, root_gen, upstream_gen)))
    assert ceiling.gbps == pytest.approx(GEN5_X16)  # the shared uplink, once
    assert f"gpu0 + gpu1 share {read_at} (Gen5 x16)" in ceiling.note


def test_gpus_on_their_own_root_ports_add_up(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    chains = [("pci0000:00", fs.add("pci0000:00", rp, vendor="0x8086"),
               fs.add("pci0000:00", rp, gpu, vendor="0x10de"))
              for rp, gpu in (("0000:00:01.0", "0000:01:00.0"), ("0000:00:03.0", "0000:02:00.0"))]
    ceiling = host_link_ceiling(_leaves(fs, chains))
    assert ceiling.gbps == pytest.approx(2 * GEN5_X16) and ceiling.note == ""


def test_hgx_each_gpu_behind_its_own_switch_with_nics_keeps_the_eight_link_sum(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    chains = [chain for i, bus in enumerate((0x15, 0x26, 0x37, 0x48, 0x97, 0xa8, 0xb9, 0xca))
              for chain in _switch(fs, f"pci0000:{bus:02x}", f"0000:{bus:02x}:01.0", bus + 1,
                                   gpus=1, nics=2)]
    assert len(chains) == 8
    ceiling = host_link_ceiling(_leaves(fs, chains))
    assert ceiling.gbps == pytest.approx(8 * GEN5_X16) and ceiling.note == ""


def test_two_switches_of_two_gpus_on_one_root_bus_give_two_links(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    chains = (_switch(fs, "pci0000:00", "0000:00:01.0", 0x01, gpus=2)
              + _switch(fs, "pci0000:00", "0000:00:03.0", 0x11, gpus=2, uplink_gen=4))
    ceiling = host_link_ceiling(_leaves(fs, chains))
    assert ceiling.gbps == pytest.approx(GEN5_X16 + GEN4_X16)
    assert "gpu2 + gpu3 share 0000:11:00.0 (Gen4 x16)" in ceiling.note


def test_one_gpu_gets_its_own_link_or_a_narrower_port_above_it(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    (gen4,) = _switch(fs, "pci0000:00", "0000:00:01.0", 0x01, gpus=1, uplink_gen=4)
    vm = ("pci0000:80", fs.add("pci0000:80", "0000:80:06.0", vendor="0x10de"))
    assert host_link_ceiling(_leaves(fs, [gen4])).gbps == pytest.approx(GEN4_X16)
    # The lent H200's VM: the GPU on the root bus, nothing above it; one GPU shares nothing.
    alone = host_link_ceiling(_leaves(fs, [vm], in_vm=True))
    assert alone.gbps == pytest.approx(GEN5_X16) and alone.note == ""


@pytest.mark.parametrize("board", ["root_bus", "qemu_ports", "hypervisor_flag", "unread",
                                   "unknown_uplink"])
def test_several_gpus_without_the_hosts_tree_get_no_ceiling_and_say_why(tmp_path, board) -> None:
    fs = FakeSysfs(tmp_path)
    if board == "root_bus":  # a VM's GPUs straight on its root bus
        chains = [("pci0000:00", fs.add("pci0000:00", f"0000:00:0{5 + i}.0", vendor="0x10de"))
                  for i in range(2)]
        why = "no PCIe port above it"
    elif board == "qemu_ports":  # q35's pcie-root-port: links the hypervisor invents
        chains = [("pci0000:00", fs.add("pci0000:00", rp, vendor="0x1b36", gen=3, width=1),
                   fs.add("pci0000:00", rp, gpu, vendor="0x10de"))
                  for rp, gpu in (("0000:00:02.0", "0000:01:00.0"),
                                  ("0000:00:02.1", "0000:02:00.0"))]
        why = "virtual bridge (QEMU)"
    elif board == "unknown_uplink":
        chains = _switch(fs, "pci0000:00", "0000:00:01.0", 0x01, gpus=2, uplink_gen=None)
        why = "unreadable at both ends (0000:01:00.0 above gpu0, gpu1"  # root port too
    else:
        chains = _switch(fs, "pci0000:00", "0000:00:01.0", 0x01, gpus=2)
        why = "hypervisor flag"
    leaves = _leaves(fs, chains, in_vm=board == "hypervisor_flag")
    if board == "unread":
        leaves[1] = ("gpu1", GEN5_X16, None)
        why = "the PCIe tree above gpu1 was not read"
    ceiling = host_link_ceiling(leaves)
    assert ceiling.gbps is None
    assert ceiling.note.startswith("no % of peak") and why in ceiling.note


def test_a_missing_sysfs_entry_says_so(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    assert read_pcie_path("0000:18:00.0", fs.bus).hidden == "no sysfs entry for 0000:18:00.0"
    assert read_pcie_path(None, fs.bus).hidden == "no PCI bus id"
    assert PciePath.from_json(None) is None
    assert PciePath.from_json({"ports": [{"no": "bdf"}]}) is None


# -- through describe() and the h2d_all cases on the simulated backend -------------------------

def _board(tmp_path, shared: bool):
    from bwprof.gpu.devices import describe
    from bwprof.gpu.sim import SimBackend

    fs = FakeSysfs(tmp_path)
    if shared:
        chains = _switch(fs, "pci0000:00", "0000:00:01.0", 0x01, gpus=2)
    else:
        chains = [c for rp, bus in (("0000:00:01.0", 0x01), ("0000:00:03.0", 0x11))
                  for c in _switch(fs, "pci0000:00", rp, bus, gpus=1)]
    ids = [chain[-1] for chain in chains]

    class Board(SimBackend):
        def properties(self, device):
            return replace(super().properties(device), pci_bus_id=ids[device].upper())

    backend = Board(devices=2)
    devices = describe(backend, lambda props: {"pcie_gen_max": 5, "pcie_width_max": 16},
                       fs.bus, in_vm=False)
    return backend, devices


@pytest.mark.parametrize(("shared", "links"), [(True, 1), (False, 2)])
def test_h2d_all_is_held_against_the_tree_not_the_sum_of_gpu_links(tmp_path, shared,
                                                                    links) -> None:
    from tests.gpu.test_transfers import _run_rows

    backend, devices = _board(tmp_path, shared)
    assert [d.peak_pcie_gbps for d in devices] == [pytest.approx(GEN5_X16)] * 2
    assert devices[0].as_meta().metadata["pcie_path"]["ports"][0]["bdf"] == "0000:00:01.0"
    rows = [r for r in _run_rows(backend, "h2d_all,d2h_all,h2d_all_bidir", devices)
            if r.device == "all"]
    assert {r.case for r in rows} == {"h2d_all", "d2h_all", "h2d_all_bidir"}
    for row in rows:
        both = 2 if row.case == "h2d_all_bidir" else 1
        assert row.peak_gbps == pytest.approx(both * links * GEN5_X16), row.case
        assert ("gpu0 + gpu1 share 0000:01:00.0" in row.note) is shared
    per_gpu = [r for r in _run_rows(backend, "h2d_all", devices) if r.device == "gpu0"]
    assert per_gpu and all(r.peak_gbps == pytest.approx(GEN5_X16) for r in per_gpu)


@pytest.mark.parametrize(("name", "links"), [("hgx-8xh200", 8), ("h200-box", 1)])
def test_the_described_h200_machines_keep_their_link_sum(name, links) -> None:
    """HGX H200: each GPU behind its own switch (its NICs beside it), each switch's x16 Gen5
    uplink its own: the 8-link sum. The lent H200 box: one GPU in a VM, its own link."""
    from bwprof.gpu.described import DescribedBackend
    from bwprof.gpu.devices import describe, host_ceiling
    from tests.shapes import shape

    backend = DescribedBackend(shape(name).gpus)
    devices = describe(backend, backend.metadata, in_vm=False)
    assert len(devices) == links
    ceiling = host_ceiling(devices)
    assert ceiling.gbps == pytest.approx(links * GEN5_X16) and ceiling.note == ""


# Catches: the lent H200 box's shape placing its GPU at 00:05.0 where the run stored from
# that box (tests/data/h200-quick) found it at 00:06.0
def test_the_h200_box_shape_places_its_gpu_where_the_stored_run_found_it() -> None:
    import json

    from tests.shapes import shape

    stored = json.loads((Path(__file__).parent / "data" / "h200-quick" / "system.json")
                        .read_text())
    (found,) = [d["properties"]["pci_bus_id"] for d in stored["gpus"]["devices"]]
    (described,) = shape("h200-box").gpus
    assert same_device(described.properties.pci_bus_id, found)
    path = PciePath.from_json(described.metadata["pcie_path"])
    assert path is not None and same_device(path.ports[-1].bdf, found)


# Catches (issue 37): a sysfs file holding bytes that are not UTF-8 ends the run with a
# UnicodeDecodeError traceback
def test_bytes_that_are_not_utf8_in_sysfs_are_read_escaped(tmp_path) -> None:
    fs = FakeSysfs(tmp_path)
    _switch(fs, "pci0000:15", "0000:15:01.0", 0x16, gpus=1)
    gpu = next(fs.bus.glob("0000:18:00.0")).resolve()
    (gpu / "vendor").write_bytes(b"0x10de\xff\n")
    (gpu / "current_link_speed").write_bytes(b"32.0 GT/s \xfe\xff PCIe\n")
    path = read_pcie_path("00000000:18:00.0", fs.bus)
    assert path.ports[-1].vendor == "0x10de\\xff"
    assert path.ports[-1].gen == 5  # what could be read still is
