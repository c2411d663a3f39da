"""Run metadata, the content of system.json, as frozen dataclasses (schema version 2).

`bwprof run` builds a `RunMeta` and writes `RunMeta.as_dict()`; every reader gets a `RunMeta`
from `RunMeta.from_dict()`, which checks every part's kind once, so the report layer reads
attributes instead of guarding each `dict.get`. A part of the wrong kind is a `MetaError`
naming its dotted path (`gpus.devices[0].properties should be an object, not str`).

Rules of the file, in one place:

- **Strict JSON.** `as_dict()` holds only JSON values; a float that is not finite (NaN, inf)
  becomes null, so `json.dumps(..., allow_nan=False)` always succeeds. Reading, a typed
  number must be finite.
- **Older files read.** A field a version-1 file may lack has a default; a field without one
  is required. `Record.recorded(name)` tells a value the file held from a default standing
  in for one it predates. Parts that only some runs reach (the fleet's `nodes` and `mpi`,
  telemetry's counts) are left out of the file while None, `close_errors` while empty, as
  bwprof always wrote them.
- **Unknown keys are ignored.** A key this version does not know (one a newer bwprof added)
  is neither validated nor kept: this model is what this version can use, and nothing
  rewrites a stored system.json (`report` and `compare` only read it; the fleet merge writes
  metadata its own ranks built with the same version).
- **Open where the hardware is open.** NVML's per-device `metadata` (40-odd optional fields
  that vary by driver and GPU) and SMBIOS memory modules stay mappings; the structure around
  them is typed.

The host's dataclasses (`HostInfo`, `CacheLevel`, `NumaNode`) and CUDA's device properties
(`DeviceProperties`) live here, the bottom layer, so the measurement code that fills them
(`bwprof.system`, `bwprof.gpu`) and the report code that reads them share one definition.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, NoReturn, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from bwprof.coerce import shorten
from bwprof.schema.reading import MAX_INT, gc_paused

AFTER_EVERY_CASE = "after every case was measured"
"""The end of `stopped_by` of a run a signal stopped in its final files ('SIGHUP after every
case was measured'): every row is there."""


class MetaError(ValueError):
    """A part of system.json of the wrong kind, or missing; the message names its path."""


_R = TypeVar("_R", bound="Record")

OMIT_NONE: dict[str, object] = {"omit": "none"}
"""Field metadata: left out of `as_dict()` while None (a part the run did not reach)."""
OMIT_EMPTY: dict[str, object] = {"omit": "empty"}
"""Field metadata: left out of `as_dict()` while empty."""
COUNT: dict[str, object] = {"min": 0}
"""Field metadata: a count or size, never negative."""


def _kind(value: object) -> str:
    """The JSON name of a value's kind, for messages."""
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _expected(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_expected(arg) for arg in get_args(hint) if arg is not type(None))
    if origin is tuple:
        return "a list"
    if origin in (dict, Mapping) or (isinstance(hint, type) and issubclass(hint, Record)):
        return "an object"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        hint, str(hint))


# -- checking parsed JSON ---------------------------------------------------------------------
#
# A fleet's system.json holds some two hundred values a node, ten thousand nodes: each field
# type is compiled once into a converter (a closure chosen by its hint), and a value's dotted
# path is spelled only when it is refused. A converter raises `_Refusal` with the words after
# the path; each record, list and object it passes on the way up adds its part of the path,
# and `Record.from_dict` raises the MetaError naming it.

_FIELD, _INDEX, _KEY = range(3)


class _Refusal(Exception):
    """A value of the wrong kind on its way up to `Record.from_dict`: `words` spells the
    message once its path is known; `steps` are the parts of that path, innermost first."""

    def __init__(self, words: Callable[[str], str]) -> None:
        super().__init__()
        self.words = words
        self.steps: list[tuple[int, object]] = []

    def at(self, step: int, part: object) -> _Refusal:
        """This refusal, one part further out on its path."""
        self.steps.append((step, part))
        return self

    def message(self, where: str) -> str:
        """The message, the path starting at `where` (the part `from_dict` was asked for)."""
        path = where
        for step, part in reversed(self.steps):
            if step == _FIELD:
                path = f"{path}.{part}" if path else str(part)
            elif step == _INDEX:
                path = f"{path}[{part}]"
            else:
                path = f"{path}.{shorten(part)}"
        return self.words(path)


def _wrong_kind(expected: str, value: object) -> _Refusal:
    return _Refusal(lambda path: f"{path} should be {expected}, not {_kind(value)}")


def _below(minimum: float, value: object) -> _Refusal:
    return _Refusal(lambda path: f"{path} should be {minimum:g} or more, not {value!r}")


_Converter = Callable[[Any], Any]
_CONVERTERS: dict[tuple[Any, float | None], _Converter] = {}
_SCALARS = (bool, int, float, str)


def _converter(hint: Any, minimum: float | None = None) -> _Converter:
    """The converter of a field's type hint and `min` metadata, compiled at its first use."""
    convert = _CONVERTERS.get((hint, minimum))
    if convert is None:
        convert = _CONVERTERS[hint, minimum] = _compile(hint, minimum)
    return convert


def _compile(hint: Any, minimum: float | None) -> _Converter:
    """A function checking parsed JSON against `hint` (then `minimum`: a number, or each
    number of a tuple, at least that) and returning the field's value, or raising
    `_Refusal`. Chosen once here, so a value costs its own checks only."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        options = tuple(arg for arg in args if arg is not type(None))
        nullable = len(options) < len(args)
        if len(options) == 1 and options[0] in _SCALARS:
            return _compile_scalar(options[0], minimum, nullable)
        convert = _compile_union(tuple(_converter(arg) for arg in options), nullable)
    elif hint in _SCALARS:
        return _compile_scalar(hint, minimum, nullable=False)
    elif hint is object:
        convert = _as_is
    elif origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            convert = _compile_sequence(_converter(args[0]), _expected(hint))
        else:
            convert = _compile_fixed(tuple(_converter(arg) for arg in args), _expected(hint))
    elif origin in (dict, Mapping):
        convert = _compile_mapping(_converter(args[1]), _expected(hint))
    elif isinstance(hint, type) and issubclass(hint, Record):
        convert = _compile_record(hint)
    else:
        def unknown(value: object) -> NoReturn:  # raised where such a field is read, as ever
            raise TypeError(f"bwprof.schema.meta cannot check a field of type {hint!r}")
        return unknown
    return convert if minimum is None else _compile_minimum(convert, minimum)


def _compile_scalar(hint: type, minimum: float | None, nullable: bool) -> _Converter:
    """bool, int, float or str, or null too where `nullable` (`int | None`): the fields
    most values fill, one call each."""
    expected = _expected(hint)
    low = -math.inf if minimum is None else minimum
    if hint is int:
        def to_int(value: object) -> object:
            if isinstance(value, int) and value.__class__ is not bool:
                if -MAX_INT <= value < MAX_INT:  # no count bwprof records is larger
                    if value < low:
                        raise _below(low, value)
                    return value
                bits = value.bit_length()
                raise _Refusal(lambda path: f"{path} should be an integer of 64 bits, not one "
                                            f"of {bits} bits")
            if value is None and nullable:
                return None
            raise _wrong_kind(expected, value)
        return to_int
    if hint is float:
        def to_float(value: object) -> object:
            if isinstance(value, (int, float)) and value.__class__ is not bool:
                if _finite(value):
                    if value < low:
                        raise _below(low, value)
                    return value
                shown_value = (repr(value) if isinstance(value, float)
                               else f"an integer of {value.bit_length()} bits")
                raise _Refusal(lambda path: f"{path} should be a finite number, not "
                                            f"{shown_value}")
            if value is None and nullable:
                return None
            raise _wrong_kind(expected, value)
        return to_float
    kind = hint  # a bool or a str is never below a minimum (neither is a number)

    def to_kind(value: object) -> object:
        if isinstance(value, kind) or (value is None and nullable):
            return value
        raise _wrong_kind(expected, value)
    return to_kind


def _as_is(value: object) -> object:
    return value


def _compile_union(options: tuple[_Converter, ...], nullable: bool) -> _Converter:
    """The first option that takes the value; null where the union holds None. The last
    option's refusal is the union's."""
    *first, last = options

    def any_of(value: object) -> object:
        if value is None and nullable:
            return None
        for option in first:
            try:
                return option(value)
            except _Refusal:
                pass
        return last(value)
    return any_of


def _compile_sequence(item: _Converter, expected: str) -> _Converter:
    """tuple[X, ...]: a JSON list, each entry an X."""
    def to_tuple(value: object) -> object:
        if not isinstance(value, (list, tuple)):
            raise _wrong_kind(expected, value)
        items: list[object] = []
        try:
            for entry in value:
                items.append(item(entry))
        except _Refusal as refusal:
            raise refusal.at(_INDEX, len(items)) from None  # the entry after those taken
        return tuple(items)
    return to_tuple


def _compile_fixed(items: tuple[_Converter, ...], expected: str) -> _Converter:
    """tuple[X, Y]: a JSON list of exactly that many entries."""
    def to_fixed(value: object) -> object:
        if not isinstance(value, (list, tuple)):
            raise _wrong_kind(expected, value)
        if len(value) != len(items):
            given = len(value)
            raise _Refusal(lambda path: f"{path} should be a list of {len(items)}, not of "
                                        f"{given}")
        out: list[object] = []
        try:
            for entry, item in zip(value, items, strict=True):
                out.append(item(entry))
        except _Refusal as refusal:
            raise refusal.at(_INDEX, len(out)) from None
        return tuple(out)
    return to_fixed


def _compile_mapping(item: _Converter, expected: str) -> _Converter:
    """Mapping[str, X]: a JSON object, each value an X (a plain dict is returned)."""
    if item is _as_is:
        def to_open(value: object) -> object:
            if isinstance(value, Mapping):
                return dict(zip(map(str, value.keys()), value.values(), strict=True))
            raise _wrong_kind(expected, value)
        return to_open

    def to_dict(value: object) -> object:
        if not isinstance(value, Mapping):
            raise _wrong_kind(expected, value)
        out: dict[str, object] = {}
        for key, entry in value.items():
            name = str(key)
            try:
                out[name] = item(entry)
            except _Refusal as refusal:
                raise refusal.at(_KEY, key) from None
        return out
    return to_dict


def _compile_minimum(convert: _Converter, minimum: float) -> _Converter:
    """`convert`, then the field's `min` check of each number of the tuple it gives (all
    entries are checked for their kind first, as ever)."""
    def at_least(value: object) -> object:
        value = convert(value)
        if isinstance(value, tuple):
            for index, item in enumerate(value):
                if (isinstance(item, (int, float)) and item.__class__ is not bool
                        and item < minimum):
                    raise _below(minimum, item).at(_INDEX, index)
        elif (isinstance(value, (int, float)) and value.__class__ is not bool
              and value < minimum):
            raise _below(minimum, value)
        return value
    return at_least


_ABSENT = object()
def _compile_record(cls: type[Record]) -> _Converter:
    """A JSON object as a `cls`: its function (`_record_function`) is written at the first
    object read, once every class the fields name is defined."""
    made: _Converter | None = None

    def to_record(data: object) -> object:
        nonlocal made
        if made is None:
            made = _record_function(cls)
        return made(data)
    return to_record


_RECORD_FUNCTIONS: dict[type, _Converter] = {}


def _record_function(cls: type[Record]) -> _Converter:
    """`cls`'s reading function, written once (a record field's is called directly)."""
    made = _RECORD_FUNCTIONS.get(cls)
    if made is None:
        made = _RECORD_FUNCTIONS[cls] = _write_record_function(cls)
    return made


def _not_an_object(data: object) -> _Refusal:
    kind = _kind(data)
    return _Refusal(lambda path: f"{path or 'the top level'} should be an object, not {kind}")


def _missing(name: str) -> _Refusal:
    return _Refusal(lambda path: f"{path} is missing").at(_FIELD, name)


def _accepted_as_is(hint: Any, minimum: float | None, at: str, names: dict[str, object]
                    ) -> str | None:
    """A Python test, on `v`, true only of a value `hint`'s converter would return as it is
    (the common case: an int in range, a finite float, a str); None where there is none.
    A value it does not take goes through the converter, which refuses it as ever."""
    origin, args = get_origin(hint), get_args(hint)
    nullable = False
    if origin in (Union, types.UnionType):
        options = tuple(arg for arg in args if arg is not type(None))
        nullable = len(options) < len(args)
        if len(options) != 1:
            return None
        hint = options[0]
    test: str | None = None
    if hint is int:
        names[f"lo{at}"] = -MAX_INT if minimum is None else max(minimum, -MAX_INT)
        test = f"(v.__class__ is int and lo{at} <= v < _MAX_INT)"
    elif hint is float:
        if minimum is None:
            test = "(v.__class__ is float and _NEG_INF < v < _INF)"
        else:
            names[f"lo{at}"] = minimum
            test = f"(v.__class__ is float and lo{at} <= v < _INF)"
    elif hint in (str, bool):
        test = f"v.__class__ is {hint.__name__}"
    if nullable:
        return "v is None" if test is None else f"(v is None or {test})"
    return test


def _write_record_function(cls: type[Record]) -> _Converter:
    """The function reading a JSON object as a `cls`, written out field by field (a
    fleet's system.json is a hundred thousand records: a loop over a plan, and a call for
    each of its two million values, were most of reading it). Each field is looked up in
    order; a value the field's converter would return as it is (`_accepted_as_is`) is
    taken without the call, any other goes through it, so every refusal is the
    converter's. The record is built by filling its __dict__ in field order, as the
    dataclass's __init__ would (the `_recorded` names last); a class whose __init__ does
    more (a __post_init__, a field outside it) is built through it."""
    hints = get_type_hints(cls)
    specs = fields(cls)
    every = frozenset(spec.name for spec in specs)
    plain = (not hasattr(cls, "__post_init__") and all(spec.init for spec in specs)
             and len(specs) == len(cls.__dataclass_fields__))
    names: dict[str, object] = {
        "Mapping": Mapping, "_ABSENT": _ABSENT, "_Refusal": _Refusal, "_FIELD": _FIELD,
        "_MAX_INT": MAX_INT, "_INF": math.inf, "_NEG_INF": -math.inf, "cls": cls,
        "_not_an_object": _not_an_object, "_missing": _missing, "every": every,
        "_new": object.__new__, "_setattr": object.__setattr__}
    recorded_of: dict[tuple[str, ...], frozenset[str]] = {}

    def recorded(missing: tuple[str, ...]) -> frozenset[str]:
        """The fields the file held, one set for each set of fields it lacked."""
        held = recorded_of.get(missing)
        if held is None:
            held = recorded_of[missing] = every.difference(missing)
        return held
    names["recorded"] = recorded
    lines = ["def to_record(data):",
             "    if data.__class__ is not dict and not isinstance(data, Mapping):",
             "        raise _not_an_object(data)",
             "    get = data.get",
             "    missing = ()"]
    for at, spec in enumerate(specs):
        hint, minimum = hints[spec.name], spec.metadata.get("min")
        names[f"name{at}"] = spec.name
        lines += [f"    v = get(name{at}, _ABSENT)", "    if v is _ABSENT:"]
        if spec.default is MISSING and spec.default_factory is MISSING:
            lines.append(f"        raise _missing(name{at})")
        else:
            lines.append(f"        missing += (name{at},)")
            if spec.default_factory is MISSING:
                names[f"default{at}"] = spec.default
                lines.append(f"        v = default{at}")
            else:
                names[f"factory{at}"] = spec.default_factory
                lines.append(f"        v = factory{at}()")
        test = _accepted_as_is(hint, minimum, str(at), names)
        names[f"convert{at}"] = _direct(hint) if minimum is None else _converter(hint, minimum)
        lines += [f"    elif not {test}:" if test is not None else "    else:",
                  "        try:",
                  f"            v = convert{at}(v)",
                  "        except _Refusal as refusal:",
                  f"            raise refusal.at(_FIELD, name{at}) from None",
                  f"    value{at} = v"]
    state = ", ".join(f"name{at}: value{at}" for at in range(len(specs)))
    lines.append("    held = recorded(missing) if missing else every")
    if plain:
        lines += ["    record = _new(cls)",
                  f"    record.__dict__.update({{{state}, '_recorded': held}})"]
    else:
        lines += [f"    state = {{{state}}}",
                  "    record = cls(**{name: state[name] for name in state"
                  " if name not in missing})",
                  "    _setattr(record, '_recorded', held)"]
    lines.append("    return record")
    exec("\n".join(lines), names)  # our own text, written from the dataclass's fields
    function: _Converter = cast(_Converter, names["to_record"])
    return function


def _direct(hint: Any) -> _Converter:
    """The converter of a field `X` or `X | None` once its test has taken None (see
    `_accepted_as_is`): X's own, a record's function called directly."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        options = tuple(arg for arg in args if arg is not type(None))
        if len(options) != 1 or options[0] in _SCALARS:
            return _converter(hint)
        hint = options[0]
    if isinstance(hint, type) and issubclass(hint, Record):
        return _record_function(hint)
    return _converter(hint)


def _finite(value: int | float) -> bool:
    """Whether `value` is a finite double: an integer of more than about 308 digits is not
    one (math.isfinite raises OverflowError for it)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def to_json(value: object, text: Callable[[str], str] | None = None) -> object:
    """`value` as plain JSON: records as objects, sequences as lists, a float that is not
    finite as null; NumPy scalars (from NVML or sysfs code) become Python numbers. With
    `text`, every string (keys too) passes through it (`schema.text.json_ready`: printable).
    The one JSON sanitiser: system.json and the --json outputs both go through it."""
    if isinstance(value, Record):
        return value.as_dict() if text is None else to_json(value.as_dict(), text)
    if isinstance(value, str):
        return value if text is None else text(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key) if text is None else text(str(key)): to_json(item, text)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item, text) for item in value]
    if isinstance(value, (set, frozenset)):
        return [to_json(item, text) for item in sorted(value, key=str)]
    item = getattr(value, "item", None)  # a NumPy scalar
    if callable(item):
        plain = item()
        if plain is None or isinstance(plain, (bool, int, float, str)):
            return to_json(plain, text)
    return str(value) if text is None else text(str(value))


def json_object(data: Mapping[str, object]) -> dict[str, object]:
    """A mapping as a plain JSON object (see `to_json`), for the open parts of the model."""
    return {str(key): to_json(value) for key, value in data.items()}


@dataclass(frozen=True)
class Record:
    """Base of every part of system.json: `from_dict` checks kinds once, `as_dict` is the
    JSON. Subclasses are frozen dataclasses whose field types say what the file holds."""

    @classmethod
    def from_dict(cls: type[_R], data: object, where: str = "") -> _R:
        """The part at dotted path `where` (empty for the top) from parsed JSON; MetaError
        naming the path where a value is missing or of the wrong kind."""
        try:
            with gc_paused():
                record: _R = _converter(cls)(data)
        except _Refusal as refusal:
            raise MetaError(refusal.message(where)) from None
        return record

    def recorded(self, name: str) -> bool:
        """Whether the file held field `name`: False for a field added after the file was
        written (a version-1 file has no `sandbox`), where the default stands in for a value
        nobody recorded. True for every field of metadata built in this process."""
        given: frozenset[str] | None = self.__dict__.get("_recorded")
        return given is None or name in given

    def as_dict(self) -> dict[str, object]:
        """The JSON object of this part, fields in declared order."""
        out: dict[str, object] = {}
        for spec in fields(self):
            value = getattr(self, spec.name)
            omit = spec.metadata.get("omit")
            if (omit == "none" and value is None) or (omit == "empty" and not value):
                continue
            out[spec.name] = to_json(value)
        return out


# -- the host ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheLevel(Record):
    level: int
    type: str
    size_bytes: int = field(metadata=COUNT)
    instances: int = field(metadata=COUNT)


@dataclass(frozen=True)
class NumaNode(Record):
    node: int = field(metadata=COUNT)
    cpus: str
    memory_total_bytes: int | None = field(metadata=COUNT)


@dataclass(frozen=True)
class MachineIdentity(Record):
    """What tells one machine from another where host names repeat (`vm`, `localhost`):
    the sources read, and the `box` key derived from the most stable of them
    (`bwprof.system.machine_identity`). A run that has none (bwprof before it was recorded)
    is told apart by host name only."""

    box: str | None
    """12 hex digits of SHA-256 over `<box_source>:<value>`; None where no source was read."""
    box_source: str | None
    """Which source `box` comes from: 'dmi_uuid', 'dmi_serial', 'machine_id' or 'gpu_uuids'."""
    dmi_uuid: str | None = None
    """/sys/class/dmi/id/product_uuid (the SMBIOS system UUID; often root-only)."""
    dmi_serial: str | None = None
    """/sys/class/dmi/id/product_serial (often root-only)."""
    machine_id: str | None = None
    """/etc/machine-id (the OS installation's; a cloned image may share it)."""
    gpu_uuids: tuple[str, ...] = ()
    """Every GPU's NVML UUID, sorted."""
    cpu_model: str | None = None


BOX_MARK = "#"
"""Between a host name and its box key in a box's label: 'vm#3f2a9c1b7d4e'."""


def box_label(hostname: str, identity: MachineIdentity | None) -> str:
    """How a box is named where machines are told apart: its host name and box key
    ('vm#3f2a9c1b7d4e'); the host name alone for a run without an identity."""
    if identity is None or not identity.box:
        return hostname
    return f"{hostname}{BOX_MARK}{identity.box}"


@dataclass(frozen=True, kw_only=True)
class HostInfo(Record):
    """The host as `bwprof.system.host_info()` reads it from /proc, /sys and SMBIOS."""

    hostname: str
    cpu_model: str
    logical_cpus: int = field(metadata=COUNT)
    usable_cpus: int = field(metadata=COUNT)
    physical_cores: int | None = field(metadata=COUNT)
    sockets: int | None = field(metadata=COUNT)
    caches: tuple[CacheLevel, ...]
    llc_bytes_total: int | None = field(metadata=COUNT)
    memory_total_bytes: int | None = field(metadata=COUNT)
    memory_available_bytes: int | None = field(metadata=COUNT)
    numa_nodes: tuple[NumaNode, ...]
    memory_modules: tuple[Mapping[str, object], ...] = ()
    """SMBIOS memory slots (locator, size, type, width, speeds); empty where unreadable."""
    ddr_peak_gbps: float | None = field(default=None, metadata=COUNT)
    ddr_peak_note: str = ""
    """How the DDR peak was derived, or why it is unknown."""
    os: str
    kernel: str
    python: str
    packages: Mapping[str, str | None] = field(default_factory=dict)
    transparent_hugepages: str | None = None
    """The kernel's mode: 'always', 'madvise' (only memory that asks) or 'never'."""
    cpuset_cpus: int | None = field(default=None, metadata=COUNT)
    """CPUs the process's cgroup cpuset allows (a container's or job's allocation)."""
    numpy_asks_hugepages: bool | None = None
    """NumPy asks for huge pages for large arrays (the host STREAM arrays): with 'madvise'
    they get 2 MiB pages, which lifts DDR figures by several percent over 4 KiB pages (6-9%
    measured; fewer TLB misses), so runs compare only under the same setting."""
    cache_source: str | None = None
    """Where `caches` came from: 'sysfs', 'cpuid' (one instance a level) or None (unknown)."""
    sandbox: str | None = None
    """'gVisor' where the kernel is gVisor's (`sandbox()`); None on a plain kernel."""
    memory_policy: str | None = None
    """The process's NUMA memory policy as numa_maps spells it ('default', 'bind:0',
    'interleave:0-1'): an inherited `numactl --membind/--interleave` shows here; None where
    unread."""
    memory_policy_source: str | None = None
    """Where `memory_policy` was read: 'get_mempolicy' or 'numa_maps' (weaker: recent
    kernels print 'default' there for a mapping without its own policy)."""
    mems_allowed: str | None = None
    """The memory nodes the process may allocate on (/proc/self/status Mems_allowed_list)."""
    cpus_allowed: str | None = None
    """The CPUs the process may run on (/proc/self/status Cpus_allowed_list)."""
    cpuset_mems: str | None = None
    """The memory nodes the process's cgroup cpuset allows (cpuset.mems.effective)."""
    identity: MachineIdentity | None = field(default=None, metadata=OMIT_NONE)
    """The machine's identity and box key; None in runs from before it was recorded."""

    @property
    def box(self) -> str | None:
        """The box key, or None where the run recorded no identity."""
        return self.identity.box if self.identity is not None else None

    @property
    def box_label(self) -> str:
        return box_label(self.hostname, self.identity)


# -- the GPUs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceProperties(Record):
    """What the CUDA runtime reports about one device."""

    index: int = field(metadata=COUNT)
    name: str
    pci_bus_id: str | None
    total_memory_bytes: int = field(metadata=COUNT)
    l2_bytes: int = field(metadata=COUNT)
    multiprocessors: int = field(metadata=COUNT)
    compute_capability: tuple[int, int]
    async_engines: int = field(metadata=COUNT)
    memory_bus_width_bits: int | None = field(metadata=COUNT)
    memory_clock_khz: int | None = field(metadata=COUNT)


@dataclass(frozen=True)
class GpuMeta(Record):
    """One GPU: what CUDA reports, what NVML adds (an open mapping), its NUMA node, its CPUs
    (a cpulist such as '0-15') and the theoretical peaks used for `% of peak`."""

    index: int = field(metadata=COUNT)
    properties: DeviceProperties
    metadata: Mapping[str, object] = field(default_factory=dict)
    numa_node: int | None = None
    cpus: str | None = None
    peak_hbm_gbps: float | None = field(default=None, metadata=COUNT)
    peak_pcie_gbps: float | None = field(default=None, metadata=COUNT)
    peak_nvlink_gbps: float | None = field(default=None, metadata=COUNT)

    @property
    def label(self) -> str:
        return f"gpu{self.index}"

    @property
    def name(self) -> str:
        return self.properties.name

    @property
    def host_link_c2c(self) -> bool:
        """Host memory over NVLink-C2C (Grace Hopper): PCIe's peak and counters do not
        describe its host copies."""
        return bool(self.metadata.get("c2c_enabled"))


NOT_PROBED = "not probed: no GPU case selected"


@dataclass(frozen=True)
class GpusMeta(Record):
    """The GPUs a run found, or why none: `count` None where they were not probed."""

    count: int | None = field(default=None, metadata=COUNT)
    reason: str | None = None
    detail: str | None = None
    cuda_device_max_connections: int | None = field(default=None, metadata=COUNT)
    """The hardware queues per GPU CUDA started with; None without GPUs, and where CuPy was
    imported before bwprof could ask."""
    devices: tuple[GpuMeta, ...] = ()
    used: tuple[int, ...] | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    """A fleet rank holding part of its node: the CUDA indices it measured (None: all)."""
    simulated: bool = False

    def device(self, label: str) -> GpuMeta | None:
        """The GPU labelled `gpuN`, or None."""
        return next((d for d in self.devices if d.label == label), None)

    def model_counts(self) -> dict[str, int]:
        """How many GPUs of each model, in the order they appear."""
        counts: dict[str, int] = {}
        for device in self.devices:
            counts[device.name] = counts.get(device.name, 0) + 1
        return counts

    def metadata_values(self, key: str) -> list[str]:
        """The distinct NVML values of `key` over every GPU (driver versions...), sorted."""
        return sorted({str(d.metadata[key]) for d in self.devices
                       if d.metadata.get(key) not in (None, "")})


# -- telemetry --------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdleCheck(Record):
    """One GPU before the run: its utilisation and the other processes on it."""

    device: str
    gpu_util_pct: float | None = None
    other_processes: tuple[int, ...] | None = None
    busy: bool = False


@dataclass(frozen=True)
class MemoryHealth(Record):
    """One GPU's memory error and repair counts at one moment, as NVML gave them (None: not
    given; ECC off or a part without that mechanism). Volatile ECC counts start at the
    driver's load, aggregate ones span the board's life; rows are remapped on Ampere and
    newer, pages retired before it; a pending remap or retirement waits for a GPU reset."""

    ecc_corrected_volatile: int | None = field(default=None, metadata=COUNT)
    ecc_uncorrected_volatile: int | None = field(default=None, metadata=COUNT)
    ecc_corrected_aggregate: int | None = field(default=None, metadata=COUNT)
    ecc_uncorrected_aggregate: int | None = field(default=None, metadata=COUNT)
    remapped_rows_corrected: int | None = field(default=None, metadata=COUNT)
    remapped_rows_uncorrected: int | None = field(default=None, metadata=COUNT)
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_single_bit: int | None = field(default=None, metadata=COUNT)
    retired_pages_double_bit: int | None = field(default=None, metadata=COUNT)
    retired_pages_pending: bool | None = None


HEALTH_COUNTS: tuple[str, ...] = (
    "ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate", "remapped_rows_corrected", "remapped_rows_uncorrected",
    "retired_pages_single_bit", "retired_pages_double_bit",
)
"""The counts of `MemoryHealth` (the rest are states: pending, failure)."""
HEALTH_STATES: tuple[str, ...] = ("remap_pending", "remap_failure", "retired_pages_pending")


VOLATILE_OF: dict[str, str] = {
    "ecc_corrected_aggregate": "ecc_corrected_volatile",
    "ecc_uncorrected_aggregate": "ecc_uncorrected_volatile",
}
"""Each aggregate ECC count and the volatile count of the same errors."""


def health_changes(before: MemoryHealth | None, after: MemoryHealth | None) -> dict[str, int]:
    """What got worse between two readings: each count that rose, by how much, and each
    state that turned on (as 1). Counts either reading lacks are left out. An aggregate ECC
    count is used only where its volatile count is None in either reading: the InfoROM
    writes the aggregate lazily, so it can rise after the run for errors from before it,
    while the volatile count says what happened since the driver loaded."""
    if before is None or after is None:
        return {}
    changes: dict[str, int] = {}
    for name in HEALTH_COUNTS:
        volatile = VOLATILE_OF.get(name)
        if volatile is not None and None not in (getattr(before, volatile),
                                                 getattr(after, volatile)):
            continue
        old, new = getattr(before, name), getattr(after, name)
        if old is not None and new is not None and new > old:
            changes[name] = new - old
    for name in HEALTH_STATES:
        if getattr(after, name) and getattr(before, name) is False:
            changes[name] = 1
    return changes


XID_HARDWARE: frozenset[int] = frozenset({
    48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140})
"""Xids NVIDIA's Xid catalogue puts on the GPU, its memory or its links, not on a program:
double-bit ECC (48), micro-controller breakpoint/halt (61, 62), row remap or page
retirement recorded or failed (63, 64), NVLink (74), fallen off the bus (79), a high
single-bit ECC rate (92), contained/uncontained ECC (94, 95), GSP RPC timeout and error
(119, 120), C2C link (121), unrecovered ECC (140)."""
XID_APPLICATION: frozenset[int] = frozenset({13, 31, 43, 45})
"""Xids of one process's own fault: graphics engine exception (13), GPU memory page fault
(31), GPU stopped processing a channel (43), preemptive cleanup of a torn-down context
(45). bwprof's own kernel bug or another tenant's crash raises them on a healthy GPU."""


def xid_kind(xid: int) -> str:
    """'hardware', 'application' or 'unknown' (an Xid neither list holds)."""
    return ("hardware" if xid in XID_HARDWARE else
            "application" if xid in XID_APPLICATION else "unknown")


CORRECTED_ONLY: frozenset[str] = frozenset({"ecc_corrected_volatile",
                                            "ecc_corrected_aggregate"})
"""Changes that alone do not degrade a GPU: occasional corrected single-bit errors are
normal on HBM (a row remapped or a page retired for them is still a change)."""


def degrades(changes: Mapping[str, int], xids: tuple[int, ...] | list[int] = ()) -> bool:
    """Whether a GPU's changes and Xids mark the rows measured meanwhile `gpu_degraded`:
    any change but corrected ECC errors, and any Xid but an application's."""
    return (any(name not in CORRECTED_ONLY for name in changes)
            or any(xid_kind(xid) != "application" for xid in xids))


@dataclass(frozen=True)
class GpuHealth(Record):
    """One GPU across a run: its memory health before and after, and the critical Xid
    events it raised meanwhile (None: no event set could be registered)."""

    device: str
    before: MemoryHealth | None = None
    after: MemoryHealth | None = None
    xid_events: tuple[int, ...] | None = None
    flagged_rows: int = field(default=0, metadata=COUNT)
    """The rows flagged `gpu_degraded` because this GPU got worse while their job ran."""

    def changes(self) -> dict[str, int]:
        """What got worse during the run (see `health_changes`)."""
        return health_changes(self.before, self.after)


@dataclass(frozen=True)
class TelemetryMeta(Record):
    """Whether the counters were sampled, or why not; the idle check; what the sampler took."""

    enabled: bool = False
    interval_ms: float | None = field(default=None, metadata=COUNT)
    reason: str | None = None
    idle_check: tuple[IdleCheck, ...] | None = field(default=None, metadata=OMIT_NONE)
    devices: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)
    gpm: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)
    """GPUs whose GPM metrics (DRAM bandwidth, PCIe/NVLink rates) were read."""
    counter_window_s: float | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    counter_window_min_bytes: int | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    samples: int | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    errors: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)
    """The sampler's first failed reads (at most 20); `error_count` counts them all."""
    error_count: int | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    health: tuple[GpuHealth, ...] | None = field(default=None, metadata=OMIT_NONE)
    """Each sampled GPU's memory errors and repairs before and after the run, and its
    critical Xid events during it."""


# -- a run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanMeta(Record):
    """What the run was asked to measure (`bwprof.plan.Plan`)."""

    preset: str | None = None
    cases: tuple[str, ...] = ()
    repeats: int | None = field(default=None, metadata=COUNT)
    threads: tuple[int, ...] = field(default=(), metadata=COUNT)
    host_array_bytes: tuple[int, ...] = field(default=(), metadata=COUNT)
    transfer_sizes: tuple[int, ...] = field(default=(), metadata=COUNT)
    pipeline_chunks: tuple[int, ...] = field(default=(), metadata=COUNT)
    latency_step: int | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    """The factor between a latency sweep's working sets, where --budget set one."""
    pairs: str = "all"
    """GPU pairs measured at the matrix size: 'all' ordered pairs, or a 'ring'."""
    sweep_gpus: str = "all"
    """GPUs that sweep every size: 'all', or the 'first' (the others at the largest)."""
    counter_windows: bool = True
    past_host_cache: bool = True
    """Pageable copies swept on to 4x the host's last-level cache (not in quick)."""
    budget_s: float | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    """The --budget the plan was fitted to, seconds."""
    dropped: tuple[str, ...] = ()
    """What fitting the budget took out of the plan."""
    estimate_s: float | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    """The planner's estimate of the whole run, seconds (`bwprof.estimate`)."""


@dataclass(frozen=True)
class NodeMeta(Record):
    """A fleet run's node: its host, every GPU its ranks measured, and its telemetry."""

    host: HostInfo | None = None
    gpus: GpusMeta = field(default_factory=GpusMeta)
    telemetry: TelemetryMeta | None = None


@dataclass(frozen=True)
class RankMeta(Record):
    """One MPI rank of a fleet run; a rank that never reported has only `rank` and `status`."""

    rank: int = field(metadata=COUNT)
    status: str
    """'ok', 'failed', 'interrupted' (a stop signal cut its measurement short: `error`
    names it) or 'missing' (no word within the timeout: hung or died)."""
    host: str | None = None
    local_rank: int | None = field(default=None, metadata=COUNT)
    local_size: int | None = field(default=None, metadata=COUNT)
    gpus: tuple[int, ...] | None = field(default=None, metadata=COUNT)
    host_cases: bool | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        """A missing rank is `{"rank", "status"}` alone, as the merge always wrote it."""
        data = super().as_dict()
        return {"rank": self.rank, "status": self.status} if self.status == "missing" else data


@dataclass(frozen=True)
class MpiMeta(Record):
    """A fleet run's MPI job: how many ranks, the timeout they ran under, each rank's fate."""

    size: int = field(metadata=COUNT)
    timeout_s: float = field(metadata=COUNT)
    ranks: tuple[RankMeta, ...] = ()


@dataclass(frozen=True)
class RunMeta(Record):
    """The whole of system.json."""

    schema_version: int
    bwprof_version: str | None = None
    bwprof_commit: str | None = None
    """The git commit bwprof ran from (`<sha>`, `<sha>-dirty` with uncommitted changes);
    None when installed from a wheel or sdist, or where git could not say."""
    run_id: str | None = None
    command_line: tuple[str, ...] = ()
    started_utc: str | None = None
    finished_utc: str | None = None
    """None until the run ends; a folder whose run was killed (SIGKILL, a crash, power)
    keeps None: see `state`."""
    interrupted: bool = False
    """The run stopped before the end of its plan: a stop signal, a folder that could not
    take a row, or a bug (`stopped_by` says which); also a stop signal after every case was
    measured, while the final files were written (`stopped_by` then ends 'after every case
    was measured', and reading takes the run as finished: `RunFolder.state`). Not set when a
    full disk cut only the report files after the last case short."""
    stopped_by: str | None = field(default=None, metadata=OMIT_NONE)
    """What ended the run early: a stop signal ('SIGHUP', 'SIGHUP after every case was
    measured'), 'output error: <what>' or 'error: <exception>'."""
    plan: PlanMeta | None = None
    host: HostInfo | None = None
    gpus: GpusMeta = field(default_factory=GpusMeta)
    simulated: bool = False
    """The GPU rows came from the simulated backend (tests only; never a measurement)."""
    telemetry: TelemetryMeta | None = field(default=None, metadata=OMIT_NONE)
    mpi_rank: int | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    close_errors: tuple[str, ...] = field(default=(), metadata=OMIT_EMPTY)
    """Executors that failed to close (a GPU in a sticky error state), one line each."""
    findings: int | None = field(default=None, metadata={**OMIT_NONE, **COUNT})
    """How many findings the run had (findings.csv holds them)."""
    nodes: Mapping[str, NodeMeta] | None = field(default=None, metadata=OMIT_NONE)
    """Fleet runs: every node by host name."""
    mpi: MpiMeta | None = field(default=None, metadata=OMIT_NONE)

    @property
    def hostname(self) -> str:
        return self.host.hostname if self.host is not None else ""

    @property
    def box_label(self) -> str:
        """The host name and box key ('vm#3f2a9c1b7d4e'); the host name alone where the run
        recorded no machine identity."""
        return self.host.box_label if self.host is not None else ""

    @property
    def state(self) -> str:
        """'finished'; 'interrupted' (stopped early, and said so); or 'incomplete': never
        finalised — killed, crashed, or still running (`bwprof.store.runlock.running` tells)."""
        if self.interrupted:
            return "interrupted"
        return "incomplete" if self.finished_utc is None else "finished"

    @property
    def measured_everything(self) -> bool:
        """Whether the run was interrupted only after every case was measured (`stopped_by`
        'SIGHUP after every case was measured'): every row is there."""
        return (self.state == "interrupted" and self.stopped_by is not None
                and self.stopped_by.endswith(f" {AFTER_EVERY_CASE}"))

    @property
    def bwprof_text(self) -> str:
        """'0.1.0' or '0.1.0 (commit 1a2b3c4d5e6f-dirty)' for the lines that show a run."""
        return version_text(self.bwprof_version, self.bwprof_commit)


def short_commit(commit: str) -> str:
    """A commit as people read it: the first 12 hex digits, its '-dirty' kept."""
    sha, dirty, rest = commit.partition("-")
    return sha[:12] + dirty + rest


def version_text(version: str | None, commit: str | None) -> str:
    return (version or "?") + (f" (commit {short_commit(commit)})" if commit else "")


class ReadOnlyDict(dict[str, Any]):
    """A JSON object that refuses changes: `RunResult.system` and `RunFolder.system`, kept
    for code written before `meta`, are views of the typed metadata, so a change to one
    would change nothing. Still a dict: `json.dumps` and `isinstance(x, dict)` work, and
    `copy.deepcopy` gives plain, changeable dicts all the way down (`dict(view)` only at the
    top)."""

    @staticmethod
    def _refuse() -> NoReturn:
        raise TypeError("the system dict is a read-only view of RunMeta; build another with "
                        "dataclasses.replace(meta, ...), or change copy.deepcopy(system)")

    def __setitem__(self, key: str, value: object) -> NoReturn:
        self._refuse()

    def __delitem__(self, key: str) -> NoReturn:
        self._refuse()

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def setdefault(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def pop(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def popitem(self) -> NoReturn:
        self._refuse()

    def clear(self) -> NoReturn:
        self._refuse()

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, object]) -> dict[str, Any]:
        import copy

        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


def read_only(data: Mapping[str, object]) -> ReadOnlyDict:
    """`data` with every nested object read-only too (lists stay lists, as JSON has them)."""

    def freeze(value: object) -> object:
        if isinstance(value, Mapping):
            return read_only(value)
        if isinstance(value, list):
            return [freeze(item) for item in value]
        return value

    view = ReadOnlyDict()
    for key, value in data.items():
        dict.__setitem__(view, key, freeze(value))
    return view
