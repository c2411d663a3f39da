"""The kernel's NUMA memory policy: read the process's, ask for a node while a buffer is
allocated, and say when something else decides where its pages go.

CPU affinity alone only makes a first touch *likely* to land on the CPUs' node; the memory
policy is what the kernel's page allocator obeys. So host buffers for a GPU are allocated
with the calling thread's policy set to MPOL_PREFERRED on the GPU's node (set_mempolicy is
per thread; the previous policy is put back afterwards). Preferred, not MPOL_BIND: a bound
allocation on a node short of memory ends in the OOM killer, a preferred one falls back to
another node, which the `move_pages` read-back (`bwprof.host.placement`) then finds and
reports.

A policy the process inherited (`numactl --membind/--interleave/--preferred`, a launcher's
binding) or a cpuset whose memory nodes leave out the GPU's (a container's `--cpuset-mems`,
a Slurm job's cgroup) is the operator's choice: bwprof does not undo it, it says that it
overrides the node asked for (`overrides`), and the row is flagged `numa_unverified`.
"""

from __future__ import annotations

import ctypes
import platform
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bwprof.cpulist import format_cpu_list, parse_cpu_list
from bwprof.schema.text import decoded

SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {"mbind": 237, "set_mempolicy": 238, "get_mempolicy": 239},
    "aarch64": {"mbind": 235, "get_mempolicy": 236, "set_mempolicy": 237},
}
"""System call numbers: x86_64's table, and the generic one aarch64 uses (as
`placement.MOVE_PAGES_SYSCALL`)."""

MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE, MPOL_LOCAL = 0, 1, 2, 3, 4
MPOL_PREFERRED_MANY, MPOL_WEIGHTED_INTERLEAVE = 5, 6
MODES = {MPOL_DEFAULT: "default", MPOL_PREFERRED: "preferred", MPOL_BIND: "bind",
         MPOL_INTERLEAVE: "interleave", MPOL_LOCAL: "local",
         MPOL_PREFERRED_MANY: "preferred_many", MPOL_WEIGHTED_INTERLEAVE: "weighted_interleave"}
"""linux/mempolicy.h's modes, by the names bwprof records."""
MODE_FLAGS = (1 << 15) | (1 << 14) | (1 << 13)
"""MPOL_F_STATIC_NODES, MPOL_F_RELATIVE_NODES, MPOL_F_NUMA_BALANCING: or-ed into the mode
get_mempolicy returns."""
MAX_NODES = 1024
"""Bits in the node masks passed to the kernel (CONFIG_NODES_SHIFT is at most 10)."""
_WORD_BITS = 64

SYS_NODE = Path("/sys/devices/system/node")
PROC_STATUS = Path("/proc/self/status")
PROC_NUMA_MAPS = Path("/proc/self/numa_maps")
NUMA_MAPS_MODES = {"default": "default", "prefer": "preferred", "bind": "bind",
                   "interleave": "interleave", "local": "local",
                   "prefer (many)": "preferred_many",
                   "weighted interleave": "weighted_interleave"}
"""numa_maps' spelling of each mode (mpol_to_str) -> bwprof's."""


@dataclass(frozen=True)
class Policy:
    """A memory policy: its mode's name (MODES) and its nodes (empty for default/local)."""

    mode: str
    nodes: frozenset[int] = frozenset()
    raw_mode: int | None = None
    """The mode number with its flags, as get_mempolicy gave it (to put it back)."""

    def text(self) -> str:
        """'default', 'bind:0', 'interleave:0-3': numa_maps' spelling."""
        return f"{self.mode}:{format_cpu_list(self.nodes)}" if self.nodes else self.mode

    @property
    def is_default(self) -> bool:
        return self.mode in ("default", "local")


def _syscall(name: str, *args: object) -> int | None:
    """`syscall(number, *args)`: 0 or more on success, a negative errno on failure; None
    where this platform's number is not known (32-bit, another architecture)."""
    number = SYSCALLS.get(platform.machine(), {}).get(name)
    if number is None or sys.maxsize <= 2**32:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *args)
    return int(result) if result >= 0 else -ctypes.get_errno()


def _mask(nodes: frozenset[int]) -> ctypes.Array[ctypes.c_ulong]:
    words = (ctypes.c_ulong * (MAX_NODES // _WORD_BITS))()
    for node in nodes:
        words[node // _WORD_BITS] |= 1 << (node % _WORD_BITS)
    return words


def _nodes(words: ctypes.Array[ctypes.c_ulong]) -> frozenset[int]:
    return frozenset(i * _WORD_BITS + bit for i, word in enumerate(words)
                     for bit in range(_WORD_BITS) if (int(word) >> bit) & 1)


def get_policy() -> Policy | None:
    """The calling thread's policy (get_mempolicy with no address: the task's, which a
    process inherits through exec from numactl); None where the kernel will not say (no
    NUMA support: ENOSYS; a seccomp filter; an unknown platform)."""
    mode = ctypes.c_int(0)
    words = _mask(frozenset())
    if _syscall("get_mempolicy", ctypes.byref(mode), words, ctypes.c_ulong(MAX_NODES),
                None, ctypes.c_ulong(0)) != 0:
        return None
    raw = int(mode.value)
    name = MODES.get(raw & ~MODE_FLAGS)
    if name is None:
        return None
    return Policy(name, frozenset() if name in ("default", "local") else _nodes(words), raw)


def set_policy(mode: int, nodes: frozenset[int]) -> bool:
    """set_mempolicy(mode, nodes) for the calling thread; whether the kernel took it."""
    mask = _mask(nodes) if nodes else None
    return _syscall("set_mempolicy", ctypes.c_int(mode), mask,
                    ctypes.c_ulong(MAX_NODES if nodes else 0)) == 0


def _status_list(key: str, status: Path) -> frozenset[int] | None:
    try:
        text = decoded(status.read_bytes())  # not UTF-8 (a process name): escaped
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return parse_cpu_list(value)
    return None


def mems_allowed(status: Path = PROC_STATUS) -> frozenset[int] | None:
    """The memory nodes this process may allocate on (its cpuset's, /proc/self/status
    `Mems_allowed_list`); None where it cannot be read."""
    return _status_list("Mems_allowed_list", status)


def cpus_allowed(status: Path = PROC_STATUS) -> frozenset[int] | None:
    """The CPUs this process may run on when it started (`Cpus_allowed_list`: taskset,
    numactl --cpunodebind, a cpuset); None where unreadable."""
    return _status_list("Cpus_allowed_list", status)


def numa_maps_policy(path: Path = PROC_NUMA_MAPS) -> Policy | None:
    """The policy most of this process's mappings show in /proc/self/numa_maps: the fallback
    where get_mempolicy is refused. Recent kernels print a mapping without a policy of its
    own as 'default' whatever the task's is, so 'default' from here is weaker evidence than
    from get_mempolicy; a 'bind:0' or 'interleave:0-1' is what it says."""
    try:
        text = decoded(path.read_bytes())  # a mapped file's name may be any bytes
    except OSError:
        return None
    seen: Counter[str] = Counter()
    for line in text.splitlines():
        fields = line.split(None, 2)
        if len(fields) >= 2:
            seen[fields[1]] += 1
    if not seen:
        return None
    word = seen.most_common(1)[0][0]
    name, _, nodes = word.partition(":")
    mode = NUMA_MAPS_MODES.get(name.split("=")[0])
    if mode is None:
        return None
    return Policy(mode, parse_cpu_list(nodes) or frozenset())


def process_policy() -> tuple[Policy | None, str | None]:
    """The process's memory policy and where it was read: 'get_mempolicy', 'numa_maps', or
    (None, None) where neither says."""
    policy = get_policy()
    if policy is not None:
        return policy, "get_mempolicy"
    policy = numa_maps_policy()
    return (policy, "numa_maps") if policy is not None else (None, None)


def overrides(node: int, policy: Policy | None,
              allowed: frozenset[int] | None) -> str | None:
    """Why memory asked of NUMA node `node` will not (or may not) land there, given the
    process's policy and the nodes its cpuset allows; None where nothing stands in the way."""
    if allowed is not None and node not in allowed:
        return (f"NUMA node {node} is outside this process's memory nodes (Mems_allowed "
                f"{format_cpu_list(allowed)}: a cpuset, the container's or the scheduler's)")
    if policy is None or policy.is_default:
        return None
    if policy.mode in ("bind", "preferred_many") and node in policy.nodes:
        return None  # the node is among those allowed: affinity and read-back decide
    if policy.mode == "preferred" and policy.nodes == {node}:
        return None
    return (f"the process's memory policy {policy.text()} (numactl --membind/--interleave/"
            f"--preferred or a launcher's binding) overrides NUMA node {node}")


@dataclass(frozen=True)
class Placement:
    """What asking for a node did: whether the policy was set (`applied`), and why the node
    cannot be had (`override`), or None."""

    applied: bool
    override: str | None = None


@contextmanager
def preferred_node(node: int | None) -> Iterator[Placement]:
    """Run the block with the calling thread's memory policy MPOL_PREFERRED on `node`, then
    put the previous policy back. An inherited policy or cpuset that overrides the node is
    left as it is and named (`Placement.override`); where the kernel cannot tell or refuses,
    or does not list the node, nothing changes (`applied` False)."""
    if node is None or node < 0 or not (SYS_NODE / f"node{node}").is_dir():
        yield Placement(False)  # a node this kernel does not list cannot be asked for
        return
    current = get_policy()
    reason = overrides(node, current, mems_allowed())
    if current is None or reason is not None:
        yield Placement(False, reason)
        return
    if not set_policy(MPOL_PREFERRED, frozenset({node})):
        yield Placement(False)
        return
    try:
        yield Placement(True)
    finally:
        raw = current.raw_mode if current.raw_mode is not None else MPOL_DEFAULT
        set_policy(raw, current.nodes)


def describe_binding(policy: Policy | None, source: str | None, mems: frozenset[int] | None,
                     nodes: frozenset[int], cpus: frozenset[int] | None,
                     logical_cpus: int | None) -> str:
    """One line for `bwprof info`: the process's memory policy, its memory nodes and CPUs,
    and whether any of them binds it narrower than the machine."""
    parts = [f"memory policy {policy.text()} ({source})" if policy is not None
             else "memory policy unknown (get_mempolicy refused, numa_maps unreadable)"]
    if mems is not None:
        parts.append(f"memory nodes {format_cpu_list(mems)} allowed")
    if cpus is not None:
        parts.append(f"CPUs {format_cpu_list(cpus)} allowed")
    bound = []
    if policy is not None and not policy.is_default:
        bound.append(f"policy {policy.text()}")
    if mems is not None and nodes and not nodes <= mems:
        bound.append(f"memory nodes {format_cpu_list(mems)} of {format_cpu_list(nodes)}")
    if cpus is not None and logical_cpus and len(cpus) < logical_cpus:
        bound.append(f"{len(cpus)} of {logical_cpus} CPUs")
    if bound:
        parts.append("bound by " + ", ".join(bound) + ": GPU host buffers off their GPU's "
                     "node are flagged numa_unverified")
    return "; ".join(parts)
