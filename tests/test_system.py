from pathlib import Path

import pytest

from bwprof import system
from bwprof.system import (
    caches,
    cpuset_cpus,
    host_info,
    llc_bytes_total,
    meminfo,
    numa_nodes,
    numpy_asks_hugepages,
    package_versions,
    parse_size_suffix,
    transparent_hugepages,
)


def _cache(root: Path, cpu: int, index: int, level: int, kind: str, size: str, shared: str):
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size),
                        ("shared_cpu_list", shared)):
        (d / name).write_text(f"{value}\n")


def test_caches_are_deduplicated_per_instance_and_llc_sums_sockets(tmp_path):
    # Two sockets of two CPUs: private L1/L2, one L3 per socket.
    for cpu in range(4):
        _cache(tmp_path, cpu, 0, 1, "Data", "32K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "1024K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "32768K", "0-1" if cpu < 2 else "2-3")
    levels = caches(tmp_path)
    assert [(c.level, c.type, c.size_bytes, c.instances) for c in levels] == [
        (1, "Data", 32 << 10, 4), (2, "Unified", 1 << 20, 4), (3, "Unified", 32 << 20, 2)]
    assert llc_bytes_total(levels) == 64 << 20
    assert llc_bytes_total([]) is None


def test_parse_size_suffix():
    assert parse_size_suffix("32K") == 32768
    assert parse_size_suffix("1M") == 1 << 20
    assert parse_size_suffix("512") == 512


def test_meminfo_and_numa_from_files(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:       1000 kB\nMemAvailable:    600 kB\n")
    assert meminfo(tmp_path / "meminfo") == {"MemTotal": 1024000, "MemAvailable": 614400}
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        d = tmp_path / "nodes" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {node} MemTotal:       2048 kB\n")
    nodes = numa_nodes(tmp_path / "nodes")
    assert [(n.node, n.cpus, n.memory_total_bytes) for n in nodes] == [
        (0, "0-3", 2 << 20), (1, "4-7", 2 << 20)]


def test_host_info_describes_this_machine():
    info = host_info()
    assert info.usable_cpus >= 1
    assert info.cpu_model
    assert info.as_dict()["packages"]["numba"]


def test_package_versions_name_whichever_cupy_wheel_is_installed(monkeypatch):
    class Dist:
        def __init__(self, name, version):
            self.metadata, self.version = {"Name": name}, version

    def installed(*dists):
        monkeypatch.setattr(system.metadata, "distributions", lambda: list(dists))
        return package_versions()["cupy"]

    assert installed(Dist("numpy", "2.4.6"), Dist("cupy-cuda13x", "14.2.0")) == \
        "cupy-cuda13x==14.2.0"
    assert installed(Dist("cupy-cuda12x", "13.3.0")) == "cupy-cuda12x==13.3.0"
    assert installed(Dist("numpy", "2.4.6")) is None


def test_cpuset_of_the_process_cgroup_v1_and_v2(tmp_path):
    root, proc = tmp_path / "cgroup", tmp_path / "self-cgroup"
    # cgroup v2: the job's own level does not say; its parent does.
    (root / "slurm" / "job_7").mkdir(parents=True)
    (root / "slurm" / "cpuset.cpus.effective").write_text("0-7,16-23\n")
    proc.write_text("0::/slurm/job_7\n")
    assert cpuset_cpus(proc, root) == 16
    # cgroup v1, inside a container whose path the namespace hides: the root's file.
    (root / "cpuset").mkdir()
    (root / "cpuset" / "cpuset.effective_cpus").write_text("2-5\n")
    proc.write_text("4:memory:/x\n3:cpuset:/docker/abc\n0::/\n")
    assert cpuset_cpus(proc, root) == 4
    proc.write_text("")
    assert cpuset_cpus(proc, root) is None


def test_transparent_hugepage_mode_is_the_bracketed_choice(tmp_path):
    enabled = tmp_path / "enabled"
    enabled.write_text("always [madvise] never\n")
    assert transparent_hugepages(enabled) == "madvise"
    enabled.write_text("[always] madvise never\n")
    assert transparent_hugepages(enabled) == "always"
    assert transparent_hugepages(tmp_path / "absent") is None


def test_numpy_says_whether_it_asks_for_huge_pages():
    from numpy._core import multiarray

    before = multiarray._set_madvise_hugepage(False)  # returns the previous setting
    try:
        assert numpy_asks_hugepages() is False
        multiarray._set_madvise_hugepage(True)
        assert numpy_asks_hugepages() is True
    finally:
        multiarray._set_madvise_hugepage(before)


def test_cpu_model_where_cpuinfo_hides_the_name(tmp_path, monkeypatch):
    """gVisor writes 'model name : unknown': the numbers (and LLVM's core name) stand in."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                       "model\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert system.cpu_model(cpuinfo) == "Intel(R) Xeon(R) Platinum 8480+"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                       "model\t\t: 143\nmodel name\t: unknown\ncache size\t: 8192 KB\n")
    monkeypatch.setattr(system, "_llvm_cpu_name", lambda: "sapphirerapids")
    assert system.cpu_model(cpuinfo) == "GenuineIntel family 6 model 143 (sapphirerapids)"
    monkeypatch.setattr(system, "_llvm_cpu_name", lambda: None)
    assert system.cpu_model(cpuinfo) == "GenuineIntel family 6 model 143 (core unknown)"


def test_cache_sizes_from_cpuid_where_sysfs_lists_none(monkeypatch):
    """gVisor's /sys has no cpu*/cache: glibc's sysconf (CPUID) gives one instance a level."""
    monkeypatch.setattr(system, "caches", lambda: [])
    monkeypatch.setattr(system.platform, "machine", lambda: "x86_64")
    answers = {191: 2 * 1024 * 1024, 194: 105 * 1024 * 1024}
    monkeypatch.setattr(system, "_glibc_sysconf", answers.get)
    levels, source = system.host_caches()
    assert source == "cpuid"
    assert [(c.level, c.size_bytes, c.instances) for c in levels] == [
        (2, 2 * 1024 * 1024, 1), (3, 105 * 1024 * 1024, 1)]
    assert system.llc_bytes_total(levels) == 105 * 1024 * 1024
    monkeypatch.setattr(system, "_glibc_sysconf", lambda name: None)
    assert system.host_caches() == ([], None)
    monkeypatch.setattr(system.platform, "machine", lambda: "aarch64")  # no such sysconf
    monkeypatch.setattr(system, "_glibc_sysconf", answers.get)
    assert system.host_caches() == ([], None)
    found = [system.CacheLevel(3, "Unified", 32, 2)]
    monkeypatch.setattr(system, "caches", lambda: found)
    assert system.host_caches() == (found, "sysfs")


def test_glibc_sysconf_answers_the_l3_size_getconf_does():
    import platform
    import subprocess

    if platform.libc_ver()[0] != "glibc" or platform.machine() != "x86_64":
        pytest.skip("glibc on x86_64 only")
    done = subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True, text=True)
    expected = int(done.stdout.strip()) if done.stdout.strip().isdigit() else 0
    assert system._glibc_sysconf(194) == (expected or None)


def test_gvisor_is_told_by_its_fixed_kernel_build_string():
    assert system.sandbox("#1 SMP Sun Jan 10 15:06:54 PST 2016", "4.4.0") == "gVisor"
    assert system.sandbox("#1 SMP Sun Jan 10 15:06:54 PST 2016", "4.19.0-gvisor") == "gVisor"
    assert system.sandbox("#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024",
                          "6.8.0-45-generic") is None
    assert system.host_info().sandbox == system.sandbox()


def test_under_hypervisor_reads_the_cpus_flag(tmp_path):
    from bwprof.system import under_hypervisor

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor avx512f\n")
    assert under_hypervisor(cpuinfo) is True
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu vme sse2 avx512f\n")  # bare metal
    assert under_hypervisor(cpuinfo) is False
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd\n")  # Arm: no such flag
    assert under_hypervisor(cpuinfo) is False
    assert under_hypervisor(tmp_path / "absent") is False


# -- the machine's identity (issue 34) ----------------------------------------------------------


def _dmi(root: Path, **files: str) -> Path:
    dmi = root / "dmi"
    dmi.mkdir()
    for name, text in files.items():
        (dmi / name).write_text(text + "\n")
    return dmi


def test_the_box_key_comes_from_the_machine_id_first_and_names_its_source(tmp_path):
    from bwprof.system import box_key, machine_identity

    dmi = _dmi(tmp_path, product_uuid="4C4C4544-0042-3510-8050-B4C04F4A4E32",
               product_serial="CZ2F4K1")
    (tmp_path / "machine-id").write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    found = machine_identity("Xeon", ("GPU-b", "GPU-a"), sys_dmi=dmi,
                             machine_id=tmp_path / "machine-id")
    assert found.box_source == "machine_id"
    assert found.box == box_key("machine_id", "3d1219c7c4c5404aaa1f6d2a48adfda4")
    assert len(found.box) == 12 and int(found.box, 16) >= 0
    assert found.dmi_uuid == "4C4C4544-0042-3510-8050-B4C04F4A4E32"
    assert found.dmi_serial == "CZ2F4K1" and found.gpu_uuids == ("GPU-a", "GPU-b")
    no_id = machine_identity("Xeon", sys_dmi=dmi, machine_id=tmp_path / "absent")
    assert no_id.box_source == "dmi_uuid" and no_id.box != found.box


def test_root_only_dmi_files_and_placeholders_are_no_identity(tmp_path, monkeypatch):
    from bwprof.system import machine_identity

    dmi = _dmi(tmp_path, product_uuid="03000200-0400-0500-0006-000700080009",
               product_serial="To Be Filled By O.E.M.")
    original = Path.read_text

    def root_only(self: Path, *args, **kwargs):
        if self.name == "product_serial":
            raise PermissionError(13, "Permission denied")
        return original(self, *args, **kwargs)

    (tmp_path / "machine-id").write_text("\n")  # an image's empty machine-id
    found = machine_identity("EPYC", ("GPU-1",), sys_dmi=dmi, machine_id=tmp_path / "machine-id")
    assert found.dmi_uuid is found.dmi_serial is found.machine_id is None
    assert found.box_source == "gpu_uuids"
    monkeypatch.setattr(Path, "read_text", root_only)
    bare = machine_identity("EPYC", sys_dmi=dmi, machine_id=tmp_path / "absent")
    assert bare.box is None and bare.box_source is None


def test_the_gpus_uuids_join_the_identity_once_the_gpus_are_probed(tmp_path):
    from dataclasses import replace

    from bwprof.schema.meta import GpusMeta
    from bwprof.system import machine_identity, with_gpus
    from tests.schema.builders import HOST, gpu

    gpus = GpusMeta(count=2, devices=(gpu(0, metadata={"uuid": "GPU-2"}),
                                      gpu(1, metadata={"uuid": "GPU-1"})))
    bare = replace(HOST, identity=machine_identity("CPU", sys_dmi=tmp_path / "none",
                                                   machine_id=tmp_path / "none"))
    probed = with_gpus(bare, gpus)
    assert probed.identity.gpu_uuids == ("GPU-1", "GPU-2")
    assert probed.identity.box_source == "gpu_uuids" and probed.box_label == f"vm#{probed.box}"
    (tmp_path / "mid").write_text("1" * 32)
    host = replace(HOST, identity=machine_identity("CPU", sys_dmi=tmp_path / "none",
                                                   machine_id=tmp_path / "mid"))
    assert with_gpus(host, gpus).box == host.box  # a host source keeps its key
    assert with_gpus(HOST, gpus) is HOST  # a host without an identity stays without


def test_host_info_records_an_identity_that_system_json_reads_back():
    from bwprof.schema.meta import HostInfo

    info = host_info()
    assert info.identity is not None and info.identity.cpu_model == info.cpu_model
    again = HostInfo.from_dict(info.as_dict())
    assert again.identity == info.identity and again.box_label == info.box_label
    old = {k: v for k, v in info.as_dict().items() if k != "identity"}
    assert HostInfo.from_dict(old).box is None and HostInfo.from_dict(old).box_label == (
        info.hostname)


# Catches (issue 37): a host name, /proc/cpuinfo or a sysfs file holding bytes that are not
# UTF-8 ends the run with a traceback (and a host name of that kind loses every row)
def test_bytes_that_are_not_utf8_from_the_machine_are_kept_escaped(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_bytes(b"processor\t: 0\nmodel name\t: EPYC \xff\xfe 9654\n"
                        b"flags\t\t: fpu hypervisor \xff\n")
    assert system.cpu_model(cpuinfo) == "EPYC \\xff\\xfe 9654"
    assert system.under_hypervisor(cpuinfo) is True
    _cache(tmp_path / "cpu", 0, 0, 3, "Unified", "32768K", "0")
    (tmp_path / "cpu" / "cpu0" / "cache" / "index0" / "type").write_bytes(b"Unified\xff\n")
    (tmp_path / "cpu" / "cpu0" / "topology").mkdir()
    (tmp_path / "cpu" / "cpu0" / "topology" / "thread_siblings_list").write_bytes(b"0,\xff1")
    assert [c.type for c in caches(tmp_path / "cpu")] == ["Unified\\xff"]
    assert system.core_siblings(0, tmp_path / "cpu") == frozenset({0})
    d = tmp_path / "nodes" / "node0"
    d.mkdir(parents=True)
    (d / "cpulist").write_bytes(b"0-3\xff\n")
    (d / "meminfo").write_bytes(b"Node 0 MemTotal:       2048 kB\n")
    assert [n.node for n in numa_nodes(tmp_path / "nodes")] == [0]
    monkeypatch.setattr(system.socket, "gethostname", lambda: "box\udcff\udcfe")
    monkeypatch.setattr(system.platform, "release", lambda: "6.8.0-\udcff")
    info = host_info()
    assert (info.hostname, info.kernel) == ("box\\xff\\xfe", "6.8.0-\\xff")
