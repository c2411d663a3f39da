"""Compile the CUDA kernels to PTX without a GPU and count their global loads and stores.

`bwprof kernels` uses this to show, on any machine with NVVM (numba-cuda's cu12/cu13 extra),
that every kernel compiles for a compute capability and how wide its global memory accesses are:
a bandwidth kernel that issues 32-bit or byte loads will not reach the HBM peak. A kernel whose
global addresses come from an index computed in 32 bits (which wraps past 2^31 elements: an H200
holds 2^34 float64) fails (`narrow_index_arithmetic`). An FMA kernel's hottest loop shows its
share of FMA instructions (`fma_share`): loop overhead there is issue slots the ceiling loses.
The parser is a pure function over PTX text; numba is imported lazily, only to compile.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bwprof.coerce import shorten
from bwprof.errors import BwprofError

if TYPE_CHECKING:
    from bwprof.gpu.kernels import KernelSpec

DEFAULT_CC = (9, 0)
CC_FORM = "--cc expects MAJOR.MINOR such as 9.0"

# An instruction, optionally predicated (`@%p1` / `@!%p1`), whose opcode is ld, ldu or st
# followed by its dot-separated qualifiers, e.g. `ld.global.nc.L1::no_allocate.v2.f64`.
_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?(ld|ldu|st)((?:\.[\w:]+)+)")
_TYPE_BITS = re.compile(r"^(?:[bfsu](8|16|32|64|128)|bf16|f16x2|bf16x2)$")
_TARGET = re.compile(r"^\s*\.target\s+(\w+)", re.MULTILINE)


@dataclass(frozen=True, order=True)
class AccessType:
    """The shape of one global memory instruction: vector count and element type."""

    vector: int  # 1 for a scalar access, 2/4/8 for .v2/.v4/.v8
    dtype: str  # PTX element type without its dot: f64, u32, b128, ...

    @property
    def element_bits(self) -> int:
        if self.dtype in ("bf16", "f16"):
            return 16
        if self.dtype.endswith("x2"):  # f16x2, bf16x2
            return 32
        return int(self.dtype.lstrip("bfsu"))

    @property
    def bits(self) -> int:
        """Bits moved by one instruction of this shape (vector count × element bits)."""
        return self.vector * self.element_bits

    @property
    def label(self) -> str:
        """`f64` for a scalar access, `v2.f64` for a vector one."""
        return self.dtype if self.vector == 1 else f"v{self.vector}.{self.dtype}"


@dataclass(frozen=True)
class GlobalAccesses:
    """Counts of global-memory load and store instructions in PTX, by shape.

    Counts are static instructions in the text (an unrolled loop shows several), not bytes and
    not executions. Only the `.global` state space is counted: generic, shared, local, param
    and const accesses are not.
    """

    loads: Counter[AccessType] = field(default_factory=Counter)
    stores: Counter[AccessType] = field(default_factory=Counter)

    @property
    def load_count(self) -> int:
        return sum(self.loads.values())

    @property
    def store_count(self) -> int:
        return sum(self.stores.values())

    def has(self, op: str, min_bits: int) -> bool:
        """Whether some `op` ("ld" or "st") instruction is at least `min_bits` wide."""
        counts = self.loads if op == "ld" else self.stores
        return any(shape.bits >= min_bits for shape in counts)

    def describe(self, op: str) -> str:
        """`ld 2x f64(64b)`, `st 1x v2.f64(128b), 3x f32(32b)` or `ld none`."""
        counts = self.loads if op == "ld" else self.stores
        if not counts:
            return f"{op} none"
        parts = [
            f"{n}x {shape.label}({shape.bits}b)"
            for shape, n in sorted(counts.items(), key=lambda item: (-item[0].bits, item[0]))
        ]
        return f"{op} " + ", ".join(parts)


def _access_type(qualifiers: list[str]) -> AccessType | None:
    """The shape of an instruction from its qualifiers, or None when it is not global."""
    if "global" not in qualifiers:
        return None
    dtype = qualifiers[-1]
    if not _TYPE_BITS.match(dtype):
        return None
    vector = 1
    for qualifier in qualifiers:
        if re.fullmatch(r"v(2|4|8)", qualifier):
            vector = int(qualifier[1:])
    return AccessType(vector, dtype)


def global_accesses(ptx: str) -> GlobalAccesses:
    """Count the global load (`ld`/`ldu`) and store (`st`) instructions in PTX text by shape."""
    loads: Counter[AccessType] = Counter()
    stores: Counter[AccessType] = Counter()
    for line in ptx.splitlines():
        code = line.split("//", 1)[0]
        match = _INSTRUCTION.match(code)
        if match is None:
            continue
        shape = _access_type(match.group(2).split(".")[1:])
        if shape is None:
            continue
        (stores if match.group(1) == "st" else loads)[shape] += 1
    return GlobalAccesses(loads, stores)


_REGISTER = re.compile(r"%\w+")
_LABEL = re.compile(r"^\s*(\$\w+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$\w+)")
_ARITHMETIC = ("add", "sub", "shl", "mad", "mul", "cvt", "mov", "and", "or")
DEPENDENCY_DEPTH = 3
"""Arithmetic steps (a shift and an add: an index times 8 plus the base) allowed between a
load's value and the address of the load it feeds."""


def _code_lines(ptx: str) -> list[str]:
    return [line.split("//", 1)[0].strip() for line in ptx.splitlines()]


def _global_load(line: str) -> tuple[str, str] | None:
    """(destination, address register) of a scalar global load, else None."""
    match = _INSTRUCTION.match(line)
    if not match or match.group(1) == "st" or "global" not in match.group(2).split("."):
        return None
    registers = _REGISTER.findall(line.split(None, 1)[1] if " " in line else "")
    return (registers[0], registers[1]) if len(registers) >= 2 else None


def _is_dependent(address: str, definitions: dict[str, list[list[str]]],
                  loaded: set[str]) -> bool:
    """Whether `address` is computed from a loaded value in a few arithmetic steps."""
    frontier, seen = {address}, set()
    for _ in range(DEPENDENCY_DEPTH + 1):
        if frontier & loaded:
            return True
        seen |= frontier
        frontier = {source for register in frontier for sources in definitions.get(register, [])
                    for source in sources} - seen
    return bool(frontier & loaded)


def dependent_loads(ptx: str, lines: range | None = None) -> tuple[int, int]:
    """(global loads, those whose address is computed from another global load's value), in
    the whole text or in `lines` of it: a pointer chase's loads each depend on the last."""
    code = _code_lines(ptx)
    definitions: dict[str, list[list[str]]] = {}
    loaded: set[str] = set()
    for line in code:
        load = _global_load(line)
        if load is not None:
            loaded.add(load[0])
            continue
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].split(".")[0] in _ARITHMETIC:
            registers = _REGISTER.findall(parts[1])
            if registers:
                definitions.setdefault(registers[0], []).append(registers[1:])
    loads = dependent = 0
    for number, line in enumerate(code):
        if lines is not None and number not in lines:
            continue
        load = _global_load(line)
        if load is not None:
            loads += 1
            dependent += _is_dependent(load[1], definitions, loaded)
    return loads, dependent


def loop_bodies(ptx: str) -> list[range]:
    """Line ranges of the loops in PTX text: from a label to a branch back to it."""
    code = _code_lines(ptx)
    labels = {m.group(1): n for n, line in enumerate(code) if (m := _LABEL.match(line))}
    loops = []
    for number, line in enumerate(code):
        match = _BRANCH.search(line)
        if match and labels.get(match.group(1), number + 1) < number:
            loops.append(range(labels[match.group(1)], number + 1))
    return loops


def loads_in_flight(ptx: str) -> int:
    """The most global loads a loop issues before its first global store (over every loop
    of the text): how many loads a thread of a copy kernel keeps in flight, e.g. 4 for
    `ld ld ld ld st st st st`. A store can wait for a load's value while later loads run
    only where they came first, so this is what covers a link's or HBM's latency."""
    code = _code_lines(ptx)
    most = 0
    for body in loop_bodies(ptx):
        leading = 0
        for number in body:
            match = _INSTRUCTION.match(code[number])
            if match is None or _access_type(match.group(2).split(".")[1:]) is None:
                continue
            if match.group(1) == "st":
                break
            leading += 1
        most = max(most, leading)
    return most


_FMA = re.compile(r"^(?:@!?%\w+\s+)?fma\.rn\.(f32|f64)\b")


@dataclass(frozen=True)
class LoopFma:
    """FMA instructions (`fma.rn.f32` / `fma.rn.f64`) among a loop body's instructions."""

    fma: int
    instructions: int
    dtype: str  # f32, f64, or both joined (`f32+f64`) in a loop that mixes them

    @property
    def share(self) -> float:
        return self.fma / self.instructions if self.instructions else 0.0


def _instructions(code: list[str], body: range) -> list[str]:
    """The instructions among `code`'s lines in `body`: no labels, directives (`.pragma`,
    `.reg`), braces or blank lines."""
    found = []
    for number in body:
        line = code[number]
        if not line or _LABEL.match(line) or line.startswith((".", "{", "}")):
            continue
        found.append(line)
    return found


def innermost_loops(ptx: str) -> list[range]:
    """The loop bodies (`loop_bodies`) that hold no other loop: where a kernel spends its
    trips."""
    loops = loop_bodies(ptx)
    return [body for body in loops
            if not any(other != body and body.start <= other.start and other.stop <= body.stop
                       for other in loops)]


def fma_share(ptx: str) -> LoopFma | None:
    """FMA instructions against all instructions of the hottest loop of PTX text: of the
    innermost loops, the one with the most FMAs (an unrolled main loop beside its remainder
    loop); labels, directives and braces are not instructions, a predicated one is. None when
    no loop holds an FMA. These are PTX counts: they approximate the SASS that runs (ptxas
    turns each `fma.rn` into one FFMA or DFMA; a 64-bit loop counter's add and compare become
    a few more SASS instructions than in PTX), so a share near 1 is what an FMA ceiling needs
    and a share of 0.6 caps it at 60% of peak."""
    code = _code_lines(ptx)
    best: LoopFma | None = None
    for body in innermost_loops(ptx):
        instructions = _instructions(code, body)
        kinds = [m.group(1) for line in instructions if (m := _FMA.match(line))]
        if not kinds:
            continue
        found = LoopFma(len(kinds), len(instructions), "+".join(sorted(set(kinds))))
        if best is None or found.fma > best.fma:
            best = found
    return best


_GUARD = re.compile(r"^@!?%\w+\s+")
_BRACKETS = re.compile(r"\[([^\]]*)\]")
_DECLARED = re.compile(r"\.reg\s+\.[bsuf](\d+)\s+%(\w+?)<\d+>")
_NARROW = ("s32", "u32", "b32")
_INDEX_ARITHMETIC = ("add", "sub", "mul", "mad", "mul24", "mad24", "shl", "shr", "and", "or",
                     "xor", "not", "neg", "div", "rem", "min", "max", "abs", "sad")
_LOW_HALF_MASKS = ("4294967295", "0xFFFFFFFF", "0xffffffff", "0x00000000FFFFFFFF",
                   "0x00000000ffffffff")


def _address_slice(ptx: str) -> list[tuple[str, list[str], str]]:
    """(opcode, registers, text) of every instruction whose result reaches the address of a
    global load, store or atomic, through any chain of instructions (every definition of a
    register counts: PTX registers are redefined around loops). A loaded value is where a
    chain stops (a pointer chase's address is a value, not an index computed here)."""
    instructions = []
    for line in _code_lines(ptx):
        parts = _GUARD.sub("", line).rstrip(";").split(None, 1)
        if len(parts) == 2 and not parts[0].startswith((".", "$")):
            instructions.append((parts[0], parts[1], line))
    definitions: dict[str, list[int]] = {}
    addresses: list[str] = []
    sources: list[list[str]] = []
    for number, (opcode, operands, _) in enumerate(instructions):
        qualifiers = opcode.split(".")
        registers = _REGISTER.findall(operands)
        loads = qualifiers[0] in ("ld", "ldu", "atom")
        if "global" in qualifiers and (loads or qualifiers[0] in ("st", "red")):
            addresses += [r for inside in _BRACKETS.findall(operands)
                          for r in _REGISTER.findall(inside)]
        sources.append([] if loads else [r for r in registers[1:] if not r.startswith("%p")])
        if qualifiers[0] in ("st", "red", "bra", "ret", "bar", "setp") or not registers:
            continue
        for destination in (_REGISTER.findall(operands.split("[", 1)[0]) if loads
                            else registers[:1]):
            definitions.setdefault(destination, []).append(number)
    reached: set[int] = set()
    frontier, seen = list(addresses), set()
    while frontier:
        register = frontier.pop()
        if register in seen:
            continue
        seen.add(register)
        for number in definitions.get(register, []):
            reached.add(number)
            frontier += sources[number]
    return [(instructions[n][0], _REGISTER.findall(instructions[n][1]), instructions[n][2])
            for n in sorted(reached)]


def narrow_index_arithmetic(ptx: str) -> list[str]:
    """The instructions that make a global address from an index held in 32 bits: 32-bit
    integer arithmetic (`mad.lo.s32 %r4, %ctaid, %ntid, %tid`, `add.s32` of a grid stride)
    and a 64-bit value cut to its low 32 bits (`cvt.u32.u64`, `cvt.s64.s32` of a 64-bit
    register, `and.b64` with 0xFFFFFFFF), anywhere on a chain that reaches the address of a
    global load, store or atomic. Such an index wraps at 2^31 or 2^32 elements. Reading the
    thread and block registers (`mov.u32 %r1, %tid.x`, values CUDA keeps below 2^31) and
    widening them (`cvt.s64.s32 %rd, %r`, `mul.wide.s32`, exact in 64 bits) is fine, and
    32-bit arithmetic whose result feeds only shared memory, a comparison or a trip count is
    not on such a chain. Empty where every index is 64-bit."""
    widths = {prefix: int(bits) for bits, prefix in _DECLARED.findall(ptx)}

    def bits(register: str) -> int | None:
        name = register.lstrip("%").rstrip("0123456789")
        return widths.get(name)

    narrow = []
    for opcode, registers, text in _address_slice(ptx):
        qualifiers = opcode.split(".")
        kind = qualifiers[0]
        if kind in _INDEX_ARITHMETIC and qualifiers[-1] in _NARROW and "wide" not in qualifiers:
            narrow.append(text)  # arithmetic in 32 bits
        elif kind == "cvt" and len(qualifiers) >= 3 and qualifiers[-2] in _NARROW \
                and qualifiers[-1] in ("s64", "u64", "b64"):
            narrow.append(text)  # a 64-bit value cut to 32 bits
        elif kind == "cvt" and len(qualifiers) >= 3 and qualifiers[-1] in _NARROW \
                and len(registers) > 1 and bits(registers[1]) == 64:
            narrow.append(text)  # sign- or zero-extends the low half of a 64-bit register
        elif opcode in ("and.b64", "and.u64", "and.s64") \
                and text.rstrip(";").rsplit(",", 1)[-1].strip() in _LOW_HALF_MASKS:
            narrow.append(text)  # keeps the low half only
    return narrow


def ptx_target(ptx: str) -> str | None:
    """The `.target` of PTX text (e.g. `sm_90`), or None when it has none."""
    match = _TARGET.search(ptx)
    return match.group(1) if match else None


def parse_cc(text: str) -> tuple[int, int]:
    """`"9.0"` -> `(9, 0)`; anything else raises BwprofError saying the expected form."""
    match = re.fullmatch(r"\s*(\d{1,3})\.(\d{1,2})\s*", text)
    if match is None:
        raise BwprofError(f"{CC_FORM}, not {shorten(text)!r}")
    return int(match.group(1)), int(match.group(2))


def check_supported(cc: tuple[int, int]) -> None:
    """BwprofError unless this CUDA toolkit compiles for `cc`: numba-cuda would quietly compile
    for the nearest one it knows (9.9 as 9.0, 99.0 as the newest), which is not what was asked.
    Without NVRTC's list (an old numba-cuda) there is nothing to check against."""
    require_real_cuda()
    try:
        from numba.cuda.cudadrv import nvrtc

        supported = [tuple(c) for c in nvrtc.get_supported_ccs()]  # type: ignore[attr-defined]  # newer numba-cuda only; older raise, handled
    except Exception:
        return
    if supported and tuple(cc) not in supported:
        raise BwprofError(f"this CUDA toolkit does not compile for compute capability "
                          f"{format_cc(cc)}; it knows {', '.join(format_cc(c) for c in supported)}")


def format_cc(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def default_cc() -> tuple[int, int]:
    """The compute capability of the current GPU if there is one, else 9.0 (Hopper).

    Quiet without a driver: `numba.cuda.is_available()` returns False and nothing is printed.
    """
    try:
        from numba import config, cuda

        if getattr(config, "ENABLE_CUDASIM", 0) or not cuda.is_available():
            return DEFAULT_CC
        major, minor = cuda.get_current_device().compute_capability
        return int(major), int(minor)
    except Exception:
        return DEFAULT_CC


@dataclass(frozen=True)
class KernelPtx:
    """One kernel compiled (or not) to PTX for a compute capability."""

    name: str
    ok: bool
    error: str | None = None  # one line, when not ok
    target: str | None = None  # the PTX .target, e.g. sm_90
    accesses: GlobalAccesses = field(default_factory=GlobalAccesses)
    dependent_loads: int = 0
    """Global loads whose address comes from another load's value (a pointer chase)."""
    loads_in_flight: int = 0
    """The most global loads a loop issues before its first store (`loads_in_flight`)."""
    loop_loads: tuple[tuple[int, int], ...] = ()
    """Per loop: (global loads, those fed by a loaded value). A chase whose every loop load
    is dependent takes one dependent load per step (an unrolled loop holds several steps)."""
    narrow_index: tuple[str, ...] = ()
    """Instructions that make a global address from a 32-bit index (`narrow_index_arithmetic`):
    the kernel is wrong past 2^31 elements, so it does not pass."""
    loop_fma: LoopFma | None = None
    """An FMA kernel's (kind `fma`) FMA instructions among its hottest loop's (`fma_share`);
    None for the others (triad's `b + scalar * c` is an fma too, but not a ceiling) and
    without an FMA loop."""


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def require_real_cuda() -> None:
    """Raise BwprofError when numba.cuda is the simulator, which has no compile_ptx."""
    from numba import config

    if getattr(config, "ENABLE_CUDASIM", 0):  # set from the environment at import
        raise BwprofError(
            "numba.cuda is the CUDA simulator in this process (NUMBA_ENABLE_CUDASIM is set), "
            "which cannot compile to PTX; unset NUMBA_ENABLE_CUDASIM and run again"
        )


def compile_kernel(spec: KernelSpec, cc: tuple[int, int]) -> KernelPtx:
    """Compile one kernel to PTX for `cc`; a compile error becomes a failed result."""
    from numba import cuda

    try:
        ptx, _ = cuda.compile_ptx(spec.function, spec.signature, cc=cc)
    except Exception as exc:
        return KernelPtx(spec.name, ok=False, error=_one_line(exc))
    narrow = tuple(narrow_index_arithmetic(ptx))
    return KernelPtx(spec.name, ok=not narrow, error=narrow_index_error(narrow),
                     target=ptx_target(ptx), accesses=global_accesses(ptx),
                     dependent_loads=dependent_loads(ptx)[1],
                     loads_in_flight=loads_in_flight(ptx),
                     loop_loads=tuple(dependent_loads(ptx, body) for body in loop_bodies(ptx)),
                     narrow_index=narrow,
                     loop_fma=fma_share(ptx) if spec.kind == "fma" else None)


def narrow_index_error(narrow: tuple[str, ...] | list[str]) -> str | None:
    """The one line a kernel fails with where a 32-bit index reaches a global address."""
    if not narrow:
        return None
    first = " ".join(narrow[0].rstrip(";").split())
    return (f"32-bit index arithmetic reaches a global address ({len(narrow)} instruction(s), "
            f"first `{first}`): it wraps past 2^31 elements")


def compile_all(
    cc: tuple[int, int], kernels: dict[str, KernelSpec] | None = None
) -> list[KernelPtx]:
    """Every kernel of `bwprof.gpu.kernels.KERNELS` (or of `kernels`) compiled for `cc`.

    Raises BwprofError when numba.cuda is the simulator in this process.
    """
    require_real_cuda()
    if kernels is None:
        from bwprof.gpu.kernels import KERNELS

        kernels = KERNELS
    return [compile_kernel(spec, cc) for spec in kernels.values()]


def _steps(result: KernelPtx) -> str:
    """'; loops 1/1, 4/4: one dependent ld a step' where every global load of the kernel's
    loops waits for the one before (what a pointer chase must be), else what is not."""
    loops = [(loads, dependent) for loads, dependent in result.loop_loads if loads]
    if not loops:
        return ""
    shown = ", ".join(f"{dependent}/{loads}" for loads, dependent in loops)
    if all(dependent == loads for loads, dependent in loops):
        return f"; in its loops {shown}: one dependent ld a step"
    return f"; in its loops {shown} ld dependent: some loads do not wait for the last"


def _fma_note(loop: LoopFma | None) -> str:
    """'  (loop 98.8% fma.rn.f32: 256 of 259 instructions)', or '' without an FMA loop."""
    if loop is None:
        return ""
    return (f"  (loop {loop.share:.1%} fma.rn.{loop.dtype}: {loop.fma} of {loop.instructions} "
            "instructions)")


def report_lines(results: list[KernelPtx], cc: tuple[int, int]) -> list[str]:
    """One line per kernel (name, ok/FAILED, loads, stores, and where they apply the loads
    in flight or dependent, and its loop's FMA share) and a summary line."""
    width = max((len(r.name) for r in results), default=4)
    lines = []
    for r in results:
        if r.ok:
            chase = (f"  ({r.dependent_loads} ld dependent on a loaded value{_steps(r)})"
                     if r.dependent_loads else
                     f"  ({r.loads_in_flight} ld in flight before a st)"
                     if r.loads_in_flight > 1 else "")
            lines.append(
                f"{r.name:<{width}}  ok      {r.accesses.describe('ld'):<18}  "
                f"{r.accesses.describe('st')}{chase}{_fma_note(r.loop_fma)}"
            )
        else:
            lines.append(f"{r.name:<{width}}  FAILED  {r.error}")
    failed = sum(not r.ok for r in results)
    targets = sorted({r.target for r in results if r.target})
    target = f" (PTX target {', '.join(targets)})" if targets else ""
    lines.append(
        f"{len(results)} kernel(s) for compute capability {format_cc(cc)}{target}: "
        f"{len(results) - failed} compiled, {failed} failed"
    )
    return lines
