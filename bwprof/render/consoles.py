"""Every rich Console bwprof makes — stdout tables, stderr progress, monitor's live view, the
help screen — sized by one function, so no COLUMNS or LINES (0, 1, -5, 'abc', 10**12) can
break a layout (rich asserts below about 4 columns) or bloat it (10**12 spaces a line).
"""

from __future__ import annotations

import os
import re
import sys
from typing import IO

from rich.console import Console

MIN_COLUMNS, MAX_COLUMNS = 60, 1000
"""Narrower than 60 the help screen cuts option names and no table of bwprof's reads; wider
than 1000 no screen is."""
MIN_LINES, MAX_LINES = 10, 1000
DEFAULT_COLUMNS, DEFAULT_LINES = 80, 25
"""What a terminal that cannot say its size, or a pipe, is taken to have."""
PIPED_COLUMNS = 160
"""Width of tables written to a file or pipe (a log, a capacity review's notes): wide enough
that a row does not wrap, as it would at rich's 80-column default."""


def _environment_number(name: str) -> int | None:
    """COLUMNS or LINES where it holds a plain whole number (not thousands of digits)."""
    match = re.fullmatch(r"\s*(\d{1,9})\s*", os.environ.get(name, ""))
    return int(match.group(1)) if match else None


def _is_terminal(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and bool(stream.isatty())
    except (OSError, ValueError):
        return False


def _terminal_size(stream: IO[str] | None) -> os.terminal_size | None:
    try:
        return os.get_terminal_size(stream.fileno()) if stream is not None else None
    except (OSError, ValueError, AttributeError):
        return None


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def columns(stream: IO[str] | None, piped: int = DEFAULT_COLUMNS,
            terminal: bool | None = None) -> int:
    """The width to lay out to on `stream`: COLUMNS where it is a number, else the
    terminal's width, else `piped` where the stream is a file or pipe (or `terminal` is
    False: a fleet rank's pseudo-terminal); always within MIN_COLUMNS..MAX_COLUMNS."""
    wanted = _environment_number("COLUMNS")
    is_terminal = _is_terminal(stream) if terminal is None else terminal
    if wanted is None and is_terminal:
        size = _terminal_size(stream)
        wanted = size.columns if size is not None and size.columns > 0 else DEFAULT_COLUMNS
    return _clamp(piped if wanted is None else wanted, MIN_COLUMNS, MAX_COLUMNS)


def lines(stream: IO[str] | None) -> int:
    """The height to lay out to (LINES, else the terminal's), within MIN_LINES..MAX_LINES."""
    wanted = _environment_number("LINES")
    if wanted is None and _is_terminal(stream):
        size = _terminal_size(stream)
        wanted = size.lines if size is not None and size.lines > 0 else None
    return _clamp(DEFAULT_LINES if wanted is None else wanted, MIN_LINES, MAX_LINES)


def console(*, stderr: bool = False, plain: bool = False,
            piped_columns: int = DEFAULT_COLUMNS) -> Console:
    """A Console on stdout (or stderr) of a sane size. `plain`: no colour codes and laid
    out as for a pipe (a fleet rank writes to mpirun's pseudo-terminal, which is a log)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, force_terminal=False if plain else None,
                   width=columns(stream, piped_columns, terminal=False if plain else None),
                   height=lines(stream))


def tame_terminal_sizes() -> None:
    """Consoles bwprof does not make read COLUMNS and LINES themselves: typer's help screen
    (rich asserts at COLUMNS=1..3, and int() of 5000 digits raises) and TERMINAL_WIDTH
    (read with int() when typer's help module loads: 'abc' would crash it). Each is put in
    the sane range here, or removed where it is no number; typer's help gets our width."""
    for name, low, high in (("COLUMNS", MIN_COLUMNS, MAX_COLUMNS),
                            ("LINES", MIN_LINES, MAX_LINES),
                            ("TERMINAL_WIDTH", MIN_COLUMNS, MAX_COLUMNS)):
        if name not in os.environ:
            continue
        value = _environment_number(name)
        if value is None:
            del os.environ[name]
        else:
            os.environ[name] = str(_clamp(value, low, high))
    try:
        from typer import rich_utils
    except ImportError:  # a typer without rich help
        return
    asked = _environment_number("TERMINAL_WIDTH")
    rich_utils.MAX_WIDTH = columns(sys.stdout) if asked is None else asked
