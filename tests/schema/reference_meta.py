"""The checker `RunMeta.from_dict` had before it was compiled for speed (issue 36): a value at a
time, its dotted path spelled as it goes down. Kept as the oracle of the compiled one, which
must accept, build and refuse (in the same words) exactly as this does; not a second
production path."""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from bwprof.coerce import shorten
from bwprof.schema.meta import MetaError, Record
from bwprof.schema.reading import MAX_INT

_R = TypeVar("_R", bound=Record)


def _kind(value: object) -> str:
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


@functools.cache
def _shape(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    return get_origin(hint), get_args(hint)


_hints = functools.cache(get_type_hints)


def _convert(value: object, hint: Any, path: str) -> Any:
    origin, args = _shape(hint)
    if origin in (Union, types.UnionType):
        options = [arg for arg in args if arg is not type(None)]
        if value is None and len(options) < len(args):
            return None
        for option in options:
            try:
                return _convert(value, option, path)
            except MetaError:
                if option is options[-1]:
                    raise
        raise MetaError(f"{path} should be {_expected(hint)}, not {_kind(value)}")
    if hint is object:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not -MAX_INT <= value < MAX_INT:
                raise MetaError(f"{path} should be an integer of 64 bits, not one of "
                                f"{value.bit_length()} bits")
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise MetaError(f"{path} should be a finite number, not {value!r}")
            return value
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_convert(item, args[0], f"{path}[{i}]")
                             for i, item in enumerate(value))
            if len(value) != len(args):
                raise MetaError(f"{path} should be a list of {len(args)}, not of {len(value)}")
            return tuple(_convert(item, arg, f"{path}[{i}]")
                         for i, (item, arg) in enumerate(zip(value, args, strict=True)))
    elif origin in (dict, Mapping):
        if isinstance(value, Mapping):
            _, item_hint = args
            return {str(key): _convert(item, item_hint, f"{path}.{shorten(key)}")
                    for key, item in value.items()}
    elif isinstance(hint, type) and issubclass(hint, Record):
        return from_dict(hint, value, path)
    else:
        raise TypeError(f"bwprof.schema.meta cannot check a field of type {hint!r}")
    raise MetaError(f"{path} should be {_expected(hint)}, not {_kind(value)}")


def _check_min(value: object, minimum: float, path: str) -> None:
    items = value if isinstance(value, tuple) else (value,)
    for index, item in enumerate(items):
        if isinstance(item, (int, float)) and not isinstance(item, bool) and item < minimum:
            where = f"{path}[{index}]" if isinstance(value, tuple) else path
            raise MetaError(f"{where} should be {minimum:g} or more, not {item!r}")


def from_dict(cls: type[_R], data: object, where: str = "") -> _R:
    """`cls.from_dict(data, where)` as it was."""
    if not isinstance(data, Mapping):
        raise MetaError(f"{where or 'the top level'} should be an object, not {_kind(data)}")
    hints = _hints(cls)
    values: dict[str, object] = {}
    for spec in fields(cls):
        path = f"{where}.{spec.name}" if where else spec.name
        if spec.name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise MetaError(f"{path} is missing")
            continue
        value = _convert(data[spec.name], hints[spec.name], path)
        if "min" in spec.metadata:
            _check_min(value, spec.metadata["min"], path)
        values[spec.name] = value
    record = cls(**values)
    object.__setattr__(record, "_recorded", frozenset(values))
    return record
