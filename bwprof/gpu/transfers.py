"""Copy cases: host<->device (pinned, pageable, both ways), within a device, every GPU at once,
and GPU<->GPU. Each function owns the loop for one job and returns raw per-op times.

Copies are validated after timing: the source holds a non-trivial byte pattern and the
destination, zeroed first, must hold exactly that pattern afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from bwprof.casespec import CaseSpec
from bwprof.cpulist import cpu_affinity
from bwprof.gpu.backend import Work
from bwprof.gpu.buffers import (
    BufferPool,
    device_mismatches,
    fill_pattern,
    host_mismatches,
    upload_pattern,
)
from bwprof.gpu.devices import GpuDevice, host_ceiling
from bwprof.gpu.job import CaseRun
from bwprof.gpu.sampling import Sampled, take_samples
from bwprof.measurement import Measurement, NotRun, join_notes
from bwprof.pci import same_device


def _problem(mismatches: int, nbytes: int, what: str) -> str:
    return f"validation failed: {mismatches} of {nbytes} bytes of {what} differ" if mismatches \
        else ""


INTERFERING_FACTOR = 2
"""Operations an interfering stream issues per measured one (nvbandwidth doubles the
interfering copies' sizes): it runs past the measured copy's end, so no part of the measured
copy runs alone."""
CONTENDED_NOTE = "interfering copies doubled"


def contended(backend: Any, makers: Sequence[Callable[[int], Work]], sampled: Sampled,
              samples: int) -> list[Sampled]:
    """Per stream of `sampled` (the equal-work pass, which the aggregate keeps): a pass of
    its own where it does the same ops per sample while every other stream does
    INTERFERING_FACTOR x as many, so its whole time is under contention; the stream's row
    takes its times (`per_stream_s[i]`) from its pass. One extra pass per measured stream,
    no counter window: each keeps the equal-work pass's window, in which every stream moved
    the same bytes. A single stream has no interferer and keeps `sampled`."""
    if len(makers) < 2:
        return [sampled] * len(makers)
    ops = sampled.ops_per_sample

    def works(measured: int, k: int) -> list[Work]:
        return [make(k if i == measured else INTERFERING_FACTOR * k)
                for i, make in enumerate(makers)]

    return [replace(take_samples(backend, partial(works, i), samples, ops=ops),
                    window_s=sampled.window_s, window_ops=sampled.window_ops)
            for i in range(len(makers))]


PAGEABLE_NOTE = ("pageable: each copy is synchronous for the host, so the time includes the "
                 "host issuing the next one (noticeable below about 1 MiB)")
UNGATED_AGGREGATE = ("aggregate not reported: the gate never held every GPU until all work "
                     "was enqueued, so they may not have run at once")


SEEDS_PER_DEVICE = 16
"""Pattern seeds a GPU's host paths may use (slots 0-15) before the next GPU's begin."""


class HostEnd:
    """One host<->device path of one GPU: its host buffer, device buffer and stream."""

    def __init__(self, pool: BufferPool, device: GpuDevice, nbytes: int, pinned: bool,
                 to_device: bool, slot: int = 0) -> None:
        self.pool, self.device, self.nbytes, self.to_device = pool, device, nbytes, to_device
        # Each path its own pattern, per slot and per GPU: a copy that read another path's
        # buffer (streams or buffers cross-wired, also between GPUs in h2d_all) fails.
        self.seed = slot + SEEDS_PER_DEVICE * device.index
        backend = pool.backend
        self.host = pool.host(device, nbytes, pinned, slot)
        self.dev = pool.device(device.index, nbytes, slot)
        self.stream = pool.stream(device.index, slot)
        if to_device:
            fill_pattern(self.host, nbytes, self.seed)
            backend.zero(self.dev, nbytes)
            self.dst, self.src = self.dev, self.host
        else:
            upload_pattern(backend, self.dev, nbytes, self.seed)
            self.host[:nbytes] = 0
            self.dst, self.src = self.host, self.dev

    def work(self, ops: int) -> Work:
        copy = partial(self.pool.backend.copy, self.dst, self.src, self.nbytes, self.stream)
        return Work(self.stream, copy, ops)

    def work_list(self, ops: int) -> list[Work]:
        """This path alone, as a sample's work."""
        return [self.work(ops)]

    def clear(self) -> None:
        """Zero the destination, so a later check proves the copies made since wrote it."""
        if self.to_device:
            self.pool.backend.zero(self.dev, self.nbytes)
        else:
            self.host[: self.nbytes] = 0

    def problem(self) -> str:
        if self.to_device:
            bad = device_mismatches(self.pool, self.dev, self.nbytes, self.seed)
            return _problem(bad, self.nbytes, f"{self.device.label} memory")
        return _problem(host_mismatches(self.host, self.nbytes, self.seed), self.nbytes,
                        "host memory")


def _row(case: CaseSpec, device: GpuDevice | None, label: str, name: str, size: int,
         seconds: Sequence[float], nbytes: int, sampled: Sampled, *, direction: str | None = None,
         streams: int = 1, numa_node: int | None = None, peak: float | None = None,
         valid: bool = True, note: str = "", host_memory: bool = True) -> Measurement:
    """A transfer row; its NUMA node is the host memory's (`numa_node`, else the GPU's node),
    and none for a copy that touches no host memory (`host_memory=False`)."""
    if host_memory and numa_node is None and device is not None:
        numa_node = device.numa_node
    return Measurement(
        seconds_per_op=tuple(seconds), bytes_per_op=nbytes, size_bytes=size, device=label,
        device_name=name, direction=direction or case.direction, memory=case.memory,
        valid=valid, note=join_notes(note, sampled.note()), streams=streams,
        numa_node=numa_node,
        ops_per_sample=sampled.ops_per_sample, peak=peak,
        window_s=sampled.window_s, window_ops=sampled.window_ops,
    )


def one_way(run: CaseRun) -> list[Measurement]:
    """h2d_/d2h_ pinned or pageable: one copy engine, one stream."""
    pool, case, device, size, samples = run.pool, run.case, run.device, run.size, run.samples
    counter_window_s = run.counter_window_s
    pinned = case.memory == "pinned"
    path = HostEnd(pool, device, size, pinned, to_device=case.direction == "h2d")
    # A pageable async copy is synchronous for the host, so no gate can cover its enqueue;
    # the host stages it, so it runs on the GPU's own NUMA node like the buffer.
    with cpu_affinity(None if pinned else device.cpus):
        sampled = take_samples(pool.backend, lambda ops: [path.work(ops)], samples, gate=pinned,
                               counter_window_s=counter_window_s)
    problem = path.problem()
    note = "" if pinned else PAGEABLE_NOTE
    return [_row(case, device, device.label, device.name, size, sampled.per_stream_s[0], size,
                 sampled, peak=device.peak_pcie_gbps, valid=not problem, note=join_notes(problem,
                                                                                     note))]


def bidirectional(run: CaseRun) -> list[Measurement]:
    """bidir_pinned: H2D and D2H at once on two streams; a row per direction and the sum,
    the sum from the samples whose gate held (as every aggregate: `Sampled.covered_span_s`),
    none where no gate held."""
    pool, case, device, size, samples = run.pool, run.case, run.device, run.size, run.samples
    counter_window_s = run.counter_window_s
    up = HostEnd(pool, device, size, True, to_device=True, slot=0)
    down = HostEnd(pool, device, size, True, to_device=False, slot=1)
    sampled = take_samples(pool.backend, lambda ops: [up.work(ops), down.work(ops)], samples,
                           counter_window_s=counter_window_s)
    # Each direction's row from its own pass, the other direction doing twice the work.
    alone = contended(pool.backend, [up.work, down.work], sampled, samples)
    up_problem, down_problem = up.problem(), down.problem()
    peak = device.peak_pcie_gbps
    rows = [
        _row(case, device, device.label, device.name, size, alone[0].per_stream_s[0], size,
             alone[0], direction="h2d", streams=2, peak=peak, valid=not up_problem,
             note=join_notes(up_problem, CONTENDED_NOTE)),
        _row(case, device, device.label, device.name, size, alone[1].per_stream_s[1], size,
             alone[1], direction="d2h", streams=2, peak=peak, valid=not down_problem,
             note=join_notes(down_problem, CONTENDED_NOTE)),
    ]
    together = sampled.covered_span_s
    if not together:
        return [replace(row, note=join_notes(row.note, UNGATED_AGGREGATE)) for row in rows]
    return [*rows, _row(
        case, device, device.label, device.name, size, together, 2 * size, sampled,
        direction="both", streams=2, peak=2 * peak if peak else None,
        valid=not (up_problem or down_problem),
        note=join_notes(up_problem, down_problem, "sum of both directions"))]


def within_device(run: CaseRun) -> list[Measurement]:
    """d2d_copy: device-to-device copy on one GPU; counted as traffic (read + write)."""
    pool, case, device, size, samples = run.pool, run.case, run.device, run.size, run.samples
    counter_window_s = run.counter_window_s
    backend = pool.backend
    src = pool.device(device.index, size, slot=0)
    dst = pool.device(device.index, size, slot=1)
    upload_pattern(backend, src, size)
    backend.zero(dst, size)
    stream = pool.stream(device.index)
    copy = partial(backend.copy, dst, src, size, stream)
    sampled = take_samples(backend, lambda ops: [Work(stream, copy, ops)], samples,
                           counter_window_s=counter_window_s)
    problem = _problem(device_mismatches(pool, dst, size), size, f"{device.label} memory")
    best = min(sampled.per_stream_s[0])
    copy_note = f"copy figure (bytes copied once): {size / best / 1e9:.2f} GB/s best"
    return [_row(case, device, device.label, device.name, size, sampled.per_stream_s[0],
                 case.bytes_per_op(size), sampled, peak=device.peak_hbm_gbps,
                 valid=not problem, note=join_notes(problem, copy_note), host_memory=False)]


def all_devices(run: CaseRun) -> list[Measurement]:
    """h2d_all / d2h_all: every GPU at once, each from host memory on its own NUMA node."""
    pool, case, devices, size, samples = run.pool, run.case, run.devices, run.size, run.samples
    counter_window_s = run.counter_window_s
    paths = [HostEnd(pool, d, size, True, to_device=case.direction == "h2d") for d in devices]
    sampled = take_samples(pool.backend, lambda ops: [p.work(ops) for p in paths], samples,
                           counter_window_s=counter_window_s)
    # Each GPU's row from its own pass, every other GPU doing twice the work (one GPU: none).
    alone = contended(pool.backend, [p.work for p in paths], sampled, samples)
    doubled = CONTENDED_NOTE if len(paths) > 1 else ""
    problems = [p.problem() for p in paths]
    rows = [
        _row(case, d, d.label, d.name, size, alone[i].per_stream_s[i], size, alone[i],
             streams=len(devices), peak=d.peak_pcie_gbps, valid=not problems[i],
             note=join_notes(problems[i], doubled))
        for i, d in enumerate(devices)
    ]
    ceiling = host_ceiling(devices)  # GPUs behind one uplink share it
    names = sorted({d.name for d in devices})
    together = sampled.covered_span_s
    if not together:
        return [replace(row, note=join_notes(row.note, UNGATED_AGGREGATE)) for row in rows]
    rows.append(_row(
        case, None, "all", " + ".join(names), size, together,
        size * len(devices), sampled, streams=len(devices), peak=ceiling.gbps,
        valid=not any(problems),
        note=join_notes(*problems, f"aggregate of {len(devices)} GPU(s) on one clock",
                        ceiling.note),
    ))
    return rows


def _remotes(value: object) -> list[str | None]:
    """NVML's far end of each NVLink (a bus id, "switch", or None where unknown)."""
    if not isinstance(value, (list, tuple)):
        return []
    return [r if isinstance(r, str) else None for r in value]


def p2p_peak(a: GpuDevice, b: GpuDevice) -> float | None:
    """Per-direction peak from `a` to `b`: the NVLinks joining them (directly, or every link
    of `a` through NVSwitch), else the slower PCIe link; None when NVLink exists but NVML
    cannot say where its links go (a guess would make a healthy pair look sick)."""
    remotes = _remotes(a.metadata.get("nvlink_remotes"))
    links_up = a.metadata.get("nvlink_links_up")
    # The peak counts every link the GPU has (`nvlink_links`; older runs: the links up).
    links = a.metadata.get("nvlink_links")
    links = links if isinstance(links, int) and links else links_up
    if a.peak_nvlink_gbps and isinstance(links_up, int) and links_up and isinstance(links, int):
        per_link = a.peak_nvlink_gbps / links
        direct = sum(1 for r in remotes if same_device(r, b.properties.pci_bus_id))
        if direct:
            return per_link * direct
        if any(r == "switch" for r in remotes):
            # Through NVSwitch every link of the GPU reaches every peer: the whole part's,
            # so links down lower the figure, not the peak it is held against.
            return per_link * links
        if any(r is None for r in remotes):
            return None
    if a.peak_pcie_gbps and b.peak_pcie_gbps:
        return min(a.peak_pcie_gbps, b.peak_pcie_gbps)
    return None


def enable_peers(backend: Any, *pairs: tuple[GpuDevice, GpuDevice]) -> None:
    """Peer access on for each (from, to) pair, or NotRun("skipped") saying which pair
    refused and why: a GPU-to-GPU job cannot run without it."""
    for a, b in pairs:
        try:
            enabled = backend.enable_peer_access(a.index, b.index)
        except Exception as exc:  # e.g. cudaErrorTooManyPeers beyond 8 peers
            raise NotRun("skipped", f"peer access from {a.label} to {b.label} failed: "
                                    f"{type(exc).__name__}: {exc}") from None
        if not enabled:
            raise NotRun("skipped", f"peer access is not supported from {a.label} to {b.label}")


def _peer_path(pool: BufferPool, src: GpuDevice, dst: GpuDevice, size: int,
               slot: int) -> tuple[Any, Any, Any]:
    backend = pool.backend
    enable_peers(backend, (src, dst), (dst, src))
    source = pool.device(src.index, size, slot=slot)
    target = pool.device(dst.index, size, slot=slot + 1)
    upload_pattern(backend, source, size, seed=slot)
    backend.zero(target, size)
    return source, target, pool.stream(src.index, slot)


def peer(run: CaseRun) -> list[Measurement]:
    """p2p_copy (i -> j) or, for a case declared `both_ways`, p2p_bidir (i -> j and j -> i
    at once), peer access on."""
    pool, case, size, samples = run.pool, run.case, run.size, run.samples
    counter_window_s = run.counter_window_s
    backend = pool.backend
    a, b = run.device, run.peer
    names = f"{a.name} -> {b.name}"
    peak = p2p_peak(a, b)
    forward = _peer_path(pool, a, b, size, slot=0)
    paths = [(a, b, forward)]
    if case.both_ways:
        paths.append((b, a, _peer_path(pool, b, a, size, slot=2)))

    def maker(source: Any, target: Any, stream: Any) -> Callable[[int], Work]:
        return lambda ops: Work(stream, partial(backend.copy, target, source, size, stream),
                                ops)

    makers = [maker(*path) for _, _, path in paths]
    sampled = take_samples(backend, lambda ops: [make(ops) for make in makers], samples,
                           counter_window_s=counter_window_s)
    # Both ways: each direction's row from its own pass, the other doing twice the work.
    alone = contended(backend, makers, sampled, samples)
    doubled = CONTENDED_NOTE if len(paths) > 1 else ""
    problems = [_problem(device_mismatches(pool, target, size, seed=2 * i), size,
                         f"{dst.label} memory")
                for i, (_, dst, (_, target, _)) in enumerate(paths)]
    rows = [
        _row(case, None, f"{src.label}->{dst.label}", f"{src.name} -> {dst.name}", size,
             alone[i].per_stream_s[i], size, alone[i], direction="p2p", streams=len(paths),
             numa_node=None, peak=peak, valid=not problems[i],
             note=join_notes(problems[i], doubled))
        for i, (src, dst, _) in enumerate(paths)
    ]
    together = sampled.covered_span_s
    if len(paths) == 2 and not together:
        rows = [replace(row, note=join_notes(row.note, UNGATED_AGGREGATE)) for row in rows]
    elif len(paths) == 2:
        rows.append(_row(
            case, None, f"{a.label}<->{b.label}", names, size,
            together, 2 * size, sampled, direction="both",
            streams=2, peak=2 * peak if peak else None, valid=not any(problems),
            note=join_notes(*problems, "sum of both directions"),
        ))
    return rows


# -- traffic patterns: many copies at once, one aggregate on one clock ---------------------------


class PeerCopy:
    """One GPU-to-GPU copy of a pattern: its buffers (own slots, own seed) and the stream
    that issues it (the writer's for a write, the reader's for a read)."""

    def __init__(self, pool: BufferPool, src: GpuDevice, dst: GpuDevice, size: int, *,
                 src_slot: int, dst_slot: int, issuer: GpuDevice, seed: int) -> None:
        backend = pool.backend
        enable_peers(backend, (src, dst), (dst, src))
        self.pool, self.dst, self.size, self.seed = pool, dst, size, seed
        self.source = pool.device(src.index, size, slot=src_slot)
        self.target = pool.device(dst.index, size, slot=dst_slot)
        upload_pattern(backend, self.source, size, seed=seed)
        backend.zero(self.target, size)
        self.stream = pool.stream(issuer.index, dst_slot if issuer is dst else src_slot)

    def work(self, ops: int) -> Work:
        copy = partial(self.pool.backend.copy, self.target, self.source, self.size, self.stream)
        return Work(self.stream, copy, ops)

    def clear(self) -> None:
        """Zero the target, so a later check proves the copies made since wrote it."""
        self.pool.backend.zero(self.target, self.size)

    def problem(self) -> str:
        bad = device_mismatches(self.pool, self.target, self.size, seed=self.seed)
        return _problem(bad, self.size, f"{self.dst.label} memory")


def _link_peak(device: GpuDevice) -> float | None:
    """What one GPU can move to (or from) all its peers at once, per direction: every NVLink
    it has, else its PCIe link."""
    return device.peak_nvlink_gbps or device.peak_pcie_gbps


def _aggregate(run: CaseRun, works: Sequence[Any], label: str, name: str, direction: str,
               peak: float | None, note: str, host_memory: bool = False) -> list[Measurement]:
    """Time every copy of `works` at once behind the gate and give one row: all their bytes
    over the sample on one clock (first start to the final event behind every end)."""
    sampled = take_samples(run.pool.backend, lambda ops: [w.work(ops) for w in works],
                           run.samples, counter_window_s=run.counter_window_s)
    problems = [w.problem() for w in works]
    together = sampled.covered_span_s
    if not together:
        raise NotRun("skipped", UNGATED_AGGREGATE)
    return [_row(run.case, None, label, name, run.size, together, run.size * len(works),
                 sampled, direction=direction, streams=len(works), peak=peak,
                 valid=not any(problems), host_memory=host_memory,
                 note=join_notes(*problems, note))]


def _names(devices: Sequence[GpuDevice]) -> str:
    return " + ".join(sorted({d.name for d in devices}))


def host_all_bidir(run: CaseRun) -> list[Measurement]:
    """h2d_all_bidir: every GPU copying to and from host memory at once (2 streams a GPU, the
    host buffers on each GPU's NUMA node); one aggregate of all of it on one clock."""
    paths = [HostEnd(run.pool, d, run.size, True, to_device=to_device, slot=slot)
             for d in run.devices for slot, to_device in ((0, True), (1, False))]
    ceiling = host_ceiling(run.devices)  # one direction; GPUs behind one uplink share it
    peak = 2 * ceiling.gbps if ceiling.gbps else None
    rows = _aggregate(run, paths, "all", _names(run.devices), "both", peak,
                      join_notes(f"aggregate of {len(run.devices)} GPU(s), both directions, "
                                 "on one clock", ceiling.note),
                      host_memory=True)
    return [replace(row, numa_node=None) for row in rows]


def pattern_copies(run: CaseRun) -> tuple[list[PeerCopy], str, str]:
    """one_to_all / all_to_one's copies: the job's GPU writing to every other GPU, or, for a
    case declared `reads`, reading from every other; one stream per peer on the job's GPU
    (the writer, or the reader). With the row's label and what it does, for its note."""
    one = run.device
    others = [d for d in run.devices if d.index != one.index]
    reads = run.case.reads
    copies = [PeerCopy(run.pool, peer if reads else one, one if reads else peer, run.size,
                       src_slot=2 * k, dst_slot=2 * k + 1, issuer=one, seed=k)
              for k, peer in enumerate(others)]
    label = f"all->{one.label}" if reads else f"{one.label}->all"
    what = f"{one.label} reading from" if reads else f"{one.label} writing to"
    return copies, label, f"{what} {len(others)} GPU(s) at once, on one clock"


def one_to_all(run: CaseRun) -> list[Measurement]:
    """one_to_all / all_to_one by the copy engine (`pattern_copies`): one aggregate row per
    GPU, on one clock, phase `copy_engine` (`smcopy.one_to_all` adds the SM variant's)."""
    copies, label, what = pattern_copies(run)
    rows = _aggregate(run, copies, label, _names(run.devices), "p2p", _link_peak(run.device),
                      f"copy engine; {what}")
    return [replace(row, phase="copy_engine") for row in rows]


def all_pairs(run: CaseRun) -> list[Measurement]:
    """p2p_all_pairs: every ordered pair copying at once (each writer's stream per peer): the
    box's total GPU-to-GPU bandwidth, on one clock. Pair (i, j) reads slot 2j on i and writes
    slot 2i + 1 on j, so no two copies share a buffer."""
    devices = list(run.devices)
    copies = [PeerCopy(run.pool, a, b, run.size, src_slot=2 * b.index,
                       dst_slot=2 * a.index + 1, issuer=a, seed=len(devices) * i + j)
              for i, a in enumerate(devices) for j, b in enumerate(devices) if a is not b]
    peaks = [_link_peak(d) for d in devices]
    peak = sum(p for p in peaks if p) if all(peaks) else None
    return _aggregate(run, copies, "all", _names(devices), "p2p", peak,
                      f"{len(copies)} ordered pairs of {len(devices)} GPUs at once, "
                      "on one clock")
