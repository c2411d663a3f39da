"""What a run measures: presets, user options parsed and checked, and the frozen Plan.

The checks on what to measure happen here (with the output folder, the sample interval and
the format checked beside them in `api.check_options`), before anything is measured or
written, so bad input fails fast with one line and leaves no half-written run folder.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from bwprof.cases import CaseSpec, select_cases
from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.rules import CACHE_MULTIPLE, HOST_MEMORY_SHARE, default_memory_budget
from bwprof.schema.meta import PlanMeta
from bwprof.units import GiB, KiB, MiB, TiB, format_bytes

HOST_ELEMENT_BYTES = 8  # float64
MIN_HOST_ARRAY_BYTES = 1024 * HOST_ELEMENT_BYTES
DEFAULT_HOST_ARRAY_BYTES = (1 << 25) * HOST_ELEMENT_BYTES  # STREAM's classic 2^25 elements
MIN_DEFAULT_HOST_ARRAY_BYTES = 32 * MiB
HOST_ARRAYS = 3  # STREAM keeps a, b and c resident


@dataclass(frozen=True)
class Preset:
    repeats: int
    transfer_sizes: tuple[int, ...]
    """Transfer sizes swept by the host<->device cases (bytes)."""
    pipeline_chunks: tuple[int, ...]
    """Chunk sizes swept by pipeline_chunked (bytes)."""


def _powers(first: int, last: int, factor: int) -> tuple[int, ...]:
    sizes, size = [], first
    while size <= last:
        sizes.append(size)
        size *= factor
    return tuple(sizes)


PRESETS: dict[str, Preset] = {
    "quick": Preset(repeats=5, transfer_sizes=(64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB),
                    pipeline_chunks=(16 * MiB, 64 * MiB)),
    "standard": Preset(repeats=10, transfer_sizes=_powers(4 * KiB, 1 * GiB, 4),
                       pipeline_chunks=_powers(4 * MiB, 256 * MiB, 4)),
    "full": Preset(repeats=20, transfer_sizes=_powers(4 * KiB, 4 * GiB, 2),
                   pipeline_chunks=_powers(1 * MiB, 256 * MiB, 4)),
}

_UNITS = {
    "": 1, "b": 1,
    "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB, "t": TiB, "tib": TiB,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}


MAX_DIGITS = 30
"""Digits a number the user types may have: more is a typo, and Python refuses to turn
text of over 4300 digits into an int."""
MAX_HOST_ARRAY_BYTES = 1 << 60
"""An exbibyte per array: beyond any machine, and three of them still count in an int64
(`bytes_per_op`). Sizes are parsed exactly (as fractions), never through a float."""

MAX_REPEATS = 1000
"""More samples than this narrow nothing a capacity review reads; a typo (10000000) would run
for days."""


def parse_size(text: str) -> int:
    """Bytes from '268435456', '256MiB', '256M' (binary) or '0.5GB' (decimal)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise BwprofError(
            f"malformed size {shorten(text)!r}; use bytes or a number with a unit, e.g. "
            f"256MiB, 1GiB, 64M"
        )
    if len(match.group(1)) > MAX_DIGITS:
        raise BwprofError(f"size {shorten(text)!r} is too large; a host array is at most "
                          f"{format_bytes(MAX_HOST_ARRAY_BYTES)}")
    value = Fraction(match.group(1)) * _UNITS[unit]  # exact: a float rounds above 2^53
    if value > MAX_HOST_ARRAY_BYTES:
        raise BwprofError(f"size {shorten(text)!r} is too large; a host array is at most "
                          f"{format_bytes(MAX_HOST_ARRAY_BYTES)}")
    if value < 1:
        raise BwprofError(f"size {shorten(text)!r} is not a positive number of bytes")
    if value.denominator != 1:  # int() would quietly drop the fraction: 8192.5 as 8192
        raise BwprofError(f"--size {shorten(text)!r} is {float(value):.6g} bytes, not a whole "
                          f"number; give whole bytes, e.g. {math.floor(value / 8) * 8 or 8}")
    return int(value)


def list_items(text: str) -> list[str]:
    """The entries of a comma-separated option, blanks dropped: '1,2,' is '1,2', as for
    --cases (a list a script built with a trailing comma)."""
    return [token.strip() for token in text.split(",") if token.strip()]


def int_tuple(value: object, option: str) -> tuple[int, ...]:
    """An option given from Python as one int or a sequence of them (the API's `threads=1`,
    `size=[1 << 20]`), as a tuple; anything else is a one-line BwprofError."""
    items: list[object] = (
        [value] if isinstance(value, numbers.Integral)
        else list(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes))
        else [])
    values = [v for v in items if isinstance(v, numbers.Integral) and not isinstance(v, bool)]
    if not values or len(values) != len(items):
        raise BwprofError(f"{option} expects an integer, a list of integers or a string such "
                          f"as '1,2', got {value!r}")
    return tuple(dict.fromkeys(int(v) for v in values))  # NumPy's integers too


def parse_int_list(text: str, option: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4), duplicates removed, order kept. An empty entry between
    others ('1,,2', ',1') is refused: a count left out of a script's list, not a trailing
    comma."""
    values: list[int] = []
    tokens = list_items(text)
    if tokens and any(not part.strip() for part in text.strip().rstrip(",").split(",")):
        raise BwprofError(f"{option} {shorten(text)!r} has an empty entry between commas; give "
                          f"a list such as {','.join(tokens)!r}")
    for token in tokens or [text]:
        if not re.fullmatch(r"\d+", token):
            raise BwprofError(f"{option} expects a comma-separated list of integers, got "
                              f"{shorten(text)!r}")
        if len(token) > MAX_DIGITS:
            raise BwprofError(f"{option} {shorten(token)} is far too large a count")
        if int(token) not in values:
            values.append(int(token))
    return tuple(values)


def default_threads(usable_cpus: int, numba_threads: int | None) -> int:
    """Threads the host cases use without --threads: every CPU this process may use, but
    no more than numba will run (NUMBA_NUM_THREADS)."""
    return usable_cpus if numba_threads is None else max(1, min(usable_cpus, numba_threads))


def thread_cap_note(usable_cpus: int, numba_threads: int | None) -> str | None:
    """What to tell the user where NUMBA_NUM_THREADS, not the CPUs, sets the default."""
    limit = default_threads(usable_cpus, numba_threads)
    if limit >= usable_cpus:
        return None
    return (f"host cases use {limit} thread(s), the NUMBA_NUM_THREADS={numba_threads} limit, "
            f"not all {usable_cpus} CPUs this process may use")


def default_host_array_bytes(llc_bytes: int | None) -> int:
    """Bytes per STREAM array: at least 4x all last-level cache, whole MiB, 32 MiB at least."""
    if not llc_bytes:
        return DEFAULT_HOST_ARRAY_BYTES
    wanted = max(CACHE_MULTIPLE * llc_bytes, MIN_DEFAULT_HOST_ARRAY_BYTES)
    return -(-wanted // MiB) * MiB


@dataclass(frozen=True)
class Plan:
    """Everything a run will do; built once from user options and checked before any work."""

    preset: str
    cases: tuple[CaseSpec, ...]
    repeats: int
    """Timed repetitions per figure: host cases run this many and drop the first as warm-up;
    GPU cases take this many samples after a separate warm-up sample."""
    threads: tuple[int, ...]
    host_array_bytes: tuple[int, ...]
    transfer_sizes: tuple[int, ...]
    pipeline_chunks: tuple[int, ...] = ()
    size_given: bool = False
    """`host_array_bytes` is the user's --size: the latency cases chase those working sets
    too, instead of sweeping to 4x the last-level cache."""
    latency_step: int | None = None
    """The factor between a latency sweep's working sets; None: the preset's (host 2x, 4x
    in quick; GPU 4x, 2x in full). `--budget` sets 4 to thin the sweeps."""
    sweep_gpus: Literal["all", "first"] = "all"
    """GPUs whose cases sweep every size: all, or (the quick preset, `--budget`) the first
    only, the others measured at each case's largest size (its headline point)."""
    pairs: Literal["all", "ring"] = "all"
    """GPU pairs measured at the matrix size: every ordered pair, or (the quick preset,
    `--budget`) a ring, each GPU to the next, both ways."""
    counter_windows: bool = True
    """Large rows repeat their work for a counter window while telemetry samples;
    `--budget` may drop the windows (the rows keep their counters, fewer of them)."""
    past_host_cache: bool = True
    """Pageable copies sweep on past the transfer sizes to 4x the host's last-level cache
    (a smaller buffer may be served from the cache); the quick preset and `--budget` keep
    them at the transfer sizes, where such rows are flagged `in_cache`."""
    budget_s: float | None = None
    """The --budget the plan was fitted to, seconds; None: none asked for."""
    dropped: tuple[str, ...] = ()
    """What fitting the budget took out of the plan, in words."""

    def sweep_factor(self, default: int) -> int:
        return self.latency_step or default

    @property
    def host_cases(self) -> tuple[CaseSpec, ...]:
        return tuple(c for c in self.cases if c.target == "host")

    @property
    def gpu_cases(self) -> tuple[CaseSpec, ...]:
        return tuple(c for c in self.cases if c.target == "gpu")

    def as_meta(self) -> PlanMeta:
        """The plan as system.json records it."""
        return PlanMeta(
            preset=self.preset, cases=tuple(c.key for c in self.cases), repeats=self.repeats,
            threads=tuple(self.threads), host_array_bytes=tuple(self.host_array_bytes),
            transfer_sizes=tuple(self.transfer_sizes),
            pipeline_chunks=tuple(self.pipeline_chunks),
            latency_step=self.latency_step, pairs=self.pairs, sweep_gpus=self.sweep_gpus,
            counter_windows=self.counter_windows, past_host_cache=self.past_host_cache,
            budget_s=self.budget_s,
            dropped=tuple(self.dropped),
        )

    def as_dict(self) -> dict[str, object]:
        return self.as_meta().as_dict()


def make_plan(
    *,
    preset: str = "standard",
    cases: str | None = None,
    repeats: int | None = None,
    threads: str | tuple[int, ...] | None = None,
    size: str | tuple[int, ...] | None = None,
    usable_cpus: int,
    llc_bytes: int | None,
    memory_available_bytes: int | None,
    fleet: bool = False,
    numba_threads: int | None = None,
    memory_total_bytes: int | None = None,
) -> Plan:
    """Check every user option against this machine and return the Plan, or raise
    BwprofError. `numba_threads`: numba's thread limit (NUMBA_NUM_THREADS), which caps the
    default thread count and refuses a larger --threads."""
    if preset not in PRESETS:
        raise BwprofError(f"unknown preset {shorten(preset)!r}; choose one of: "
                          f"{', '.join(PRESETS)}")
    chosen = PRESETS[preset]
    selected = select_cases(cases, fleet)

    repeat_count = chosen.repeats if repeats is None else repeats
    if isinstance(repeat_count, bool) or not isinstance(repeat_count, numbers.Integral):
        raise BwprofError(f"--repeats must be a whole number, got {shorten(repr(repeats))}")
    if not 2 <= repeat_count <= MAX_REPEATS:
        raise BwprofError(
            f"--repeats must be from 2 (the first repetition is dropped) to {MAX_REPEATS}, "
            f"got {shorten(repeat_count)}"
        )

    limit = default_threads(usable_cpus, numba_threads)
    thread_counts = (
        (limit,) if threads is None
        else parse_int_list(threads, "--threads") if isinstance(threads, str)
        else int_tuple(threads, "--threads")
    )
    for count in thread_counts:
        if not 1 <= count <= usable_cpus:
            raise BwprofError(
                f"--threads {shorten(count)} is outside 1..{usable_cpus} (the CPUs this "
                f"process may use)"
            )
        if count > limit:
            raise BwprofError(
                f"--threads {count} is more than the {limit} thread(s) NUMBA_NUM_THREADS="
                f"{numba_threads} lets numba run; set NUMBA_NUM_THREADS={max(thread_counts)} "
                f"or more (or unset it), or ask for --threads {limit} at most"
            )

    if size is None:
        array_bytes: tuple[int, ...] = (default_host_array_bytes(llc_bytes),)
    elif isinstance(size, str):
        parts = list_items(size) or [size]
        array_bytes = tuple(dict.fromkeys(parse_size(part) for part in parts))
    else:
        array_bytes = int_tuple(size, "--size")
    for nbytes in array_bytes:
        if nbytes > MAX_HOST_ARRAY_BYTES:  # an int from Python skips parse_size's check
            raise BwprofError(f"--size {shorten(nbytes)} B is too large; a host array is at "
                              f"most {format_bytes(MAX_HOST_ARRAY_BYTES)}")
        if nbytes < MIN_HOST_ARRAY_BYTES:
            raise BwprofError(
                f"--size {nbytes} B is too small; host arrays need at least "
                f"{format_bytes(MIN_HOST_ARRAY_BYTES)} (1024 float64 elements)"
            )
        if nbytes % HOST_ELEMENT_BYTES:
            below = nbytes // HOST_ELEMENT_BYTES * HOST_ELEMENT_BYTES
            raise BwprofError(
                f"--size {nbytes} B is not a whole number of float64 elements "
                f"({HOST_ELEMENT_BYTES} bytes each); use {below} or {below + HOST_ELEMENT_BYTES}"
            )
    # The DDR cases hold three arrays of --size, a latency chase one working set of it.
    arrays = HOST_ARRAYS if any(c.key.startswith("ddr_") for c in selected) else 1
    if size is not None and memory_available_bytes and any(c.target == "host"
                                                            for c in selected):
        largest = max(array_bytes)
        budget = HOST_MEMORY_SHARE * memory_available_bytes
        if arrays * largest > budget:
            fitted = int(budget // arrays) // MiB * MiB  # whole MiB: a size one can type
            what = "3 arrays" if arrays == HOST_ARRAYS else "its working set"
            raise BwprofError(
                f"--size {format_bytes(largest)} needs {format_bytes(arrays * largest)} "
                f"for {what}, more than {HOST_MEMORY_SHARE:.0%} of the "
                f"{format_bytes(memory_available_bytes)} available (the rest is left to the "
                f"system); choose --size {fitted // MiB}MiB or less"
            )
    if size is None:
        budget_bytes, _ = default_memory_budget(memory_available_bytes, memory_total_bytes)
        if budget_bytes is not None and HOST_ARRAYS * array_bytes[0] > budget_bytes:
            fitted = budget_bytes // HOST_ARRAYS // MiB * MiB  # whole MiB: a size one can type
            array_bytes = (max(fitted, MIN_HOST_ARRAY_BYTES),)

    return Plan(
        preset=preset,
        cases=selected,
        repeats=repeat_count,
        threads=thread_counts,
        host_array_bytes=array_bytes,
        transfer_sizes=chosen.transfer_sizes,
        pipeline_chunks=chosen.pipeline_chunks,
        size_given=size is not None,
        past_host_cache=preset != "quick",
        sweep_gpus="first" if preset == "quick" else "all",
        pairs="ring" if preset == "quick" else "all",
    )
