"""A spec file: TOML that moves any band or threshold, per GPU model (docs/verdicts.md's example).

    cv_max = 0.05          # a figure whose CV is above this is marked noisy
    outlier_pct = 10       # fleet: this far below its model's fleet median is an outlier

    [host.ddr]             # host DDR (STREAM Triad): no GPU model
    peak_gbps = 307.2
    fail_pct = 60

    [gpu.H200.hbm]         # a model key of the bands table, or "all" for every model
    fail_pct = 95          # % of the part's theoretical peak

    [gpu.L4.hbm]           # a model bwprof does not list: the words of its GPU name
    expected_gbps = 250

    [gpu.all.latency.lat_gpu]
    warn_ns = 700
    fail_ns = 1000

A model bwprof does not list (`bwprof.analysis.bands.PARTS`) is named by the words of its
GPU's name: `[gpu.L4]` is every GPU whose name has the word L4 ("NVIDIA L4", not "NVIDIA
L40S"), `[gpu."RTX 6000 Ada"]` (or RTX-6000-Ada) every "NVIDIA RTX 6000 Ada Generation".
A listed part is named only by its key (`H200`, never `h200`: that is refused with the key),
so one GPU is never two models' in one spec.

Validated whole before any run is judged: an unknown key, a value of the wrong type or an
impossible threshold (WARN below FAIL, a percentage above 100 or not above 0) is a
BwprofError of one line naming the key (exit 2).
"""

from __future__ import annotations

import importlib
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bwprof.analysis import bands
from bwprof.analysis.bands import FAIL_SHARE, PART_KEYS, WARN_SHARE, Band, Part
from bwprof.casespec import PATHS as CASE_PATHS
from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.schema import flags
from bwprof.schema.reading import read_bytes
from bwprof.schema.text import shown

ALL_MODELS = "all"
BANDWIDTH_PATHS: tuple[str, ...] = tuple(p.key for p in CASE_PATHS if p.bandwidth)
"""The GB/s paths a spec may band (`bwprof.casespec.PATHS`)."""
BANDWIDTH_KEYS: tuple[str, ...] = ("peak_gbps", "expected_gbps", "warn_pct", "fail_pct")
OVERLAP_KEYS: tuple[str, ...] = ("warn_pct", "fail_pct")
LATENCY_KEYS: tuple[str, ...] = ("warn_ns", "fail_ns")
DEFAULT_OUTLIER_PCT = 10.0
MAX_SPEC_BYTES = 1 << 20
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")
"""What an unlisted model's key may be: the words of a GPU name."""


def name_words(name: str) -> tuple[str, ...]:
    """A GPU name or an unlisted model's key as its words, lower case ('NVIDIA RTX 6000
    Ada Generation' -> nvidia, rtx, 6000, ada, generation; 'RTX-6000-Ada' -> rtx, 6000, ada)."""
    return tuple(re.findall(r"[a-z0-9]+", name.lower()))


def _has_run(words: tuple[str, ...], run: tuple[str, ...]) -> bool:
    return bool(run) and any(words[i:i + len(run)] == run
                             for i in range(len(words) - len(run) + 1))


@dataclass(frozen=True)
class Override:
    """One path's (or one latency case's) keys as the spec gives them; None: not given."""

    peak: float | None = None
    expected: float | None = None
    warn: float | None = None
    fail: float | None = None

    def apply(self, default: Band | None, path: str, unit: str,
              higher_is_better: bool = True) -> Band | None:
        """`default` with these keys over it; a band of the spec's own where there is no
        default and the spec gives thresholds; None where neither can judge."""
        if higher_is_better:
            return self._rate(default, path, unit)
        if self.warn is None and self.fail is None:
            return default
        warn = self.warn if self.warn is not None else self.fail
        fail = self.fail if self.fail is not None else warn
        assert warn is not None and fail is not None
        return Band(path, unit, warn, warn, fail, "spec file", None, False)

    def _rate(self, default: Band | None, path: str, unit: str) -> Band | None:
        reference = self.peak if self.peak is not None else (
            default.reference if default is not None else None)
        if default is None and self.expected is not None:
            # An expected figure alone is a band (thresholds at the default shares of it),
            # with or without a peak to give % of.
            default = Band(path, unit, self.expected, self.expected * WARN_SHARE,
                           self.expected * FAIL_SHARE, "spec file", reference)
        thresholds = self.warn is not None or self.fail is not None
        # warn_pct and fail_pct are % of the peak; where this box reports none, of the spec's
        # expected figure (the band says so), and without one no band (it cannot judge).
        if reference is None and not thresholds:
            return default
        base = reference if reference is not None else self.expected
        if base is None:
            return None
        if default is None and not thresholds:
            return default
        if default is not None and self.peak is not None and default.reference:
            scale = self.peak / default.reference  # a new peak moves the default band with it
            default = replace(default, reference=self.peak, expected=default.expected * scale,
                              warn=default.warn * scale, fail=default.fail * scale)
        if default is not None and self.expected is not None:
            # So does a new expected figure: the default thresholds are shares of it.
            default = replace(default, expected=self.expected,
                              warn=self.expected * WARN_SHARE, fail=self.expected * FAIL_SHARE)
        warn = base * self.warn / 100 if self.warn is not None else None
        fail = base * self.fail / 100 if self.fail is not None else None
        if default is None:
            warn = warn if warn is not None else fail
            fail = fail if fail is not None else warn
            assert warn is not None and fail is not None
            expected = self.expected if self.expected is not None else warn
            return Band(path, unit, expected, warn, fail, "spec file", reference)
        # One threshold given: the other moves only as far as keeps WARN above FAIL.
        warn = warn if warn is not None else max(default.warn, fail or 0.0)
        fail = fail if fail is not None else min(default.fail, warn)
        expected = self.expected if self.expected is not None else default.expected
        source = default.source if (self == Override(peak=self.peak)
                                    or default.source == "spec file") else (
            f"spec file over: {default.source}")
        if reference is None:
            source = "spec file (warn_pct and fail_pct of expected_gbps: no peak here)"
        return replace(default, expected=expected, warn=warn, fail=fail, source=source)


@dataclass(frozen=True)
class ModelSpec:
    cv_max: float | None = None
    paths: Mapping[str, Override] = field(default_factory=dict)
    latency: Mapping[str, Override] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    """A whole spec file (the empty Spec: the built-in defaults)."""

    path: Path | None = None
    cv_max: float = flags.NOISY_CV
    outlier_pct: float = DEFAULT_OUTLIER_PCT
    ddr: Override = Override()
    host_latency: Mapping[str, Override] = field(default_factory=dict)
    models: Mapping[str, ModelSpec] = field(default_factory=dict)

    @property
    def unlisted(self) -> tuple[str, ...]:
        """The spec's model keys that are no listed part's: models named by their words."""
        return tuple(key for key in self.models if key not in (ALL_MODELS, *PART_KEYS))

    def model_key(self, gpu_name: str | None) -> str | None:
        """The section of the spec that is a GPU's model: its listed part's key, else the
        unlisted key whose words stand in its name (the most words where several do), else
        None (only `all` applies)."""
        part = bands.find_part(gpu_name)
        if part is not None:
            return part.key
        words = name_words(gpu_name or "")
        found = [key for key in self.unlisted if _has_run(words, name_words(key))]
        return max(found, key=lambda key: len(name_words(key))) if found else None

    def unmatched(self, gpu_names: Iterable[str]) -> list[str]:
        """The unlisted model keys that no GPU of `gpu_names` is: sections that judged
        nothing (a misspelt model's, perhaps)."""
        used = {self.model_key(name) for name in gpu_names}
        return [key for key in self.unlisted if key not in used]

    def _layers(self, model: str | None) -> list[ModelSpec]:
        layers = [self.models.get(ALL_MODELS)]
        if model is not None:
            layers.append(self.models.get(model))
        return [layer for layer in layers if layer is not None]

    def override(self, model: str | None, path: str) -> Override:
        """The keys for `path` of a GPU of `model` (a part key; None: unknown model): the
        `all` section's, then the model's own over them."""
        return _merged([layer.paths.get(path) for layer in self._layers(model)])

    def latency_override(self, model: str | None, case: str, host: bool) -> Override:
        if host:
            return self.host_latency.get(case, Override())
        return _merged([layer.latency.get(case) for layer in self._layers(model)])

    def cv_limit(self, model: str | None) -> float:
        limits = [layer.cv_max for layer in self._layers(model) if layer.cv_max is not None]
        return limits[-1] if limits else self.cv_max


def _merged(layers: list[Override | None]) -> Override:
    out = Override()
    for layer in layers:
        if layer is None:
            continue
        out = Override(*(mine if mine is not None else theirs for mine, theirs in zip(
            (layer.peak, layer.expected, layer.warn, layer.fail),
            (out.peak, out.expected, out.warn, out.fail), strict=True)))
    return out


def _fail(where: str, what: str, spec_path: Path) -> BwprofError:
    return BwprofError(f"spec {spec_path}: {where} {what}")


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, where: str, what: str) -> BwprofError:
        return _fail(where, what, self.path)

    def table(self, value: object, where: str) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            raise self.error(where, f"should be a table, not {_kind(value)}")
        return value

    def keys(self, table: Mapping[str, object], where: str, allowed: tuple[str, ...]) -> None:
        unknown = [key for key in table if key not in allowed]
        if unknown:
            raise self.error(f"{where}.{unknown[0]}" if where else unknown[0],
                             f"is not a spec key; {where or 'the top level'} takes: "
                             f"{', '.join(allowed)}")

    def number(self, table: Mapping[str, object], key: str, where: str) -> float | None:
        value = table.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"{where}.{key}" if where else key,
                             f"should be a number, not {_kind(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits
            number = math.inf
        if not math.isfinite(number) or number <= 0:
            raise self.error(f"{where}.{key}" if where else key,
                             f"should be a number above 0, not {shorten(value)}")
        return number

    def rate(self, value: object, where: str, allowed: tuple[str, ...]) -> Override:
        table = self.table(value, where)
        self.keys(table, where, allowed)
        peak, expected = (self.number(table, k, where) for k in ("peak_gbps", "expected_gbps"))
        warn, fail = (self.number(table, k, where) for k in ("warn_pct", "fail_pct"))
        for key, pct in (("warn_pct", warn), ("fail_pct", fail)):
            if pct is not None and pct > 100:
                raise self.error(f"{where}.{key}", f"is {pct:g} %: no figure beats 100 % of "
                                 "its peak; give a share of the peak up to 100")
        if warn is not None and fail is not None and warn < fail:
            raise self.error(where, f"has warn_pct {warn:g} below fail_pct {fail:g}: WARN "
                             "must start above FAIL")
        if peak is not None and expected is not None and expected > peak:
            raise self.error(where, f"has expected_gbps {expected:g} above peak_gbps {peak:g}")
        return Override(peak, expected, warn, fail)

    def latency(self, value: object, where: str, target: str) -> dict[str, Override]:
        """`target`'s latency cases only: a key no case of it has would judge nothing."""
        keys = latency_cases(target)
        out = {}
        for case, body in self.table(value, where).items():
            here = f"{where}.{case}"
            if case not in keys:
                raise self.error(here, f"is not a {target} latency case key; {where} takes: "
                                 f"{', '.join(keys)}")
            table = self.table(body, here)
            self.keys(table, here, LATENCY_KEYS)
            warn, fail = (self.number(table, k, here) for k in LATENCY_KEYS)
            if warn is not None and fail is not None and fail < warn:
                raise self.error(here, f"has fail_ns {fail:g} below warn_ns {warn:g}: a "
                                 "latency fails above where it warns")
            out[case] = Override(None, None, warn, fail)
        return out

    def model(self, value: object, where: str, part: Part | None = None) -> ModelSpec:
        table = self.table(value, where)
        allowed = ("cv_max", *BANDWIDTH_PATHS, "overlap", "latency")
        self.keys(table, where, allowed)
        paths = {path: self.rate(table[path], f"{where}.{path}", BANDWIDTH_KEYS)
                 for path in BANDWIDTH_PATHS if path in table}
        for path in ("hbm", "d2d"):  # their reference is the part's datasheet, known here
            given = paths.get(path)
            if (part is not None and given is not None and given.peak is None
                    and given.expected is not None and given.expected > part.hbm_gbps):
                raise self.error(f"{where}.{path}", f"has expected_gbps {given.expected:g} "
                                 f"above the {part.key}'s {part.hbm_gbps:g} GB/s peak; give "
                                 "peak_gbps too if the part's is wrong")
        if "overlap" in table:
            paths["overlap"] = self.rate(table["overlap"], f"{where}.overlap", OVERLAP_KEYS)
        latency = self.latency(table["latency"], f"{where}.latency", "gpu") \
            if "latency" in table else {}
        return ModelSpec(self.cv(table, where), paths, latency)

    def cv(self, table: Mapping[str, object], where: str) -> float | None:
        cv = self.number(table, "cv_max", where)
        if cv is not None and cv >= 1:
            raise self.error(f"{where}.cv_max" if where else "cv_max",
                             f"is {cv:g}: a coefficient of variation limit is a share "
                             "(0.05 for 5 %), below 1")
        return cv


def latency_cases(target: str) -> tuple[str, ...]:
    """The latency case keys of `target` (host or gpu), as the case catalogue declares them."""
    from bwprof.cases import CASES  # the catalogue, imported when a spec is read

    return tuple(case.key for case in CASES
                 if case.metric == "latency" and case.target == target)


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def parse_spec(data: Mapping[str, object], path: Path) -> Spec:
    """A parsed TOML document as a Spec; BwprofError (one line) where it is not one."""
    read = _Reader(path)
    read.keys(data, "", ("cv_max", "outlier_pct", "host", "gpu"))
    outlier = read.number(data, "outlier_pct", "")
    if outlier is not None and outlier >= 100:
        raise read.error("outlier_pct", f"is {outlier:g}: give a share below 100 %")
    ddr, host_latency = Override(), {}
    if "host" in data:
        host = read.table(data["host"], "host")
        read.keys(host, "host", ("ddr", "latency"))
        if "ddr" in host:
            ddr = read.rate(host["ddr"], "host.ddr", BANDWIDTH_KEYS)
        if "latency" in host:
            host_latency = read.latency(host["latency"], "host.latency", "host")
    models = {}
    if "gpu" in data:
        for key, body in read.table(data["gpu"], "gpu").items():
            if key not in (ALL_MODELS, *PART_KEYS):
                _unlisted_model(read, key)
            models[key] = read.model(body, f"gpu.{key}", bands.PARTS_BY_KEY.get(key))
    cv = read.cv(data, "")
    return Spec(path, cv if cv is not None else flags.NOISY_CV,
                outlier if outlier is not None else DEFAULT_OUTLIER_PCT, ddr, host_latency,
                models)


def _unlisted_model(read: _Reader, key: str) -> None:
    """A model key that is no listed part's must be the words of a GPU name, and not a
    listed part's name in other words (its bands would be the part's, under another key)."""
    where = f"gpu.{shorten(key)}"
    if not MODEL_NAME.fullmatch(key):
        raise read.error(where, "is not a GPU model: give all, a listed key ("
                         f"{', '.join(PART_KEYS)}) or the words of a GPU's name (letters, "
                         "digits, spaces, . _ -; up to 64)")
    words = name_words(key)
    listed = [part.key for part in bands.PARTS if _has_run(name_words(part.key), words)]
    part = bands.find_part(key)
    listed = listed or ([part.key] if part is not None else [])
    if listed:
        many = len(listed) > 1
        raise read.error(where, f"names the listed model{'s' if many else ''} "
                         f"{', '.join(listed)}: give {'their keys' if many else 'its key'} "
                         f"({', '.join(f'[gpu.{k}]' for k in listed)})")


def load_spec(path: Path) -> Spec:
    """The spec file at `path`; BwprofError (one line) for a file that cannot be read, is not
    TOML or is not a valid spec."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise BwprofError(f"cannot read spec {shown(path)}: {exc.strerror or exc}; give "
                          "--spec a TOML file of bands (docs/verdicts.md)") from None
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the open, a device stream
        raise BwprofError(f"cannot read spec {shown(path)}: "
                          f"{'Is a directory' if stat.S_ISDIR(info.st_mode) else 'not a file'}")
    if info.st_size > MAX_SPEC_BYTES:
        raise BwprofError(f"spec {shown(path)} is larger than {MAX_SPEC_BYTES >> 20} MiB: "
                          "not a spec")
    # Never blocks; its errors name the file. The user named it: a link is followed. Read
    # to its end: a spec kept in /proc or sysfs says 0 bytes and has content.
    raw = read_bytes(path, MAX_SPEC_BYTES, follow=True, to_end=True)
    toml = _toml()
    try:
        data = toml.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BwprofError(f"spec {shown(path)} is not UTF-8 text") from None
    except toml.TOMLDecodeError as exc:
        raise BwprofError(f"spec {shown(path)} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise BwprofError(f"spec {shown(path)} nests arrays or tables too deeply to be a "
                          "spec") from None
    return parse_spec(data, path)


def _toml() -> Any:
    """The standard library's TOML reader (Python 3.11+), or tomli, its backport, on 3.10."""
    for name in ("tomllib", "tomli"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise BwprofError("reading a spec needs Python 3.11 or newer, or tomli: python3 -m pip "
                      "install tomli")
