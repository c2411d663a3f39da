"""Byte units and their spelling, shared by every layer (plan, measurement, reports).

Binary units (KiB, MiB, GiB) size buffers; rates are decimal (GB/s = 10^9 bytes per second),
so the two never mix in one number.
"""

from __future__ import annotations

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


def format_bytes(n: int) -> str:
    """'256 MiB', '1.5 GiB', '512 B': the size as a person reads it."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def clock(seconds: float) -> str:
    """'1:05', '12:00', '1:02:03': a duration as a clock shows it (whole seconds)."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return (f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours
            else f"{rest // 60}:{rest % 60:02d}")
