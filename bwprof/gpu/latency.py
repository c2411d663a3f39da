"""GPU latency cases (`lat_*`): one GPU thread chasing a chain through device memory, a peer
GPU's memory or pinned host memory, alone or beside a STREAM load; and the latency of a
16-byte asynchronous copy.

The chain is one cycle through the 128-byte lines of the buffer, one node per line (a node
per 32-byte sector put four in a line, so later visits to a line fetched already could hit),
built on the host and copied in: line i's first uint64 holds the device address of the line
it links to, written with the buffer's base pointer as the kernel sees it (`address_of`: a
device or peer allocation's pointer, pinned host memory's own under unified addressing), so
a step is one global load whose result is the next load's address, nothing in between
(`kernels.chase`, `address.load_u64`). The cycle is random (`bwprof.chain.Cycle`: computed, so
hundreds of MiB of chain are linked in a fraction of a second and checked without a second
walk), or in address order for lat_h2d's headline (`bwprof.chain.Stride`, nvbandwidth's
`host_device_latency_sm`). Every sample is one launch of the one-thread `chase` kernel for N
loads, timed by CUDA events around it, with N chosen so a sample lasts about TARGET_SAMPLE_S
(launch overhead, a few microseconds, stays far under 1%). Each launch continues where the
last ended (the address is kept in a small device state array), never from line 0. After
the last sample the address must be where the cycle says that many loads from line 0 end
(`Cycle.ending_line`): a chase that skipped or lost loads is invalid.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from bwprof.gpu.backend import GpuBackend, Work
from bwprof.gpu.buffers import (
    BufferPool,
    chunks,
    device_mismatches,
    pattern,
    upload_pattern,
)
from bwprof.gpu.devices import GpuDevice
from bwprof.gpu.job import CaseRun
from bwprof.gpu.kernel_params import (
    LOAD_BYTES_PER_ELEMENT,
    STATE_GENERATION,
    STATE_LOAD_BYTES,
    STATE_POSITION,
    STATE_SLOTS,
)
from bwprof.gpu.layout import (
    CHAIN_ELEMENT_BYTES,
    CHAIN_SLOT,
    H2D_STRIDE_BYTES,
    LOAD_DST_SLOT,
    LOAD_FRACTIONS,
    LOAD_SRC_SLOT,
    MEMCPY_BYTES,
    MEMCPY_DIRECTIONS,
    STATE_BYTES,
    STATE_SLOT,
)
from bwprof.gpu.sampling import HOLD_US, MAX_HOLD_US, take_samples
from bwprof.gpu.transfers import HostEnd, enable_peers
from bwprof.measurement import Measurement, NotRun, join_notes
from bwprof.rules import CACHE_MULTIPLE, FIRST_WORKING_SET_BYTES, next_power_of_two, working_sets
from bwprof.schema.flags import CACHE_SERVED
from bwprof.units import KiB, format_bytes

if TYPE_CHECKING:
    from bwprof.chain import Cycle, Stride  # imports Numba: loaded where a chase is built

NODE_BYTES = 128
"""A chain's node: one 128-byte line (an L1/L2 cache line, four 32-byte sectors). One node
per line, so no load finds its line fetched by another node's load (nvbandwidth's stride)."""
NODE_WORDS = NODE_BYTES // CHAIN_ELEMENT_BYTES

TARGET_SAMPLE_S = 0.02
"""One sample (one chase launch) lasts about this long: launch overhead stays under 0.1%,
and a load over PCIe (about 1-2 us) still gets some ten thousand loads."""
MIN_STEPS = 1_000
MAX_STEPS = 1 << 28
PROBE_STEPS = 1_024
"""Loads of the untimed-for-the-figure probe that sets N (its first launch warms the kernel)."""
WARM_CAP_S = 0.25
"""Warm-up: one lap of the chain, capped at this long for huge (HBM- or host-sized) sets."""
LOAD_THREADS = 256
LOAD_BLOCKS_PER_SM = 4
"""Blocks of LOAD_THREADS per SM's worth: 1024 threads, half an H100/H200 SM's 2048, so even
the full-intensity grid (all SMs but one) leaves resident room for the chase's block."""
LOAD_OVERRUN = 4
"""The load's bound: this many times the chase's expected time, at the HBM peak (a slower
load runs longer, and still ends)."""
FALLBACK_PEAK_GBPS = 10_000.0
"""The load bound's rate where the HBM peak is unknown (faster than any HBM today)."""


H2D_STRIDE_PHASE = ""
"""lat_h2d's headline row (nvbandwidth's method) has no phase, as a one-row case's."""
H2D_METHOD_NOTE = (
    "not quite nvbandwidth's walk: one thread on one SM for the whole row, warmed by a lap, "
    "median of samples, where nvbandwidth rotates the walking SM from launch to launch (1M "
    "loads, no warm-up) and so averages every SM's distance to the host interface, cold "
    "first lap included: expect this figure slightly lower than nvbandwidth's")
"""Why lat_h2d's headline is close to, not the same as, nvbandwidth's host_device_latency_sm
(choosing the SM a block runs on is not something CUDA offers, so the walk is not rotated)."""
H2D_RANDOM_PHASE = "random_tlb"
"""lat_h2d's second row: the random chase through a set >= 4x the L2 (the TLB-missing
figure: GPU page walks on top of the round trip). The summary's host-link latency is the
headline's, never this."""

CACHE_SERVED_RATIO = 0.6
"""A host-memory chase whose samples' median time per load is under this share of its first
(cold) lap's is flagged `cache_served`: after the first lap a GPU cache, not the link,
answered its loads (whether an H200 keeps host-memory reads in its L2 is unsettled; 2 MiB is
far under its 50 MiB L2). A round trip over PCIe varies by far less than 40% between laps."""

EVENT_NOTE = ("event-timed: CUDA events around one one-thread kernel of {steps} dependent "
              "loads per sample ({per}); {warm}")
INDEX_NOTE = ("each load's address is the previous load's value (a device address: one "
              "ld.global, nothing between); one node per 128-byte line")


def hbm_chase_bytes(l2_bytes: int) -> int:
    """A working set beyond the cache: the power of two at least 4x the L2."""
    return next_power_of_two(max(CACHE_MULTIPLE * l2_bytes, FIRST_WORKING_SET_BYTES))


def sweep_sizes(l2_bytes: int, factor: int) -> list[int]:
    """Working sets from 4 KiB up by `factor` until one is at least 4x the L2 (L1, L2, HBM)."""
    return working_sets(CACHE_MULTIPLE * l2_bytes, factor)


L1_BYTES_AT_LEAST = 64 * KiB
"""An SM's L1 holds at least this much on every part bwprof meets (Volta to Blackwell carve
L1 and shared memory from 128-256 KiB; the chase uses no shared memory). CUDA reports no L1
size, so sets above this and within the L2 are labelled `L2` though the larger L1s still
serve some of them."""


MIXED_LEVEL = "L2+HBM"
"""A set beyond the L2 but under 4x it: the L2 still serves part of it (the row is flagged
`l2_resident`), so it is neither the L2's figure nor HBM's."""


def cache_level(size: int, device: GpuDevice) -> str:
    """Where a working set lives: `L1` up to L1_BYTES_AT_LEAST (Numba's plain ld.global
    caches in L1 on sm_70 and newer), `L2` up to the L2's size, `L2+HBM` under 4x the L2
    (the executor flags those sets `l2_resident`), `HBM` from 4x the L2 (DESIGN's rule for a
    memory's own figure)."""
    l2 = device.properties.l2_bytes
    if size <= L1_BYTES_AT_LEAST:
        return "L1"
    if size <= l2:
        return "L2"
    return MIXED_LEVEL if size < CACHE_MULTIPLE * l2 else "HBM"


@dataclass
class Chase:
    """One chain in a buffer (device, peer or pinned host memory) and the one-thread chase
    over it, launched on `stream` of the kernel's GPU with its state there."""

    backend: GpuBackend
    stream: Any
    chain: Any
    state: Any
    state_view: Any
    cycle: Cycle | Stride
    base: int
    """The address the kernel sees line 0 of the chain at."""
    steps_done: int = 0
    launches: int = 0
    estimate_s: float = 0.0
    """Seconds per load, from the probe."""
    warm_steps: int = 0
    lap: bool = False
    steps: int = MIN_STEPS
    """Loads per sample."""
    first_lap_s: float = 0.0
    """Seconds per load of the warm-up (the first, cold, lap), kept to compare the samples
    with (`served_from_cache`)."""
    notes: list[str] = field(default_factory=list)

    @property
    def lines(self) -> int:
        return self.cycle.lines

    def launch(self, steps: int) -> None:
        self.backend.launch("chase", self.stream, self.chain, self.state_view, steps)
        self.steps_done += steps
        self.launches += 1

    def work(self, steps: int) -> Work:
        return Work(self.stream, partial(self.launch, steps), 1)

    def timed(self, steps: int) -> float:
        return self.backend.time_sample([self.work(steps)], False, 0).seconds[0]

    def prepare(self) -> None:
        """Probe (sets N), warm up (a lap, capped), as the samples will run."""
        self.timed(PROBE_STEPS)  # first launch: any remaining load of the kernel
        self.estimate_s = max(self.timed(PROBE_STEPS) / PROBE_STEPS, 1e-10)
        cap = max(MIN_STEPS, int(WARM_CAP_S / self.estimate_s))
        self.lap = self.lines <= cap
        self.warm_steps = min(self.lines, cap)
        self.first_lap_s = self.timed(self.warm_steps) / self.warm_steps
        target_s = TARGET_SAMPLE_S * self.backend.sample_scale
        self.steps = max(MIN_STEPS, min(MAX_STEPS, math.ceil(target_s / self.estimate_s)))

    def samples(self, count: int) -> list[float]:
        """Seconds of each of `count` samples of `steps` loads."""
        return [self.timed(self.steps) for _ in range(count)]

    def served_from_cache(self, seconds: list[float]) -> str:
        """Why the samples' loads were a GPU cache's (their median per load under
        CACHE_SERVED_RATIO of the first lap's), or '' where they were not or the backend's
        times say nothing of the loads (`times_loads`)."""
        if not seconds or self.first_lap_s <= 0 or not times_loads(self.backend):
            return ""
        per_load = statistics.median(seconds) / self.steps
        if per_load >= CACHE_SERVED_RATIO * self.first_lap_s:
            return ""
        return (f"served from a GPU cache after the first lap: {per_load * 1e9:.0f} ns per "
                f"load, under {CACHE_SERVED_RATIO:g} x the first (cold) lap's "
                f"{self.first_lap_s * 1e9:.0f} ns: not the link's round trip")

    def read_state(self) -> np.ndarray:
        return np.asarray(self.backend.download(self.state, STATE_BYTES)).view(np.uint64).copy()

    def problem(self) -> str:
        """Where the chase must stand after every load issued so far, and how many launches
        must have finished; '' when it does."""
        state = self.read_state()
        start = self.cycle.position_of(0)  # the state starts at line 0
        line = self.cycle.ending_line(self.steps_done, start)
        expected = self.base + line * NODE_BYTES
        position, generation = int(state[STATE_POSITION]), int(state[STATE_GENERATION])
        if position != expected:
            offset = position - self.base
            return (f"validation failed: the chase ended at address {position:#x} (offset "
                    f"{offset}), expected {expected:#x} (line {line}) after "
                    f"{self.steps_done} loads")
        if generation != self.launches:
            return (f"validation failed: {generation} chase launches finished, expected "
                    f"{self.launches}")
        return ""

    def note(self) -> str:
        warm = (f"warm-up: one lap ({self.warm_steps} loads)" if self.lap else
                f"warm-up: {self.warm_steps} loads (a lap of {self.lines} capped at "
                f"{WARM_CAP_S:g} s)")
        per = "each sample continues where the last ended"
        return EVENT_NOTE.format(steps=self.steps, per=per, warm=warm)


def times_loads(backend: GpuBackend) -> bool:
    """Whether a backend's sample times are its loads' own, so a first lap can be held
    against the samples: a GPU's events are; the simulated backend's CPU times are not (the
    CPU's caches serve its chains, so every small chase would read 'cache served'), unless a
    test gives it a timing model of the loads (`models_load_times`)."""
    return backend.name != "simulated" or bool(getattr(backend, "models_load_times", False))


def address_of(view: Any) -> int:
    """The address a kernel reaches a chase buffer's view at: its CUDA array interface's
    pointer (a device array, a peer's, or pinned host memory under unified addressing), or
    a NumPy view's own data pointer (the simulated backend, the CUDA simulator)."""
    interface = getattr(view, "__cuda_array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    return int(view.__array_interface__["data"][0])


def link_problem(words: np.ndarray, base: int, size: int) -> str:
    """Why a chain's words could not be chased, '' where they can: every node's link (its
    first word) must be the address of a node of the buffer, `base` + a multiple of
    NODE_BYTES below `base + size`. One vectorised pass on the host, before upload: on a GPU
    a wild link is an illegal address, a sticky error that poisons the CUDA context for every
    later case, where this is one `error` row."""
    links = np.asarray(words, dtype=np.uint64)[::NODE_WORDS]
    offsets = links - np.uint64(base)  # below base: wraps to a huge offset, caught as such
    bad = (links < np.uint64(base)) | (offsets >= np.uint64(size)) | (
        offsets % np.uint64(NODE_BYTES) != 0)
    count = int(np.count_nonzero(bad))
    if not count:
        return ""
    first = int(np.flatnonzero(bad)[0])
    return (f"chain check failed before any kernel ran: {count} of {links.size} links are "
            f"not the address of a {NODE_BYTES}-byte node in [{base:#x}, {base + size:#x}) "
            f"(line {first} links to {int(links[first]):#x})")


class ChainError(ValueError):
    """A chain whose links leave its buffer (`link_problem`): never uploaded or chased."""


def chain_addresses(next_lines: np.ndarray, base: int) -> np.ndarray:
    """The uint64 words of a chain buffer: line i's first word holds the address of the line
    it links to (`base + next_lines[i] x NODE_BYTES`), every other word is zero. Computed in
    uint64 whatever the lines' integer type, so no offset wraps past 2^31 or 2^32."""
    words = np.zeros(next_lines.size * NODE_WORDS, dtype=np.uint64)
    words[::NODE_WORDS] = (np.uint64(base)
                           + np.asarray(next_lines).astype(np.uint64) * np.uint64(NODE_BYTES))
    return words


def build_chase(pool: BufferPool, device: GpuDevice, buffer: Any, size: int,
                stream_slot: int = 0, in_order: bool = False) -> Chase:
    """Write the chain into `buffer` (a device array of any GPU, or a pinned host array) and
    set up the chase on `device` over it, from line 0: a random cycle through its lines, or
    (`in_order`) the lines in address order, nvbandwidth's stride."""
    from bwprof.chain import Cycle, Stride

    backend = pool.backend
    lines = size // NODE_BYTES
    cycle: Cycle | Stride = Stride(lines) if in_order else Cycle.of(lines)
    view = backend.chase_view(buffer[:size], device.index)
    base = address_of(view)
    words = chain_addresses(cycle.next_lines(np.arange(lines, dtype=np.uint64)), base)
    problem = link_problem(words, base, lines * NODE_BYTES)
    if problem:
        raise ChainError(problem)
    if type(buffer) is np.ndarray:  # host memory (a simulated device array is a subclass)
        buffer[:size] = words.view(np.uint8)
    else:
        backend.upload(buffer, words)
    del words
    state = pool.device(device.index, STATE_BYTES, STATE_SLOT)
    backend.zero(state, STATE_BYTES)
    start = np.zeros(STATE_SLOTS, dtype=np.uint64)
    start[STATE_POSITION] = base  # line 0: the kernel dereferences it, never leave it 0
    backend.upload(state, start)
    return Chase(backend, pool.stream(device.index, stream_slot), view, state,
                 backend.chase_view(state[:STATE_BYTES], device.index), cycle, base)


def _row(chase: Chase, device: GpuDevice, label: str, name: str, size: int,
         seconds: list[float], *, memory: str, direction: str, level: str,
         note: str = "", phase: str = "", load_gbps: float | None = None,
         numa_node: int | None = None, cache_check: bool = False) -> Measurement:
    """The row of a chase; `cache_check`: a memory no GPU cache should serve (host memory
    over the link), so samples much faster than the first lap flag it `cache_served`."""
    problem = chase.problem()
    cached = chase.served_from_cache(seconds) if cache_check else ""
    note = join_notes(cached, note) if cached else note
    return Measurement(
        seconds_per_op=tuple(seconds),
        bytes_per_op=chase.steps * CHAIN_ELEMENT_BYTES, work_per_op=float(chase.steps),
        size_bytes=size, device=label, device_name=name, direction=direction, memory=memory,
        valid=not problem, note="; ".join(n for n in (problem, note, chase.note(), INDEX_NOTE)
                                          if n),
        streams=1, numa_node=numa_node, ops_per_sample=1, phase=phase, cache_level=level,
        load_gbps=load_gbps, flags=frozenset({CACHE_SERVED}) if cached else frozenset(),
    )


def gpu(run: CaseRun) -> list[Measurement]:
    """lat_gpu: the chase through this GPU's own memory at one working-set size."""
    pool, device, size = run.pool, run.device, run.size
    chase = build_chase(pool, device, pool.device(device.index, size, CHAIN_SLOT), size)
    chase.prepare()
    seconds = chase.samples(run.samples)
    return [_row(chase, device, device.label, device.name, size, seconds, memory="hbm",
                 direction="within", level=cache_level(size, device), note=run.job.note)]


def host(run: CaseRun) -> list[Measurement]:
    """lat_h2d: chases through pinned host memory (on the GPU's NUMA node) that the kernel
    reads through its device address, every load a PCIe or NVLink-C2C round trip. Two rows:
    the headline, nvbandwidth's host_device_latency_sm (H2D_STRIDE_BYTES in address order,
    its pages in the GPU's TLB), then phase H2D_RANDOM_PHASE, a random cycle through the
    job's set (>= 4x the L2), where GPU page walks add to the round trip."""
    pool, device, size = run.pool, run.device, run.size
    rows = []
    for phase, nbytes, in_order in ((H2D_STRIDE_PHASE, H2D_STRIDE_BYTES, True),
                                    (H2D_RANDOM_PHASE, size, False)):
        buffer = pool.host(device, nbytes, pinned=True, slot=0 if in_order else 1)
        chase = build_chase(pool, device, buffer, nbytes, in_order=in_order)
        chase.prepare()
        seconds = chase.samples(run.samples)
        how = (f"nvbandwidth's host_device_latency_sm: {format_bytes(nbytes)} in address "
               f"order, a node every {NODE_BYTES} bytes (its pages stay in the GPU's TLB); "
               + H2D_METHOD_NOTE if in_order else
               f"random cycle through {format_bytes(nbytes)} (>= 4x the L2): GPU TLB misses "
               "and page walks add to the round trip; the headline is the row without a "
               "phase")
        rows.append(_row(chase, device, device.label, device.name, nbytes, seconds,
                         memory="pinned", direction="h2d", level="DDR", phase=phase,
                         numa_node=device.numa_node, note=join_notes(run.job.note, how),
                         cache_check=True))
    return rows


def peer(run: CaseRun) -> list[Measurement]:
    """lat_p2p: the chase on GPU i through GPU j's memory, peer access on."""
    pool, size = run.pool, run.size
    a, b = run.device, run.peer
    enable_peers(pool.backend, (a, b))
    chase = build_chase(pool, a, pool.device(b.index, size, CHAIN_SLOT), size)
    chase.prepare()
    seconds = chase.samples(run.samples)
    return [_row(chase, a, f"{a.label}->{b.label}", f"{a.name} -> {b.name}", size, seconds,
                 memory="hbm", direction="p2p", level="HBM", note=run.job.note)]


# -- the chase under load -------------------------------------------------------------------


def load_blocks(fraction: float, multiprocessors: int) -> int:
    """Blocks of the load kernel at `fraction` of (all SMs but one)."""
    if fraction <= 0:
        return 0
    return max(1, round(fraction * (multiprocessors - 1))) * LOAD_BLOCKS_PER_SM


@dataclass
class Load:
    """The STREAM copy that loads HBM beside the chase, stopped by the chase's generation."""

    backend: GpuBackend
    stream: Any
    src: Any
    dst: Any
    elements: int
    max_passes: int = 1

    def work(self, chase: Chase, blocks: int) -> Work:
        generation = chase.launches  # what the state holds until the coming chase finishes

        def launch() -> None:
            self.backend.launch("load", self.stream, self.src, self.dst, chase.state_view,
                                np.uint64(generation), self.max_passes, blocks=blocks)
        return Work(self.stream, launch, 1)

    @property
    def pass_bytes(self) -> int:
        return self.elements * LOAD_BYTES_PER_ELEMENT


def loaded(run: CaseRun) -> list[Measurement]:
    """lat_gpu_loaded: the chase at an HBM-sized working set while a STREAM copy on other
    SMs loads HBM at several intensities; one row per intensity (phase load_N)."""
    pool, device, size, backend = run.pool, run.device, run.size, run.pool.backend
    sms = device.properties.multiprocessors
    if sms < 2:
        raise NotRun("waived", f"{device.label} has {sms} SM: no SM is left for a load")
    chase = build_chase(pool, device, pool.device(device.index, size, CHAIN_SLOT), size)
    src = pool.device(device.index, size, LOAD_SRC_SLOT)
    dst = pool.device(device.index, size, LOAD_DST_SLOT)
    upload_pattern(backend, src, size)
    backend.zero(dst, size)
    elements = size // 8
    load = Load(backend, pool.stream(device.index, 1), backend.kernel_view(src[:size]),
                backend.kernel_view(dst[:size]), elements)
    chase.prepare()
    fastest_pass_s = load.pass_bytes / ((device.peak_hbm_gbps or FALLBACK_PEAK_GBPS) * 1e9)
    load.max_passes = math.ceil(LOAD_OVERRUN * chase.steps * chase.estimate_s
                                / fastest_pass_s) + 1
    rows, hold_us = [], HOLD_US
    for fraction in LOAD_FRACTIONS:
        blocks = load_blocks(fraction, sms)
        phase = f"load_{int(100 * fraction)}"
        if not blocks:
            seconds = chase.samples(run.samples)
            rows.append(_row(chase, device, device.label, device.name, size, seconds,
                             memory="hbm", direction="within", level="HBM", phase=phase,
                             note=join_notes(run.job.note, "no load: the chase alone"),
                             load_gbps=0.0))
            continue
        seconds, rates, bounded, uncovered = [], [], 0, 0
        for _ in range(run.samples):
            while True:  # gated: the chase and the load start together
                before = int(chase.read_state()[STATE_LOAD_BYTES])
                # The load's generation is read now, before this attempt's chase launches.
                works = [chase.work(chase.steps), load.work(chase, blocks)]
                sample = backend.time_sample(works, True, hold_us)
                if sample.covered or hold_us >= MAX_HOLD_US:
                    break
                hold_us *= 2  # enqueue outlasted the gate: again, longer (the chain goes on)
            uncovered += not sample.covered
            moved = int(chase.read_state()[STATE_LOAD_BYTES]) - before
            seconds.append(sample.seconds[0])
            rates.append(moved / sample.seconds[1] / 1e9 if sample.seconds[1] > 0 else 0.0)
            bounded += moved >= load.max_passes * load.pass_bytes
        note = (f"load: STREAM copy of {format_bytes(size)} on {blocks} blocks x "
                f"{LOAD_THREADS} threads ({fraction:.3g} of {sms - 1} SMs' worth), started "
                "with the chase behind the gate and stopped by it; load_gbps = bytes it "
                "counted / its event-timed interval")
        if uncovered:
            note += (f"; {uncovered} sample(s) started before all work was enqueued (gate "
                     f"too short even at {MAX_HOLD_US} us)")
        if bounded:
            note += (f"; in {bounded} sample(s) the load reached its bound of "
                     f"{load.max_passes} passes before the chase ended")
        rows.append(_row(chase, device, device.label, device.name, size, seconds,
                         memory="hbm", direction="within", level="HBM", phase=phase,
                         note=join_notes(run.job.note, note), load_gbps=statistics.median(rates)))
    problem = (_copy_problem(pool, dst, size, device, exact=False)
               or _one_pass_problem(pool, load, chase, dst, size, device, sms))
    if problem:
        rows = [r if r.phase == "load_0" else _invalid(r, problem) for r in rows]
    return rows


def _one_pass_problem(pool: BufferPool, load: Load, chase: Chase, dst: Any, size: int,
                      device: GpuDevice, sms: int) -> str:
    """The load kernel, run once more alone for exactly one pass (no chase runs, so the
    generation it waits on never moves) into a zeroed destination, must copy every byte:
    a kernel that counted bytes but stored none (or stored elsewhere) fails here, where a
    destination left zero would pass the check above."""
    backend = pool.backend
    backend.zero(dst, size)
    passes, load.max_passes = load.max_passes, 1
    try:
        backend.time_sample([load.work(chase, load_blocks(1.0, sms))], False, 0)
    finally:
        load.max_passes = passes
    return _copy_problem(pool, dst, size, device, exact=True)


def _copy_problem(pool: BufferPool, dst: Any, size: int, device: GpuDevice,
                  exact: bool) -> str:
    """Every byte of the load's destination is its source's (the pattern) or, unless
    `exact`, still zero: blocks end at whole passes, so under the chase a block that saw the
    stop flag before its first pass leaves its elements zero (and the simulator's load,
    which runs after the chase, copies nothing)."""
    staging, bad = pool.staging(), 0
    for start, length in chunks(size):
        pool.backend.download(dst, length, offset=start, out=staging)
        got = staging[:length]
        wrong = got != pattern(0, length)
        bad += int(np.count_nonzero(wrong if exact else wrong & (got != 0)))
    return (f"validation failed: {bad} of {size} bytes the load copied into "
            f"{device.label} memory differ from its source"
            + (" after one pass of it alone" if exact else "")) if bad else ""


def _invalid(row: Measurement, problem: str) -> Measurement:
    from dataclasses import replace

    return replace(row, valid=False, note=join_notes(problem, row.note))


def _one_work(stream: Any, enqueue: Any, ops: int) -> list[Work]:
    return [Work(stream, enqueue, ops)]


# -- small copies -----------------------------------------------------------------------------


def memcpy(run: CaseRun) -> list[Measurement]:
    """lat_memcpy: 16-byte (one int4) asynchronous copies host->device, device->host and
    within the GPU, as cuda-samples' p2pBandwidthLatencyTest times them: many back to back
    behind the gate, between two events, divided by their count."""
    pool, device, samples = run.pool, run.device, run.samples
    backend = pool.backend
    rows = []
    for direction in MEMCPY_DIRECTIONS:
        if direction == "within":
            src = pool.device(device.index, MEMCPY_BYTES, slot=2)
            dst = pool.device(device.index, MEMCPY_BYTES, slot=3)
            upload_pattern(backend, src, MEMCPY_BYTES, seed=7)
            backend.zero(dst, MEMCPY_BYTES)
            stream = pool.stream(device.index, 2)
            copy = partial(backend.copy, dst, src, MEMCPY_BYTES, stream)
            sampled = take_samples(backend, partial(_one_work, stream, copy), samples)
            bad = device_mismatches(pool, dst, MEMCPY_BYTES, seed=7)
            problem = (f"validation failed: {bad} of {MEMCPY_BYTES} bytes of "
                       f"{device.label} memory differ") if bad else ""
            memory, numa_node = "hbm", None
        else:
            path = HostEnd(pool, device, MEMCPY_BYTES, True, to_device=direction == "h2d",
                           slot=0 if direction == "h2d" else 1)
            sampled = take_samples(backend, path.work_list, samples)
            problem, memory, numa_node = path.problem(), "pinned", device.numa_node
        rows.append(Measurement(
            seconds_per_op=sampled.per_stream_s[0], bytes_per_op=MEMCPY_BYTES,
            work_per_op=1.0, size_bytes=MEMCPY_BYTES, device=device.label,
            device_name=device.name, direction=direction, memory=memory, valid=not problem,
            note=join_notes(problem, f"event-timed: {sampled.ops_per_sample} back-to-back "
                                f"cudaMemcpyAsync of {MEMCPY_BYTES} bytes behind the gate "
                                "per sample, per copy", sampled.note()),
            streams=1, numa_node=numa_node, ops_per_sample=sampled.ops_per_sample,
        ))
    return rows
