"""The text of `json.dumps(document, indent=2)`, byte for byte, written to a stream in chunks.

Why: with `indent` set, CPython's json falls back to its pure-Python encoder, a generator
step per token: 2.5-4 s for `bwprof report --json` of a million rows (148 MB), and the whole
text is then one string. Here only the documents' skeleton is walked in Python; the big parts
(lists of scalars, flat dicts, tables: lists of flat dicts) go through the C encoder, with
separators that cannot occur inside an encoded string (a raw newline between items, ':' and
a raw NUL between key and value), and are indented by `str.replace`. A slice of a table
whose rows turn out not to be flat (a list or dict after a key) is walked like the skeleton.

The result equals `json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii,
allow_nan=allow_nan)` for every object dumps accepts (tests/render/test_jsontext.py
checks generated documents and the CLI's own); what dumps refuses (an unknown type, a bad
key, a circular reference, NaN with `allow_nan=False`) raises the same exception class here,
possibly after earlier chunks were written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain, cycle, islice
from json import encoder as _encoder
from typing import IO, Any, cast

SLICE = 2048
"""Items C-encoded at a time: a slice of a table is about 0.5-1 MB of text."""

CHUNK = 1 << 20
"""Characters gathered before a write to the stream."""

_ITEM = "\n"  # never raw inside an encoded string (control characters are escaped)
_KEY = ":\x00"  # likewise: _KEY + "[" or _KEY + "{" is a container after a key
_NESTED = (_KEY + "[", _KEY + "{")
_CONTAINERS = (list, tuple, dict)
_MAKE_ENCODER: Callable[..., Callable[[object, int], list[str]]] | None = getattr(
    _encoder, "c_make_encoder", None)  # CPython's C accelerator (None elsewhere)


def _has_container(types: set[type]) -> bool:
    return any(issubclass(kind, _CONTAINERS) for kind in types)


class _Writer:
    """One document's encoding settings; `chunks` yields its text in pieces."""

    def __init__(self, indent: int, ensure_ascii: bool, allow_nan: bool) -> None:
        if isinstance(indent, bool) or not isinstance(indent, int) or indent < 0:
            raise ValueError(f"indent must be a non-negative int, not {indent!r}")
        self.indent = " " * indent
        self.string: Callable[[str], str] = (
            _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring)
        self.allow_nan = allow_nan
        self.default = json.JSONEncoder().default  # raises TypeError, as dumps does
        self.markers: dict[int, object] = {}  # containers being walked: dumps' circular check
        assert _MAKE_ENCODER is not None
        self.encode = _MAKE_ENCODER({}, self.default, self.string, None, _KEY, _ITEM, False,
                                    False, allow_nan)

    def flat(self, value: object) -> str:
        """`value` C-encoded with the sentinel separators (no indentation)."""
        return "".join(self.encode(value, 0))

    def scalar(self, value: object) -> str:
        if isinstance(value, str):
            return self.string(value)
        return self.flat(value)

    def key(self, key: object) -> str:
        """A dict key as dumps writes it (json.encoder._make_iterencode's rules)."""
        if isinstance(key, str):
            text = key
        elif isinstance(key, float):
            text = self.flat(key)  # repr, or NaN/Infinity (ValueError without allow_nan)
        elif key is True:
            text = "true"
        elif key is False:
            text = "false"
        elif key is None:
            text = "null"
        elif isinstance(key, int):
            text = int.__repr__(key)
        else:
            raise TypeError(f"keys must be str, int, float, bool or None, "
                            f"not {key.__class__.__name__}")
        return self.string(text)

    def chunks(self, value: object, level: int = 0) -> Iterator[str]:
        if isinstance(value, str):
            yield self.string(value)
        elif isinstance(value, (list, tuple)):
            yield from self.guarded(value, level, self.sequence)
        elif isinstance(value, dict):
            yield from self.guarded(value, level, self.mapping)
        else:
            yield self.flat(value)

    def guarded(self, value: Any, level: int,
                walk: Callable[[Any, int], Iterator[str]]) -> Iterator[str]:
        marker = id(value)
        if marker in self.markers:
            raise ValueError("Circular reference detected")
        self.markers[marker] = value
        yield from walk(value, level)
        del self.markers[marker]

    def sequence(self, items: Sequence[object], level: int) -> Iterator[str]:
        if not items:
            yield "[]"
            return
        inner = "\n" + self.indent * (level + 1)
        yield "["
        for start in range(0, len(items), SLICE):
            yield inner if start == 0 else "," + inner
            yield from self.items(items[start:start + SLICE], level + 1)
        yield "\n" + self.indent * level + "]"

    def items(self, part: Sequence[object], level: int) -> Iterator[str]:
        """`part`'s items at `level`, joined as dumps joins them (no brackets)."""
        here = "\n" + self.indent * level
        types = set(map(type, part))
        if not _has_container(types):
            yield self.flat(part)[1:-1].replace(_ITEM, "," + here)
            return
        if types == {dict} and all(part):  # a table of rows
            rows = cast("Sequence[dict[Any, Any]]", part)
            text = self.table(rows, here)
            if text is None:
                text = self.rows(rows, here)
            if text is not None:
                yield text
                return
        for number, item in enumerate(part):
            if number:
                yield "," + here
            yield from self.chunks(item, level)

    def table(self, part: Sequence[dict[Any, Any]], here: str) -> str | None:
        """Rows of the same str keys in the same order and scalar values, one C call for
        all their cells (a flat list), interleaved with the keys; None for other rows."""
        keys = tuple(part[0])
        if set(map(tuple, part)) != {keys} or set(map(type, chain.from_iterable(part))) != {str}:
            return None
        cells = list(chain.from_iterable(map(dict.values, part)))
        text = self.flat(cells)
        if text.startswith(("[[", "[{")) or _ITEM + "[" in text or _ITEM + "{" in text:
            return None  # a list or dict among the cells
        inner = here + self.indent
        names = [self.string(key) + ": " for key in keys]
        glue = ["," + inner + name for name in names[1:]]
        glue.append(here + "}," + here + "{" + inner + names[0])  # to the next row
        pieces = chain.from_iterable(zip(text[1:-1].split(_ITEM), cycle(glue)))
        return ("{" + inner + names[0] + "".join(islice(pieces, 2 * len(cells) - 1))
                + here + "}")

    def rows(self, part: Sequence[dict[Any, Any]], here: str) -> str | None:
        """Non-empty rows of scalar values whatever their keys, C-encoded together and
        indented by `str.replace`; None where a value is a list or dict."""
        text = self.flat(part)
        if any(mark in text for mark in _NESTED):
            return None
        inner = here + self.indent
        return ("{" + inner + text[2:-2].replace(_KEY, ": ")
                .replace(_ITEM + '"', "," + inner + '"')
                .replace("}" + _ITEM + "{", here + "}," + here + "{" + inner)
                + here + "}")

    def mapping(self, dct: Mapping[object, object], level: int) -> Iterator[str]:
        if not dct:
            yield "{}"
            return
        inner = "\n" + self.indent * (level + 1)
        yield "{"
        items = iter(dct.items())
        first = True
        while part := dict(islice(items, SLICE)) if len(dct) > SLICE else dict(items):
            yield inner if first else "," + inner
            first = False
            if not _has_container(set(map(type, part.values()))):
                yield (self.flat(part)[1:-1].replace(_KEY, ": ")
                       .replace(_ITEM, "," + inner))
                continue
            for number, (key, item) in enumerate(part.items()):
                if number:
                    yield "," + inner
                yield self.key(key) + ": "
                yield from self.chunks(item, level + 1)
        yield "\n" + self.indent * level + "}"


def json_chunks(value: object, indent: int = 2, ensure_ascii: bool = True,
                allow_nan: bool = True) -> Iterator[str]:
    """The text of `json.dumps(value, indent=indent, ensure_ascii=ensure_ascii,
    allow_nan=allow_nan)`, in pieces (joined, exactly that string)."""
    if _MAKE_ENCODER is None:  # no C accelerator (another interpreter): dumps' own
        yield from json.JSONEncoder(indent=indent, ensure_ascii=ensure_ascii,
                                    allow_nan=allow_nan).iterencode(value)
        return
    yield from _Writer(indent, ensure_ascii, allow_nan).chunks(value)


def echo_json(value: object, stream: IO[str] | None = None, indent: int = 2) -> None:
    """Write `json.dumps(value, indent=indent)` and a newline to `stream` (sys.stdout at the
    call), in chunks of about CHUNK characters, then flush: what `typer.echo(json.dumps(
    value, indent=2))` wrote, without the whole text as one string. On bwprof's guarded
    stdout a closed pipe drops the rest silently (bwprof.stdio); encoding stops there."""
    out = sys.stdout if stream is None else stream
    pending: list[str] = []
    size = 0
    for piece in json_chunks(value, indent=indent):
        pending.append(piece)
        size += len(piece)
        if size >= CHUNK:
            out.write("".join(pending))
            pending, size = [], 0
            if getattr(out, "dropped", False):  # a GuardedStream whose reader went away
                return
    pending.append("\n")
    out.write("".join(pending))
    out.flush()
