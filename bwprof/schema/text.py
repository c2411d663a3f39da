"""Strings from a machine or a file made safe to print, to write to a UTF-8 CSV or to put in
JSON: a folder name that is not UTF-8, a lone surrogate, a line break inside a cell would
otherwise raise in an encoder or break a one-line message.
"""

from __future__ import annotations

import os
import re

_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """`text` as it can be written anywhere (a UTF-8 CSV, JSON, a terminal): the bytes of a
    name that is not UTF-8 (a path from the command line holds them as surrogate escapes,
    `os.fsdecode`) as `\\xff`, any other lone surrogate (JSON's `"\\udc80"`) as `\\udc80`.
    Text without them comes back as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte stands for
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def decoded(data: bytes) -> str:
    """Bytes from the machine (/proc/cpuinfo, a sysfs file) as text: those that are not
    UTF-8 kept as `\\xff` escapes, never an error that ends a run over a name."""
    return data.decode("utf-8", "backslashreplace")


def one_line(text: str) -> str:
    """`printable(text)` with control characters and line breaks as `\\x0a` escapes, for a
    message or label that must stay one line whatever a path or a cell holds."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", printable(text))


def shown(path: str | os.PathLike[str]) -> str:
    """A path as messages name it: one line, printable."""
    return one_line(os.fspath(path))


def printable_tree(value: object) -> object:
    """Parsed JSON with every string (keys too) `printable`; depth is bounded by the reader."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): printable_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_tree(v) for v in value]
    return value


def json_ready(value: object) -> object:
    """JSON output made strict and encodable: strings (keys too) `printable`, a float that
    is not finite null (`json.dumps` would write NaN, which JSON readers refuse). The one
    sanitiser, `schema.meta.to_json`, with `printable` as its text rule."""
    from bwprof.schema.meta import to_json  # meta reads files through this module

    return to_json(value, printable)
