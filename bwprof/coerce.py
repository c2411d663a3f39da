"""Numbers out of untyped values — NVML readings kept as `dict[str, object]`, CSV cells read
back, JSON, the user's option text — checked rather than assumed, so a value of the wrong
kind fails loudly where it is read instead of being hidden from the type checker.

What the user gave is shown shortened in messages: a 5000-digit `--threads` must be a
one-line refusal, not a 5000-character line (nor the ValueError Python raises turning an
int of more than 4300 digits into text).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import SupportsFloat

from bwprof.errors import BwprofError

SHOWN_CHARACTERS = 40
NAME_CHARACTERS = 80
"""The most characters of a name (a host, a CPU or GPU model) a plot's title or label or the
page shows, `shorten`ed: a 100,000-character CPU name kept matplotlib's text layout busy until
the process was killed. The files (CSV, JSON) keep it whole."""


def shorten(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """`value` as text of at most about `limit` characters: the head, the tail and the full
    length where it is longer."""
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:  # an int too long for str()
        bits = value.bit_length() if isinstance(value, int) else 0
        return f"a number of about {int(bits * math.log10(2)) + 1} digits"
    if len(text) <= limit:
        return text
    return f"{text[:limit - 12]}...{text[-6:]} ({len(text)} characters)"


def finite_number(value: object, what: str) -> float:
    """A real, finite number the user gave (an option, an argument of `bwprof.run`), or a
    one-line BwprofError naming `what`: NaN and infinity would turn a bounded wait into a
    hang, and JSON (system.json) cannot hold them."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BwprofError(f"{what} must be a number, got {shorten(repr(value))}")
    try:
        result = float(value)
    except OverflowError:  # an int beyond any float
        result = math.inf
    if not math.isfinite(result):
        raise BwprofError(f"{what} must be a finite number, got {shorten(value)}")
    return result


def comma_list(value: object, what: str, example: str) -> str | None:
    """None, a string, or an iterable of strings (the API's `cases=["ddr_triad"]`) as one
    comma-separated string; anything else (`cases=123`, bytes, a dict) a one-line
    BwprofError naming `what`, never the TypeError of a join."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Iterable) and not isinstance(value, (bytes, bytearray, Mapping)):
        items = list(value)
        if all(isinstance(item, str) for item in items):
            return ",".join(items)
    raise BwprofError(f"{what} expects a string such as {example!r} or a list of strings, got "
                      f"{shorten(repr(value))}")


def number(value: object) -> float:
    """A real number (int, float, or numeric text such as a CSV cell); TypeError otherwise."""
    if isinstance(value, bool):
        raise TypeError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value)
    if isinstance(value, SupportsFloat):  # NumPy's scalars
        return float(value)
    raise TypeError(f"expected a number, got {type(value).__name__} {value!r}")


def optional_number(value: object) -> float | None:
    """`number`, with None (and NaN, a missing CSV cell) as None."""
    if value is None:
        return None
    result = number(value)
    return None if math.isnan(result) else result


def optional_integer(value: object) -> int | None:
    """`integer`, with None (and NaN, a missing CSV cell) as None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return integer(value)


_WHOLE_TEXT = re.compile(r"\s*[-+]?\d{1,30}\s*")
"""Text of a whole number (a CSV cell), read as an int as written: through a float it would
come back rounded past 2^53 (2^62 + 8 bytes as 2^62)."""


def integer(value: object) -> int:
    """A whole number (an int, NumPy's integers, or a float or text holding one); TypeError
    or ValueError otherwise. Integers and whole-number text stay exact at any size (a
    pandas Int64 cell is a NumPy int64, not an int)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and _WHOLE_TEXT.fullmatch(value):
        return int(value)
    result = number(value)
    if not result.is_integer():
        raise ValueError(f"expected a whole number, got {value!r}")
    return int(result)
