"""The text of `json.dumps(document, indent=2)`, byte for byte, written to a stream in chunks.

Why: with `indent` set, CPython's json falls back to its pure-Python encoder, a generator
step per token: about 4 s of CPU for `bwprof report --json` of a million rows (148 MB), and
the whole text is then one string. Here only the documents' skeleton is walked in Python;
the big parts (lists of scalars, flat dicts, tables: lists of flat dicts) go through the C
encoder in slices, with dumps' own separators for their level (',' and a newline with the
indentation between items, ': ' between key and value). A table's slice of rows is one C
call with the separators of the rows' items; the boundaries between rows, which that leaves
at the wrong indentation, are the only places where '},' a raw newline and '{' meet (a raw
newline never occurs inside an encoded string), fixed by one `str.replace`. A slice whose
rows turn out not to be flat (a list or dict among the values) is walked like the
skeleton. A `JsonRows` table (the documents' fleet-sized tables, kept as a frame's columns)
is written without its dicts: each column's cells become JSON text in Arrow and each row is
their concatenation with its keys and separators (`_Writer.columns`).

The result equals `json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii,
allow_nan=allow_nan)` for every object dumps accepts (subclasses of list or dict that change
how they iterate aside), a `JsonRows` read as the list of its rows; tests/render/
test_jsontext.py checks generated documents and the CLI's own, tests/store/test_json_rows.py
the tables. What dumps refuses (an unknown type, a bad key, a circular reference, NaN with
`allow_nan=False`) raises the same exception class here, possibly after earlier chunks were
written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain, islice
from json import encoder as _encoder
from typing import IO, Any, cast

from bwprof.schema import textbytes
from bwprof.store.formats import JsonRows

SLICE = 2048
"""Items C-encoded at a time: a slice of a table is about 0.5-1 MB of text."""

CELLS = 8192
"""A table's cells encoded at a time (`_Writer.table`)."""

CHUNK = 1 << 20
"""Characters gathered before a write to the stream."""

COLUMN_ROWS = 8192
"""A `JsonRows` table's rows written at a time (`_Writer.columns`): a few MB of text."""

_CONTAINERS = (list, tuple, dict, JsonRows)
_MAKE_ENCODER: Callable[..., Callable[[object, int], list[str]]] | None = getattr(
    _encoder, "c_make_encoder", None)  # CPython's C accelerator (None elsewhere)


def _has_container(types: set[type]) -> bool:
    return any(issubclass(kind, _CONTAINERS) for kind in types)


class _Stop(Exception):
    """The stream's reader went away (bwprof's guarded stdout dropped it): stop encoding."""


class _Writer:
    """One document's encoding settings and text so far (`out`), which `spill`, where given,
    takes over at slice boundaries once about CHUNK characters are pending."""

    def __init__(self, indent: int, ensure_ascii: bool, allow_nan: bool,
                 spill: Callable[[str], None] | None = None) -> None:
        if isinstance(indent, bool) or not isinstance(indent, int) or indent < 0:
            raise ValueError(f"indent must be a non-negative int, not {indent!r}")
        self.indent = " " * indent
        self.string: Callable[[str], str] = (
            _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring)
        self.ascii = ensure_ascii
        self.markers: dict[int, object] = {}  # containers being walked: dumps' circular check
        self.allow_nan = allow_nan
        self.encoders: dict[str, Callable[[object, int], list[str]]] = {}
        self.out: list[str] = []
        self.add = self.out.append
        self.spill = spill
        self.pending = 0  # characters in out[:counted]
        self.counted = 0

    def encoder(self, separator: str) -> Callable[[object, int], list[str]]:
        """The C encoder that writes dumps' own ": " between key and value and `separator`
        between items (dumps': "," and a newline with an indentation), made once each."""
        found = self.encoders.get(separator)
        if found is None:
            assert _MAKE_ENCODER is not None
            found = self.encoders[separator] = _MAKE_ENCODER(
                {}, json.JSONEncoder().default, self.string, None, ": ", separator,
                False, False, self.allow_nan)
        return found

    def flat(self, value: object) -> str:
        """A scalar `value` C-encoded."""
        return "".join(self.encoder("\n")(value, 0))

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

    def slice_done(self) -> None:
        """Count the pieces added since the last count; past CHUNK characters, spill."""
        if self.spill is None:
            return
        self.pending += sum(map(len, self.out[self.counted:]))
        self.counted = len(self.out)
        if self.pending >= CHUNK:
            text = "".join(self.out)
            self.out.clear()
            self.pending = self.counted = 0
            self.spill(text)

    def value(self, value: object, level: int) -> None:
        if isinstance(value, str):
            self.add(self.string(value))
        elif isinstance(value, JsonRows):
            if not (self.ascii and value.columnar() and self.columns(value, level)):
                self.sequence(value, level)
        elif isinstance(value, (list, tuple)):
            self.sequence(value, level)
        elif isinstance(value, dict):
            self.mapping(value, level)
        else:
            self.add(self.flat(value))

    def enter(self, container: object) -> None:
        if id(container) in self.markers:
            raise ValueError("Circular reference detected")
        self.markers[id(container)] = container

    def sequence(self, items: Sequence[object], level: int) -> None:
        if not items:
            self.add("[]")
            return
        self.enter(items)
        inner = "\n" + self.indent * (level + 1)
        self.add("[")
        for start in range(0, len(items), SLICE):
            self.add(inner if start == 0 else "," + inner)
            self.items(items[start:start + SLICE], level + 1)
            self.slice_done()
        self.add("\n" + self.indent * level + "]")
        del self.markers[id(items)]

    def items(self, part: Sequence[object], level: int) -> None:
        """`part`'s items at `level`, joined as dumps joins them (no brackets)."""
        here = "\n" + self.indent * level
        types = set(map(type, part))
        if not _has_container(types):
            self.add("".join(self.encoder("," + here)(part, 0))[1:-1])
            return
        if types == {dict} and all(part):  # a table of rows
            rows = cast("Sequence[dict[Any, Any]]", part)
            text = self.table(rows, here)
            if text is None:
                text = self.rows(rows, here)
            if text is not None:
                self.add(text)
                return
        for number, item in enumerate(part):
            if number:
                self.add("," + here)
            self.value(item, level)

    def table(self, part: Sequence[dict[Any, Any]], here: str) -> str | None:
        """Rows of the same str keys in the same order and scalar values: each column's
        cells C-encoded together (one call a column: its cells lie together in memory, as
        `json_table` made them) and split at the raw newlines between them, then each row
        formatted from its cells; None for other rows. About CELLS cells at a time: their
        texts are small objects, which CPython's allocator keeps in 1 MiB arenas and hands
        back to the system once empty; a few hundred kB of them reuse one arena, where a
        slice's megabytes would fault fresh pages in for every slice (~3 ms a MB here)."""
        keys = tuple(part[0])
        if set(map(tuple, part)) != {keys} or set(map(type, keys)) != {str}:
            return None
        count = len(keys)
        inner = here + self.indent
        names = [self.string(key).replace("%", "%%") + ": " for key in keys]
        row = ("{" + inner + names[0] + "%s" + "".join("," + inner + name + "%s"
                                                       for name in names[1:]) + here + "}")
        encode = self.encoder("\n")  # never raw inside an encoded string
        step = max(1, CELLS // count)
        texts = []
        for start in range(0, len(part), step):
            cells = list(chain.from_iterable(map(dict.values, part[start:start + step])))
            columns = []
            for number in range(count):
                text = "".join(encode(cells[number::count], 0))
                if text.startswith(("[[", "[{")) or "\n[" in text or "\n{" in text:
                    return None  # a list or dict among the cells
                columns.append(text[1:-1].split("\n"))
            del cells
            texts.append(("," + here).join(map(row.__mod__, zip(*columns, strict=True))))
        return ("," + here).join(texts)

    def rows(self, part: Sequence[dict[Any, Any]], here: str) -> str | None:
        """Non-empty rows of scalar values whatever their keys, one C call for all of them
        with the rows' own separators, the rows' boundaries then indented by one
        `str.replace`; None where a value is a list or dict (walked like the skeleton)."""
        if _has_container(set(map(type, chain.from_iterable(map(dict.values, part))))):
            return None
        inner = here + self.indent
        text = "".join(self.encoder("," + inner)(part, 0))
        # "}," + inner + "{" is only ever a boundary between rows: a raw newline never
        # occurs inside an encoded string, and within a row a separator precedes a key.
        return ("{" + inner + text[2:-2].replace("}," + inner + "{",
                                                 here + "}," + here + "{" + inner)
                + here + "}")

    def cells(self, cells: list[object]) -> list[str]:
        """Each scalar cell's text as the C encoder writes it."""
        if not cells:
            return []
        return "".join(self.encoder("\n")(cells, 0))[1:-1].split("\n")

    def columns(self, table: JsonRows, level: int) -> bool:
        """`table` as `sequence` writes its rows (dicts of scalars), made a column at a time
        in Arrow (`JsonRows.cell_texts`): each row the concatenation of its separator, its
        braces and each key's text and cell, and COLUMN_ROWS rows' text read out of
        Arrow's buffer at once (ASCII, `ensure_ascii`). False where no row is to write."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not len(table):
            return False
        self.enter(table)
        here = "\n" + self.indent * (level + 1)
        inner = here + self.indent

        def scalar(piece: str) -> object:
            return pa.scalar(piece, type=pa.large_string())  # as `cell_texts` gives cells

        keys = [scalar(("," if number else "") + inner + self.string(key) + ": ")
                for number, key in enumerate(table.keys)]
        self.add("[")
        for start in range(0, len(table), COLUMN_ROWS):
            stop = min(len(table), start + COLUMN_ROWS)
            pieces = [scalar("," + here + "{")]
            for number, key in enumerate(keys):
                pieces += [key, table.cell_texts(number, start, stop, self.cells)]
            pieces += [scalar(here + "}"), scalar("")]  # the last: what joins them, nothing
            rows = pc.binary_join_element_wise(*pieces)
            joined = textbytes.joined_bytes(rows)
            assert joined is not None and not rows.null_count
            text = joined.decode("ascii")
            self.add(text[1:] if start == 0 else text)  # the first row: no comma before
            self.slice_done()
        self.add("\n" + self.indent * level + "]")
        del self.markers[id(table)]
        return True

    def mapping(self, dct: Mapping[object, object], level: int) -> None:
        if not dct:
            self.add("{}")
            return
        self.enter(dct)
        inner = "\n" + self.indent * (level + 1)
        self.add("{")
        pairs = iter(dct.items())
        parts: Iterator[Mapping[object, object]] = (
            iter((dct,)) if len(dct) <= SLICE
            else iter(lambda: dict(islice(pairs, SLICE)), {}))
        for number, part in enumerate(parts):
            self.add("," + inner if number else inner)
            if not _has_container(set(map(type, part.values()))):
                self.add("".join(self.encoder("," + inner)(part, 0))[1:-1])
            else:
                for index, (key, item) in enumerate(part.items()):
                    name = self.string(key) if type(key) is str else self.key(key)
                    self.add(("," + inner + name if index else name) + ": ")
                    self.value(item, level + 1)
            self.slice_done()
        self.add("\n" + self.indent * level + "}")
        del self.markers[id(dct)]


def _listed(value: object) -> object:
    """json's `default` without the C encoder: a `JsonRows` as the list of rows it stands
    for; any other object refused as json refuses it."""
    if isinstance(value, JsonRows):
        return list(value)
    return json.JSONEncoder().default(value)


def json_text(value: object, indent: int = 2, ensure_ascii: bool = True,
              allow_nan: bool = True) -> str:
    """`json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, allow_nan=allow_nan)`."""
    if _MAKE_ENCODER is None:  # no C accelerator (another interpreter): dumps' own
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, allow_nan=allow_nan,
                          default=_listed)
    writer = _Writer(indent, ensure_ascii, allow_nan)
    writer.value(value, 0)
    return "".join(writer.out)


def echo_json(value: object, stream: IO[str] | None = None, indent: int = 2) -> None:
    """Write `json.dumps(value, indent=indent)` and a newline to `stream` (sys.stdout at the
    call) in pieces of about CHUNK characters, then flush: what `typer.echo(json.dumps(
    value, indent=2))` wrote, without the whole text as one string. On bwprof's guarded
    stdout a closed pipe drops the rest silently (bwprof.stdio); encoding stops there."""
    out = sys.stdout if stream is None else stream

    def spill(text: str) -> None:
        out.write(text)
        if getattr(out, "dropped", False):  # a GuardedStream whose reader went away
            raise _Stop

    if _MAKE_ENCODER is None:
        for text in json.JSONEncoder(indent=indent, default=_listed).iterencode(value):
            spill(text)
        out.write("\n")
        out.flush()
        return
    writer = _Writer(indent, True, True, spill)
    try:
        writer.value(value, 0)
        writer.add("\n")
        spill("".join(writer.out))
    except _Stop:
        return
    out.flush()
