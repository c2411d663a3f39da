"""The process entry point (`bwprof` console script, `python -m bwprof`): signal handlers and
standard-stream guards go in before anything heavy is imported, so a stop signal at any
moment — while typer, rich, pandas and numba load, while options are checked, during the
measurement or while the final table prints — is one line and exit 130, never a traceback
and never a silent exit. Only the standard library and bwprof's small modules load here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

from bwprof import interrupts
from bwprof.errors import EXIT_INTERRUPTED

_prepared = False


def interrupted_message(detail: str = "") -> str:
    """'interrupted', naming the signal where it was not Ctrl-C: 'interrupted (SIGHUP)'."""
    name = interrupts.received()
    head = "interrupted" if name in (None, "SIGINT") else f"interrupted ({name})"
    return head + detail


def say(line: str) -> None:
    """One line on stderr, which may be gone (never raises)."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def prepare_process() -> None:
    """Stop signals raise KeyboardInterrupt; closed descriptors are reopened on /dev/null and
    the standard streams never raise. Once per process."""
    global _prepared
    if _prepared:
        return
    interrupts.install()
    _prepared = True
    from bwprof import stdio

    stdio.install()


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    """A stop signal once the command is over (the interpreter is shutting down): say so
    and leave now, with no Python code left to raise into."""
    name = signal.Signals(signum).name
    line = "interrupted" if name == "SIGINT" else f"interrupted ({name})"
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode())
    os._exit(EXIT_INTERRUPTED)


def _exit_at_once_on_signals() -> None:
    for signum in interrupts.STOP_SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, _exit_at_once)


def _interrupted() -> int:
    try:
        _exit_at_once_on_signals()  # a second signal while this line is said
        from bwprof import stdio

        stdio.abandon_stdout()
        say(interrupted_message())
    except KeyboardInterrupt:
        pass
    return EXIT_INTERRUPTED


def main() -> int:
    """Run `bwprof` with the arguments of this process; the exit code."""
    try:
        prepare_process()
        from bwprof.cli import main as cli_main

        code = cli_main()
    except KeyboardInterrupt:
        return _interrupted()
    try:
        _exit_at_once_on_signals()
        from bwprof import stdio

        stdio.flush()
    except KeyboardInterrupt:
        return _interrupted()
    return code
