"""Numbers out of untyped values — NVML readings kept as `dict[str, object]`, CSV cells read
back, JSON — checked rather than assumed, so a value of the wrong kind fails loudly where it
is read instead of being hidden from the type checker."""

from __future__ import annotations

import math
from typing import SupportsFloat


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


def integer(value: object) -> int:
    """A whole number (an int, or a float or text holding one); TypeError or ValueError
    otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    result = number(value)
    if not result.is_integer():
        raise ValueError(f"expected a whole number, got {value!r}")
    return int(result)
