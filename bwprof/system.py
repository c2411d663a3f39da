"""Host metadata: CPU, caches, memory, NUMA layout, OS and package versions.

Read from Linux's /proc and /sys without extra dependencies; every field degrades to None on
systems that lack it, so metadata never stops a run. The dataclasses it fills (`HostInfo`,
`CacheLevel`, `NumaNode`) are the data model's (`bwprof.schema.meta`), so the report reads
the same shape from system.json.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import socket
from importlib import metadata
from pathlib import Path

from bwprof.cpulist import parse_cpu_list
from bwprof.schema.meta import CacheLevel, GpusMeta, HostInfo, MachineIdentity, NumaNode
from bwprof.schema.text import decoded, printable

SYS_CPU = Path("/sys/devices/system/cpu")
SYS_NODE = Path("/sys/devices/system/node")
SYS_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

PACKAGES = ("numpy", "numba", "numba-cuda", "nvidia-ml-py", "pandas", "typer", "rich", "llvmlite",
            "threadpoolctl")


def parse_size_suffix(text: str) -> int:
    """Sizes as sysfs writes them: '32K', '512K', '32768K', '1M'."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not match:
        raise ValueError(f"unrecognised size {text!r}")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def _read(path: Path) -> str | None:
    """A /proc or sysfs file, stripped (bytes that are not UTF-8 escaped: `decoded`); None
    where it cannot be read."""
    try:
        return decoded(path.read_bytes()).strip()
    except OSError:
        return None


def usable_cpus() -> int:
    """CPUs this process may run on (affinity), which bounds the useful thread count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def cpuset_cpus(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> int | None:
    """CPUs the process's cgroup allows (a container's --cpuset-cpus, a Slurm job's cores);
    None where no cpuset can be read. Binding within them is the launcher's choice; the
    cpuset is the allocation's, so findings tell the two apart."""
    cpus = _cpuset_list("cpus", proc_cgroup, root)
    return len(cpus) if cpus else None


def cpuset_mems(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> str | None:
    """Memory nodes the process's cgroup cpuset allows (a container's --cpuset-mems, a
    scheduler's binding), as a list such as '0-1'; None where no cpuset can be read."""
    from bwprof.cpulist import format_cpu_list

    nodes = _cpuset_list("mems", proc_cgroup, root)
    return format_cpu_list(nodes) if nodes else None


def _cpuset_list(kind: str, proc_cgroup: Path, root: Path) -> frozenset[int] | None:
    """The effective `cpus` or `mems` of the nearest cgroup level that says (v2's
    cpuset.<kind>.effective, v1's cpuset.effective_<kind>)."""
    candidates: list[Path] = []
    for line in (_read(proc_cgroup) or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = Path(path.lstrip("/"))
        if hierarchy == "0" and not controllers:  # cgroup v2: the nearest level that says
            for level in (relative, *relative.parents):
                candidates.append(root / level / f"cpuset.{kind}.effective")
        elif "cpuset" in controllers.split(","):  # cgroup v1
            for level in (relative, *relative.parents):
                candidates.append(root / "cpuset" / level / f"cpuset.effective_{kind}")
    for candidate in candidates:
        found = parse_cpu_list(_read(candidate))
        if found:
            return found
    return None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name; where /proc/cpuinfo hides it (gVisor writes 'unknown'), the
    vendor, family and model numbers and LLVM's name for the core, so that runs on different
    CPUs never align in `compare` as one model."""
    text = _read(cpuinfo) or ""

    def field(key: str) -> str | None:
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        value = match.group(1).strip() if match else ""
        return value if value and value.lower() != "unknown" else None

    for key in ("model name", "Model Name", "Processor", "cpu model"):
        if name := field(key):
            return name
    vendor, family, model = field("vendor_id"), field("cpu family"), field("model")
    if vendor and family and model:
        return f"{vendor} family {family} model {model} ({_llvm_cpu_name() or 'core unknown'})"
    return printable(platform.processor() or platform.machine()) or "unknown CPU"


def _llvm_cpu_name() -> str | None:
    """LLVM's name for this core ('sapphirerapids'), read from CPUID by llvmlite (Numba's)."""
    try:
        from llvmlite import binding

        name = binding.get_host_cpu_name()
    except Exception:  # llvmlite missing or broken: the numbers alone still tell CPUs apart
        return None
    return name if name and name != "generic" else None


def _topology() -> tuple[int | None, int | None]:
    cores: set[tuple[str, str]] = set()
    packages: set[str] = set()
    for cpu in SYS_CPU.glob("cpu[0-9]*"):
        package = _read(cpu / "topology" / "physical_package_id")
        core = _read(cpu / "topology" / "core_id")
        if package is None or core is None:
            continue
        packages.add(package)
        cores.add((package, core))
    return (len(cores) or None, len(packages) or None)


def caches(sys_cpu: Path = SYS_CPU) -> list[CacheLevel]:
    """Every data or unified cache level, with its instance count (deduplicated by CPU sharing)."""
    seen: dict[tuple[int, str], set[tuple[str, int]]] = {}
    for index in sys_cpu.glob("cpu[0-9]*/cache/index[0-9]*"):
        level, kind = _read(index / "level"), _read(index / "type")
        size, shared = _read(index / "size"), _read(index / "shared_cpu_list")
        if level is None or kind is None or size is None or shared is None:
            continue
        if kind == "Instruction":
            continue
        try:
            size_bytes = parse_size_suffix(size)
        except ValueError:
            continue
        seen.setdefault((int(level), kind), set()).add((shared, size_bytes))
    return [
        CacheLevel(level, kind, max(size for _, size in instances), len(instances))
        for (level, kind), instances in sorted(seen.items())
    ]


SC_CACHE_SIZES = ((2, 191), (3, 194))
"""glibc's sysconf names _SC_LEVEL2_CACHE_SIZE and _SC_LEVEL3_CACHE_SIZE (x86), which it
answers from CPUID."""


def _glibc_sysconf(name: int) -> int | None:
    """glibc's sysconf(name); None elsewhere (musl numbers its names differently)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.sysconf.restype = ctypes.c_long
        value = int(libc.sysconf(ctypes.c_int(name)))
    except (OSError, AttributeError):
        return None
    return value if value > 0 else None


def cpuid_caches() -> list[CacheLevel]:
    """L2 and L3 sizes as CPUID tells them (through glibc), for a system whose /sys lists no
    caches (gVisor): one instance of each, since how many the host has is not told."""
    if platform.machine() != "x86_64":  # glibc answers these from CPUID on x86 only
        return []
    return [CacheLevel(level, "Unified", size, 1) for level, name in SC_CACHE_SIZES
            if (size := _glibc_sysconf(name))]


def host_caches() -> tuple[list[CacheLevel], str | None]:
    """The cache levels and where they came from: 'sysfs' (every instance), 'cpuid' (one
    instance a level: all of the last level may be more) or None (unknown)."""
    levels = caches()
    if levels:
        return levels, "sysfs"
    levels = cpuid_caches()
    return levels, ("cpuid" if levels else None)


def llc_bytes_total(levels: list[CacheLevel]) -> int | None:
    """Bytes of last-level cache across all of its instances (all sockets / CCXs)."""
    if not levels:
        return None
    top = max(c.level for c in levels)
    return sum(c.size_bytes * c.instances for c in levels if c.level == top)


def meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    text = _read(path) or ""
    values = {}
    for name, kib in re.findall(r"^(\w+):\s+(\d+) kB$", text, re.MULTILINE):
        values[name] = int(kib) * 1024
    return values


def memory_available_bytes() -> int | None:
    return meminfo().get("MemAvailable")


def core_siblings(cpu: int, sys_cpu: Path = SYS_CPU) -> frozenset[int]:
    """The CPUs sharing `cpu`'s core (its SMT siblings, itself included): they share its L1,
    L2 and load ports. Just {cpu} where sysfs does not say."""
    try:
        text = decoded((sys_cpu / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_bytes())
    except OSError:
        return frozenset({cpu})
    return (parse_cpu_list(text) or frozenset()) | {cpu}


def numa_nodes(sys_node: Path = SYS_NODE) -> list[NumaNode]:
    nodes = []
    for node_dir in sorted(sys_node.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        # Per-node meminfo lines read "Node 0 MemTotal:  24563452 kB".
        match = re.search(r"MemTotal:\s+(\d+) kB", _read(node_dir / "meminfo") or "")
        node_total = int(match.group(1)) * 1024 if match else None
        cpus = _read(node_dir / "cpulist") or ""
        nodes.append(NumaNode(int(node_dir.name[4:]), cpus, node_total))
    return nodes


def package_versions() -> dict[str, str | None]:
    """Versions of the packages that shape a measurement; any installed CuPy wheel counts."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cupy = sorted(
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in metadata.distributions()
        if _distribution_key(dist).startswith("cupy")
    )
    versions["cupy"] = ", ".join(cupy) or None
    versions["numpy-blas"] = numpy_blas()
    return versions


def _distribution_key(dist: metadata.Distribution) -> str:
    """A distribution's name, lower case, from its dist-info folder's name where the
    standard library reads it there (no METADATA file parsed: parsing every installed
    package's took 14 ms of each run), else from its metadata."""
    key = getattr(dist, "_normalized_name", None)  # PathDistribution, Python 3.10+
    return str(key if key else dist.metadata["Name"] or "").lower()


def numpy_blas() -> str | None:
    """The BLAS NumPy was built with, as it records it (gemm_host's library): name, version
    and OpenBLAS's configuration line (its threading and kernel target)."""
    try:
        import numpy as np

        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # an older NumPy without mode="dicts", or no record
        return None
    parts = [str(blas.get(key) or "") for key in ("name", "version", "openblas configuration")]
    return " ".join(p for p in parts if p) or None


def transparent_hugepages(path: Path = SYS_THP) -> str | None:
    """The bracketed choice of /sys/kernel/mm/transparent_hugepage/enabled; None if absent."""
    match = re.search(r"\[(\w+)\]", _read(path) or "")
    return match.group(1) if match else None


def numpy_asks_hugepages() -> bool | None:
    """Whether NumPy madvises huge pages for its large arrays (its default on Linux)."""
    try:
        from numpy._core import multiarray
    except ImportError:  # NumPy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    getter = getattr(multiarray, "_get_madvise_hugepage", None)
    return bool(getter()) if getter is not None else None


GVISOR_KERNEL_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"
"""The build string gVisor's kernel gives (`uname -v`), fixed in its syscall table."""


def under_hypervisor(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU says it runs under a hypervisor (x86's `hypervisor` flag, CPUID
    leaf 1 ECX bit 31): then the PCIe tree in sysfs is the one the hypervisor shows, not the
    host's. False where the flag is not given (bare metal; Arm, which has no such flag)."""
    text = _read(cpuinfo) or ""
    match = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return match is not None and "hypervisor" in match.group(1).split()


def sandbox(version: str | None = None, release: str | None = None) -> str | None:
    """'gVisor' under gVisor's user-space kernel, where CPU affinity is a stub, /sys lists no
    caches and host memory and GPU calls pass through the sandbox: figures from it compare
    with other gVisor runs. None on a plain kernel."""
    version = platform.version() if version is None else version
    release = platform.release() if release is None else release
    if version == GVISOR_KERNEL_VERSION or "gvisor" in release.lower():
        return "gVisor"
    return None


def host_arrays_get_huge_pages(mode: str | None, numpy_asks: bool | None) -> bool:
    """Whether the kernel gives NumPy's large arrays 2 MiB pages (where it has them free)."""
    return mode == "always" or (mode == "madvise" and bool(numpy_asks))


SYS_DMI = Path("/sys/class/dmi/id")
MACHINE_ID = Path("/etc/machine-id")
BOX_DIGITS = 12
PLACEHOLDERS = re.compile(
    r"^(?:|0+|f+|none|n/?a|default string|not specified|not settable|not applicable|"
    r"system serial number|to be filled by o\.?e\.?m\.?|0123456789|"
    r"03000200-0400-0500-0006-000700080009)$")
"""Values firmware writes where nobody set one (many boards share them): never an identity."""


def _identifier(path: Path) -> str | None:
    """A DMI or machine-id value, or None where unreadable (product_uuid and product_serial
    are root-only on most distributions: PermissionError is the common case) or a
    placeholder."""
    try:
        text = path.read_text(errors="replace").strip()
    except (OSError, ValueError):
        return None
    return None if PLACEHOLDERS.match(text.replace("-", "").lower()) or PLACEHOLDERS.match(
        text.lower()) else text


def box_key(source: str, value: str) -> str:
    """The box key: the first BOX_DIGITS hex digits of SHA-256 over '<source>:<value>'."""
    return hashlib.sha256(f"{source}:{value}".encode()).hexdigest()[:BOX_DIGITS]


def _identity(dmi_uuid: str | None, dmi_serial: str | None, machine_id: str | None,
              gpu_uuids: tuple[str, ...], cpu: str | None) -> MachineIdentity:
    """The identity of these sources, its box key from the first one read (the order of
    `machine_identity`)."""
    uuids = tuple(sorted({u for u in gpu_uuids if u}))
    candidates = (("machine_id", machine_id), ("dmi_uuid", dmi_uuid),
                  ("dmi_serial", dmi_serial), ("gpu_uuids", ",".join(uuids)))
    source, value = next(((s, v) for s, v in candidates if v), (None, None))
    return MachineIdentity(box=box_key(source, value) if source and value else None,
                           box_source=source, dmi_uuid=dmi_uuid, dmi_serial=dmi_serial,
                           machine_id=machine_id, gpu_uuids=uuids, cpu_model=cpu)


def machine_identity(cpu: str | None = None, gpu_uuids: tuple[str, ...] = (),
                     sys_dmi: Path = SYS_DMI, machine_id: Path = MACHINE_ID) -> MachineIdentity:
    """The machine's identity: every source readable, and the box key from the first of,
    in this order: /etc/machine-id (the OS installation's; every user may read it, so a
    run under sudo and one without get the same key), the SMBIOS system UUID (the board's,
    or a VM's own; root-only on most distributions: a container without a machine-id run
    as root), its serial, the GPUs' UUIDs (sorted, joined). With none of them the box is
    None and the run is told apart by host name only, as runs before it were."""
    return _identity(_identifier(sys_dmi / "product_uuid"),
                     _identifier(sys_dmi / "product_serial"), _identifier(machine_id),
                     gpu_uuids, cpu)


def with_gpus(host: HostInfo, gpus: GpusMeta) -> HostInfo:
    """`host` with its identity holding the GPUs' UUIDs (NVML's, in their metadata); the
    box key follows from them only where no host source was read."""
    from dataclasses import replace

    identity = host.identity
    uuids = tuple(str(d.metadata["uuid"]) for d in gpus.devices if d.metadata.get("uuid"))
    if identity is None or not uuids:
        return host
    return replace(host, identity=_identity(identity.dmi_uuid, identity.dmi_serial,
                                            identity.machine_id, uuids, identity.cpu_model))


def host_info() -> HostInfo:
    from bwprof.cpulist import format_cpu_list
    from bwprof.host import mempolicy
    from bwprof.host.smbios import ddr_peak, read_memory_devices

    policy, policy_source = mempolicy.process_policy()
    mems, cpus = mempolicy.mems_allowed(), mempolicy.cpus_allowed()

    levels, cache_source = host_caches()
    cores, sockets = _topology()
    model = cpu_model()
    mem = meminfo()
    modules, unreadable = read_memory_devices()
    peak, peak_note = ddr_peak(modules) if unreadable is None else (None, unreadable)
    return HostInfo(
        hostname=printable(socket.gethostname()),  # not UTF-8: escaped, as `\\xff`
        cpu_model=model,
        logical_cpus=os.cpu_count() or 1,
        usable_cpus=usable_cpus(),
        cpuset_cpus=cpuset_cpus(),
        physical_cores=cores,
        sockets=sockets,
        caches=tuple(levels),
        llc_bytes_total=llc_bytes_total(levels),
        memory_total_bytes=mem.get("MemTotal"),
        memory_available_bytes=mem.get("MemAvailable"),
        numa_nodes=tuple(numa_nodes()),
        memory_modules=tuple(m.as_dict() for m in modules),
        ddr_peak_gbps=peak,
        ddr_peak_note=peak_note,
        os=printable(platform.platform()),
        kernel=printable(platform.release()),
        python=platform.python_version(),
        packages=package_versions(),
        transparent_hugepages=transparent_hugepages(),
        numpy_asks_hugepages=numpy_asks_hugepages(),
        cache_source=cache_source,
        sandbox=sandbox(),
        memory_policy=policy.text() if policy is not None else None,
        memory_policy_source=policy_source,
        mems_allowed=format_cpu_list(mems) if mems else None,
        cpus_allowed=format_cpu_list(cpus) if cpus else None,
        cpuset_mems=cpuset_mems(),
        identity=machine_identity(model),
    )
