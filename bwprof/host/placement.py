"""Where pages really lie, and how large they are, read back from the kernel.

First touch on a node's CPUs asks for the node's memory; it does not guarantee it. With the
kernel's default zone_reclaim_mode 0, a node short of free memory (page cache counts as used)
silently gives pages from another node, and a row that claims one node would measure two:
move_pages(2) in query mode says where sampled pages are. Likewise asking for transparent huge
pages does not guarantee them (fragmented memory gives 4 KiB pages), and page size moves a
STREAM figure by several percent: /proc/self/smaps says how much of the arrays got them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

MOVE_PAGES_SYSCALL = {"x86_64": 279, "aarch64": 239}
"""move_pages' system call number: x86_64's table, and the generic one aarch64 uses."""
SAMPLE_PAGES = 256
"""Pages read back per array, spread evenly over it."""
PLACED_SHARE = 0.9
"""Share of sampled pages that must lie on a node for a row to claim that node."""


def _move_pages(addresses: list[int]) -> list[int] | None:
    """Each address's node (negative errno for a page not present); None where the kernel or
    platform cannot tell."""
    number = MOVE_PAGES_SYSCALL.get(platform.machine())
    if number is None or sys.maxsize <= 2**32 or not addresses:  # 32-bit: another table
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    count = len(addresses)
    pages = (ctypes.c_void_p * count)(*addresses)
    status = (ctypes.c_int * count)()
    # move_pages(pid 0 = this process, count, pages, nodes NULL = only report, status, flags)
    if libc.syscall(ctypes.c_long(number), ctypes.c_long(0), ctypes.c_ulong(count), pages, None,
                    status, ctypes.c_long(0)) != 0:
        return None  # ENOSYS on a kernel without NUMA, EPERM under a seccomp filter, ...
    return list(status)


def node_share(arrays: Sequence[np.ndarray], node: int,
               samples: int = SAMPLE_PAGES) -> float | None:
    """The share (0 to 1) of sampled pages of `arrays` (contiguous) that lie on `node`; None
    where this system cannot say. Pages never touched count as elsewhere; pages the kernel
    will not report (a driver's mapping: EFAULT) count neither way."""
    page = os.sysconf("SC_PAGE_SIZE")
    addresses = []
    for array in arrays:
        if not array.flags.contiguous:
            raise ValueError("node_share reads contiguous arrays only")
        if array.nbytes == 0:
            continue
        base, count = array.ctypes.data, min(samples, -(-array.nbytes // page))
        step = array.nbytes / count
        addresses += [(base + int(i * step)) // page * page for i in range(count)]
    nodes = _move_pages(addresses)
    if nodes is None:
        return None
    known = [found for found in nodes if found >= 0 or found == -errno.ENOENT]
    return sum(found == node for found in known) / len(known) if known else None


SMAPS = Path("/proc/self/smaps")
HUGE_SHARE = 0.9
"""Below this share of the arrays in huge pages, where the kernel should give them, a DDR row
says so: its figure is a few percent lower than the box can do."""
HUGE_CHECK_MIN_BYTES = 64 << 20
"""Arrays this large or larger are checked: only whole aligned 2 MiB spans can be huge pages,
so a smaller array's unaligned ends alone could bring its share under HUGE_SHARE."""


def huge_page_share(arrays: Sequence[np.ndarray], smaps: Path = SMAPS) -> float | None:
    """The share (0 to 1) of the arrays' bytes in transparent huge pages, from the
    AnonHugePages of the mappings that hold them (pro rata where a mapping holds more than
    the arrays); None where smaps cannot be read (`backing_pages` reads it)."""
    return backing_pages(arrays, smaps).huge_share


THP_SIZE_FILE = Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
DEFAULT_THP_BYTES = 2 << 20


def thp_bytes(path: Path = THP_SIZE_FILE) -> int:
    """The size of one transparent huge page (2 MiB on x86_64 and 4 KiB-page arm64)."""
    try:
        return int(path.read_text().strip()) or DEFAULT_THP_BYTES
    except (OSError, ValueError):
        return DEFAULT_THP_BYTES


@dataclass(frozen=True)
class Pages:
    """The pages backing a buffer, as smaps tells: the size most of it is in (None where it
    cannot be read), the share in transparent huge pages, and what a note says of them."""

    page_bytes: int | None
    huge_share: float | None
    description: str


SHARED_ANONYMOUS = "/dev/zero (deleted)"
"""How smaps names shared anonymous memory (mmap(-1) without MAP_PRIVATE): shmem, whose
huge pages follow `shmem_enabled`, not the THP mode."""
HUGE_FIELDS = ("AnonHugePages:", "ShmemPmdMapped:")
_HEX_DIGITS = frozenset("0123456789abcdef")
"""A mapping's line starts with its start address in lower-case hex; its field lines start
with a capitalised name (Size:, KernelPageSize:, ...)."""


def _is_anonymous(path: str) -> bool:
    """Anonymous memory: no path, a bracketed name ([heap], [anon:...]) or shared anonymous
    memory; anything else (a file, a driver's device) is not."""
    return (not path or path == SHARED_ANONYMOUS
            or (path.startswith("[") and path not in ("[vvar]", "[vdso]")))


SMAPS_CHUNK = 1 << 16
"""Bytes of smaps asked for at a time: the kernel makes the text as it is read."""


def _lines(handle: BinaryIO) -> Iterator[str]:
    """The lines of a file read in chunks, as text (a mapped file's name that is not UTF-8
    keeps its bytes as surrogates)."""
    pending = b""
    while chunk := handle.read(SMAPS_CHUNK):
        *whole, pending = (pending + chunk).split(b"\n")
        yield from (line.decode(errors="surrogateescape") for line in whole)
    if pending:
        yield pending.decode(errors="surrogateescape")


def _scan(lines: Iterator[str], ranges: list[tuple[int, int]]
          ) -> tuple[int, float, set[int], bool] | None:
    """From smaps' lines, for the mappings that hold any of `ranges`: the bytes of the
    ranges they hold, their huge-page bytes (pro rata), their kernel page sizes and whether
    any is a driver's; None where there are no lines. Stops at the first mapping above the
    ranges."""
    until = max(end for _, end in ranges)
    held, huge, kernel_pages, driver = 0, 0.0, set(), False
    mapping: tuple[int, int] | None = None
    overlap = 0
    read_any = False
    for line in lines:
        read_any = True
        if not overlap and line[:1] not in _HEX_DIGITS:
            continue  # a field line of a mapping that holds none of the arrays (most lines)
        fields = line.split()
        head = fields[0] if fields else ""
        if "-" in head and not head.endswith(":"):  # "start-end perms offset dev inode path"
            start, _, end = head.partition("-")
            try:
                mapping = (int(start, 16), int(end, 16))
            except ValueError:
                mapping = None
                continue
            if mapping[0] >= until:
                break  # this mapping and every later one lie above the arrays
            overlap = sum(max(0, min(e, mapping[1]) - max(s, mapping[0])) for s, e in ranges)
            held += overlap
            if overlap and not _is_anonymous(" ".join(fields[5:])):
                driver = True
        elif not overlap or mapping is None:
            continue
        elif head == "KernelPageSize:":
            kernel_pages.add(int(fields[1]) * 1024)
        elif head in HUGE_FIELDS:
            huge += int(fields[1]) * 1024 * overlap / (mapping[1] - mapping[0])
    return (held, huge, kernel_pages, driver) if read_any else None


def backing_pages(arrays: Sequence[np.ndarray], smaps: Path | None = None) -> Pages:
    """The pages of the mappings holding `arrays`: a hugetlbfs mapping's own page size,
    anonymous memory's base pages or transparent huge pages (AnonHugePages, pro rata as
    `huge_page_share` counts them, and shmem's for shared anonymous memory); a driver's
    mapping (cudaHostAlloc's pinned memory maps a device file) tells nothing true of its
    pages, so its size stays unknown.

    smaps lists mappings by address, and the kernel walks each one's page tables as it is
    read, so it is read only up to the end of the arrays: a process's large arrays lie below
    its libraries and thread stacks, and the rest (some 20,000 lines once pandas, numba and
    matplotlib are loaded) would cost ten times the part read."""
    ranges = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays if a.nbytes]
    total = sum(end - start for start, end in ranges)
    scanned = None
    if total:
        try:
            with open(smaps or SMAPS, "rb", buffering=0) as handle:
                scanned = _scan(_lines(handle), ranges)
        except OSError:
            pass
    if scanned is None:
        return Pages(None, None, "page size not read back (/proc/self/smaps unreadable)")
    held, huge, kernel_pages, driver = scanned
    base = os.sysconf("SC_PAGE_SIZE")
    large = max(kernel_pages, default=base)
    if large > base:  # hugetlbfs (its file is named, as a driver's is): all that size
        return Pages(large, None, f"{large // 1024} KiB hugetlbfs pages")
    if not held or driver:
        return Pages(None, None, "page size not read back (a driver's mapping)")
    share = min(1.0, huge / total)
    thp = thp_bytes()
    if share >= HUGE_SHARE:
        return Pages(thp, share, f"{thp >> 20} MiB transparent huge pages")
    if share > 0.05:
        return Pages(base, share, f"{base // 1024} KiB pages, {share:.0%} in "
                                  f"{thp >> 20} MiB huge pages")
    return Pages(base, share, f"{base // 1024} KiB pages")
